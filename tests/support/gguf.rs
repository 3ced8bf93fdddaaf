//! Builds GGUF files byte by byte (ggml's `docs/gguf.md`: "GGUF", u32 version, u64 tensor and
//! key/value counts, the key/values, the tensor infos, padding to the alignment, the data), with
//! padding of any byte value so that tests can tell padding from zeros.
#![allow(dead_code)]

use super::st::Rng;

/// A metadata value; `Array` holds its element type and elements (which may be arrays).
#[derive(Clone, Debug)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(u32, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::Str(_) => 8,
            Value::Array(..) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    /// The value's bytes, without its type.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Value::U8(v) => out.push(*v),
            Value::I8(v) => out.push(*v as u8),
            Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F32(v) => out.extend_from_slice(&v.to_bits().to_le_bytes()),
            Value::Bool(v) => out.push(*v as u8),
            Value::Str(s) => string(out, s.as_bytes()),
            Value::Array(t, items) => {
                out.extend_from_slice(&t.to_le_bytes());
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for v in items {
                    v.write(out);
                }
            }
            Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F64(v) => out.extend_from_slice(&v.to_bits().to_le_bytes()),
        }
    }
}

pub fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// One tensor: `dims` in GGUF order (fastest first), its ggml type id and data bytes.
#[derive(Clone, Debug)]
pub struct GgufTensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: u32,
    pub data: Vec<u8>,
}

/// A GGUF file to build. Tensors are laid out in order, each at an offset rounded up to
/// `alignment`; `alignment` other than 32 also needs a `general.alignment` key (the caller's
/// choice, so that tests can lie).
#[derive(Clone, Debug)]
pub struct Gguf {
    pub version: u32,
    pub kv: Vec<(String, Value)>,
    pub tensors: Vec<GgufTensor>,
    pub alignment: u64,
    /// The byte that padding is made of.
    pub pad: u8,
    /// Replaces the computed data offsets (to build inconsistent files).
    pub offsets: Option<Vec<u64>>,
}

impl Gguf {
    pub fn new(version: u32, alignment: u64) -> Gguf {
        let mut kv = vec![("general.architecture".to_string(), Value::Str("llama".into()))];
        if alignment != 32 {
            kv.push(("general.alignment".into(), Value::U32(alignment as u32)));
        }
        Gguf { version, kv, tensors: Vec::new(), alignment, pad: 0xA5, offsets: None }
    }

    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, data: Vec<u8>) {
        self.tensors.push(GgufTensor { name: name.into(), dims: dims.to_vec(), ty, data });
    }

    /// The data offsets of the tensors (relative to the data section).
    pub fn data_offsets(&self) -> Vec<u64> {
        let mut offs = Vec::new();
        let mut pos = 0u64;
        for t in &self.tensors {
            offs.push(pos);
            pos = (pos + t.data.len() as u64).next_multiple_of(self.alignment);
        }
        self.offsets.clone().unwrap_or(offs)
    }

    /// The header: magic, version, counts, key/values and tensor infos (no padding).
    pub fn header(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            string(&mut out, k.as_bytes());
            out.extend_from_slice(&v.type_id().to_le_bytes());
            v.write(&mut out);
        }
        for (t, off) in self.tensors.iter().zip(self.data_offsets()) {
            string(&mut out, t.name.as_bytes());
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
        }
        out
    }

    /// Where the data section starts.
    pub fn data_start(&self) -> u64 {
        (self.header().len() as u64).next_multiple_of(self.alignment)
    }

    /// The whole file: header, padding, and each tensor's data at its offset (padding between).
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = self.header();
        out.resize(self.data_start() as usize, self.pad);
        let base = out.len();
        for (t, off) in self.tensors.iter().zip(self.data_offsets()) {
            let at = base + off as usize;
            if out.len() < at + t.data.len() {
                out.resize(at + t.data.len(), self.pad);
            }
            out[at..at + t.data.len()].copy_from_slice(&t.data);
        }
        let end = (out.len() - base).next_multiple_of(self.alignment as usize) + base;
        out.resize(end, self.pad);
        out
    }
}

