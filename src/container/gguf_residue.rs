//! Residue model 2 (format version 6): a GGUF header with its strings gathered.
//!
//! A GGUF header is mostly strings (a tokenizer's vocabulary and merges), each stored as a
//! `u64le` length and its bytes. Interleaved, the lengths break zstd's matches and cost a byte
//! or more each; gathered and terminated, the strings compress a quarter smaller at a fraction
//! of the effort. The stored form is
//!
//! ```text
//! varint strs_len, strs, rest
//! ```
//!
//! `strs` holds each string in turn, its bytes 0x00 and 0x01 escaped by a 0x01 before them,
//! then a 0x00; `rest` holds every other byte of the residue, in order. The strings are those
//! of the header walk of [`walk`]: metadata keys, string values (nested in arrays too) and
//! tensor names. Everything after the last tensor info (the padding before the data, gaps
//! between tensors) is at the end of `rest`. The walk is the definition: the writer stores this
//! form only when it gives back the original bytes; a header that does not parse is stored
//! verbatim.

use crate::coder::bitio::{put_varint, ByteReader};
use crate::error::{Error, Result};
use crate::tensor::gguf::{fixed_size, MAGIC, MAX_DIMS, MAX_NESTING};

/// Where the walk reads the header from and writes it to: the original bytes (split) or the
/// stored streams (join).
trait Io {
    /// The next `n` fixed bytes (magic, counts, types, numbers), moved to the other side.
    fn fixed(&mut self, n: u64) -> Result<&[u8]>;
    /// Moves the next string (its length and bytes).
    fn string(&mut self) -> Result<()>;

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.fixed(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.fixed(8)?.try_into().unwrap()))
    }
}

fn bad(what: &str) -> Error {
    Error::corrupt(format!("GGUF residue: {what}"))
}

/// Walks a GGUF header: magic, version, counts, the metadata key/values and the tensor infos.
/// Every iteration moves at least one byte, so hostile counts end at the end of the input.
fn walk(io: &mut impl Io) -> Result<()> {
    if io.fixed(4)? != MAGIC {
        return Err(bad("no GGUF magic"));
    }
    if !(2..=3).contains(&io.u32()?) {
        return Err(bad("not GGUF version 2 or 3"));
    }
    let n_tensors = io.u64()?;
    let n_kv = io.u64()?;
    for _ in 0..n_kv {
        io.string()?;
        let ty = io.u32()?;
        value(io, ty, 0)?;
    }
    for _ in 0..n_tensors {
        io.string()?;
        let n_dims = io.u32()?;
        if n_dims > MAX_DIMS {
            return Err(bad("too many dimensions"));
        }
        io.fixed(8 * n_dims as u64 + 4 + 8)?;
    }
    Ok(())
}

fn value(io: &mut impl Io, ty: u32, depth: u32) -> Result<()> {
    if let Some(n) = fixed_size(ty) {
        io.fixed(n)?;
        return Ok(());
    }
    match ty {
        8 => io.string(),
        9 if depth < MAX_NESTING => {
            let et = io.u32()?;
            let n = io.u64()?;
            match fixed_size(et) {
                Some(s) => {
                    io.fixed(n.checked_mul(s).ok_or_else(|| bad("array too long"))?)?;
                }
                None if et == 8 || et == 9 => {
                    for _ in 0..n {
                        value(io, et, depth + 1)?;
                    }
                }
                None => return Err(bad("unknown array value type")),
            }
            Ok(())
        }
        _ => Err(bad("unknown metadata value type, or arrays nested too deeply")),
    }
}

/// Escapes `s` into `out` and terminates it.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    let mut rest = s;
    while let Some(i) = rest.iter().position(|&b| b <= 1) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(&[1, rest[i]]);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.push(0);
}

/// The split: reads the original, writes the strings and the rest.
struct Split<'a> {
    r: ByteReader<'a>,
    strs: Vec<u8>,
    rest: Vec<u8>,
}

impl Io for Split<'_> {
    fn fixed(&mut self, n: u64) -> Result<&[u8]> {
        let s = self.r.take(usize::try_from(n).map_err(|_| bad("too long"))?)?;
        let at = self.rest.len();
        self.rest.extend_from_slice(s);
        Ok(&self.rest[at..])
    }
    fn string(&mut self) -> Result<()> {
        let n = self.r.u64_le()?;
        let s = self.r.take(usize::try_from(n).map_err(|_| bad("too long"))?)?;
        put_string(&mut self.strs, s);
        Ok(())
    }
}

