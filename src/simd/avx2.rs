//! AVX2 + BMI2 kernels (x86-64). Each function is compiled with the features enabled and may only
//! be called after `is_x86_feature_detected!` confirmed them ([`super::detected`]). Tails shorter
//! than one vector go to the scalar kernels, so results are identical word for word.

use super::derive::{derive_groups, Kind, Src};
use super::kquants::{Lanes, Qkx2, Search};
use super::scalar;
use std::arch::x86_64::*;

/// [`super::unpack_u8`]: eight values of `bits` bits are exactly `bits` bytes; one 64-bit load and
/// one `pdep` spread them into eight bytes.
///
/// # Safety
/// The CPU must support BMI2.
#[target_feature(enable = "avx2,bmi2")]
#[allow(unused_unsafe)] // `_pdep_u64` is a safe call inside this function on recent compilers only
pub unsafe fn unpack_u8(data: &[u8], bits: u32, out: &mut [u8]) {
    let b = bits as usize;
    if b == 8 {
        out.copy_from_slice(&data[..out.len()]);
        return;
    }
    let spread = 0x0101_0101_0101_0101u64 * ((1u64 << bits) - 1);
    // Groups whose 8-byte load stays inside the data.
    let groups = (out.len() / 8).min(if data.len() >= 8 { (data.len() - 8) / b + 1 } else { 0 });
    for (g, o) in out[..groups * 8].chunks_exact_mut(8).enumerate() {
        let w = u64::from_le_bytes(data[g * b..g * b + 8].try_into().unwrap());
        // SAFETY: BMI2 is enabled for this function and the caller checked the CPU has it.
        o.copy_from_slice(&unsafe { _pdep_u64(w, spread) }.to_le_bytes());
    }
    scalar::unpack(&data[groups * b..], bits, &mut out[groups * 8..]);
}

/// [`super::pack_u8`], the inverse of [`unpack_u8`]: one `pext` gathers eight values of
/// `bits` bits from an 8-byte load into `bits` bytes, stored as eight (the next group's store
/// overwrites the rest), into `out`'s spare capacity: no zero fill. The last values (fewer
/// than eight) go to the scalar packer.
///
/// # Safety
/// The CPU must support BMI2; `bits` is in 1..=8.
#[target_feature(enable = "avx2,bmi2")]
#[allow(unused_unsafe)] // `_pext_u64` is a safe call inside this function on recent compilers only
pub unsafe fn pack_u8(values: &[u8], bits: u32, out: &mut Vec<u8>) {
    let b = bits as usize;
    if b == 8 {
        out.extend_from_slice(values);
        return;
    }
    let groups = values.len() / 8;
    let gather = 0x0101_0101_0101_0101u64 * ((1u64 << bits) - 1);
    let start = out.len();
    out.reserve(groups * b + 8);
    let dst = out.spare_capacity_mut().as_mut_ptr() as *mut u8;
    for (g, v) in values[..groups * 8].chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(v.try_into().unwrap());
        // SAFETY: BMI2 is enabled for this function and the caller checked the CPU has it; the
        // store ends at `g * b + 8 <= groups * b + 8`, within the capacity reserved above.
        unsafe { dst.add(g * b).cast::<u64>().write_unaligned(_pext_u64(w, gather).to_le()) };
    }
    // SAFETY: the stores wrote (at least) the `groups * b` bytes past `start`.
    unsafe { out.set_len(start + groups * b) };
    scalar::pack_u8(&values[groups * 8..], bits, out);
}

/// [`super::unpack_u16`]: eight values are `bits` bytes; two `pdep`s spread four values each into
/// four 16-bit lanes.
///
/// # Safety
/// The CPU must support BMI2.
#[target_feature(enable = "avx2,bmi2")]
#[allow(unused_unsafe)] // `_pdep_u64` is a safe call inside this function on recent compilers only
pub unsafe fn unpack_u16(data: &[u8], bits: u32, out: &mut [u16]) {
    let b = bits as usize;
    let spread = 0x0001_0001_0001_0001u64 * ((1u64 << bits) - 1);
    let (half_byte, half_shift) = ((4 * b) >> 3, ((4 * b) & 7) as u32);
    // Both loads of group g end by byte g*b + 16.
    let groups = (out.len() / 8).min(if data.len() >= 16 { (data.len() - 16) / b + 1 } else { 0 });
    for (g, o) in out[..groups * 8].chunks_exact_mut(8).enumerate() {
        let at = g * b;
        let lo = u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
        let hi = u64::from_le_bytes(data[at + half_byte..at + half_byte + 8].try_into().unwrap()) >> half_shift;
        // SAFETY: BMI2 is enabled for this function and the caller checked the CPU has it.
        let (lo, hi) = unsafe { (_pdep_u64(lo, spread), _pdep_u64(hi, spread)) };
        for j in 0..4 {
            o[j] = (lo >> (16 * j)) as u16;
            o[4 + j] = (hi >> (16 * j)) as u16;
        }
    }
    scalar::unpack(&data[groups * b..], bits, &mut out[groups * 8..]);
}

