//! `byteplanes` (id 0x11) and `bitplanes` (id 0x12): split words into planes, most significant
//! first, so that a lower plane can be coded with the plane above it as context.

use super::prelude::*;
use crate::simd::{self, Lane};

/// `byteplanes`: u(w) -> ceil(w/8) planes; all are u8 but the last, which holds the low `w - 8(P-1)` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BytePlanes;

impl BytePlanes {
    pub const ID: u8 = 0x11;

    /// (width, shift) of each plane, most significant first.
    fn layout(w: u32) -> Vec<(u32, u32)> {
        let p = w.div_ceil(8);
        (0..p).map(|j| if j + 1 < p { (8, w - 8 * (j + 1)) } else { (w - 8 * (p - 1), 0) }).collect()
    }

    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        if ty.bits == 0 {
            return Err(Error::corrupt("byteplanes of an empty type"));
        }
        Ok(Self::layout(ty.bits).into_iter().map(|(b, _)| Ty::u(b)).collect())
    }

    pub fn forward(&self, x: &Stream) -> Vec<Stream> {
        // Two planes of a word of 9..=16 bits (a bf16/fp16 word): a plain loop over the slice each.
        if let (Data::U16(d), 9..=16) = (&x.data, x.ty.bits) {
            let sh = x.ty.bits - 8;
            let low = ((1u32 << sh) - 1) as u16;
            let hi = d.iter().map(|&v| (v >> sh) as u8).collect();
            let lo = d.iter().map(|&v| (v & low) as u8).collect();
            return vec![Stream { ty: Ty::u(8), data: Data::U8(hi) }, Stream { ty: Ty::u(sh), data: Data::U8(lo) }];
        }
        // Four planes of a word of 25..=32 bits (fp32): one pass over the words.
        if let (Data::U32(d), 25..=32) = (&x.data, x.ty.bits) {
            let w = x.ty.bits;
            let low = ((1u64 << (w - 24)) - 1) as u32;
            let n = d.len();
            let mut p: [Vec<u8>; 4] = std::array::from_fn(|_| Vec::with_capacity(n));
            let [p0, p1, p2, p3] = &mut p;
            let (s0, s1, s2, s3) =
                (p0.spare_capacity_mut(), p1.spare_capacity_mut(), p2.spare_capacity_mut(), p3.spare_capacity_mut());
            for ((((&v, a), b), c), e) in
                d.iter().zip(&mut s0[..n]).zip(&mut s1[..n]).zip(&mut s2[..n]).zip(&mut s3[..n])
            {
                a.write((v >> (w - 8)) as u8);
                b.write((v >> (w - 16)) as u8);
                c.write((v >> (w - 24)) as u8);
                e.write((v & low) as u8);
            }
            for plane in &mut p {
                // SAFETY: the loop above wrote the first `n` bytes of every plane's capacity.
                unsafe { plane.set_len(n) };
            }
            let tys = [8, 8, 8, w - 24];
            return p.into_iter().zip(tys).map(|(d, b)| Stream { ty: Ty::u(b), data: Data::U8(d) }).collect();
        }
        // Planes of other 32-bit words: a loop over the u32 slice per plane, not widened to u64.
        if let Data::U32(d) = &x.data {
            let plane = |(b, sh): (u32, u32)| {
                let m = ((1u64 << b) - 1) as u32;
                Stream { ty: Ty::u(b), data: Data::U8(d.iter().map(|&v| ((v >> sh) & m) as u8).collect()) }
            };
            return Self::layout(x.ty.bits).into_iter().map(plane).collect();
        }
        Self::layout(x.ty.bits).into_iter().map(|(b, sh)| x.map_words(Ty::u(b), |v| v >> sh)).collect()
    }

    pub fn inverse(&self, ty: Ty, n: usize, parts: Vec<Stream>) -> Result<Stream> {
        let lay = Self::layout(ty.bits);
        // Two planes of a word of 9..=16 bits (a bf16/fp16 word or a fields head): one kernel.
        if let [Stream { data: Data::U8(hi), .. }, Stream { data: Data::U8(lo), .. }] = &parts[..] {
            if ty.container_bytes() == 2 && hi.len() == n && lo.len() == n {
                let mut out = vec![0u16; n];
                simd::merge_planes16(hi, lo, lay[0].1, &mut out);
                return Ok(Stream { ty, data: Data::U16(out) });
            }
        }
        if parts.iter().any(|p| p.len() != n) {
            return Err(Error::corrupt("byteplanes: a plane of the wrong length"));
        }
        // Each plane shifted into place, a pass per plane in the output's own container.
        fn merge<T: Lane>(n: usize, lay: &[(u32, u32)], parts: &[Stream]) -> Vec<T> {
            let mut out = vec![T::default(); n];
            for (&(_, sh), p) in lay.iter().zip(parts) {
                match &p.data {
                    Data::U8(d) => or_shifted(&mut out, d, sh),
                    Data::U16(d) => or_shifted(&mut out, d, sh),
                    Data::U32(d) => or_shifted(&mut out, d, sh),
                    Data::U64(d) => or_shifted(&mut out, d, sh),
                }
            }
            out
        }
        fn or_shifted<T: Lane, P: Lane>(out: &mut [T], part: &[P], sh: u32) {
            for (o, &v) in out.iter_mut().zip(part) {
                *o = T::from_u64(o.to_u64() | v.to_u64() << sh);
            }
        }
        let data = match ty.container_bytes() {
            1 => Data::U8(merge(n, &lay, &parts)),
            2 => Data::U16(merge(n, &lay, &parts)),
            4 => Data::U32(merge(n, &lay, &parts)),
            _ => Data::U64(merge(n, &lay, &parts)),
        };
        Ok(Stream { ty, data })
    }
}

