//! Residue models: verbatim; (format version 2) the safetensors header with predictable
//! `data_offsets` elided, below; (format version 6) a GGUF header with its strings gathered
//! (`gguf_residue`); (format version 15) the residue coded against the reference's header
//! (`residue_delta`).
//!
//! A tensor's `"data_offsets":[a,b]` in the JSON header is implied when its entry gives the
//! `dtype` and `shape` before the offsets and the tensor starts where the previous entry ended:
//! `a` = the previous entry's `b` (0 for the first), `b` = `a` + elements x dtype size. The
//! stored form writes such an entry as `"data_offsets":[]`; every other byte is kept. The scan
//! that expands it is the definition: the encoder elides exactly the offsets the scan would
//! predict, then expands its own output and keeps the verbatim residue unless that gives back
//! the original bytes (so odd headers, e.g. one that already holds `"data_offsets":[]`, are
//! simply stored verbatim). See docs/FORMAT.md, "Residue models".

use crate::error::{Error, Result};
use crate::tensor::DType;

/// Residue stored verbatim.
pub const VERBATIM: u8 = 0;
/// The leading safetensors header with predictable `data_offsets` elided.
pub const ELIDED_OFFSETS: u8 = 1;
/// A leading GGUF header with its strings gathered (format version 6; `gguf_residue`).
pub const GGUF_STRINGS: u8 = 2;
/// The residue coded against the reference file's header (format version 15; `residue_delta`).
/// It needs the reference: `Index::read` keeps it stored until the reference is supplied, and
/// [`decode`] knows it not (it is not a model of earlier versions).
pub const REF_DELTA: u8 = 3;

const DTYPE_KEY: &[u8] = b"\"dtype\"";
const SHAPE_KEY: &[u8] = b"\"shape\"";
const OFFSETS_KEY: &[u8] = b"\"data_offsets\"";

/// The stored form of `residue`: (model, bytes).
pub fn encode(residue: &[u8]) -> (u8, Vec<u8>) {
    if let Some(stored) = elide(residue) {
        if stored.len() < residue.len() && expand(&stored, residue.len() as u64).ok().as_deref() == Some(residue) {
            return (ELIDED_OFFSETS, stored);
        }
    }
    // Kept when zstd's fastest level finds it smaller too (an odd vocabulary may compress
    // better with its lengths in line).
    if let Some(stored) = super::gguf_residue::split(residue) {
        let probe = |b: &[u8]| zstd::bulk::compress(b, 1).map_or(usize::MAX, |z| z.len());
        if super::gguf_residue::join(&stored, residue.len() as u64).ok().as_deref() == Some(residue)
            && probe(&stored) < probe(residue)
        {
            return (GGUF_STRINGS, stored);
        }
    }
    (VERBATIM, residue.to_vec())
}

/// The residue from its stored form; `limit` bounds the expanded size.
pub fn decode(model: u8, stored: &[u8], limit: u64) -> Result<Vec<u8>> {
    match model {
        VERBATIM => Ok(stored.to_vec()),
        ELIDED_OFFSETS => expand(stored, limit),
        GGUF_STRINGS => super::gguf_residue::join(stored, limit),
        m => Err(Error::corrupt(format!("unknown residue model {m}"))),
    }
}

/// The byte range of the JSON header: after the 8-byte length, when it fits in `residue`.
fn json_range(residue: &[u8], json_len: u64) -> Option<std::ops::Range<usize>> {
    let end = 8u64.checked_add(json_len)?;
    (residue.len() >= 8 && end <= residue.len() as u64).then_some(8..end as usize)
}

/// What the scan knows at a position of the header.
#[derive(Default)]
struct Scan {
    /// Bytes per element of the current entry's dtype, when known.
    elem_bytes: Option<u64>,
    /// Elements of the current entry's shape, when known.
    elems: Option<u64>,
    /// Where the previous entry ended.
    last_end: u64,
}

impl Scan {
    /// The offsets an elided entry stands for.
    fn predict(&self) -> Option<(u64, u64)> {
        let n = self.elem_bytes?.checked_mul(self.elems?)?;
        Some((self.last_end, self.last_end.checked_add(n)?))
    }