/// [`super::merge_fields16`], sixteen words per iteration.
///
/// # Safety
/// The CPU must support AVX2; all slices have the same length (checked by the caller).
#[target_feature(enable = "avx2")]
pub unsafe fn merge_fields16(h: &[u16], s: &[u8], m: &[u8], lo: u32, out: &mut [u16]) {
    let n = out.len();
    let full = n - n % 16;
    let count = _mm_cvtsi32_si128(lo as i32);
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= n and every slice holds n elements, so each 16-element load and the
        // store stay in bounds; unaligned loads and stores are used.
        unsafe {
            let hv = _mm256_loadu_si256(h.as_ptr().add(i) as *const __m256i);
            let sv = _mm256_cvtepu8_epi16(_mm_loadu_si128(s.as_ptr().add(i) as *const __m128i));
            let mv = _mm256_cvtepu8_epi16(_mm_loadu_si128(m.as_ptr().add(i) as *const __m128i));
            let r = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(sv, 15), _mm256_sll_epi16(hv, count)), mv);
            _mm256_storeu_si256(out.as_mut_ptr().add(i) as *mut __m256i, r);
        }
        i += 16;
    }
    scalar::merge_fields(&h[full..], &s[full..], &m[full..], lo, 15, &mut out[full..]);
}

/// [`super::merge_planes16`], sixteen words per iteration.
///
/// # Safety
/// The CPU must support AVX2; all slices have the same length (checked by the caller).
#[target_feature(enable = "avx2")]
pub unsafe fn merge_planes16<H: super::RunWord>(hi: &[H], lo: &[u8], shift: u32, out: &mut [u16]) {
    let n = out.len();
    let full = n - n % 16;
    let count = _mm_cvtsi32_si128(shift as i32);
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= n and every slice holds n elements: loads and the store are in bounds.
        unsafe {
            let hv = H::load16(hi.as_ptr().add(i));
            let lv = _mm256_cvtepu8_epi16(_mm_loadu_si128(lo.as_ptr().add(i) as *const __m128i));
            _mm256_storeu_si256(
                out.as_mut_ptr().add(i) as *mut __m256i,
                _mm256_or_si256(_mm256_sll_epi16(hv, count), lv),
            );
        }
        i += 16;
    }
    scalar::merge_planes(&hi[full..], &lo[full..], shift, &mut out[full..]);
}

