//! The C entry points for reference-based compression, called as C would.

mod support;
use brevis::ffi::*;
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
