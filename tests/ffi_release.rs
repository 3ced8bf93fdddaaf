//! The C ABI's test hook (src/ffi/options.rs, `test_hook`) is not in a release library: the
//! shared library `cargo build --release` wrote (`target/release/libbrevis.so`) rejects the
//! hook's key as it rejects any unknown key, and holds none of the hook's code. The library the
//! tests link is the control (it accepts the key and holds the code), so that the check can fail.
//! Skips, visibly, when there is no release build at least as new as the sources (`.ci/run`
//! builds one before `cargo test`).
#![cfg(target_os = "linux")]

mod support;

use std::ffi::{c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use support::{skip, tools::*};

/// The hook's key (src/ffi/options.rs).
const TEST_PANIC_KEY: c_int = 0x7e57_0001;
/// Part of the hook's panic message: in the library only when the hook's code is.
const HOOK_MESSAGE: &[u8] = b"panic requested through the test-only option";

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// What `brevis_options_set(o, key, 1)` returns in the shared library at `path`, loaded with
/// dlopen beside the test's own copy (never unloaded: a Rust library may not support it).
fn set_key_in(path: &Path, key: c_int) -> c_int {
    let name = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; loading runs only the library's initializers.
    let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "dlopen {}", path.display());
    let sym = |s: &std::ffi::CStr| {
        // SAFETY: `lib` is a live handle, `s` NUL-terminated.
        let p = unsafe { libc::dlsym(lib, s.as_ptr()) };
        assert!(!p.is_null(), "{s:?} is not in {}", path.display());
        p
    };
    type New = unsafe extern "C" fn() -> *mut c_void;
    type Set = unsafe extern "C" fn(*mut c_void, c_int, i64) -> c_int;
    type Free = unsafe extern "C" fn(*mut c_void);
    // SAFETY: the symbols are the header's functions, with these signatures (`brevis_option` is
    // an int-sized enum, `brevis_options *` a pointer).
    let (new, set, free) = unsafe {
        (
            std::mem::transmute::<*mut c_void, New>(sym(c"brevis_options_new")),
            std::mem::transmute::<*mut c_void, Set>(sym(c"brevis_options_set")),
            std::mem::transmute::<*mut c_void, Free>(sym(c"brevis_options_free")),
        )
    };
    // SAFETY: a handle from the same library's `brevis_options_new`, freed once.
    unsafe {
        let o = new();
        assert!(!o.is_null());
        let rc = set(o, key, 1);
        free(o);
        rc
    }
}

/// The newest modification time of the files under `dir`.
fn newest(dir: &Path) -> SystemTime {
    let mut t = SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        t = t.max(if m.is_dir() { newest(&e.path()) } else { m.modified().unwrap() });
    }
    t
}

/// `target/release/<name>` when `cargo build --release` wrote it after the last change of the
/// sources; None, after [`skip`], otherwise.
fn release_library(name: &str) -> Option<PathBuf> {
    let path = target_dir().join("release").join(name);
    let Ok(built) = std::fs::metadata(&path).and_then(|m| m.modified()) else {
        skip(&format!("no {} (run `cargo build --release` first)", path.display()));
        return None;
    };
    let toml = std::fs::metadata(root().join("Cargo.toml")).unwrap().modified().unwrap();
    if built < newest(&root().join("src")).max(toml) {
        skip(&format!("{} is older than the sources (run `cargo build --release` first)", path.display()));
        return None;
    }
    Some(path)
}

#[test]
fn a_release_library_rejects_the_test_hook() {
    let Some(release) = release_library("libbrevis.so") else { return };
    // The control: the library the tests link has the hook.
    let tested = lib_dir().join("libbrevis.so");
    assert_eq!(set_key_in(&tested, TEST_PANIC_KEY), 0, "{}", tested.display());
    assert!(contains(&std::fs::read(&tested).unwrap(), HOOK_MESSAGE));
    // The release library: the key is unknown (BREVIS_ERROR_INVALID_ARGUMENT), the code absent.
    assert_eq!(set_key_in(&release, TEST_PANIC_KEY), -2, "{}", release.display());
    assert_eq!(set_key_in(&release, 1), 0, "a real key (BREVIS_OPTION_THREADS) is accepted");
    assert!(!contains(&std::fs::read(&release).unwrap(), HOOK_MESSAGE), "the hook's code is in {}", release.display());
}

/// ctests/test_api.c in its `release` mode, linked with the release static library: the whole C
/// API passes there, and the hook's key is rejected.
#[test]
fn the_c_tests_pass_on_the_release_library() {
    let Some(cc) = cc() else { return };
    let Some(lib) = release_library("libbrevis.a") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("test_api_release");
    build_test_api_static(&cc, &lib, &exe);
    let small = write(tmp.path(), "small.safetensors", &small_checkpoint());
    run_test_api("test_api release, small", &exe, &small, tmp.path(), &["quick", "release"], &[]);
}
