//! Golden archives: written once per format version, decoded forever.
//!
//! `tests/golden/v<N>/` holds archives written by format version N and the sha256 of what each
//! must decode to (`MANIFEST`). A change to the wire form that is not versioned makes these fail.
//! To add the archives of a new format version (never to rewrite old ones):
//! `BREVIS_WRITE_GOLDEN=1 cargo test --test golden -- --ignored`.

mod support;

use brevis::internals::coder::bitio::ByteReader;
use brevis::internals::dsl::build::*;
use brevis::internals::dsl::ops::blocks::{self, Blocks};
use brevis::internals::dsl::ops::maps::Map;
use brevis::internals::dsl::{Node, Op, Ty};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// Deterministic pseudo-random words.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 16
    }
}

/// A safetensors file with metadata, a gap between two tensors and trailing bytes.
fn synthetic() -> (Vec<u8>, Vec<Option<Node>>) {
    let mut g = Lcg(42);
    let gauss16 = |g: &mut Lcg, bf: bool| -> u16 {
        // Bell-shaped exponents around 2^-6, random sign and mantissa.
        let e = (g.next() % 7 + g.next() % 7) as u16;
        if bf {
            ((g.next() as u16 & 1) << 15) | ((114 + e) << 7) | (g.next() as u16 & 0x7F)
        } else {
            ((g.next() as u16 & 1) << 15) | ((3 + e) << 10) | (g.next() as u16 & 0x3FF)
        }
    };
    let mut tensors: Vec<Spec<Option<Node>>> = Vec::new();
    let bf: Vec<u8> = (0..4096).flat_map(|_| gauss16(&mut g, true).to_le_bytes()).collect();
    tensors.push(("a.bf16", "BF16", vec![64, 64], bf.clone(), Some(fields(8, 7, 1, [rans_back(64), raw(), raw()]))));
    let f16: Vec<u8> = (0..4096).flat_map(|_| gauss16(&mut g, false).to_le_bytes()).collect();
    tensors.push(("b.f16", "F16", vec![4096], f16, Some(fields(5, 10, 2, [rans_prev(), raw(), rans()]))));
    let f32s: Vec<u8> = (0..1024).flat_map(|i| ((i as f32 * 0.37).sin() * 0.02).to_le_bytes()).collect();
    tensors.push((
        "c.f32",
        "F32",
        vec![32, 32],
        f32s,
        Some(byteplanes(vec![rans(), rans_side(0), rans_side(1), huffman()])),
    ));
    let pos: Vec<u8> = (0..512i64).flat_map(|i| i.to_le_bytes()).collect();
    tensors.push(("d.position_ids", "I64", vec![1, 512], pos, None));
    let c: Vec<u8> = (0..100).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    tensors.push(("e.const", "F32", vec![100], c, None));
    let lowcard: Vec<u8> =
        (0..2000).flat_map(|_| [0x3C00u16, 0xBC00, 0x0000, 0x3800][g.next() as usize % 4].to_le_bytes()).collect();
    tensors.push(("f.lowcard", "F16", vec![2000], lowcard, Some(dict(raw(), rans()))));
    let bytes: Vec<u8> = (0..3000).map(|_| (g.next() % 5) as u8).collect();
    tensors.push(("g.u8", "U8", vec![3000], bytes, Some(bitplanes(vec![raw(); 8]))));
    let ints: Vec<u8> = (0..1000i32).flat_map(|i| (i * i / 7 - 3000).to_le_bytes()).collect();
    tensors.push((
        "h.i32",
        "I32",
        vec![1000],
        ints,
        Some(delta(1, map(Map::ZigZag, byteplanes(vec![rans(), rans(), rans(), rans_prev()])))),
    ));
    let u16s: Vec<u8> = (0..1000u16).flat_map(|i| (i.wrapping_mul(77) ^ 0x1234).to_le_bytes()).collect();
    tensors.push((
        "i.u16",
        "U16",
        vec![1000],
        u16s,
        Some(xor(10, map(Map::Rotate(3), map(Map::XorConst(0x5a5a), huffman())))),
    ));
    tensors.push(("j.dup", "BF16", vec![64, 64], bf, None));
    let rep: Vec<u8> = (0..1024).flat_map(|i| ((i % 100) as f32 * 0.5).to_le_bytes()).collect();
    tensors.push(("k.repeat", "F32", vec![1024], rep, Some(repeat(100, zstd(19)))));
    let u32s: Vec<u8> = (0..500u32).flat_map(|i| (i * 3).to_le_bytes()).collect();
    tensors.push(("l.concat", "U32", vec![500], u32s, Some(concat(vec![200], vec![raw(), view(8, rans())]))));
    let f64s: Vec<u8> = (0..300).flat_map(|i| (i as f64 / 7.0 - 20.0).to_le_bytes()).collect();
    tensors.push((
        "m.f64",
        "F64",
        vec![300],
        f64s,
        Some(fields(11, 52, 2, [rans(), raw(), byteplanes(vec![rans(); 7])])),
    ));
    let f8: Vec<u8> = (0..1000).map(|_| g.next() as u8 & 0x7F).collect();
    tensors.push(("n.f8", "F8_E4M3", vec![1000], f8, Some(fields(4, 3, 1, [rans(), raw(), raw()]))));
    let e5m2: Vec<u8> = (0..500).map(|_| (g.next() % 40) as u8).collect();
    tensors.push(("o.e5m2", "F8_E5M2", vec![500], e5m2, None));
    let bools: Vec<u8> = (0..333).map(|_| g.next().is_multiple_of(3) as u8).collect();
    tensors.push(("p.bool", "BOOL", vec![333], bools, Some(rans())));
    let q: Vec<u8> = (0..1000).map(|i| (i % 17) as u8).collect();
    tensors.push(("q.quant", "Q4_0", vec![1000], q, Some(zstd(19))));

    // Bytes between tensors (before the fourth) and after the last one.
    let file = safetensors("brevis golden", &tensors, Some(3), b"trailing bytes");
    (file, tensors.into_iter().map(|t| t.4).collect())
}

/// A tensor of a golden file: name, dtype, shape, bytes and program.
type Spec<'a, P> = (&'a str, &'a str, Vec<u64>, Vec<u8>, P);

