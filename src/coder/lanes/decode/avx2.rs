//! The AVX2 decoder: four vectors of eight lanes. Table lookups are eight scalar loads, which
//! measured as fast as `vpgatherdd` on Zen 5 and avoid its slow microcode on Zen 2/3; refill
//! words are expanded with one `vpermd` from a 2 KiB table indexed by the refill mask. Context
//! classes are found for a whole step at once: its 32 context indices (the previous step's, or a
//! row of the ring) compared with the thresholds as bytes. The vector loop ([`body`]) is shared
//! with the AVX-512 decoder, which brings its own [`Refill`].

use super::{EscReader, Input, Lanes, Tables, CTX_BACK, CTX_NONE, CTX_PREV};
use crate::coder::lanes::{L, LANES, MAX_CLASSES};
use crate::error::Result;
use std::arch::x86_64::*;

/// How a vector of eight lanes takes its refill words.
pub(super) trait Refill {
    /// The states after a step's refill: `y << 16 | word` for the lanes with `y < 2^16` (`low`),
    /// which take the next of the eight words `w` in lane order, `y` for the others; and the
    /// number of words taken.
    ///
    /// # Safety
    /// The CPU has the features of the kernel that runs [`body`] with this refill.
    unsafe fn refill(y: __m256i, w: __m256i, low: __m256i) -> (__m256i, usize);
}

/// AVX2 refills: a `movemask` of the lanes that need a word, then `vpermd` from [`PERM`] and a
/// blend.
pub(super) struct Permute;

impl Refill for Permute {
    #[inline(always)]
    unsafe fn refill(y: __m256i, w: __m256i, _low: __m256i) -> (__m256i, usize) {
        let need = _mm256_cmpeq_epi32(_mm256_srli_epi32::<16>(y), _mm256_setzero_si256());
        let m = _mm256_movemask_ps(_mm256_castsi256_ps(need)) as usize;
        let perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64(PERM.as_ptr().add(m) as *const __m128i));
        let w = _mm256_permutevar8x32_epi32(w, perm);
        (_mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32::<16>(y), w), need), (m as u32).count_ones() as usize)
    }
}

/// For each 8-bit mask of lanes that take a word: the index of each lane's word among the
/// next eight (lanes that take none: 0).
static PERM: [[u8; 8]; 256] = {
    let mut t = [[0u8; 8]; 256];
    let mut m = 0;
    while m < 256 {
        let mut k = 0u8;
        let mut j = 0;
        while j < 8 {
            if m >> j & 1 == 1 {
                t[m][j] = k;
                k += 1;
            }
            j += 1;
        }
        m += 1;
    }
    t
};

/// Eight table entries from eight scalar loads. (`vpgatherdd` measured no faster on Zen 5, and
/// it is much slower on Zen 2 and 3.)
///
/// Safety: every index of `idx` is within the table at `base`.
#[inline(always)]
unsafe fn gather(base: *const u32, idx: __m256i) -> __m256i {
    let lo = _mm256_castsi256_si128(idx);
    let hi = _mm256_extracti128_si256::<1>(idx);
    let a = _mm_cvtsi128_si64(lo) as u64;
    let b = _mm_extract_epi64::<1>(lo) as u64;
    let c = _mm_cvtsi128_si64(hi) as u64;
    let d = _mm_extract_epi64::<1>(hi) as u64;
    let g = |i: u64| *base.add(i as u32 as usize) as i32;
    _mm256_setr_epi32(g(a), g(a >> 32), g(b), g(b >> 32), g(c), g(c >> 32), g(d), g(d >> 32))
}

/// Writes one step's 32 symbols into `out` (exactly 32 long) from their indices (through
/// `map`, or plus `basev`), then the escaped ones from `esc`.
///
/// # Safety
/// AVX2 must be available; indices are below 256 (the size of `map` when `MAPPED`).
#[inline(always)]
unsafe fn store_step<const MAPPED: bool, const ESC: bool>(
    idx: &[__m256i; 4],
    map: *const u32,
    basev: __m256i,
    escv: __m256i,
    out: &mut [u16],
    esc: &mut EscReader,
) -> Result<()> {
    debug_assert!(out.len() == LANES);
    let mut v = *idx;
    if MAPPED {
        for g in 0..4 {
            v[g] = gather(map, idx[g]);
        }
    }
    let mut lo = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi32(v[0], v[1]));
    let mut hi = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi32(v[2], v[3]));
    if !MAPPED {
        lo = _mm256_add_epi16(lo, basev);
        hi = _mm256_add_epi16(hi, basev);
    }
    let op = out.as_mut_ptr();
    _mm256_storeu_si256(op as *mut __m256i, lo);
    _mm256_storeu_si256(op.add(16) as *mut __m256i, hi);
    if ESC {
        let hit = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi32(idx[0], escv), _mm256_cmpeq_epi32(idx[1], escv)),
            _mm256_or_si256(_mm256_cmpeq_epi32(idx[2], escv), _mm256_cmpeq_epi32(idx[3], escv)),
        );
        if _mm256_testz_si256(hit, hit) == 0 {
            for g in 0..4 {
                let mut m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(idx[g], escv)));
                while m != 0 {
                    let j = m.trailing_zeros() as usize;
                    out[8 * g + j] = esc.next()?;
                    m &= m - 1;
                }
            }
        }
    }
    Ok(())
}

/// Decodes whole steps while at least 32 words remain (a step takes at most 32, and the
/// kernel loads eight at a time); returns the next symbol index. The caller checked that
/// `out` and the words hold one step.
#[target_feature(enable = "avx2,bmi2,popcnt")]
pub(super) unsafe fn run<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<usize> {
    body::<MAPPED, ESC, CTX, Permute>(t, inp, esc, st, out)
}