    /// Reads a key and its value at `text[i..]` (a `"` that opens a key), updating the state.
    /// Returns the length of what it recognized (0: not a key it knows).
    fn key(&mut self, text: &[u8], i: usize) -> usize {
        let t = &text[i..];
        if let Some(v) = value_after(t, DTYPE_KEY) {
            if let Some((name, used)) = string_at(&t[v..]) {
                self.elem_bytes = DType::parse(name).bits().map(|b| b as u64 / 8);
                return v + used;
            }
        } else if let Some(v) = value_after(t, SHAPE_KEY) {
            if let Some((dims, used)) = numbers_at(&t[v..], usize::MAX) {
                self.elems = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
                return v + used;
            }
        }
        0
    }

    fn end_entry(&mut self, end: u64) {
        self.last_end = end;
        self.elem_bytes = None;
        self.elems = None;
    }
}

/// The position of the value after `key` and a colon (whitespace allowed), if `t` starts with it.
fn value_after(t: &[u8], key: &[u8]) -> Option<usize> {
    let mut i = key.len();
    if !t.starts_with(key) {
        return None;
    }
    i += t[i..].iter().take_while(|c| c.is_ascii_whitespace()).count();
    if t.get(i) != Some(&b':') {
        return None;
    }
    i += 1;
    Some(i + t[i..].iter().take_while(|c| c.is_ascii_whitespace()).count())
}

/// A JSON string without escapes at the start of `t`: (its contents, bytes used).
fn string_at(t: &[u8]) -> Option<(&str, usize)> {
    let rest = t.strip_prefix(b"\"")?;
    let end = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
    (rest[end] == b'"').then(|| std::str::from_utf8(&rest[..end]).ok().map(|s| (s, end + 2)))?
}

