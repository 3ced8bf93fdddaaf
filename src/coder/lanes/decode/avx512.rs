//! The AVX-512 decoder: the AVX2 decoder's vector loop ([`super::avx2::body`]) with refills
//! through AVX-512 VL: the compare gives a mask register, `vpexpandd` puts the next eight words
//! under it and a masked or merges them, a shorter dependency chain than `movemask`, the
//! permutation table, `vpermd` and a blend (10-17% faster on Zen 5). The SIMD decoders are bound
//! by the latency of each lane's chain (table lookup, multiply, refill) rather than by their
//! instruction count, so the shorter refill chain is what counts: two vectors of sixteen lanes
//! (with `vpgatherdd` or scalar loads, and one `vpexpandw` per step) measured no faster than AVX2
//! on Zen 5. On Intel's cores the table lookups take the hardware gather (`vpgatherdd`), a few
//! micro-ops where eight scalar loads and their inserts take about thirty, and there the decoder
//! is [`run_wide`]: two vectors of sixteen lanes, half the instructions per step (on an Intel
//! Xeon, 2-core VM: whisper-base fp16 decodes in 0.95 of the time of four vectors of eight with
//! the gather, MiniLM bf16 in 0.93); AMD's microcoded gathers keep the scalar loads.

use super::avx2::{body, Refill};
use super::{EscReader, Input, Lanes, Tables, CTX_BACK, CTX_NONE, CTX_PREV};
use crate::coder::lanes::{L, LANES, MAX_CLASSES};
use crate::error::Result;
use std::arch::x86_64::*;

/// AVX-512 VL refills: the refill mask in a mask register, the words expanded into it.
struct Expand;

impl Refill for Expand {
    #[inline(always)]
    unsafe fn refill(y: __m256i, w: __m256i, low: __m256i) -> (__m256i, usize) {
        let need = _mm256_cmplt_epu32_mask(y, low);
        let w = _mm256_maskz_expand_epi32(need, w);
        (_mm256_mask_or_epi32(y, need, _mm256_slli_epi32::<16>(y), w), need.count_ones() as usize)
    }
}

/// Decodes whole steps while at least 32 words remain, as the AVX2 decoder's `run`; returns the
/// next symbol index.
///
/// # Safety
/// AVX-512 F and VL, AVX2, BMI2 and POPCNT are available; `out` and the words hold one step.
#[target_feature(enable = "avx512f,avx512vl,avx2,bmi2,popcnt")]
pub(super) unsafe fn run<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<usize> {
    body::<MAPPED, ESC, CTX, Expand>(t, inp, esc, st, out)
}