/// A safetensors file of `tensors` (name, dtype, shape, bytes, program) with a `note` in its
/// metadata, 4 bytes `GAP!` before tensor `gap_before`, and `trailing` bytes after the data.
fn safetensors<P>(note: &str, tensors: &[Spec<P>], gap_before: Option<usize>, trailing: &[u8]) -> Vec<u8> {
    let mut header = format!(r#"{{"__metadata__":{{"format":"pt","note":"{note}"}}"#);
    let mut data = Vec::new();
    for (i, (name, dtype, shape, bytes, _)) in tensors.iter().enumerate() {
        if gap_before == Some(i) {
            data.extend_from_slice(b"GAP!");
        }
        let (a, b) = (data.len(), data.len() + bytes.len());
        header += &format!(r#","{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{a},{b}]}}"#);
        data.extend_from_slice(bytes);
    }
    header += "}";
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    file.extend_from_slice(trailing);
    file
}

/// The synthetic file with two tensors nudged (as by a few training steps), coded against the
/// synthetic file itself with imposed reference programs.
fn nudged() -> (Vec<u8>, Vec<Option<Node>>) {
    let (mut file, _) = synthetic();
    let spans = brevis::internals::tensor::safetensors::layout(&file).unwrap();
    let mut g = Lcg(7);
    let mut programs = vec![None; spans.len()];
    for (i, s) in spans.iter().enumerate() {
        match s.name.as_str() {
            "a.bf16" => {
                for w in file[s.start as usize..s.end as usize].chunks_exact_mut(2) {
                    let v = u16::from_le_bytes([w[0], w[1]]).wrapping_add((g.next() % 3) as u16).wrapping_sub(1);
                    w.copy_from_slice(&v.to_le_bytes());
                }
                programs[i] = Some(subref(rans_ref(7, 8)));
            }
            "c.f32" => {
                for w in file[s.start as usize..s.end as usize].chunks_exact_mut(4) {
                    w[0] ^= (g.next() % 4) as u8;
                }
                programs[i] = Some(xorref(byteplanes(vec![rans_ref(23, 8), rans_side(0), rans_side(1), rans_side(2)])));
            }
            "b.f16" => programs[i] = Some(copyref()),
            _ => {}
        }
    }
    (file, programs)
}

/// A safetensors file of 16-bit float tensors for the leaves and contexts of format version 3
/// (`lanes`), each with its program.
fn lanes_file() -> (Vec<u8>, Vec<Option<Node>>) {
    let mut g = Lcg(3);
    // Rows of 96 weights sharing a scale, as in a weight matrix or an embedding.
    let mut words = |bf: bool, n: usize| -> Vec<u8> {
        let mut scale = 0u16;
        (0..n)
            .flat_map(|i| {
                if i % 96 == 0 {
                    scale = (g.next() % 5) as u16;
                }
                let e = scale + (g.next() % 3 + g.next() % 3) as u16;
                let w = if bf {
                    ((g.next() as u16 & 1) << 15) | ((112 + e) << 7) | (g.next() as u16 & 0x7F)
                } else {
                    ((g.next() as u16 & 1) << 15) | ((2 + e) << 10) | (g.next() as u16 & 0x3FF)
                };
                w.to_le_bytes()
            })
            .collect()
    };
    let tensors: Vec<Spec<Node>> = vec![
        ("a.bf16", "BF16", vec![64, 96], words(true, 6144), fields(8, 7, 3, [lanes(), raw(), raw()])),
        ("b.bf16", "BF16", vec![80, 96], words(true, 7680), fields(8, 7, 2, [lanes_prev(), raw(), raw()])),
        ("c.bf16", "BF16", vec![96, 96], words(true, 9216), fields(8, 7, 3, [lanes_back(96), raw(), raw()])),
        ("d.f16", "F16", vec![5000], words(false, 5000), fields(5, 10, 1, [lanes(), raw(), raw()])),
        ("e.f16", "F16", vec![40, 96], words(false, 3840), byteplanes(vec![lanes_prev(), raw()])),
        ("f.f16", "F16", vec![3000], words(false, 3000), lanes()),
    ];
    let file = safetensors("brevis golden v3", &tensors, None, b"");
    (file, tensors.into_iter().map(|t| Some(t.4)).collect())
}

/// Width of the rows of the version 4 golden `classes.brv`.
const CLASS_ROW: usize = 256;

/// Slowly varying u16 words (little-endian): the adjacent word predicts the next one.
fn walk_words(g: &mut Lcg, n: usize) -> Vec<u8> {
    let mut v = 300i64;
    (0..n)
        .flat_map(|_| {
            v = (v + (g.next() % 5) as i64 - 2).clamp(0, 600);
            (v as u16).to_le_bytes()
        })
        .collect()
}

/// A safetensors file of a 16-bit tensor whose rows repeat eight column regimes, each with its
/// own distribution: coded as `lanes(back 256)`, its blocks have more than four context classes
/// (the extended table header of format version 4); and a random walk coded as `lanes(adj)`.
fn classes_file() -> (Vec<u8>, Vec<Option<Node>>) {
    let mut g = Lcg(4);
    let level: Vec<u16> = (0..CLASS_ROW).map(|_| (g.next() % 8) as u16).collect();
    let n = 1 << 16;
    let words: Vec<u8> =
        (0..n).flat_map(|i| (level[i % CLASS_ROW] * 6 + (g.next() % 4 + g.next() % 4) as u16).to_le_bytes()).collect();
    let shape = vec![(n / CLASS_ROW) as u64, CLASS_ROW as u64];
    let walk = walk_words(&mut g, 20_000);
    let tensors = vec![
        ("regimes", "U16", shape, words, lanes_back(CLASS_ROW as u32)),
        ("walk", "U16", vec![20_000], walk, lanes_adj()),
    ];
    let file = safetensors("brevis golden v4", &tensors, None, b"");
    (file, tensors.into_iter().map(|t| Some(t.4)).collect())
}

/// Version 7: `rans` with a `prev` and a `back d` context in four runs, at the root and under
/// `fields`, over chunks whose lengths are not multiples of four, with contexts that pay.
fn split_file() -> (Vec<u8>, Vec<Option<Node>>) {
    let mut g = Lcg(7);
    let walk = walk_words(&mut g, 30_001);
    let level: Vec<u16> = (0..CLASS_ROW).map(|_| (g.next() % 8) as u16).collect();
    let n = 1 << 15;
    let rows: Vec<u8> =
        (0..n).flat_map(|i| (level[i % CLASS_ROW] * 6 + (g.next() % 4 + g.next() % 4) as u16).to_le_bytes()).collect();
    let bf: Vec<u8> = (0..20_003)
        .flat_map(|i| {
            let e = 118 + ((i / 700) % 6) as u16 + (g.next() % 2) as u16;
            (((g.next() as u16 & 1) << 15) | (e << 7) | (g.next() as u16 & 0x7F)).to_le_bytes()
        })
        .collect();
    let tensors = vec![
        ("walk", "U16", vec![30_001], walk, rans_prev()),
        ("rows", "U16", vec![(n / CLASS_ROW) as u64, CLASS_ROW as u64], rows, rans_back(CLASS_ROW as u64)),
        ("w.bf16", "BF16", vec![20_003], bf, fields(8, 7, 1, [rans_prev(), raw(), raw()])),
    ];
    let file = safetensors("brevis golden v7", &tensors, None, b"");
    (file, tensors.into_iter().map(|t| Some(t.4)).collect())
}

/// Version 14: `lanes` blocks split into two streams (at least `SPLIT_MIN` symbols in a chunk):
/// bytes with a long tail (escapes), 16-bit words in two far apart regimes that persist along
/// each lane (mapped, `prev` classes), and a bf16 tensor whose head symbols take them under
/// `fields` (the fused writer's path); the last segment of each is short.
fn halves_file() -> (Vec<u8>, Vec<Option<Node>>) {
    use brevis::internals::coder::lanes::{SEGMENT, SPLIT_MIN};
    let mut g = Lcg(14);
    let n = SPLIT_MIN + 3 * SEGMENT + 17;
    let bytes: Vec<u8> = (0..n)
        .map(|_| match g.next() % 1000 {
            0..=3 => (g.next() % 200) as u8 + 40,
            k => ((k as u32).wrapping_mul(2_654_435_761) >> 29) as u8 + ((k % 7 == 0) as u8),
        })
        .collect();
    let mut regime = [false; 32];
    let words: Vec<u8> = (0..SPLIT_MIN + 1000)
        .flat_map(|i| {
            let lane = &mut regime[i % 32];
            if g.next().is_multiple_of(16) {
                *lane = !*lane;
            }
            let w = if *lane { 60_000 + (g.next() % 9) as u16 } else { (g.next() % 12) as u16 };
            w.to_le_bytes()
        })
        .collect();
    // Sign and the low four mantissa bits zero: constants under `fields`.
    let bf: Vec<u8> = (0..SPLIT_MIN + SEGMENT + 5)
        .flat_map(|_| {
            let e = 117 + (g.next() % 3 + g.next() % 3) as u16;
            ((e << 7) | ((g.next() as u16 & 7) << 4)).to_le_bytes()
        })
        .collect();
    let tensors = vec![
        ("bytes", "U8", vec![n as u64], bytes, lanes()),
        ("words", "U16", vec![(SPLIT_MIN + 1000) as u64], words, lanes_prev()),
        ("w.bf16", "BF16", vec![(SPLIT_MIN + SEGMENT + 5) as u64], bf, fields(8, 7, 3, [lanes(), konst(0), konst(0)])),
    ];
    let file = safetensors("brevis golden v14", &tensors, None, b"");
    (file, tensors.into_iter().map(|t| Some(t.4)).collect())
}

/// Version 8: `sparse(g)` over 2:4-pruned fp16 and unstructured-pruned bf16 and fp32 words, the
/// values split as floats or byte planes, chunks (2^14 bytes) that end inside a group.
fn sparse_file() -> (Vec<u8>, Vec<Option<Node>>) {
    let mut g = Lcg(8);
    let mut gauss = |g: &mut Lcg| (g.next() % 1000) as f32 / 1000.0 - 0.5 + ((g.next() % 1000) as f32 / 2000.0 - 0.25);
    let two_of_four: Vec<u8> = (0..12_003)
        .flat_map(|i| {
            let v = gauss(&mut g);
            let keep = [(0, 3), (1, 2), (0, 1)][(i / 4 * 7) % 3];
            let v = if i % 4 == keep.0 || i % 4 == keep.1 { v } else { 0.0 };
            half::f16::from_f32(v).to_bits().to_le_bytes()
        })
        .collect();
    let pruned = |g: &mut Lcg, gauss: &mut dyn FnMut(&mut Lcg) -> f32, n: usize| -> Vec<f32> {
        (0..n).map(|_| if g.next().is_multiple_of(5) { gauss(g) } else { 0.0 }).collect()
    };
    let bf: Vec<u8> = pruned(&mut g, &mut gauss, 9_001)
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
        .collect();
    let f32s: Vec<u8> = pruned(&mut g, &mut gauss, 5_003).iter().flat_map(|&v| v.to_le_bytes()).collect();
    let tensors = vec![
        ("w.2of4", "F16", vec![12_003], two_of_four, sparse(4, lanes(), fields(5, 10, 2, [rans_prev(), raw(), raw()]))),
        ("w.pruned.bf16", "BF16", vec![9_001], bf, sparse(8, rans_prev(), fields(8, 7, 1, [huffman(), raw(), raw()]))),
        (
            "w.pruned.f32",
            "F32",
            vec![5_003],
            f32s,
            sparse(16, huffman(), byteplanes(vec![raw(), raw(), lanes(), rans()])),
        ),
    ];
    let file = safetensors("brevis golden v8", &tensors, None, b"");
    (file, tensors.into_iter().map(|t| Some(t.4)).collect())
}

/// Version 11: `palette(g)` over bf16 weights on a grid of 12 values per block of 32 (a
/// quantization-aware checkpoint) and int8 words on one of 6 values per 16, chunks (2^14 bytes)
/// that end inside a group.
fn palette_file() -> (Vec<u8>, Vec<Option<Node>>) {
    let mut g = Lcg(11);
    let mut grid = |n: usize, group: usize, levels: u64, word: &mut dyn FnMut(u64, u64, u64) -> Vec<u8>| -> Vec<u8> {
        let (mut base, mut step) = (0, 0);
        (0..n)
            .flat_map(|i| {
                if i % group == 0 {
                    (base, step) = (g.next() % 64, 1 + g.next() % 5);
                }
                word(base, step, g.next() % levels)
            })
            .collect()
    };
    let bf = grid(12_003, 32, 12, &mut |base, step, k| {
        let v = (base as f32 - 32.0 + (step * k) as f32) / 256.0;
        half::bf16::from_f32(v).to_bits().to_le_bytes().to_vec()
    });
    let int8 = grid(20_001, 16, 6, &mut |base, step, k| vec![(base + step * k) as u8 ^ 0x80]);
    let tensors = vec![
        ("w.qat.bf16", "BF16", vec![12_003], bf, palette(32, huffman(), lanes(), rans_prev(), lanes_adj())),
        ("w.grid.i8", "I8", vec![20_001], int8, palette(16, raw(), raw(), zstd(3), rans())),
    ];
    let file = safetensors("brevis golden v11", &tensors, None, b"");
    (file, tensors.into_iter().map(|t| Some(t.4)).collect())
}

/// Version 12: `rans(pop d)` on the masks of fp16 and bf16 weights pruned row by row to
/// different densities (rows of 384 and 96 words), chunks (2^17 bytes) long enough for the
/// contexts to pay, ending inside a group.
fn pop_file() -> (Vec<u8>, Vec<Option<Node>>) {
    let mut g = Lcg(12);
    let mut pruned = |n: usize, row: usize, word: fn(f32) -> [u8; 2]| -> Vec<u8> {
        let mut keep = 0;
        (0..n)
            .flat_map(|i| {
                if i % row == 0 {
                    keep = g.next() % 8;
                }
                let v = (g.next() % 2000) as f32 / 1000.0 - 1.0;
                word(if g.next() % 16 < keep { v } else { 0.0 })
            })
            .collect()
    };
    let f16 = pruned(140_003, 384, |v| half::f16::from_f32(v).to_bits().to_le_bytes());
    let bf = pruned(70_001, 96, |v| half::bf16::from_f32(v).to_bits().to_le_bytes());
    let tensors = vec![
        ("w.pruned.f16", "F16", vec![140_003], f16, sparse(8, rans_pop(16), fields(5, 10, 2, [lanes(), raw(), raw()]))),
        ("w.pruned.bf16", "BF16", vec![70_001], bf, sparse(4, rans_pop(1), fields(8, 7, 1, [huffman(), raw(), raw()]))),
    ];
    let file = safetensors("brevis golden v12", &tensors, None, b"");
    (file, tensors.into_iter().map(|t| Some(t.4)).collect())
}

/// A GGUF file with a tensor of every block type that `blocks` splits (pseudo-random blocks,
/// `support::gguf::quant_model`), and the `blocks` program of each: the edge bytes raw, fp16
/// scales split as floats, wider fields raw, the others through rans, huffman or lanes leaves.
fn quant_file() -> (Vec<u8>, Vec<Option<Node>>) {
    let m = support::gguf::quant_model(50, 3, 8);
    // The header is short: it stays in the residue, and the jobs are the tensors in file order.
    let bytes = m.bytes();
    let programs = block_programs(&bytes, Blocks::new);
    (bytes, programs)
}

/// The program of each tensor of GGUF `file` whose type `split` makes a block split of: the edge
/// bytes raw, fp16 scales split as floats, wider fields raw, the others through rans, huffman or
/// lanes leaves in turn.
fn block_programs(file: &[u8], split: fn(u32) -> Option<Blocks>) -> Vec<Option<Node>> {
    let layout = brevis::internals::tensor::gguf::layout(file).unwrap();
    let leaves = [rans(), rans_prev(), huffman(), lanes(), lanes_adj()];
    let mut programs = Vec::new();
    for (k, s) in layout.iter().enumerate() {
        let program =
            brevis::internals::tensor::gguf::ggml_type_named(s.dtype.name()).and_then(|t| split(t.id)).map(|op| {
                let tys = op.child_types(Ty::u(8)).unwrap();
                let kids = tys.iter().enumerate().map(|(j, t)| match (j, t.bits) {
                    (0, _) => raw(),
                    (_, 16) => fields(5, 10, 3, [huffman(), raw(), raw()]),
                    (_, b) if b > 16 => raw(),
                    _ => leaves[(j + k) % leaves.len()].clone(),
                });
                Node::new(Op::Blocks(op), kids.collect())
            });
        programs.push(program);
    }
    programs
}

/// A GGUF file with a tokenizer-like vocabulary, a key/value of every value type, and a tensor
/// of every block type that has a packed form, each coded by `blocks(T, packed)`: the edge bytes
/// raw, fp16 scales split as floats, wider fields raw, the others through entropy leaves.
fn packed_file() -> (Vec<u8>, Vec<Option<Node>>) {
    use support::gguf::Value;
    let mut m = support::gguf::quant_model(60, 3, 8);
    m.tensors.retain(|t| t.ty == 0 || blocks::PACKED_TYPES.contains(&t.ty));
    m.kv.extend(support::gguf::every_value_type());
    let tokens = (0..400).map(|i| Value::Str(format!("\u{2581}t{}{}", i * 7 % 31, ["an", "ing", "é", "\0x"][i % 4])));
    m.kv.push(("tokenizer.ggml.tokens".into(), Value::Array(8, tokens.collect())));
    let bytes = m.bytes();
    let programs = block_programs(&bytes, Blocks::packed);
    (bytes, programs)
}

/// The stored residue that the current writer makes of `archive`'s original, if the archive's
/// meta holds it as it is.
fn stored_residue_in_meta(archive: &[u8], residue: &[u8]) -> (u8, bool) {
    let (model, stored) = brevis::internals::container::header_model::encode(residue);
    let n = archive.len();
    let meta_len = u64::from_le_bytes(archive[n - 32..n - 24].try_into().unwrap()) as usize;
    let raw_len = u64::from_le_bytes(archive[n - 24..n - 16].try_into().unwrap()) as usize;
    let meta = &archive[n - 32 - meta_len..n - 32];
    let raw = zstd::bulk::Decompressor::with_dictionary(brevis::internals::container::META_DICT)
        .unwrap()
        .decompress(meta, raw_len)
        .unwrap();
    (model, raw.windows(stored.len()).any(|w| w == stored))
}

/// The original file's mode and time recorded in the version 3 golden `lanes.brv`.
fn golden_meta() -> brevis::FileMeta {
    brevis::FileMeta { mode: 0o640, mtime: 1_764_590_400, mtime_nanos: 123_456_789 }
}

/// Rows of SmolLM2 in BF16 and as llama-quantize's K-quants (tests/fixtures/make_smollm2_kquants.py).
fn kquant_files() -> (Vec<u8>, Vec<u8>) {
    fixture_pair("smollm2_kquants")
}

/// Rows of SmolLM2 in BF16 and as llama-quantize's Q2_K and Q3_K (the same script).
fn lowbit_files() -> (Vec<u8>, Vec<u8>) {
    fixture_pair("smollm2_lowbit")
}

/// A fixture's master (`PREFIX_master.gguf`) and its variant (`PREFIX.gguf`).
fn fixture_pair(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    (
        std::fs::read(dir.join(format!("{prefix}_master.gguf"))).unwrap(),
        std::fs::read(dir.join(format!("{prefix}.gguf"))).unwrap(),
    )
}

/// Casts and GGUF quantizations of the silero fixture (tests/fixtures/make_silero_family.py).
fn family_file() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/silero_family.gguf")).unwrap()
}

fn fixture() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/silero_vad_16k.safetensors")).unwrap()
}

