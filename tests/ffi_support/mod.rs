//! Shared by the tests that drive the C API from other languages (tests/ffi_c.rs,
//! tests/bindings.rs): where the built libraries are, temporary folders, running tools.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture() -> PathBuf {
    root().join("tests/fixtures/silero_vad_16k.safetensors")
}

/// Where this test run's libbrevis.so and libbrevis.a are: next to the test executable
/// (`target/<profile>/deps/`, where cargo builds the library for its tests; `target/<profile>/`
/// only gets a copy on `cargo build`, which may be older).
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

/// A small safetensors file (a few KB: quick under valgrind) with several dtypes, metadata and
/// a duplicate tensor.
pub fn small_checkpoint() -> Vec<u8> {
    let mut data = Vec::new();
    let mut entries = Vec::new();
    let mut add = |name: &str, dtype: &str, shape: &[u64], bytes: Vec<u8>| {
        let start = data.len();
        data.extend_from_slice(&bytes);
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        entries.push(format!(
            r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{start},{}]}}"#,
            shape.join(","),
            data.len()
        ));
    };
    let w: Vec<u8> = (0..64 * 32).flat_map(|i| ((i as f32 * 0.37).sin() * 0.05).to_le_bytes()).collect();
    add("embed.weight", "F32", &[64, 32], w.clone());
    add("norm.bias", "F32", &[32], vec![0; 128]);
    let h: Vec<u8> = (0..32 * 64).flat_map(|i| (((i * 7919) % 251) as u16 + 0x3c00).to_le_bytes()).collect();
    add("head.weight", "BF16", &[32, 64], h);
    add("ids", "I64", &[16], (0..16u64).flat_map(|i| i.to_le_bytes()).collect());
    add("tied.weight", "F32", &[64, 32], w);
    add("empty", "F32", &[0], Vec::new());
    let header = format!(r#"{{"__metadata__":{{"format":"pt"}},{}}}"#, entries.join(","));
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.extend_from_slice(&data);
    f
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}
