//! AVX-512 versions of kernels whose AVX2 versions run out of vector registers; the other
//! kernels run their AVX2 versions at this level.

use std::arch::x86_64::*;

/// [`super::from_runs_steps`] on whole blocks of 32 steps (the rest to the AVX2 kernel): 32 steps
/// of 16 lanes (half of each step) are 16 vectors, step `i` and step `16 + i` in each (a 128-bit
/// lane for every eight lanes of a step), transposed in registers into 32 words of each of the
/// 16 runs, one run per vector and a whole cache line of 16-bit words per store: three rounds of
/// unpacks within the 128-bit lanes, then one permute of 64-bit words across them. The AVX2
/// kernel needs two 16 x 16 transposes (32 vectors) for a whole line per run, which do not fit
/// its 16 registers: how its shuffles were lowered and its vectors spilled changed from build to
/// build, and with them its decode of `lanes(adj)` blocks (`cargo bench --bench lanes --
/// lanes_decode_runs`: 1.08-1.11 times as long in a build whose only change was elsewhere, the
/// AVX2 kernel's share of `perf record`'s samples 23% against 17%). Returns the steps done.
///
/// # Safety
/// The CPU must support AVX-512 F and BW and AVX2; `block` holds whole steps, `t0` plus their
/// number at most `x.len() / 32` (checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub unsafe fn from_runs_steps<T: super::RunWord>(block: &[u16], x: &mut [T], t0: usize) -> usize {
    const LANES: usize = super::RUNS;
    let r = x.len() / LANES;
    let tn = block.len() / LANES;
    debug_assert!(block.len() == LANES * tn && t0 + tn <= r);
    let whole = tn - tn % 32;
    for s0 in (0..whole).step_by(32) {
        for half in 0..2 {
            // SAFETY: steps `s0..s0 + 32` are within `block`; the runs are below 32, each
            // `x[r run..r (run + 1)]`, and `t0 + s0 + 32 <= r`.
            unsafe { half_to_runs(block.as_ptr().add(LANES * s0 + 16 * half), x, r, t0 + s0, 16 * half) };
        }
    }
    // SAFETY: as this function's, for the steps left.
    whole + unsafe { super::avx2::from_runs_steps(&block[LANES * whole..], x, t0 + whole) }
}

/// Lanes `16 h..16 h + 16` (`src` = the first step's lane `16 h`; `first` = `16 h`, the first
/// run) of 32 steps into their runs, from word `at` of each: three rounds of the AVX2 kernel's
/// `transpose16` within each 128-bit lane, then a permute across them. Vector `i` starts as
/// steps `i` and `16 + i` (their lanes `16 h..16 h + 8` in 128-bit lane 0, `16 h + 8..16 h + 16`
/// in lane 1, the same of step `16 + i` in lanes 2 and 3); after the rounds, lane `q` of
/// s3[2 k + m] is word `k` of the lane's eight (run `16 h + 8 (q % 2) + k`) in steps
/// `16 (q / 2) + 8 m` and the seven after, so that the lanes 0 and 2 of s3[2 k] and s3[2 k + 1]
/// are run `16 h + k`'s 32 words, and lanes 1 and 3 run `16 h + 8 + k`'s.
///
/// # Safety
/// AVX-512 F and BW and AVX2 are enabled; 32 steps are readable from `src - first`; runs
/// `first..first + 16` are below 32 and `at + 32 <= r`.
#[inline(always)]
unsafe fn half_to_runs<T: super::RunWord>(src: *const u16, x: &mut [T], r: usize, at: usize, first: usize) {
    const LANES: usize = super::RUNS;
    // SAFETY (the whole body): the caller's guarantees.
    unsafe {
        let a: [__m512i; 16] = std::array::from_fn(|i| {
            let early = _mm256_loadu_si256(src.add(LANES * i) as *const __m256i);
            let late = _mm256_loadu_si256(src.add(LANES * (16 + i)) as *const __m256i);
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(early), late)
        });
        let mut s1 = [_mm512_setzero_si512(); 16];
        for p in 0..8 {
            s1[p] = _mm512_unpacklo_epi16(a[2 * p], a[2 * p + 1]);
            s1[8 + p] = _mm512_unpackhi_epi16(a[2 * p], a[2 * p + 1]);
        }
        let mut s2 = [_mm512_setzero_si512(); 16];
        for i in (0..16).step_by(2) {
            let (g, q) = (i / 8, (i % 8) / 2);
            let (u, v) = (s1[8 * g + 2 * q], s1[8 * g + 2 * q + 1]);
            s2[i] = _mm512_unpacklo_epi32(u, v);
            s2[i + 1] = _mm512_unpackhi_epi32(u, v);
        }
        let lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        let hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        for k in 0..8 {
            let (g, h) = (k / 4, (k % 4) / 2);
            let round = |m: usize| {
                let (u, v) = (s2[8 * g + 4 * m + h], s2[8 * g + 4 * m + 2 + h]);
                if k % 2 == 0 {
                    _mm512_unpacklo_epi64(u, v)
                } else {
                    _mm512_unpackhi_epi64(u, v)
                }
            };
            let (e, l) = (round(0), round(1));
            store32(x, r * (first + k) + at, _mm512_permutex2var_epi64(e, lo, l));
            store32(x, r * (first + 8 + k) + at, _mm512_permutex2var_epi64(e, hi, l));
        }
    }
}

/// Stores the 32 words of `v` at `x[at..at + 32]`, narrowed to bytes for `u8`.
///
/// # Safety
/// AVX-512 F and BW are enabled; `at + 32 <= x.len()`.
#[inline(always)]
unsafe fn store32<T: super::RunWord>(x: &mut [T], at: usize, v: __m512i) {
    debug_assert!(at + 32 <= x.len());
    // SAFETY: the caller's guarantees. `T` is `u8` or `u16` (`RunWord` is sealed), so its size
    // says which.
    unsafe {
        if std::mem::size_of::<T>() == 2 {
            _mm512_storeu_si512(x.as_mut_ptr().add(at) as *mut _, v);
        } else {
            _mm256_storeu_si256(x.as_mut_ptr().add(at) as *mut __m256i, _mm512_cvtepi16_epi8(v));
        }
    }
}
