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

pub mod coder;
pub mod container;
pub mod dsl;
pub mod error;
pub mod ffi;
pub mod reference;
pub mod simd;
pub mod source;
pub mod synth;
pub mod tensor;

use container::{ChunkEntry, Index, TensorEntry};
use source::{Bytes, Source};

/// Gaps between tensors and trailing data up to this size stay in the residue (kept in the
/// index's zstd frame); longer ones are coded as byte streams.
const RESIDUE_MAX: usize = 64 << 10;

fn chunk_elems(opts: &Options, word_bits: u32) -> u64 {
    (opts.chunk_bytes / (word_bits / 8) as usize).max(1) as u64
}
pub use error::{Error, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use xxhash_rust::xxh3::xxh3_64;

/// Compression settings. What the search explores is never stored in the archive.
#[derive(Clone, Debug)]
pub struct Options {
    /// Worker threads; 0 = all cores.
    pub threads: usize,
    /// Target bytes of original data per chunk (chunks decode independently).
    pub chunk_bytes: usize,
    /// Elements of each tensor's sample on which candidate programs are compared.
    pub sample_elems: usize,
    /// Search budget: productions evaluated per tensor (docs/SYNTHESIS.md).
    pub budget: usize,
    /// Deepest program the search builds (levels of transforms).
    pub depth: usize,
    /// The production prior that guides the search (default: learned from a sample of the input).
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
            sample_elems: 1 << 18,
            budget: synth::DEFAULT_BUDGET,
            depth: synth::DEFAULT_DEPTH,
            prior: synth::PriorSource::default(),
            stats: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            reuse: true,
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
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { threads: 0, memory_limit: 1 << 40, verify: true }
    }
}

fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::invalid(format!("cannot start worker threads: {e}")))
}

/// A tensor (or a byte region: the whole file when it is not safetensors) to compress.
struct Job<'a> {
    name: String,
    dtype: tensor::DType,
    shape: Vec<u64>,
    word_bits: u32,
    offset: u64,
    bytes: Bytes<'a>,
    /// The matching tensor of the reference: its name and bytes.
    reference: Option<(String, Bytes<'a>)>,
    /// Described by the safetensors header (not a byte region between tensors).
    from_header: bool,
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
    pool(opts.threads)?.install(|| {
        let jobs = plan(Source::Memory(input), None, opts.memory_limit)?;
        let views: Vec<synth::TensorView> = jobs.iter().map(view).collect();
        synth::learn_prior(&views, &|i| synth::SearchOptions {
            chunk_elems: chunk_elems(&opts, jobs[i].word_bits) as usize,
            sample_elems: opts.sample_elems,
            depth: opts.depth,
            ..synth::SearchOptions::new(0)
        })
    })
}

/// A caller-supplied program for tensor `i` (None: let the chooser decide).
pub type ProgramOverride<'a> = &'a (dyn Fn(usize, &synth::TensorView) -> Option<dsl::Node> + Sync);

/// Like [`compress`], but lets the caller impose programs (used to build golden archives that
/// exercise every operator, and by tests). A program that does not apply to its tensor is an error.
#[doc(hidden)]
pub fn compress_with_programs(input: &[u8], opts: &Options, programs: ProgramOverride) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_memory(input, &opts.clamped(), Some(programs), None))
}

/// The tensors of `input` and the byte regions between them, in file order.
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

