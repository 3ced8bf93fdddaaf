//! ggml's reference quantizers of the K-quants (`quantize_row_q2_K_ref`, `_q3_K_ref`,
//! `_q4_K_ref`, `_q5_K_ref`, `_q6_K_ref` in `ggml-quants.c`: what `llama-quantize` runs without
//! an importance matrix), one super-block of 256 values at a time. They search each sub-block's scale (and min) over a few
//! candidates, so the order of every float operation is the C code's: sums in element order,
//! products left to right, no fused multiply-add (ggml-base is built for the baseline
//! instruction set, which has none), so the bytes are the same.

/// ggml's `nearest_int`: round to nearest, ties to even, for `|x| < 2^22`. A NaN gives 0: in
/// the C code its payload reaches the result, and which operand's payload an addition keeps is
/// the compiler's choice (it may swap them), so the encoder's and the decoder's builds could
/// disagree; 0 is what the C code gives for x86's default NaN, the one arithmetic makes.
#[inline(always)]
pub fn nearest_int(x: f32) -> i32 {
    let l = ((x + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000;
    if x.is_nan() {
        0
    } else {
        l
    }
}

/// Eight sub-blocks side by side: `v[i][k]` is value `i` of sub-block `k`. Each lane runs the C
/// code's operations in its order, and a lane's branches become selects, so every lane gives
/// the C result (the AVX2 level runs the same searches in vectors, `simd/avx2.rs`).
pub type Lanes<const N: usize> = [[f32; 8]; N];

/// The inputs of `make_qkx2_quants` for eight sub-blocks of `N` (32 for Q4_K and Q5_K, 16 for
/// Q2_K): their values, weights, the largest level and the search's start and number of steps.
pub struct Qkx2<'a, const N: usize> {
    pub nmax: i32,
    pub x: &'a Lanes<N>,
    pub w: &'a Lanes<N>,
    pub rmin: f32,
    pub nstep: i32,
}

/// The two scale searches of the K-quants, eight sub-blocks at a time, at one instruction-set
/// level: `make_qx_quants` and `make_qkx2_quants` of this file (the scalar level) or their AVX2
/// forms. `MAD`: `make_qkx2_quants`'s `use_mad` (errors by absolute rather than squared
/// difference).
pub trait Search {
    fn qx(&self, nmax: i32, x: &Lanes<16>, l_out: &mut [[i8; 8]; 16]) -> [f32; 8];
    fn qkx2<const N: usize, const MAD: bool>(&self, p: &Qkx2<N>, l_out: &mut [[u8; 8]; N]) -> ([f32; 8], [f32; 8]);
}

/// The searches as written below.
pub struct Scalar;

impl Search for Scalar {
    fn qx(&self, nmax: i32, x: &Lanes<16>, l_out: &mut [[i8; 8]; 16]) -> [f32; 8] {
        make_qx_quants(nmax, x, l_out)
    }
    fn qkx2<const N: usize, const MAD: bool>(&self, p: &Qkx2<N>, l_out: &mut [[u8; 8]; N]) -> ([f32; 8], [f32; 8]) {
        make_qkx2_quants::<N, MAD>(p, l_out)
    }
}

fn lanes<T: Copy + Default>(f: impl Fn(usize) -> T) -> [T; 8] {
    std::array::from_fn(f)
}

/// `make_qx_quants(16, nmax, x, L, rmse_type = 1, NULL)` of eight sub-blocks: each one's
/// symmetric scale and levels `L + nmax`, searched over 19 candidates by the error weighted with
/// `x^2`.
fn make_qx_quants(nmax: i32, x: &Lanes<16>, l_out: &mut [[i8; 8]; 16]) -> [f32; 8] {
    let (mut max, mut amax) = ([0f32; 8], [0f32; 8]);
    for xi in x {
        for k in 0..8 {
            let ax = xi[k].abs();
            if ax > amax[k] {
                amax[k] = ax;
                max[k] = xi[k];
            }
        }
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: &[f32; 8]| {
        let (mut sumlx, mut suml2) = ([0f32; 8], [0f32; 8]);
        for xi in x {
            for k in 0..8 {
                let l = level(iscale[k], xi[k]) as f32;
                let w = xi[k] * xi[k];
                sumlx[k] += w * xi[k] * l;
                suml2[k] += w * l * l;
            }
        }
        (sumlx, suml2)
    };
    let mut iscale = lanes(|k| -(nmax as f32) / max[k]);
    for (o, xi) in l_out.iter_mut().zip(x) {
        for k in 0..8 {
            o[k] = (level(iscale[k], xi[k]) + nmax) as i8;
        }
    }
    let (sumlx, suml2) = sums(&iscale);
    let mut scale = lanes(|k| if suml2[k] != 0.0 { sumlx[k] / suml2[k] } else { 0.0 });
    let mut best = lanes(|k| scale[k] * sumlx[k]);
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = lanes(|k| -(nmax as f32 + 0.1 * is as f32) / max[k]);
        let (sumlx, suml2) = sums(&iscale);
        let better = lanes(|k| suml2[k] > 0.0 && sumlx[k] * sumlx[k] > best[k] * suml2[k]);
        for (o, xi) in l_out.iter_mut().zip(x) {
            for k in 0..8 {
                if better[k] {
                    o[k] = (level(iscale[k], xi[k]) + nmax) as i8;
                }
            }
        }
        for k in 0..8 {
            if better[k] {
                scale[k] = sumlx[k] / suml2[k];
                best[k] = scale[k] * sumlx[k];
            }
        }
    }
    // All zero: levels 0 and scale 0.
    for k in (0..8).filter(|&k| amax[k] < 1e-15) {
        l_out.iter_mut().for_each(|o| o[k] = 0);
        scale[k] = 0.0;
    }
    scale
}

/// `make_qkx2_quants(N, nmax, x, weights, L, &the_min, Laux, rmin, 0.1, nstep, MAD)` of eight
/// sub-blocks: each one's scale and min (returned negated, as ggml does) and levels `0..=nmax`.
fn make_qkx2_quants<const N: usize, const MAD: bool>(p: &Qkx2<N>, l_out: &mut [[u8; 8]; N]) -> ([f32; 8], [f32; 8]) {
    let Qkx2 { nmax, x, w, rmin, nstep } = *p;
    let err = |diff: f32| if MAD { diff.abs() } else { diff * diff };
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = lanes(|k| sum_w[k] * x[0][k]);
    for i in 1..N {
        for k in 0..8 {
            if x[i][k] < min[k] {
                min[k] = x[i][k];
            }
            if x[i][k] > max[k] {
                max[k] = x[i][k];
            }
            sum_w[k] += w[i][k];
            sum_x[k] += w[i][k] * x[i][k];
        }
    }
    for m in &mut min {
        if *m > 0.0 {
            *m = 0.0;
        }
    }
    let flat = lanes(|k| max[k] == min[k]);
    let flat_min = min;
    let mut iscale = lanes(|k| nmax as f32 / (max[k] - min[k]));
    let mut scale = lanes(|k| 1.0 / iscale[k]);
    let mut best_error = [0f32; 8];
    for i in 0..N {
        for k in 0..8 {
            let l = nearest_int(iscale[k] * (x[i][k] - min[k])).clamp(0, nmax);
            l_out[i][k] = l as u8;
            let diff = scale[k] * l as f32 + min[k] - x[i][k];
            best_error[k] += w[i][k] * err(diff);
        }
    }
    let mut laux = [[0u8; 8]; N];
    for is in 0..=nstep {
        iscale = lanes(|k| (rmin + 0.1 * is as f32 + nmax as f32) / (max[k] - min[k]));
        let (mut sum_l, mut sum_l2, mut sum_xl) = ([0f32; 8], [0f32; 8], [0f32; 8]);
        for i in 0..N {
            for k in 0..8 {
                let l = nearest_int(iscale[k] * (x[i][k] - min[k])).clamp(0, nmax);
                laux[i][k] = l as u8;
                let l = l as f32;
                sum_l[k] += w[i][k] * l;
                sum_l2[k] += w[i][k] * l * l;
                sum_xl[k] += w[i][k] * l * x[i][k];
            }
        }
        let d = lanes(|k| sum_w[k] * sum_l2[k] - sum_l[k] * sum_l[k]);
        let mut this_scale = lanes(|k| (sum_w[k] * sum_xl[k] - sum_x[k] * sum_l[k]) / d[k]);
        let mut this_min = lanes(|k| (sum_l2[k] * sum_x[k] - sum_l[k] * sum_xl[k]) / d[k]);
        for k in 0..8 {
            if this_min[k] > 0.0 {
                this_min[k] = 0.0;
                this_scale[k] = sum_xl[k] / sum_l2[k];
            }
        }
        let mut cur_error = [0f32; 8];
        for i in 0..N {
            for k in 0..8 {
                let diff = this_scale[k] * laux[i][k] as f32 + this_min[k] - x[i][k];
                cur_error[k] += w[i][k] * err(diff);
            }
        }
        let better = lanes(|k| !flat[k] && d[k] > 0.0 && cur_error[k] < best_error[k]);
        for (o, a) in l_out.iter_mut().zip(&laux) {
            for k in 0..8 {
                if better[k] {
                    o[k] = a[k];
                }
            }
        }
        for k in 0..8 {
            if better[k] {
                best_error[k] = cur_error[k];
                scale[k] = this_scale[k];
                min[k] = this_min[k];
            }
        }
    }
    for k in (0..8).filter(|&k| flat[k]) {
        l_out.iter_mut().for_each(|o| o[k] = 0);
        (scale[k], min[k]) = (0.0, flat_min[k]);
    }
    (scale, lanes(|k| -min[k]))
}

/// ggml's `get_scale_min_k4`: sub-block `j`'s 6-bit scale and min from the 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

fn f16(v: f32) -> [u8; 2] {
    super::derive::f16_rne(v).to_le_bytes()
}

fn from_f16(b: &[u8]) -> f32 {
    super::derive::f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// One Q4_K (`nmax = 15`, 144 bytes) or Q5_K (`nmax = 31`, 176 bytes) super-block of `x`.
pub fn q45_k(x: &[f32; 256], nmax: i32, out: &mut [u8], search: &impl Search) {
    let (rmin, nstep) = if nmax == 15 { (-1.0, 20) } else { (-0.5, 15) };
    // Sub-block j in lane j.
    let xs: Lanes<32> = std::array::from_fn(|i| lanes(|j| x[32 * j + i]));
    let mut sum_x2 = [0f32; 8];
    for xi in &xs {
        for k in 0..8 {
            sum_x2[k] += xi[k] * xi[k];
        }
    }
    let av_x = lanes(|k| (sum_x2[k] / 32.0).sqrt());
    let w: Lanes<32> = std::array::from_fn(|i| lanes(|k| av_x[k] + xs[i][k].abs()));
    let mut l8 = [[0u8; 8]; 32];
    let (scales, mins) = search.qkx2::<32, false>(&Qkx2 { nmax, x: &xs, w: &w, rmin, nstep }, &mut l8);
    let mut l: [u8; 256] = std::array::from_fn(|e| l8[e % 32][e / 32]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    out[0..2].copy_from_slice(&f16(max_scale / 63.0));
    out[2..4].copy_from_slice(&f16(max_min / 63.0));
    out[4..16].copy_from_slice(&sc);
    let (d_all, m_all) = (from_f16(&out[0..2]), from_f16(&out[2..4]));
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &sc);
        let d = d_all * s as f32;
        if d == 0.0 {
            continue;
        }
        let dm = m_all * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, nmax) as u8;
        }
    }
    if nmax == 15 {
        for (n, q) in out[16..144].chunks_exact_mut(32).enumerate() {
            for (i, q) in q.iter_mut().enumerate() {
                *q = l[64 * n + i] | (l[64 * n + i + 32] << 4);
            }
        }
    } else {
        let (qh, ql) = out[16..176].split_at_mut(32);
        qh.fill(0);
        for (n, q) in ql.chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * n), 2u8 << (2 * n));
            for (j, q) in q.iter_mut().enumerate() {
                let (mut l1, mut l2) = (l[64 * n + j], l[64 * n + j + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                *q = l1 | (l2 << 4);
            }
        }
    }
}

