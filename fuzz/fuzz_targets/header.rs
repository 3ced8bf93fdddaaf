//! The tolerant safetensors parser on arbitrary bytes: never panics, and what it accepts is a set
//! of in-range, non-overlapping spans.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(spans) = brevis::internals::tensor::safetensors::layout(data) {
        let mut end = 0;
        for s in &spans {
            assert!(s.start <= s.end && s.end <= data.len() as u64 && s.start >= end);
            end = s.end;
        }
    }
});
