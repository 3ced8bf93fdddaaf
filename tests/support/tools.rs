//! For the tests that drive the library from outside (C, C++, Go, Java, Python, child
//! processes): where the built libraries are, running tools, a small checkpoint, peak RSS.

use super::skip;
use super::st::{file, tensor};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The committed real checkpoint.
pub fn fixture() -> PathBuf {
    root().join("tests/fixtures/silero_vad_16k.safetensors")
}

/// The development corpus (`$BREVIS_CORPUS`, default `~/.cache/brevis-corpus`), when it exists.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BREVIS_CORPUS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/brevis-corpus")))?;
    dir.is_dir().then_some(dir)
}

/// Where this test run's libbrevis.so and libbrevis.a are: next to the test executable
/// (`target/<profile>/deps/`, where cargo builds the library for its tests; `target/<profile>/`
/// only gets a copy on `cargo build`, which may be older or built without the test features).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        if ["libbrevis.so", "libbrevis.a"].iter().all(|l| dir.join(l).is_file()) {
            return dir.to_path_buf();
        }
    }
    panic!("libbrevis.so and libbrevis.a are in neither {} nor its parent", deps.display());
}

/// Cargo's target folder (the parent of `target/<profile>/deps/`, where the test runs from).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// Whether `tool --version` (or the given probe arguments) runs.
pub fn have(tool: &str, probe: &[&str]) -> bool {
    Command::new(tool).args(probe).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Runs `cmd`, printing its output; panics with the output when it fails. `LD_LIBRARY_PATH` is
/// cleared: cargo points it at `target/<profile>/`, whose copy of libbrevis.so may be stale, and
/// it would win over the `-rpath` the tests link with.
pub fn run(what: &str, cmd: &mut Command) -> String {
    cmd.env_remove("LD_LIBRARY_PATH");
    let t = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start {:?}: {e}", cmd.get_program()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--- {what} ({:.1} s): {:?}\n{stdout}{stderr}", t.elapsed().as_secs_f64(), cmd);
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
}

/// Link flags of the static library's own dependencies (as `rustc --print native-static-libs`).
pub const STATIC_DEPS: &[&str] = &["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"];

/// The C compiler (`$CC`, else `cc`); None, after [`skip`], when there is none.
pub fn cc() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if have(&cc, &["--version"]) {
        Some(cc)
    } else {
        skip(&format!("no C compiler ({cc}); install gcc to run the C API tests"));
        None
    }
}

/// Strict C99: the header and the C tests must compile without a warning.
pub fn c_flags() -> Vec<String> {
    ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g"].iter().map(|s| s.to_string()).collect()
}

pub fn test_api_source() -> PathBuf {
    root().join("ctests/test_api.c")
}

/// Compiles ctests/test_api.c into `exe`, linked with the static library `lib` (libbrevis.a).
pub fn build_test_api_static(cc: &str, lib: &Path, exe: &Path) {
    run(
        "cc (static)",
        Command::new(cc)
            .args(c_flags())
            .arg("-I")
            .arg(root().join("include"))
            .arg(test_api_source())
            .arg(lib)
            .args(STATIC_DEPS)
            .arg("-o")
            .arg(exe),
    );
}

/// Runs test_api on `file` (under `wrapper`, when not empty); checks its closing line.
pub fn run_test_api(what: &str, exe: &Path, file: &Path, tmp: &Path, extra: &[&str], wrapper: &[&str]) {
    let mut cmd = if wrapper.is_empty() {
        Command::new(exe)
    } else {
        let mut c = Command::new(wrapper[0]);
        c.args(&wrapper[1..]).arg(exe);
        c
    };
    cmd.arg(file).arg(tmp).args(extra);
    let out = run(what, &mut cmd);
    assert!(out.contains(" passed, 0 failed"), "{what}: {out}");
}

/// Runs `cmd` as a child and returns its peak RSS in bytes (from `wait4`, for this child only);
/// panics when it fails.
#[cfg(target_os = "linux")]
pub fn run_measured(cmd: &mut Command) -> u64 {
    let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet waited for; `status` and `usage` are valid for
    // writes. Reaping it here means `child` must not be waited for again (it is only dropped).
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4 failed");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{cmd:?} failed: status {status}");
    drop(child);
    usage.ru_maxrss as u64 * 1024 // kilobytes on Linux
}

/// A small safetensors file (a few KB: quick under valgrind) with several dtypes, metadata and
/// a duplicate tensor.
pub fn small_checkpoint() -> Vec<u8> {
    let w: Vec<u8> = (0..64 * 32).flat_map(|i| ((i as f32 * 0.37).sin() * 0.05).to_le_bytes()).collect();
    let h: Vec<u8> = (0..32 * 64).flat_map(|i| (((i * 7919) % 251) as u16 + 0x3c00).to_le_bytes()).collect();
    let tensors = [
        tensor("embed.weight", "F32", &[64, 32], w.clone()),
        tensor("norm.bias", "F32", &[32], vec![0; 128]),
        tensor("head.weight", "BF16", &[32, 64], h),
        tensor("ids", "I64", &[16], (0..16u64).flat_map(|i| i.to_le_bytes()).collect()),
        tensor("tied.weight", "F32", &[64, 32], w),
        tensor("empty", "F32", &[0], Vec::new()),
    ];
    file(&tensors, Some(&[("format", "pt")]))
}

/// A fine-tuned copy of a safetensors checkpoint: the lowest bit of every 7th byte of its data
/// flipped (what the bindings' reference tests compress against the original; they derive it
/// the same way).
pub fn nudged(checkpoint: &[u8]) -> Vec<u8> {
    let start = 8 + u64::from_le_bytes(checkpoint[..8].try_into().unwrap()) as usize;
    let mut out = checkpoint.to_vec();
    out[start..].iter_mut().step_by(7).for_each(|b| *b ^= 1);
    out
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}
