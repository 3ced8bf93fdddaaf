//! Tensors as the compressor sees them: dtypes and the tolerant safetensors and GGUF layouts.

pub mod gguf;
pub mod safetensors;

use crate::error::{Error, Result};
use crate::source::Source;

/// The tensors of a file as its header describes them ([`spans_of`]).
pub(crate) struct Spans {
    /// Sorted by offset, not overlapping; empty when the file is neither format (or not a
    /// consistent one).
    pub spans: Vec<safetensors::TensorSpan>,
    /// Where the data section starts (past a safetensors file's JSON header; 0 when unknown).
    pub data_start: u64,
    /// The file is GGUF.
    pub gguf: bool,
}

/// The tensors of a GGUF file or a safetensors file, read from its header only (in windows of
/// a source, within `memory_limit`).
pub(crate) fn spans_of(input: Source, memory_limit: u64) -> Result<Spans> {
    if input.len() >= 4 && input.read(0, 4)?[..] == gguf::MAGIC[..] {
        // A safetensors file cannot start so: its header would be 1.2 GB long.
        let (spans, data_start) = gguf_layout_of(input, memory_limit)?;
        return Ok(Spans { spans, data_start, gguf: true });
    }
    let (spans, data_start) = safetensors_layout_of(input, memory_limit)?;
    Ok(Spans { spans, data_start, gguf: false })
}

/// A safetensors dtype. Unknown dtype strings are kept and coded as bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DType {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    BF16,
    F32,
    F64,
    F8E4M3,
    F8E5M2,
    Other(String),
}

impl DType {
    pub fn parse(s: &str) -> DType {
        match s {
            "BOOL" => DType::Bool,
            "U8" => DType::U8,
            "I8" => DType::I8,
            "U16" => DType::U16,
            "I16" => DType::I16,
            "U32" => DType::U32,
            "I32" => DType::I32,
            "U64" => DType::U64,
            "I64" => DType::I64,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "F32" => DType::F32,
            "F64" => DType::F64,
            "F8_E4M3" => DType::F8E4M3,
            "F8_E5M2" => DType::F8E5M2,
            other => DType::Other(other.to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            DType::Bool => "BOOL",
            DType::U8 => "U8",
            DType::I8 => "I8",
            DType::U16 => "U16",
            DType::I16 => "I16",
            DType::U32 => "U32",
            DType::I32 => "I32",
            DType::U64 => "U64",
            DType::I64 => "I64",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F32 => "F32",
            DType::F64 => "F64",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E5M2 => "F8_E5M2",
            DType::Other(s) => s,
        }
    }

    /// Element width in bits; None for unknown dtypes (coded as bytes).
    pub fn bits(&self) -> Option<u32> {
        Some(match self {
            DType::Bool | DType::U8 | DType::I8 | DType::F8E4M3 | DType::F8E5M2 => 8,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 16,
            DType::U32 | DType::I32 | DType::F32 => 32,
            DType::U64 | DType::I64 | DType::F64 => 64,
            DType::Other(_) => return None,
        })
    }

    /// (exponent bits, mantissa bits) for floating-point dtypes.
    pub fn float_layout(&self) -> Option<(u32, u32)> {
        match self {
            DType::F16 => Some((5, 10)),
            DType::BF16 => Some((8, 7)),
            DType::F32 => Some((8, 23)),
            DType::F64 => Some((11, 52)),
            DType::F8E4M3 => Some((4, 3)),
            DType::F8E5M2 => Some((5, 2)),
            _ => None,
        }
    }

    pub fn is_signed_int(&self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }
}

/// The tensor spans of a GGUF file and where its data section starts, read from a prefix that
/// grows until the header fits (no spans when it is not consistent GGUF, or its header needs
/// more than `memory_limit`).
fn gguf_layout_of(input: Source, memory_limit: u64) -> Result<(Vec<safetensors::TensorSpan>, u64)> {
    let cap = input.len().min(memory_limit.max(1 << 16));
    let mut want = cap.min(1 << 16);
    loop {
        let prefix = input.read(0, want as usize)?;
        match gguf::layout_from_prefix(&prefix, input.len()) {
            Ok(l) => return Ok((l.spans, l.data_start)),
            Err(gguf::Stop::Short) if want < cap => want = cap.min(want.saturating_mul(4)),
            Err(_) => return Ok((Vec::new(), 0)),
        }
    }
}

/// The tensor spans of a safetensors file, read from its length prefix and JSON header only
/// (empty when it is not a consistent safetensors file). A header larger than `memory_limit`
/// is an error, unless it is clearly not JSON (then the file is a byte stream, as it would be
/// anyway).
fn safetensors_layout_of(input: Source, memory_limit: u64) -> Result<(Vec<safetensors::TensorSpan>, u64)> {
    let len = input.len();
    if len < 8 {
        return Ok((Vec::new(), 0));
    }
    let n = u64::from_le_bytes(input.read(0, 8)?[..].try_into().unwrap());
    if n > safetensors::MAX_HEADER || 8 + n > len {
        return Ok((Vec::new(), 0));
    }
    if 8 + n > memory_limit {
        let head = input.read(8, (n as usize).min(4096))?;
        if head.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Ok((Vec::new(), 0));
        }
        return Err(Error::Limit(format!("a safetensors header of {n} bytes, above the memory limit")));
    }
    let prefix = input.read(0, 8 + n as usize)?;
    let spans = safetensors::layout_from_prefix(&prefix, len).unwrap_or_default();
    Ok((spans, 8 + n))
}
