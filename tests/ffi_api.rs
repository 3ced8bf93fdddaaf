//! The C API called from Rust (no C compiler needed): conventions that the C tests
//! (tests/ffi_c.rs) check again from C.

use brevis::internals::ffi::*;
use std::ffi::{c_int, CStr};
use std::path::Path;
use std::ptr::{null, null_mut};

fn checkpoint() -> Vec<u8> {
    std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/silero_vad_16k.safetensors")).unwrap()
}

/// The test-only option key (src/ffi/options.rs), in the builds `cargo test` makes only.
const TEST_PANIC_KEY: c_int = 0x7e57_0001;

fn set(o: *mut brevis_options, key: brevis_option, value: i64) {
    assert_eq!(unsafe { brevis_options_set(o, BrevisOptionKey(key as c_int), value) }, BREVIS_OK);
}

fn compress(src: &[u8], opts: *const brevis_options) -> Result<Vec<u8>, c_int> {
    let mut dst = vec![0u8; brevis_compress_bound(src.len())];
    let mut n = 0usize;
    let rc = unsafe { brevis_compress(src.as_ptr(), src.len(), dst.as_mut_ptr(), dst.len(), opts, &mut n) };
    if rc != BREVIS_OK {
        return Err(rc);
    }
    dst.truncate(n);
    Ok(dst)
}

#[test]
fn a_panic_inside_the_library_is_an_error_code() {
    let o = brevis_options_new();
    // The test-only key (kept out of the header): the next call panics in a worker thread.
    assert_eq!(unsafe { brevis_options_set(o, BrevisOptionKey(TEST_PANIC_KEY), 1) }, BREVIS_OK);
    let mut n = 12345usize;
    let mut dst = [0u8; 8192];
    let src = b"any input";
    let rc = unsafe { brevis_compress(src.as_ptr(), src.len(), dst.as_mut_ptr(), dst.len(), o, &mut n) };
    assert_eq!(rc, BREVIS_ERROR_PANIC);
    assert_eq!(n, 12345, "out-pointers are written only on success");
    let msg = unsafe { CStr::from_ptr(brevis_error_string(rc)) };
    assert!(msg.to_str().unwrap().contains("panic"));
    // Every entry point that takes settings: the panic is an error code, no output is written.
    let mut a = std::ptr::null_mut();
    assert_eq!(unsafe { brevis_archive_open_with_options(dst.as_ptr(), dst.len(), o, &mut a) }, BREVIS_ERROR_PANIC);
    assert!(a.is_null());
    let mut out = [0u8; 64];
    let rc = unsafe {
        brevis_decompress_with_ref_and_options(
            src.as_ptr(),
            src.len(),
            src.as_ptr(),
            src.len(),
            out.as_mut_ptr(),
            out.len(),
            o,
            &mut n,
        )
    };
    assert_eq!((rc, n), (BREVIS_ERROR_PANIC, 12345));
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::write(&input, src).unwrap();
    let (input_c, out_c) = (c_path(&input), c_path(&dir.path().join("out")));
    assert_eq!(unsafe { brevis_compress_file(input_c.as_ptr(), out_c.as_ptr(), o) }, BREVIS_ERROR_PANIC);
    assert_eq!(unsafe { brevis_decompress_file(input_c.as_ptr(), out_c.as_ptr(), o) }, BREVIS_ERROR_PANIC);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "only the input is left");
    // The library is usable afterwards.
    assert_eq!(unsafe { brevis_options_set(o, BrevisOptionKey(TEST_PANIC_KEY), 0) }, BREVIS_OK);
    assert!(compress(src, o).is_ok());
    unsafe { brevis_options_free(o) };
}

fn c_path(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

/// Threads of this process whose name starts with `prefix` (from /proc/self/task).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)))
        .count()
}

