//! The derivation kernel of `derive` (DSL.md, "Derivations"): casts and ggml's reference
//! quantizers of f32 values, written as plain Rust that each instruction-set level compiles
//! (`scalar.rs` calls it as it is, `avx2.rs` with AVX2 enabled: the conversions, block maxima
//! and quantizations vectorize; no FMA, so every level rounds the same and writes the same
//! bytes). The operator (`dsl::ops::derive`) gives the kinds their wire ids and names.

/// A derivation: what the reference is turned into. Ids are permanent (docs/DSL.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// To bf16, rounding to nearest even (NaN made quiet: torch's `to(bfloat16)`, ggml's
    /// `fp32_to_bf16`).
    Bf16Rne,
    /// To bf16 by dropping the low 16 bits of the f32.
    Bf16Trunc,
    /// To IEEE fp16, rounding to nearest even (numpy's and torch's casts).
    F16Rne,
    /// To f32 (exact widening of an F16 or BF16 reference).
    F32,
    /// ggml Q8_0: `d = max|x| / 127`, `q = round(x / d)` (halves away from zero).
    Q8_0,
    /// ggml Q4_0: `d = -m / 8` for the value `m` of largest magnitude, `q = min(15, trunc(x / d + 8.5))`.
    Q4_0,
    /// ggml Q4_1: `d = (max - min) / 15`, `q = min(15, trunc((x - min) / d + 0.5))`.
    Q4_1,
    /// ggml Q5_0: as Q4_0 with 16 and 31.
    Q5_0,
    /// ggml Q5_1: as Q4_1 with 31.
    Q5_1,
    /// ggml Q4_K: super-blocks of 256, eight sub-blocks with a searched scale and min each
    /// (`make_qkx2_quants`), those quantized to 6 bits against two fp16 super-scales.
    Q4K,
    /// ggml Q5_K: as Q4_K with 5-bit quants.
    Q5K,
    /// ggml Q6_K: super-blocks of 256, sixteen sub-blocks with a searched scale each
    /// (`make_qx_quants`), those quantized to 8 bits against an fp16 super-scale.
    Q6K,
    /// ggml Q2_K: super-blocks of 256, sixteen sub-blocks of 2-bit quants with a searched scale
    /// and min each (`make_qkx2_quants` by absolute error), those quantized to 4 bits against two
    /// fp16 super-scales.
    Q2K,
    /// ggml Q3_K: super-blocks of 256, sixteen sub-blocks of 3-bit quants with a searched scale
    /// each (`make_q3_quants`), those quantized to 6 bits against an fp16 super-scale.
    Q3K,
    /// ggml IQ4_NL: blocks of 32 quantized to the 16 non-uniform levels of `kvalues_iq4nl`
    /// with a searched fp16 scale (`quantize_iq4_nl` without an importance matrix: `iq4.rs`).
    Iq4Nl,
    /// ggml IQ4_XS: super-blocks of 256, eight blocks of 32 at IQ4_NL's levels with searched
    /// scales, those quantized to 6 bits against an fp16 super-scale (`quantize_iq4_xs`).
    Iq4Xs,
}

impl Kind {
    /// Bytes per block and elements per block.
    pub fn block(self) -> (usize, usize) {
        match self {
            Kind::Bf16Rne | Kind::Bf16Trunc | Kind::F16Rne => (2, 1),
            Kind::F32 => (4, 1),
            Kind::Q8_0 => (34, 32),
            Kind::Q4_0 => (18, 32),
            Kind::Q4_1 => (20, 32),
            Kind::Q5_0 => (22, 32),
            Kind::Q5_1 => (24, 32),
            Kind::Q4K => (144, 256),
            Kind::Q5K => (176, 256),
            Kind::Q6K => (210, 256),
            Kind::Q2K => (84, 256),
            Kind::Q3K => (110, 256),
            Kind::Iq4Nl => (18, 32),
            Kind::Iq4Xs => (136, 256),
        }
    }
}

/// How the reference tensor's elements are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    F32,
    F16,
    Bf16,
}

impl Src {
    pub fn bytes(self) -> usize {
        if self == Src::F32 {
            4
        } else {
            2
        }
    }

    /// Element `i` of `b` as f32 (exact).
    #[inline(always)]
    pub fn at(self, b: &[u8], i: usize) -> f32 {
        match self {
            Src::F32 => f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]),
            Src::F16 => f16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])),
            Src::Bf16 => f32::from_bits((u16::from_le_bytes([b[2 * i], b[2 * i + 1]]) as u32) << 16),
        }
    }

    /// Elements `i0 .. i0 + N` of `b` as f32.
    #[inline(always)]
    pub fn load<const N: usize>(self, b: &[u8], i0: usize) -> [f32; N] {
        let mut x = [0f32; N];
        let w = self.bytes();
        let b = &b[w * i0..w * (i0 + N)];
        match self {
            Src::F32 => {
                x.iter_mut().zip(b.chunks_exact(4)).for_each(|(v, c)| *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            }
            Src::F16 => {
                x.iter_mut().zip(b.chunks_exact(2)).for_each(|(v, c)| *v = f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            }
            Src::Bf16 => x
                .iter_mut()
                .zip(b.chunks_exact(2))
                .for_each(|(v, c)| *v = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)),
        }
        x
    }
}

