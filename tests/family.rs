//! Model families: casts and GGUF quantizations of a master coded against it (`derive`), on real
//! weights (the committed silero fixture and variants of it written by the reference `gguf`
//! package: `tests/fixtures/make_silero_family.py`), and on the development corpus's MiniLM
//! family when it is there.

mod support;
use sha2::{Digest, Sha256};
use support::skip;
use support::tools::{corpus_dir, fixture, root};

fn read_checked(path: &std::path::Path, sha256: &str) -> Vec<u8> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(&b)), sha256, "{} is not the committed file", path.display());
    b
}

fn master() -> Vec<u8> {
    read_checked(&fixture(), "c59271c284ae9c8335d795d60e0bfdb71aaaceec578d9bd9ffc1b8153c319ea1")
}

fn family() -> Vec<u8> {
    read_checked(
        &root().join("tests/fixtures/silero_family.gguf"),
        "8276b66126dd2b7a9b4b7c81b46669718148b9608e6271bd8afd9e90f357ad5f",
    )
}

/// Each tensor's program and the name of its reference tensor.
fn programs(archive: &[u8]) -> Vec<(String, String, Option<String>)> {
    let a = brevis::Archive::open(archive).unwrap();
    (0..a.len())
        .map(|i| {
            let t = a.info(i).unwrap();
            (t.name.to_string(), t.program(), t.reference.map(|r| r.name.to_string()))
        })
        .collect()
}

#[test]
fn casts_and_quantizations_of_a_real_master_cost_almost_nothing() {
    let (master, variant) = (master(), family());
    let opts = brevis::Options::default();
    let archive = brevis::compress_with_ref(&variant, &master, &opts).unwrap();
    let alone = brevis::compress(&variant, &opts).unwrap();
    assert!(archive.len() * 100 < variant.len(), "{} of {} bytes", archive.len(), variant.len());
    assert!(archive.len() * 50 < alone.len(), "{} against {} alone", archive.len(), alone.len());
    let d = brevis::DecodeOptions::default();
    assert_eq!(brevis::decompress_with_ref(&archive, &master, &d).unwrap(), variant);
    // The master may be given as an archive too.
    let master_archive = brevis::compress(&master, &opts).unwrap();
    assert_eq!(brevis::decompress_with_ref(&archive, &master_archive, &d).unwrap(), variant);
    let found = programs(&archive);
    let program = |name: &str| found.iter().find(|p| p.0 == name).unwrap_or_else(|| panic!("{name}")).clone();
    // Every quantization and cast is exactly what the reference quantizers make of the master.
    for (name, kind) in [
        ("stft_conv.weight", "q8_0"),
        ("lstm_cell.weight_ih", "q4_0"),
        ("conv1.bias", "q5_0"),
        ("lstm_cell.bias_ih", "q5_1"),
        ("conv1.weight", "bf16"),
        ("conv2.weight", "f16"),
    ] {
        let (_, p, r) = program(name);
        assert_eq!(p, format!("derive({kind})[copyref]"), "{name}");
        assert_eq!(r.as_deref(), Some(name));
    }
    // A renamed tensor is found by its content.
    let (_, p, r) = program("blk.0.attn_k.weight");
    assert_eq!((p.as_str(), r.as_deref()), ("derive(q4_1)[copyref]", Some("lstm_cell.weight_hh")));
    // A cast that rounded otherwise in places: the misses are coded, the rest predicted.
    let (_, p, _) = program("conv4.weight");
    assert!(p.starts_with("derive(f16)[") && p != "derive(f16)[copyref]", "{p}");
    // Without the master, a clear error.
    let e = brevis::decompress(&archive).unwrap_err().to_string();
    assert!(e.contains("reference"), "{e}");
}

