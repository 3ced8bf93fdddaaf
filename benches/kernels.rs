//! The field kernels of the decoder at every CPU level this machine has: bit unpacking into bytes
//! and 16-bit words, the `fields` merge of bf16 words, and the two-byte-plane merge; and the
//! XXH3-64 checksum of a 1 MiB chunk (`brevis::internals::hash`) against xxhash-rust's; and the
//! derivations of `derive` (casts and ggml reference quantizers, K-quants included) from f32; and
//! the quant kernels of `blocks` (Q5_0, Q3_K, Q5_K and Q6_K quants into their blocks); and the
//! rebuilding of words from a `palette`.

use brevis::internals::coder::pack;
use brevis::internals::simd::{self, Isa};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

const N: usize = 1 << 20;

fn words(seed: u64) -> Vec<u16> {
    let mut s = seed | 1;
    (0..N)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u16
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let w = words(7);
    let mut g = c.benchmark_group("kernels");
    g.sample_size(10).measurement_time(Duration::from_secs(1)).warm_up_time(Duration::from_millis(200));
    g.throughput(Throughput::Elements(N as u64));
    let isas: Vec<Isa> = simd::available();
    for &bits in &[5u32, 10] {
        let mut data = Vec::new();
        pack(w.iter().map(|&v| v as u64 & ((1 << bits) - 1)), bits, &mut data);
        for &l in &isas {
            if bits <= 8 {
                let mut out = vec![0u8; N];
                g.bench_function(BenchmarkId::new(format!("unpack_u8_{bits}"), l.name()), |b| {
                    b.iter(|| simd::unpack_u8_at(l, &data, bits, &mut out))
                });
            }
            let mut out = vec![0u16; N];
            g.bench_function(BenchmarkId::new(format!("unpack_u16_{bits}"), l.name()), |b| {
                b.iter(|| simd::unpack_u16_at(l, &data, bits, &mut out))
            });
        }
    }
    // bf16 split as fields(e8, m7, k2): a 10-bit head, the sign, 5 low mantissa bits.
    let head: Vec<u16> = w.iter().map(|&v| (v >> 5) & 0x3ff).collect();
    let sign: Vec<u8> = w.iter().map(|&v| (v >> 15) as u8).collect();
    let low: Vec<u8> = w.iter().map(|&v| (v & 31) as u8).collect();
    let hi: Vec<u8> = w.iter().map(|&v| (v >> 8) as u8).collect();
    let lo: Vec<u8> = w.iter().map(|&v| v as u8).collect();
    for &l in &isas {
        // Checked once here: a filtered run does not call the benched closures.
        let mut out = vec![0u16; N];
        simd::merge_fields16_at(l, &head, &sign, &low, 5, &mut out);
        assert!(out == w);
        out.fill(0);
        simd::merge_planes16_at(l, &hi, &lo, 8, &mut out);
        assert!(out == w);
        g.bench_function(BenchmarkId::new("merge_fields16", l.name()), |b| {
            b.iter(|| simd::merge_fields16_at(l, &head, &sign, &low, 5, &mut out))
        });
        g.bench_function(BenchmarkId::new("merge_planes16", l.name()), |b| {
            b.iter(|| simd::merge_planes16_at(l, &hi, &lo, 8, &mut out))
        });
    }
    // Chunk checksums: 1 MiB, in cache.
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).take(N).collect();
    g.throughput(Throughput::Bytes(N as u64));
    g.bench_function("xxh3_64/xxhash-rust", |b| b.iter(|| xxhash_rust::xxh3::xxh3_64(&bytes)));
    for &l in &isas {
        assert_eq!(brevis::internals::hash::xxh3_64_at(l, &bytes), xxhash_rust::xxh3::xxh3_64(&bytes));
        g.bench_function(BenchmarkId::new("xxh3_64", l.name()), |b| {
            b.iter(|| brevis::internals::hash::xxh3_64_at(l, &bytes))
        });
    }
    g.finish();
    derivations(c, &w, &isas);
    quant_blocks(c, &w, &isas);
    palette(c, &w);
}

/// `palette(32)` rebuilding 2^20 8-bit and 16-bit words on a grid of 13 values per group of 32
/// (as a requantized 4-bit model's Q8_0 quants hold) from its parts: words per second.
fn palette(c: &mut Criterion, w: &[u16]) {
    use brevis::internals::dsl::ops::palette::Palette;
    use brevis::internals::dsl::{Stream, Ty};
    let p = Palette { group: 32 };
    let mut g = c.benchmark_group("palette");
    g.sample_size(10).measurement_time(Duration::from_secs(1)).warm_up_time(Duration::from_millis(200));
    g.throughput(Throughput::Elements(N as u64));
    for bits in [8u32, 16] {
        let x = Stream::from_fn(Ty::u(bits), N, |i| (i / 32 * 7) as u64 % 64 + 9 * (w[i] % 13) as u64);
        let parts = p.forward(&x, &mut Vec::new());
        g.bench_function(format!("inverse_u{bits}"), |b| {
            b.iter_batched(|| parts.clone(), |parts| p.inverse(x.ty, N, parts).unwrap(), BatchSize::LargeInput)
        });
    }
    g.finish();
}