impl super::RunWord for u8 {
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load16(p: *const u8) -> __m256i {
        // SAFETY: the caller guarantees 16 readable bytes.
        unsafe { _mm256_cvtepu8_epi16(_mm_loadu_si128(p as *const __m128i)) }
    }
    fn narrow(v: u16) -> u8 {
        v as u8
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store16(p: *mut u8, v: __m256i) {
        // The low byte of each word: one shuffle within each half, then the halves' first
        // eight bytes together.
        let low = _mm256_setr_epi8(
            0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1, 0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1,
            -1, -1, -1,
        );
        let b = _mm256_permute4x64_epi64::<0x08>(_mm256_shuffle_epi8(v, low));
        // SAFETY: the caller guarantees 16 writable bytes.
        unsafe { _mm_storeu_si128(p as *mut __m128i, _mm256_castsi256_si128(b)) }
    }
}

impl super::RunWord for u16 {
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load16(p: *const u16) -> __m256i {
        // SAFETY: the caller guarantees 16 readable words.
        unsafe { _mm256_loadu_si256(p as *const __m256i) }
    }
    fn narrow(v: u16) -> u16 {
        v
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store16(p: *mut u16, v: __m256i) {
        // SAFETY: the caller guarantees 16 writable words.
        unsafe { _mm256_storeu_si256(p as *mut __m256i, v) }
    }
}

/// The 16 x 16 matrix of 16-bit words whose row `i` is `a[i]`, transposed: row `k` of the result
/// holds word `k` of every row of `a`. Three rounds of unpacks within the 128-bit halves, then one
/// exchange of halves.
#[inline(always)]
unsafe fn transpose16(a: &[__m256i; 16]) -> [__m256i; 16] {
    // SAFETY (the whole body): AVX2 is enabled in every caller (target_feature functions that
    // inline this one).
    unsafe {
        let s1: [__m256i; 16] = std::array::from_fn(|i| {
            let (p, q) = (a[2 * (i % 8)], a[2 * (i % 8) + 1]);
            if i < 8 {
                _mm256_unpacklo_epi16(p, q)
            } else {
                _mm256_unpackhi_epi16(p, q)
            }
        });
        // s1[p] (p < 8): words 0..4 of each half, rows 2p and 2p + 1 interleaved; s1[8 + p]: words 4..8.
        let s2: [__m256i; 16] = std::array::from_fn(|i| {
            let (g, q) = (i / 8, (i % 8) / 2);
            let (p, o) = (s1[8 * g + 2 * q], s1[8 * g + 2 * q + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_epi32(p, o)
            } else {
                _mm256_unpackhi_epi32(p, o)
            }
        });
        // s2[8 g + 2 q + h]: words 4 g + 2 h and 4 g + 2 h + 1 of rows 4 q..4 q + 4.
        let s3: [__m256i; 16] = std::array::from_fn(|i| {
            // Word `k` (0..8) of rows 8 m..8 m + 8.
            let (k, m) = (i / 2, i % 2);
            let (g, h, lo) = (k / 4, (k % 4) / 2, k % 2 == 0);
            let (p, o) = (s2[8 * g + 2 * (2 * m) + h], s2[8 * g + 2 * (2 * m + 1) + h]);
            if lo {
                _mm256_unpacklo_epi64(p, o)
            } else {
                _mm256_unpackhi_epi64(p, o)
            }
        });
        std::array::from_fn(|k| {
            let (p, o) = (s3[2 * (k % 8)], s3[2 * (k % 8) + 1]);
            if k < 8 {
                _mm256_permute2x128_si256::<0x20>(p, o)
            } else {
                _mm256_permute2x128_si256::<0x31>(p, o)
            }
        })
    }
}

/// [`super::to_runs`] on whole blocks of 16 steps: 16 words of each of 16 runs are one 16 x 16
/// matrix of 16-bit words, transposed (`transpose16`; two matrices per block of 32 runs).
/// Returns the steps done (the rest go to the scalar kernel).
///
/// # Safety
/// The CPU must support AVX2; `y` is as long as `x`.
#[target_feature(enable = "avx2")]
pub unsafe fn to_runs<T: super::RunWord>(x: &[T], y: &mut [u16]) -> usize {
    const LANES: usize = super::RUNS;
    assert!(y.len() == x.len());
    let r = x.len() / LANES;
    let steps = r - r % 16;
    for t0 in (0..steps).step_by(16) {
        for half in 0..2 {
            // SAFETY: run `j < 32` is x[r j..r (j + 1)], and `t0 + 16 <= r`: every load reads 16
            // words of one run; row `t` of the block is y[32 (t0 + t)..][..32], and the stores
            // write its half `16 half..16 (half + 1)`, within `32 r <= y.len()`.
            unsafe {
                let a: [__m256i; 16] = std::array::from_fn(|i| T::load16(x.as_ptr().add(r * (16 * half + i) + t0)));
                let rows = transpose16(&a);
                let base = y.as_mut_ptr().add(LANES * t0 + 16 * half);
                for (k, row) in rows.iter().enumerate() {
                    _mm256_storeu_si256(base.add(LANES * k) as *mut __m256i, *row);
                }
            }
        }
    }
    steps
}

/// [`super::from_runs_steps`] on whole groups of 16 steps, the inverse of [`to_runs`]: a group's
/// 16 rows (a step of 32 lanes each) are two 16 x 16 matrices, whose transposes are 16 words of
/// each run. Returns the steps done (the rest go to the scalar kernel).
///
/// # Safety
/// The CPU must support AVX2; `block` holds whole steps, `t0` plus their number at most
/// `x.len() / 32` (checked by the caller).
#[target_feature(enable = "avx2")]
pub unsafe fn from_runs_steps<T: super::RunWord>(block: &[u16], x: &mut [T], t0: usize) -> usize {
    const LANES: usize = super::RUNS;
    let r = x.len() / LANES;
    let tn = block.len() / LANES;
    debug_assert!(block.len() == LANES * tn && t0 + tn <= r);
    let steps = tn - tn % 16;
    let mut s0 = 0;
    while s0 < steps {
        // Two groups at a time where there are two: each run then takes 32 consecutive words
        // (a whole cache line of 16-bit words) at once.
        let groups = if s0 + 32 <= steps { 2 } else { 1 };
        for half in 0..2 {
            // SAFETY: row `t` of group `g` is block[32 (s0 + 16 g + t)..][..32] and the loads
            // read its half `16 half..16 (half + 1)`, within `32 tn`; run `j < 32` is
            // x[r j..r (j + 1)] and `t0 + s0 + 16 groups <= r`: every store writes 16 words of
            // one run.
            unsafe {
                let mut runs = [[_mm256_setzero_si256(); 16]; 2];
                for (g, out) in runs.iter_mut().enumerate().take(groups) {
                    let base = block.as_ptr().add(LANES * (s0 + 16 * g) + 16 * half);
                    let a: [__m256i; 16] =
                        std::array::from_fn(|t| _mm256_loadu_si256(base.add(LANES * t) as *const __m256i));
                    *out = transpose16(&a);
                }
                for k in 0..16 {
                    let at = r * (16 * half + k) + t0 + s0;
                    for (g, group) in runs.iter().enumerate().take(groups) {
                        T::store16(x.as_mut_ptr().add(at + 16 * g), group[k]);
                    }
                }
            }
        }
        s0 += 16 * groups;
    }
    steps
}

/// [`super::nibble_blocks`]: per block, the 32 values in one vector; the low nibbles of values
/// `j` and `16 + j` into byte `j`, and bit 4 of every value (shifted to bit 7 within its byte)
/// gathered by one `vpmovmskb`. Returns the blocks done (all of them).
///
/// # Safety
/// The CPU must support AVX2; `qs + 16 <= b` and `qh + 4 <= b` (checked by the caller).
#[target_feature(enable = "avx2")]
pub unsafe fn nibble_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>) -> usize {
    let k = (body.len() / b).min(vals.len() / 32);
    let low = _mm_set1_epi8(15);
    for i in 0..k {
        // SAFETY: block `i < k` is body[b i..b (i + 1)] and its values vals[32 i..32 (i + 1)];
        // the stores write bytes `qs..qs + 16` and `qh..qh + 4` of the block, within `b`.
        unsafe {
            let v = _mm256_loadu_si256(vals.as_ptr().add(32 * i) as *const __m256i);
            let lo = _mm256_castsi256_si128(v);
            let hi = _mm256_extracti128_si256::<1>(v);
            let packed = _mm_or_si128(_mm_and_si128(lo, low), _mm_slli_epi16::<4>(_mm_and_si128(hi, low)));
            let blk = body.as_mut_ptr().add(b * i);
            _mm_storeu_si128(blk.add(qs) as *mut __m128i, packed);
            if let Some(q) = qh {
                let h = _mm256_movemask_epi8(_mm256_slli_epi16::<3>(v)) as u32;
                std::ptr::copy_nonoverlapping(h.to_le_bytes().as_ptr(), blk.add(q), 4);
            }
        }
    }
    k
}

/// [`super::six_bit_blocks`]: the scalar level's body compiled for AVX2 (its loops over
/// fixed-size arrays vectorize to 256-bit shifts, masks and ors; the bytes are the same).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn six_bit_blocks(vals: &[u8], body: &mut [u8], b: usize, ql: usize, qh: usize) {
    super::scalar::six_bit_blocks(vals, body, b, ql, qh)
}

/// [`super::k_nibble_blocks`]: the scalar level's body compiled for AVX2 (the same bytes).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn k_nibble_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>) {
    super::scalar::k_nibble_blocks(vals, body, b, qs, qh)
}

