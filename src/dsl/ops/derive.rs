//! `derive(k)` (id 0x43, format version 9; the derivations `q2_k` and `q3_k` from version 10,
//! `iq4_nl` and `iq4_xs` from version 15):
//! the reference that the program below reads is not the reference tensor as it is but **derivation `k` of it**: the tensor the transform that made
//! this one (a cast, a GGUF quantizer) gives when run on the reference. `xorref`, `subref` and
//! `copyref` under it then code only where the prediction misses (`derive(q8_0)[copyref]` is a
//! Q8_0 tensor that is exactly the reference quantizer's output, and costs no payload).
//! The data stream passes through unchanged; only allowed at the root.
//!
//! The reference tensor may have another dtype and byte length than this one: derivations read
//! it as f32 values (F32, F16 or BF16 tensors, widened exactly) and need as many elements as
//! this tensor has. [`predict`] gives the derived bytes of any byte range of this tensor, so a
//! chunk is predicted on its own (a quantization block cut by a chunk boundary is quantized
//! whole and cut the same way).
//!
//! The quantizers are ggml's reference ones (`quantize_row_*_ref` in `ggml-quants.c`, which the
//! `gguf` Python package reproduces bit for bit): one f32 scale per block of 32, rounded to fp16.

use super::prelude::*;
use crate::simd::derive::cast;
pub use crate::simd::derive::{Kind, Src};
use crate::source::Bytes;
use crate::tensor::DType;

impl Kind {
    pub const ALL: [Kind; 16] = [
        Kind::Bf16Rne,
        Kind::Bf16Trunc,
        Kind::F16Rne,
        Kind::F32,
        Kind::Q8_0,
        Kind::Q4_0,
        Kind::Q4_1,
        Kind::Q5_0,
        Kind::Q5_1,
        Kind::Q4K,
        Kind::Q5K,
        Kind::Q6K,
        Kind::Q2K,
        Kind::Q3K,
        Kind::Iq4Nl,
        Kind::Iq4Xs,
    ];

    pub fn id(self) -> u8 {
        match self {
            Kind::Bf16Rne => 1,
            Kind::Bf16Trunc => 2,
            Kind::F16Rne => 3,
            Kind::F32 => 4,
            Kind::Q8_0 => 8,
            Kind::Q4_0 => 9,
            Kind::Q4_1 => 10,
            Kind::Q5_0 => 11,
            Kind::Q5_1 => 12,
            Kind::Q4K => 13,
            Kind::Q5K => 14,
            Kind::Q6K => 15,
            Kind::Q2K => 16,
            Kind::Q3K => 17,
            Kind::Iq4Nl => 18,
            Kind::Iq4Xs => 19,
        }
    }

    fn from_id(id: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.id() == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Bf16Rne => "bf16",
            Kind::Bf16Trunc => "bf16_trunc",
            Kind::F16Rne => "f16",
            Kind::F32 => "f32",
            Kind::Q8_0 => "q8_0",
            Kind::Q4_0 => "q4_0",
            Kind::Q4_1 => "q4_1",
            Kind::Q5_0 => "q5_0",
            Kind::Q5_1 => "q5_1",
            Kind::Q4K => "q4_k",
            Kind::Q5K => "q5_k",
            Kind::Q6K => "q6_k",
            Kind::Q2K => "q2_k",
            Kind::Q3K => "q3_k",
            Kind::Iq4Nl => "iq4_nl",
            Kind::Iq4Xs => "iq4_xs",
        }
    }

    /// Width of the words of the tensors it makes.
    pub fn word_bits(self) -> u32 {
        match self {
            Kind::Bf16Rne | Kind::Bf16Trunc | Kind::F16Rne => 16,
            Kind::F32 => 32,
            _ => 8,
        }
    }

    /// The derivations that may have made a tensor of dtype `to` from one of dtype `from`, most
    /// likely first.
    pub fn candidates(from: &DType, to: &DType) -> Vec<Kind> {
        if !matches!(from.name(), "F32" | "F16" | "BF16") || from == to {
            return Vec::new();
        }
        match (from.name(), to.name()) {
            ("F32", "BF16") => vec![Kind::Bf16Rne, Kind::Bf16Trunc],
            (_, "BF16") => vec![Kind::Bf16Rne],
            (_, "F16") => vec![Kind::F16Rne],
            (_, "F32") => vec![Kind::F32],
            (_, "Q8_0") => vec![Kind::Q8_0],
            (_, "Q4_0") => vec![Kind::Q4_0],
            (_, "Q4_1") => vec![Kind::Q4_1],
            (_, "Q5_0") => vec![Kind::Q5_0],
            (_, "Q5_1") => vec![Kind::Q5_1],
            (_, "Q4_K") => vec![Kind::Q4K],
            (_, "Q5_K") => vec![Kind::Q5K],
            (_, "Q6_K") => vec![Kind::Q6K],
            (_, "Q2_K") => vec![Kind::Q2K],
            (_, "Q3_K") => vec![Kind::Q3K],
            (_, "IQ4_NL") => vec![Kind::Iq4Nl],
            (_, "IQ4_XS") => vec![Kind::Iq4Xs],
            _ => Vec::new(),
        }
    }

    /// Elements of a tensor of `nbytes` bytes made by this derivation (None when it cannot be one).
    pub fn elems_of(self, nbytes: u64) -> Option<u64> {
        let (b, e) = self.block();
        nbytes.is_multiple_of(b as u64).then_some(nbytes / b as u64 * e as u64)
    }
}