/// The tensor spans of a safetensors file, read from its length prefix and JSON header only
/// (empty when it is not a consistent safetensors file). A header larger than `memory_limit`
/// is an error, unless it is clearly not JSON (then the file is a byte stream, as it would be
/// anyway).
fn layout_of(input: Source, memory_limit: u64) -> Result<(Vec<tensor::safetensors::TensorSpan>, u64)> {
    let len = input.len();
    if len < 8 {
        return Ok((Vec::new(), 0));
    }
    let n = u64::from_le_bytes(input.read(0, 8)?[..].try_into().unwrap());
    if n > tensor::safetensors::MAX_HEADER || 8 + n > len {
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
    let spans = tensor::safetensors::layout_from_prefix(&prefix, len).unwrap_or_default();
    Ok((spans, 8 + n))
}

fn plan<'a>(input: Source<'a>, refs: Option<&'a reference::Reference>, memory_limit: u64) -> Result<Vec<Job<'a>>> {
    let (spans, header_end) = layout_of(input, memory_limit)?;
    let content = refs.map(|r| r.content_index());
    let mut jobs: Vec<Job> = Vec::with_capacity(spans.len() + 1);
    // Bytes outside tensors go to the residue, except long gaps and trailing data (or a whole
    // file that is not safetensors), which are coded as byte streams.
    let gap = |jobs: &mut Vec<Job<'a>>, a: u64, b: u64| -> Result<()> {
        if b - a > RESIDUE_MAX as u64 || (spans.is_empty() && b > a) {
            jobs.push(Job {
                name: String::new(),
                dtype: tensor::DType::Other(String::new()),
                shape: vec![b - a],
                word_bits: 8,
                offset: a,
                bytes: input.range(a, b)?,
                reference: None,
                from_header: false,
            });
        }
        Ok(())
    };
    // The length prefix and JSON header always stay in the residue: the index describes the
    // header's tensors by reference to it.
    let mut pos = if spans.is_empty() { 0 } else { header_end };
    for s in &spans {
        gap(&mut jobs, pos, s.start)?;
        let bytes = input.range(s.start, s.end)?;
        let word_bits = s.word_bits();
        let reference = match refs {
            None => None,
            Some(r) => {
                // Same name and layout, else identical content under another name.
                let by_name = r
                    .tensor(&s.name)
                    .filter(|(rs, _)| rs.len() == s.len() && rs.word_bits() == word_bits)
                    .map(|(_, b)| (s.name.clone(), Bytes::from(b)));
                match (by_name, &content) {
                    (Some(m), _) => Some(m),
                    (None, Some(content)) => content
                        .get(&(s.len(), bytes.xxh3_128(source::WINDOW)?))
                        .and_then(|name| r.tensor(name).map(|(_, b)| (name.clone(), Bytes::from(b)))),
                    (None, None) => None,
                }
            }
        };
        jobs.push(Job {
            word_bits,
            bytes,
            offset: s.start,
            name: s.name.clone(),
            dtype: s.dtype.clone(),
            shape: s.shape.clone(),
            reference,
            from_header: true,
        });
        pos = s.end;
    }
    gap(&mut jobs, pos, input.len())?;
    Ok(jobs)
}

fn view<'b>(j: &'b Job) -> synth::TensorView<'b> {
    synth::TensorView {
        name: &j.name,
        dtype: &j.dtype,
        shape: &j.shape,
        word_bits: j.word_bits,
        bytes: j.bytes,
        reference: j.reference.as_ref().map(|r| r.1),
    }
}

/// [`compress_source`] into memory; imposed programs are then proven by decoding.
fn compress_in_memory(
    input: &[u8],
    opts: &Options,
    forced: Option<ProgramOverride>,
    refs: Option<&reference::Reference>,
) -> Result<Vec<u8>> {
    let mut out = std::io::Cursor::new(Vec::new());
    let len = compress_source(Source::Memory(input), opts, forced, refs, &mut out)?;
    let mut out = out.into_inner();
    out.truncate(len as usize);
    if forced.is_some() {
        // Imposed programs are not checked by the chooser (generators, copies): decode to prove them.
        let back = match refs {
            Some(r) => {
                let mut a = Archive::open(&out)?;
                a.set_reference(reference::Reference::new(r.original())?)?;
                a.decompress(&DecodeOptions::default())
            }
            None => Archive::open(&out)?.decompress(&DecodeOptions::default()),
        };
        if !matches!(&back, Ok(b) if b == input) {
            return Err(Error::invalid("an imposed program does not reproduce its tensor"));
        }
    }
    Ok(out)
}

/// One coded chunk: its payload and the checksum of its original bytes (None for programs
/// that read no payload).
type Coded = (Vec<u8>, Option<u64>);

/// Original bytes per chunk in flight, as a multiple of the chunk size: the window read, its
/// words, the intermediate streams of a program and the payload.
const CHUNK_WORKING_SET: u64 = 6;