/// An array of at most `max` canonical unsigned integers (whitespace allowed between tokens) at
/// the start of `t`: (the numbers, bytes used).
fn numbers_at(t: &[u8], max: usize) -> Option<(Vec<u64>, usize)> {
    let ws = |i: usize| i + t[i..].iter().take_while(|c| c.is_ascii_whitespace()).count();
    let mut i = ws(t.strip_prefix(b"[").map(|_| 1)?);
    let mut out = Vec::new();
    if t.get(i) == Some(&b']') {
        return Some((out, i + 1));
    }
    loop {
        let digits = t[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || (digits > 1 && t[i] == b'0') || out.len() >= max {
            return None;
        }
        out.push(std::str::from_utf8(&t[i..i + digits]).ok()?.parse().ok()?);
        i = ws(i + digits);
        match t.get(i) {
            Some(b',') => i = ws(i + 1),
            Some(b']') => return Some((out, i + 1)),
            _ => return None,
        }
    }
}

/// The residue with predictable offsets elided (None: no safetensors header to model).
fn elide(residue: &[u8]) -> Option<Vec<u8>> {
    let json_len = u64::from_le_bytes(residue.get(..8)?.try_into().ok()?);
    let range = json_range(residue, json_len)?;
    let text = &residue[range.clone()];
    let mut out = residue[..8].to_vec();
    let mut scan = Scan::default();
    let mut i = 0;
    while i < text.len() {
        if text[i] != b'"' {
            out.push(text[i]);
            i += 1;
            continue;
        }
        if let Some(v) = value_after(&text[i..], OFFSETS_KEY) {
            if let Some((ab, used)) = numbers_at(&text[i + v..], 2).filter(|(ab, _)| ab.len() == 2) {
                let explicit = &text[i..i + v + used];
                if scan.predict() == Some((ab[0], ab[1]))
                    && explicit[v..] == *format!("[{},{}]", ab[0], ab[1]).as_bytes()
                {
                    out.extend_from_slice(&explicit[..v]);
                    out.extend_from_slice(b"[]");
                } else {
                    out.extend_from_slice(explicit);
                }
                scan.end_entry(ab[1]);
                i += v + used;
                continue;
            }
        }
        let used = scan.key(text, i);
        let used = if used == 0 { skip_string(text, i) } else { used };
        out.extend_from_slice(&text[i..i + used]);
        i += used;
    }
    out.extend_from_slice(&residue[range.end..]);
    Some(out)
}

/// Bytes of the JSON string (or lone quote) starting at `text[i]`.
fn skip_string(text: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < text.len() {
        match text[j] {
            b'\\' => j += 2,
            b'"' => return j + 1 - i,
            _ => j += 1,
        }
    }
    text.len() - i
}

/// The residue from its elided form; the expanded header must end exactly where its length
/// prefix says, and the whole must stay within `limit` bytes.
fn expand(stored: &[u8], limit: u64) -> Result<Vec<u8>> {
    let bad = |m: &str| Error::corrupt(format!("residue model: {m}"));
    let json_len = u64::from_le_bytes(stored.get(..8).ok_or_else(|| bad("no header length"))?.try_into().unwrap());
    if json_len > limit {
        return Err(bad("header longer than the original"));
    }
    let mut out = stored[..8].to_vec();
    let end = 8 + json_len as usize;
    let mut scan = Scan::default();
    let mut i = 8;
    while out.len() < end {
        let t = stored.get(i..).filter(|t| !t.is_empty()).ok_or_else(|| bad("header cut short"))?;
        if t[0] != b'"' {
            out.push(t[0]);
            i += 1;
            continue;
        }
        if let Some(v) = value_after(t, OFFSETS_KEY) {
            if t[v..].starts_with(b"[]") {
                let (a, b) = scan.predict().ok_or_else(|| bad("elided offsets without dtype and shape"))?;
                out.extend_from_slice(&t[..v]);
                out.extend_from_slice(format!("[{a},{b}]").as_bytes());
                scan.end_entry(b);
                i += v + 2;
                continue;
            }
            if let Some((ab, used)) = numbers_at(&t[v..], 2).filter(|(ab, _)| ab.len() == 2) {
                out.extend_from_slice(&t[..v + used]);
                scan.end_entry(ab[1]);
                i += v + used;
                continue;
            }
        }
        let used = scan.key(stored, i);
        let used = if used == 0 { skip_string(stored, i) } else { used };
        out.extend_from_slice(&stored[i..i + used]);
        i += used;
    }
    if out.len() != end {
        return Err(bad("expanded header overruns its length"));
    }
    out.extend_from_slice(&stored[i..]);
    if out.len() as u64 > limit {
        return Err(bad("residue longer than the original"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(json: &str) -> Vec<u8> {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v
    }

    #[test]
    fn elides_predictable_offsets_and_restores_them() {
        let json = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2, 3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[4],"data_offsets":[16,32]},"c":{"dtype":"I64","shape":[1,2],"data_offsets":[32,48]}}   "#;
        let mut r = header(json);
        r.extend_from_slice(b"gap");
        let (model, stored) = encode(&r);
        assert_eq!(model, ELIDED_OFFSETS);
        let s = String::from_utf8_lossy(&stored);
        // a and c are predictable; b starts after a gap.
        assert_eq!(s.matches(r#""data_offsets":[]"#).count(), 2, "{s}");
        assert!(s.contains("[16,32]"));
        assert_eq!(decode(model, &stored, r.len() as u64).unwrap(), r);
    }

    #[test]
    fn odd_headers_stay_verbatim() {
        for json in [
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[]}}"#,
            r#"{"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}}"#,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,04]}}"#,
            r#"not json at all"#,
        ] {
            let r = header(json);
            let (model, stored) = encode(&r);
            assert_eq!(model, VERBATIM, "{json}");
            assert_eq!(decode(model, &stored, r.len() as u64).unwrap(), r);
        }
        assert_eq!(encode(b"short").0, VERBATIM);
    }

    #[test]
    fn corrupt_stored_forms_are_errors() {
        let json = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}"#;
        let (model, stored) = encode(&header(json));
        assert_eq!(model, ELIDED_OFFSETS);
        for cut in 0..stored.len() {
            let _ = decode(model, &stored[..cut], 1 << 20);
        }
        let mut bad = stored.clone();
        bad[0] = bad[0].wrapping_add(40);
        assert!(decode(model, &bad, 1 << 20).is_err());
        assert!(decode(model, &stored, 10).is_err(), "limit");
        assert!(decode(7, &stored, 1 << 20).is_err());
    }
}