/// A key/value of each of the 13 value types, strings with multi-byte characters, and arrays of
/// numbers, strings and arrays (nested two deep).
pub fn every_value_type() -> Vec<(String, Value)> {
    let s = |x: &str| Value::Str(x.to_string());
    let tokens: Vec<Value> = ["<s>", "</s>", "▁the", "é", "", "token with spaces"].iter().map(|t| s(t)).collect();
    vec![
        ("test.u8".into(), Value::U8(200)),
        ("test.i8".into(), Value::I8(-7)),
        ("test.u16".into(), Value::U16(60000)),
        ("test.i16".into(), Value::I16(-300)),
        ("test.u32".into(), Value::U32(4_000_000_000)),
        ("test.i32".into(), Value::I32(-123_456)),
        ("test.f32".into(), Value::F32(-0.0)),
        ("test.bool".into(), Value::Bool(true)),
        ("general.name".into(), s("tiny test model ✓")),
        ("tokenizer.ggml.tokens".into(), Value::Array(8, tokens)),
        ("tokenizer.ggml.scores".into(), Value::Array(6, (0..6).map(|i| Value::F32(-(i as f32))).collect())),
        (
            "test.nested".into(),
            Value::Array(
                9,
                vec![
                    Value::Array(4, vec![Value::U32(1), Value::U32(2)]),
                    Value::Array(8, vec![s("a"), s("bc")]),
                    Value::Array(9, vec![Value::Array(7, vec![Value::Bool(false)])]),
                    Value::Array(0, vec![]),
                ],
            ),
        ),
        ("test.u64".into(), Value::U64(u64::MAX)),
        ("test.i64".into(), Value::I64(i64::MIN)),
        ("test.f64".into(), Value::F64(f64::NAN)),
    ]
}

/// `n` weights of a trained-looking layer: roughly normal, standard deviation `sd`.
pub fn weights(rng: &mut Rng, n: usize, sd: f64) -> Vec<f64> {
    (0..n).map(|_| rng.normal(sd)).collect()
}

pub fn f32_bytes(w: &[f64]) -> Vec<u8> {
    w.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()
}

pub fn f16_bytes(w: &[f64]) -> Vec<u8> {
    w.iter().flat_map(|&x| half::f16::from_f64(x).to_le_bytes()).collect()
}

pub fn bf16_bytes(w: &[f64]) -> Vec<u8> {
    w.iter().flat_map(|&x| half::bf16::from_f64(x).to_le_bytes()).collect()
}

/// Q8_0 blocks of `w` (ggml's `block_q8_0`: an f16 scale `d = max|x| / 127`, then 32 signed
/// bytes `round(x / d)`); `w.len()` must be a multiple of 32.
pub fn q8_0_bytes(w: &[f64]) -> Vec<u8> {
    let mut out = Vec::new();
    for block in w.chunks(32) {
        let amax = block.iter().fold(0.0f64, |a, &x| a.max(x.abs()));
        let d = amax / 127.0;
        out.extend_from_slice(&half::f16::from_f64(d).to_le_bytes());
        for &x in block {
            let q = if d == 0.0 { 0.0 } else { (x / d).round() };
            out.push(q as i8 as u8);
        }
    }
    out
}