/// `bitplanes`: u(w) -> w streams of u1, most significant bit first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitPlanes;

impl BitPlanes {
    pub const ID: u8 = 0x12;

    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        Ok(vec![Ty::u(1); ty.bits as usize])
    }

    pub fn forward(&self, x: &Stream) -> Vec<Stream> {
        let w = x.ty.bits;
        (0..w).map(|j| x.map_words(Ty::u(1), |v| v >> (w - 1 - j))).collect()
    }

    pub fn inverse(&self, ty: Ty, n: usize, parts: Vec<Stream>) -> Result<Stream> {
        let w = ty.bits;
        Ok(Stream::from_fn(ty, n, |i| {
            parts.iter().enumerate().fold(0u64, |acc, (j, p)| acc | (p.get(i) << (w - 1 - j as u32)))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass split of 25- to 32-bit words gives the planes of the generic split.
    #[test]
    fn byteplanes_of_wide_words_match_the_generic_split() {
        for w in 25..=32 {
            let ty = Ty::u(w);
            let x = Stream::from_fn(ty, 1001, |i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17);
            let planes = BytePlanes.forward(&x);
            let generic: Vec<Stream> =
                BytePlanes::layout(w).into_iter().map(|(b, sh)| x.map_words(Ty::u(b), |v| v >> sh)).collect();
            assert_eq!(planes, generic, "u{w}");
            assert_eq!(BytePlanes.inverse(ty, x.len(), planes).unwrap(), x, "u{w}");
        }
    }

    /// The merge of the planes gives back the words at every width (one plane, planes narrower
    /// than a byte, 16-bit words by their kernel, wide words).
    #[test]
    fn byteplanes_invert_at_every_width() {
        for w in [1u32, 3, 8, 9, 12, 16, 17, 24, 32, 40, 64] {
            let ty = Ty::u(w);
            let x = Stream::from_fn(ty, 777, |i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 5 & ty.mask());
            let planes = BytePlanes.forward(&x);
            assert_eq!(BytePlanes.inverse(ty, x.len(), planes).unwrap(), x, "u{w}");
        }
    }
}
