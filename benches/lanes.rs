//! The lanes coder against rANS and Huffman on a realistic source: bf16 weights drawn from a
//! normal distribution (sd 0.02, round-to-nearest-even from f32), symbol `(w >> 4) & 0x7FF`
//! (8 exponent bits and the top 3 mantissa bits, the usual `fields(e8,m7,k3)` head), N = 2^19.
//! Prints the block size of each coder first. The encoder runs at each level (`lanes_encode/*`,
//! `lanes_encode_prev/*`, `lanes_encoded_len/*`, `lanes_back/encode_back384/*`): its state
//! machine has AVX-512 and AVX2 versions, and a scalar one.
//!
//! Group `lanes_back`: a matrix of bf16 weights with rows of `W = 384` (an embedding), each
//! column with its own scale (log-uniform over 2^-3..2^3 of sd 0.02, as outlier dimensions make)
//! and each row too (2^-0.5..2^0.5), head symbols as above: the symbol one row above
//! (`Ctx::Back(384)`) predicts the exponent. Against it, the same source with rows of 32, where
//! the row above is the previous symbol of the lane (`Ctx::Prev`), for the cost of classes from a
//! ring of `d` bytes against classes from registers.

use brevis::internals::coder::{huffman, lanes, rans};
use brevis::internals::simd;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

const N: usize = 1 << 19;

/// `lanes_decode` (the order-0 block `lblock` of `syms`), `lanes_decode_split` (the same symbols
/// as a split block: two streams, `lanes::SPLIT_MIN`) and `lanes_decode_runs` (the `prev`
/// block `lprev`, whose symbols come back in run order, moved 64 steps at a time, as `lanes(adj)`
/// does) at `isa`, each checked before it is timed.
fn decodes(
    g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    isa: simd::Isa,
    lblock: &[u8],
    lprev: &[u8],
    syms: &[u16],
) {
    let mut out = vec![0u16; syms.len()];
    lanes::decode_at(isa, lblock, &mut out).unwrap();
    assert!(out == syms);
    g.bench_function(BenchmarkId::new("lanes_decode", isa.name()), |b| {
        b.iter(|| lanes::decode_at(isa, lblock, &mut out).unwrap())
    });
    // The same symbols as a split block (two streams decoded together at the AVX-512 level).
    let mut split = Vec::new();
    lanes::encode_block(isa, syms, lanes::Ctx::None, true, &mut split).unwrap();
    lanes::decode_block(isa, &split, lanes::Ctx::None, true, &mut out).unwrap();
    assert!(out == syms);
    g.bench_function(BenchmarkId::new("lanes_decode_split", isa.name()), |b| {
        b.iter(|| lanes::decode_block(isa, &split, lanes::Ctx::None, true, &mut out).unwrap())
    });
    let mut want = vec![0u16; syms.len()];
    simd::from_runs(syms, &mut want);
    lanes::decode_runs_at(isa, lprev, &mut out).unwrap();
    assert!(out == want);
    g.bench_function(BenchmarkId::new("lanes_decode_runs", isa.name()), |b| {
        b.iter(|| lanes::decode_runs_at(isa, lprev, &mut out).unwrap())
    });
}

/// Standard normal deviates (Box-Muller over a xorshift generator).
fn normals(n: usize, mut s: u64) -> Vec<f32> {
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let (u, v) = (next(), next());
        let r = (-2.0 * u.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * v;
        out.push((r * t.cos()) as f32);
        out.push((r * t.sin()) as f32);
    }
    out.truncate(n);
    out
}

fn symbols() -> Vec<u16> {
    normals(N, 0x2545_f491_4f6c_dd1d).iter().map(|&z| (half::bf16::from_f32(0.02 * z).to_bits() >> 4) & 0x7FF).collect()
}

/// Head symbols of an `N / w` by `w` matrix with column and row scales (see the module docs).
fn rows(w: usize) -> Vec<u16> {
    let z = normals(N, 0x9e37_79b9_7f4a_7c15);
    let mut s = 0x1234_5678_9abc_def1u64;
    let mut uni = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f32 / (1u64 << 53) as f32
    };
    let col: Vec<f32> = (0..w).map(|_| 0.02 * 2f32.powf(6.0 * uni() - 3.0)).collect();
    let row: Vec<f32> = (0..N / w + 1).map(|_| 2f32.powf(uni() - 0.5)).collect();
    z.iter()
        .enumerate()
        .map(|(i, &z)| (half::bf16::from_f32(z * col[i % w] * row[i / w]).to_bits() >> 4) & 0x7FF)
        .collect()
}

