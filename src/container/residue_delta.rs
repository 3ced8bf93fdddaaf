//! Residue model 3 (format version 15): the residue coded against the reference's header.
//!
//! A variant of a checkpoint (a quantization, a cast) has its master's header but for a few
//! keys and its tensor infos: the tokenizer, the merges and most metadata are the same bytes.
//! Coded alone, they are most of a variant's archive (a GGUF tokenizer is hundreds of KB
//! compressed); coded against the reference, a few KB. The stored form is
//!
//! ```text
//! varint residue_len, varint prefix_len, zstd frame
//! ```
//!
//! The frame decodes to the `residue_len` bytes of the residue with the reference file's first
//! `prefix_len` bytes loaded as its raw-content prefix (`ZSTD_refPrefix`): the reference's own
//! header, where the writer takes `prefix_len` up to its first tensor. It carries zstd's
//! content checksum. Decoding needs the reference, so an index holding this model keeps the
//! stored form until the reference is supplied ([`super::Index::resolve_residue`]).

use crate::coder::bitio::{put_varint, ByteReader};
use crate::error::{Error, Result};
use zstd::zstd_safe::{self, CParameter, DParameter};

/// The zstd level of the frame: the residue's matches in the prefix are long, so that higher
/// levels gain nothing (a 1.7 MB GGUF header against its master's: level 12 gives 1.3-1.7 KB in
/// 0.03 s, level 19 the same in 0.4 s).
const LEVEL: i32 = 12;

/// Largest window the frame may use: zstd decoders accept windows up to 2^27 without being
/// told (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`); a longer prefix is reached only in its last 128 MiB.
const MAX_WINDOW_LOG: u32 = 27;

/// Longest reference prefix a writer loads, and a reader accepts (the meta's own bound).
pub const MAX_PREFIX: u64 = super::MAX_META_BYTES;

/// The stored form of model 3 before the reference is at hand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    /// Length of the residue it decodes to.
    pub len: u64,
    /// How many of the reference file's first bytes the frame is coded against.
    pub prefix_len: u64,
    pub frame: Vec<u8>,
}

/// The stored form of `residue` against `prefix` (the reference's first bytes).
pub fn encode(residue: &[u8], prefix: &[u8]) -> Result<Vec<u8>> {
    let zerr =
        |what: &str, code: usize| Error::invalid(format!("residue delta: {what}: {}", zstd_safe::get_error_name(code)));
    let window = (prefix.len() + residue.len()).max(1).next_power_of_two().trailing_zeros().clamp(10, MAX_WINDOW_LOG);
    let mut cctx = zstd_safe::CCtx::create();
    for p in [CParameter::CompressionLevel(LEVEL), CParameter::WindowLog(window), CParameter::ChecksumFlag(true)] {
        cctx.set_parameter(p).map_err(|c| zerr("parameter", c))?;
    }
    cctx.ref_prefix(prefix).map_err(|c| zerr("prefix", c))?;
    let mut frame = Vec::with_capacity(zstd_safe::compress_bound(residue.len()));
    cctx.compress2(&mut frame, residue).map_err(|c| zerr("compress", c))?;
    Ok(store(&Delta { len: residue.len() as u64, prefix_len: prefix.len() as u64, frame }))
}

/// The stored form of `delta`.
pub fn store(delta: &Delta) -> Vec<u8> {
    let mut out = Vec::with_capacity(delta.frame.len() + 20);
    put_varint(&mut out, delta.len);
    put_varint(&mut out, delta.prefix_len);
    out.extend_from_slice(&delta.frame);
    out
}

/// Reads the stored form; `limit` bounds the residue's length.
pub fn parse(stored: &[u8], limit: u64) -> Result<Delta> {
    let mut r = ByteReader::new(stored);
    let len = r.varint()?;
    let prefix_len = r.varint()?;
    if len > limit {
        return Err(Error::Limit(format!("a residue of {len} bytes")));
    }
    if prefix_len > MAX_PREFIX {
        return Err(Error::corrupt(format!("residue delta: a reference prefix of {prefix_len} bytes")));
    }
    Ok(Delta { len, prefix_len, frame: r.take(r.remaining())?.to_vec() })
}

/// The residue of `delta`, given the reference's first `delta.prefix_len` bytes.
pub fn decode(delta: &Delta, prefix: &[u8]) -> Result<Vec<u8>> {
    if prefix.len() as u64 != delta.prefix_len {
        return Err(Error::invalid(format!(
            "residue delta: the reference has {} bytes where the archive codes its header against its first {}",
            prefix.len(),
            delta.prefix_len
        )));
    }
    let bad = |code: usize| Error::corrupt(format!("residue delta: {}", zstd_safe::get_error_name(code)));
    let mut dctx = zstd_safe::DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG)).map_err(bad)?;
    dctx.ref_prefix(prefix).map_err(bad)?;
    let mut out = Vec::with_capacity(delta.len as usize);
    let n = dctx.decompress(&mut out, &delta.frame).map_err(bad)?;
    if n as u64 != delta.len {
        return Err(Error::corrupt("residue delta: wrong decoded length"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seed: u8, n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i * 7919 + seed as usize * 31) % 251) as u8 ^ (i / 97) as u8).collect()
    }

    #[test]
    fn a_header_like_its_reference_costs_little_and_decodes() {
        let prefix = sample(1, 300_000);
        let mut residue = prefix.clone();
        residue[1000] ^= 1;
        residue.truncate(290_000);
        residue.extend_from_slice(b"a tail of its own");
        let stored = encode(&residue, &prefix).unwrap();
        assert!(stored.len() < 200, "{} bytes", stored.len());
        let delta = parse(&stored, 1 << 20).unwrap();
        assert_eq!((delta.len, delta.prefix_len), (residue.len() as u64, prefix.len() as u64));
        assert_eq!(store(&delta), stored);
        assert_eq!(decode(&delta, &prefix).unwrap(), residue);
    }

    #[test]
    fn a_wrong_or_missing_prefix_and_damage_are_errors() {
        let prefix = sample(2, 50_000);
        let residue = sample(2, 40_000);
        let delta = parse(&encode(&residue, &prefix).unwrap(), u64::MAX).unwrap();
        assert!(matches!(decode(&delta, &prefix[1..]), Err(Error::Invalid(_))));
        let mut other = prefix.clone();
        other[20_000] ^= 0x40;
        assert!(decode(&delta, &other).is_err(), "the content checksum catches another prefix");
        let mut damaged = delta.clone();
        let mid = damaged.frame.len() / 2;
        damaged.frame[mid] ^= 0x10;
        assert!(decode(&damaged, &prefix).is_err());
        let mut long = delta.clone();
        long.len += 1;
        assert!(matches!(decode(&long, &prefix), Err(Error::Corrupt(_))));
        assert!(matches!(parse(&encode(&residue, &prefix).unwrap(), 100), Err(Error::Limit(_))));
        assert!(parse(&[0x80], u64::MAX).is_err());
    }
}