/// IEEE fp16 to f32, exact (subnormals by a multiplication by a power of two; NaN payloads kept).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let magic = f32::from_bits((254 - 15) << 23);
    let infnan = f32::from_bits((127 + 16) << 23);
    let f = f32::from_bits(((h & 0x7fff) as u32) << 13) * magic;
    let bits = if f >= infnan { f.to_bits() | 255 << 23 } else { f.to_bits() };
    f32::from_bits(bits | ((h & 0x8000) as u32) << 16)
}

/// f32 to IEEE fp16, rounding to nearest even (subnormals by an addition in f32, which rounds
/// so; NaN made quiet with its top payload bits kept, as numpy does). Written out rather than
/// taken from the `half` crate, which the library does not link (it converts one value per call
/// after a CPU check; this one vectorizes in the derivation kernels).
#[inline(always)]
pub fn f16_rne(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let u = b & 0x7fff_ffff;
    let h = if u >= 0x4780_0000 {
        // At least 2^16 (or inf, NaN): inf, or a quiet NaN.
        if u > 0x7f80_0000 {
            0x7e00 | ((u >> 13) & 0x3ff) as u16
        } else {
            0x7c00
        }
    } else if u < 0x3880_0000 {
        // Below 2^-14: a subnormal or zero, rounded by the f32 addition.
        let magic = ((127 - 15) + (23 - 10) + 1) << 23;
        (f32::from_bits(u) + f32::from_bits(magic)).to_bits().wrapping_sub(magic) as u16
    } else {
        let odd = (u >> 13) & 1;
        (u.wrapping_add(((15u32.wrapping_sub(127)) << 23).wrapping_add(0xfff)).wrapping_add(odd) >> 13) as u16
    };
    h | sign
}

/// f32 to bf16, rounding to nearest even; NaN keeps its sign and top bits and is made quiet.
#[inline(always)]
pub fn bf16_rne(x: f32) -> u16 {
    let n = x.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        return ((n >> 16) | 64) as u16;
    }
    ((n as u64 + 0x7fff + ((n >> 16) & 1) as u64) >> 16) as u16
}

/// ggml's `roundf` (halves away from zero) of a value within the i32 range, as the `gguf`
/// package writes it (`floor(a) + floor(2 (a - floor(a)))` with the sign of `x`; both floors
/// are exact integer parts here, taken by conversion so the loop needs no library call).
#[inline(always)]
fn round_away(x: f32) -> i32 {
    let a = x.abs();
    let fl = a as i32;
    let b = fl + (2.0 * (a - fl as f32) >= 1.0) as i32;
    if x < 0.0 {
        -b
    } else {
        b
    }
}

/// The largest magnitude of a block (vertical maxima in eight lanes, then across them).
#[inline(always)]
fn max_abs(x: &[f32; 32]) -> f32 {
    let mut acc = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a = a.max(v.abs());
        }
    }
    acc.iter().fold(0f32, |m, &v| m.max(v))
}