/// [`super::crumb_blocks`]: the scalar level's body compiled for AVX2 (the same bytes).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn crumb_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, hmask: Option<usize>) {
    super::scalar::crumb_blocks(vals, body, b, qs, hmask)
}

/// [`super::derive()`]: the same kernel as the scalar level, compiled for AVX2 (eight f32 lanes:
/// the conversions, block maxima and quantizations vectorize; no FMA, so every product and sum
/// is rounded as at the scalar level and the bytes are the same).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn derive(kind: Kind, src: Src, reference: &[u8], e0: usize, out: &mut [u8]) {
    derive_groups(kind, src, reference, e0, out, &KSearch)
}

/// The K-quant scale searches (`super::kquants`) with the eight sub-blocks in the lanes of one
/// vector: every lane runs the scalar level's operations in its order (IEEE adds, multiplies
/// and divides, compares and selects for its branches), so the results are the same.
struct KSearch;

impl Search for KSearch {
    fn qx(&self, nmax: i32, x: &Lanes<16>, l_out: &mut [[i8; 8]; 16]) -> [f32; 8] {
        // SAFETY: only built by `derive` above, which runs on CPUs with AVX2.
        unsafe { make_qx_quants(nmax, x, l_out) }
    }
    fn qkx2<const N: usize, const MAD: bool>(&self, p: &Qkx2<N>, l_out: &mut [[u8; 8]; N]) -> ([f32; 8], [f32; 8]) {
        // SAFETY: as above.
        unsafe { make_qkx2_quants::<N, MAD>(p, l_out) }
    }
}

/// ggml's `nearest_int` in eight lanes (`kquants::nearest_int`).
#[target_feature(enable = "avx2")]
fn nearest8(v: __m256) -> __m256i {
    let t = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12_582_912.0)));
    let l = _mm256_sub_epi32(_mm256_and_si256(t, _mm256_set1_epi32(0x007f_ffff)), _mm256_set1_epi32(0x0040_0000));
    // NaN lanes give 0, as at the scalar level.
    _mm256_and_si256(l, _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(v, v)))
}

