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

mod archive;
pub mod coder;
mod compress;
pub mod container;
pub mod dsl;
pub mod error;
pub mod ffi;
pub mod file_meta;
pub mod hash;
mod level;
pub mod reference;
pub mod simd;
pub mod source;
pub mod synth;
pub mod tensor;
mod work;

pub use archive::{Archive, GgufTensor, GgufView, TensorInfo};
pub use compress::ProgramOverride;
pub use error::{Error, Result};
pub use file_meta::FileMeta;
pub use level::Level;

use compress::{compress_in_memory, compress_source};
use source::Source;
use work::pool;

/// Compression settings. What the search explores is never stored in the archive.
#[derive(Clone, Debug)]
pub struct Options {
    /// Worker threads; 0 = all cores.
    pub threads: usize,
    /// Target bytes of original data per chunk (chunks decode independently).
    pub chunk_bytes: usize,
    /// Elements of each tensor's sample on which candidate programs are compared, at the
    /// default level (`fast` uses at most 32K of them, `max` twice as many; [`Level`]).
    pub sample_elems: usize,
    /// Search budget: productions evaluated per tensor (docs/SYNTHESIS.md).
    pub budget: usize,
    /// Deepest program the search builds (levels of transforms).
    pub depth: usize,
    /// The production prior that guides the search (default: the built-in one).
    pub prior: synth::PriorSource,
    /// Where to add search statistics (never stored in the archive).
    pub stats: Option<std::sync::Arc<synth::SearchStats>>,
    /// Working memory to aim for, in bytes: bounds the chunks coded at once (about six times
    /// the chunk size each) and the safetensors header read; [`compress_file`] keeps its peak
    /// near this whatever the file size. The archive does not depend on it.
    pub memory_limit: u64,
    /// Tensors of the same kind (dtype, shape, role: repeated layers) take the best programs
    /// found for the first of them, compared on their own sample, instead of searching again
    /// (`synth::choose_among`). Off: every tensor is searched.
    pub reuse: bool,
    /// How the search trades size against decode time (never stored in the archive).
    pub level: Level,
    /// The original file's mode and modification time, recorded in the archive for
    /// decompression to restore ([`Archive::file_meta`]); None (the default) records nothing.
    /// Never read from a file by the library: the caller sets it, e.g. from
    /// [`FileMeta::of`] of the input's metadata (as `brevis compress` and
    /// `brevis_compress_file` do unless told not to).
    pub file_meta: Option<FileMeta>,
    /// Where to add the bytes of the input coded so far, as each batch of chunks is written
    /// (for a progress display; it stays at 0 while programs are chosen). Never changes the
    /// archive.
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Options {
    fn clamped(&self) -> Options {
        Options { chunk_bytes: self.chunk_bytes.clamp(1, container::MAX_CHUNK_BYTES as usize), ..self.clone() }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            chunk_bytes: 1 << 20,
            sample_elems: 1 << 17,
            budget: synth::DEFAULT_BUDGET,
            depth: synth::DEFAULT_DEPTH,
            prior: synth::PriorSource::default(),
            stats: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            reuse: true,
            level: Level::Default,
            file_meta: None,
            progress: None,
        }
    }
}

/// Default working-memory target of compression, in bytes (1 GiB).
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;

/// Decompression settings.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    pub threads: usize,
    /// Largest output this call may allocate, in bytes (in memory); for [`decompress_file`],
    /// the working memory to aim for (it bounds the index and the chunks decoded at once).
    pub memory_limit: u64,
    /// Verify the whole-file checksum (chunk and residue checksums are always verified).
    pub verify: bool,
    /// Where to add the bytes of the original restored so far, as each chunk is written (for a
    /// progress display; [`Archive::decompress_to`] and [`Archive::decompress_to_file`]).
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { threads: 0, memory_limit: 1 << 40, verify: true, progress: None }
    }
}

/// Compresses any file; safetensors files get a program per tensor.
pub fn compress(input: &[u8], opts: &Options) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), None, None))
}