fn bench_back(c: &mut Criterion) {
    const W: usize = 384;
    let syms = rows(W);
    let narrow = rows(32);
    let lanes_block = |s: &[u16], ctx| {
        let mut b = Vec::new();
        lanes::encode(s, ctx, &mut b).unwrap();
        b
    };
    let lnone = lanes_block(&syms, lanes::Ctx::None);
    let lback = lanes_block(&syms, lanes::Ctx::Back(W as u32));
    let lprev = lanes_block(&narrow, lanes::Ctx::Prev);
    let lnone32 = lanes_block(&narrow, lanes::Ctx::None);
    let mut r0 = Vec::new();
    rans::encode(&syms, rans::Ctx::None, &mut r0);
    let mut rb = Vec::new();
    rans::encode(&syms, rans::Ctx::Back(W), &mut rb);
    eprintln!("rows of {W}, {N} symbols (bytes; vs rans back {W}):");
    for (name, s) in [
        ("lanes none", lnone.len()),
        ("lanes back384", lback.len()),
        ("rans none", r0.len()),
        ("rans back384", rb.len()),
    ] {
        eprintln!("  {name:14} {s:8}  {:+.3}%", (s as f64 / rb.len() as f64 - 1.0) * 100.0);
    }
    eprintln!("rows of 32: lanes none {} prev {}", lnone32.len(), lprev.len());

    let mut g = c.benchmark_group("lanes_back");
    g.sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(N as u64));
    for isa in simd::available() {
        let mut out = vec![0u16; N];
        lanes::decode_ctx_at(isa, &lback, lanes::Ctx::Back(W as u32), &mut out).unwrap();
        assert!(out == syms);
        lanes::decode_at(isa, &lprev, &mut out).unwrap();
        assert!(out == narrow);
        g.bench_function(BenchmarkId::new("back384", isa.name()), |b| {
            b.iter(|| lanes::decode_ctx_at(isa, &lback, lanes::Ctx::Back(W as u32), &mut out).unwrap())
        });
        g.bench_function(BenchmarkId::new("none_rows384", isa.name()), |b| {
            b.iter(|| lanes::decode_at(isa, &lnone, &mut out).unwrap())
        });
        g.bench_function(BenchmarkId::new("prev_rows32", isa.name()), |b| {
            b.iter(|| lanes::decode_at(isa, &lprev, &mut out).unwrap())
        });
    }
    for isa in simd::available() {
        let mut out = Vec::new();
        lanes::encode_at(isa, &syms, lanes::Ctx::Back(W as u32), &mut out).unwrap();
        assert!(out == lback, "{isa:?}");
        g.bench_function(BenchmarkId::new("encode_back384", isa.name()), |b| {
            b.iter(|| {
                out.clear();
                lanes::encode_at(isa, &syms, lanes::Ctx::Back(W as u32), &mut out).unwrap();
            })
        });
    }
    g.bench_function("rans_decode_back384", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(N);
            rans::decode(&rb, N, rans::Ctx::Back(W), &mut out).unwrap();
            out
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let syms = symbols();
    let mut sizes: Vec<(String, usize)> = Vec::new();
    let mut lblock = Vec::new();
    lanes::encode(&syms, lanes::Ctx::None, &mut lblock).unwrap();
    sizes.push(("lanes none".into(), lblock.len()));
    let mut lprev = Vec::new();
    lanes::encode(&syms, lanes::Ctx::Prev, &mut lprev).unwrap();
    sizes.push(("lanes prev".into(), lprev.len()));
    let mut r0 = Vec::new();
    rans::encode(&syms, rans::Ctx::None, &mut r0);
    sizes.push(("rans none".into(), r0.len()));
    let mut r1 = Vec::new();
    rans::encode(&syms, rans::Ctx::Back(1), &mut r1);
    sizes.push(("rans back1".into(), r1.len()));
    let mut hb = Vec::new();
    huffman::encode(&syms, &mut hb);
    sizes.push(("huffman".into(), hb.len()));
    eprintln!("sizes of {N} symbols (bytes; vs rans none):");
    for (name, s) in &sizes {
        eprintln!("  {name:12} {s:8}  {:+.3}%", (*s as f64 / r0.len() as f64 - 1.0) * 100.0);
    }

    let mut g = c.benchmark_group("lanes");
    g.sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(N as u64));
    for isa in simd::available() {
        decodes(&mut g, isa, &lblock, &lprev, &syms);
    }
    // The encoder at each level (AVX-512, AVX2 and scalar state machines): the whole `encode`,
    // planning included, and `encoded_len` (the same without storing words).
    for isa in simd::available() {
        for (name, ctx, block) in
            [("lanes_encode", lanes::Ctx::None, &lblock), ("lanes_encode_prev", lanes::Ctx::Prev, &lprev)]
        {
            let mut out = Vec::new();
            lanes::encode_at(isa, &syms, ctx, &mut out).unwrap();
            assert!(&out == block, "{isa:?}");
            g.bench_function(BenchmarkId::new(name, isa.name()), |b| {
                b.iter(|| {
                    out.clear();
                    lanes::encode_at(isa, &syms, ctx, &mut out).unwrap();
                })
            });
        }
        g.bench_function(BenchmarkId::new("lanes_encoded_len", isa.name()), |b| {
            b.iter(|| lanes::encoded_len_at(isa, &syms, lanes::Ctx::None).unwrap())
        });
    }
    for (name, ctx, block) in [("none", rans::Ctx::None, &r0), ("back1", rans::Ctx::Back(1), &r1)] {
        g.bench_function(BenchmarkId::new("rans_decode", name), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(N);
                rans::decode(block, N, ctx, &mut out).unwrap();
                out
            })
        });
    }
    g.bench_function("huffman_decode", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(N);
            huffman::decode(&hb, N, &mut out).unwrap();
            out
        })
    });
    g.finish();

    // The same decodes as bytes of u16 output per second.
    let mut g = c.benchmark_group("lanes_bytes");
    g.sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(300));
    g.throughput(Throughput::Bytes(2 * N as u64));
    for isa in simd::available() {
        decodes(&mut g, isa, &lblock, &lprev, &syms);
    }
    g.finish();
}

criterion_group!(benches, bench, bench_back);
criterion_main!(benches);