#[target_feature(enable = "avx2")]
fn load8(a: &[f32; 8]) -> __m256 {
    // SAFETY: eight f32 are read from an array of eight.
    unsafe { _mm256_loadu_ps(a.as_ptr()) }
}

#[target_feature(enable = "avx2")]
fn store8(v: __m256) -> [f32; 8] {
    let mut a = [0f32; 8];
    // SAFETY: eight f32 are written to an array of eight.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
    a
}

#[target_feature(enable = "avx2")]
fn store8i(v: __m256i) -> [i32; 8] {
    let mut a = [0i32; 8];
    // SAFETY: eight i32 are written to an array of eight.
    unsafe { _mm256_storeu_si256(a.as_mut_ptr() as *mut __m256i, v) };
    a
}

/// `kquants::make_qx_quants` in vectors.
#[target_feature(enable = "avx2")]
fn make_qx_quants(nmax: i32, x: &Lanes<16>, l_out: &mut [[i8; 8]; 16]) -> [f32; 8] {
    let zero = _mm256_setzero_ps();
    let (mut max, mut amax) = (zero, zero);
    let xs: [__m256; 16] = std::array::from_fn(|i| load8(&x[i]));
    for &xi in &xs {
        let ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0), xi);
        let m = _mm256_cmp_ps::<_CMP_GT_OQ>(ax, amax);
        amax = _mm256_blendv_ps(amax, ax, m);
        max = _mm256_blendv_ps(max, xi, m);
    }
    let (lo, hi) = (_mm256_set1_epi32(-nmax), _mm256_set1_epi32(nmax - 1));
    let level =
        |iscale: __m256, v: __m256| _mm256_min_epi32(_mm256_max_epi32(nearest8(_mm256_mul_ps(iscale, v)), lo), hi);
    let sums = |iscale: __m256, ls: &mut [__m256i; 16]| {
        let (mut sumlx, mut suml2) = (zero, zero);
        for (l, &xi) in ls.iter_mut().zip(&xs) {
            *l = level(iscale, xi);
            let lf = _mm256_cvtepi32_ps(*l);
            let w = _mm256_mul_ps(xi, xi);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, xi), lf));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, lf), lf));
        }
        (sumlx, suml2)
    };
    let mut best_l = [_mm256_setzero_si256(); 16];
    let (sumlx, suml2) = sums(_mm256_div_ps(_mm256_set1_ps(-(nmax as f32)), max), &mut best_l);
    let nonzero = _mm256_cmp_ps::<_CMP_NEQ_UQ>(suml2, zero);
    let mut scale = _mm256_blendv_ps(zero, _mm256_div_ps(sumlx, suml2), nonzero);
    let mut best = _mm256_mul_ps(scale, sumlx);
    let mut ls = [_mm256_setzero_si256(); 16];
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = _mm256_div_ps(_mm256_set1_ps(-(nmax as f32 + 0.1 * is as f32)), max);
        let (sumlx, suml2) = sums(iscale, &mut ls);
        let better = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GT_OQ>(suml2, zero),
            _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2)),
        );
        let bi = _mm256_castps_si256(better);
        for (b, &l) in best_l.iter_mut().zip(&ls) {
            *b = _mm256_blendv_epi8(*b, l, bi);
        }
        scale = _mm256_blendv_ps(scale, _mm256_div_ps(sumlx, suml2), better);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(scale, sumlx), better);
    }
    // All zero: levels 0 and scale 0.
    let tiny = _mm256_cmp_ps::<_CMP_LT_OQ>(amax, _mm256_set1_ps(1e-15));
    let ti = _mm256_castps_si256(tiny);
    let off = _mm256_set1_epi32(nmax);
    for (o, &l) in l_out.iter_mut().zip(&best_l) {
        let v = store8i(_mm256_andnot_si256(ti, _mm256_add_epi32(l, off)));
        *o = std::array::from_fn(|k| v[k] as i8);
    }
    store8(_mm256_andnot_ps(tiny, scale))
}

