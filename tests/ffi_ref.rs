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

fn c_path(p: &std::path::Path) -> std::ffi::CString {
    std::ffi::CString::new(p.to_str().unwrap()).unwrap()
}

/// The file functions against a reference, the family choice and the identities an archive
/// records, on a master, its BF16 cast under other names and an unrelated file.
#[test]
fn families_through_the_c_abi() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(5);
    let w: Vec<f32> = (0..40_000).map(|_| rng.normal(0.03) as f32).collect();
    let master =
        file(&[tensor("a.weight", "F32", &[200, 200], w.iter().flat_map(|x| x.to_le_bytes()).collect())], None);
    let cast: Vec<u8> = w.iter().flat_map(|x| half::bf16::from_f32(*x).to_bits().to_le_bytes()).collect();
    let variant = file(&[tensor("blk.0.weight", "BF16", &[200, 200], cast)], None);
    let other = file(&[tensor("b", "I32", &[1000], (0..4000).map(|i| i as u8).collect())], None);
    let paths: Vec<_> =
        ["m.safetensors", "v.safetensors", "o.safetensors"].iter().map(|n| dir.path().join(n)).collect();
    for (p, b) in paths.iter().zip([&master, &variant, &other]) {
        std::fs::write(p, b).unwrap();
    }
    // Which file each is coded against: the variant against the master, the others alone.
    let c: Vec<_> = paths.iter().map(|p| c_path(p)).collect();
    let ptrs: Vec<*const std::ffi::c_char> = c.iter().map(|s| s.as_ptr()).collect();
    let mut refs = [7i64; 3];
    assert_eq!(unsafe { brevis_family_references(ptrs.as_ptr(), 3, refs.as_mut_ptr(), std::ptr::null()) }, 0);
    assert_eq!(refs, [-1, 0, -1]);
    assert_eq!(unsafe { brevis_family_references(std::ptr::null(), 0, std::ptr::null_mut(), std::ptr::null()) }, 0);
    let rc = unsafe { brevis_family_references(std::ptr::null(), 3, refs.as_mut_ptr(), std::ptr::null()) };
    assert_eq!(rc, brevis_status::BREVIS_ERROR_NULL_POINTER as i32);
    // The variant against the master, and back.
    let (archive, back) = (c_path(&dir.path().join("v.brv")), c_path(&dir.path().join("v.back")));
    let rc = unsafe { brevis_compress_file_with_ref(c[1].as_ptr(), c[0].as_ptr(), archive.as_ptr(), std::ptr::null()) };
    assert_eq!(rc, 0);
    assert!(std::fs::metadata(dir.path().join("v.brv")).unwrap().len() < variant.len() as u64 / 10);
    let rc =
        unsafe { brevis_decompress_file_with_ref(archive.as_ptr(), c[0].as_ptr(), back.as_ptr(), std::ptr::null()) };
    assert_eq!(rc, 0);
    assert_eq!(std::fs::read(dir.path().join("v.back")).unwrap(), variant);
    // Another reference: an error, and no output left behind.
    let bad = c_path(&dir.path().join("bad.back"));
    let rc =
        unsafe { brevis_decompress_file_with_ref(archive.as_ptr(), c[2].as_ptr(), bad.as_ptr(), std::ptr::null()) };
    assert_eq!(rc, brevis_status::BREVIS_ERROR_INVALID_ARGUMENT as i32);
    assert!(!dir.path().join("bad.back").exists());
    // What the archive records: its original (the variant) and its reference (the master).
    let (mut original, mut reference) = (brevis_file_identity::default(), brevis_file_identity::default());
    let rc = unsafe { brevis_archive_file_identity(archive.as_ptr(), &mut original, &mut reference, std::ptr::null()) };
    assert_eq!(rc, 0);
    let id = |b: &[u8]| (b.len() as u64, xxhash_rust::xxh3::xxh3_64(b));
    assert_eq!((original.size, original.hash), id(&variant));
    assert_eq!((reference.size, reference.hash), id(&master));
    // An archive made alone records no reference.
    let alone = c_path(&dir.path().join("m.brv"));
    assert_eq!(unsafe { brevis_compress_file(c[0].as_ptr(), alone.as_ptr(), std::ptr::null()) }, 0);
    let rc = unsafe { brevis_archive_file_identity(alone.as_ptr(), &mut original, &mut reference, std::ptr::null()) };
    assert_eq!(rc, 0);
    assert_eq!(((original.size, original.hash), reference.size, reference.hash), (id(&master), 0, 0));
}
