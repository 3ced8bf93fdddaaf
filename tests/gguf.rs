//! GGUF checkpoints: the container is parsed, its F32/F16/BF16 tensors get the
//! programs that the same tensors get in a safetensors file, quantized tensors are split into
//! their block fields (`blocks`), unknown ones are coded as bytes, and every other byte (metadata, non-zero padding) comes back; hostile GGUF
//! input round-trips or fails cleanly, never panics.

mod support;

use brevis::internals::dsl::build::*;
use brevis::internals::dsl::ops::blocks::{self, Blocks};
use brevis::internals::dsl::{Node, Op, Ty};
use brevis::internals::tensor::gguf;
use brevis::PriorSource;
use support::gguf::*;
use support::st::{self, Rng};

/// Type ids of ggml.
const F32: u32 = 0;
const F16: u32 = 1;
const Q8_0: u32 = 8;
const BF16: u32 = 30;

/// A small model: every metadata value type, float tensors of realistic weights (one of an odd
/// byte length, so that padding follows it), a Q8_0 tensor and an I32 one.
fn model(version: u32, alignment: u64) -> Gguf {
    let mut rng = Rng(version as u64 * 1000 + alignment);
    let mut m = Gguf::new(version, alignment);
    m.kv.extend(every_value_type());
    m.tensor("token_embd.weight", &[256, 64], BF16, bf16_bytes(&weights(&mut rng, 256 * 64, 0.05)));
    m.tensor("blk.0.attn_q.weight", &[128, 96], F16, f16_bytes(&weights(&mut rng, 128 * 96, 0.02)));
    m.tensor("blk.0.attn_norm.weight", &[7, 3], F16, f16_bytes(&weights(&mut rng, 21, 1.0)));
    m.tensor("blk.0.ffn_up.weight", &[64, 128], F32, f32_bytes(&weights(&mut rng, 64 * 128, 0.03)));
    m.tensor("blk.0.ffn_down.weight", &[256, 32], Q8_0, q8_0_bytes(&weights(&mut rng, 256 * 32, 0.03)));
    m.tensor("output_norm.weight", &[256], F32, f32_bytes(&weights(&mut rng, 256, 0.1)));
    m.tensor("pos_ids", &[40], 26, (0..40i32).flat_map(|i| i.to_le_bytes()).collect());
    m
}

/// (name, dtype, shape slowest first) of each tensor of `m`.
fn expected(m: &Gguf) -> Vec<(String, String, Vec<u64>)> {
    let dtype = |ty: u32| match ty {
        F32 => "F32",
        F16 => "F16",
        BF16 => "BF16",
        Q8_0 => "Q8_0",
        26 => "I32",
        _ => unreachable!(),
    };
    m.tensors
        .iter()
        .map(|t| (t.name.clone(), dtype(t.ty).to_string(), t.dims.iter().rev().copied().collect()))
        .collect()
}

/// Compresses `f`, checks that it comes back, and that the archive's GGUF view (what loaders get
/// through `brevis_archive_gguf_header`) is there exactly when the parser takes the file, with
/// the file's header bytes and every tensor at its offset.
fn round_trip(f: &[u8], opts: &brevis::Options) -> Vec<u8> {
    let a = brevis::compress(f, opts).unwrap();
    assert!(brevis::decompress(&a).unwrap() == f, "round trip of {} bytes changed them", f.len());
    let view = brevis::Archive::open(&a).unwrap().gguf().unwrap();
    match gguf::layout_from_prefix(f, f.len() as u64) {
        Ok(l) => {
            let v = view.expect("a GGUF file has a GGUF view");
            assert!(v.header == f[..l.data_start as usize]);
            let starts: Vec<u64> = v.tensors.iter().flatten().map(|t| l.data_start + t.data_offset).collect();
            assert_eq!(starts, l.spans.iter().map(|s| s.start).collect::<Vec<_>>());
        }
        Err(e) => assert!(view.is_none(), "{e:?}: not GGUF for the parser, GGUF for the archive"),
    }
    a
}

