//! Structured tensors get tiny programs: measured as how much the archive grows when the tensor
//! is added to a file of ordinary weights.

mod support;
use support::st::*;

/// The tensors of the committed real checkpoint (Silero VAD), plus a synthetic bf16 layer.
fn base_tensors() -> Vec<Tensor> {
    let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/silero_vad_16k.safetensors")).unwrap();
    let mut out: Vec<Tensor> = brevis::internals::tensor::safetensors::layout(&f)
        .unwrap()
        .into_iter()
        .map(|s| tensor(&s.name, s.dtype.name(), &s.shape, f[s.start as usize..s.end as usize].to_vec()))
        .collect();
    let mut rng = Rng(11);
    let w: Vec<u8> =
        (0..64 * 256).flat_map(|_| half::bf16::from_f64(rng.normal(0.02)).to_bits().to_le_bytes()).collect();
    out.push(tensor("layer.0.weight", "BF16", &[64, 256], w));
    out
}

/// Archive size of the base file plus `extra`, minus that of the base file.
fn growth(extra: Tensor) -> i64 {
    let opts = brevis::Options::default();
    let base = brevis::compress(&file(&base_tensors(), None), &opts).unwrap();
    let mut with = base_tensors();
    with.push(extra);
    let f = file(&with, None);
    let a = brevis::compress(&f, &opts).unwrap();
    assert_eq!(brevis::decompress(&a).unwrap(), f);
    a.len() as i64 - base.len() as i64
}

#[test]
fn arange_of_4096_int64_is_tiny() {
    let data: Vec<u8> = (0..4096i64).flat_map(|i| i.to_le_bytes()).collect();
    let g = growth(tensor("position_ids", "I64", &[1, 4096], data));
    // The program and index entry take about 5 bytes; the rest is the tensor's entry in the
    // safetensors JSON header (its name, dtype and shape; the offsets are elided, being implied).
    assert!(g < 32, "arange grew the archive by {g} bytes");
}

#[test]
fn duplicate_tensor_costs_under_64_bytes() {
    let dup = base_tensors()[0].clone();
    let g = growth(Tensor { name: "lm_head.weight".into(), ..dup });
    assert!(g < 64, "a duplicate grew the archive by {g} bytes");
}

#[test]
fn large_duplicate_costs_under_64_bytes() {
    // Several chunks: the copy must not pay per chunk.
    let mut rng = Rng(5);
    let big: Vec<u8> = (0..3 << 20).map(|_| rng.next() as u8).collect();
    let opts = brevis::Options::default();
    let one = file(&[tensor("a", "U8", &[3 << 20], big.clone())], None);
    let two = file(&[tensor("a", "U8", &[3 << 20], big.clone()), tensor("b", "U8", &[3 << 20], big)], None);
    let g = brevis::compress(&two, &opts).unwrap().len() as i64 - brevis::compress(&one, &opts).unwrap().len() as i64;
    assert!(g < 64, "a 3 MiB duplicate grew the archive by {g} bytes");
}

#[test]
fn constant_tensor_costs_under_32_bytes() {
    let data: Vec<u8> = (0..4096).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    let g = growth(tensor("norm.weight", "F32", &[4096], data));
    assert!(g < 32, "a constant tensor grew the archive by {g} bytes");
}

#[test]
fn bf16_representable_fp32_costs_at_most_half() {
    let mut rng = Rng(3);
    let n = 64 * 1024;
    let data: Vec<u8> = (0..n).flat_map(|_| (half::bf16::from_f64(rng.normal(0.05)).to_f32()).to_le_bytes()).collect();
    let g = growth(tensor("proj.weight", "F32", &[256, 256], data));
    let limit = (n * 4 / 2 + 64) as i64;
    assert!(g <= limit, "bf16-representable fp32 grew the archive by {g} bytes (limit {limit})");
}
