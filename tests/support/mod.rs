//! Shared by every integration test crate (`mod support;`): `st` builds safetensors files and test
//! data (also included by the unit tests of src/ffi/codec.rs), `gguf` builds GGUF files, `tools`
//! finds the built libraries and runs outside programs, and `skip` marks a test that cannot run
//! here.
#![allow(dead_code)]

pub mod gguf;
pub mod st;
pub mod tools;

/// Marks the calling test as not run, for `reason` (a missing toolchain, fixture or corpus), and
/// returns so that the test can end: `return skip("...")`. The SKIPPED line is written straight
/// to the process's stderr handle, which the test harness does not capture (it captures only
/// `print!`/`eprint!`), so `cargo test` shows it without `--nocapture`. With the environment
/// variable `BREVIS_REQUIRE_ALL=1` it panics instead: in CI a missing toolchain or fixture is a
/// failure, not a pass.
pub fn skip(reason: &str) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    if std::env::var_os("BREVIS_REQUIRE_ALL").is_some_and(|v| v == "1") {
        panic!("BREVIS_REQUIRE_ALL=1 and {test} cannot run: {reason}");
    }
    let line = format!("SKIPPED {test}: {reason}\n");
    // Straight to the handle: `eprintln!` would be captured (and shown only on failure).
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}