/// K-quants as llama.cpp's own `llama-quantize` makes them (Q4_K, Q5_K and Q6_K rows of
/// SmolLM2-135M-Instruct, and Q2_K and Q3_K rows: tests/fixtures/make_smollm2_kquants.py) are
/// exactly the reference quantizers' output of their BF16 master.
#[test]
fn k_quants_of_llama_quantize_are_derived_exactly() {
    let dir = root().join("tests/fixtures");
    // Each file of a pair with its sha256 (tests/fixtures/README.md).
    let pair = |prefix: &str, master: &str, variant: &str| {
        (
            read_checked(&dir.join(format!("{prefix}_master.gguf")), master),
            read_checked(&dir.join(format!("{prefix}.gguf")), variant),
        )
    };
    let (master, variant) = pair(
        "smollm2_kquants",
        "2756f56015136a9d933679d4fc33f1aa0d83186255934d14917df4a1a6fc7718",
        "3bd089d94f2d095c9e6cf49b98777c0c644ed5f5db25127cb5db6af76d441bd1",
    );
    let (low_master, low) = pair(
        "smollm2_lowbit",
        "0ff18b3623b42c01ff0e45485f47b0d989b62b5f8174b66fddda5baa0914a077",
        "0ef897b35842c7dead2059127dc4f45d516748db85906dfadfac476204a4d054",
    );
    for chunk in [1 << 20, 5000] {
        let opts = brevis::Options::default().with_chunk_bytes(chunk);
        let archive = brevis::compress_with_ref(&variant, &master, &opts).unwrap();
        let found: Vec<String> = programs(&archive).into_iter().map(|p| p.1).collect();
        assert_eq!(found, ["derive(q4_k)[copyref]", "derive(q6_k)[copyref]", "derive(q5_k)[copyref]"], "{chunk}");
        assert_eq!(brevis::decompress_with_ref(&archive, &master, &Default::default()).unwrap(), variant);
        // Q2_K and Q3_K (made with `--pure`).
        let archive = brevis::compress_with_ref(&low, &low_master, &opts).unwrap();
        let found: Vec<String> = programs(&archive).into_iter().map(|p| p.1).collect();
        assert_eq!(found, ["derive(q2_k)[copyref]", "derive(q3_k)[copyref]"], "{chunk}");
        assert_eq!(brevis::decompress_with_ref(&archive, &low_master, &Default::default()).unwrap(), low);
    }
}

/// IQ4_NL and IQ4_XS as `llama-quantize` makes them without an importance matrix (rows of
/// SmolLM2-135M-Instruct: tests/fixtures/make_smollm2_iq4.py) are exactly its quantizers' output
/// of their BF16 master, also where chunks cut blocks and the last blocks of a row do not fill
/// eight lanes (rows of 18 IQ4_NL blocks).
#[test]
fn iq4_of_llama_quantize_is_derived_exactly() {
    let dir = root().join("tests/fixtures");
    let master = read_checked(
        &dir.join("smollm2_iq4_master.gguf"),
        "05ce1b705fea3bac49f8e9a60695f16318e3d0b373acf812b76ca2e319d0c286",
    );
    let variant =
        read_checked(&dir.join("smollm2_iq4.gguf"), "99ce3af183d610a7e6a9af49daa30d75614dbeb24952bc0131bfbb4e4ef64084");
    for chunk in [1 << 20, 1000] {
        let opts = brevis::Options::default().with_chunk_bytes(chunk);
        let archive = brevis::compress_with_ref(&variant, &master, &opts).unwrap();
        let found: Vec<String> = programs(&archive).into_iter().map(|p| p.1).collect();
        assert_eq!(found, ["derive(iq4_nl)[copyref]", "derive(iq4_xs)[copyref]"], "{chunk}");
        assert_eq!(brevis::decompress_with_ref(&archive, &master, &Default::default()).unwrap(), variant);
    }
}

/// Chunks that cut quantization blocks: each chunk's prediction is its slice of the whole one.
#[test]
fn small_chunks_cut_blocks_and_still_round_trip() {
    let (master, variant) = (master(), family());
    for chunk in [1000, 4096, 1 << 16] {
        let opts = brevis::Options::default().with_chunk_bytes(chunk);
        let archive = brevis::compress_with_ref(&variant, &master, &opts).unwrap();
        let a = brevis::Archive::open(&archive).unwrap();
        let q8 = a.find("stft_conv.weight").unwrap();
        assert!(brevis::internals::index(&a).tensors[q8].chunks.len() >= 2 || chunk > 70176);
        assert_eq!(brevis::decompress_with_ref(&archive, &master, &Default::default()).unwrap(), variant, "{chunk}");
    }
}

