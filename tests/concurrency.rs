//! The library is thread-safe: `compress`, `decompress` and a shared `Archive` are used from many
//! threads at once, each with its own options (no global state), and every result is identical.

mod support;
use support::st::*;

#[test]
fn many_threads_at_once() {
    let mut rng = Rng(8);
    let tensors: Vec<Tensor> = (0..6)
        .map(|i| {
            let d: Vec<u8> =
                (0..20_000).flat_map(|_| half::bf16::from_f64(rng.normal(0.02)).to_bits().to_le_bytes()).collect();
            tensor(&format!("t{i}"), "BF16", &[100, 200], d)
        })
        .collect();
    let f = file(&tensors, None);
    let reference = brevis::compress(&f, &brevis::Options::default().with_threads(1)).unwrap();
    let shared = brevis::Archive::open(&reference).unwrap();
    std::thread::scope(|s| {
        for k in 0..8 {
            let (f, reference, shared) = (&f, &reference, &shared);
            s.spawn(move || {
                let opts = brevis::Options::default().with_threads(1 + k % 3).with_chunk_bytes(1 << 20);
                let a = brevis::compress(f, &opts).unwrap();
                assert_eq!(&a, reference, "thread {k}: archive differs");
                assert!(brevis::decompress(&a).unwrap() == *f);
                for i in 0..shared.len() {
                    let t = shared.info(i).unwrap();
                    let start = brevis::internals::index(shared).tensors[i].offset as usize;
                    assert_eq!(shared.decode_tensor(i).unwrap(), f[start..start + t.nbytes as usize]);
                }
            });
        }
    });
}