/// The quants of 2^20 elements written into their blocks, per level: values per second.
fn quant_blocks(c: &mut Criterion, w: &[u16], isas: &[Isa]) {
    let vals: Vec<u8> = w.iter().map(|&v| v as u8 & 31).collect();
    let mut g = c.benchmark_group("blocks");
    g.sample_size(10).measurement_time(Duration::from_secs(1)).warm_up_time(Duration::from_millis(200));
    g.throughput(Throughput::Elements(N as u64));
    for &l in isas {
        let mut body = vec![0u8; N / 32 * 22];
        g.bench_function(BenchmarkId::new("q5_0_quants", l.name()), |b| {
            b.iter(|| simd::nibble_blocks_at(l, &vals, &mut body, 22, 6, Some(2)))
        });
        // A palette of 32-word groups with 12 distinct 5-bit words each (a requantized model's).
        let index: Vec<u8> = w.iter().map(|&v| (v % 12) as u8).collect();
        let (count, low, gaps) = (vec![11u8; N / 32], vec![0u8; N / 32], vec![2u8; N / 32 * 11]);
        let p = simd::PaletteParts { count: &count, low: &low, gaps: &gaps, index: &index, g: 32, mask: 31 };
        let mut words = vec![0u8; N];
        g.bench_function(BenchmarkId::new("palette_32", l.name()), |b| {
            b.iter(|| assert!(simd::palette_at(l, &p, &mut words)))
        });
        // The same over bf16 words (a dequantized model's: its groups' 12 values 3 apart).
        let (low16, gaps16) = (vec![0x3c00u16; N / 32], vec![3u16; N / 32 * 11]);
        let p16 = simd::PaletteParts { count: &count, low: &low16, gaps: &gaps16, index: &index, g: 32, mask: 0xffff };
        let mut words16 = vec![0u16; N];
        g.bench_function(BenchmarkId::new("palette_32_u16", l.name()), |b| {
            b.iter(|| assert!(simd::palette_at(l, &p16, &mut words16)))
        });
        let mut body = vec![0u8; N / 256 * 176];
        g.bench_function(BenchmarkId::new("q5_k_quants", l.name()), |b| {
            b.iter(|| simd::k_nibble_blocks_at(l, &vals, &mut body, 176, 48, Some(16)))
        });
        let mut body = vec![0u8; N / 256 * 110];
        g.bench_function(BenchmarkId::new("q3_k_quants", l.name()), |b| {
            b.iter(|| simd::crumb_blocks_at(l, &vals, &mut body, 110, 32, Some(0)))
        });
        let mut body = vec![0u8; N / 256 * 210];
        g.bench_function(BenchmarkId::new("q6_k_quants", l.name()), |b| {
            b.iter(|| simd::six_bit_blocks_at(l, &vals, &mut body, 210, 0, 128))
        });
    }
    g.finish();
}

/// Each derivation of 2^16 f32 weights (a smooth spread of magnitudes), per level: values per
/// second of the master.
fn derivations(c: &mut Criterion, w: &[u16], isas: &[Isa]) {
    use brevis::internals::simd::derive::{Kind, Src};
    let n = 1 << 16;
    let master: Vec<u8> =
        w[..n].iter().flat_map(|&v| ((v as i16) as f32 / 2e5 * (1.0 + (v % 7) as f32)).to_le_bytes()).collect();
    let mut g = c.benchmark_group("derive");
    g.sample_size(10).measurement_time(Duration::from_secs(1)).warm_up_time(Duration::from_millis(200));
    g.throughput(Throughput::Elements(n as u64));
    for kind in
        [Kind::Bf16Rne, Kind::F16Rne, Kind::Q8_0, Kind::Q4_0, Kind::Q4K, Kind::Q5K, Kind::Q6K, Kind::Q2K, Kind::Q3K]
    {
        let (bb, be) = kind.block();
        let mut out = vec![0u8; n / be * bb];
        for &l in isas {
            g.bench_function(BenchmarkId::new(kind.name(), l.name()), |b| {
                b.iter(|| simd::derive_at(l, kind, Src::F32, &master, 0, &mut out))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