/// The decoder of Intel's cores, where the hardware gather is fast: two vectors of sixteen lanes
/// (lanes `16 g .. 16 g + 16` in vector `g`), half the instructions of four vectors of eight;
/// the same results as [`run`], errors included. Decodes whole steps while at least 32 words
/// remain; returns the next symbol index.
///
/// # Safety
/// AVX-512 F, BW and VL, AVX2, BMI2 and POPCNT are available; `out` and the words hold one step.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,bmi2,popcnt")]
pub(super) unsafe fn run_wide<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<usize> {
    let low = _mm512_set1_epi32(L as i32);
    let (n, nwords) = (out.len(), inp.nwords);
    let (mut pos, mut i, mut row) = (st.pos, 0usize, st.row);
    let maskv = _mm512_set1_epi32(((1u32 << t.prec) - 1) as i32);
    let pcnt = _mm_cvtsi32_si128(t.prec as i32);
    let m12 = _mm512_set1_epi32(0xFFF);
    let one = _mm512_set1_epi32(1);
    let escv = _mm512_set1_epi32(t.esc_idx as i32);
    let basev = _mm256_set1_epi16(t.base as i16);
    let totalv = _mm512_set1_epi32(1 << t.prec);
    let mut thr = [_mm512_set1_epi32(i32::MAX); MAX_CLASSES - 1];
    for (v, &th) in thr.iter_mut().zip(&t.idx_thresholds) {
        *v = _mm512_set1_epi32(th as i32 - 1);
    }
    let nthr = t.idx_thresholds.len();
    debug_assert!(nthr < MAX_CLASSES);
    let (tab, map, wp) = (t.tab.as_ptr() as *const i32, t.map.as_ptr() as *const i32, inp.words.as_ptr());
    let ring = st.ring.as_mut_ptr();
    let ring_len = st.ring.len();
    let mut x = [_mm512_setzero_si512(); 2];
    let mut pv = [_mm512_setzero_si512(); 2];
    for g in 0..2 {
        x[g] = _mm512_loadu_si512(st.x.as_ptr().add(16 * g) as *const _);
        pv[g] = _mm512_cvtepu8_epi32(_mm_loadu_si128(st.prev.as_ptr().add(16 * g) as *const __m128i));
    }
    while i + LANES <= n && pos + LANES <= nwords {
        if CTX == CTX_BACK {
            debug_assert!(row + LANES <= ring_len);
            for (g, p) in pv.iter_mut().enumerate() {
                // SAFETY: `row + 32 <= ring.len()`.
                *p = _mm512_cvtepu8_epi32(_mm_loadu_si128(ring.add(row + 16 * g) as *const __m128i));
            }
        }
        let mut idx = [_mm512_setzero_si512(); 2];
        for g in 0..2 {
            let mut slot = _mm512_and_si512(x[g], maskv);
            if CTX != CTX_NONE {
                for th in &thr[..nthr] {
                    slot = _mm512_mask_add_epi32(slot, _mm512_cmpgt_epi32_mask(pv[g], *th), slot, totalv);
                }
            }
            // SAFETY: every slot is below `classes << prec` = `tab.len()` (see `scalar_run`).
            let e = _mm512_i32gather_epi32::<4>(slot, tab);
            let f = _mm512_add_epi32(_mm512_and_si512(e, m12), one);
            let bias = _mm512_and_si512(_mm512_srli_epi32::<12>(e), m12);
            idx[g] = _mm512_srli_epi32::<24>(e);
            let y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srl_epi32(x[g], pcnt)), bias);
            debug_assert!(pos + 16 <= nwords);
            // SAFETY: `pos + 16 <= nwords`: the step started with 32 words left and takes at
            // most 16 per vector.
            let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(wp.add(2 * pos) as *const __m256i));
            let need = _mm512_cmplt_epu32_mask(y, low);
            x[g] = _mm512_mask_or_epi32(y, need, _mm512_slli_epi32::<16>(y), _mm512_maskz_expand_epi32(need, w));
            pos += need.count_ones() as usize;
            if CTX == CTX_PREV {
                pv[g] = idx[g];
            }
        }
        if CTX == CTX_BACK {
            for (g, v) in idx.iter().enumerate() {
                // SAFETY: as for the loads above.
                _mm_storeu_si128(ring.add(row + 16 * g) as *mut __m128i, _mm512_cvtepi32_epi8(*v));
            }
            row += LANES;
            if row == ring_len {
                row = 0;
            }
        }
        debug_assert!(i + LANES <= n);
        let op = out.as_mut_ptr().add(i);
        for (g, &ix) in idx.iter().enumerate() {
            // SAFETY: indices are below 256, the size of `map`; symbols `i..i + 32` are in `out`.
            let v = if MAPPED {
                _mm512_cvtepi32_epi16(_mm512_i32gather_epi32::<4>(ix, map))
            } else {
                _mm256_add_epi16(_mm512_cvtepi32_epi16(ix), basev)
            };
            _mm256_storeu_si256(op.add(16 * g) as *mut __m256i, v);
        }
        if ESC {
            let mut m =
                _mm512_cmpeq_epi32_mask(idx[0], escv) as u32 | (_mm512_cmpeq_epi32_mask(idx[1], escv) as u32) << 16;
            while m != 0 {
                out[i + m.trailing_zeros() as usize] = esc.next()?;
                m &= m - 1;
            }
        }
        i += LANES;
    }
    for g in 0..2 {
        _mm512_storeu_si512(st.x.as_mut_ptr().add(16 * g) as *mut _, x[g]);
        _mm_storeu_si128(st.prev.as_mut_ptr().add(16 * g) as *mut __m128i, _mm512_cvtepi32_epi8(pv[g]));
    }
    st.pos = pos;
    st.row = row;
    Ok(i)
}