/// The index of the first byte of `s` that is 0 or 1 (a stored string's end or escape): eight
/// bytes at a time over the first 64 (most strings are short words, for which `memchr2`'s setup
/// took most of the join), then `memchr2`.
fn first_low(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut at = 0;
    for w in s.chunks_exact(8).take(8) {
        // The bytes 0 and 1 become 0; the lowest zero byte is the lowest one flagged.
        let v = u64::from_le_bytes(w.try_into().expect("eight bytes")) & !ONES;
        let zero = v.wrapping_sub(ONES) & !v & (ONES << 7);
        if zero != 0 {
            return Some(at + zero.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    match at {
        64 => memchr::memchr2(0, 1, &s[at..]).map(|i| at + i),
        _ => s[at..].iter().position(|&b| b <= 1).map(|i| at + i),
    }
}

/// The join: reads the strings and the rest, writes the original (at most `limit` bytes).
struct Join<'a> {
    strs: &'a [u8],
    rest: ByteReader<'a>,
    out: Vec<u8>,
    limit: u64,
}

impl Join<'_> {
    fn room(&self, n: usize) -> Result<()> {
        if (self.out.len() + n) as u64 > self.limit {
            return Err(bad("longer than the archive says"));
        }
        Ok(())
    }
}

impl Io for Join<'_> {
    fn fixed(&mut self, n: u64) -> Result<&[u8]> {
        let s = self.rest.take(usize::try_from(n).map_err(|_| bad("too long"))?)?;
        self.room(s.len())?;
        let at = self.out.len();
        self.out.extend_from_slice(s);
        Ok(&self.out[at..])
    }
    fn string(&mut self) -> Result<()> {
        let first = first_low(self.strs).ok_or_else(|| bad("unterminated string"))?;
        // Most strings hold no escaped byte: their length is known before they are copied.
        if self.strs[first] == 0 {
            let (s, rest) = self.strs.split_at(first);
            self.room(8 + first)?;
            self.out.extend_from_slice(&(first as u64).to_le_bytes());
            self.out.extend_from_slice(s);
            self.strs = &rest[1..];
            return Ok(());
        }
        self.room(8)?;
        let at = self.out.len();
        self.out.extend_from_slice(&[0; 8]);
        loop {
            let i = memchr::memchr2(0, 1, self.strs).ok_or_else(|| bad("unterminated string"))?;
            self.room(i + 1)?;
            self.out.extend_from_slice(&self.strs[..i]);
            match self.strs[i..] {
                [0, ..] => {
                    self.strs = &self.strs[i + 1..];
                    break;
                }
                [1, e @ (0 | 1), ..] => {
                    self.out.push(e);
                    self.strs = &self.strs[i + 2..];
                }
                _ => return Err(bad("bad escape")),
            }
        }
        let n = (self.out.len() - at - 8) as u64;
        self.out[at..at + 8].copy_from_slice(&n.to_le_bytes());
        Ok(())
    }
}

/// The stored form of a residue that starts with a GGUF header, when the walk parses it.
pub fn split(residue: &[u8]) -> Option<Vec<u8>> {
    if !residue.starts_with(MAGIC) {
        return None;
    }
    let mut s = Split { r: ByteReader::new(residue), strs: Vec::new(), rest: Vec::new() };
    walk(&mut s).ok()?;
    s.rest.extend_from_slice(s.r.rest());
    let mut out = Vec::with_capacity(10 + s.strs.len() + s.rest.len());
    put_varint(&mut out, s.strs.len() as u64);
    out.extend_from_slice(&s.strs);
    out.extend_from_slice(&s.rest);
    Some(out)
}