/// `kquants::make_qkx2_quants` in vectors.
#[target_feature(enable = "avx2")]
fn make_qkx2_quants<const N: usize, const MAD: bool>(p: &Qkx2<N>, l_out: &mut [[u8; 8]; N]) -> ([f32; 8], [f32; 8]) {
    let Qkx2 { nmax, x, w, rmin, nstep } = *p;
    let zero = _mm256_setzero_ps();
    let sign = _mm256_set1_ps(-0.0);
    let err = |diff: __m256| if MAD { _mm256_andnot_ps(sign, diff) } else { _mm256_mul_ps(diff, diff) };
    let xs: [__m256; N] = std::array::from_fn(|i| load8(&x[i]));
    let ws: [__m256; N] = std::array::from_fn(|i| load8(&w[i]));
    let (mut min, mut max) = (xs[0], xs[0]);
    let mut sum_w = ws[0];
    let mut sum_x = _mm256_mul_ps(sum_w, xs[0]);
    for i in 1..N {
        min = _mm256_blendv_ps(min, xs[i], _mm256_cmp_ps::<_CMP_LT_OQ>(xs[i], min));
        max = _mm256_blendv_ps(max, xs[i], _mm256_cmp_ps::<_CMP_GT_OQ>(xs[i], max));
        sum_w = _mm256_add_ps(sum_w, ws[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(ws[i], xs[i]));
    }
    min = _mm256_blendv_ps(min, zero, _mm256_cmp_ps::<_CMP_GT_OQ>(min, zero));
    let flat = _mm256_cmp_ps::<_CMP_EQ_OQ>(max, min);
    let flat_min = min;
    let (lo, hi) = (_mm256_setzero_si256(), _mm256_set1_epi32(nmax));
    let level = |iscale: __m256, v: __m256, min: __m256| {
        _mm256_min_epi32(_mm256_max_epi32(nearest8(_mm256_mul_ps(iscale, _mm256_sub_ps(v, min))), lo), hi)
    };
    let iscale = _mm256_div_ps(_mm256_set1_ps(nmax as f32), _mm256_sub_ps(max, min));
    let mut scale = _mm256_div_ps(_mm256_set1_ps(1.0), iscale);
    let mut best_error = zero;
    let mut best_l = [_mm256_setzero_si256(); N];
    for i in 0..N {
        best_l[i] = level(iscale, xs[i], min);
        let diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(best_l[i])), min), xs[i]);
        best_error = _mm256_add_ps(best_error, _mm256_mul_ps(ws[i], err(diff)));
    }
    let mut laux = [_mm256_setzero_si256(); N];
    for is in 0..=nstep {
        let iscale = _mm256_div_ps(_mm256_set1_ps(rmin + 0.1 * is as f32 + nmax as f32), _mm256_sub_ps(max, min));
        let (mut sum_l, mut sum_l2, mut sum_xl) = (zero, zero, zero);
        for i in 0..N {
            laux[i] = level(iscale, xs[i], min);
            let l = _mm256_cvtepi32_ps(laux[i]);
            let wl = _mm256_mul_ps(ws[i], l);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xs[i]));
        }
        let d = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        let mut this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), d);
        let mut this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), d);
        let pos = _mm256_cmp_ps::<_CMP_GT_OQ>(this_min, zero);
        this_min = _mm256_blendv_ps(this_min, zero, pos);
        this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), pos);
        let mut cur_error = zero;
        for i in 0..N {
            let diff =
                _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(laux[i])), this_min), xs[i]);
            cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(ws[i], err(diff)));
        }
        let better = _mm256_andnot_ps(
            flat,
            _mm256_and_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(d, zero), _mm256_cmp_ps::<_CMP_LT_OQ>(cur_error, best_error)),
        );
        let bi = _mm256_castps_si256(better);
        for (b, &l) in best_l.iter_mut().zip(&laux) {
            *b = _mm256_blendv_epi8(*b, l, bi);
        }
        best_error = _mm256_blendv_ps(best_error, cur_error, better);
        scale = _mm256_blendv_ps(scale, this_scale, better);
        min = _mm256_blendv_ps(min, this_min, better);
    }
    let fi = _mm256_castps_si256(flat);
    for (o, &l) in l_out.iter_mut().zip(&best_l) {
        let v = store8i(_mm256_andnot_si256(fi, l));
        *o = std::array::from_fn(|k| v[k] as u8);
    }
    let scale = _mm256_andnot_ps(flat, scale);
    let min = _mm256_blendv_ps(min, flat_min, flat);
    (store8(scale), store8(_mm256_xor_ps(min, sign)))
}

/// Walks the whole groups of a palette of 16 or 32 words (other sizes are left to the scalar
/// level: no group is done): for group `j` with `k` distinct words, `f(j, k, window)` sees the
/// 32 words before its gaps and from them on (word 0 and the words from `k` on are anything: the
/// kernels replace and clear them) and returns false where the group does not match. Returns the
/// groups done and the gaps they used, or None where the parts do not match.
#[inline(always)]
fn palette_groups<T: Copy + Default>(
    p: &super::PaletteParts<T>,
    mut f: impl FnMut(usize, usize, &[T]) -> bool,
) -> Option<(usize, usize)> {
    if p.g != 16 && p.g != 32 {
        return Some((0, 0));
    }
    let mut edge = [T::default(); 32];
    let mut at = 0;
    for j in 0..p.index.len() / p.g {
        let k = p.count[j] as usize + 1;
        if k > p.g || at + k - 1 > p.gaps.len() {
            return None;
        }
        let window = match at.checked_sub(1) {
            Some(a) if a + 32 <= p.gaps.len() => &p.gaps[a..a + 32],
            _ => {
                edge[1..k].copy_from_slice(&p.gaps[at..at + k - 1]);
                &edge[..]
            }
        };
        at += k - 1;
        if !f(j, k, window) {
            return None;
        }
    }
    Some((p.index.len() / p.g, at))
}