/// One Q6_K super-block of `x` (210 bytes: `ql`, `qh`, the 16 scales, `d`).
pub fn q6_k(x: &[f32; 256], out: &mut [u8], search: &impl Search) {
    // Sub-blocks 0..8 in the lanes of one pass, 8..16 in those of another.
    let mut scales = [0f32; 16];
    let mut l = [0i8; 256];
    for half in 0..2 {
        let xs: Lanes<16> = std::array::from_fn(|i| lanes(|k| x[16 * (8 * half + k) + i]));
        let mut l8 = [[0i8; 8]; 16];
        let s8 = search.qx(32, &xs, &mut l8);
        for k in 0..8 {
            let ib = 8 * half + k;
            scales[ib] = s8[k];
            for i in 0..16 {
                l[16 * ib + i] = l8[i][k];
            }
        }
    }
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for &sc in &scales {
        if sc.abs() > max_abs_scale {
            max_abs_scale = sc.abs();
            max_scale = sc;
        }
    }
    out.fill(0);
    if max_abs_scale < 1e-15 {
        return;
    }
    let iscale = -128.0 / max_scale;
    out[208..210].copy_from_slice(&f16(1.0 / iscale));
    let d_all = from_f16(&out[208..210]);
    for ib in 0..16 {
        out[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
    }
    for j in 0..16 {
        let d = d_all * (out[192 + j] as i8) as f32;
        if d == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    let (ql, rest) = out.split_at_mut(128);
    let qh = &mut rest[..64];
    for h in 0..2 {
        let (j, ql, qh) = (128 * h, &mut ql[64 * h..64 * h + 64], &mut qh[32 * h..32 * h + 32]);
        for i in 0..32 {
            let q = |k: usize| l[j + i + 32 * k] as u8;
            ql[i] = (q(0) & 0xF) | ((q(2) & 0xF) << 4);
            ql[i + 32] = (q(1) & 0xF) | ((q(3) & 0xF) << 4);
            qh[i] = (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
        }
    }
}

/// `make_q3_quants(16, 4, x, L, do_rmse = true)`: Q3_K's search of one sub-block's symmetric
/// scale, levels moved one at a time while the error weighted by `x^2` falls (at most five
/// rounds); levels `L + 4`, or all 0 with scale 0 for an all-zero sub-block.
fn make_q3_quants(x: &[f32; 16], l_out: &mut [u8; 16]) -> f32 {
    const NMAX: i32 = 4;
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < 1e-15 {
        l_out.fill(0);
        return 0.0;
    }
    let iscale = -NMAX as f32 / max;
    let mut l = [0i32; 16];
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for i in 0..16 {
        l[i] = nearest_int(iscale * x[i]).clamp(-NMAX, NMAX - 1);
        let w = x[i] * x[i];
        sumlx += w * x[i] * l[i] as f32;
        suml2 += w * l[i] as f32 * l[i] as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..16 {
            let w = x[i] * x[i];
            let mut slx = sumlx - w * x[i] * l[i] as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * l[i] as f32 * l[i] as f32;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-NMAX, NMAX - 1);
                if new_l != l[i] {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for i in 0..16 {
        l_out[i] = (l[i] + NMAX) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The 2-bit quants `l` packed as ggml packs Q2_K's and Q3_K's low bits: byte `32n + i` of each
/// half holds values `i`, `i + 32`, `i + 64`, `i + 96` of that half's 128.
fn pack_2bit(l: &[u8; 256], qs: &mut [u8]) {
    for h in 0..2 {
        for i in 0..32 {
            let j = 128 * h + i;
            qs[32 * h + i] = l[j] | (l[j + 32] << 2) | (l[j + 64] << 4) | (l[j + 96] << 6);
        }
    }
}

/// One Q2_K super-block of `x` (84 bytes: the 16 packed 4-bit scales and mins, `qs`, `d`,
/// `dmin`).
pub fn q2_k(x: &[f32; 256], out: &mut [u8], search: &impl Search) {
    // Sub-blocks 0..8 in the lanes of one search, 8..16 in those of another.
    let mut l = [0u8; 256];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    for half in 0..2 {
        let xs: Lanes<16> = std::array::from_fn(|i| lanes(|k| x[16 * (8 * half + k) + i]));
        let w: Lanes<16> = std::array::from_fn(|i| lanes(|k| xs[i][k].abs()));
        let mut l8 = [[0u8; 8]; 16];
        let (s8, m8) = search.qkx2::<16, true>(&Qkx2 { nmax: 3, x: &xs, w: &w, rmin: -0.5, nstep: 15 }, &mut l8);
        for k in 0..8 {
            let ib = 8 * half + k;
            (scales[ib], mins[ib]) = (s8[k], m8[k]);
            for i in 0..16 {
                l[16 * ib + i] = l8[i][k];
            }
        }
    }
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..16 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let (sc, rest) = out.split_at_mut(16);
    sc.fill(0);
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for j in 0..16 {
            sc[j] = nearest_int(iscale * scales[j]) as u8;
        }
        rest[64..66].copy_from_slice(&f16(max_scale / 15.0));
    } else {
        rest[64..66].copy_from_slice(&f16(0.0));
    }
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for j in 0..16 {
            sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
        }
        rest[66..68].copy_from_slice(&f16(max_min / 15.0));
    } else {
        rest[66..68].copy_from_slice(&f16(0.0));
    }
    let (d_all, m_all) = (from_f16(&rest[64..66]), from_f16(&rest[66..68]));
    for (j, &s) in sc.iter().enumerate() {
        let d = d_all * (s & 0xF) as f32;
        if d == 0.0 {
            continue;
        }
        let dm = m_all * (s >> 4) as f32;
        for i in 16 * j..16 * j + 16 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, 3) as u8;
        }
    }
    pack_2bit(&l, &mut rest[..64]);
}

/// One Q3_K super-block of `x` (110 bytes: `hmask`, `qs`, the 16 packed 6-bit scales, `d`).
/// The searches run one sub-block at a time at every level.
pub fn q3_k(x: &[f32; 256], out: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for j in 0..16 {
        let xs: &[f32; 16] = x[16 * j..16 * j + 16].try_into().expect("16 values");
        let lj: &mut [u8; 16] = (&mut l[16 * j..16 * j + 16]).try_into().expect("16 levels");
        scales[j] = make_q3_quants(xs, lj);
        if scales[j].abs() > amax {
            amax = scales[j].abs();
            max_scale = scales[j];
        }
    }
    out.fill(0);
    let (hmask, rest) = out.split_at_mut(32);
    let (qs, rest) = rest.split_at_mut(64);
    let (sc, d_out) = rest.split_at_mut(12);
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for j in 0..16 {
            let v = ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                sc[j] = v & 0xF;
            } else {
                sc[j - 8] |= (v & 0xF) << 4;
            }
            sc[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
        }
        d_out.copy_from_slice(&f16(1.0 / iscale));
    }
    let d_all = from_f16(d_out);
    for j in 0..16 {
        let low = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
        let s = (low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
        let d = d_all * s as f32;
        if d == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / d).clamp(-4, 3) + 4) as u8;
        }
    }
    for (j, v) in l.iter_mut().enumerate() {
        if *v > 3 {
            hmask[j % 32] |= 1 << (j / 32);
            *v -= 4;
        }
    }
    pack_2bit(&l, qs);
}
