//! Entropy coders and bit packing: the leaves of every program end here.
//!
//! Each coder is self-delimiting given the number of symbols, which the interpreter knows from
//! the program's type rules, and reports how many bytes it consumed.

pub mod bitio;
pub mod huffman;
pub mod rans;

use crate::error::{Error, Result};
use bitio::{BitReader, BitWriter};

/// Packs `values` at `bits` bits each (LSB-first).
pub fn pack(values: impl Iterator<Item = u64>, bits: u32, out: &mut Vec<u8>) {
    if bits == 0 {
        return;
    }
    let mut w = BitWriter::new();
    for v in values {
        w.put_wide(v, bits);
    }
    out.extend_from_slice(&w.finish());
}

/// Bytes used by `n` values packed at `bits` bits.
pub fn packed_len(n: usize, bits: u32) -> usize {
    ((n as u128 * bits as u128).div_ceil(8)) as usize
}

/// Unpacks `n` values of `bits` bits; returns them and the bytes consumed.
pub fn unpack(input: &[u8], n: usize, bits: u32, mut sink: impl FnMut(u64)) -> Result<usize> {
    let len = packed_len(n, bits);
    if len > input.len() {
        return Err(Error::corrupt("bit-packed stream ends early"));
    }
    if bits == 0 {
        for _ in 0..n {
            sink(0);
        }
        return Ok(0);
    }
    let data = &input[..len];
    if bits <= 56 {
        // Fast path: one unaligned 64-bit load per value (zero-padded past the end, where the
        // packing left only zero bits).
        let mask = (1u64 << bits) - 1;
        let load = |byte: usize| -> u64 {
            match data.get(byte..byte + 8) {
                Some(b) => u64::from_le_bytes(b.try_into().unwrap()),
                None => {
                    let mut t = [0u8; 8];
                    let rest = &data[byte.min(data.len())..];
                    t[..rest.len()].copy_from_slice(rest);
                    u64::from_le_bytes(t)
                }
            }
        };
        let mut bitpos = 0usize;
        for _ in 0..n {
            sink((load(bitpos >> 3) >> (bitpos & 7)) & mask);
            bitpos += bits as usize;
        }
        return Ok(len);
    }
    let mut r = BitReader::new(data);
    for _ in 0..n {
        sink(r.get_wide(bits)?);
    }
    Ok(len)
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