#[test]
fn gguf_v2_and_v3_files_round_trip_with_their_tensors_found() {
    for version in [2, 3] {
        for alignment in [32, 64, 8] {
            let m = model(version, alignment);
            let f = m.bytes();
            let what = format!("v{version}, alignment {alignment}");
            // The writer's padding is 0xA5, never zero.
            assert!(f.len() as u64 > m.data_start() && !(m.header().len() as u64).is_multiple_of(alignment), "{what}");
            let spans = gguf::layout(&f).unwrap();
            let offs = m.data_offsets();
            assert_eq!(spans.len(), m.tensors.len(), "{what}");
            for ((s, t), off) in spans.iter().zip(&m.tensors).zip(offs) {
                assert_eq!(s.name, t.name, "{what}");
                assert_eq!((s.start, s.len()), (m.data_start() + off, t.data.len() as u64), "{what}: {}", t.name);
            }
            let a = round_trip(&f, &brevis::Options::default());
            let arch = brevis::Archive::open(&a).unwrap();
            for (name, dtype, shape) in expected(&m) {
                let i = arch.find(&name).unwrap_or_else(|| panic!("{what}: {name} is not in the archive"));
                let info = arch.info(i).unwrap();
                assert_eq!((info.dtype, info.shape), (dtype.as_str(), shape.as_slice()), "{what}: {name}");
                let t = m.tensors.iter().find(|t| t.name == name).unwrap();
                assert!(arch.decode_tensor(i).unwrap() == t.data, "{what}: {name} decodes to other bytes");
            }
        }
    }
}

/// The float tensors of a GGUF file get the programs, and the sizes, that the same tensors (same
/// names, dtypes, shapes and bytes) get in a safetensors file.
#[test]
fn float_tensors_are_coded_like_the_same_safetensors_tensors() {
    let m = model(3, 32);
    let opts = brevis::Options::default().with_prior(PriorSource::Uniform);
    let a = round_trip(&m.bytes(), &opts);
    let floats: Vec<st::Tensor> = expected(&m)
        .into_iter()
        .zip(&m.tensors)
        .filter(|(_, t)| [F32, F16, BF16].contains(&t.ty))
        .map(|((name, dtype, shape), t)| st::tensor(&name, &dtype, &shape, t.data.clone()))
        .collect();
    let b = round_trip(&st::file(&floats, None), &opts);
    let (ga, sa) = (brevis::Archive::open(&a).unwrap(), brevis::Archive::open(&b).unwrap());
    for t in &floats {
        let g = ga.info(ga.find(&t.name).unwrap()).unwrap();
        let s = sa.info(sa.find(&t.name).unwrap()).unwrap();
        assert_eq!(g.program(), s.program(), "{}", t.name);
        assert_eq!(g.compressed_bytes, s.compressed_bytes, "{}", t.name);
        if t.data.len() >= 16384 {
            // A weight matrix gets a float program (its sign and exponent bits split from the
            // mantissa: fields or byte planes), not a byte coder.
            let p = g.program();
            assert!(p.starts_with("fields") || p.starts_with("byteplanes"), "{}: {p}", t.name);
            assert!(g.compressed_bytes < t.data.len() as u64 * 15 / 16, "{}: {} bytes", t.name, g.compressed_bytes);
        }
    }
}

/// A header larger than the parser's first read (a 30000-token vocabulary) is read whole.
#[test]
fn a_large_vocabulary_is_parsed_and_kept() {
    let mut m = model(3, 32);
    let tokens = (0..30000).map(|i| Value::Str(format!("tok{i}_{}", "x".repeat(i % 13)))).collect();
    m.kv.push(("tokenizer.ggml.tokens.big".into(), Value::Array(8, tokens)));
    let f = m.bytes();
    assert!(m.data_start() > 300_000);
    let a = round_trip(&f, &brevis::Options::default());
    let arch = brevis::Archive::open(&a).unwrap();
    assert_eq!(arch.info(arch.find("token_embd.weight").unwrap()).unwrap().dtype, "BF16");
    // The archive is much smaller than the file: the vocabulary is compressed, not stored.
    assert!((a.len() as u64) < m.data_start() / 2 + (f.len() as u64 - m.data_start()), "{} bytes", a.len());
    // The header stays in the residue, coded whole in the index's frame: no entry starts before
    // the data section, and the archive pays for it about what zstd -19 of the header costs.
    assert!(brevis::internals::index(&arch).tensors.iter().all(|t| t.offset >= m.data_start()));
    let tensors: u64 = (0..arch.len()).map(|i| arch.info(i).unwrap().compressed_bytes).sum();
    let header_zstd = zstd::bulk::compress(&f[..m.data_start() as usize], 19).unwrap().len() as u64;
    let meta = a.len() as u64 - tensors;
    assert!(meta <= header_zstd + 2048, "header and index {meta} bytes, zstd -19 of the header {header_zstd}");
}

