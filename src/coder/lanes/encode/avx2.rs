//! The encoder's state machine on whole steps in AVX2 (the AVX-512 encoder's, eight lanes a vector):
//! four vectors of eight states, lanes 31..24, 23..16, 15..8 and 7..0, each in descending lane
//! order. Per vector and step: the entry of each of the step's eight symbols by scalar loads (the
//! table of [`VecTable`]), `need` by a signed
//! compare of biased values, the low halves of all eight states narrowed to words and the ones
//! that renormalize compressed by a byte shuffle from a table of the 256 masks, then the same
//! arithmetic as AVX-512.

use super::VecTable;
use crate::coder::lanes::LANES;
use std::arch::x86_64::*;

/// For each mask of the eight elements whose word is written: the `pshufb` control that
/// moves those words (elements in order) to the front.
static COMPRESS: [[u8; 16]; 256] = {
    let mut t = [[0x80u8; 16]; 256];
    let mut m = 0;
    while m < 256 {
        let mut k = 0;
        let mut j = 0;
        while j < 8 {
            if m >> j & 1 == 1 {
                t[m][2 * k] = 2 * j as u8;
                t[m][2 * k + 1] = 2 * j as u8 + 1;
                k += 1;
            }
            j += 1;
        }
        m += 1;
    }
    t
};

/// [`enc_avx512::steps`] in AVX2: the same words, order and states. With `ESC`, sets
/// `masks[step / 8 + k]` to the mask of the elements of vector `k` of that step whose entry
/// packs to `esc` (element `j` is symbol `step + 31 - 8k - j`).
///
/// # Safety
/// AVX2 and POPCNT are available; `t` is not empty (indices are clamped to its last entry);
/// `idx.len()` is a multiple of 32; when `STORE`, `*len + idx.len() <= words.len()`; when
/// `ESC`, `masks.len() == idx.len() / 8`.
#[target_feature(enable = "avx2,popcnt")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn steps<const STORE: bool, const ESC: bool>(
    t: &VecTable,
    idx: &[u16],
    shift: u32,
    states: &mut [u32; LANES],
    words: &mut [u16],
    len: &mut usize,
    esc: u32,
    masks: &mut [u16],
) {
    debug_assert!(idx.len().is_multiple_of(LANES) && (!STORE || *len + idx.len() <= words.len()));
    debug_assert!((20..=22).contains(&shift));
    let rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    // The low word of each element to the low eight bytes of its 128-bit half.
    let narrow = _mm256_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1,
        -1,
    );
    let m13 = _mm256_set1_epi32(0x1FFF);
    let total = _mm256_set1_epi32(1 << (32 - shift));
    let sign = _mm256_set1_epi32(i32::MIN);
    // `x >u (f << shift) - 1` is `x ^ 2^31 > (f << shift) + 2^31 - 1` signed.
    let bias = _mm256_set1_epi32(i32::MAX);
    let cnt = _mm_cvtsi32_si128(shift as i32);
    let last = t.len() - 1;
    let escv = _mm256_set1_epi32(esc as i32);
    let sp = states.as_mut_ptr();
    // SAFETY: `states` holds 32 states.
    let mut x: [__m256i; 4] = std::array::from_fn(|k| unsafe {
        _mm256_permutevar8x32_epi32(_mm256_loadu_si256(sp.add(24 - 8 * k) as *const _), rev)
    });
    let (rp, pp) = (t.rcp.as_ptr() as *const i32, t.packed.as_ptr() as *const i32);
    let wp = words.as_mut_ptr();
    let mut pos = *len;
    for step in (0..idx.len()).step_by(LANES).rev() {
        for (k, x) in x.iter_mut().enumerate() {
            // The entries of lanes `b + 7` down to `b`, by scalar loads (`vpgatherdd` is
            // slower on Zen 2 and 3), each index clamped to the table, so that none reads
            // outside it (the entries are built in range).
            let b = step + 24 - 8 * k;
            // SAFETY: `b + 8 <= idx.len()`, and every index is clamped below `t.len()`, the
            // length of both arrays.
            let (r, p) = unsafe {
                let i: [usize; 8] = std::array::from_fn(|j| (*idx.get_unchecked(b + 7 - j) as usize).min(last));
                let g = |a: *const i32| {
                    _mm256_setr_epi32(
                        *a.add(i[0]),
                        *a.add(i[1]),
                        *a.add(i[2]),
                        *a.add(i[3]),
                        *a.add(i[4]),
                        *a.add(i[5]),
                        *a.add(i[6]),
                        *a.add(i[7]),
                    )
                };
                (g(rp), g(pp))
            };
            if ESC {
                let m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(p, escv)));
                // SAFETY: `step / 8 + k < idx.len() / 8 == masks.len()`.
                unsafe { *masks.get_unchecked_mut(step / 8 + k) = m as u16 };
            }
            let f = _mm256_and_si256(p, m13);
            let cum = _mm256_and_si256(_mm256_srli_epi32::<13>(p), m13);
            let s = _mm256_srli_epi32::<26>(p);
            let cmpl = _mm256_sub_epi32(total, f);
            let lim = _mm256_add_epi32(_mm256_sll_epi32(f, cnt), bias);
            let needv = _mm256_cmpgt_epi32(_mm256_xor_si256(*x, sign), lim);
            let need = _mm256_movemask_ps(_mm256_castsi256_ps(needv)) as usize;
            if STORE {
                debug_assert!(pos + 8 <= words.len());
                let w = _mm256_permute4x64_epi64::<0b1000>(_mm256_shuffle_epi8(*x, narrow));
                // SAFETY: `need < 256`.
                let c = unsafe { _mm_loadu_si128(COMPRESS.get_unchecked(need).as_ptr() as *const _) };
                let w = _mm_shuffle_epi8(_mm256_castsi256_si128(w), c);
                // SAFETY: `pos` is at most `*len` plus the symbols coded so far, at least 8
                // fewer than `idx.len()`, so 8 words fit.
                unsafe { _mm_storeu_si128(wp.add(pos) as *mut __m128i, w) };
            }
            pos += need.count_ones() as usize;
            let y = _mm256_blendv_epi8(*x, _mm256_srli_epi32::<16>(*x), needv);
            let pe = _mm256_mul_epu32(y, r);
            let po = _mm256_mul_epu32(_mm256_srli_epi64::<32>(y), _mm256_srli_epi64::<32>(r));
            let hi = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(pe), po);
            let q = _mm256_srlv_epi32(_mm256_add_epi32(hi, _mm256_srli_epi32::<1>(_mm256_sub_epi32(y, hi))), s);
            *x = _mm256_add_epi32(_mm256_add_epi32(y, cum), _mm256_mullo_epi32(q, cmpl));
        }
    }
    for (k, x) in x.iter().enumerate() {
        // SAFETY: as for the loads.
        unsafe { _mm256_storeu_si256(sp.add(24 - 8 * k) as *mut _, _mm256_permutevar8x32_epi32(*x, rev)) };
    }
    *len = pos;
}