/// A variant made by another rounding everywhere still round-trips: the prediction is dropped
/// (or its misses coded), never trusted.
#[test]
fn a_variant_of_another_quantizer_round_trips() {
    let master = master();
    let variant = family();
    // Flip a low bit in every fourth byte of the Q8_0 tensor's data (its quants and scales).
    let spans = brevis::internals::tensor::gguf::layout(&variant).unwrap();
    let s = spans.iter().find(|s| s.name == "stft_conv.weight").unwrap();
    let mut other = variant.clone();
    for i in (s.start as usize..s.end as usize).step_by(4) {
        other[i] ^= 1;
    }
    let archive = brevis::compress_with_ref(&other, &master, &brevis::Options::default()).unwrap();
    assert_eq!(brevis::decompress_with_ref(&archive, &master, &Default::default()).unwrap(), other);
}

/// The development corpus's MiniLM family against its fp32 master: every variant at most 2% of
/// its size.
#[test]
fn minilm_family_against_its_master() {
    let Some(dir) = corpus_dir() else {
        return skip("the development corpus is not built (../shared/corpus/fetch_corpus.py, fetch_gguf.py)");
    };
    let master = std::fs::read(dir.join("language/all-MiniLM-L6-v2.safetensors")).unwrap();
    let mut variants: Vec<std::path::PathBuf> =
        ["bf16", "fp16"].iter().map(|v| dir.join(format!("derived/all-MiniLM-L6-v2_{v}.safetensors"))).collect();
    variants.extend(
        ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]
            .iter()
            .map(|v| dir.join(format!("gguf/minilm_{v}.gguf"))),
    );
    let opts = brevis::Options::default();
    for v in variants {
        let Ok(variant) = std::fs::read(&v) else {
            return skip(&format!("{} is missing (../shared/corpus/fetch_gguf.py)", v.display()));
        };
        let archive = brevis::compress_with_ref(&variant, &master, &opts).unwrap();
        assert!(archive.len() * 50 <= variant.len(), "{}: {} of {}", v.display(), archive.len(), variant.len());
        assert_eq!(brevis::decompress_with_ref(&archive, &master, &Default::default()).unwrap(), variant);
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_brevis")
}

/// `compress -r` of a folder holding a master and a variant codes the variant against the master;
/// `decompress -r` restores both (the variant after the master); without the master's archive
/// the variant fails with an error that names the reference, leaving no output; `--no-family`
/// codes each file alone.
#[test]
fn folders_as_families_on_the_command_line() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::create_dir(p("in")).unwrap();
    std::fs::write(p("in/silero.safetensors"), master()).unwrap();
    std::fs::write(p("in/silero_family.gguf"), family()).unwrap();
    let run = |args: &[&std::path::Path]| {
        let o = Command::new(bin()).args(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    let path = std::path::Path::new;
    let (ok, err) = run(&[path("compress"), path("-r"), &p("in"), path("-o"), &p("out")]);
    assert!(ok, "{err}");
    assert!(err.contains("silero_family.gguf against"), "{err}");
    let size = |f: &str| std::fs::metadata(p(f)).unwrap().len();
    assert!(size("out/silero_family.gguf.brv") * 100 < family().len() as u64, "{}", size("out/silero_family.gguf.brv"));
    let (ok, err) = run(&[path("decompress"), path("-r"), &p("out"), path("-o"), &p("back")]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(p("back/silero.safetensors")).unwrap(), master());
    assert_eq!(std::fs::read(p("back/silero_family.gguf")).unwrap(), family());
    // The master's archive missing: the variant fails clearly and leaves nothing.
    std::fs::remove_file(p("out/silero.safetensors.brv")).unwrap();
    let (ok, err) = run(&[path("decompress"), path("-r"), &p("out"), path("-o"), &p("lone")]);
    assert!(!ok);
    assert!(err.contains("reference") && err.contains("silero_family.gguf.brv"), "{err}");
    assert!(!p("lone/silero_family.gguf").exists());
    // Each file alone.
    let (ok, err) = run(&[path("compress"), path("-r"), path("--no-family"), &p("in"), path("-o"), &p("alone")]);
    assert!(ok, "{err}");
    assert!(size("alone/silero_family.gguf.brv") * 2 > size("out/silero_family.gguf.brv") * 100);
    assert_eq!(brevis::decompress(&std::fs::read(p("alone/silero_family.gguf.brv")).unwrap()).unwrap(), family());
}