#[test]
#[ignore = "writes the golden archives of the current format version"]
fn write_golden() {
    if std::env::var("BREVIS_WRITE_GOLDEN").is_err() {
        return;
    }
    let dir = golden_dir().join(format!("v{}", brevis::internals::container::VERSION));
    assert!(!dir.exists(), "{} exists: golden archives are never rewritten", dir.display());
    std::fs::create_dir_all(&dir).unwrap();
    let (file, programs) = synthetic();
    let opts = brevis::Options::default().with_chunk_bytes(2048).with_threads(1);
    let ops = brevis::internals::compress_with_programs(&file, &opts, &|i, _| programs[i].clone()).unwrap();
    let silero = brevis::compress(&fixture(), &brevis::Options::default()).unwrap();
    let (new, ref_programs) = nudged();
    let with_ref =
        brevis::internals::compress_with_programs_and_ref(&new, &file, &opts, &|i, _| ref_programs[i].clone()).unwrap();
    // Version 3: the lanes leaf in every context, and the original's mode and time.
    let (lanes_in, lanes_programs) = lanes_file();
    let lanes_opts = opts.clone().with_file_meta(Some(golden_meta()));
    let lanes =
        brevis::internals::compress_with_programs(&lanes_in, &lanes_opts, &|i, _| lanes_programs[i].clone()).unwrap();
    // Version 4: lanes blocks with more than four context classes (chunks of 2^14 words).
    let (classes_in, classes_programs) = classes_file();
    let classes_opts = opts.clone().with_chunk_bytes(1 << 15);
    let classes =
        brevis::internals::compress_with_programs(&classes_in, &classes_opts, &|i, _| classes_programs[i].clone())
            .unwrap();
    // Version 5: `blocks` over every block type, chunks cutting blocks (256 bytes).
    let (quant_in, quant_programs) = quant_file();
    let quant_opts = opts.clone().with_chunk_bytes(256);
    let quant =
        brevis::internals::compress_with_programs(&quant_in, &quant_opts, &|i, _| quant_programs[i].clone()).unwrap();
    // Version 6: `blocks(T, packed)` over every block type that has it, and a GGUF header
    // stored with its strings gathered (residue model 2).
    let (packed_in, packed_programs) = packed_file();
    let packed =
        brevis::internals::compress_with_programs(&packed_in, &quant_opts, &|i, _| packed_programs[i].clone()).unwrap();
    // Version 7: `rans` contexts in four runs, chunks of 2^14 words plus an odd tail.
    let (split_in, split_programs) = split_file();
    let split =
        brevis::internals::compress_with_programs(&split_in, &classes_opts, &|i, _| split_programs[i].clone()).unwrap();
    // Version 8: `sparse` masks and values.
    let (sparse_in, sparse_programs) = sparse_file();
    let sparse_opts = opts.clone().with_chunk_bytes(1 << 14);
    let sparse =
        brevis::internals::compress_with_programs(&sparse_in, &sparse_opts, &|i, _| sparse_programs[i].clone())
            .unwrap();
    // Version 9: `derive` (casts and GGUF quantizations of the silero fixture, which
    // silero.brv holds), chunks cutting quantization blocks.
    let family = family_file();
    let derive = brevis::compress_with_ref(&family, &fixture(), &opts.clone().with_chunk_bytes(4096)).unwrap();
    // ... and K-quants of llama-quantize against their BF16 master (kmaster.brv).
    let (kmaster_in, kquants_in) = kquant_files();
    let kmaster = brevis::compress(&kmaster_in, &brevis::Options::default()).unwrap();
    let kquants = brevis::compress_with_ref(&kquants_in, &kmaster_in, &opts.clone().with_chunk_bytes(5000)).unwrap();
    // Version 10: `derive(q2_k)` and `derive(q3_k)`, against their BF16 master (lowmaster.brv).
    let (lowmaster_in, lowbit_in) = lowbit_files();
    let lowmaster = brevis::compress(&lowmaster_in, &brevis::Options::default()).unwrap();
    let lowbit = brevis::compress_with_ref(&lowbit_in, &lowmaster_in, &opts.clone().with_chunk_bytes(5000)).unwrap();
    // Version 11: `palette(g)`.
    let (palette_in, palette_programs) = palette_file();
    let palette =
        brevis::internals::compress_with_programs(&palette_in, &sparse_opts, &|i, _| palette_programs[i].clone())
            .unwrap();
    // Version 12: `rans(pop d)` on sparse masks.
    let (pop_in, pop_programs) = pop_file();
    let pop_opts = opts.clone().with_chunk_bytes(1 << 17);
    let pop = brevis::internals::compress_with_programs(&pop_in, &pop_opts, &|i, _| pop_programs[i].clone()).unwrap();
    // Version 14: split `lanes` blocks (chunks of 1 MiB).
    let (halves_in, halves_programs) = halves_file();
    let halves =
        brevis::internals::compress_with_programs(&halves_in, &brevis::Options::default().with_threads(1), &|i, _| {
            halves_programs[i].clone()
        })
        .unwrap();
    // Version 15: a GGUF variant's header coded against its master's (residue model 3).
    let (hmaster_in, header_in) = support::gguf::header_pair();
    let hmaster = brevis::compress(&hmaster_in, &brevis::Options::default()).unwrap();
    let header = brevis::compress_with_ref(&header_in, &hmaster_in, &opts).unwrap();
    // ... and `derive(iq4_nl)`, `derive(iq4_xs)` against their BF16 master (iq4master.brv).
    let (iq4master_in, iq4_in) = fixture_pair("smollm2_iq4");
    let iq4master = brevis::compress(&iq4master_in, &brevis::Options::default()).unwrap();
    let iq4 = brevis::compress_with_ref(&iq4_in, &iq4master_in, &opts.clone().with_chunk_bytes(5000)).unwrap();
    let mut manifest = String::new();
    for (name, archive, original, refname) in [
        ("iq4master", &iq4master, &iq4master_in, ""),
        ("iq4", &iq4, &iq4_in, " iq4master.brv"),
        ("hmaster", &hmaster, &hmaster_in, ""),
        ("header", &header, &header_in, " hmaster.brv"),
        ("halves", &halves, &halves_in, ""),
        ("pop", &pop, &pop_in, ""),
        ("palette", &palette, &palette_in, ""),
        ("lowmaster", &lowmaster, &lowmaster_in, ""),
        ("lowbit", &lowbit, &lowbit_in, " lowmaster.brv"),
        ("kmaster", &kmaster, &kmaster_in, ""),
        ("kquants", &kquants, &kquants_in, " kmaster.brv"),
        ("derive", &derive, &family, " silero.brv"),
        ("sparse", &sparse, &sparse_in, ""),
        ("split", &split, &split_in, ""),
        ("packed", &packed, &packed_in, ""),
        ("ops", &ops, &file, ""),
        ("silero", &silero, &fixture(), ""),
        ("ref", &with_ref, &new, " ops.brv"),
        ("lanes", &lanes, &lanes_in, ""),
        ("classes", &classes, &classes_in, ""),
        ("blocks", &quant, &quant_in, ""),
    ] {
        std::fs::write(dir.join(format!("{name}.brv")), archive).unwrap();
        manifest += &format!("{name}.brv {} {}{refname}\n", original.len(), sha256_hex(original));
    }
    std::fs::write(dir.join("MANIFEST"), manifest).unwrap();
}

