//! ggml's IQ4_NL and IQ4_XS quantizers as `llama-quantize` runs them without an importance
//! matrix (`quantize_iq4_nl` and `quantize_iq4_xs` in `ggml-quants.c`, both through
//! `quantize_row_iq4_nl_impl` with seven trial scales either side, each value weighted by its
//! square). The quants are indices into a fixed table of 16 non-uniform levels. Every float
//! operation is the C code's, in its order and with no fused multiply-add (as `kquants.rs`), so
//! the bytes are the same.

use super::derive::f16_rne;
use super::kquants::nearest_int;

/// `kvalues_iq4nl`: the 16 levels of the quants.
const LEVELS: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Trial scales either side of the first guess (`ntry`).
const NTRY: i32 = 7;

/// The levels as f32 (exact).
const LEVELS_F32: [f32; 16] = {
    let mut t = [0f32; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = LEVELS[i] as f32;
        i += 1;
    }
    t
};

#[inline(always)]
fn level(i: usize) -> f32 {
    LEVELS_F32[i]
}

/// ggml's `best_index_int8` as the C code writes it (bisection): the level nearest `x`, the
/// upper one of a tie. [`nearest`] finds the same for eight values at once.
#[cfg(test)]
fn best_index(x: f32) -> u8 {
    if x <= level(0) {
        return 0;
    }
    if x >= level(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < level(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - level(mu - 1) < level(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// Eight blocks of 32 side by side: `x[i][k]` is value `i` of block `k`. Each lane runs the C
/// code's operations in its order, its branches made selects, so every lane gives the C result
/// while the compiler runs the eight in one vector.
type Blocks = [[f32; 8]; 32];

/// The nearest level of each of eight values (`best_index` of each lane): its index and value.
/// Without branches: `lo` is the largest level at or below the value and `hi` the smallest
/// above it (the first or last level where there is none), `count` the levels at or below it;
/// the C code's tie rule then picks `lo` (index `count - 1`) or `hi` (index `count`). Below the
/// first level that is index 0 and above the last index 15; NaN compares false everywhere and
/// gets 15 and the last level, where the C code's bisection ends.
#[inline(always)]
fn nearest(a: &[f32; 8]) -> ([u8; 8], [f32; 8]) {
    let (mut count, mut lo, mut hi) = ([0f32; 8], [level(0); 8], [level(15); 8]);
    for t in 0..16 {
        let v = level(t);
        for k in 0..8 {
            let le = v <= a[k];
            count[k] += if le { 1.0 } else { 0.0 };
            lo[k] = if le { v } else { lo[k] };
        }
    }
    for t in (0..16).rev() {
        let v = level(t);
        for k in 0..8 {
            hi[k] = if v > a[k] { v } else { hi[k] };
        }
    }
    let mut idx = [0u8; 8];
    let mut q = [0f32; 8];
    for k in 0..8 {
        let lower = a[k] - lo[k] < hi[k] - a[k];
        let i = (count[k] - if lower { 1.0 } else { 0.0 }).clamp(0.0, 15.0);
        idx[k] = if a[k].is_nan() { 15 } else { i as u8 };
        q[k] = if lower { lo[k] } else { hi[k] };
    }
    (idx, q)
}

/// Weighted sums `(sum w q x, sum w q q)` of each block quantized at its inverse scale `id[k]`
/// (weights `x * x`), in element order.
#[inline(always)]
fn sums(x: &Blocks, id: &[f32; 8]) -> ([f32; 8], [f32; 8]) {
    let (mut sumqx, mut sumq2) = ([0f32; 8], [0f32; 8]);
    for xi in x {
        let (_, q) = nearest(&std::array::from_fn(|k| id[k] * xi[k]));
        for k in 0..8 {
            let w = xi[k] * xi[k];
            sumqx[k] += w * q[k] * xi[k];
            sumq2[k] += w * q[k] * q[k];
        }
    }
    (sumqx, sumq2)
}

/// The scale search of eight blocks (`quantize_row_iq4_nl_impl`'s loop body, per block): the
/// scale that best fits its values among the first guess and the trials; 0 for a block of
/// (near) zeros.
#[inline(always)]
fn block_scales(x: &Blocks) -> [f32; 8] {
    let (mut amax, mut max) = ([0f32; 8], [0f32; 8]);
    for xi in x {
        for k in 0..8 {
            let ax = xi[k].abs();
            let more = ax > amax[k];
            amax[k] = if more { ax } else { amax[k] };
            max[k] = if more { xi[k] } else { max[k] };
        }
    }
    let id0: [f32; 8] = std::array::from_fn(|k| 1.0 / (-max[k] / level(0)));
    let (sumqx, sumq2) = sums(x, &id0);
    let mut d: [f32; 8] = std::array::from_fn(|k| if sumq2[k] > 0.0 { sumqx[k] / sumq2[k] } else { 0.0 });
    let mut best: [f32; 8] = std::array::from_fn(|k| d[k] * sumqx[k]);
    for itry in -NTRY..=NTRY {
        let t = (itry + LEVELS[0] as i32) as f32;
        let (sumqx, sumq2) = sums(x, &std::array::from_fn(|k| t / max[k]));
        for k in 0..8 {
            let better = sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best[k] * sumq2[k];
            let nd = sumqx[k] / sumq2[k];
            d[k] = if better { nd } else { d[k] };
            best[k] = if better { nd * sumqx[k] } else { best[k] };
        }
    }
    std::array::from_fn(|k| if amax[k] < 1e-15 { 0.0 } else { d[k] })
}

/// The levels of each block at its inverse scale `id[k]`, two to a byte (element `j` low,
/// `j + 16` high): block `k`'s 16 bytes.
#[inline(always)]
fn pack(x: &Blocks, id: &[f32; 8]) -> [[u8; 16]; 8] {
    let mut idx = [[0u8; 8]; 32];
    for (i, xi) in x.iter().enumerate() {
        idx[i] = nearest(&std::array::from_fn(|k| id[k] * xi[k])).0;
    }
    std::array::from_fn(|k| std::array::from_fn(|j| idx[j][k] | (idx[j + 16][k] << 4)))
}

#[inline(always)]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Eight consecutive blocks of `x` side by side.
#[inline(always)]
fn blocks(x: &[f32; 256]) -> Blocks {
    std::array::from_fn(|i| std::array::from_fn(|k| x[32 * k + i]))
}

/// Eight IQ4_NL blocks (18 bytes each: fp16 scale, 16 bytes of levels) of 256 values into
/// `out` (144 bytes).
#[inline(always)]
pub fn iq4_nl(x: &[f32; 256], out: &mut [u8]) {
    let b = blocks(x);
    let d = block_scales(&b);
    let q = pack(&b, &d.map(inverse));
    for ((o, &dk), q) in out.chunks_exact_mut(18).zip(&d).zip(&q) {
        o[..2].copy_from_slice(&f16_rne(dk).to_le_bytes());
        o[2..].copy_from_slice(q);
    }
}

/// One IQ4_XS super-block of 256 (136 bytes: fp16 super-scale, the eight 6-bit block scales as
/// their high bits in a `u16` and their low nibbles in 4 bytes, 128 bytes of levels).
#[inline(always)]
pub fn iq4_xs(x: &[f32; 256], out: &mut [u8]) {
    let b = blocks(x);
    let scales = block_scales(&b);
    let (mut max_scale, mut amax_scale) = (0f32, 0f32);
    for &s in &scales {
        if s.abs() > amax_scale {
            amax_scale = s.abs();
            max_scale = s;
        }
    }
    let d = -max_scale / 32.0;
    let id = inverse(d);
    let (mut high, mut low) = (0u16, [0u8; 4]);
    let mut idl = [0f32; 8];
    for (ib, &s) in scales.iter().enumerate() {
        let l = nearest_int(id * s).clamp(-32, 31);
        idl[ib] = inverse(d * l as f32);
        let l = (l + 32) as u8;
        low[ib / 2] |= (l & 0xF) << (4 * (ib % 2));
        high |= ((l >> 4) as u16) << (2 * ib);
    }
    out[..2].copy_from_slice(&f16_rne(d).to_le_bytes());
    out[2..4].copy_from_slice(&high.to_le_bytes());
    out[4..8].copy_from_slice(&low);
    for (o, q) in out[8..].chunks_exact_mut(16).zip(&pack(&b, &idl)) {
        o.copy_from_slice(q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_takes_the_nearest_level_and_the_upper_of_a_tie() {
        assert_eq!(best_index(-200.0), 0);
        assert_eq!(best_index(500.0), 15);
        assert_eq!(best_index(0.0), 8);
        assert_eq!(best_index(-4.0), 8); // 1 is nearer than -10
        assert_eq!(best_index(-5.0), 7); // -10 is nearer than 1
        assert_eq!(best_index(-4.5), 8); // a tie between -10 and 1: the upper
        assert_eq!(best_index(7.0), 9); // a tie between 1 and 13: the upper
        assert_eq!(best_index(f32::NAN), 15);
    }

    #[test]
    fn the_lanes_find_the_levels_bisection_finds() {
        let mut vals: Vec<f32> = (-1400..1400).map(|i| i as f32 / 10.0).collect();
        vals.extend(LEVELS_F32.iter().flat_map(|&v| [v, v - 0.5, v + 0.5, f32::from_bits(v.to_bits() + 1)]));
        vals.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 1e30, -1e30]);
        for c in vals.chunks(8) {
            let a: [f32; 8] = std::array::from_fn(|k| c.get(k).copied().unwrap_or(0.0));
            let (idx, q) = nearest(&a);
            for k in 0..8 {
                assert_eq!(idx[k], best_index(a[k]), "{}", a[k]);
                assert_eq!(q[k].to_bits(), level(idx[k] as usize).to_bits(), "{}", a[k]);
            }
        }
    }

    #[test]
    fn a_block_of_zeros_has_scale_zero() {
        let mut out = [0xAAu8; 144];
        iq4_nl(&[0.0; 256], &mut out);
        for b in out.chunks_exact(18) {
            assert_eq!(b[..2], [0, 0]);
            assert!(b[2..].iter().all(|&b| b == 0x88));
        }
        let mut out = [0xAAu8; 136];
        iq4_xs(&[0.0; 256], &mut out);
        // -0 / 32: the super-scale is negative zero, as in the C code.
        assert_eq!(out[..2], [0x00, 0x80]);
        assert!(out[8..].iter().all(|&b| b == 0x88));
    }
}
