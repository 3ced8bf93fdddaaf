//! `raw` (id 0x01): words bit-packed at their type's width. The fallback leaf: never expands
//! a stream beyond its information-free size.

use super::prelude::*;
use crate::coder;
use crate::simd;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raw;

impl Raw {
    pub const ID: u8 = 0x01;

    pub fn encode(&self, x: &Stream, out: &mut Vec<u8>) {
        pack_stream(x, out);
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        let s = unpack_stream(input, n, ty)?;
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

/// [`coder::pack`] of a stream's words (slices of the word type, no per-word dispatch).
pub fn pack_stream(x: &Stream, out: &mut Vec<u8>) {
    let bits = x.ty.bits;
    // Byte-aligned layouts: the same bytes as the bit packer (LSB first), without it.
    match (&x.data, bits) {
        (Data::U8(d), 8) => return out.extend_from_slice(d),
        (Data::U16(d), 16) => return out.extend(d.iter().flat_map(|v| v.to_le_bytes())),
        (Data::U32(d), 32) => return out.extend(d.iter().flat_map(|v| v.to_le_bytes())),
        (Data::U64(d), 64) => return out.extend(d.iter().flat_map(|v| v.to_le_bytes())),
        (Data::U8(d), 1..=7) => return coder::pack_u8(d, bits, out),
        (Data::U16(d), 9..=15) => return coder::pack_u16(d, bits, out),
        _ => {}
    }
    match &x.data {
        Data::U8(d) => coder::pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U16(d) => coder::pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U32(d) => coder::pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U64(d) => coder::pack(d.iter().copied(), bits, out),
    }
}

/// Unpacks `n` values of type `ty` from the start of `input` into a stream (the SIMD kernels
/// for u8 and u16 words).
pub fn unpack_stream(input: &[u8], n: usize, ty: Ty) -> Result<Stream> {
    let bits = ty.bits;
    if bits > 64 {
        return Err(Error::corrupt("bit-packed stream: words wider than 64 bits"));
    }
    let len = coder::packed_len(n, bits);
    if len > input.len() {
        return Err(Error::corrupt("bit-packed stream ends early"));
    }
    let data = &input[..len];
    if bits == 0 {
        return Ok(Stream::from_fn(ty, n, |_| 0));
    }
    // Whole bytes and 16-bit words are their own packing: taken as they are, with no zero fill.
    if bits == 8 {
        return Ok(Stream { ty, data: Data::U8(data.to_vec()) });
    }
    if bits == 16 {
        let words = data.chunks_exact(2).map(|w| u16::from_le_bytes([w[0], w[1]])).collect();
        return Ok(Stream { ty, data: Data::U16(words) });
    }
    let mut s = Stream::with_capacity(ty, 0);
    match &mut s.data {
        Data::U8(d) => {
            d.resize(n, 0);
            simd::unpack_u8(data, bits, d);
        }
        Data::U16(d) => {
            d.resize(n, 0);
            simd::unpack_u16(data, bits, d);
        }
        Data::U32(d) => {
            d.resize(n, 0);
            simd::unpack(data, bits, d);
        }
        Data::U64(d) => {
            d.resize(n, 0);
            simd::unpack(data, bits, d);
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `unpack_stream` reads back what `pack_stream` wrote, for every width.
    #[test]
    fn unpack_reads_back_pack() {
        for (bits, n, vals) in coder::packing_cases() {
            let mut out = Vec::new();
            coder::pack(vals.iter().copied(), bits, &mut out);
            let back = unpack_stream(&out, n, Ty::u(bits)).unwrap();
            assert_eq!(back.iter().collect::<Vec<u64>>(), vals, "bits {bits} n {n}");
            let mut again = Vec::new();
            pack_stream(&back, &mut again);
            assert_eq!(again, out, "bits {bits} n {n}");
        }
    }
}
