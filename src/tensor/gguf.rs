//! Tolerant GGUF layout (versions 2 and 3, little-endian; ggml's `docs/gguf.md`): which byte
//! ranges of a file are tensors. Everything else (the header, the metadata key/values, the tensor
//! infos, alignment padding, gaps and trailing bytes) is residue, kept verbatim by the container.
//! Anything that is not a consistent GGUF file yields an error, and the caller codes the file as
//! one byte stream instead: a valid input file is never an error.
//!
//! ```text
//! file   = "GGUF" u32 version (2 or 3) u64 n_tensors u64 n_kv
//!          kv × n_kv  info × n_tensors  padding  data
//! kv     = string key, u32 value_type, value
//! value  = u8 | i8 | u16 | i16 | u32 | i32 | f32 | bool (1 byte) | string | array | u64 | i64 | f64
//! array  = u32 value_type, u64 count, value × count     (arrays may nest)
//! string = u64 length, UTF-8 bytes
//! info   = string name, u32 n_dims (≤ 4), u64 ne × n_dims (fastest first), u32 ggml_type, u64 offset
//! ```
//!
//! The data section starts at the end of the infos rounded up to `general.alignment` (a u32
//! key, a power of two; 32 when absent), and a tensor lies at `data start + offset`. Every
//! count and length is checked against the bytes the file has before anything is allocated or
//! looped over, so hostile counts cost nothing.

use super::safetensors::TensorSpan;
use super::DType;

pub const MAGIC: &[u8; 4] = b"GGUF";
/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a ggml tensor has (GGML_MAX_DIMS).
pub(crate) const MAX_DIMS: u32 = 4;
/// Deepest nesting of metadata arrays accepted (arrays of arrays of ...).
pub(crate) const MAX_NESTING: u32 = 16;

/// A ggml tensor type: its id in GGUF files, its name, elements per block and bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub block_bytes: u64,
}

/// The ggml types with a known block layout (ggml's `ggml-common.h`; ids 4, 5, 31-33 and 36-38
/// were removed from ggml and are unknown here).
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

/// The ggml type of id `id`, when its layout is known.
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    TYPES.iter().find(|t| t.0 == id).map(|&(id, name, block, block_bytes)| GgmlType { id, name, block, block_bytes })
}

/// The ggml type named `name` ("Q4_1"), when its layout is known.
pub fn ggml_type_named(name: &str) -> Option<GgmlType> {
    TYPES.iter().find(|t| t.1 == name).and_then(|t| ggml_type(t.0))
}

/// The dtype a GGUF tensor of ggml type `id` is coded as: the safetensors dtype of the same
/// element layout for plain types (F32, F16, BF16, F64, I8..I64), else the ggml type's name
/// (`Q4_1`), or `GGML_TYPE_<id>` for an unknown id; those are coded as bytes.
pub fn dtype_of(id: u32) -> DType {
    match ggml_type(id) {
        Some(t) if t.block == 1 => DType::parse(t.name),
        Some(t) => DType::Other(t.name.to_string()),
        None => DType::Other(format!("GGML_TYPE_{id}")),
    }
}

/// The ggml type id of a GGUF tensor's dtype name (what [`dtype_of`] gives): the inverse of
/// `dtype_of(id).name()`; None for a name no ggml type has.
pub fn type_id(dtype: &str) -> Option<u32> {
    if let Some(t) = TYPES.iter().find(|t| t.1 == dtype) {
        return Some(t.0);
    }
    let id: u32 = dtype.strip_prefix("GGML_TYPE_")?.parse().ok()?;
    (ggml_type(id).is_none() && dtype_of(id).name() == dtype).then_some(id)
}

/// Why the parser stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The header runs past the end of the prefix it was given: a longer prefix may parse.
    Short,
    /// The file is not consistent GGUF.
    Bad(String),
}