/// The vector decoder with refills `R`, inlined into each kernel ([`run`] and the AVX-512
/// decoder's) with its target features.
///
/// # Safety
/// AVX2, BMI2 and POPCNT are available, and what `R` needs.
#[inline(always)]
pub(super) unsafe fn body<const MAPPED: bool, const ESC: bool, const CTX: u8, R: Refill>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<usize> {
    let low = _mm256_set1_epi32(L as i32);
    let n = out.len();
    let nwords = inp.nwords;
    let mut pos = st.pos;
    let mut i = 0usize;
    let maskv = _mm256_set1_epi32(((1u32 << t.prec) - 1) as i32);
    let pcnt = _mm_cvtsi32_si128(t.prec as i32);
    let m12 = _mm256_set1_epi32(0xFFF);
    let one = _mm256_set1_epi32(1);
    let zero = _mm256_setzero_si256();
    let escv = _mm256_set1_epi32(t.esc_idx as i32);
    let basev = _mm256_set1_epi16(t.base as i16);
    // The class thresholds as bytes (indices and thresholds are below 256).
    let mut thr = [zero; MAX_CLASSES - 1];
    for (v, &th) in thr.iter_mut().zip(&t.idx_thresholds) {
        *v = _mm256_set1_epi8(th as u8 as i8);
    }
    let nthr = t.idx_thresholds.len();
    debug_assert!(nthr < MAX_CLASSES && t.idx_thresholds.iter().all(|&th| th < 256));
    let tab = t.tab.as_ptr();
    let map = t.map.as_ptr();
    let wp = inp.words.as_ptr();
    let mut x = [zero; 4];
    for (g, v) in x.iter_mut().enumerate() {
        *v = _mm256_loadu_si256(st.x.as_ptr().add(8 * g) as *const __m256i);
    }
    // `CTX_PREV`: the indices of the last step, a byte per lane in lane order.
    let mut prev = _mm256_loadu_si256(st.prev.as_ptr() as *const __m256i);
    // `CTX_BACK`: the ring of context indices, and the row of the current step.
    let ring = st.ring.as_mut_ptr();
    let ring_len = st.ring.len();
    let mut row = st.row;
    // Packed indices in lane order after `packus` of the four groups.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    while i + LANES <= n && pos + LANES <= nwords {
        // The step's 32 classes at once, a byte each from its context index (the previous
        // step's, or the ring's row): the number of thresholds at or below it (`max(r, t) == r`:
        // `r >= t`, unsigned). Compared a group of eight lanes at a time as 32-bit words, they
        // were a third of the step's instructions with eight classes.
        let mut classes = zero;
        if CTX != CTX_NONE {
            let r = if CTX == CTX_BACK {
                debug_assert!(row + LANES <= ring_len);
                // SAFETY: `row + 32 <= ring.len()`.
                _mm256_loadu_si256(ring.add(row) as *const __m256i)
            } else {
                prev
            };
            for th in &thr[..nthr] {
                classes = _mm256_sub_epi8(classes, _mm256_cmpeq_epi8(_mm256_max_epu8(r, *th), r));
            }
        }
        let mut idx = [zero; 4];
        for g in 0..4 {
            let mut slot = _mm256_and_si256(x[g], maskv);
            if CTX != CTX_NONE {
                // Group `g`'s eight classes, widened where they are used (held as four vectors
                // of offsets, they spilled the AVX2 decoder's registers).
                let half = if g < 2 { _mm256_castsi256_si128(classes) } else { _mm256_extracti128_si256::<1>(classes) };
                let h = if g % 2 == 0 { half } else { _mm_srli_si128::<8>(half) };
                slot = _mm256_add_epi32(slot, _mm256_sll_epi32(_mm256_cvtepu8_epi32(h), pcnt));
            }
            // SAFETY: every slot is below `classes << prec` = `tab.len()` (see `scalar_run`).
            let e = gather(tab, slot);
            let f = _mm256_add_epi32(_mm256_and_si256(e, m12), one);
            let bias = _mm256_and_si256(_mm256_srli_epi32::<12>(e), m12);
            idx[g] = _mm256_srli_epi32::<24>(e);
            let y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(x[g], pcnt)), bias);
            debug_assert!(pos + 8 <= nwords);
            // SAFETY: `pos + 8 <= nwords`: the step started with 32 words left and takes at
            // most 8 per group.
            let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(wp.add(2 * pos) as *const __m128i));
            let (xg, taken) = R::refill(y, w, low);
            x[g] = xg;
            pos += taken;
        }
        if CTX != CTX_NONE {
            let b = _mm256_packus_epi16(_mm256_packus_epi32(idx[0], idx[1]), _mm256_packus_epi32(idx[2], idx[3]));
            let b = _mm256_permutevar8x32_epi32(b, order);
            if CTX == CTX_PREV {
                prev = b;
            } else {
                // SAFETY: as for the loads above.
                _mm256_storeu_si256(ring.add(row) as *mut __m256i, b);
                row += LANES;
                if row == ring_len {
                    row = 0;
                }
            }
        }
        debug_assert!(i + LANES <= n);
        // SAFETY: symbols `i..i + 32` are in `out`; indices are below 256, the size of `map`.
        store_step::<MAPPED, ESC>(&idx, map, basev, escv, &mut out[i..i + LANES], esc)?;
        i += LANES;
    }
    for (g, &v) in x.iter().enumerate() {
        _mm256_storeu_si256(st.x.as_mut_ptr().add(8 * g) as *mut __m256i, v);
    }
    _mm256_storeu_si256(st.prev.as_mut_ptr() as *mut __m256i, prev);
    st.pos = pos;
    st.row = row;
    Ok(i)
}