/// Byte offset of tensor info `k` in `m`'s header.
fn info_at(m: &Gguf, k: usize) -> usize {
    let mut head = m.clone();
    head.tensors.truncate(k);
    head.offsets = head.offsets.map(|o| o[..k].to_vec());

    head.header().len()
}

/// `f` with the little-endian `value` written over bytes `at..at + width`.
fn patched(f: &[u8], at: usize, value: u64, width: usize) -> Vec<u8> {
    let mut g = f.to_vec();
    g[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
    g
}

/// A small file of two tensors, for the sweeps.
fn small() -> Gguf {
    let mut m = Gguf::new(3, 32);
    m.kv.extend(every_value_type());
    let mut rng = Rng(5);
    m.tensor("a.weight", &[8, 4], F16, f16_bytes(&weights(&mut rng, 32, 0.1)));
    m.tensor("b.weight", &[32, 2], Q8_0, q8_0_bytes(&weights(&mut rng, 64, 0.1)));
    m
}

/// A prefix that ends inside the header asks for more of the file; the whole header parses.
#[test]
fn a_prefix_of_the_header_asks_for_more() {
    let (f, head) = (small().bytes(), small().header().len());
    for n in 0..head {
        assert_eq!(gguf::layout_from_prefix(&f[..n], f.len() as u64), Err(gguf::Stop::Short), "{n} bytes");
    }
    let l = gguf::layout_from_prefix(&f[..head], f.len() as u64).unwrap();
    assert_eq!((l.version, l.alignment, l.data_start, l.spans.len()), (3, 32, small().data_start(), 2));
}

#[test]
fn every_truncation_round_trips() {
    let f = small().bytes();
    let data_start = small().data_start() as usize;
    let opts = brevis::Options::default().with_threads(1);
    for n in 0..=f.len() {
        let r = gguf::layout(&f[..n]);
        if n < data_start {
            assert!(r.is_err(), "a prefix of {n} bytes parsed");
        }
        round_trip(&f[..n], &opts);
    }
}

/// Forged counts, lengths, dimensions, types and offsets: the parser refuses them (or, for
/// tensors out of order and unknown types, takes them), and every file round-trips.
#[test]
fn hostile_headers_round_trip_or_are_refused() {
    let m = small();
    let f = m.bytes();
    let info0 = info_at(&m, 0);
    let name0 = m.tensors[0].name.len();
    let (ndims0, type0) = (info0 + 8 + name0, info0 + 8 + name0 + 4 + 8 * 2);
    let huge = [u64::MAX, 1 << 63, 1 << 40, f.len() as u64];
    let mut refused: Vec<(String, Vec<u8>)> = Vec::new();
    for h in huge {
        refused.push((format!("n_tensors {h}"), patched(&f, 8, h, 8)));
        refused.push((format!("n_kv {h}"), patched(&f, 16, h, 8)));
        refused.push((format!("key length {h}"), patched(&f, 24, h, 8)));
        refused.push((format!("tensor name length {h}"), patched(&f, info0, h, 8)));
        refused.push((format!("dim {h}"), patched(&f, ndims0 + 4, h, 8)));
        refused.push((format!("offset {h}"), patched(&f, type0 + 4, h, 8)));
    }
    for n in [5, 64, u32::MAX as u64] {
        refused.push((format!("n_dims {n}"), patched(&f, ndims0, n, 4)));
    }
    for v in [0u64, 1, 4, 0x0300_0000] {
        refused.push((format!("version {v}"), patched(&f, 4, v, 4)));
    }
    refused.push(("value type 13".into(), patched(&f, 24 + 8 + "general.architecture".len(), 13, 4)));
    refused.push(("the first tensor's rows not whole Q8_0 blocks".into(), patched(&f, type0, Q8_0 as u64, 4)));
    // A tokens array claiming more strings than the file holds.
    let tokens_key = f.windows(21).position(|w| w == b"tokenizer.ggml.tokens").unwrap();
    refused.push(("array length".into(), patched(&f, tokens_key + 21 + 4 + 4, 1 << 40, 8)));
    // Overlapping tensors, and a tensor past the end.
    let mut over = m.clone();
    over.offsets = Some(vec![0, 32]);
    refused.push(("overlap".into(), over.bytes()));
    let mut past = m.clone();
    past.offsets = Some(vec![0, 4096]);
    let mut past_bytes = past.bytes();
    past_bytes.truncate(past.data_start() as usize + 4096 + 10);
    refused.push(("past the end".into(), past_bytes));
    for (what, g) in &refused {
        assert!(gguf::layout(g).is_err(), "{what}: parsed");
        round_trip(g, &brevis::Options::default().with_threads(1));
    }
}

/// A u8 in `levels` nested arrays.
fn nested(levels: usize) -> Value {
    let mut v = Value::Array(0, vec![Value::U8(1)]);
    for _ in 1..levels {
        v = Value::Array(9, vec![v]);
    }
    v
}

#[test]
fn bad_alignments_and_deep_arrays_are_refused() {
    let mut cases = Vec::new();
    for (what, v) in
        [("0", Value::U32(0)), ("3", Value::U32(3)), ("a u64", Value::U64(32)), ("a string", Value::Str("32".into()))]
    {
        let mut m = small();
        m.kv.push(("general.alignment".into(), v));
        cases.push((format!("alignment {what}"), m.bytes()));
    }
    let mut m = small();
    m.kv.push(("test.deep".into(), nested(2000)));
    cases.push(("arrays nested 2000 deep".into(), m.bytes()));
    for (what, g) in &cases {
        assert!(gguf::layout(g).is_err(), "{what}: parsed");
        round_trip(g, &brevis::Options::default().with_threads(1));
    }
    // 16 levels are fine.
    let mut m = small();
    m.kv.push(("test.nested16".into(), nested(16)));
    assert_eq!(gguf::layout(&m.bytes()).unwrap().len(), 2);
}

/// Tensors listed out of file order are taken in file order; a tensor of an unknown type is an
/// opaque range up to the next tensor; an empty tensor list leaves the file as bytes.
#[test]
fn out_of_order_and_unknown_tensors_are_kept() {
    let mut m = small();
    m.offsets = Some(vec![96, 0]);
    let f = m.bytes();
    let spans = gguf::layout(&f).unwrap();
    assert_eq!(spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["b.weight", "a.weight"]);
    let a = round_trip(&f, &brevis::Options::default());
    let arch = brevis::Archive::open(&a).unwrap();
    assert_eq!(arch.info(arch.find("a.weight").unwrap()).unwrap().dtype, "F16");

    let mut m = small();
    m.tensors[1].ty = 77;
    let f = m.bytes();
    let spans = gguf::layout(&f).unwrap();
    assert_eq!(spans[1].dtype.name(), "GGML_TYPE_77");
    assert_eq!(spans[1].end, f.len() as u64, "an unknown type runs to the end of the file");
    m.tensors[0].ty = 4; // removed from ggml: unknown, runs to the next tensor
    let f = m.bytes();
    let spans = gguf::layout(&f).unwrap();
    assert_eq!((spans[0].dtype.name(), spans[0].end), ("GGML_TYPE_4", spans[1].start));
    let a = round_trip(&f, &brevis::Options::default());
    let arch = brevis::Archive::open(&a).unwrap();
    assert_eq!(arch.info(arch.find("b.weight").unwrap()).unwrap().dtype, "GGML_TYPE_77");

    let mut m = small();
    m.tensors.clear();
    assert!(gguf::layout(&m.bytes()).unwrap().is_empty());
    round_trip(&m.bytes(), &brevis::Options::default());
}

/// Files written by the reference writer (`gguf` 0.19, from llama.cpp; the fuzz seeds) parse as
/// it laid them out, the v2 copy included, and round-trip.
#[test]
fn files_of_the_reference_writer_parse() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/gguf/");
    for (file, names) in [
        ("small_v3.gguf", &["a.weight", "b.weight", "c.bias"][..]),
        ("small_v2.gguf", &["a.weight", "b.weight", "c.bias"][..]),
        ("align64_f32.gguf", &["x", "y"][..]),
    ] {
        let f = std::fs::read(format!("{dir}{file}")).unwrap();
        let l = gguf::layout_from_prefix(&f, f.len() as u64).unwrap();
        assert_eq!(l.spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), names, "{file}");
        assert_eq!(l.data_start % l.alignment, 0, "{file}");
        assert_eq!(l.alignment, if file.starts_with("align64") { 64 } else { 32 }, "{file}");
        let a = round_trip(&f, &brevis::Options::default());
        let arch = brevis::Archive::open(&a).unwrap();
        for s in &l.spans {
            let i = arch.find(&s.name).unwrap();
            assert!(arch.decode_tensor(i).unwrap() == f[s.start as usize..s.end as usize], "{file}: {}", s.name);
        }
    }
    let f = std::fs::read(format!("{dir}small_v3.gguf")).unwrap();
    let spans = gguf::layout(&f).unwrap();
    let got: Vec<(&str, Vec<u64>, u64)> = spans.iter().map(|s| (s.dtype.name(), s.shape.clone(), s.len())).collect();
    assert_eq!(got, [("F16", vec![2, 8], 32), ("Q8_0", vec![1, 32], 34), ("F32", vec![3], 12)]);
}

