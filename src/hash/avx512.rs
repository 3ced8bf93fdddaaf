//! The AVX-512 kernel of the XXH3 block sums.

use super::{Acc, BLOCK, SECRET, STRIPE, STRIPES_PER_BLOCK};
use std::arch::x86_64::*;

/// [`super::block_sums`], a stripe per 512-bit vector.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f")]
#[allow(unused_unsafe)]
pub unsafe fn block_sums(data: &[u8], out: &mut [Acc]) {
    // SAFETY (loads and stores): each key is 64 bytes at 8 * s <= 120 of the 192-byte secret;
    // each stripe is 64 bytes inside a block of `data`; each store is the 64 bytes of `o`.
    let keys: [__m512i; STRIPES_PER_BLOCK] =
        std::array::from_fn(|s| unsafe { _mm512_loadu_si512(SECRET.as_ptr().add(8 * s) as *const _) });
    for (b, o) in data.chunks_exact(BLOCK).zip(out) {
        let mut sum = _mm512_setzero_si512();
        for (s, &key) in keys.iter().enumerate() {
            let v = unsafe { _mm512_loadu_si512(b.as_ptr().add(s * STRIPE) as *const _) };
            let k = _mm512_xor_si512(v, key);
            let product = _mm512_mul_epu32(k, _mm512_srli_epi64::<32>(k));
            let swapped = _mm512_shuffle_epi32::<_MM_PERM_BADC>(v);
            sum = _mm512_add_epi64(sum, _mm512_add_epi64(product, swapped));
        }
        unsafe { _mm512_storeu_si512(o.as_mut_ptr() as *mut _, sum) };
    }
}
