//! The tolerant GGUF parser on arbitrary bytes: never panics; what it accepts is a set of
//! in-range, non-overlapping spans after the data start; and any prefix of the input gives the
//! same answer as the whole, or asks for more. A file it accepts (the seeds' descendants) is
//! compressed and must decompress to the same bytes.
#![no_main]
use brevis::tensor::gguf::{layout, layout_from_prefix, Stop};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = layout_from_prefix(data, data.len() as u64);
    if let Ok(l) = &whole {
        let mut end = l.data_start;
        for s in &l.spans {
            assert!(s.start >= end && s.start <= s.end && s.end <= data.len() as u64);
            end = s.end;
        }
        assert_eq!(layout(data).unwrap(), l.spans);
        let opts = brevis::Options { threads: 1, chunk_bytes: 64 + data.len() % 200, ..Default::default() };
        let archive = brevis::compress(data, &opts).expect("compress never fails on a file in memory");
        assert_eq!(brevis::decompress(&archive).expect("own archive decodes"), data);
    }
    assert_ne!(whole, Err(Stop::Short), "the whole file cannot be short");
    let cut = data.len() / 2;
    match layout_from_prefix(&data[..cut], data.len() as u64) {
        Err(Stop::Short) => {}
        other => assert_eq!(other, whole),
    }
});