/// The operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Derive {
    pub kind: Kind,
}

impl Derive {
    pub const ID: u8 = 0x43;

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let id = r.u8()?;
        let kind = Kind::from_id(id).ok_or_else(|| Error::Unsupported(format!("unknown derivation {id}")))?;
        Ok(Derive { kind })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.kind.id());
    }

    /// The data passes through: one child of the same type, which must be the derivation's word.
    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        if ty.bits != self.kind.word_bits() {
            return Err(Error::corrupt(format!("derive({}) over {}-bit words", self.kind.name(), ty.bits)));
        }
        Ok(vec![ty])
    }
}

impl std::fmt::Display for Derive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "derive({})", self.kind.name())
    }
}

/// The storage of a reference tensor of dtype `dtype`; an error for other dtypes than F32,
/// F16 and BF16.
fn src_of(dtype: &DType) -> Result<Src> {
    match dtype.name() {
        "F32" => Ok(Src::F32),
        "F16" => Ok(Src::F16),
        "BF16" => Ok(Src::Bf16),
        other => Err(Error::invalid(format!("a derivation needs an F32, F16 or BF16 reference tensor, not {other}"))),
    }
}

/// The derived bytes `start .. start + len` of a tensor of `elems` elements made by `kind` from
/// the reference tensor `reference` of dtype `dtype`. An error when the reference is not a float
/// tensor of at least `elems` elements, or the range is not in a tensor of `elems` elements.
pub fn predict(kind: Kind, dtype: &DType, reference: Bytes, elems: u64, start: usize, len: usize) -> Result<Vec<u8>> {
    let src = src_of(dtype)?;
    let n = reference.len() / src.bytes();
    let (bb, be) = kind.block();
    let total = elems as usize / be * bb;
    if (n as u64) < elems || !(elems as usize).is_multiple_of(be) {
        return Err(Error::invalid(format!(
            "the reference tensor has {n} elements; derive({}) needs {elems}",
            kind.name()
        )));
    }
    let end = start
        .checked_add(len)
        .filter(|&e| e <= total)
        .ok_or_else(|| Error::corrupt("derive: range out of the tensor"))?;
    let (b0, b1) = (start / bb, end.div_ceil(bb));
    let mut out = vec![0u8; (b1 - b0) * bb];
    // Only the reference elements of blocks b0..b1 are read (a window of a file, or of memory).
    reference.with_read(b0 * be * src.bytes(), b1 * be * src.bytes(), |window| {
        // Whole groups of 32 elements in the kernel (at the CPU's level), the rest one by one.
        let whole = (b1 - b0) * be / 32 * 32 / be * bb;
        crate::simd::derive(kind, src, window, 0, &mut out[..whole]);
        // (Only casts have a tail: quantization blocks are whole groups.)
        for (i, o) in (whole / bb * be..).zip(out[whole..].chunks_exact_mut(bb)) {
            cast(kind, src.at(window, i), o);
        }
    })?;
    out.drain(..start - b0 * bb);
    out.truncate(len);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::derive::{f16_rne, f16_to_f32};

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn casts_round_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bf16 values: to even (down); 1 + 3 * 2^-8 rounds up.
        let v = [1.0f32 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -0.0, f32::from_bits(0x7f80_0001)];
        let r = f32_bytes(&v);
        let p = predict(Kind::Bf16Rne, &DType::parse("F32"), Bytes::from(&r), 4, 0, 8).unwrap();
        let w: Vec<u16> = p.chunks(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        assert_eq!(w, [0x3f80, 0x3f82, 0x8000, 0x7fc0]);
        let t = predict(Kind::Bf16Trunc, &DType::parse("F32"), Bytes::from(&r), 4, 2, 4).unwrap();
        assert_eq!(t, [0x81, 0x3f, 0x00, 0x80]);
        let h = predict(Kind::F16Rne, &DType::parse("F32"), Bytes::from(&r), 4, 0, 2).unwrap();
        assert_eq!(u16::from_le_bytes([h[0], h[1]]), 0x3c04);
    }

    #[test]
    fn fp16_conversions_match_the_half_crate() {
        for h in 0..=u16::MAX {
            let x = half::f16::from_bits(h);
            if x.is_nan() {
                assert!(f16_to_f32(h).is_nan());
            } else {
                assert_eq!(f16_to_f32(h).to_bits(), x.to_f32().to_bits(), "{h:#06x}");
                assert_eq!(f16_rne(x.to_f32()), h, "{h:#06x}");
            }
        }
        // Every f32 exponent, with mantissas at, around and between the fp16 rounding points.
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for e in 0..256u32 {
            for m in [0u32, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7f_e000, 0x7f_efff, 0x7f_f000, 0x7f_ffff] {
                for s in [0, 1u32 << 31] {
                    let x = f32::from_bits(s | e << 23 | m);
                    if !x.is_nan() {
                        assert_eq!(f16_rne(x), half::f16::from_f32(x).to_bits(), "{x:e}");
                    }
                }
            }
            for _ in 0..2000 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let x = f32::from_bits(e << 23 | (rng as u32 & 0x807f_ffff));
                if !x.is_nan() {
                    assert_eq!(f16_rne(x), half::f16::from_f32(x).to_bits(), "{x:e}");
                }
            }
        }
    }

    #[test]
    fn q8_0_matches_the_reference_quantizer() {
        // A block whose largest magnitude is 127 units of 0.5: d = 0.5, q = round(x / 0.5).
        let mut x: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.75).collect();
        x[5] = -63.5;
        x[7] = 0.25; // 0.5 units: rounds away from zero to 1
        let p = predict(Kind::Q8_0, &DType::parse("F32"), Bytes::from(&f32_bytes(&x)), 32, 0, 34).unwrap();
        assert_eq!(u16::from_le_bytes([p[0], p[1]]), half::f16::from_f32(0.5).to_bits());
        assert_eq!(p[2 + 5] as i8, -127);
        assert_eq!(p[2 + 7] as i8, 1);
        assert_eq!(p[2] as i8, -24);
    }

    #[test]
    fn a_range_cut_inside_blocks_is_the_slice_of_the_whole() {
        let x: Vec<f32> = (0..32 * 7).map(|i| ((i * 37 % 101) as f32 - 50.0) / 13.0).collect();
        let r = f32_bytes(&x);
        for k in [Kind::Q8_0, Kind::Q4_0, Kind::Q4_1, Kind::Q5_0, Kind::Q5_1, Kind::Bf16Rne, Kind::F16Rne] {
            let elems = 32 * 7;
            let whole = predict(k, &DType::parse("F32"), Bytes::from(&r), elems, 0, k.block().0 * 7 * 32 / k.block().1)
                .unwrap();
            for (s, l) in [(3, 40), (17, 1), (35, 60), (0, whole.len())] {
                assert_eq!(
                    predict(k, &DType::parse("F32"), Bytes::from(&r), elems, s, l).unwrap(),
                    whole[s..s + l],
                    "{k:?} {s} {l}"
                );
            }
        }
    }

    #[test]
    fn a_short_or_wrong_reference_is_an_error() {
        let r = f32_bytes(&[1.0; 32]);
        assert!(predict(Kind::Q8_0, &DType::parse("F32"), Bytes::from(&r), 64, 0, 34).is_err());
        assert!(predict(Kind::Q8_0, &DType::parse("I32"), Bytes::from(&r), 32, 0, 34).is_err());
        assert!(predict(Kind::Q8_0, &DType::parse("F32"), Bytes::from(&r), 32, 30, 10).is_err());
        assert!(predict(Kind::Bf16Rne, &DType::parse("F32"), Bytes::from(&r), 31, 0, 2).is_ok());
    }
}
