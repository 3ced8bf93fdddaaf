//! The C API called from Rust (no C compiler needed): conventions that the C tests
//! (tests/ffi_c.rs) check again from C.

use brevis::ffi::*;
use std::ffi::{c_int, CStr};
use std::ptr::{null, null_mut};

fn checkpoint() -> Vec<u8> {
    std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/silero_vad_16k.safetensors")).unwrap()
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
    // The library is usable afterwards.
    assert_eq!(unsafe { brevis_options_set(o, BrevisOptionKey(TEST_PANIC_KEY), 0) }, BREVIS_OK);
    assert!(compress(src, o).is_ok());
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
    for k in [0, 6, 99, -1, c_int::MAX, c_int::MIN] {
        assert_eq!(unsafe { brevis_options_set(o, BrevisOptionKey(k), 1) }, BREVIS_ERROR_INVALID_ARGUMENT);
    }
    assert_eq!(unsafe { brevis_options_set(null_mut(), BrevisOptionKey(1), 1) }, BREVIS_ERROR_NULL_POINTER);
    unsafe { brevis_options_free(o) };
    unsafe { brevis_options_free(null_mut()) };
}
