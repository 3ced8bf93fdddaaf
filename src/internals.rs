//! The library's insides, for its own tests, benchmarks, fuzz targets and tools: **not a
//! stable API**. Anything here may change or go in any release; programs that use Brevis call
//! the functions and types at the crate root (and C programs the C ABI).
//!
//! Each module below re-exports what those callers need from the internal module of the same
//! name (`docs/ARCHITECTURE.md` says what each does), so that the rest stays private to the
//! crate, where the compiler reports what nothing uses.

/// The entropy coders and bit packing.
pub mod coder {
    pub use crate::coder::{bitio, huffman, lanes, pack, pack_u16, pack_u8, packed_len, rans};
}

/// The archive layout: header, index, chunks, footer.
pub mod container {
    pub use crate::container::{
        header_model, short_check, write_archive, Index, TensorEntry, END_MAGIC, FOOTER_LEN, HEADER_LEN, MAGIC,
        MAX_CHUNK_BYTES, MAX_META_BYTES, META_DICT, SHORT_CHECK_BYTES, VERSION,
    };
}

/// The program IR, its operators and the interpreter.
pub mod dsl {
    pub use crate::dsl::{build, cost, fused, ops, Data, Env, Node, Op, Stream, Ty, MAX_DEPTH};
}

/// The C ABI, callable from Rust (the symbols of `include/brevis.h`).
pub mod ffi {
    pub use crate::ffi::*;
}

/// Checksums.
pub mod hash {
    pub use crate::hash::{xxh3_64, xxh3_64_at};
}

/// CPU detection and the SIMD kernels, one instruction set per file.
pub mod simd {
    pub use crate::simd::*;
}

/// Input in memory or in a file, read in windows.
pub mod source {
    pub use crate::source::Source;
}

/// The search and its prior.
pub mod synth {
    pub use crate::synth::{builtin_prior, TensorView};
}

/// Tensor layouts of safetensors and GGUF files.
pub mod tensor {
    pub use crate::tensor::{gguf, safetensors, DType};
}

pub use crate::api::{compress_with_programs, compress_with_programs_and_ref};
pub use crate::compress::ProgramOverride;

/// The index of an opened archive (the format's own structure).
pub fn index<'a>(archive: &'a crate::Archive) -> &'a container::Index {
    archive.index()
}

/// A reference checkpoint as compression and decoding load it (a safetensors or GGUF file, or a
/// Brevis archive of one).
pub fn load_reference(file: &[u8]) -> crate::Result<crate::reference::Reference<'_>> {
    crate::archive::load_reference(file)
}
