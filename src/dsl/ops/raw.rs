//! `raw` (id 0x01): words bit-packed at their type's width. The fallback leaf: never expands
//! a stream beyond its information-free size.

use super::prelude::*;
use crate::coder;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raw;

impl Raw {
    pub const ID: u8 = 0x01;

    pub fn encode(&self, x: &Stream, out: &mut Vec<u8>) {
        coder::pack_stream(x, out);
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        let s = coder::unpack_stream(input, n, ty)?;
        if coder::packed_len(n, ty.bits) != input.len() {
            return Err(Error::corrupt("raw leaf: trailing bytes"));
        }
        Ok(s)
    }

    /// Exact size in bytes.
    pub fn cost(ty: Ty, n: usize) -> usize {
        coder::packed_len(n, ty.bits)
    }
}