/// `brevis inspect` lists GGUF tensors with their ggml type names and shapes (slowest first),
/// then the GGUF header and the tensors by ggml type.
#[test]
fn inspect_shows_ggml_types() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = small();
    m.tensor("c.weight", &[256], 12, vec![7; 144]);
    std::fs::write(dir.path().join("m.gguf"), m.bytes()).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_brevis")).current_dir(dir.path()).args(args).output();
        let out = out.unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["compress", "-q", "m.gguf"]);
    let listing = run(&["inspect", "m.gguf.brv"]);
    for (name, dtype, shape) in
        [("a.weight", "F16", "[4, 8]"), ("b.weight", "Q8_0", "[2, 32]"), ("c.weight", "Q4_K", "[256]")]
    {
        let line = listing.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}:\n{listing}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((cols[1], cols[2..].join(" ").starts_with(shape)), (dtype, true), "{line}");
    }
    // The GGUF summary: version, alignment, header size, and the tensors by ggml type id.
    let head = format!(
        "GGUF v{}, alignment {}: header, metadata and tensor infos {} bytes, kept in the index",
        m.version,
        m.alignment,
        m.data_start()
    );
    assert!(listing.contains(&head), "{listing}");
    for (id, name) in [(1, "F16"), (8, "Q8_0"), (12, "Q4_K")] {
        assert!(listing.contains(&format!("ggml type {id:>2} {name:<8}     1 tensors")), "{id}:\n{listing}");
    }
    run(&["verify", "m.gguf.brv", "m.gguf"]);
}

