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
        (Data::U8(d), 1 | 2 | 4) => return pack_small(d, bits, out),
        _ => {}
    }
    match &x.data {
        Data::U8(d) => coder::pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U16(d) => coder::pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U32(d) => coder::pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U64(d) => coder::pack(d.iter().copied(), bits, out),
    }
}

/// Packs words of 1, 2 or 4 bits (a divisor of 8), `8 / bits` to a byte, LSB first: eight words
/// at a time as one u64 whose bytes are gathered by shifts and masks.
fn pack_small(d: &[u8], bits: u32, out: &mut Vec<u8>) {
    let per = (8 / bits) as usize;
    out.reserve(d.len().div_ceil(per));
    let mut it = d.chunks_exact(8);
    for c in &mut it {
        let x = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        match bits {
            1 => out.push(((x & 0x0101_0101_0101_0101).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8),
            2 => {
                let t = (x | (x >> 6)) & 0x00ff_00ff_00ff_00ff;
                let t = (t | (t >> 12)) & 0x0000_00ff_0000_00ff;
                out.extend_from_slice(&[t as u8, (t >> 32) as u8]);
            }
            _ => {
                let t = (x | (x >> 4)) & 0x00ff_00ff_00ff_00ff;
                let t = (t | (t >> 8)) & 0x0000_ffff_0000_ffff;
                let t = (t | (t >> 16)) & 0xffff_ffff;
                out.extend_from_slice(&(t as u32).to_le_bytes());
            }
        }
    }
    for c in it.remainder().chunks(per) {
        out.push(c.iter().enumerate().fold(0u8, |acc, (j, &v)| acc | (v << (j as u32 * bits))));
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