/// The 16 indices at `src` when all are below `k`.
///
/// # Safety
/// AVX2 is enabled in the caller; 16 bytes are readable at `src`.
#[inline(always)]
unsafe fn indices16(src: *const u8, k: usize) -> Option<__m128i> {
    // SAFETY: as the caller guarantees.
    unsafe {
        let ids = _mm_loadu_si128(src as *const __m128i);
        let top = _mm_set1_epi8((k - 1) as i8);
        (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(ids, top), top)) == 0xffff).then_some(ids)
    }
}

/// The 32 indices at `src` when all are below `k`.
///
/// # Safety
/// AVX2 is enabled in the caller; 32 bytes are readable at `src`.
#[inline(always)]
unsafe fn indices32(src: *const u8, k: usize) -> Option<__m256i> {
    // SAFETY: as the caller guarantees.
    unsafe {
        let ids = _mm256_loadu_si256(src as *const __m256i);
        let top = _mm256_set1_epi8((k - 1) as i8);
        (_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(ids, top), top)) == -1).then_some(ids)
    }
}

/// Bytes `ids` (below 32) of the table whose bytes 0-15 are `a` and 16-31 are `b`, each in a
/// 16-byte half: two byte shuffles, blended by bit 4 of each index (shifted to bit 7).
///
/// # Safety
/// AVX2 is enabled in the caller.
#[inline(always)]
unsafe fn lookup32(a: __m128i, b: __m128i, ids: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in the caller.
    unsafe {
        let lo = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(a), ids);
        let hi = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(b), ids);
        _mm256_blendv_epi8(lo, hi, _mm256_slli_epi16::<3>(ids))
    }
}

/// [`super::palette()`] over bytes for groups of 16 or 32 words (other sizes are left to the
/// scalar level): each whole group's distinct words as a prefix sum in one vector (its smallest word
/// and its gaps), its indices checked against its count by one unsigned maximum and looked up
/// by byte shuffles (two and a blend for 32 words). Returns the groups done and the gaps they
/// used, or None where the parts do not match.
///
/// # Safety
/// The CPU must support AVX2; `out.len() == p.index.len()` and one count per group (checked by
/// the caller).
#[target_feature(enable = "avx2")]
pub unsafe fn palette_u8(p: &super::PaletteParts<u8>, out: &mut [u8]) -> Option<(usize, usize)> {
    let g = p.g;
    let iota = _mm256_setr_epi8(
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
        30, 31,
    );
    let mask = _mm256_set1_epi8(p.mask as i8);
    palette_groups(p, |j, k, window| {
        // SAFETY: `window` holds 32 bytes; group `j` is whole: index[g j..g (j + 1)] and
        // out[g j..g (j + 1)] (the lengths are equal).
        unsafe {
            // Byte 0 the group's smallest word, bytes 1..k its gaps, the rest cleared.
            let v = _mm256_loadu_si256(window.as_ptr() as *const __m256i);
            let v = _mm256_and_si256(v, _mm256_cmpgt_epi8(_mm256_set1_epi8(k as i8), iota));
            let mut v = _mm256_insert_epi8::<0>(v, p.low[j] as i8);
            // Running sums within each 16-byte half, then the first half's total into the second.
            v = _mm256_add_epi8(v, _mm256_slli_si256::<1>(v));
            v = _mm256_add_epi8(v, _mm256_slli_si256::<2>(v));
            v = _mm256_add_epi8(v, _mm256_slli_si256::<4>(v));
            v = _mm256_add_epi8(v, _mm256_slli_si256::<8>(v));
            let carry = _mm256_shuffle_epi8(v, _mm256_set1_epi8(15));
            v = _mm256_add_epi8(v, _mm256_permute2x128_si256::<0x08>(carry, carry));
            let words = _mm256_and_si256(v, mask);
            let (src, dst) = (p.index.as_ptr().add(g * j), out.as_mut_ptr().add(g * j));
            if g == 16 {
                let Some(ids) = indices16(src, k) else { return false };
                _mm_storeu_si128(dst as *mut __m128i, _mm_shuffle_epi8(_mm256_castsi256_si128(words), ids));
            } else {
                let Some(ids) = indices32(src, k) else { return false };
                let (a, b) = (_mm256_castsi256_si128(words), _mm256_extracti128_si256::<1>(words));
                _mm256_storeu_si256(dst as *mut __m256i, lookup32(a, b, ids));
            }
        }
        true
    })
}

