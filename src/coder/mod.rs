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

thread_local! {
    /// Four partial counts per symbol, left zeroed after each use (see [`symbol_counts`]).
    static PARTS: std::cell::Cell<Vec<[u32; 4]>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` on the counts of `symbols` (all below `alphabet`), as four partials per symbol, then
/// clears them. Four partials, so that runs of one symbol (a skewed source) do not wait on each
/// other's increments; chunks keep the u32 partials from overflowing (`f` runs once per chunk).
/// The partials are a per-thread buffer: a 16-bit alphabet's megabyte is not allocated (and
/// faulted in) again for every sample the search codes.
fn with_counts(symbols: &[u16], alphabet: usize, mut f: impl FnMut(&mut [[u32; 4]])) {
    let mut part = PARTS.take();
    if part.len() < alphabet {
        part.resize(alphabet, [0; 4]);
    }
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
        f(&mut part[..alphabet]);
    }
    PARTS.set(part);
}

/// One more than the largest symbol (1 for none): the alphabet a block's counts need. A fold on
/// values, which vectorizes (`max()` on references does not).
pub(crate) fn alphabet_of(symbols: &[u16]) -> usize {
    symbols.iter().fold(0, |m, &s| m.max(s)) as usize + 1
}

/// Counts of each symbol below `alphabet` (every symbol is).
pub(crate) fn symbol_counts(symbols: &[u16], alphabet: usize) -> Vec<u64> {
    let mut total = vec![0u64; alphabet];
    with_counts(symbols, alphabet, |part| {
        for (t, p) in total.iter_mut().zip(part.iter_mut()) {
            *t += p.iter().map(|&x| x as u64).sum::<u64>();
            *p = [0; 4];
        }
    });
    total
}

/// The used symbols below `alphabet` (every symbol is), ascending, with their counts: what
/// [`symbol_counts`] holds, without its dense array.
pub(crate) fn used_counts(symbols: &[u16], alphabet: usize) -> Vec<(u16, u64)> {
    if symbols.len() < SPARSE_BELOW && alphabet > SPARSE_ALPHABET {
        // A short block over a wide alphabet (a search's sample of 16-bit words): only the
        // symbols seen are read back, rather than the whole alphabet.
        let mut used = Vec::new();
        with_seen(symbols, alphabet, |s, c| used.push((s, c as u64)));
        return used;
    }
    let mut used: Vec<(u16, u64)> = Vec::new();
    let mut first = true;
    with_counts(symbols, alphabet, |part| {
        let mut k = 0;
        for (s, p) in part.iter_mut().enumerate() {
            if *p != [0; 4] {
                let c = p.iter().map(|&x| x as u64).sum::<u64>();
                *p = [0; 4];
                // (A later chunk adds to the symbols of the first, in the same order, or new ones.)
                if first {
                    used.push((s as u16, c));
                } else {
                    while k < used.len() && used[k].0 < s as u16 {
                        k += 1;
                    }
                    match used.get_mut(k) {
                        Some(u) if u.0 == s as u16 => u.1 += c,
                        _ => used.insert(k, (s as u16, c)),
                    }
                }
            }
        }
        first = false;
    });
    used
}

/// Blocks shorter than this over alphabets wider than [`SPARSE_ALPHABET`] are counted by
/// [`with_seen`].
const SPARSE_BELOW: usize = 1 << 14;
const SPARSE_ALPHABET: usize = 1 << 12;

/// Calls `f(symbol, count)` for every symbol of `symbols` (all below `alphabet`), ascending: the
/// counts in a per-thread table (left zeroed), each symbol noted the first time it is seen, so
/// that when they are few the work is the block's and theirs, not the alphabet's.
pub(crate) fn with_seen(symbols: &[u16], alphabet: usize, mut f: impl FnMut(u16, u32)) {
    thread_local! {
        static ONE: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let mut t = ONE.take();
    if t.len() < alphabet {
        t.resize(alphabet, 0);
    }
    let mut seen: Vec<u16> = Vec::new();
    for &s in symbols {
        let c = &mut t[s as usize];
        if *c == 0 {
            seen.push(s);
        }
        *c += 1;
    }
    if seen.len() * 64 <= alphabet {
        seen.sort_unstable();
        for s in seen {
            f(s, std::mem::take(&mut t[s as usize]));
        }
    } else {
        // Many distinct symbols (the low bits of floats): a scan of the table costs less than
        // sorting them.
        for (s, c) in t[..alphabet].iter_mut().enumerate() {
            if *c > 0 {
                f(s as u16, std::mem::take(c));
            }
        }
    }
    ONE.set(t);
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

/// [`pack`] of byte values of `bits` bits (1..=8, values below `2^bits`), appended to `out`:
/// eight values at a time (the same bytes).
pub fn pack_u8(values: &[u8], bits: u32, out: &mut Vec<u8>) {
    pack_u8_at(crate::simd::level(), values, bits, out)
}

/// [`pack_u8`] at a given SIMD level (lowered to what the CPU has): from the AVX2 level, one
/// BMI2 `pext` per eight values (`simd::avx2::pack_u8`), else [`pack_u8_scalar`].
pub fn pack_u8_at(level: crate::simd::Level, values: &[u8], bits: u32, out: &mut Vec<u8>) {
    assert!((1..=8).contains(&bits));
    #[cfg(target_arch = "x86_64")]
    if level.min(crate::simd::detected()) >= crate::simd::Level::Avx2 {
        // SAFETY: AVX2 and BMI2 were detected on this CPU (every level from AVX2 up has them),
        // and `bits` is in 1..=8.
        return unsafe { crate::simd::avx2::pack_u8(values, bits, out) };
    }
    let _ = level;
    pack_u8_scalar(values, bits, out)
}

/// [`pack_u8`] without SIMD: eight values at a time, gathered into `bits` bytes by three steps
/// of shifts and masks.
pub(crate) fn pack_u8_scalar(values: &[u8], bits: u32, out: &mut Vec<u8>) {
    debug_assert!((1..=8).contains(&bits));
    #[inline(always)]
    fn gather(x: u64, bits: u32) -> u64 {
        let y = (x & 0x00FF_00FF_00FF_00FF) | ((x & 0xFF00_FF00_FF00_FF00) >> (8 - bits));
        let z = (y & 0x0000_FFFF_0000_FFFF) | ((y & 0xFFFF_0000_FFFF_0000) >> (16 - 2 * bits));
        (z & 0xFFFF_FFFF) | ((z >> 32) << (4 * bits))
    }
    if bits == 1 {
        // Eight 0/1 bytes to one byte, value `j` at bit `j`: the multiplication moves bit `8j`
        // to bit `56 + j` (and every other product below bit 56 or above bit 63).
        let pack8 = |g: &[u8]| {
            (u64::from_le_bytes(g.try_into().expect("8 values")).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8
        };
        let groups = values.chunks_exact(8);
        let rest = groups.remainder();
        out.extend(groups.map(pack8));
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            out.push(pack8(&last));
        }
        return;
    }
    let (start, len) = (out.len(), packed_len(values.len(), bits));
    // Each group of eight is stored as eight bytes, of which the next group overwrites all but
    // the first `bits`: room for the last store, cut off at the end.
    out.resize(start + len + 8, 0);
    let dst = &mut out[start..];
    let mut at = 0;
    let mut groups = values.chunks_exact(8);
    for g in &mut groups {
        let x = gather(u64::from_le_bytes(g.try_into().expect("8 values")), bits);
        dst[at..at + 8].copy_from_slice(&x.to_le_bytes());
        at += bits as usize;
    }
    let mut last = [0u8; 8];
    last[..groups.remainder().len()].copy_from_slice(groups.remainder());
    dst[at..at + 8].copy_from_slice(&gather(u64::from_le_bytes(last), bits).to_le_bytes());
    out.truncate(start + len);
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

    /// `used_counts` holds the nonzero `symbol_counts`, for skewed, flat and empty sources.
    #[test]
    fn used_counts_are_the_nonzero_symbol_counts() {
        for (n, alphabet) in [(0usize, 1usize), (5, 3), (1000, 40), (100_000, 65_536), (70_001, 300), (8000, 65_536)] {
            let symbols: Vec<u16> =
                (0..n).map(|i| ((i * i * 7 + i / 3) % alphabet) as u16 & if i % 3 == 0 { 0 } else { 0xFFFF }).collect();
            let want: Vec<(u16, u64)> = symbol_counts(&symbols, alphabet)
                .iter()
                .enumerate()
                .filter(|c| *c.1 > 0)
                .map(|(s, &c)| (s as u16, c))
                .collect();
            assert_eq!(used_counts(&symbols, alphabet), want, "n {n}");
            // The buffer is left clear for the next call.
            assert_eq!(used_counts(&symbols, alphabet), want, "n {n} again");
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
                    for level in crate::simd::available() {
                        let mut at = vec![7u8];
                        pack_u8_at(level, &bytes, bits, &mut at);
                        assert_eq!(at, want, "{level:?} bits {bits} n {n}");
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
