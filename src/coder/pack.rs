//! Bit packing: values of `bits` bits each, LSB-first (the `raw` leaf, escape indices, packed
//! fields). The byte packer's AVX2 kernel is in `simd` beside the unpacker it inverts.

use super::bitio::{BitWriter, Bits32};

pub use crate::simd::pack_u8;
#[cfg(test)]
use crate::simd::pack_u8_at;

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

/// [`pack`] of 16-bit values of `bits` bits (9..=16, values below `2^bits`): eight values at
/// a time, as two groups of four gathered by two steps of shifts and masks (the same bytes).
pub fn pack_u16(values: &[u16], bits: u32, out: &mut Vec<u8>) {
    debug_assert!((9..=16).contains(&bits));
    #[inline(always)]
    fn gather(v: &[u16], bits: u32) -> u64 {
        let x = v.iter().rev().fold(0u64, |a, &w| a << 16 | w as u64);
        let y = (x & 0x0000_FFFF_0000_FFFF) | ((x & 0xFFFF_0000_FFFF_0000) >> (16 - bits));
        (y & 0xFFFF_FFFF) | ((y >> 32) << (2 * bits))
    }
    let (start, len) = (out.len(), packed_len(values.len(), bits));
    out.resize(start + len + 16, 0);
    let dst = &mut out[start..];
    let mut at = 0;
    let mut put = |v: &[u16], at: &mut usize| {
        let x = gather(&v[..4], bits) as u128 | (gather(&v[4..], bits) as u128) << (4 * bits);
        dst[*at..*at + 16].copy_from_slice(&x.to_le_bytes());
        *at += bits as usize;
    };
    let mut groups = values.chunks_exact(8);
    for g in &mut groups {
        put(g, &mut at);
    }
    let mut last = [0u16; 8];
    last[..groups.remainder().len()].copy_from_slice(groups.remainder());
    put(&last, &mut at);
    out.truncate(start + len);
}

/// Bytes used by `n` values packed at `bits` bits.
pub fn packed_len(n: usize, bits: u32) -> usize {
    ((n as u128 * bits as u128).div_ceil(8)) as usize
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

    /// The byte and 16-bit packers write what `pack` writes, after bytes already in `out`.
    #[test]
    fn word_packers_match_pack() {
        for (bits, n, vals) in packing_cases().filter(|c| c.0 <= 16) {
            for n in [n, n + 5, 4096 + 3] {
                let vals: Vec<u64> = (0..n)
                    .map(|i| vals.get(i).copied().unwrap_or(i as u64 * 2_654_435_761) & ((1 << bits) - 1))
                    .collect();
                let mut want = vec![7u8];
                pack(vals.iter().copied(), bits, &mut want);
                let mut out = vec![7u8];
                if bits <= 8 {
                    let bytes: Vec<u8> = vals.iter().map(|&v| v as u8).collect();
                    for isa in crate::simd::available() {
                        let mut at = vec![7u8];
                        pack_u8_at(isa, &bytes, bits, &mut at);
                        assert_eq!(at, want, "{isa:?} bits {bits} n {n}");
                    }
                    pack_u8(&bytes, bits, &mut out);
                } else {
                    pack_u16(&vals.iter().map(|&v| v as u16).collect::<Vec<_>>(), bits, &mut out);
                }
                assert_eq!(out, want, "bits {bits} n {n}");
            }
        }
    }
}