/// Compresses `input` into `out` (from position 0) and returns the archive's length; `out` may
/// hold stale bytes past it (a tensor recoded as `raw` is rewritten in place). Passes over the
/// input read it in windows: content hashes, the generators' checks, the chooser's samples,
/// then the chunks, coded a batch at a time in index order and written as they come.
fn compress_source<W: std::io::Write + std::io::Seek>(
    input: Source,
    opts: &Options,
    forced: Option<ProgramOverride>,
    refs: Option<&reference::Reference>,
    out: &mut W,
) -> Result<u64> {
    let jobs = plan(input, refs, opts.memory_limit)?;

    // Duplicates: identical bytes of an earlier tensor with the same word width become `copy`.
    let mut seen: HashMap<(u128, u32), usize> = HashMap::new();
    let mut dup_of: Vec<Option<usize>> = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        if j.bytes.is_empty() {
            dup_of.push(None);
            continue;
        }
        let key = (j.bytes.xxh3_128(source::WINDOW)?, j.word_bits);
        match seen.get(&key) {
            Some(&k) if jobs[k].bytes.same_as(&j.bytes, source::WINDOW)? => dup_of.push(Some(k)),
            _ => {
                seen.insert(key, i);
                dup_of.push(None);
            }
        }
    }

    // The production prior: learned from a sample of the tensors that are not duplicates.
    let search_opts = |j: &Job, prior: std::sync::Arc<synth::Prior>| synth::SearchOptions {
        chunk_elems: chunk_elems(opts, j.word_bits) as usize,
        sample_elems: opts.sample_elems,
        budget: opts.budget,
        depth: opts.depth,
        prior,
        stats: opts.stats.clone(),
    };
    let unique: Vec<&Job> = jobs.iter().zip(&dup_of).filter(|(_, d)| d.is_none()).map(|(j, _)| j).collect();
    let uniform = std::sync::Arc::new(synth::Prior::uniform());
    let prior = synth::resolve_prior(&opts.prior, &unique.iter().map(|j| view(j)).collect::<Vec<_>>(), &|i| {
        search_opts(unique[i], uniform.clone())
    })?;

    // One program per tensor: imposed, a copy of a duplicate, or chosen. Tensors of the same
    // kind (repeated layers) take the finalists of the first of them rather than searching
    // again: the first of each kind is chosen in a first pass, the others in a second, so the
    // result does not depend on the thread count.
    let imposed: Vec<Option<dsl::Node>> =
        jobs.iter().enumerate().map(|(i, j)| forced.and_then(|f| f(i, &view(j)))).collect();
    let kinds: Vec<Option<String>> = (0..jobs.len())
        .map(|i| {
            let searched = opts.reuse && dup_of[i].is_none() && imposed[i].is_none();
            searched.then(|| synth::kind(&view(&jobs[i]))).flatten()
        })
        .collect();
    let mut first_of_kind: HashMap<&str, usize> = HashMap::new();
    let leader: Vec<Option<usize>> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| k.as_deref().map(|k| *first_of_kind.entry(k).or_insert(i)).filter(|&l| l != i))
        .collect();
    let choose_one = |i: usize, finalists: Option<&[dsl::Node]>| -> Result<(dsl::Node, bool, u64, Vec<dsl::Node>)> {
        let j = &jobs[i];
        let view = view(j);
        if let Some(p) = &imposed[i] {
            return Ok((p.clone(), true, 0, Vec::new()));
        }
        if let Some(k) = dup_of[i] {
            return Ok((dsl::build::copy(k as u32), true, 0, Vec::new()));
        }
        let c = match finalists {
            Some(f) => synth::choose_among(&view, &search_opts(j, prior.clone()), f)?,
            None => synth::choose(&view, &search_opts(j, prior.clone()))?,
        };
        Ok((c.program, false, c.standalone_estimate, c.finalists))
    };
    let mut slots: Vec<Option<(dsl::Node, bool, u64, Vec<dsl::Node>)>> = vec![None; jobs.len()];
    let firsts: Vec<usize> = (0..jobs.len()).filter(|&i| leader[i].is_none()).collect();
    let done = firsts.par_iter().map(|&i| choose_one(i, None)).collect::<Result<Vec<_>>>()?;
    for (&i, c) in firsts.iter().zip(done) {
        slots[i] = Some(c);
    }
    let rest: Vec<usize> = (0..jobs.len()).filter(|&i| leader[i].is_some()).collect();
    let done = rest
        .par_iter()
        .map(|&i| choose_one(i, Some(&slots[leader[i].unwrap()].as_ref().expect("chosen in the first pass").3)))
        .collect::<Result<Vec<_>>>()?;
    for (&i, c) in rest.iter().zip(done) {
        slots[i] = Some(c);
    }
    let chosen: Vec<(dsl::Node, bool, u64)> =
        slots.into_iter().map(|c| c.map(|c| (c.0, c.1, c.2)).expect("every tensor chosen")).collect();

    // Chunk jobs, in index order: (tensor, byte start, byte end).
    let mut work: Vec<(usize, usize, usize)> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let step = chunk_elems(opts, j.word_bits) as usize * (j.word_bits / 8) as usize;
        let mut s = 0;
        while s < j.bytes.len() {
            let e = (s + step).min(j.bytes.len());
            work.push((i, s, e));
            s = e;
        }
    }
    let encode_chunk = |program: &dsl::Node, (i, s, e): (usize, usize, usize)| -> Result<Coded> {
        let j = &jobs[i];
        let mut payload = Vec::new();
        if !program.reads_payload() {
            return Ok((payload, None));
        }
        let ty = dsl::Ty::u(j.word_bits);
        let bytes = j.bytes.read(s, e)?;
        let stream = dsl::Stream::from_le_bytes(ty, &bytes)?;
        let reference = match (&j.reference, program.uses_reference()) {
            (Some((_, rb)), true) => Some(dsl::Stream::from_le_bytes(ty, &rb.read(s, e)?)?),
            _ => None,
        };
        program.encode_at(&stream, &[], reference.as_ref(), (s / (j.word_bits / 8) as usize) as u64, &mut payload)?;
        Ok((payload, Some(xxh3_64(&bytes))))
    };
    // Chunks coded at once: enough to keep every thread busy, few enough for the memory limit.
    let per_chunk = (opts.chunk_bytes as u64).saturating_mul(CHUNK_WORKING_SET).max(1);
    let batch = ((opts.memory_limit / per_chunk) as usize).clamp(1, 4 * rayon::current_num_threads().max(1));

    let mut programs: Vec<dsl::Node> = chosen.iter().map(|c| c.0.clone()).collect();
    let mut chunks: Vec<Vec<ChunkEntry>> = vec![Vec::new(); jobs.len()];
    let mut tensor_start = vec![container::HEADER_LEN as u64; jobs.len()];
    let mut recoded = vec![false; jobs.len()];
    let mut offset = container::HEADER_LEN as u64;
    out.rewind()?;
    out.write_all(&container::header())?;
    // Writes one coded chunk of tensor `i` and records its entry.
    let put = |out: &mut W, chunks: &mut Vec<ChunkEntry>, offset: &mut u64, w: (usize, usize, usize), c: Coded| {
        let j = &jobs[w.0];
        out.write_all(&c.0)?;
        chunks.push(ChunkEntry {
            offset: *offset,
            len: c.0.len() as u64,
            elems: ((w.2 - w.1) / (j.word_bits / 8) as usize) as u64,
            checksum: c.1,
        });
        *offset += c.0.len() as u64;
        Ok::<(), Error>(())
    };
    for part in work.chunks(batch) {
        let coded: Vec<Result<Coded>> = part.par_iter().map(|&w| encode_chunk(&programs[w.0], w)).collect();
        for (&w, c) in part.iter().zip(coded) {
            let i = w.0;
            if recoded[i] {
                continue;
            }
            if w.1 == 0 {
                tensor_start[i] = offset;
            }
            match c {
                Ok(c) => put(out, &mut chunks[i], &mut offset, w, c)?,
                // A chunk that the program chosen on a sample cannot code sends its whole tensor
                // to `raw`: rewrite the tensor from its start.
                Err(Error::Invalid(_)) if !chosen[i].1 => {
                    programs[i] = dsl::build::raw();
                    recoded[i] = true;
                    offset = tensor_start[i];
                    out.seek(std::io::SeekFrom::Start(offset))?;
                    chunks[i].clear();
                    let mine: Vec<_> = work.iter().copied().filter(|x| x.0 == i).collect();
                    for again in mine.chunks(batch) {
                        let coded: Vec<Result<Coded>> =
                            again.par_iter().map(|&x| encode_chunk(&programs[i], x)).collect();
                        for (&x, c) in again.iter().zip(coded) {
                            put(out, &mut chunks[i], &mut offset, x, c?)?;
                        }
                    }
                }
                Err(Error::Invalid(_)) => {
                    return Err(Error::invalid(format!("the program given for tensor {i} does not apply")))
                }
                Err(e) => return Err(e),
            }
        }
    }

    // Residue: everything outside tensors, in order.
    let mut residue = Vec::new();
    let mut pos = 0u64;
    for j in &jobs {
        residue.extend_from_slice(&input.read(pos, (j.offset - pos) as usize)?);
        pos = j.offset + j.bytes.len() as u64;
    }
    residue.extend_from_slice(&input.read(pos, (input.len() - pos) as usize)?);

    let mut tensors = Vec::with_capacity(jobs.len());
    for ((i, j), chunks) in jobs.iter().enumerate().zip(chunks) {
        let reference = match (&j.reference, programs[i].uses_reference()) {
            (Some((name, rb)), true) => Some(container::TensorRef {
                name: name.clone(),
                hash: rb.xxh3_64(source::WINDOW)?,
                standalone_estimate: chosen[i].2,
            }),
            _ => None,
        };
        tensors.push(TensorEntry {
            name: j.name.clone(),
            dtype: j.dtype.name().to_string(),
            shape: j.shape.clone(),
            word_bits: j.word_bits,
            offset: j.offset,
            nbytes: j.bytes.len() as u64,
            program: programs[i].clone(),
            chunk_elems: chunk_elems(opts, j.word_bits),
            chunks,
            reference,
            from_header: j.from_header,
        });
    }
    let uses_ref = tensors.iter().any(|t| t.reference.is_some());
    let index = Index {
        version: container::VERSION,
        original_size: input.len(),
        original_hash: input.all()?.xxh3_64(source::WINDOW)?,
        reference: refs.filter(|_| uses_ref).map(|r| r.identity()),
        chunk_bytes: opts.chunk_bytes as u64,
        residue,
        tensors,
    };
    let tail = container::meta_and_footer(&index)?;
    out.write_all(&tail)?;
    out.flush()?;
    Ok(offset + tail.len() as u64)
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
/// Returns the original's length.
pub fn decompress_file(archive: &std::fs::File, output: &mut dyn std::io::Write, opts: &DecodeOptions) -> Result<u64> {
    let a = Archive::open_source(Source::file(archive)?, opts.memory_limit)?;
    a.decompress_to(output, opts)
}