/// One quantization block of 32 values into `out` (the block's bytes).
#[inline(always)]
fn quantize_block(kind: Kind, x: &[f32; 32], out: &mut [u8]) {
    let f16 = |v: f32| f16_rne(v).to_le_bytes();
    let nibbles = |q: &[u8; 32], out: &mut [u8]| {
        for j in 0..16 {
            out[j] = (q[j] & 0x0F) | (q[j + 16] << 4);
        }
    };
    let high_bits = |q: &[u8; 32]| -> [u8; 4] {
        let mut h = 0u32;
        for (j, &v) in q.iter().enumerate() {
            h |= ((v >> 4) as u32 & 1) << j;
        }
        h.to_le_bytes()
    };
    let inv = |d: f32| if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut q = [0u8; 32];
    match kind {
        Kind::Q8_0 => {
            let d = max_abs(x) / 127.0;
            let id = inv(d);
            out[..2].copy_from_slice(&f16(d));
            for (q, &v) in q.iter_mut().zip(x) {
                *q = round_away(v * id) as i8 as u8;
            }
            out[2..34].copy_from_slice(&q);
        }
        Kind::Q4_0 | Kind::Q5_0 => {
            // The value of largest magnitude (the first of equals), with its sign.
            let amax = max_abs(x);
            let m = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
            let (div, off, top) = if kind == Kind::Q4_0 { (-8.0, 8.5, 15u8) } else { (-16.0, 16.5, 31u8) };
            let d = m / div;
            let id = inv(d);
            out[..2].copy_from_slice(&f16(d));
            for (q, &v) in q.iter_mut().zip(x) {
                *q = quant(v * id + off, top);
            }
            if kind == Kind::Q4_0 {
                nibbles(&q, &mut out[2..18]);
            } else {
                out[2..6].copy_from_slice(&high_bits(&q));
                nibbles(&q, &mut out[6..22]);
            }
        }
        _ => {
            let (mut lo, mut hi) = ([f32::INFINITY; 8], [f32::NEG_INFINITY; 8]);
            for c in x.chunks_exact(8) {
                for k in 0..8 {
                    lo[k] = lo[k].min(c[k]);
                    hi[k] = hi[k].max(c[k]);
                }
            }
            let min = lo.iter().fold(f32::INFINITY, |a, &v| a.min(v));
            let max = hi.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
            let top = if kind == Kind::Q4_1 { 15u8 } else { 31 };
            let d = (max - min) / top as f32;
            let id = inv(d);
            out[..2].copy_from_slice(&f16(d));
            out[2..4].copy_from_slice(&f16(min));
            for (q, &v) in q.iter_mut().zip(x) {
                *q = quant((v - min) * id + 0.5, top);
            }
            if kind == Kind::Q4_1 {
                nibbles(&q, &mut out[4..20]);
            } else {
                out[4..8].copy_from_slice(&high_bits(&q));
                nibbles(&q, &mut out[8..24]);
            }
        }
    }
}

/// `min(top, trunc(v))` as a byte for `v >= 0` (numpy's float-to-uint8 of a value in range,
/// then the clip); 0 below 0 and for NaN.
#[inline(always)]
fn quant(v: f32, top: u8) -> u8 {
    (v as i32).clamp(0, top as i32) as u8
}

/// The derived bytes of whole groups of 32 elements (whole super-blocks of 256 for the
/// K-quants) from element `e0` of the reference on (`out` holds a whole number of them): the kernel every instruction-set level compiles.
#[inline(always)]
pub fn derive_groups(
    kind: Kind,
    src: Src,
    reference: &[u8],
    e0: usize,
    out: &mut [u8],
    search: &impl super::kquants::Search,
) {
    let (bb, be) = kind.block();
    if kind == Kind::Iq4Nl {
        // Eight blocks at a time (side by side in `iq4`'s lanes), the last ones padded.
        for (g, o) in out.chunks_mut(8 * bb).enumerate() {
            let n = 32 * o.len() / bb;
            let x: [f32; 256] = if n == 256 {
                src.load::<256>(reference, e0 + 256 * g)
            } else {
                std::array::from_fn(|i| if i < n { src.at(reference, e0 + 256 * g + i) } else { 0.0 })
            };
            let mut full = [0u8; 144];
            super::iq4::iq4_nl(&x, &mut full);
            o.copy_from_slice(&full[..o.len()]);
        }
        return;
    }
    if be == 256 {
        for (g, o) in out.chunks_exact_mut(bb).enumerate() {
            let x = src.load::<256>(reference, e0 + 256 * g);
            match kind {
                Kind::Q4K => super::kquants::q45_k(&x, 15, o, search),
                Kind::Q5K => super::kquants::q45_k(&x, 31, o, search),
                Kind::Q2K => super::kquants::q2_k(&x, o, search),
                Kind::Q3K => super::kquants::q3_k(&x, o),
                Kind::Iq4Xs => super::iq4::iq4_xs(&x, o),
                _ => super::kquants::q6_k(&x, o, search),
            }
        }
        return;
    }
    let group = bb * 32 / be;
    for (g, o) in out.chunks_exact_mut(group).enumerate() {
        let x = src.load::<32>(reference, e0 + 32 * g);
        if be == 1 {
            o.chunks_exact_mut(bb).zip(&x).for_each(|(o, &v)| cast(kind, v, o));
        } else {
            quantize_block(kind, &x, o);
        }
    }
}

/// One value of a cast (`bf16`, `bf16_trunc`, `f16`, `f32`) into its bytes `o`.
#[inline(always)]
pub fn cast(kind: Kind, v: f32, o: &mut [u8]) {
    match kind {
        Kind::Bf16Rne => o.copy_from_slice(&bf16_rne(v).to_le_bytes()),
        Kind::Bf16Trunc => o.copy_from_slice(&((v.to_bits() >> 16) as u16).to_le_bytes()),
        Kind::F16Rne => o.copy_from_slice(&f16_rne(v).to_le_bytes()),
        Kind::F32 => o.copy_from_slice(&v.to_le_bytes()),
        _ => unreachable!("{kind:?} is not a cast"),
    }
}
