//! Tensors as the compressor sees them: dtypes and the tolerant safetensors and GGUF layouts.

pub mod gguf;
pub mod safetensors;

/// The tensor spans of a GGUF file (it starts with `GGUF`) or else of a safetensors file, sorted
/// by offset; or why the file is not a consistent one.
pub fn layout(file: &[u8]) -> Result<Vec<safetensors::TensorSpan>, String> {
    if file.starts_with(gguf::MAGIC) {
        gguf::layout(file)
    } else {
        safetensors::layout(file)
    }
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
