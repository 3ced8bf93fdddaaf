//! Entropy coders and bit packing: rANS (one table, and contexts from the previous symbol or the
//! one a row above, serial or in four runs),
//! canonical Huffman, and raw unpacking, on a skewed synthetic source like a bf16 exponent field;
//! and the coders of a pruned tensor's zero mask (`lanes`, `rans` without a context, in four
//! runs and with the popcount context, Huffman) on a mask whose rows keep different shares.

use brevis::internals::coder::{huffman, lanes, pack, packed_len, rans};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

const N: usize = 1 << 18;
const ROW: usize = 384;

/// A skewed 10-bit source whose value depends on the value one row above (like exponents).
fn symbols() -> Vec<u16> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut out: Vec<u16> = Vec::with_capacity(N);
    for i in 0..N {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let above = if i >= ROW { out[i - ROW] as u64 } else { 480 };
        let step = (s % 16).trailing_zeros() as u64; // geometric: mostly 0
        let v = if s >> 60 < 8 { above.saturating_sub(step) } else { 470 + (s >> 40) % 24 };
        out.push(v.min(1023) as u16);
    }
    out
}

/// The zero mask of a pruned matrix as `sparse(8)` writes it (a byte of eight flags per eight
/// words), rows of 384 words keeping between 5% and 45% of their weights.
fn mask() -> Vec<u16> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut keep = 0u64;
    (0..N)
        .map(|i| {
            if i % (ROW / 8) == 0 {
                keep = 5 + next() % 41;
            }
            (0..8).fold(0u16, |m, b| m | ((next() % 100 < keep) as u16) << b)
        })
        .collect()
}

/// Decoding a pruned mask with each coder the search offers for it, per mask byte.
fn masks(c: &mut Criterion) {
    let m = mask();
    let mut g = c.benchmark_group("mask");
    g.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(300));
    g.throughput(Throughput::Elements(N as u64));
    let mut block = Vec::new();
    lanes::encode(&m, lanes::Ctx::None, &mut block).unwrap();
    let mut out = vec![0u16; N];
    g.bench_function("lanes", |b| b.iter(|| lanes::decode(&block, &mut out).unwrap()));
    for (name, ctx) in
        [("rans", rans::Ctx::None), ("rans_split", rans::Ctx::Split(1)), ("rans_pop16", rans::Ctx::Pop(16))]
    {
        let mut block = Vec::new();
        rans::encode(&m, ctx, &mut block);
        let mut out = Vec::with_capacity(N);
        rans::decode(&block, N, ctx, &mut out).unwrap();
        assert!(out == m, "{name}");
        g.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                rans::decode(&block, N, ctx, &mut out).unwrap()
            })
        });
    }
    huffman_decode(&mut g, "huffman", &m);
    g.finish();
}

/// Benchmarks `name`: decoding the Huffman block of `syms` (`N` symbols).
fn huffman_decode(g: &mut BenchmarkGroup<WallTime>, name: &str, syms: &[u16]) {
    let mut block = Vec::new();
    huffman::encode(syms, &mut block);
    g.bench_function(name, |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(N);
            huffman::decode(&block, N, &mut out).unwrap();
            out
        })
    });
}

fn bench(c: &mut Criterion) {
    let syms = symbols();
    let mut g = c.benchmark_group("coders");
    g.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(300));
    g.throughput(Throughput::Elements(N as u64));
    for (name, ctx) in [
        ("none", rans::Ctx::None),
        ("prev", rans::Ctx::Back(1)),
        ("prev_split", rans::Ctx::Split(1)),
        ("back384", rans::Ctx::Back(ROW)),
        ("back384_split", rans::Ctx::Split(ROW)),
    ] {
        let mut block = Vec::new();
        rans::encode(&syms, ctx, &mut block);
        g.bench_function(BenchmarkId::new("rans_encode", name), |b| {
            b.iter(|| {
                let mut out = Vec::new();
                rans::encode(&syms, ctx, &mut out);
                out
            })
        });
        g.bench_function(BenchmarkId::new("rans_decode", name), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(N);
                rans::decode(&block, N, ctx, &mut out).unwrap();
                out
            })
        });
    }
    huffman_decode(&mut g, "huffman_decode", &syms);
    for bits in [1u32, 5, 7, 10] {
        let mut packed = Vec::new();
        pack(syms.iter().map(|&v| v as u64 & ((1 << bits) - 1)), bits, &mut packed);
        assert_eq!(packed.len(), packed_len(N, bits));
        let ty = brevis::internals::dsl::Ty::u(bits);
        g.bench_function(BenchmarkId::new("unpack", bits), |b| {
            b.iter(|| brevis::internals::dsl::ops::raw::unpack_stream(&packed, N, ty).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench, masks);
criterion_main!(benches);
