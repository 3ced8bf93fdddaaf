//! The AVX2 kernel of the XXH3 block sums.

use super::{Acc, BLOCK, SECRET, STRIPE, STRIPES_PER_BLOCK};
use std::arch::x86_64::*;

/// [`super::block_sums`], a stripe per two 256-bit vectors.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[allow(unused_unsafe)]
pub unsafe fn block_sums(data: &[u8], out: &mut [Acc]) {
    // SAFETY (loads and stores): as in the AVX-512 kernel, in 32-byte halves.
    let keys: [[__m256i; 2]; STRIPES_PER_BLOCK] = std::array::from_fn(|s| {
        std::array::from_fn(|h| unsafe { _mm256_loadu_si256(SECRET.as_ptr().add(8 * s + 32 * h) as *const _) })
    });
    for (b, o) in data.chunks_exact(BLOCK).zip(out) {
        let mut sum = [_mm256_setzero_si256(); 2];
        for (s, key) in keys.iter().enumerate() {
            for h in 0..2 {
                let v = unsafe { _mm256_loadu_si256(b.as_ptr().add(s * STRIPE + 32 * h) as *const _) };
                let k = _mm256_xor_si256(v, key[h]);
                let product = _mm256_mul_epu32(k, _mm256_srli_epi64::<32>(k));
                let swapped = _mm256_shuffle_epi32::<0x4E>(v);
                sum[h] = _mm256_add_epi64(sum[h], _mm256_add_epi64(product, swapped));
            }
        }
        for (h, &v) in sum.iter().enumerate() {
            unsafe { _mm256_storeu_si256(o.as_mut_ptr().add(4 * h) as *mut _, v) };
        }
    }
}