/// Every golden archive of every version decodes to the recorded bytes.
#[test]
fn golden_archives_decode_forever() {
    let mut checked = 0;
    for v in 1..=brevis::internals::container::VERSION {
        let dir = golden_dir().join(format!("v{v}"));
        let manifest = std::fs::read_to_string(dir.join("MANIFEST"))
            .unwrap_or_else(|_| panic!("no golden archives for format version {v}"));
        for line in manifest.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let archive = std::fs::read(dir.join(f[0])).unwrap();
            assert_eq!(u16::from_le_bytes([archive[8], archive[9]]), v, "{} is not a v{v} archive", f[0]);
            // A fourth column names the golden archive whose original is the reference.
            let out = match f.get(3) {
                Some(r) => {
                    let reference = std::fs::read(dir.join(r)).unwrap();
                    assert!(brevis::decompress(&archive).is_err(), "decoding without the reference must fail");
                    brevis::decompress_with_ref(&archive, &reference, &Default::default())
                }
                None => brevis::decompress(&archive),
            }
            .unwrap_or_else(|e| panic!("v{v}/{}: {e}", f[0]));
            assert_eq!(out.len().to_string(), f[1]);
            assert_eq!(sha256_hex(&out), f[2], "v{v}/{} decodes to other bytes", f[0]);
            checked += 1;
        }
    }
    assert!(checked >= 3);
}

