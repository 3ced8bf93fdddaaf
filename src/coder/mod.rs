//! Entropy coders and bit packing: the leaves of every program end here.
//!
//! Each coder is self-delimiting given the number of symbols, which the interpreter knows from
//! the program's type rules, and reports how many bytes it consumed.

pub mod bitio;
pub mod huffman;
pub mod lanes;
pub mod rans;

use crate::error::{Error, Result};
use bitio::{BitWriter, Bits32};

/// log2 of `x > 0` to about 1e-9: the exponent, and `ln` of the mantissa (normalized to
/// [sqrt(1/2), sqrt(2))) from five terms of `2 atanh(t)`, `t = (m - 1) / (m + 1)`. Plain
/// arithmetic, so every machine gets the same bits (the cost model only compares estimates).
#[inline]
pub(crate) fn log2_approx(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7FF) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let ln = t * (2.0 + t2 * (2.0 / 3.0 + t2 * (2.0 / 5.0 + t2 * (2.0 / 7.0 + t2 * (2.0 / 9.0)))));
    e as f64 + ln * std::f64::consts::LOG2_E
}

/// Counts of each symbol below `alphabet`. Four partial counts, so that runs of one symbol (a
/// skewed source) do not wait on each other's increments; chunks keep the u32 partials from
/// overflowing.
pub(crate) fn symbol_counts(symbols: &[u16], alphabet: usize) -> Vec<u64> {
    let mut total = vec![0u64; alphabet];
    let mut part = vec![[0u32; 4]; alphabet];
    for chunk in symbols.chunks(1 << 30) {
        let mut quads = chunk.chunks_exact(4);
        for q in &mut quads {
            part[q[0] as usize][0] += 1;
            part[q[1] as usize][1] += 1;
            part[q[2] as usize][2] += 1;
            part[q[3] as usize][3] += 1;
        }
        for &s in quads.remainder() {
            part[s as usize][0] += 1;
        }
        for (t, p) in total.iter_mut().zip(part.iter_mut()) {
            *t += p.iter().map(|&x| x as u64).sum::<u64>();
            *p = [0; 4];
        }
    }
    total
}

/// Estimated cost in bits of coding counts `c` (in symbol order; zeros are skipped) with their
/// own table: `n log2 n - sum c log2 c`, 12 bits, and 7 bits per used symbol. Sparse and dense
/// histograms of the same counts get the same bits.
pub(crate) fn counts_cost(c: impl Iterator<Item = u64>) -> f64 {
    let (mut n, mut used, mut sum) = (0u64, 0u64, 0f64);
    for c in c {
        n += c;
        used += (c > 0) as u64;
        sum += c_log2_c_cached(c);
    }
    c_log2_c(n) - sum + 12.0 + 7.0 * used as f64
}

/// `c log2 c` (0 for 0), from a table below `C_LOG_TABLE` (made with the same formula, so the
/// bits are the same either way).
#[inline]
fn c_log2_c_cached(c: u64) -> f64 {
    static TABLE: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    if c < C_LOG_TABLE {
        let t = TABLE.get_or_init(|| (0..C_LOG_TABLE).map(c_log2_c).collect());
        t[c as usize]
    } else {
        c_log2_c(c)
    }
}

const C_LOG_TABLE: u64 = 4096;

/// `c log2 c` (0 for 0 and 1), from [`log2_approx`].
pub(crate) fn c_log2_c(c: u64) -> f64 {
    if c > 1 {
        c as f64 * log2_approx(c as f64)
    } else {
        0.0
    }
}

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

/// Bytes used by `n` values packed at `bits` bits.
pub fn packed_len(n: usize, bits: u32) -> usize {
    ((n as u128 * bits as u128).div_ceil(8)) as usize
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

/// Every width from 1 to 64 bits, with value counts around word boundaries, and pseudo-random
/// values of that width (tests of packing, here and in the `raw` operator).
#[cfg(test)]
pub(crate) fn packing_cases() -> impl Iterator<Item = (u32, usize, Vec<u64>)> {
    let mut seed = 9u64;
    (1..=64u32).flat_map(move |bits| {
        [0usize, 1, 3, 7, 8, 31, 64, 1001].map(|n| {
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
            (bits, n, vals)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pack` writes what a bit writer writes.
    #[test]
    fn pack_matches_bit_writer() {
        for (bits, n, vals) in packing_cases() {
            let mut w = BitWriter::new();
            for &v in &vals {
                w.put_wide(v, bits);
            }
            let mut out = Vec::new();
            pack(vals.iter().copied(), bits, &mut out);
            assert_eq!(out, w.finish(), "bits {bits} n {n}");
            assert_eq!(out.len(), packed_len(n, bits));
        }
    }
}