/// An opened archive: its index, and random access to each tensor.
pub struct Archive<'a> {
    bytes: Source<'a>,
    index: Index,
    memory_limit: u64,
    reference: Option<reference::Reference<'a>>,
}

/// What the index says about one tensor.
#[derive(Clone, Debug)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    pub dtype: &'a str,
    pub shape: &'a [u64],
    pub nbytes: u64,
    pub compressed_bytes: u64,
    pub chunks: usize,
    pub program: &'a dsl::Node,
}

impl<'a> Archive<'a> {
    pub fn open(bytes: &'a [u8]) -> Result<Archive<'a>> {
        Self::open_with_limit(bytes, DecodeOptions::default().memory_limit)
    }

    /// Opens an archive; `memory_limit` bounds what reading the index and decoding one tensor
    /// may allocate.
    pub fn open_with_limit(bytes: &'a [u8], memory_limit: u64) -> Result<Archive<'a>> {
        Self::open_source(Source::Memory(bytes), memory_limit)
    }

    /// Opens an archive in memory or in a file (reading only its footer and index now).
    pub fn open_source(bytes: Source<'a>, memory_limit: u64) -> Result<Archive<'a>> {
        Ok(Archive { bytes, index: container::read_index_from(bytes, memory_limit)?, memory_limit, reference: None })
    }

    /// Supplies the reference the archive was made against (checked against its recorded identity).
    pub fn set_reference(&mut self, r: reference::Reference<'a>) -> Result<()> {
        r.check(&self.index)?;
        self.reference = Some(r);
        Ok(())
    }

    /// Whether decoding needs a reference.
    pub fn needs_reference(&self) -> bool {
        self.index.reference.is_some()
    }

    fn decode_chunk(&self, t: usize, c: usize, buf: &mut [u8]) -> Result<()> {
        let refs = |te: &TensorEntry, c: usize| -> Result<dsl::Stream> {
            let r = self.reference.as_ref().ok_or_else(|| reference::missing(&self.index).unwrap())?;
            let tr = te.reference.as_ref().ok_or_else(|| Error::corrupt("no reference tensor"))?;
            let (_, bytes) =
                r.tensor(&tr.name).ok_or_else(|| Error::invalid(format!("reference lacks {:?}", tr.name)))?;
            let wb = te.word_bytes() as usize;
            let start = c * te.chunk_elems as usize * wb;
            let len = te.chunks[c].elems as usize * wb;
            let part = bytes.get(start..start + len).ok_or_else(|| Error::invalid("reference tensor too short"))?;
            dsl::Stream::from_le_bytes(dsl::Ty::u(te.word_bits), part)
        };
        container::decode_chunk(self.bytes, &self.index, t, c, buf, Some(&refs))
    }

    /// Largest tensor [`Archive::decode_tensor`] may allocate, in bytes.
    pub fn set_memory_limit(&mut self, bytes: u64) {
        self.memory_limit = bytes;
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    pub fn original_size(&self) -> u64 {
        self.index.original_size
    }

    pub fn len(&self) -> usize {
        self.index.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.tensors.is_empty()
    }

    pub fn info(&self, i: usize) -> Option<TensorInfo<'_>> {
        let t = self.index.tensors.get(i)?;
        Some(TensorInfo {
            name: &t.name,
            dtype: &t.dtype,
            shape: &t.shape,
            nbytes: t.nbytes,
            compressed_bytes: t.compressed_len(),
            chunks: t.chunks.len(),
            program: &t.program,
        })
    }

    pub fn find(&self, name: &str) -> Option<usize> {
        self.index.tensors.iter().position(|t| t.name == name)
    }

    /// Decodes one tensor into `out`, which must be exactly its size; reads only its own chunks
    /// (and those of a tensor it copies).
    pub fn decode_tensor_into(&self, i: usize, out: &mut [u8]) -> Result<()> {
        let t = self.index.tensors.get(i).ok_or_else(|| Error::invalid("no such tensor"))?;
        if out.len() as u64 != t.nbytes {
            return Err(Error::invalid(format!("buffer holds {} bytes; the tensor has {}", out.len(), t.nbytes)));
        }
        let wb = t.word_bytes() as usize;
        let mut rest = out;
        let mut parts = Vec::with_capacity(t.chunks.len());
        for c in &t.chunks {
            let (a, b) = rest.split_at_mut(c.elems as usize * wb);
            parts.push(a);
            rest = b;
        }
        parts.into_par_iter().enumerate().try_for_each(|(c, buf)| self.decode_chunk(i, c, buf))
    }

    pub fn decode_tensor(&self, i: usize) -> Result<Vec<u8>> {
        let t = self.index.tensors.get(i).ok_or_else(|| Error::invalid("no such tensor"))?;
        if t.nbytes > self.memory_limit {
            return Err(Error::Limit(format!(
                "tensor {:?} has {} bytes, above the memory limit of {} bytes",
                t.name, t.nbytes, self.memory_limit
            )));
        }
        let mut v = vec![0u8; t.nbytes as usize];
        self.decode_tensor_into(i, &mut v)?;
        Ok(v)
    }

    /// Rebuilds the whole original file.
    pub fn decompress(&self, opts: &DecodeOptions) -> Result<Vec<u8>> {
        let size = self.index.original_size;
        if size > opts.memory_limit {
            return Err(Error::Limit(format!(
                "the original is {size} bytes, above the memory limit of {} bytes",
                opts.memory_limit
            )));
        }
        let mut out = vec![0u8; size as usize];
        self.decompress_into(&mut out, opts)?;
        Ok(out)
    }

    /// Rebuilds the whole original file into `out` (exactly its size).
    pub fn decompress_into(&self, out: &mut [u8], opts: &DecodeOptions) -> Result<()> {
        if out.len() as u64 != self.index.original_size {
            return Err(Error::invalid("output buffer does not have the original size"));
        }
        if self.reference.is_none() {
            if let Some(e) = reference::missing(&self.index) {
                return Err(e);
            }
        }
        let residue = &self.index.residue;
        let mut rpos = 0usize;
        for (off, len) in self.index.residue_spans() {
            out[off as usize..(off + len) as usize].copy_from_slice(&residue[rpos..rpos + len as usize]);
            rpos += len as usize;
        }
        // Split the output into one slice per chunk, in file order.
        let mut slices: Vec<(usize, usize, &mut [u8])> = Vec::new();
        let mut rest: &mut [u8] = out;
        let mut base = 0u64;
        for (ti, t) in self.index.tensors.iter().enumerate() {
            let (_, r) = rest.split_at_mut((t.offset - base) as usize);
            rest = r;
            base = t.offset;
            for (ci, c) in t.chunks.iter().enumerate() {
                let n = c.elems * t.word_bytes();
                let (a, r) = rest.split_at_mut(n as usize);
                slices.push((ti, ci, a));
                rest = r;
                base += n;
            }
        }
        pool(opts.threads)?
            .install(|| slices.into_par_iter().try_for_each(|(t, c, buf)| self.decode_chunk(t, c, buf)))?;
        if opts.verify && xxh3_64(out) != self.index.original_hash {
            return Err(Error::Checksum("whole file".into()));
        }
        Ok(())
    }

    /// Rebuilds the whole original file into `out`, sequentially: residue spans and chunks in
    /// file order, decoding a batch of chunks at a time (as many as the threads and
    /// `opts.memory_limit` allow). Returns the bytes written.
    pub fn decompress_to(&self, out: &mut dyn std::io::Write, opts: &DecodeOptions) -> Result<u64> {
        if self.reference.is_none() {
            if let Some(e) = reference::missing(&self.index) {
                return Err(e);
            }
        }
        // The pieces of the original in file order: residue spans (of the residue), then chunks
        // (tensor, chunk, bytes).
        enum Piece {
            Residue(usize, usize),
            Chunk(usize, usize, usize),
        }
        let mut pieces = Vec::new();
        let mut rpos = 0usize;
        let mut pos = 0u64;
        for (ti, t) in self.index.tensors.iter().enumerate() {
            if t.offset > pos {
                let n = (t.offset - pos) as usize;
                pieces.push(Piece::Residue(rpos, rpos + n));
                rpos += n;
            }
            for (ci, c) in t.chunks.iter().enumerate() {
                pieces.push(Piece::Chunk(ti, ci, (c.elems * t.word_bytes()) as usize));
            }
            pos = t.offset + t.nbytes;
        }
        if self.index.original_size > pos {
            pieces.push(Piece::Residue(rpos, rpos + (self.index.original_size - pos) as usize));
        }

        let pool = pool(opts.threads)?;
        let threads = pool.current_num_threads().max(1);
        let per_chunk = self.index.chunk_bytes.saturating_mul(CHUNK_WORKING_SET).max(1);
        let batch = ((opts.memory_limit / per_chunk) as usize).clamp(1, 4 * threads);
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        let mut written = 0u64;
        let mut emit = |b: &[u8]| -> Result<()> {
            out.write_all(b)?;
            if opts.verify {
                hash.update(b);
            }
            written += b.len() as u64;
            Ok(())
        };
        let mut k = 0;
        while k < pieces.len() {
            // Residue spans go out at once; then up to `batch` chunks are decoded together.
            while let Some(Piece::Residue(a, b)) = pieces.get(k) {
                emit(&self.index.residue[*a..*b])?;
                k += 1;
            }
            let mut end = k;
            while end < pieces.len() && end - k < batch && matches!(pieces[end], Piece::Chunk(..)) {
                end += 1;
            }
            let decoded: Vec<Vec<u8>> = pool.install(|| {
                pieces[k..end]
                    .par_iter()
                    .map(|p| match *p {
                        Piece::Chunk(t, c, n) => {
                            let mut buf = vec![0u8; n];
                            self.decode_chunk(t, c, &mut buf).map(|_| buf)
                        }
                        Piece::Residue(..) => Err(Error::invalid("a residue span among chunks")),
                    })
                    .collect::<Result<_>>()
            })?;
            for d in decoded {
                emit(&d)?;
            }
            k = end;
        }
        out.flush()?;
        if opts.verify && hash.digest() != self.index.original_hash {
            return Err(Error::Checksum("whole file".into()));
        }
        Ok(written)
    }
}