/// Compressing a file reads the GGUF header in growing windows; a header larger than the memory
/// limit leaves the file a byte stream (still restored exactly), one within it is parsed.
#[test]
fn a_header_beyond_the_memory_limit_leaves_the_file_as_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = model(3, 32);
    let tokens = (0..20000).map(|i| Value::Str(format!("token{i}"))).collect();
    m.kv.push(("tokenizer.ggml.tokens.big".into(), Value::Array(8, tokens)));
    let f = m.bytes();
    assert!(m.data_start() > 256 << 10);
    let path = dir.path().join("m.gguf");
    std::fs::write(&path, &f).unwrap();
    for (limit, parsed) in [(128u64 << 10, false), (64 << 20, true)] {
        let opts = brevis::Options::default().with_memory_limit(limit).with_threads(1);
        let (brv, back) = (dir.path().join("m.brv"), dir.path().join("m.out"));
        brevis::compress_file(&std::fs::File::open(&path).unwrap(), &mut std::fs::File::create(&brv).unwrap(), &opts)
            .unwrap();
        let dopts = brevis::DecodeOptions::default().with_memory_limit(limit).with_threads(1);
        let out = &mut std::fs::File::create(&back).unwrap();
        brevis::decompress_file(&std::fs::File::open(&brv).unwrap(), out, &dopts).unwrap();
        assert!(std::fs::read(&back).unwrap() == f, "limit {limit}: the file came back changed");
        let a = std::fs::read(&brv).unwrap();
        let found = brevis::Archive::open(&a).unwrap().find("token_embd.weight").is_some();
        assert_eq!(found, parsed, "limit {limit}");
    }
}

