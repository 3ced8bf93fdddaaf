//! What compression and decompression are asked to do: [`Options`] and [`DecodeOptions`]. What
//! the search explores is never stored in the archive; the archive records the programs that
//! were chosen.

use crate::container::MAX_CHUNK_BYTES;
use crate::file_meta::FileMeta;
use crate::level::Level;
use crate::synth::{self, PriorSource, SearchStats};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Default working-memory target of compression, in bytes (1 GiB).
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;

/// Compression settings. What the search explores is never stored in the archive.
///
/// Start from [`Options::default`] and change what you need with the `with_` methods (or by
/// assigning the fields):
///
/// ```
/// let opts = brevis::Options::default().with_level(brevis::Level::Fast).with_threads(2);
/// assert_eq!(opts.threads, 2);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Worker threads; 0 = all cores.
    pub threads: usize,
    /// Target bytes of original data per chunk (chunks decode independently).
    pub chunk_bytes: usize,
    /// Elements of each tensor's sample on which candidate programs are compared, at the
    /// default level (`fast` uses at most 32K of them, `max` twice as many; [`Level`]).
    pub sample_elems: usize,
    /// Search budget: productions evaluated per tensor (docs/SYNTHESIS.md; `Level::Max` takes 1.5
    /// times as many).
    pub budget: usize,
    /// Deepest program the search builds (levels of transforms).
    pub depth: usize,
    /// The production prior that guides the search (default: learned from a sample of the
    /// input's tensors, backed off to the built-in one; the built-in one at `fast`).
    pub prior: PriorSource,
    /// Where to add search statistics (never stored in the archive).
    pub stats: Option<Arc<SearchStats>>,
    /// Working memory to aim for, in bytes: bounds the chunks coded at once (about six times
    /// the chunk size each) and the safetensors header read; [`crate::compress_file`] keeps its
    /// peak near this whatever the file size. The archive does not depend on it.
    pub memory_limit: u64,
    /// Tensors of the same kind (dtype, shape, role: repeated layers) take the best programs
    /// found for the first of them, compared on their own sample, instead of searching again.
    /// Off: every tensor is searched.
    pub reuse: bool,
    /// How the search trades size against decode time (never stored in the archive).
    pub level: Level,
    /// The original file's mode and modification time, recorded in the archive for
    /// decompression to restore ([`crate::Archive::file_meta`]); None (the default) records
    /// nothing. Never read from a file by the library: the caller sets it, e.g. from
    /// [`FileMeta::of`] of the input's metadata (as `brevis compress` and
    /// `brevis_compress_file` do unless told not to).
    pub file_meta: Option<FileMeta>,
    /// Where to add the bytes of the input coded so far, as each batch of chunks is written
    /// (for a progress display; it stays at 0 while programs are chosen). Never changes the
    /// archive.
    pub progress: Option<Arc<AtomicU64>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            chunk_bytes: 1 << 20,
            sample_elems: 1 << 17,
            budget: synth::DEFAULT_BUDGET,
            depth: synth::DEFAULT_DEPTH,
            prior: PriorSource::default(),
            stats: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            reuse: true,
            level: Level::Default,
            file_meta: None,
            progress: None,
        }
    }
}

impl Options {
    /// With [`Options::threads`].
    #[must_use]
    pub fn with_threads(self, threads: usize) -> Self {
        Options { threads, ..self }
    }

    /// With [`Options::chunk_bytes`].
    #[must_use]
    pub fn with_chunk_bytes(self, chunk_bytes: usize) -> Self {
        Options { chunk_bytes, ..self }
    }

    /// With [`Options::sample_elems`].
    #[must_use]
    pub fn with_sample_elems(self, sample_elems: usize) -> Self {
        Options { sample_elems, ..self }
    }

    /// With [`Options::budget`].
    #[must_use]
    pub fn with_budget(self, budget: usize) -> Self {
        Options { budget, ..self }
    }

    /// With [`Options::depth`].
    #[must_use]
    pub fn with_depth(self, depth: usize) -> Self {
        Options { depth, ..self }
    }

    /// With [`Options::prior`].
    #[must_use]
    pub fn with_prior(self, prior: PriorSource) -> Self {
        Options { prior, ..self }
    }

    /// With [`Options::stats`].
    #[must_use]
    pub fn with_stats(self, stats: Option<Arc<SearchStats>>) -> Self {
        Options { stats, ..self }
    }

    /// With [`Options::memory_limit`].
    #[must_use]
    pub fn with_memory_limit(self, memory_limit: u64) -> Self {
        Options { memory_limit, ..self }
    }

    /// With [`Options::reuse`].
    #[must_use]
    pub fn with_reuse(self, reuse: bool) -> Self {
        Options { reuse, ..self }
    }

    /// With [`Options::level`].
    #[must_use]
    pub fn with_level(self, level: Level) -> Self {
        Options { level, ..self }
    }

    /// With [`Options::file_meta`].
    #[must_use]
    pub fn with_file_meta(self, file_meta: Option<FileMeta>) -> Self {
        Options { file_meta, ..self }
    }

    /// With [`Options::progress`].
    #[must_use]
    pub fn with_progress(self, progress: Option<Arc<AtomicU64>>) -> Self {
        Options { progress, ..self }
    }

    /// These options with the chunk size within what the format allows.
    pub(crate) fn clamped(&self) -> Options {
        Options { chunk_bytes: self.chunk_bytes.clamp(1, MAX_CHUNK_BYTES as usize), ..self.clone() }
    }
}

/// Decompression settings.
///
/// ```
/// let opts = brevis::DecodeOptions::default().with_threads(1).with_verify(true);
/// assert_eq!(opts.threads, 1);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DecodeOptions {
    /// Worker threads; 0 = all cores.
    pub threads: usize,
    /// Largest output this call may allocate, in bytes (in memory); for
    /// [`crate::decompress_file`], the working memory to aim for (it bounds the index and the
    /// chunks decoded at once).
    pub memory_limit: u64,
    /// Verify the whole-file checksum, which covers every chunk: each chunk's own checksum is then
    /// checked only if it fails, to name the damaged chunk; without it, each chunk's is checked
    /// as it is decoded. (The index checksum, which covers the residue, is always verified.)
    pub verify: bool,
    /// Where to add the bytes of the original restored so far, as each chunk is written (for a
    /// progress display; [`crate::Archive::decompress_to`] and
    /// [`crate::Archive::decompress_to_file`]).
    pub progress: Option<Arc<AtomicU64>>,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { threads: 0, memory_limit: 1 << 40, verify: true, progress: None }
    }
}

impl DecodeOptions {
    /// With [`DecodeOptions::threads`].
    #[must_use]
    pub fn with_threads(self, threads: usize) -> Self {
        DecodeOptions { threads, ..self }
    }

    /// With [`DecodeOptions::memory_limit`].
    #[must_use]
    pub fn with_memory_limit(self, memory_limit: u64) -> Self {
        DecodeOptions { memory_limit, ..self }
    }

    /// With [`DecodeOptions::verify`].
    #[must_use]
    pub fn with_verify(self, verify: bool) -> Self {
        DecodeOptions { verify, ..self }
    }

    /// With [`DecodeOptions::progress`].
    #[must_use]
    pub fn with_progress(self, progress: Option<Arc<AtomicU64>>) -> Self {
        DecodeOptions { progress, ..self }
    }
}