/// The synthetic golden input is still what the generator makes, and the operator archive
/// holds every operator of the DSL (so each stays decodable).
#[test]
fn golden_ops_archive_covers_every_operator() {
    let (file, _) = synthetic();
    let dir = golden_dir().join("v1");
    let manifest = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
    assert!(manifest.contains(&sha256_hex(&file)), "the generator no longer makes the golden input");
    let mut text = Vec::new();
    for f in ["ops.brv", "ref.brv"] {
        let archive = std::fs::read(dir.join(f)).unwrap();
        let a = brevis::Archive::open(&archive).unwrap();
        text.extend((0..a.len()).map(|i| a.info(i).unwrap().program()));
    }
    let all = text.join(" ");
    for op in [
        "raw",
        "rans",
        "rans(prev)",
        "rans(back",
        "rans(side",
        "huffman",
        "zstd",
        "const",
        "arange",
        "copy",
        "fields",
        "byteplanes",
        "xorref",
        "subref",
        "copyref",
        "rans(ref",
        "bitplanes",
        "delta",
        "xor(",
        "xorconst",
        "zigzag",
        "rotate",
        "dict",
        "concat",
        "repeat",
        "view",
    ] {
        assert!(all.contains(op), "golden archive lacks {op}: {all}");
    }
}

