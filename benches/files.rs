//! Whole files: compress and decompress the committed real checkpoint and a synthetic bf16 one.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

/// A safetensors file with one [1024, 1024] bf16 tensor of bell-shaped values.
fn synthetic_bf16() -> Vec<u8> {
    let (rows, cols) = (1024usize, 1024usize);
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut data = Vec::with_capacity(rows * cols * 2);
    for _ in 0..rows * cols {
        let mut sum = 0f32;
        for _ in 0..4 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            sum += (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        let bits = (sum * 0.05).to_bits();
        data.extend_from_slice(&((bits >> 16) as u16).to_le_bytes());
    }
    let header =
        format!("{{\"w\":{{\"dtype\":\"BF16\",\"shape\":[{rows},{cols}],\"data_offsets\":[0,{}]}}}}", data.len());
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

fn bench(c: &mut Criterion) {
    let fixture = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/silero_vad_16k.safetensors"))
        .expect("the committed fixture");
    let mut g = c.benchmark_group("files");
    g.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(300));
    for (name, data) in [("silero_vad_16k", fixture), ("synthetic_bf16", synthetic_bf16())] {
        g.throughput(Throughput::Bytes(data.len() as u64));
        let archive = brevis::compress(&data, &brevis::Options::default()).unwrap();
        assert_eq!(brevis::decompress(&archive).unwrap(), data);
        g.bench_function(format!("compress/{name}"), |b| {
            b.iter(|| brevis::compress(&data, &brevis::Options::default()).unwrap())
        });
        for threads in [1, 0] {
            let opts = brevis::DecodeOptions::default().with_threads(threads);
            g.bench_function(format!("decompress_T{threads}/{name}"), |b| {
                b.iter(|| brevis::decompress_with(&archive, &opts).unwrap())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
