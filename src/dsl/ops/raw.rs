//! `raw` (id 0x01): words bit-packed at their type's width. The fallback leaf: never expands
//! a stream beyond its information-free size.

use super::prelude::*;
use crate::coder;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raw;

impl Raw {
    pub const ID: u8 = 0x01;

    pub fn encode(&self, x: &Stream, out: &mut Vec<u8>) {
        coder::pack(x.iter(), x.ty.bits, out);
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        let mut s = Stream::with_capacity(ty, n);
        let used = match &mut s.data {
            Data::U8(d) => coder::unpack(input, n, ty.bits, |v| d.push(v as u8))?,
            Data::U16(d) => coder::unpack(input, n, ty.bits, |v| d.push(v as u16))?,
            Data::U32(d) => coder::unpack(input, n, ty.bits, |v| d.push(v as u32))?,
            Data::U64(d) => coder::unpack(input, n, ty.bits, |v| d.push(v))?,
        };
        if used != input.len() {
            return Err(Error::corrupt("raw leaf: trailing bytes"));
        }
        Ok(s)
    }

    /// Exact size in bytes.
    pub fn cost(ty: Ty, n: usize) -> usize {
        coder::packed_len(n, ty.bits)
    }
}
