//! The AVX-512 decoder: the AVX2 decoder's vector loop ([`super::avx2::body`]) with refills
//! through AVX-512 VL: the compare gives a mask register, `vpexpandd` puts the next eight words
//! under it and a masked or merges them, a shorter dependency chain than `movemask`, the
//! permutation table, `vpermd` and a blend (10-17% faster on Zen 5). The SIMD decoders are bound
//! by the latency of each lane's chain (table lookup, multiply, refill) rather than by their
//! instruction count, so the shorter refill chain is what counts: two vectors of sixteen lanes
//! (with `vpgatherdd` or scalar loads, and one `vpexpandw` per step) measured no faster than AVX2
//! on Zen 5. On Intel's cores the table lookups take the hardware gather (`vpgatherdd`), a few
//! micro-ops where eight scalar loads and their inserts take about thirty: 13% faster on an
//! Intel Xeon (`cargo bench --bench lanes`); AMD's microcoded gathers keep the scalar loads.

use super::avx2::{body, Refill};
use super::{EscReader, Input, Lanes, Tables};
use crate::error::Result;
use std::arch::x86_64::*;

/// AVX-512 VL refills: the refill mask in a mask register, the words expanded into it; table
/// lookups by the hardware gather when `GATHER` (`simd::fast_gather`: Intel's cores).
struct Expand<const GATHER: bool>;

impl<const GATHER: bool> Refill for Expand<GATHER> {
    const HW_GATHER: bool = GATHER;

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
pub(super) unsafe fn run<const MAPPED: bool, const ESC: bool, const CTX: u8, const GATHER: bool>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<usize> {
    body::<MAPPED, ESC, CTX, Expand<GATHER>>(t, inp, esc, st, out)
}
