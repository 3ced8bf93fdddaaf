//! Arbitrary bytes as an archive: decoding (the whole file, a few tensors, the GGUF view, reads of
//! byte ranges) must return an error or the original, never panic, and never allocate beyond the
//! memory limit.
//! An archive made against a reference is also decoded with the silero fixture as its reference
//! (the golden `derive` archive's master, so its derivations and their damage are reached), and
//! with the K-quant fixture's BF16 master (the golden `kquants` archive's: its K-quant
//! derivations, and its header coded against the master's, residue model 3), and with the IQ4
//! fixture's (the golden `iq4` archive's: `derive(iq4_nl)`, `derive(iq4_xs)`).
#![no_main]
use libfuzzer_sys::fuzz_target;

static REFERENCE: &[u8] = include_bytes!("../../tests/fixtures/silero_vad_16k.safetensors");
static KMASTER: &[u8] = include_bytes!("../../tests/fixtures/smollm2_kquants_master.gguf");
static IQ4MASTER: &[u8] = include_bytes!("../../tests/fixtures/smollm2_iq4_master.gguf");

fuzz_target!(|data: &[u8]| {
    let opts = brevis::DecodeOptions::default().with_memory_limit(64 << 20).with_threads(1).with_verify(true);
    let _ = brevis::decompress_with(data, &opts);
    let _ = brevis::decompress_with_ref(data, REFERENCE, &opts);
    let _ = brevis::decompress_with_ref(data, KMASTER, &opts);
    let _ = brevis::decompress_with_ref(data, IQ4MASTER, &opts);
    if let Ok(mut a) = brevis::Archive::open_with_limit(data, 64 << 20) {
        a.set_memory_limit(64 << 20);
        for i in 0..a.len().min(8) {
            let _ = a.decode_tensor(i);
        }
        let _ = a.gguf();
        // Ranges across pieces, cut inside chunks, past the end.
        let size = a.original_size();
        if size <= 64 << 20 {
            for (at, len) in [(0, size), (size / 3, size / 2 + 1), (size.saturating_sub(5), 9), (size / 7, 1)] {
                let mut buf = vec![0u8; len.min(64 << 20) as usize];
                let _ = a.read_at(at, &mut buf);
            }
        }
    }
});