/// The golden archive `name` of format version `v`, after checking that its recorded original is
/// still what the generator makes (`original`).
fn golden_archive(v: u16, name: &str, original: &[u8]) -> Vec<u8> {
    let dir = golden_dir().join(format!("v{v}"));
    let manifest = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
    assert!(manifest.contains(&sha256_hex(original)), "the generator no longer makes the v{v} golden input of {name}");
    std::fs::read(dir.join(name)).unwrap()
}

/// Version 15's golden `header.brv` holds a GGUF header coded against its master's, and its
/// input is still what the generator makes.
#[test]
fn golden_v15_archive_covers_a_header_against_the_reference() {
    let (master, variant) = support::gguf::header_pair();
    let archive = golden_archive(15, "header.brv", &variant);
    let a = brevis::Archive::open(&archive).unwrap();
    assert!(brevis::internals::index(&a).residue_delta.is_some(), "the header is not coded against the master");
    let master_archive = golden_archive(15, "hmaster.brv", &master);
    assert_eq!(brevis::decompress_with_ref(&archive, &master_archive, &Default::default()).unwrap(), variant);
    let (master, variant) = fixture_pair("smollm2_iq4");
    let a = brevis::Archive::open(golden_archive(15, "iq4.brv", &variant).as_slice())
        .map(|a| (0..a.len()).map(|i| a.info(i).unwrap().program()).collect::<Vec<_>>());
    assert_eq!(a.unwrap(), ["derive(iq4_nl)[copyref]", "derive(iq4_xs)[copyref]"]);
    golden_archive(15, "iq4master.brv", &master);
}

/// Version 3's golden archive holds the lanes leaf in every context and the original's mode and
/// time, and its input is still what the generator makes.
#[test]
fn golden_v3_archive_covers_lanes_and_file_metadata() {
    let archive = golden_archive(3, "lanes.brv", &lanes_file().0);
    let a = brevis::Archive::open(&archive).unwrap();
    let programs: Vec<String> = (0..a.len()).map(|i| a.info(i).unwrap().program()).collect();
    for p in [
        "fields(e8,m7,k3)[lanes, raw, raw]",
        "fields(e8,m7,k2)[lanes(prev), raw, raw]",
        "fields(e8,m7,k3)[lanes(back 96), raw, raw]",
        "fields(e5,m10,k1)[lanes, raw, raw]",
        "byteplanes[lanes(prev), raw]",
        "lanes",
    ] {
        assert!(programs.iter().any(|x| x == p), "golden v3 lacks {p}: {programs:?}");
    }
    assert_eq!(a.file_meta(), Some(golden_meta()));
    assert!(
        brevis::internals::index(&a).tensors.iter().all(|t| t.chunks.len() >= 2),
        "every tensor spans several chunks"
    );
}