/// A GGUF file as the reference of another GGUF file (a fine-tune of it): its tensors are found
/// by name, and an unchanged tensor is coded against its base.
#[test]
fn a_gguf_file_serves_as_a_reference() {
    let base = model(3, 32);
    let mut new = base.clone();
    let up = new.tensors.iter_mut().find(|t| t.name == "blk.0.ffn_up.weight").unwrap();
    for (k, b) in up.data.iter_mut().enumerate() {
        // A fine-tune: the low mantissa byte of every tenth weight nudged.
        if k % 40 == 0 {
            *b ^= 1;
        }
    }
    let (base, new) = (base.bytes(), new.bytes());
    let a = brevis::compress_with_ref(&new, &base, &brevis::Options::default()).unwrap();
    let back = brevis::decompress_with_ref(&a, &base, &brevis::DecodeOptions::default()).unwrap();
    assert!(back == new);
    let arch = brevis::Archive::open(&a).unwrap();
    let refs: Vec<&str> = brevis::internals::index(&arch)
        .tensors
        .iter()
        .filter_map(|t| t.reference.as_ref().map(|r| r.name.as_str()))
        .collect();
    assert!(refs.contains(&"token_embd.weight") && refs.contains(&"blk.0.ffn_up.weight"), "{refs:?}");
    assert!(a.len() < 2048, "{} bytes against a base of {}", a.len(), base.len());
}

/// The `blocks` program imposed on a tensor of ggml type `id`: the edge bytes raw, fp16 scales
/// split as floats, wider fields raw, the others through a leaf that depends on `k`.
fn blocks_program(id: u32, k: usize) -> Node {
    let op = Blocks::new(id).unwrap();
    let leaves = [rans(), rans_prev(), huffman(), lanes(), lanes_adj()];
    let kids = op
        .child_types(Ty::u(8))
        .unwrap()
        .iter()
        .enumerate()
        .map(|(j, t)| match (j, t.bits) {
            (0, _) => raw(),
            (_, 16) => fields(5, 10, 2, [rans(), raw(), raw()]),
            (_, b) if b > 16 => raw(),
            _ => leaves[(j + k) % leaves.len()].clone(),
        })
        .collect();
    Node::new(Op::Blocks(op), kids)
}

/// `blocks_program` for the tensors whose dtype is a ggml type that `blocks` splits.
fn impose_blocks(k: usize) -> impl Fn(usize, &brevis::internals::synth::TensorView) -> Option<Node> + Sync {
    move |_, v| {
        gguf::ggml_type_named(v.dtype.name()).filter(|t| Blocks::new(t.id).is_some()).map(|t| blocks_program(t.id, k))
    }
}

/// Every block type that `blocks` splits round-trips through it, whatever the chunk size (chunks
/// that start and end inside a block: the edge bytes), with several leaves under it.
#[test]
fn quantized_blocks_round_trip_at_every_chunk_phase() {
    let f = quant_model(5, 4, 9).bytes();
    for (k, chunk_bytes) in [3usize, 100, 1000, 1 << 20].into_iter().enumerate() {
        let opts = brevis::Options::default().with_chunk_bytes(chunk_bytes).with_threads(1);
        let a = brevis::internals::compress_with_programs(&f, &opts, &impose_blocks(k)).unwrap();
        assert!(brevis::decompress(&a).unwrap() == f, "chunk size {chunk_bytes}");
        let arch = brevis::Archive::open(&a).unwrap();
        for id in blocks::TYPES {
            let i = arch.find(&format!("blk.{id}.weight")).unwrap();
            let name = gguf::ggml_type(id).unwrap().name;
            assert!(arch.info(i).unwrap().program().starts_with(&format!("blocks({name})")));
        }
    }
}

