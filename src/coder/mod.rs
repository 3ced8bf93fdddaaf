//! Entropy coders and bit packing: the leaves of every program end here.
//!
//! Each coder is self-delimiting given the number of symbols, which the interpreter knows from
//! the program's type rules, and reports how many bytes it consumed.

pub mod bitio;
pub mod huffman;
pub mod lanes;
pub mod rans;

use crate::dsl::{Data, Stream, Ty};
use crate::error::{Error, Result};
use crate::simd;
use bitio::{BitWriter, Bits32};

/// Packs `values` at `bits` bits each (LSB-first).
pub fn pack(values: impl Iterator<Item = u64>, bits: u32, out: &mut Vec<u8>) {
    if bits == 0 {
        return;
    }
    if bits > 32 {
        let mut w = BitWriter::new();
        for v in values {
            w.put_wide(v, bits);
        }
        out.extend_from_slice(&w.finish());
        return;
    }
    out.reserve(packed_len(values.size_hint().0, bits));
    let mut w = Bits32::new(out, 0, 0);
    for v in values {
        w.put(v, bits);
    }
    w.finish();
}

/// [`pack`] of a stream's words (slices of the word type, no per-word dispatch).
pub fn pack_stream(x: &Stream, out: &mut Vec<u8>) {
    let bits = x.ty.bits;
    match &x.data {
        Data::U8(d) => pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U16(d) => pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U32(d) => pack(d.iter().map(|&v| v as u64), bits, out),
        Data::U64(d) => pack(d.iter().copied(), bits, out),
    }
}

/// Bytes used by `n` values packed at `bits` bits.
pub fn packed_len(n: usize, bits: u32) -> usize {
    ((n as u128 * bits as u128).div_ceil(8)) as usize
}

/// Unpacks `n` values of type `ty` from the start of `input` into a stream (the SIMD kernels
/// for u8 and u16 words).
pub fn unpack_stream(input: &[u8], n: usize, ty: Ty) -> Result<Stream> {
    let bits = ty.bits;
    if bits > 64 {
        return Err(Error::corrupt("bit-packed stream: words wider than 64 bits"));
    }
    let len = packed_len(n, bits);
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

/// zstd on a byte stream (the LZ leaf for long repeats): one zstd frame, appended to `out`.
pub fn zstd_encode(bytes: &[u8], level: i32, out: &mut Vec<u8>) -> Result<()> {
    out.extend_from_slice(&zstd::bulk::compress(bytes, level)?);
    Ok(())
}

/// Decodes `input` (exactly one zstd frame) into exactly `n` bytes.
pub fn zstd_decode(input: &[u8], n: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(n);
    let mut dec = zstd::bulk::Decompressor::new()?;
    // `decompress_to_buffer` never writes past the capacity: a forged frame cannot grow memory.
    let got = dec.decompress_to_buffer(input, &mut out).map_err(|e| Error::corrupt(format!("zstd: {e}")))?;
    if got != n {
        return Err(Error::corrupt("zstd: wrong decoded length"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pack` writes what a bit writer writes, and `unpack_stream` reads it back.
    #[test]
    fn pack_matches_bit_writer() {
        let mut seed = 9u64;
        for bits in 1..=64u32 {
            for n in [0usize, 1, 3, 7, 8, 31, 64, 1001] {
                let vals: Vec<u64> = (0..n)
                    .map(|_| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        if bits == 64 {
                            seed
                        } else {
                            seed & ((1u64 << bits) - 1)
                        }
                    })
                    .collect();
                let mut w = BitWriter::new();
                for &v in &vals {
                    w.put_wide(v, bits);
                }
                let mut out = Vec::new();
                pack(vals.iter().copied(), bits, &mut out);
                assert_eq!(out, w.finish(), "bits {bits} n {n}");
                assert_eq!(out.len(), packed_len(n, bits));
                let back = unpack_stream(&out, n, Ty::u(bits)).unwrap();
                assert_eq!(back.iter().collect::<Vec<u64>>(), vals, "bits {bits} n {n}");
            }
        }
    }
}
