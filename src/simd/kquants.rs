//! ggml's reference quantizers of the K-quants (`quantize_row_q4_K_ref`, `_q5_K_ref`,
//! `_q6_K_ref` in `ggml-quants.c`: what `llama-quantize` runs without an importance matrix), one
//! super-block of 256 values at a time. They search each sub-block's scale (and min) over a few
//! candidates, so the order of every float operation is the C code's: sums in element order,
//! products left to right, no fused multiply-add (ggml-base is built for the baseline
//! instruction set, which has none), so the bytes are the same.

/// ggml's `nearest_int`: round to nearest, ties to even, for `|x| < 2^22`.
#[inline(always)]
fn nearest_int(x: f32) -> i32 {
    ((x + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `make_qx_quants(n, nmax, x, L, rmse_type = 1, NULL)`: a symmetric scale for `x` and the
/// levels `L[i] + nmax`, searched over 19 candidates by the error weighted with `x^2`.
fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
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
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let l = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in l_out.iter_mut().zip(x) {
                *o = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_qkx2_quants(32, nmax, x, weights, L, &the_min, Laux, rmin, rdelta, nstep, false)`: a
/// scale and a min (returned negated, as ggml does) for `x` and its levels `0..=nmax`.
fn make_qkx2_quants(nmax: i32, x: &[f32; 32], w: &[f32; 32], l_out: &mut [u8], rmin: f32, nstep: i32) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..32 {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..32 {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + 0.1 * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..32 {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let l = l as f32;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..32 {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if cur_error < best_error {
                l_out.copy_from_slice(&laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
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
pub fn q45_k(x: &[f32; 256], nmax: i32, out: &mut [u8]) {
    let (rmin, nstep) = if nmax == 15 { (-1.0, 20) } else { (-0.5, 15) };
    let mut l = [0u8; 256];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs: &[f32; 32] = x[32 * j..32 * j + 32].try_into().expect("32 values");
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let w: [f32; 32] = std::array::from_fn(|i| av_x + xs[i].abs());
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xs, &w, &mut l[32 * j..32 * j + 32], rmin, nstep);
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
pub fn q6_k(x: &[f32; 256], out: &mut [u8]) {
    let mut l = [0i8; 256];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for ib in 0..16 {
        scales[ib] = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
        if scales[ib].abs() > max_abs_scale {
            max_abs_scale = scales[ib].abs();
            max_scale = scales[ib];
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