/// The search splits quantized tensors into their block fields (realistic Q8_0 weights), and
/// every tensor of every block type round-trips under the programs it picks.
#[test]
fn the_search_splits_quantized_blocks() {
    let mut m = quant_model(6, 16, 8);
    let mut rng = Rng(11);
    m.tensor("ffn_down.weight", &[512, 256], Q8_0, q8_0_bytes(&weights(&mut rng, 512 * 256, 0.03)));
    let f = m.bytes();
    let a = round_trip(&f, &brevis::Options::default());
    let arch = brevis::Archive::open(&a).unwrap();
    let p = arch.info(arch.find("ffn_down.weight").unwrap()).unwrap().program();
    assert!(p.starts_with("blocks(Q8_0)["), "{p}");
    let q8 = &brevis::internals::index(&arch).tensors[arch.find("ffn_down.weight").unwrap()];
    // Near-uniform synthetic weights leave little to find (96.8% today), but the scales do.
    assert!(q8.compressed_len() < q8.nbytes * 98 / 100, "{} of {} bytes", q8.compressed_len(), q8.nbytes);
}

/// A tensor of a quantized dtype that is not a whole number of blocks is coded as bytes (never
/// split), and comes back.
#[test]
fn tensors_of_partial_blocks_are_bytes() {
    let mut rng = Rng(12);
    let whole = quant_blocks(&mut rng, 18, 300);
    let mut odd = quant_blocks(&mut rng, 18, 300);
    odd.truncate(odd.len() - 5);
    let f = st::file(
        &[
            st::tensor("whole", "Q4_0", &[whole.len() as u64], whole),
            st::tensor("odd", "Q4_0", &[odd.len() as u64], odd),
        ],
        None,
    );
    let a = round_trip(&f, &brevis::Options::default());
    let arch = brevis::Archive::open(&a).unwrap();
    let program = |name| arch.info(arch.find(name).unwrap()).unwrap().program();
    assert!(program("whole").starts_with("blocks(Q4_0)"), "{}", program("whole"));
    assert!(!program("odd").contains("blocks"), "{}", program("odd"));
    // The operator itself refuses what it cannot split.
    assert!(Node::parse(&blocks_program(2, 0).to_bytes(), Ty::u(16)).is_err(), "blocks over 16-bit words");
}

/// Damaged archives of `blocks` programs fail with an error (never a panic, never other bytes),
/// and a program naming a block type `blocks` does not know is refused.
#[test]
fn damaged_blocks_archives_fail_cleanly() {
    let f = quant_model(7, 2, 8).bytes();
    let opts = brevis::Options::default().with_chunk_bytes(1000).with_threads(1);
    let a = brevis::internals::compress_with_programs(&f, &opts, &impose_blocks(1)).unwrap();
    let mut errors = 0;
    for at in (16..a.len()).step_by(7) {
        let mut d = a.clone();
        d[at] ^= 0x24;
        match brevis::decompress(&d) {
            Ok(out) => assert!(out == f, "a flip at {at} decoded to other bytes"),
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 0);
    for id in [0u64, 4, 16, 40, 1 << 40] {
        let mut p = vec![Blocks::ID];
        brevis::internals::coder::bitio::put_varint(&mut p, id);
        p.push(0x01);
        assert!(Node::parse(&p, Ty::u(8)).is_err(), "type {id}");
    }
    // Cut programs: every prefix of a valid one is refused.
    let p = blocks_program(12, 0).to_bytes();
    for n in 0..p.len() {
        assert!(Node::parse(&p[..n], Ty::u(8)).is_err(), "prefix {n}");
    }
}
