//! The fused float writer (`dsl::fused`): one chunk of 2^19 bf16 weights (normal, sd 0.02) coded
//! as `fields(e8,m7,k3)[H, raw, raw]`, decoded straight into a caller's buffer, against the
//! interpreter (`Node::decode` into a stream, then copied out) on the same payload, for the head
//! leaves `lanes`, `lanes(adj)`, `huffman` and `rans`, and with a `lanes`-coded sign part; and
//! 2^18 fp32 weights (the same values with 8 more random mantissa bits and the last 8 zero, so
//! that their low 19 bits take at most 2048 values) as `fields(e8,m23,k4)[H, raw, L]` with a raw or a `dict` low part.
//! Group `fused_blocks_*`: the same weights quantized to Q5_0 and Q8_0 blocks (ggml's layouts,
//! scales rounded to fp16) as `blocks` programs whose quants are a palette of `lanes` indices or
//! a `lanes` leaf: the fused blocks writer (`Node::decode_root_into`) against the interpreter.
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

fn no_copy(_: u32) -> brevis::Result<Stream> {
    Err(brevis::Error::Corrupt("no copy".into()))
}

/// Times a fused writer (`fast`, from the payload into the output bytes) and the interpreter on
/// program `p` over `x`.
fn pair(
    g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    name: &str,
    p: &Node,
    x: &Stream,
    fast: impl Fn(&[u8], &mut [u8]) -> brevis::Result<()>,
) {
    let mut payload = Vec::new();
    p.encode(x, &[], &mut payload).unwrap();
    let bytes = x.to_le_bytes();
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    let mut out = vec![0u8; bytes.len()];
    // Checked once here: a filtered run does not call the timed closures.
    fast(&payload, &mut out).unwrap();
    assert!(out == bytes, "{name}: the fused writer's bytes differ");
    g.bench_function(BenchmarkId::new("fused", name), |b| b.iter(|| fast(&payload, &mut out).unwrap()));
    g.bench_function(BenchmarkId::new("interpreter", name), |b| {
        b.iter(|| {
            let env = Env::new(0, &no_copy);
            let s = p.decode(x.ty, x.len(), &mut ByteReader::new(&payload), &[], &env).unwrap();
            out.copy_from_slice(&s.to_le_bytes());
        })
    });
}

/// [`pair`] for the fused float writer.
fn float_pair(g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>, name: &str, p: &Node, x: &Stream) {
    pair(g, name, p, x, |payload, out| fused::decode_into(p, x.ty, &mut ByteReader::new(payload), out, None));
}

/// The weights as ggml blocks of 32: Q5_0 (`five`) or Q8_0, each block's scale the largest
/// magnitude over 16 (Q8_0: 127), rounded to fp16.
fn quantized(x: &Stream, five: bool) -> Stream {
    let mut out = Vec::new();
    for blk in (0..x.len()).collect::<Vec<_>>().chunks(32) {
        let w: Vec<f32> = blk.iter().map(|&i| half::bf16::from_bits(x.get(i) as u16).to_f32()).collect();
        let amax = w.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = half::f16::from_f32(amax / if five { 16.0 } else { 127.0 });
        let inv = if d.to_f32() > 0.0 { 1.0 / d.to_f32() } else { 0.0 };
        out.extend(d.to_bits().to_le_bytes());
        if five {
            let q: Vec<u8> = w.iter().map(|v| ((v * inv).round() + 16.0).clamp(0.0, 31.0) as u8).collect();
            let qh = q.iter().enumerate().fold(0u32, |h, (j, v)| h | ((*v as u32 >> 4) << j));
            out.extend(qh.to_le_bytes());
            out.extend((0..16).map(|j| (q[j] & 15) | (q[j + 16] & 15) << 4));
        } else {
            out.extend(w.iter().map(|v| (v * inv).round().clamp(-127.0, 127.0) as i8 as u8));
        }
    }
    Stream::from_fn(Ty::u(8), out.len(), |i| out[i] as u64)
}

/// [`pair`] for the fused blocks writer (`Node::decode_root_into`).
fn blocks_pair(g: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>, name: &str, p: &Node, x: &Stream) {
    assert!(p.decodes_into(x.ty, x.len(), x.len()));
    pair(g, name, p, x, |payload, out| {
        p.decode_root_into(x.ty, &mut ByteReader::new(payload), &Env::new(0, &no_copy), out)
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
        float_pair(&mut g, name, &p, &x);
    }
    let x32 = weights32(&x);
    let programs = [
        ("fp32_lanes_raw", fields(8, 23, 4, [lanes(), raw(), raw()])),
        ("fp32_lanes_dict", fields(8, 23, 4, [lanes(), raw(), dict(delta(1, zstd(9)), raw())])),
        ("fp32_adj_dict", fields(8, 23, 4, [lanes_adj(), raw(), dict(delta(1, zstd(9)), raw())])),
    ];
    for (name, p) in programs {
        float_pair(&mut g, name, &p, &x32);
    }
    g.finish();
    let mut g = c.benchmark_group(format!("fused_blocks_{}", brevis::internals::simd::isa().name()));
    g.sample_size(10).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(300));
    let (q5, q8) = (quantized(&x, true), quantized(&x, false));
    let programs = [
        ("q5_0_palette", blocks(6, vec![raw(), huffman(), palette(32, huffman(), raw(), lanes_adj(), lanes())]), &q5),
        ("q5_0_lanes", blocks(6, vec![raw(), huffman(), lanes()]), &q5),
        ("q8_0_lanes", blocks(8, vec![raw(), huffman(), lanes()]), &q8),
    ];
    for (name, p, x) in programs {
        blocks_pair(&mut g, name, &p, x);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