/// A model for loaders: every metadata value type and a vocabulary of `vocab` tokens, tensors
/// of 0 to 4 dimensions in F32, F16, BF16, I32, Q8_0, Q4_K (bytes of its block layout), and one
/// of an unknown type id (99, which extends to the next tensor); `pad` bytes between them.
pub fn loader_model(version: u32, alignment: u64, vocab: usize, pad: u8) -> Gguf {
    let mut rng = Rng(version as u64 * 7919 + alignment + vocab as u64);
    let mut m = Gguf::new(version, alignment);
    m.pad = pad;
    m.kv.extend(every_value_type());
    let tokens = (0..vocab).map(|i| Value::Str(format!("tok{i}_{}", "ab".repeat(i % 7)))).collect();
    m.kv.push(("tokenizer.ggml.big_vocab".into(), Value::Array(8, tokens)));
    m.tensor("token_embd.weight", &[64, 96], 30, bf16_bytes(&weights(&mut rng, 64 * 96, 0.05)));
    m.tensor("blk.0.attn_q.weight", &[32, 8, 3], 1, f16_bytes(&weights(&mut rng, 32 * 8 * 3, 0.02)));
    m.tensor("blk.0.attn_norm.weight", &[33], 0, f32_bytes(&weights(&mut rng, 33, 1.0)));
    m.tensor("blk.0.ffn_down.weight", &[64, 16], 8, q8_0_bytes(&weights(&mut rng, 64 * 16, 0.03)));
    m.tensor("blk.0.ffn_up.weight", &[256, 2, 1, 2], 12, rng.bytes(4 * 144));
    m.tensor("rope.scale", &[], 0, f32_bytes(&[0.5]));
    m.tensor("blk.0.mystery", &[10], 99, rng.bytes(37));
    m.tensor("pos_ids", &[40], 26, (0..40i32).flat_map(|i| i.to_le_bytes()).collect());
    m
}

/// `nblocks` deterministic pseudo-random blocks of `block_bytes` bytes each, skewed as quantized
/// weights are (each byte's nibbles cluster around the middle, each block's first bytes vary
/// slowly like a scale), so that entropy coding has something to find.
pub fn quant_blocks(rng: &mut Rng, block_bytes: usize, nblocks: usize) -> Vec<u8> {
    let nibble = |rng: &mut Rng| ((rng.below(4) + rng.below(4) + rng.below(4) + rng.below(5)) & 15) as u8;
    let mut out = Vec::with_capacity(block_bytes * nblocks);
    for b in 0..nblocks {
        for i in 0..block_bytes {
            out.push(if i < 2 { (b / 3 + i * 0x3C) as u8 } else { nibble(rng) | (nibble(rng) << 4) });
        }
    }
    out
}

/// A GGUF file with one tensor of each ggml type that the `blocks` operator splits, `rows` rows
/// of `row_blocks` blocks each, after a small F32 tensor.
pub fn quant_model(seed: u64, rows: u64, row_blocks: u64) -> Gguf {
    let mut rng = Rng(seed);
    let mut m = Gguf::new(3, 32);
    m.tensor("norm.weight", &[64], 0, f32_bytes(&weights(&mut rng, 64, 0.1)));
    for id in brevis::internals::dsl::ops::blocks::TYPES {
        let t = brevis::internals::tensor::gguf::ggml_type(id).unwrap();
        let data = quant_blocks(&mut rng, t.block_bytes as usize, (rows * row_blocks) as usize);
        m.tensor(&format!("blk.{id}.weight"), &[row_blocks * t.block, rows], id, data);
    }
    m
}

/// A GGUF master with a tokenizer, and a variant that shares its header but for a few keys,
/// with one tensor copied and one of its own: the variant's header is coded against the
/// master's (residue model 3).
pub fn header_pair() -> (Vec<u8>, Vec<u8>) {
    let mut rng = Rng(5);
    let tokens: Vec<Value> = (0..6000).map(|i| Value::Str(format!("tok{i}{}", "xy".repeat(i * 7 % 5)))).collect();
    let scores: Vec<Value> = (0..6000).map(|i| Value::F32(-(i as f32) / 7.0)).collect();
    let mut master = Gguf::new(3, 32);
    master.kv.push(("general.name".into(), Value::Str("master".into())));
    master.kv.push(("tokenizer.ggml.tokens".into(), Value::Array(8, tokens)));
    master.kv.push(("tokenizer.ggml.scores".into(), Value::Array(6, scores)));
    master.tensor("a.weight", &[64, 64], 0, f32_bytes(&weights(&mut rng, 64 * 64, 0.05)));
    master.tensor("b.weight", &[64, 32], 1, f16_bytes(&weights(&mut rng, 64 * 32, 0.05)));
    let mut variant = master.clone();
    variant.kv[1].1 = Value::Str("variant".into());
    variant.kv.push(("general.quantized_by".into(), Value::Str("a test".into())));
    variant.tensors[1].data = f16_bytes(&weights(&mut rng, 64 * 32, 0.05));
    (master.bytes(), variant.bytes())
}
