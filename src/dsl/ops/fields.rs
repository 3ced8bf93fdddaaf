//! `fields(e, m, k)` (id 0x10): split IEEE-style floats of `1 + e + m` bits into
//! `[exponent and the top k mantissa bits as one symbol, sign, the low m - k mantissa bits]`.
//! Works on the bit view only, so NaN payloads, -0 and subnormals survive untouched.

use super::prelude::*;
use crate::simd;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    pub exp: u32,
    pub mant: u32,
    pub k: u32,
}

impl Fields {
    pub const ID: u8 = 0x10;

    pub fn for_dtype_bits(exp: u32, mant: u32, k: u32) -> Fields {
        Fields { exp, mant, k: k.min(mant) }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, self.exp as u64);
        put_varint(out, self.mant as u64);
        put_varint(out, self.k as u64);
    }

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let f = Fields { exp: r.len(63)? as u32, mant: r.len(63)? as u32, k: r.len(63)? as u32 };
        if f.k > f.mant || f.exp + f.mant + 1 > 64 || f.exp + f.k > 16 {
            return Err(Error::corrupt("fields: bad layout"));
        }
        Ok(f)
    }

    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        if ty.bits != 1 + self.exp + self.mant {
            return Err(Error::corrupt("fields: layout does not match the word size"));
        }
        Ok(vec![Ty::u(self.exp + self.k), Ty::u(1), Ty::u(self.mant - self.k)])
    }

    pub fn child_lens(&self, n: usize) -> Vec<usize> {
        vec![n; 3]
    }

    pub fn forward(&self, x: &Stream) -> Vec<Stream> {
        let lo = self.mant - self.k;
        let w = x.ty.bits;
        let head = Ty::u(self.exp + self.k);
        let lo_ty = Ty::u(lo);
        let lo_mask = lo_ty.mask();
        vec![
            x.map_words(head, |v| v >> lo),
            x.map_words(Ty::u(1), |v| v >> (w - 1)),
            x.map_words(lo_ty, |v| v & lo_mask),
        ]
    }

    pub fn inverse(&self, ty: Ty, n: usize, parts: Vec<Stream>) -> Result<Stream> {
        let lo = self.mant - self.k;
        let top = ty.bits - 1;
        let (h, s, m) = (&parts[0], &parts[1], &parts[2]);
        // Slice kernels for the common layouts (bf16/fp16/fp32 words); the children already have
        // length n and values within their types.
        let Data::U8(sv) = &s.data else {
            return Ok(Stream::from_fn(ty, n, |i| (s.get(i) << top) | (h.get(i) << lo) | m.get(i)));
        };
        macro_rules! merge {
            ($out:ident, $o:ty) => {{
                let out: Vec<$o> = match (&h.data, &m.data) {
                    (Data::U8(hv), Data::U8(mv)) => simd::merged_fields(hv, sv, mv, lo, top),
                    (Data::U8(hv), Data::U16(mv)) => simd::merged_fields(hv, sv, mv, lo, top),
                    (Data::U16(hv), Data::U8(mv)) => simd::merged_fields(hv, sv, mv, lo, top),
                    (Data::U16(hv), Data::U16(mv)) => simd::merged_fields(hv, sv, mv, lo, top),
                    (Data::U8(hv), Data::U32(mv)) => simd::merged_fields(hv, sv, mv, lo, top),
                    (Data::U16(hv), Data::U32(mv)) => simd::merged_fields(hv, sv, mv, lo, top),
                    _ => return Ok(Stream::from_fn(ty, n, |i| (s.get(i) << top) | (h.get(i) << lo) | m.get(i))),
                };
                return Ok(Stream { ty, data: Data::$out(out) });
            }};
        }
        match ty.container_bytes() {
            2 => {
                if let (Data::U16(hv), Data::U8(mv)) = (&h.data, &m.data) {
                    if ty.bits == 16 {
                        let mut out = vec![0u16; n];
                        simd::merge_fields16(hv, sv, mv, lo, &mut out);
                        return Ok(Stream { ty, data: Data::U16(out) });
                    }
                }
                merge!(U16, u16)
            }
            4 => merge!(U32, u32),
            _ => {}
        }
        Ok(Stream::from_fn(ty, n, |i| (s.get(i) << top) | (h.get(i) << lo) | m.get(i)))
    }
}

impl std::fmt::Display for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fields(e{},m{},k{})", self.exp, self.mant, self.k)
    }
}
