//! The C ABI's file functions keep modes and times as the CLI does (tests/file_meta.rs), and
//! `BREVIS_OPTION_PRESERVE` turns that off. One test: the umask is the process's, so nothing
//! else in this binary may create files meanwhile.
#![cfg(unix)]

mod support;

use brevis::internals::ffi::*;
use brevis::FileMeta;
use std::ffi::{c_int, CString};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const THEN: (i64, u32) = (1_400_000_000, 500_000_001);

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

fn compress_file(src: &Path, dst: &Path, o: *const brevis_options) -> c_int {
    unsafe { brevis_compress_file(c(src).as_ptr(), c(dst).as_ptr(), o) }
}

fn decompress_file(src: &Path, dst: &Path, o: *const brevis_options) -> c_int {
    unsafe { brevis_decompress_file(c(src).as_ptr(), c(dst).as_ptr(), o) }
}

fn set(o: *mut brevis_options, value: i64) -> c_int {
    unsafe { brevis_options_set(o, BrevisOptionKey(brevis_option::BREVIS_OPTION_PRESERVE as c_int), value) }
}

fn set_attrs(path: &Path, mode: u32, mtime: SystemTime) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
}

fn meta(path: &Path) -> FileMeta {
    FileMeta::of(&std::fs::metadata(path).unwrap())
}

fn umask(mask: u32) {
    unsafe { libc::umask(mask as libc::mode_t) };
}

#[test]
fn file_functions_keep_modes_and_times_unless_told_not_to() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let original = support::st::Rng(9).bytes(30_000);
    let (input, archive, back) = (d.join("in"), d.join("in.brv"), d.join("out"));
    std::fs::write(&input, &original).unwrap();
    let then = UNIX_EPOCH + Duration::new(THEN.0 as u64, THEN.1);
    let recorded = |mode| FileMeta { mode, mtime: THEN.0, mtime_nanos: THEN.1 };
    let o = brevis_options_new();
    assert_eq!(set(o, 2), BREVIS_ERROR_INVALID_ARGUMENT);
    assert_eq!(set(o, -1), BREVIS_ERROR_INVALID_ARGUMENT);
    for mask in [0o022, 0o077] {
        for mode in [0o644, 0o640] {
            umask(mask);
            set_attrs(&input, mode, then);
            assert_eq!(compress_file(&input, &archive, std::ptr::null()), BREVIS_OK);
            assert_eq!(meta(&archive), recorded(mode & !mask), "archive file, {mode:o} under {mask:03o}");
            let a = std::fs::read(&archive).unwrap();
            assert_eq!(brevis::Archive::open(&a).unwrap().file_meta(), Some(recorded(mode)));
            // Copied around: the original's mode and time come back.
            set_attrs(&archive, 0o604, SystemTime::now());
            assert_eq!(decompress_file(&archive, &back, std::ptr::null()), BREVIS_OK);
            assert_eq!(meta(&back), recorded(mode & !mask), "restored, {mode:o} under {mask:03o}");
            assert!(std::fs::read(&back).unwrap() == original);
        }
    }
    // Off: plain files (0666 under the umask, now) and the buffer function's archive.
    umask(0o022);
    assert_eq!(set(o, 0), BREVIS_OK);
    let t0 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    assert_eq!(decompress_file(&archive, &back, o), BREVIS_OK);
    assert_eq!(meta(&back).mode, 0o644);
    assert!(meta(&back).mtime >= t0 - 1);
    assert_eq!(compress_file(&input, &archive, o), BREVIS_OK);
    assert_eq!(meta(&archive).mode, 0o644);
    assert!(std::fs::read(&archive).unwrap() == brevis::compress(&original, &Default::default()).unwrap());
    // Without a record, the default gives the archive file's mode and time.
    set_attrs(&archive, 0o600, then);
    assert_eq!(decompress_file(&archive, &back, std::ptr::null()), BREVIS_OK);
    assert_eq!(meta(&back), recorded(0o600));
    // Back on.
    assert_eq!(set(o, 1), BREVIS_OK);
    assert_eq!(compress_file(&input, &archive, o), BREVIS_OK);
    assert_eq!(brevis::Archive::open(&std::fs::read(&archive).unwrap()).unwrap().file_meta(), Some(recorded(0o640)));
    unsafe { brevis_options_free(o) };
    let names: Vec<String> =
        std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(!names.iter().any(|n| n.starts_with(".brevis-")), "{names:?}");
}
