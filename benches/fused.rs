//! The fused float writer (`dsl::fused`): one chunk of 2^19 bf16 weights (normal, sd 0.02) coded
//! as `fields(e8,m7,k3)[H, raw, raw]`, decoded straight into a caller's buffer, against the
//! interpreter (`Node::decode` into a stream, then copied out) on the same payload, for the head
//! leaves `lanes`, `huffman` and `rans`, and with a `lanes`-coded sign part. Throughput in bf16 words (elements) and output bytes.
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

fn bench(c: &mut Criterion) {
    let x = weights();
    let mut g = c.benchmark_group(format!("fused_{}", brevis::internals::simd::isa().name()));
    g.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(300));
    g.throughput(Throughput::Bytes(2 * N as u64));
    let no_copy = |_: u32| -> brevis::Result<Stream> { Err(brevis::Error::Corrupt("no copy".into())) };
    let programs = [
        ("lanes", fields(8, 7, 3, [lanes(), raw(), raw()])),
        ("huffman", fields(8, 7, 3, [huffman(), raw(), raw()])),
        ("rans", fields(8, 7, 3, [rans(), raw(), raw()])),
        // An entropy-coded sign part, as in row-context programs of embeddings.
        ("lanes_lanes_sign", fields(8, 7, 3, [lanes(), lanes(), raw()])),
    ];
    for (name, p) in programs {
        let p: Node = p;
        let mut payload = Vec::new();
        p.encode(&x, &[], &mut payload).unwrap();
        let mut out = vec![0u8; 2 * N];
        g.bench_function(BenchmarkId::new("fused", name), |b| {
            b.iter(|| fused::decode_into(&p, Ty::u(16), &mut ByteReader::new(&payload), &mut out).unwrap())
        });
        assert_eq!(out, x.to_le_bytes());
        g.bench_function(BenchmarkId::new("interpreter", name), |b| {
            b.iter(|| {
                let env = Env::new(0, &no_copy);
                let s = p.decode(Ty::u(16), N, &mut ByteReader::new(&payload), &[], &env).unwrap();
                out.copy_from_slice(&s.to_le_bytes());
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
