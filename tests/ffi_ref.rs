//! The C entry points for reference-based compression, called as C would.

mod support;
use brevis::internals::ffi::*;
use support::st::*;

#[test]
fn compress_and_decompress_with_ref_through_the_c_abi() {
    let mut rng = Rng(2);
    let base_w: Vec<u8> =
        (0..30_000).flat_map(|_| half::bf16::from_f64(rng.normal(0.02)).to_bits().to_le_bytes()).collect();
    let mut new_w = base_w.clone();
    for w in new_w.chunks_exact_mut(2).step_by(3) {
        w[0] ^= 1;
    }
    let base = file(&[tensor("w", "BF16", &[100, 300], base_w)], None);
    let new = file(&[tensor("w", "BF16", &[100, 300], new_w)], None);
    let mut dst = vec![0u8; brevis_compress_bound(new.len())];
    let mut n = 0usize;
    let rc = unsafe {
        brevis_compress_with_ref(
            new.as_ptr(),
            new.len(),
            base.as_ptr(),
            base.len(),
            dst.as_mut_ptr(),
            dst.len(),
            std::ptr::null(),
            &mut n,
        )
    };
    assert_eq!(rc, 0);
    let archive = &dst[..n];
    let mut out = vec![0u8; new.len()];
    let mut got = 0usize;
    let rc = unsafe {
        brevis_decompress_with_ref(
            archive.as_ptr(),
            n,
            base.as_ptr(),
            base.len(),
            out.as_mut_ptr(),
            out.len(),
            &mut got,
        )
    };
    assert_eq!(rc, 0);
    assert_eq!(&out[..got], &new[..]);
    // A different reference, a missing one, NULL pointers: error codes, and `got` untouched.
    let mut other = base.clone();
    let last = other.len() - 1;
    other[last] ^= 1;
    let mut untouched = 12345usize;
    let rc = unsafe {
        brevis_decompress_with_ref(
            archive.as_ptr(),
            n,
            other.as_ptr(),
            other.len(),
            out.as_mut_ptr(),
            out.len(),
            &mut untouched,
        )
    };
    assert_ne!(rc, 0);
    assert_eq!(untouched, 12345);
    let rc = unsafe { brevis_decompress(archive.as_ptr(), n, out.as_mut_ptr(), out.len(), &mut untouched) };
    assert_ne!(rc, 0);
    let rc = unsafe {
        brevis_decompress_with_ref(
            archive.as_ptr(),
            n,
            std::ptr::null(),
            10,
            out.as_mut_ptr(),
            out.len(),
            &mut untouched,
        )
    };
    assert_ne!(rc, 0);
    assert_eq!(untouched, 12345);
}

/// `brevis_decompress_with_ref_and_options` honours its settings: any thread count gives the
/// same bytes, the memory limit bounds the index (too small: `BREVIS_ERROR_LIMIT`, nothing
/// written), NULL settings are the defaults; NULL pointers are errors.
#[test]
fn decompress_with_ref_and_options_honours_its_settings() {
    let mut rng = Rng(5);
    let base_ts: Vec<Tensor> =
        (0..4).map(|i| tensor(&format!("w{i}"), "F32", &[64, 64], data_for("F32", 4096, &mut rng, true))).collect();
    let mut new_ts = base_ts.clone();
    for t in &mut new_ts {
        t.data.iter_mut().step_by(11).for_each(|b| *b ^= 4);
    }
    let (base, new) = (file(&base_ts, None), file(&new_ts, None));
    let opts = brevis::Options::default().with_chunk_bytes(4096);
    let archive = brevis::compress_with_ref(&new, &base, &opts).unwrap();
    let decode = |o: *const brevis_options, out: &mut Vec<u8>, got: *mut usize| unsafe {
        brevis_decompress_with_ref_and_options(
            archive.as_ptr(),
            archive.len(),
            base.as_ptr(),
            base.len(),
            out.as_mut_ptr(),
            out.len(),
            o,
            got,
        )
    };
    let o = brevis_options_new();
    let key = |k: brevis_option| BrevisOptionKey(k as std::ffi::c_int);
    for threads in [1, 2, 3, 0] {
        assert_eq!(unsafe { brevis_options_set(o, key(brevis_option::BREVIS_OPTION_THREADS), threads) }, 0);
        let (mut out, mut got) = (vec![0u8; new.len()], 0usize);
        assert_eq!(decode(o, &mut out, &mut got), BREVIS_OK, "{threads} threads");
        assert!(got == new.len() && out == new, "{threads} threads");
    }
    let (mut out, mut got) = (vec![0u8; new.len()], 0usize);
    assert_eq!(decode(std::ptr::null(), &mut out, &mut got), BREVIS_OK);
    assert!(out == new);
    // Without the whole-file check it still decodes (chunk checksums are always verified).
    assert_eq!(unsafe { brevis_options_set(o, key(brevis_option::BREVIS_OPTION_VERIFY), 0) }, 0);
    assert_eq!(decode(o, &mut out, &mut got), BREVIS_OK);
    // A memory limit too small for the index: an error, `got` untouched.
    assert_eq!(unsafe { brevis_options_set(o, key(brevis_option::BREVIS_OPTION_MEMORY_LIMIT), 16) }, 0);
    let mut untouched = 12345usize;
    assert_eq!(decode(o, &mut out, &mut untouched), BREVIS_ERROR_LIMIT);
    assert_eq!(untouched, 12345);
    // A NULL size pointer.
    assert_eq!(decode(o, &mut out, std::ptr::null_mut()), BREVIS_ERROR_NULL_POINTER);
    unsafe { brevis_options_free(o) };
}