/// Version 4's golden archive holds lanes blocks with more than four context classes and the
/// `adj` context, and its input is still what the generator makes.
#[test]
fn golden_v4_archive_covers_eight_lanes_classes() {
    let archive = golden_archive(4, "classes.brv", &classes_file().0);
    let a = brevis::Archive::open(&archive).unwrap();
    assert_eq!(a.info(0).unwrap().program(), format!("lanes(back {CLASS_ROW})"));
    assert_eq!(a.info(1).unwrap().program(), "lanes(adj)");
    let t = &brevis::internals::index(&a).tensors[0];
    assert!(t.chunks.len() >= 2, "the tensor spans several chunks");
    let mut most = 0;
    for c in &t.chunks {
        // A root leaf's payload is its block, length-prefixed.
        let payload = &archive[c.offset as usize..(c.offset + c.len) as usize];
        let block = brevis::internals::coder::bitio::ByteReader::new(payload).bytes().unwrap();
        most = most.max(brevis::internals::coder::lanes::block_classes(block).unwrap());
    }
    assert!(most > 4, "the golden v4 blocks have at most {most} classes");
}

/// Golden error inputs: each must fail with an error, never decode.
#[test]
fn golden_archive_damage_is_reported() {
    let archive = std::fs::read(golden_dir().join("v1/ops.brv")).unwrap();
    let mut future = archive.clone();
    future[8] = 0xFF;
    assert!(matches!(brevis::decompress(&future), Err(brevis::Error::Unsupported(_))));
    let mut bad_magic = archive.clone();
    bad_magic[0] ^= 1;
    assert!(brevis::decompress(&bad_magic).is_err());
    assert!(brevis::decompress(&archive[..archive.len() - 1]).is_err());
    // A flipped bit in the first chunk payload is reported with its tensor.
    let mut flipped = archive.clone();
    let a = brevis::Archive::open(&archive).unwrap();
    let chunk = &brevis::internals::index(&a).tensors[0].chunks[0];
    flipped[chunk.offset as usize + chunk.len as usize / 2] ^= 0x10;
    let err = brevis::decompress(&flipped).unwrap_err().to_string();
    assert!(err.contains("a.bf16"), "{err}");
}

/// Version 5's golden archive holds `blocks` over every block type it splits, each tensor cut
/// into several chunks, and its input is still what the generator makes.
#[test]
fn golden_v5_archive_covers_every_block_type() {
    let archive = golden_archive(5, "blocks.brv", &quant_file().0);
    assert_block_programs(&brevis::Archive::open(&archive).unwrap(), &blocks::TYPES, "");
}

/// Tensor `blk.{id}.weight` of each type `id` is coded by `blocks({name}{suffix})` in two
/// chunks or more.
fn assert_block_programs(a: &brevis::Archive, types: &[u32], suffix: &str) {
    for &id in types {
        let name = brevis::internals::tensor::gguf::ggml_type(id).unwrap().name;
        let i = a.find(&format!("blk.{id}.weight")).unwrap();
        let p = a.info(i).unwrap().program();
        assert!(p.starts_with(&format!("blocks({name}{suffix})[")), "{name}: {p}");
        assert!(brevis::internals::index(a).tensors[i].chunks.len() >= 2, "{name}: one chunk");
    }
}

/// Version 9's golden archives hold `derive` of every kind the fixtures' variants need (a Q8_0,
/// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K quantization and a bf16 and fp16 cast of the
/// master, and a cast whose misses are coded), over chunks that cut quantization blocks.
#[test]
fn golden_v9_archive_covers_derive() {
    let family = family_file();
    let archive = golden_archive(9, "derive.brv", &family);
    let a = brevis::Archive::open(&archive).unwrap();
    let programs: Vec<String> = (0..a.len()).map(|i| a.info(i).unwrap().program()).collect();
    for kind in ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "bf16", "f16"] {
        assert!(programs.contains(&format!("derive({kind})[copyref]")), "derive({kind}): {programs:?}");
    }
    assert!(programs.iter().any(|p| p.starts_with("derive(f16)[xorref")), "{programs:?}");
    let q8 = a.find("stft_conv.weight").unwrap();
    assert!(brevis::internals::index(&a).tensors[q8].chunks.len() >= 2);
    assert_eq!(brevis::decompress_with_ref(&archive, &fixture(), &Default::default()).unwrap(), family);
    // The K-quants, over chunks that cut super-blocks.
    let (kmaster, kquants) = kquant_files();
    let archive = golden_archive(9, "kquants.brv", &kquants);
    let a = brevis::Archive::open(&archive).unwrap();
    let programs: Vec<String> = (0..a.len()).map(|i| a.info(i).unwrap().program()).collect();
    assert_eq!(programs, ["derive(q4_k)[copyref]", "derive(q6_k)[copyref]", "derive(q5_k)[copyref]"]);
    assert!(brevis::internals::index(&a).tensors.iter().all(|t| t.chunks.len() >= 2));
    assert_eq!(brevis::decompress_with_ref(&archive, &kmaster, &Default::default()).unwrap(), kquants);
}

/// Version 10's golden archive holds `derive(q2_k)` and `derive(q3_k)` of llama-quantize's rows,
/// over chunks that cut super-blocks.
#[test]
fn golden_v10_archive_covers_low_bit_k_quants() {
    let (master, variant) = lowbit_files();
    let archive = golden_archive(10, "lowbit.brv", &variant);
    let a = brevis::Archive::open(&archive).unwrap();
    let programs: Vec<String> = (0..a.len()).map(|i| a.info(i).unwrap().program()).collect();
    assert_eq!(programs, ["derive(q2_k)[copyref]", "derive(q3_k)[copyref]"]);
    assert!(brevis::internals::index(&a).tensors.iter().all(|t| t.chunks.len() >= 2));
    assert_eq!(brevis::decompress_with_ref(&archive, &master, &Default::default()).unwrap(), variant);
}