/// The residue from its stored form, at most `limit` bytes.
pub fn join(stored: &[u8], limit: u64) -> Result<Vec<u8>> {
    let mut r = ByteReader::new(stored);
    let strs_len = r.len(r.remaining() as u64)?;
    let strs = r.take(strs_len)?;
    let rest = ByteReader::new(r.rest());
    let cap = (stored.len() as u64).saturating_mul(2).min(limit) as usize;
    let mut j = Join { strs, rest, out: Vec::with_capacity(cap), limit };
    walk(&mut j)?;
    if !j.strs.is_empty() {
        return Err(bad("strings left over"));
    }
    let tail = j.rest.rest();
    j.room(tail.len())?;
    j.out.extend_from_slice(tail);
    Ok(j.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(out: &mut Vec<u8>, v: &[u8]) {
        out.extend_from_slice(&(v.len() as u64).to_le_bytes());
        out.extend_from_slice(v);
    }

    /// A small GGUF header: a string, a string array, an array of arrays, a u32, two tensor
    /// infos, then padding.
    fn header() -> Vec<u8> {
        let mut h = b"GGUF".to_vec();
        h.extend_from_slice(&3u32.to_le_bytes());
        h.extend_from_slice(&2u64.to_le_bytes());
        h.extend_from_slice(&4u64.to_le_bytes());
        s(&mut h, b"general.name");
        h.extend_from_slice(&8u32.to_le_bytes());
        s(&mut h, b"tiny");
        s(&mut h, b"tokenizer.ggml.tokens");
        h.extend_from_slice(&9u32.to_le_bytes());
        h.extend_from_slice(&8u32.to_le_bytes());
        h.extend_from_slice(&4u64.to_le_bytes());
        for t in [&b"a"[..], b"", b"\xe2\x96\x81the", b"\0\x01\x02\x01\0"] {
            s(&mut h, t);
        }
        s(&mut h, b"nested");
        h.extend_from_slice(&9u32.to_le_bytes());
        h.extend_from_slice(&9u32.to_le_bytes());
        h.extend_from_slice(&1u64.to_le_bytes());
        h.extend_from_slice(&4u32.to_le_bytes());
        h.extend_from_slice(&2u64.to_le_bytes());
        h.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        s(&mut h, b"general.alignment");
        h.extend_from_slice(&4u32.to_le_bytes());
        h.extend_from_slice(&32u32.to_le_bytes());
        for (name, off) in [(&b"w"[..], 0u64), (b"b", 32)] {
            s(&mut h, name);
            h.extend_from_slice(&1u32.to_le_bytes());
            h.extend_from_slice(&8u64.to_le_bytes());
            h.extend_from_slice(&0u32.to_le_bytes());
            h.extend_from_slice(&off.to_le_bytes());
        }
        h.resize(h.len().next_multiple_of(32), 0);
        h.extend_from_slice(b"gap");
        h
    }

    #[test]
    fn strings_are_gathered_and_restored() {
        let h = header();
        let stored = split(&h).unwrap();
        assert!(stored.len() < h.len());
        assert_eq!(join(&stored, h.len() as u64).unwrap(), h);
        assert!(join(&stored, h.len() as u64 - 1).is_err(), "limit");
    }

    #[test]
    fn other_bytes_are_not_split() {
        assert!(split(b"GGUF").is_none());
        assert!(split(b"not a header at all").is_none());
        let h = header();
        for cut in [5, 20, 40, 100] {
            assert!(split(&h[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn corrupt_stored_forms_are_errors() {
        let h = header();
        let stored = split(&h).unwrap();
        for cut in 0..stored.len() {
            if let Ok(v) = join(&stored[..cut], 1 << 20) {
                assert!(v.len() <= h.len());
            }
        }
        for i in 0..stored.len() {
            let mut bad = stored.clone();
            bad[i] ^= 0x55;
            if let Ok(v) = join(&bad, 1 << 20) {
                assert!(v.len() <= 1 << 20);
            }
        }
        // An escape of anything but 0x00 or 0x01.
        let mut esc = stored.clone();
        let i = esc.iter().position(|&b| b == 1).unwrap();
        esc[i + 1] = 7;
        assert!(join(&esc, 1 << 20).is_err());
        // Counts far beyond the input end at the end of the input.
        let mut huge = stored.clone();
        let at = 1 + stored[0] as usize + 8;
        huge[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(join(&huge, 1 << 20).is_err());
    }

    /// `first_low` finds the first 0 or 1 wherever it is (in a word, across words, past the
    /// eight words it scans itself, in the tail), after any other byte values, or none.
    #[test]
    fn first_low_finds_the_first_zero_or_one() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..150usize {
            for at in (0..len).chain([usize::MAX]) {
                for low in [0u8, 1] {
                    // Bytes 2..=255 before `at`, then `low`, then any bytes.
                    let s: Vec<u8> = (0..len)
                        .map(|i| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            match i.cmp(&at) {
                                std::cmp::Ordering::Less => 2 + (x % 254) as u8,
                                std::cmp::Ordering::Equal => low,
                                std::cmp::Ordering::Greater => x as u8,
                            }
                        })
                        .collect();
                    let want = s.iter().position(|&b| b <= 1);
                    assert_eq!(first_low(&s), want, "len {len} at {at}");
                }
            }
        }
    }
}
