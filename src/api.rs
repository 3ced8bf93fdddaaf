//! The library's entry points: compress and decompress whole files, in memory or between files,
//! with or without a reference checkpoint.

use crate::archive::{load_reference, load_reference_file, Archive};
use crate::compress::{self, compress_in_memory, compress_source, ProgramOverride};
use crate::error::{Error, Result};
use crate::options::{DecodeOptions, Options};
use crate::reference::Reference;
use crate::source::Source;
use crate::synth::Prior;
use crate::work::pool;

/// Compresses any file; safetensors and GGUF files get a program per tensor.
pub fn compress(input: &[u8], opts: &Options) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), None, None))
}

/// Compresses `input` against a reference checkpoint (a safetensors or GGUF file, or a Brevis
/// archive of one): each tensor with a match in the reference (same name and size, or same
/// content) may be coded against it when that is smaller. Decoding then needs the same
/// reference.
pub fn compress_with_ref(input: &[u8], reference: &[u8], opts: &Options) -> Result<Vec<u8>> {
    let r = load_reference(reference)?;
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), None, Some(&r)))
}

/// For the files of one model family (safetensors or GGUF: a master and its casts and
/// quantizations, a base and its fine-tunes), the index of the file each is best coded against
/// with [`compress_with_ref`], or None for a file coded alone. References form no cycles: files
/// are ranked from the highest precision down, each may use only a file ranked before it, and
/// the one whose tensors predict most of its tensor bytes (identical tensors, the same content,
/// or a cast or quantization of them) is chosen when it predicts at least a quarter of them.
pub fn family_references(files: &[&[u8]], opts: &Options) -> Result<Vec<Option<usize>>> {
    let sources: Vec<Source> = files.iter().map(|f| Source::Memory(f)).collect();
    pool(opts.threads)?.install(|| crate::family::references(&sources, opts.memory_limit))
}

/// [`family_references`] of files, read in windows: memory stays bounded (within
/// [`Options::memory_limit`]) whatever their sizes. The files must not change meanwhile.
pub fn family_references_of_files(files: &[&std::fs::File], opts: &Options) -> Result<Vec<Option<usize>>> {
    let sources: Vec<Source> = files.iter().map(|f| Source::file(f)).collect::<Result<_>>()?;
    pool(opts.threads)?.install(|| crate::family::references(&sources, opts.memory_limit))
}

/// Compresses the file `input` into `output` with memory bounded by about
/// `threads x chunk_bytes` (and [`Options::memory_limit`]) plus the index, whatever the file
/// size: the input is read in windows, never whole, and payloads are written as they are made.
/// The archive is byte-identical to what [`compress`] makes of the same bytes. `output` is
/// written from its current start (position 0) and truncated to the archive's length; the
/// caller makes it durable (fsync) and atomic (a temporary file renamed into place). Returns
/// the archive's length. The input must not change while it is read.
pub fn compress_file(input: &std::fs::File, output: &mut std::fs::File, opts: &Options) -> Result<u64> {
    compress_file_against(input, output, None, opts)
}

/// [`compress_file`] against a reference file (as [`compress_with_ref`]), both read in windows:
/// memory stays bounded as without a reference, whatever the two files' sizes (a reference that
/// is a Brevis archive is first decoded into an anonymous temporary file). The archive is
/// byte-identical to what [`compress_with_ref`] makes of the same bytes.
pub fn compress_file_with_ref(
    input: &std::fs::File,
    output: &mut std::fs::File,
    reference: &std::fs::File,
    opts: &Options,
) -> Result<u64> {
    let r = load_reference_file(reference, opts.memory_limit)?;
    compress_file_against(input, output, Some(&r), opts)
}

fn compress_file_against(
    input: &std::fs::File,
    output: &mut std::fs::File,
    reference: Option<&Reference>,
    opts: &Options,
) -> Result<u64> {
    let src = Source::file(input)?;
    let len = pool(opts.threads)?.install(|| compress_source(src, &opts.clamped(), None, reference, output))?;
    output.set_len(len)?;
    if input.metadata()?.len() != src.len() {
        return Err(Error::invalid("the input file changed size while it was compressed"));
    }
    Ok(len)
}

/// Learns a production prior from a checkpoint: the programs that a wider search picks on a
/// stratified sample of its tensors (what [`crate::PriorSource::Learn`] does before choosing
/// programs).
pub fn learn_prior(input: &[u8], opts: &Options) -> Result<Prior> {
    let opts = opts.clamped();
    pool(opts.threads)?.install(|| compress::learn_prior(input, &opts))
}

/// Like [`compress`], but lets the caller impose programs (used to build golden archives that
/// exercise every operator, and by tests). A program that does not apply to its tensor is an
/// error.
pub fn compress_with_programs(input: &[u8], opts: &Options, programs: ProgramOverride) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), Some(programs), None))
}

/// [`compress_with_programs`] against a reference.
pub fn compress_with_programs_and_ref(
    input: &[u8],
    reference: &[u8],
    opts: &Options,
    programs: ProgramOverride,
) -> Result<Vec<u8>> {
    let r = load_reference(reference)?;
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
/// (a safetensors or GGUF file, or a Brevis archive of it). A missing, truncated or different
/// reference is an error that names what the archive expects.
pub fn decompress_with_ref(archive: &[u8], reference: &[u8], opts: &DecodeOptions) -> Result<Vec<u8>> {
    let mut a = Archive::open_with_limit(archive, opts.memory_limit)?;
    a.set_reference(reference)?;
    a.decompress(opts)
}

/// Decompresses the archive file `archive` into `output`, writing the original sequentially,
/// with memory bounded by about `threads x chunk size` (and `opts.memory_limit`) plus the index,
/// whatever the file size: the footer and the index are read first, then chunks are decoded a
/// batch at a time in file order. With `opts.verify`, the whole-file checksum is computed as the
/// bytes go out (a mismatch is an error after they are written: write to a temporary file).
/// Returns the original's length. The original's recorded mode and modification time are the
/// caller's to apply: open the archive with [`Archive::open_file`] to read
/// [`Archive::file_meta`] and decode with [`Archive::decompress_to`].
pub fn decompress_file(archive: &std::fs::File, output: &mut dyn std::io::Write, opts: &DecodeOptions) -> Result<u64> {
    let a = Archive::open_file(archive, opts.memory_limit)?;
    a.decompress_to(output, opts)
}

/// [`decompress_file`] of an archive made against a reference, given as a file that is read in
/// windows as the chunks need it: memory stays bounded as without a reference.
pub fn decompress_file_with_ref(
    archive: &std::fs::File,
    output: &mut dyn std::io::Write,
    reference: &std::fs::File,
    opts: &DecodeOptions,
) -> Result<u64> {
    let mut a = Archive::open_file(archive, opts.memory_limit)?;
    a.set_reference_file(reference)?;
    a.decompress_to(output, opts)
}
