//! The encoder's state machine on whole steps in AVX-512: two vectors of sixteen states, lanes
//! 31..16 and 15..0, each in descending lane order (element `j` is lane `31 - j`, or `15 - j`), so
//! that the words of a step, compressed in element order, come out in the scalar loop's order
//! (lanes 31 down to 0) with no reversal. Per vector and step: the step's entry indices (one
//! `vpermw` reverses and widens them), two gathers of the entry, `need` as a mask register, the
//! low halves of the states that renormalize compressed (`vpcompressd`) and narrowed (`vpmovdw`)
//! into the words, `x >>= 16` under the mask, then `x + cum + q * cmpl` with the quotient from
//! `vpmuludq` on even and odd lanes. The chain of each lane (compare, shift, multiply, multiply)
//! bounds the speed, not the instruction count.

use super::VecTable;
use crate::coder::lanes::LANES;
use std::arch::x86_64::*;

/// `vpermw` indices of the entry indices of lanes 31..16 and 15..0 of a step: word `2j` is
/// symbol `31 - j` (`15 - j`) of the step; the odd words are zeroed by the mask (which widens
/// the indices to 32 bits).
static PERM: [[u16; 32]; 2] = {
    let mut t = [[0u16; 32]; 2];
    let mut j = 0;
    while j < 16 {
        t[0][2 * j] = 31 - j as u16;
        t[1][2 * j] = 15 - j as u16;
        j += 1;
    }
    t
};

/// Codes the whole steps of `idx` (entry indices of symbols `0..idx.len()`), last step first,
/// from and into `states`; appends the words to `words[*len..]` (when `STORE`) and counts
/// them in `len`: the same words, order and states as the scalar loop of `Encoder::steps`.
/// With `ESC`, sets `masks[step / 16 + h]` to the mask of the elements of vector `h` of that
/// step whose entry packs to `esc` (element `j` is symbol `step + 31 - 16h - j`).
///
/// # Safety
/// AVX-512 F and BW and POPCNT are available; `t` is not empty (indices are clamped to its
/// last entry); `idx.len()` is a multiple of 32; when `STORE`, `*len + idx.len() <=
/// words.len()`; when `ESC`, `masks.len() == idx.len() / 16`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,popcnt")]
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
    let rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    // SAFETY: each row of `PERM` is 64 bytes.
    let perms = unsafe { PERM.map(|p| _mm512_loadu_si512(p.as_ptr() as *const _)) };
    let m13 = _mm512_set1_epi32(0x1FFF);
    let one = _mm512_set1_epi32(1);
    let total = _mm512_set1_epi32(1 << (32 - shift));
    let shv = _mm512_set1_epi32(shift as i32);
    let last = _mm512_set1_epi16((t.len() - 1).min(u16::MAX as usize) as u16 as i16);
    let escv = _mm512_set1_epi32(esc as i32);
    let sp = states.as_mut_ptr();
    // SAFETY: `states` holds 32 states.
    let mut x = unsafe {
        [
            _mm512_permutexvar_epi32(rev, _mm512_loadu_si512(sp.add(16) as *const _)),
            _mm512_permutexvar_epi32(rev, _mm512_loadu_si512(sp as *const _)),
        ]
    };
    let (rp, pp) = (t.rcp.as_ptr(), t.packed.as_ptr());
    let wp = words.as_mut_ptr();
    let mut pos = *len;
    for step in (0..idx.len()).step_by(LANES).rev() {
        // SAFETY: `step + 32 <= idx.len()`.
        let v = unsafe { _mm512_loadu_si512(idx.as_ptr().add(step) as *const _) };
        // (Clamped to the table, so that no index reads outside it; the entries are built
        // in range, and this costs one instruction a step.)
        let v = _mm512_min_epu16(v, last);
        for (h, (x, &perm)) in x.iter_mut().zip(&perms).enumerate() {
            let e = _mm512_maskz_permutexvar_epi16(0x5555_5555, perm, v);
            // SAFETY: every index is clamped below `t.len()`, the length of both arrays.
            let (r, p) = unsafe {
                (_mm512_i32gather_epi32::<4>(e, rp as *const _), _mm512_i32gather_epi32::<4>(e, pp as *const _))
            };
            if ESC {
                // (A store, not a push: a call in the loop would spill the vectors.)
                // SAFETY: `step / 16 + h < idx.len() / 16 == masks.len()`.
                unsafe { *masks.get_unchecked_mut(step / 16 + h) = _mm512_cmpeq_epi32_mask(p, escv) };
            }
            let f = _mm512_and_si512(p, m13);
            let cum = _mm512_and_si512(_mm512_srli_epi32::<13>(p), m13);
            let s = _mm512_srli_epi32::<26>(p);
            let cmpl = _mm512_sub_epi32(total, f);
            // `x >> shift >= f` is `x > (f << shift) - 1`, which also holds for `f = 2^p`
            // (never: the limit wraps to 2^32 - 1), and keeps the shift off the chain.
            let lim = _mm512_sub_epi32(_mm512_sllv_epi32(f, shv), one);
            let need = _mm512_cmpgt_epu32_mask(*x, lim);
            if STORE {
                debug_assert!(pos + 16 <= words.len());
                let w = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(need, *x));
                // SAFETY: `pos` is at most `*len` plus the symbols coded so far, at least 16
                // fewer than `idx.len()`, so 16 words fit.
                unsafe { _mm256_storeu_si256(wp.add(pos) as *mut __m256i, w) };
            }
            pos += need.count_ones() as usize;
            let y = _mm512_mask_srli_epi32::<16>(*x, need, *x);
            let pe = _mm512_mul_epu32(y, r);
            let po = _mm512_mul_epu32(_mm512_srli_epi64::<32>(y), _mm512_srli_epi64::<32>(r));
            let hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(pe), po);
            let q = _mm512_srlv_epi32(_mm512_add_epi32(hi, _mm512_srli_epi32::<1>(_mm512_sub_epi32(y, hi))), s);
            *x = _mm512_add_epi32(_mm512_add_epi32(y, cum), _mm512_mullo_epi32(q, cmpl));
        }
    }
    // SAFETY: as for the loads.
    unsafe {
        _mm512_storeu_si512(sp.add(16) as *mut _, _mm512_permutexvar_epi32(rev, x[0]));
        _mm512_storeu_si512(sp as *mut _, _mm512_permutexvar_epi32(rev, x[1]));
    }
    *len = pos;
}
