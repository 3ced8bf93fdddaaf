//! A GGUF header's residue model (`header_model`, model 2: the strings gathered): the decode
//! (join) that every open of a GGUF archive runs before its chunks decode, and the encode, on a
//! synthetic header shaped like a llama.cpp model's: a vocabulary of 49152 short tokens (a few
//! holding the bytes 0 and 1 that the stored form escapes), 48000 merges, a few scalar keys and
//! 300 tensor infos; and, where the corpus (`$BREVIS_CORPUS`, by default
//! `~/.cache/brevis-corpus`, `../shared/corpus/`) holds it, the real header of
//! `gguf/SmolLM2-135M-Instruct.Q4_1.gguf` (what precedes its first tensor: 49152 tokens, 48900
//! merges).

use brevis::internals::container::header_model;
use brevis::internals::tensor::gguf;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::path::PathBuf;
use std::time::Duration;

fn string(h: &mut Vec<u8>, s: &[u8]) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s);
}

/// The key and the head of a metadata value that is an array of `n` strings.
fn string_array(h: &mut Vec<u8>, key: &[u8], n: u64) {
    string(h, key);
    h.extend_from_slice(&9u32.to_le_bytes());
    h.extend_from_slice(&8u32.to_le_bytes());
    h.extend_from_slice(&n.to_le_bytes());
}

fn header() -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut word = |len: usize| -> Vec<u8> { (0..len).map(|_| b'a' + (next() % 26) as u8).collect() };
    let (tokens, merges, tensors) = (49_152u64, 48_000u64, 300u64);
    let mut h = b"GGUF".to_vec();
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&tensors.to_le_bytes());
    h.extend_from_slice(&4u64.to_le_bytes());
    string(&mut h, b"general.name");
    h.extend_from_slice(&8u32.to_le_bytes());
    string(&mut h, b"a synthetic model");
    string(&mut h, b"llama.context_length");
    h.extend_from_slice(&4u32.to_le_bytes());
    h.extend_from_slice(&8192u32.to_le_bytes());
    string_array(&mut h, b"tokenizer.ggml.tokens", tokens);
    for i in 0..tokens {
        let mut t = word(2 + (i % 11) as usize);
        if i < 256 {
            t = vec![i as u8];
        }
        string(&mut h, &t);
    }
    string_array(&mut h, b"tokenizer.ggml.merges", merges);
    for i in 0..merges {
        let mut m = word(1 + (i % 5) as usize);
        m.push(b' ');
        m.extend(word(1 + (i % 7) as usize));
        string(&mut h, &m);
    }
    for t in 0..tensors {
        string(&mut h, format!("blk.{}.ffn_up.weight", t / 9).as_bytes());
        h.extend_from_slice(&2u32.to_le_bytes());
        for d in [576u64, 1536] {
            h.extend_from_slice(&d.to_le_bytes());
        }
        h.extend_from_slice(&8u32.to_le_bytes());
        h.extend_from_slice(&(t * 1_000_000).to_le_bytes());
    }
    h.resize(h.len().next_multiple_of(32), 0);
    h
}

/// The bytes before the first tensor of the corpus's SmolLM2 GGUF, when the corpus holds it.
fn smollm2_header() -> Option<Vec<u8>> {
    let dir = std::env::var_os("BREVIS_CORPUS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/brevis-corpus")))?;
    let path = dir.join("gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    let Ok(file) = std::fs::read(&path) else {
        eprintln!("{}: not there, only the synthetic header is timed", path.display());
        return None;
    };
    match gguf::layout(&file) {
        Ok(spans) => spans.first().map(|s| file[..s.start as usize].to_vec()),
        Err(e) => {
            eprintln!("{}: {e}; only the synthetic header is timed", path.display());
            None
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("gguf_header");
    g.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    for (name, h) in std::iter::once(("synthetic", header())).chain(smollm2_header().map(|h| ("smollm2", h))) {
        let (model, stored) = header_model::encode(&h);
        assert_eq!(model, header_model::GGUF_STRINGS);
        assert!(header_model::decode(model, &stored, h.len() as u64).unwrap() == h);
        g.throughput(Throughput::Bytes(h.len() as u64));
        g.bench_function(format!("join/{name}"), |b| {
            b.iter(|| header_model::decode(model, &stored, h.len() as u64).unwrap())
        });
        g.bench_function(format!("split/{name}"), |b| b.iter(|| header_model::encode(&h)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