/// A GGUF file's layout: its tensors in file order, and where its data section starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub version: u32,
    pub alignment: u64,
    pub data_start: u64,
    /// Sorted by offset, not overlapping. Shapes are the GGUF dimensions reversed (slowest
    /// first, as in safetensors), so that the last one is the row length.
    pub spans: Vec<TensorSpan>,
}

/// Tensor spans sorted by offset, or why the file is not (consistent) GGUF.
pub fn layout(file: &[u8]) -> Result<Vec<TensorSpan>, String> {
    match layout_from_prefix(file, file.len() as u64) {
        Ok(l) => Ok(l.spans),
        Err(Stop::Short) => Err("truncated GGUF header".into()),
        Err(Stop::Bad(m)) => Err(m),
    }
}

/// A reader of the prefix of a file of `file_len` bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    file_len: u64,
}

impl<'a> Reader<'a> {
    /// Bytes of the file after the current position.
    fn left(&self) -> u64 {
        self.file_len - self.pos as u64
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], Stop> {
        if n > self.left() {
            return Err(Stop::Bad(format!("truncated at byte {}", self.pos)));
        }
        if n > (self.buf.len() - self.pos) as u64 {
            return Err(Stop::Short);
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, Stop> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, Stop> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn string(&mut self) -> Result<&'a [u8], Stop> {
        let n = self.u64()?;
        self.take(n)
    }

    /// A u64 count of items that take at least `each` bytes, checked against the file's size.
    fn count(&mut self, each: u64, what: &str) -> Result<u64, Stop> {
        let n = self.u64()?;
        if n.saturating_mul(each) > self.left() {
            return Err(Stop::Bad(format!("{what} count {n} does not fit in the file")));
        }
        Ok(n)
    }

    /// Skips a metadata value of type `ty`.
    fn skip_value(&mut self, ty: u32, depth: u32) -> Result<(), Stop> {
        if let Some(n) = fixed_size(ty) {
            self.take(n)?;
            return Ok(());
        }
        match ty {
            8 => {
                self.string()?;
            }
            9 => {
                if depth >= MAX_NESTING {
                    return Err(Stop::Bad("metadata arrays nested too deeply".into()));
                }
                let et = self.u32()?;
                let each = min_size(et).ok_or_else(|| Stop::Bad(format!("unknown array value type {et}")))?;
                let n = self.count(each, "array")?;
                match fixed_size(et) {
                    Some(s) => {
                        self.take(n * s)?;
                    }
                    None => {
                        for _ in 0..n {
                            self.skip_value(et, depth + 1)?;
                        }
                    }
                }
            }
            _ => return Err(Stop::Bad(format!("unknown metadata value type {ty}"))),
        }
        Ok(())
    }
}

/// Bytes of a metadata value of fixed size.
pub(crate) fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// Fewest bytes a metadata value of type `ty` takes (None: unknown type).
fn min_size(ty: u32) -> Option<u64> {
    match ty {
        8 => Some(8),
        9 => Some(12),
        _ => fixed_size(ty),
    }
}

/// One tensor info as read: name, GGUF dimensions, ggml type id, offset in the data section.
struct Info {
    name: String,
    dims: Vec<u64>,
    ty: u32,
    offset: u64,
}

/// The layout from the start of a GGUF file (at least its header, metadata and tensor infos)
/// and the file's total length. `Err(Stop::Short)` when `prefix` ends inside the header and is
/// shorter than the file.
pub fn layout_from_prefix(prefix: &[u8], file_len: u64) -> Result<Layout, Stop> {
    let bad = |m: &str| Stop::Bad(m.to_string());
    if (prefix.len() as u64) > file_len {
        return Err(bad("prefix longer than the file"));
    }
    let mut r = Reader { buf: prefix, pos: 0, file_len };
    if r.take(4)? != MAGIC {
        return Err(bad("no GGUF magic"));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(Stop::Bad(format!("GGUF version {version} (big-endian, or not 2 or 3)")));
    }
    // Each info takes at least 24 bytes (name length, n_dims, type, offset), each kv 13.
    let n_tensors = r.count(24, "tensor")?;
    let n_kv = r.count(13, "metadata")?;
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..n_kv {
        let key = r.string()?;
        let ty = r.u32()?;
        if key == b"general.alignment" {
            if ty != 4 {
                return Err(bad("general.alignment is not a u32"));
            }
            alignment = r.u32()? as u64;
            if !alignment.is_power_of_two() {
                return Err(Stop::Bad(format!("alignment {alignment} is not a power of two")));
            }
        } else {
            r.skip_value(ty, 0)?;
        }
    }
    // Grown as infos are read (not sized by the count), so memory follows the bytes read.
    let mut infos = Vec::new();
    for _ in 0..n_tensors {
        let name = String::from_utf8_lossy(r.string()?).into_owned();
        let n_dims = r.u32()?;
        if n_dims > MAX_DIMS {
            return Err(Stop::Bad(format!("tensor {name:?} has {n_dims} dimensions")));
        }
        let dims = (0..n_dims).map(|_| r.u64()).collect::<Result<Vec<u64>, Stop>>()?;
        let ty = r.u32()?;
        let offset = r.u64()?;
        infos.push(Info { name, dims, ty, offset });
    }
    let data_start = (r.pos as u64).div_ceil(alignment).checked_mul(alignment).filter(|&d| d <= file_len);
    let data_start = data_start.ok_or_else(|| bad("the data section starts past the end of the file"))?;
    let spans = spans(infos, data_start, file_len)?;
    Ok(Layout { version, alignment, data_start, spans })
}

/// The tensors' byte ranges, sorted and checked. A tensor of an unknown type extends to the
/// next tensor (or the end of the file).
fn spans(infos: Vec<Info>, data_start: u64, file_len: u64) -> Result<Vec<TensorSpan>, Stop> {
    // (span, type known); an unknown type's end is its start until the spans are sorted, so
    // that it sorts first among the tensors at its offset.
    let mut spans = Vec::with_capacity(infos.len());
    for i in infos {
        let out = || Stop::Bad(format!("tensor {:?}: data out of range", i.name));
        let start = data_start.checked_add(i.offset).filter(|&s| s <= file_len).ok_or_else(out)?;
        let elems = i.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let elems = elems.ok_or_else(|| Stop::Bad(format!("tensor {:?}: element count overflows", i.name)))?;
        let ty = ggml_type(i.ty);
        let end = match ty {
            Some(t) => {
                let row = i.dims.first().copied().unwrap_or(1);
                if row % t.block != 0 {
                    return Err(Stop::Bad(format!("tensor {:?}: rows are not whole {} blocks", i.name, t.name)));
                }
                let nbytes = (elems / t.block).checked_mul(t.block_bytes).ok_or_else(out)?;
                start.checked_add(nbytes).filter(|&e| e <= file_len).ok_or_else(out)?
            }
            None => start,
        };
        let shape = i.dims.iter().rev().copied().collect();
        spans.push((TensorSpan { name: i.name, dtype: dtype_of(i.ty), shape, start, end }, ty.is_some()));
    }
    spans.sort_by_key(|(s, _)| (s.start, s.end));
    for k in 0..spans.len() {
        if !spans[k].1 {
            spans[k].0.end = spans.get(k + 1).map_or(file_len, |n| n.0.start);
        }
    }
    let spans: Vec<TensorSpan> = spans.into_iter().map(|(s, _)| s).collect();
    for w in spans.windows(2) {
        if w[1].start < w[0].end {
            return Err(Stop::Bad(format!("tensors {:?} and {:?} overlap", w[0].name, w[1].name)));
        }
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_come_back_from_dtype_names() {
        for id in 0..200 {
            assert_eq!(type_id(dtype_of(id).name()), Some(id), "{id}");
        }
        for name in ["", "U8", "BOOL", "F8_E4M3", "GGML_TYPE_0", "GGML_TYPE_+99", "GGML_TYPE_099", "q4_1"] {
            assert_eq!(type_id(name), None, "{name}");
        }
    }
}