/// `brevis_archive_open_with_options`: the handle decodes in its own pool of
/// `BREVIS_OPTION_THREADS` threads, which end with it, and refuses tensors above
/// `BREVIS_OPTION_MEMORY_LIMIT` (no other test of this file opens a handle with threads).
#[test]
#[cfg(target_os = "linux")]
fn an_archive_opened_with_options_has_its_own_pool_and_memory_limit() {
    let orig = checkpoint();
    let arc = compress(&orig, null()).unwrap();
    let want = brevis::Archive::open(&arc).unwrap();
    let largest = (0..want.len()).max_by_key(|&i| want.info(i).unwrap().nbytes).unwrap();
    let largest_bytes = want.info(largest).unwrap().nbytes;
    let o = brevis_options_new();
    set(o, brevis_option::BREVIS_OPTION_THREADS, 3);
    assert_eq!(threads_named("brevis-archive"), 0);
    let mut a = null_mut();
    assert_eq!(unsafe { brevis_archive_open_with_options(arc.as_ptr(), arc.len(), o, &mut a) }, BREVIS_OK);
    assert_eq!(threads_named("brevis-archive"), 3, "the handle's pool");
    for i in 0..want.len() {
        let mut buf = vec![0u8; want.info(i).unwrap().nbytes as usize];
        assert_eq!(unsafe { brevis_archive_decode_tensor(a, i, buf.as_mut_ptr(), buf.len()) }, BREVIS_OK);
        assert!(buf == want.decode_tensor(i).unwrap(), "tensor {i}");
    }
    unsafe { brevis_archive_free(a) };
    let t = std::time::Instant::now();
    while threads_named("brevis-archive") > 0 {
        assert!(t.elapsed().as_secs() < 30, "the pool's threads outlived the handle");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // A memory limit one byte below the largest tensor: that one is refused, the others decode.
    set(o, brevis_option::BREVIS_OPTION_MEMORY_LIMIT, largest_bytes as i64 - 1);
    assert_eq!(unsafe { brevis_archive_open_with_options(arc.as_ptr(), arc.len(), o, &mut a) }, BREVIS_OK);
    let mut buf = vec![0u8; largest_bytes as usize];
    let rc = unsafe { brevis_archive_decode_tensor(a, largest, buf.as_mut_ptr(), buf.len()) };
    assert_eq!(rc, BREVIS_ERROR_LIMIT);
    for i in (0..want.len()).filter(|&i| want.info(i).unwrap().nbytes < largest_bytes) {
        assert_eq!(unsafe { brevis_archive_decode_tensor(a, i, buf.as_mut_ptr(), buf.len()) }, BREVIS_OK);
    }
    unsafe { brevis_archive_free(a) };
    // Too small for the index: it does not open, and `*out` is untouched.
    set(o, brevis_option::BREVIS_OPTION_MEMORY_LIMIT, 16);
    let mut b = std::ptr::without_provenance_mut::<brevis_archive>(7);
    assert_eq!(unsafe { brevis_archive_open_with_options(arc.as_ptr(), arc.len(), o, &mut b) }, BREVIS_ERROR_LIMIT);
    assert_eq!(b as usize, 7);
    unsafe { brevis_options_free(o) };
}

#[test]
fn round_trip_and_archive_access() {
    let orig = checkpoint();
    let o = brevis_options_new();
    assert_eq!(unsafe { brevis_options_set(o, BrevisOptionKey(brevis_option::BREVIS_OPTION_THREADS as c_int), 2) }, 0);
    let arc = compress(&orig, o).unwrap();
    unsafe { brevis_options_free(o) };
    assert!(arc.len() < orig.len());

    let mut size = 0u64;
    assert_eq!(unsafe { brevis_decompressed_size(arc.as_ptr(), arc.len(), &mut size) }, BREVIS_OK);
    assert_eq!(size, orig.len() as u64);
    let mut back = vec![0u8; orig.len()];
    let mut n = 0usize;
    let rc = unsafe { brevis_decompress(arc.as_ptr(), arc.len(), back.as_mut_ptr(), back.len(), &mut n) };
    assert_eq!((rc, n), (BREVIS_OK, orig.len()));
    assert_eq!(back, orig);
    let rc = unsafe { brevis_decompress(arc.as_ptr(), arc.len(), back.as_mut_ptr(), back.len() - 1, &mut n) };
    assert_eq!(rc, BREVIS_ERROR_DST_TOO_SMALL);

    let mut a = null_mut();
    assert_eq!(unsafe { brevis_archive_open(arc.as_ptr(), arc.len(), &mut a) }, BREVIS_OK);
    let count = unsafe { brevis_archive_tensor_count(a) };
    assert!(count > 1);
    for i in 0..count {
        let mut info = std::mem::MaybeUninit::<brevis_tensor_info>::uninit();
        assert_eq!(unsafe { brevis_archive_tensor_info(a, i, info.as_mut_ptr()) }, BREVIS_OK);
        let info = unsafe { info.assume_init() };
        let name = unsafe { CStr::from_ptr(info.name) };
        assert_eq!(name.to_bytes().len(), info.name_len);
        let mut j = usize::MAX;
        assert_eq!(unsafe { brevis_archive_find(a, info.name, &mut j) }, BREVIS_OK);
        assert_eq!(j, i);
        let mut buf = vec![0u8; info.nbytes as usize];
        assert_eq!(unsafe { brevis_archive_decode_tensor(a, i, buf.as_mut_ptr(), buf.len()) }, BREVIS_OK);
        assert_eq!(buf, orig[info.offset as usize..(info.offset + info.nbytes) as usize]);
    }
    let mut j = 7usize;
    assert_eq!(unsafe { brevis_archive_find(a, c"nope".as_ptr(), &mut j) }, BREVIS_ERROR_NOT_FOUND);
    assert_eq!(unsafe { brevis_archive_find(a, null(), &mut j) }, BREVIS_ERROR_NULL_POINTER);
    assert_eq!(j, 7);
    unsafe { brevis_archive_free(a) };
    unsafe { brevis_archive_free(null_mut()) };
}

#[test]
fn bound_holds_on_incompressible_and_tiny_inputs() {
    let mut s = 0x9e3779b97f4a7c15u64;
    let noise: Vec<u8> = (0..300_000)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect();
    for n in (0..64).chain([1000, 65_536, 300_000]) {
        let arc = compress(&noise[..n], null()).unwrap();
        assert!(arc.len() <= brevis_compress_bound(n), "{n} bytes: archive {} > bound", arc.len());
    }
    // One-byte chunks blow the archive up far past the input: the bound still holds.
    let o = brevis_options_new();
    let key = BrevisOptionKey(brevis_option::BREVIS_OPTION_CHUNK_BYTES as c_int);
    assert_eq!(unsafe { brevis_options_set(o, key, 1) }, BREVIS_OK);
    for n in [1, 100, 6000] {
        let arc = compress(&noise[..n], o).unwrap();
        assert!(arc.len() <= brevis_compress_bound(n));
        assert_eq!(brevis::decompress(&arc).unwrap(), &noise[..n]);
    }
    unsafe { brevis_options_free(o) };
}

#[test]
fn unknown_option_keys_are_errors_not_undefined_behaviour() {
    let o = brevis_options_new();
    // 0 and the first key after the last (BREVIS_OPTION_PRESERVE = 7) are unknown.
    for k in [0, 8, 99, -1, c_int::MAX, c_int::MIN] {
        assert_eq!(unsafe { brevis_options_set(o, BrevisOptionKey(k), 1) }, BREVIS_ERROR_INVALID_ARGUMENT);
    }
    assert_eq!(unsafe { brevis_options_set(null_mut(), BrevisOptionKey(1), 1) }, BREVIS_ERROR_NULL_POINTER);
    unsafe { brevis_options_free(o) };
    unsafe { brevis_options_free(null_mut()) };
}
