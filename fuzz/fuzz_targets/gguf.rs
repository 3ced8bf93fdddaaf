//! The tolerant GGUF parser on arbitrary bytes: never panics; what it accepts is a set of
//! in-range, non-overlapping spans after the data start; and any prefix of the input gives the
//! same answer as the whole, or asks for more. A file it accepts (the seeds' descendants) is
//! compressed and must decompress to the same bytes, and the archive's GGUF view
//! (`Archive::gguf`) must give back its header bytes and every tensor at its offset. Any input
//! is also a residue for the residue models (round trip) and a stored GGUF residue (no panic).
#![no_main]
use brevis::internals::tensor::gguf::{layout, layout_from_prefix, Stop};
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
        let opts = brevis::Options::default().with_threads(1).with_chunk_bytes(64 + data.len() % 200);
        let archive = brevis::compress(data, &opts).expect("compress never fails on a file in memory");
        assert_eq!(brevis::decompress(&archive).expect("own archive decodes"), data);
        // A loader's view of the archive: the header bytes and each tensor at its place.
        let a = brevis::Archive::open(&archive).expect("own archive opens");
        let g = a.gguf().expect("own archive reads").expect("a GGUF original");
        assert_eq!(g.header, &data[..l.data_start as usize]);
        let offsets: Vec<u64> = g.tensors.iter().flatten().map(|t| l.data_start + t.data_offset).collect();
        assert_eq!(offsets, l.spans.iter().map(|s| s.start).collect::<Vec<_>>());
    }
    // The GGUF residue model: what a file splits into joins back to it; any bytes read as a
    // stored form give an error or at most the limit.
    let model = brevis::internals::container::header_model::GGUF_STRINGS;
    let (m, stored) = brevis::internals::container::header_model::encode(data);
    assert_eq!(brevis::internals::container::header_model::decode(m, &stored, data.len() as u64).unwrap(), data);
    if let Ok(v) = brevis::internals::container::header_model::decode(model, data, 1 << 16) {
        assert!(v.len() <= 1 << 16);
    }
    assert_ne!(whole, Err(Stop::Short), "the whole file cannot be short");
    let cut = data.len() / 2;
    match layout_from_prefix(&data[..cut], data.len() as u64) {
        Err(Stop::Short) => {}
        other => assert_eq!(other, whole),
    }
});
