//! Brevis: lossless compression of neural-network checkpoints by program synthesis.
//!
//! Each tensor of a safetensors file is stored as a small program in a typed DSL of reversible
//! operators (float-field split, byte/bit planes, scans, dictionaries, generators, entropy-coded
//! leaves), chosen per tensor; every other byte of the file is kept verbatim, so decompression
//! gives back the identical file.
//!
//! ```
//! let original = b"not a checkpoint, still compressed and restored exactly".to_vec();
//! let archive = brevis::compress(&original, &brevis::Options::default()).unwrap();
//! assert_eq!(brevis::decompress(&archive).unwrap(), original);
//! ```
//!
//! # What is public
//!
//! * [`compress`], [`compress_with_ref`], [`compress_file`] and [`learn_prior`], with
//!   [`Options`], the search [`Level`] and the production prior ([`PriorSource`], [`Prior`]);
//! * [`decompress`], [`decompress_with`], [`decompress_with_ref`] and [`decompress_file`], with
//!   [`DecodeOptions`];
//! * [`Archive`]: an opened archive, its tensors ([`TensorInfo`], [`GgufView`]) and random access
//!   to each;
//! * [`Error`] and [`Result`]; the original file's recorded attributes ([`FileMeta`],
//!   [`OutputAttrs`]).
//!
//! The C ABI (`include/brevis.h`) is the same library seen from C. Everything else is internal;
//! `docs/ARCHITECTURE.md` maps it.

#![warn(missing_docs)]

mod api;
mod archive;
mod compress;
mod error;
mod family;
mod ffi;
mod file_meta;
mod level;
mod options;
mod reference;
mod synth;
mod work;
// Internal modules whose items reach outside the crate only through `internals` (not a stable
// API, not in the documentation): no API documentation is required of them.
#[allow(missing_docs)]
mod coder;
#[allow(missing_docs)]
mod container;
#[allow(missing_docs)]
mod dsl;
#[allow(missing_docs)]
mod hash;
#[allow(missing_docs)]
mod simd;
#[allow(missing_docs)]
mod source;
#[allow(missing_docs)]
mod tensor;

#[doc(hidden)]
pub mod internals;

pub use api::{
    compress, compress_file, compress_file_with_ref, compress_with_ref, decompress, decompress_file,
    decompress_file_with_ref, decompress_with, decompress_with_ref, family_references, family_references_of_files,
    learn_prior,
};
pub use archive::{Archive, GgufTensor, GgufView, TensorInfo, TensorReference};
pub use container::FileRef;
pub use error::{Error, Result};
pub use file_meta::{FileMeta, OutputAttrs};
pub use level::Level;
pub use options::{DecodeOptions, Options, DEFAULT_MEMORY_LIMIT};
pub use source::MappedFile;
pub use synth::{Prior, PriorSource, SearchStats};