/// [`super::palette()`] over 16-bit words for groups of 16 or 32 words (other sizes are left to
/// the scalar level), as [`palette_u8`]: each whole group's distinct words a prefix sum in two vectors of
/// 16-bit words, their low and high bytes gathered into two byte tables of 32, each looked up by
/// byte shuffles, and the two bytes of each word interleaved back. Returns the groups done and
/// the gaps they used, or None where the parts do not match.
///
/// # Safety
/// The CPU must support AVX2; `out.len() == p.index.len()` and one count per group (checked by
/// the caller).
#[target_feature(enable = "avx2")]
pub unsafe fn palette_u16(p: &super::PaletteParts<u16>, out: &mut [u16]) -> Option<(usize, usize)> {
    let g = p.g;
    let iota = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let iota = [iota, _mm256_add_epi16(iota, _mm256_set1_epi16(16))];
    let mask = _mm256_set1_epi16(p.mask as i16);
    // Within each 16-byte half: the low bytes of its eight words, then their high bytes.
    let split = _mm256_setr_epi8(
        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
    );
    palette_groups(p, |j, k, window| {
        // SAFETY: `window` holds 32 words; group `j` is whole: index[g j..g (j + 1)] and
        // out[g j..g (j + 1)] (the lengths are equal).
        unsafe {
            // Word 0 the group's smallest word, words 1..k its gaps, the rest cleared.
            let kv = _mm256_set1_epi16(k as i16);
            let mut v = [0, 1].map(|h| {
                let w = _mm256_loadu_si256(window.as_ptr().add(16 * h) as *const __m256i);
                _mm256_and_si256(w, _mm256_cmpgt_epi16(kv, iota[h]))
            });
            v[0] = _mm256_insert_epi16::<0>(v[0], p.low[j] as i16);
            // Running sums of 16-bit words: within each half, across the halves, then into the
            // second vector.
            for x in &mut v {
                *x = _mm256_add_epi16(*x, _mm256_slli_si256::<2>(*x));
                *x = _mm256_add_epi16(*x, _mm256_slli_si256::<4>(*x));
                *x = _mm256_add_epi16(*x, _mm256_slli_si256::<8>(*x));
                let last = _mm256_shuffle_epi8(*x, _mm256_set1_epi16(0x0F0E));
                *x = _mm256_add_epi16(*x, _mm256_permute2x128_si256::<0x08>(last, last));
            }
            let top = _mm256_permute4x64_epi64::<0xFF>(_mm256_shuffle_epi8(v[0], _mm256_set1_epi16(0x0F0E)));
            v[1] = _mm256_add_epi16(v[1], top);
            // Each vector as [low bytes of its 16 words | their high bytes].
            let bytes =
                v.map(|x| _mm256_permute4x64_epi64::<0xD8>(_mm256_shuffle_epi8(_mm256_and_si256(x, mask), split)));
            let (src, dst) = (p.index.as_ptr().add(g * j), out.as_mut_ptr().add(g * j));
            if g == 16 {
                let Some(ids) = indices16(src, k) else { return false };
                let lo = _mm_shuffle_epi8(_mm256_castsi256_si128(bytes[0]), ids);
                let hi = _mm_shuffle_epi8(_mm256_extracti128_si256::<1>(bytes[0]), ids);
                _mm_storeu_si128(dst as *mut __m128i, _mm_unpacklo_epi8(lo, hi));
                _mm_storeu_si128(dst.add(8) as *mut __m128i, _mm_unpackhi_epi8(lo, hi));
            } else {
                let Some(ids) = indices32(src, k) else { return false };
                let half =
                    |x: __m256i, h: bool| if h { _mm256_extracti128_si256::<1>(x) } else { _mm256_castsi256_si128(x) };
                let lo = lookup32(half(bytes[0], false), half(bytes[1], false), ids);
                let hi = lookup32(half(bytes[0], true), half(bytes[1], true), ids);
                // Words 0-7 and 16-23, then 8-15 and 24-31, put back in order.
                let (a, b) = (_mm256_unpacklo_epi8(lo, hi), _mm256_unpackhi_epi8(lo, hi));
                _mm256_storeu_si256(dst as *mut __m256i, _mm256_permute2x128_si256::<0x20>(a, b));
                _mm256_storeu_si256(dst.add(16) as *mut __m256i, _mm256_permute2x128_si256::<0x31>(a, b));
            }
        }
        true
    })
}
