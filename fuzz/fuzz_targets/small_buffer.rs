//! Decoding a tensor or a file into a buffer of the wrong size is an error, never an overrun.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let archive = brevis::compress(&data[1..], &brevis::Options::default().with_threads(1)).unwrap();
    let a = brevis::Archive::open(&archive).unwrap();
    let short = (data[0] as usize).min(data.len().saturating_sub(2));
    let mut buf = vec![0u8; short];
    let opts = brevis::DecodeOptions::default().with_threads(1);
    assert!(a.decompress_into(&mut buf, &opts).is_err());
    for i in 0..a.len() {
        let n = a.info(i).unwrap().nbytes as usize;
        let mut small = vec![0u8; n.saturating_sub(1 + data[0] as usize % 7)];
        if small.len() != n {
            assert!(a.decode_tensor_into(i, &mut small).is_err());
        }
    }
});