/// Compresses `input` against a reference checkpoint (a safetensors file or a Brevis archive):
/// each tensor with a match in the reference (same name and size, or same content) may be coded
/// against it when that is smaller. Decoding then needs the same reference.
pub fn compress_with_ref(input: &[u8], reference: &[u8], opts: &Options) -> Result<Vec<u8>> {
    let r = reference::Reference::new(reference)?;
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), None, Some(&r)))
}

/// Compresses the file `input` into `output` with memory bounded by about
/// `threads x chunk_bytes` (and [`Options::memory_limit`]) plus the index, whatever the file
/// size: the input is read in windows, never whole, and payloads are written as they are made.
/// The archive is byte-identical to what [`compress`] makes of the same bytes. `output` is
/// written from its current start (position 0) and truncated to the archive's length; the
/// caller makes it durable (fsync) and atomic (a temporary file renamed into place). Returns
/// the archive's length. The input must not change while it is read.
pub fn compress_file(input: &std::fs::File, output: &mut std::fs::File, opts: &Options) -> Result<u64> {
    let src = Source::file(input)?;
    let len = pool(opts.threads)?.install(|| compress_source(src, &opts.clamped(), None, None, output))?;
    output.set_len(len)?;
    if input.metadata()?.len() != src.len() {
        return Err(Error::invalid("the input file changed size while it was compressed"));
    }
    Ok(len)
}

/// Learns a production prior from a checkpoint: the programs that a wider search picks on a
/// stratified sample of its tensors (what `compress` does by default before choosing programs).
pub fn learn_prior(input: &[u8], opts: &Options) -> Result<synth::Prior> {
    let opts = opts.clamped();
    pool(opts.threads)?.install(|| compress::learn_prior(input, &opts))
}

/// Like [`compress`], but lets the caller impose programs (used to build golden archives that
/// exercise every operator, and by tests). A program that does not apply to its tensor is an error.
#[doc(hidden)]
pub fn compress_with_programs(input: &[u8], opts: &Options, programs: ProgramOverride) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), Some(programs), None))
}

/// [`compress_with_programs`] against a reference.
#[doc(hidden)]
pub fn compress_with_programs_and_ref(
    input: &[u8],
    reference: &[u8],
    opts: &Options,
    programs: ProgramOverride,
) -> Result<Vec<u8>> {
    let r = reference::Reference::new(reference)?;
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), Some(programs), Some(&r)))
}

/// Decompresses a whole archive with default options.
pub fn decompress(archive: &[u8]) -> Result<Vec<u8>> {
    decompress_with(archive, &DecodeOptions::default())
}

/// Decompresses a whole archive.
pub fn decompress_with(archive: &[u8], opts: &DecodeOptions) -> Result<Vec<u8>> {
    Archive::open_with_limit(archive, opts.memory_limit)?.decompress(opts)
}

/// Decompresses an archive made with [`compress_with_ref`]; `reference` is the same reference
/// (a safetensors file or a Brevis archive of it). A missing, truncated or different reference
/// is an error that names what the archive expects.
pub fn decompress_with_ref(archive: &[u8], reference: &[u8], opts: &DecodeOptions) -> Result<Vec<u8>> {
    let mut a = Archive::open_with_limit(archive, opts.memory_limit)?;
    a.set_reference(reference::Reference::new(reference)?)?;
    a.decompress(opts)
}

/// Decompresses the archive file `archive` into `output`, writing the original sequentially,
/// with memory bounded by about `threads x chunk size` (and `opts.memory_limit`) plus the index,
/// whatever the file size: the footer and the index are read first, then chunks are decoded a
/// batch at a time in file order. With `opts.verify`, the whole-file checksum is computed as the
/// bytes go out (a mismatch is an error after they are written: write to a temporary file).
/// Returns the original's length. The original's recorded mode and modification time are the
/// caller's to apply: open the archive with [`Archive::open_source`] to read
/// [`Archive::file_meta`] and decode with [`Archive::decompress_to`].
pub fn decompress_file(archive: &std::fs::File, output: &mut dyn std::io::Write, opts: &DecodeOptions) -> Result<u64> {
    let a = Archive::open_source(Source::file(archive)?, opts.memory_limit)?;
    a.decompress_to(output, opts)
}
