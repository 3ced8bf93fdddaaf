//! The fused float writer (`dsl::fused`): one chunk of 2^19 bf16 weights (normal, sd 0.02) coded
//! as `fields(e8,m7,k3)[H, raw, raw]`, decoded straight into a caller's buffer, against the
//! interpreter (`Node::decode` into a stream, then copied out) on the same payload, for the head
//! leaves `lanes`, `lanes(adj)`, `huffman` and `rans`, and with a `lanes`-coded sign part; and
//! 2^18 fp32 weights (the same values with 8 more random mantissa bits and the last 8 zero, so
//! that their low 19 bits take at most 2048 values) as `fields(e8,m23,k4)[H, raw, L]` with a raw or a `dict` low part.
//! Throughput in output bytes.
//! The SIMD level is the process's: run with `BREVIS_CPU=scalar` for the scalar level.

use brevis::internals::coder::bitio::ByteReader;
use brevis::internals::dsl::build::*;
use brevis::internals::dsl::{fused, Env, Node, Stream, Ty};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

const N: usize = 1 << 19;

fn weights() -> Stream {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    Stream::from_fn(Ty::u(16), N, |_| {
        let (u, v) = (next(), next());
        let x = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos() * 0.02;
        half::bf16::from_f64(x).to_bits() as u64
    })
}

/// The first half of the weights as fp32: bf16 with 8 more random mantissa bits.
fn weights32(x: &Stream) -> Stream {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    Stream::from_fn(Ty::u(32), N / 2, |i| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (x.get(i) << 16) | (s >> 56) << 8
    })
}

/// Times the fused writer and the interpreter on program `p` over `x` (words of type `ty`).
fn pair(g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>, name: &str, p: &Node, x: &Stream) {
    let ty = x.ty;
    let no_copy = |_: u32| -> brevis::Result<Stream> { Err(brevis::Error::Corrupt("no copy".into())) };
    let mut payload = Vec::new();
    p.encode(x, &[], &mut payload).unwrap();
    let bytes = x.to_le_bytes();
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    let mut out = vec![0u8; bytes.len()];
    g.bench_function(BenchmarkId::new("fused", name), |b| {
        b.iter(|| fused::decode_into(p, ty, &mut ByteReader::new(&payload), &mut out, None).unwrap())
    });
    assert_eq!(out, bytes);
    g.bench_function(BenchmarkId::new("interpreter", name), |b| {
        b.iter(|| {
            let env = Env::new(0, &no_copy);
            let s = p.decode(ty, x.len(), &mut ByteReader::new(&payload), &[], &env).unwrap();
            out.copy_from_slice(&s.to_le_bytes());
        })
    });
}

fn bench(c: &mut Criterion) {
    let x = weights();
    let mut g = c.benchmark_group(format!("fused_{}", brevis::internals::simd::isa().name()));
    g.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(300));
    let programs = [
        ("lanes", fields(8, 7, 3, [lanes(), raw(), raw()])),
        ("lanes_adj", fields(8, 7, 3, [lanes_adj(), raw(), raw()])),
        ("huffman", fields(8, 7, 3, [huffman(), raw(), raw()])),
        ("rans", fields(8, 7, 3, [rans(), raw(), raw()])),
        // An entropy-coded sign part, as in row-context programs of embeddings.
        ("lanes_lanes_sign", fields(8, 7, 3, [lanes(), lanes(), raw()])),
    ];
    for (name, p) in programs {
        pair(&mut g, name, &p, &x);
    }
    let x32 = weights32(&x);
    let programs = [
        ("fp32_lanes_raw", fields(8, 23, 4, [lanes(), raw(), raw()])),
        ("fp32_lanes_dict", fields(8, 23, 4, [lanes(), raw(), dict(delta(1, zstd(9)), raw())])),
        ("fp32_adj_dict", fields(8, 23, 4, [lanes_adj(), raw(), dict(delta(1, zstd(9)), raw())])),
    ];
    for (name, p) in programs {
        pair(&mut g, name, &p, &x32);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
