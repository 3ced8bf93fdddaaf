//! The real llama.cpp runs models from Brevis archives (`.gguf.brv`) with the same output as from
//! the original files: llama.cpp is built from the source PyPI's llama-cpp-python ships
//! (`scripts/llama.sh`, cached in `target/llama.cpp/`), and `bindings/cpp/llama_run.cpp` loads a
//! model through `bindings/cpp/brevis_llama.hpp` (the archive decoded into a memfd that llama.cpp
//! maps). On SmolLM2-135M-Instruct Q4_1 (the development corpus's GGUF file) and a BF16 model
//! that llama.cpp's `llama-quantize` writes from it, each from archives made at the default
//! level and at `fast`:
//! - the logits of the first step are bit-identical and greedy generation gives the same 32
//!   tokens, from the archive and from the file;
//! - the text is what llama.cpp's own `llama-simple` prints for the original file;
//! - no file is opened for writing (strace); peak RSS stays within 1.3x the model's size for the
//!   BF16 model, and loading from an archive adds at most 0.3x the model's size to what loading the
//!   file takes (on the 98 MB Q4_1 model llama.cpp's own memory is a third of the model's).
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
    let (lib, bin) = (lib_dir(), dir.join("build/bin"));
    run(
        "c++ llama_run",
        Command::new("c++")
            .args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"])
            .arg(root().join("bindings/cpp/llama_run.cpp"))
            .arg("-I")
            .arg(root().join("include"))
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
            .arg(&exe),
    );
    Ok(Llama { dir, run: exe })
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
fn generate(l: &Llama, model: &Path, scratch: &Path) -> (String, Vec<u8>, String) {
    let (logits, tokens) = (scratch.join("logits.f32"), scratch.join("tokens.txt"));
    let n = TOKENS.to_string();
    let stdout = run("llama_run", Command::new(&l.run).arg(model).args(["-n", &n, PROMPT]));
    run(
        "llama_run --ignore-eog",
        Command::new(&l.run)
            .arg(model)
            .args(["-n", &n, "--ignore-eog", "--logits"])
            .arg(&logits)
            .arg("--tokens")
            .arg(&tokens)
            .arg(PROMPT),
    );
    (stdout, std::fs::read(&logits).unwrap(), std::fs::read_to_string(&tokens).unwrap())
}

/// The peak RSS (VmHWM) that `llama_run` reports for a short generation from `model`, in bytes.
fn peak_rss(l: &Llama, model: &Path) -> u64 {
    let out = Command::new(&l.run).arg(model).args(["-n", "4", PROMPT]).env_remove("LD_LIBRARY_PATH").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "llama_run {}: {err}", model.display());
    let kb = err.rsplit("peak RSS ").next().and_then(|s| s.split(' ').next()).and_then(|s| s.parse::<u64>().ok());
    kb.unwrap_or_else(|| panic!("no peak RSS in:\n{err}")) * 1024
}

/// The original model and its archives at the default level and at `fast` give the same logits,
/// tokens and text, which is also what llama.cpp's `llama-simple` prints for the original.
fn same_output(l: &Llama, model: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let (text, logits, tokens) = generate(l, model, dir.path());
    let n = tokens.lines().count();
    assert_eq!(n, TOKENS, "the model generated {n} tokens, not {TOKENS}: {tokens}");
    assert!(logits.len() >= 4 * 1000, "{} bytes of logits", logits.len());
    let simple = run(
        "llama-simple",
        Command::new(l.bin("llama-simple")).arg("-m").arg(model).args(["-n", &TOKENS.to_string(), PROMPT]),
    );
    assert_eq!(simple, text, "llama_run and llama-simple disagree on the original file");
    for level in [brevis::Level::Default, brevis::Level::Fast] {
        let a = archive(model, level, dir.path());
        let (t, lg, tk) = generate(l, &a, dir.path());
        assert!(lg == logits, "{}: the first step's logits differ from the original's", a.display());
        assert_eq!(tk, tokens, "{}: other tokens", a.display());
        assert_eq!(t, text, "{}: other text", a.display());
        println!("{}: {n} tokens, logits and text identical to the original's", a.display());
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

/// Loading from an archive writes no file (strace: no `open` for writing, one `memfd_create`),
/// and takes about the memory of the model: peak RSS within 1.3x the model's size for the BF16
/// model, and at most 0.3x the model's size above what loading the file takes for both.
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
    assert!(trace.contains("memfd_create(\"brevis:"), "no memfd:\n{trace}");
    assert!(trace.contains("/proc/self/fd/"), "llama.cpp did not open the memfd:\n{trace}");

    let bf16 = float_model(l, &q4);
    for model in [q4, bf16] {
        let size = std::fs::metadata(&model).unwrap().len() as f64;
        let archive = archive(&model, brevis::Level::Default, dir.path());
        let (file, arc) = (peak_rss(l, &model) as f64, peak_rss(l, &archive) as f64);
        println!(
            "{}: peak RSS {:.2}x the model's size from the file, {:.2}x from the archive",
            model.display(),
            file / size,
            arc / size
        );
        assert!(arc <= file + 0.3 * size, "{}: {arc} bytes from the archive, {file} from the file", model.display());
        if model.to_string_lossy().contains("BF16") {
            assert!(arc <= 1.3 * size, "{}: peak RSS {arc} bytes, above 1.3x the model's size", model.display());
        }
    }
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