/// Version 11's golden archive holds `palette` at two group sizes over tensors that span several
/// chunks, and its input is still what the generator makes.
#[test]
fn golden_v11_archive_covers_palette() {
    let (file, _) = palette_file();
    assert_programs_over_chunks(
        11,
        "palette.brv",
        &file,
        &["palette(32)[huffman, lanes, rans(prev, split), lanes(adj)]", "palette(16)[raw, raw, zstd(3), rans]"],
    );
}

/// Version 12's golden archive holds `rans(pop d)` on sparse masks over tensors that span
/// several chunks, with more than one context table in each whole chunk, and its input is still
/// what the generator makes.
#[test]
fn golden_v12_archive_covers_pop_contexts() {
    let (file, _) = pop_file();
    assert_programs_over_chunks(
        12,
        "pop.brv",
        &file,
        &[
            "sparse(8)[rans(pop 16), fields(e5,m10,k2)[lanes, raw, raw]]",
            "sparse(4)[rans(pop 1), fields(e8,m7,k1)[huffman, raw, raw]]",
        ],
    );
    let archive = golden_archive(12, "pop.brv", &file);
    let a = brevis::Archive::open(&archive).unwrap();
    for t in &brevis::internals::index(&a).tensors {
        let whole = &t.chunks[..t.chunks.len() - 1];
        for c in whole {
            // The chunk payload: the count of values, then the mask leaf's block, length-prefixed.
            let mut r = ByteReader::new(&archive[c.offset as usize..(c.offset + c.len) as usize]);
            r.varint().unwrap();
            let tables = brevis::internals::coder::rans::block_tables(r.bytes().unwrap()).unwrap();
            assert!(tables > 1, "a mask block of one table");
        }
    }
}

/// Version 14's golden archive holds split `lanes` blocks: each tensor's first chunk holds at
/// least `SPLIT_MIN` symbols in a leaf of kind 4 or 5, whose block decodes as a split block and
/// not as a block of one stream; its input is still what the generator makes.
#[test]
fn golden_v14_archive_covers_split_lanes() {
    use brevis::internals::coder::lanes::{self, Ctx, SPLIT_MIN};
    use brevis::internals::dsl::ops::lanes::Lanes;
    let (file, _) = halves_file();
    let archive = golden_archive(14, "halves.brv", &file);
    let a = brevis::Archive::open(&archive).unwrap();
    let found: Vec<String> = (0..a.len()).map(|i| a.info(i).unwrap().program()).collect();
    assert_eq!(found, ["lanes", "lanes(prev)", "fields(e8,m7,k3)[lanes, const(0x0), const(0x0)]"]);
    let index = brevis::internals::index(&a);
    // The root leaves' blocks: the payload is the leaf's length-prefixed block.
    for (t, ctx) in index.tensors.iter().zip([Ctx::None, Ctx::Prev]) {
        let Op::Lanes(Lanes { split: true, .. }) = t.program.op else { panic!("{}: not a split leaf", t.name) };
        let c = &t.chunks[0];
        assert!(c.elems as usize >= SPLIT_MIN);
        let mut r = ByteReader::new(&archive[c.offset as usize..(c.offset + c.len) as usize]);
        let block = r.bytes().unwrap();
        let isa = brevis::internals::simd::isa();
        let mut out = vec![0u16; c.elems as usize];
        assert_eq!(lanes::decode_block(isa, block, ctx, true, &mut out).unwrap(), block.len());
        let one = lanes::decode_block(isa, block, ctx, false, &mut vec![0u16; c.elems as usize]);
        assert!(one.map_or(true, |used| used != block.len()), "{}: decodes as one stream", t.name);
    }
    assert!(matches!(index.tensors[2].program.children[0].op, Op::Lanes(Lanes { split: true, .. })));
    assert_eq!(brevis::decompress(&archive).unwrap(), file);
}

/// Version 8's golden archive holds `sparse` at three group sizes over tensors that span several
/// chunks, and its input is still what the generator makes.
#[test]
fn golden_v8_archive_covers_sparse() {
    let (file, _) = sparse_file();
    assert_programs_over_chunks(
        8,
        "sparse.brv",
        &file,
        &[
            "sparse(4)[lanes, fields(e5,m10,k2)[rans(prev, split), raw, raw]]",
            "sparse(8)[rans(prev, split), fields(e8,m7,k1)[huffman, raw, raw]]",
            "sparse(16)[huffman, byteplanes[raw, raw, lanes, rans]]",
        ],
    );
}

/// The golden archive `name` of format version `v` holds `programs`, one per tensor, each over
/// several chunks, and decodes to `file`.
fn assert_programs_over_chunks(v: u16, name: &str, file: &[u8], programs: &[&str]) {
    let archive = golden_archive(v, name, file);
    let a = brevis::Archive::open(&archive).unwrap();
    let found: Vec<String> = (0..a.len()).map(|i| a.info(i).unwrap().program()).collect();
    assert_eq!(found, programs);
    for t in &brevis::internals::index(&a).tensors {
        assert!(t.chunks.len() >= 2, "the tensor spans several chunks");
    }
    assert_eq!(brevis::decompress(&archive).unwrap(), file);
}

/// Version 7's golden archive holds `rans` leaves with contexts in four runs (the programs say
/// so, and the serial reading of the same blocks gives other symbols), and its input is still
/// what the generator makes.
#[test]
fn golden_v7_archive_covers_split_rans_contexts() {
    let (file, _) = split_file();
    let back = format!("rans(back {CLASS_ROW}, split)");
    let programs = ["rans(prev, split)", &back, "fields(e8,m7,k1)[rans(prev, split), raw, raw]"];
    assert_programs_over_chunks(7, "split.brv", &file, &programs);
}

/// Version 6's golden archive holds `blocks(T, packed)` over every block type that has a packed
/// form, and its GGUF header in residue model 2; its input is still what the generator makes.
#[test]
fn golden_v6_archive_covers_packed_blocks_and_gathered_strings() {
    let (file, _) = packed_file();
    let archive = golden_archive(6, "packed.brv", &file);
    let a = brevis::Archive::open(&archive).unwrap();
    assert_block_programs(&a, &blocks::PACKED_TYPES, ", packed");
    let (model, found) = stored_residue_in_meta(&archive, &brevis::internals::index(&a).residue);
    assert_eq!(model, brevis::internals::container::header_model::GGUF_STRINGS);
    assert!(found, "the meta does not hold the residue in model 2");
}
