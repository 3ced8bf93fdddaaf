//! Inputs that once produced archives that did not decode.

mod support;
use support::st::*;

fn round_trip(f: &[u8]) {
    let a = brevis::compress(f, &brevis::Options::default()).unwrap();
    assert!(brevis::decompress(&a).unwrap() == f);
}

/// A JSON header larger than the residue limit for gaps (many tensors) stays in the residue.
#[test]
fn header_over_64_kib() {
    let tensors: Vec<Tensor> = (0..3000)
        .map(|i| tensor(&format!("model.layers.{i}.a_long_tensor_name.weight"), "F32", &[4], vec![i as u8; 16]))
        .collect();
    let f = file(&tensors, None);
    assert!(data_start(&f) > 100_000);
    round_trip(&f);
}

/// Entries of empty tensors take 3 index bytes each.
#[test]
fn many_empty_tensors() {
    let tensors: Vec<Tensor> = (0..10).map(|i| tensor(&format!("e{i}"), "F16", &[0], vec![])).collect();
    round_trip(&file(&tensors, None));
}

/// A big gap between the header and the first tensor, and big trailing data.
#[test]
fn large_gaps_are_byte_streams() {
    let mut rng = Rng(4);
    let entries = [entry("a", "U8", &[100], (70_000, 70_100))];
    let mut data = rng.bytes(70_100);
    data.extend_from_slice(&rng.bytes(100_000));
    round_trip(&file_with_entries(&entries, None, &data));
}