/// The two streams of a split block at once ([`run_wide`]'s step on four independent vectors of
/// sixteen lanes, the two streams' chains interleaved: each lane's chain is bound by its latency,
/// so the second stream's steps fill the first's waits): one table, `CTX` none or prev, a state,
/// a word stream and an output per stream. Decodes whole steps of both while both outputs and
/// both word streams hold one; returns the steps done, at most `masks.len()`. The escapes are
/// left to the caller: `masks[t][s]` has bit `j` set where symbol `32 t + j` of stream `s` is
/// the escape (its output is then unspecified), so that it reads them in the order of the other
/// levels. (The step is [`run_wide`]'s, written out again: with the constants and the step in a
/// struct and a method, `run_wide` took 1.03-1.05 times as long on whisper-base fp16.)
///
/// # Safety
/// AVX-512 F, BW and VL, AVX2, BMI2 and POPCNT are available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,bmi2,popcnt")]
pub(super) unsafe fn pair_wide<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &[Input; 2],
    st: [&mut Lanes; 2],
    out: [&mut [u16]; 2],
    masks: &mut [[u32; 2]],
) -> usize {
    debug_assert!(CTX != CTX_BACK);
    let low = _mm512_set1_epi32(L as i32);
    let n = out[0].len().min(out[1].len()).min(masks.len() * LANES);
    let nwords = [inp[0].nwords, inp[1].nwords];
    let mut pos = [st[0].pos, st[1].pos];
    let maskv = _mm512_set1_epi32(((1u32 << t.prec) - 1) as i32);
    let pcnt = _mm_cvtsi32_si128(t.prec as i32);
    let m12 = _mm512_set1_epi32(0xFFF);
    let one = _mm512_set1_epi32(1);
    let escv = _mm512_set1_epi32(t.esc_idx as i32);
    let basev = _mm256_set1_epi16(t.base as i16);
    let totalv = _mm512_set1_epi32(1 << t.prec);
    let mut thr = [_mm512_set1_epi32(i32::MAX); MAX_CLASSES - 1];
    for (v, &th) in thr.iter_mut().zip(&t.idx_thresholds) {
        *v = _mm512_set1_epi32(th as i32 - 1);
    }
    let nthr = t.idx_thresholds.len();
    debug_assert!(nthr < MAX_CLASSES);
    let (tab, map) = (t.tab.as_ptr() as *const i32, t.map.as_ptr() as *const i32);
    let wp = [inp[0].words.as_ptr(), inp[1].words.as_ptr()];
    let op = [out[0].as_mut_ptr(), out[1].as_mut_ptr()];
    let mut x = [[_mm512_setzero_si512(); 2]; 2];
    let mut pv = [[_mm512_setzero_si512(); 2]; 2];
    for s in 0..2 {
        for g in 0..2 {
            x[s][g] = _mm512_loadu_si512(st[s].x.as_ptr().add(16 * g) as *const _);
            pv[s][g] = _mm512_cvtepu8_epi32(_mm_loadu_si128(st[s].prev.as_ptr().add(16 * g) as *const __m128i));
        }
    }
    let mut i = 0usize;
    while i + LANES <= n && pos[0] + LANES <= nwords[0] && pos[1] + LANES <= nwords[1] {
        let mut idx = [[_mm512_setzero_si512(); 2]; 2];
        for g in 0..2 {
            for s in 0..2 {
                let mut slot = _mm512_and_si512(x[s][g], maskv);
                if CTX != CTX_NONE {
                    for th in &thr[..nthr] {
                        slot = _mm512_mask_add_epi32(slot, _mm512_cmpgt_epi32_mask(pv[s][g], *th), slot, totalv);
                    }
                }
                // SAFETY: every slot is below `classes << prec` = `tab.len()` (see `scalar_run`).
                let e = _mm512_i32gather_epi32::<4>(slot, tab);
                let f = _mm512_add_epi32(_mm512_and_si512(e, m12), one);
                let bias = _mm512_and_si512(_mm512_srli_epi32::<12>(e), m12);
                idx[s][g] = _mm512_srli_epi32::<24>(e);
                let y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srl_epi32(x[s][g], pcnt)), bias);
                debug_assert!(pos[s] + 16 <= nwords[s]);
                // SAFETY: `pos + 16 <= nwords`: the step started with 32 words left in this
                // stream and takes at most 16 per vector.
                let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(wp[s].add(2 * pos[s]) as *const __m256i));
                let need = _mm512_cmplt_epu32_mask(y, low);
                x[s][g] = _mm512_mask_or_epi32(y, need, _mm512_slli_epi32::<16>(y), _mm512_maskz_expand_epi32(need, w));
                pos[s] += need.count_ones() as usize;
                if CTX == CTX_PREV {
                    pv[s][g] = idx[s][g];
                }
            }
        }
        for (s, ix) in idx.iter().enumerate() {
            for (g, &v) in ix.iter().enumerate() {
                // SAFETY: indices are below 256, the size of `map`; symbols `i..i + 32` are in
                // both outputs (`i + 32 <= n`).
                let v = if MAPPED {
                    _mm512_cvtepi32_epi16(_mm512_i32gather_epi32::<4>(v, map))
                } else {
                    _mm256_add_epi16(_mm512_cvtepi32_epi16(v), basev)
                };
                _mm256_storeu_si256(op[s].add(i + 16 * g) as *mut __m256i, v);
            }
            if ESC {
                masks[i / LANES][s] =
                    _mm512_cmpeq_epi32_mask(ix[0], escv) as u32 | (_mm512_cmpeq_epi32_mask(ix[1], escv) as u32) << 16;
            }
        }
        i += LANES;
    }
    for s in 0..2 {
        for g in 0..2 {
            _mm512_storeu_si512(st[s].x.as_mut_ptr().add(16 * g) as *mut _, x[s][g]);
            _mm_storeu_si128(st[s].prev.as_mut_ptr().add(16 * g) as *mut __m128i, _mm512_cvtepi32_epi8(pv[s][g]));
        }
        st[s].pos = pos[s];
    }
    i / LANES
}
