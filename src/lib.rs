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
pub mod synth;
pub mod tensor;

use container::{ChunkEntry, Index, TensorEntry};

/// Gaps between tensors and trailing data up to this size stay in the residue (kept in the
/// index's zstd frame); longer ones are coded as byte streams.
const RESIDUE_MAX: usize = 64 << 10;

fn chunk_elems(opts: &Options, word_bits: u32) -> u64 {
    (opts.chunk_bytes / (word_bits / 8) as usize).max(1) as u64
}
pub use error::{Error, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

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
        }
    }
}

/// Decompression settings.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    pub threads: usize,
    /// Largest output this call may allocate, in bytes.
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
    bytes: &'a [u8],
    /// The matching tensor of the reference: its name and bytes.
    reference: Option<(String, &'a [u8])>,
    /// Described by the safetensors header (not a byte region between tensors).
    from_header: bool,
}

/// Compresses any file; safetensors files get a program per tensor.
pub fn compress(input: &[u8], opts: &Options) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_pool(input, &opts.clamped(), None, None))
}

/// Compresses `input` against a reference checkpoint (a safetensors file or a Brevis archive):
/// each tensor with a match in the reference (same name and size, or same content) may be coded
/// against it when that is smaller. Decoding then needs the same reference.
pub fn compress_with_ref(input: &[u8], reference: &[u8], opts: &Options) -> Result<Vec<u8>> {
    let r = reference::Reference::new(reference)?;
    pool(opts.threads)?.install(|| compress_in_pool(input, &opts.clamped(), None, Some(&r)))
}

/// Learns a production prior from a checkpoint: the programs that a wider search picks on a
/// stratified sample of its tensors (what `compress` does by default before choosing programs).
pub fn learn_prior(input: &[u8], opts: &Options) -> Result<synth::Prior> {
    let opts = opts.clamped();
    pool(opts.threads)?.install(|| {
        let jobs = plan(input, None);
        let views: Vec<synth::TensorView> = jobs.iter().map(view).collect();
        Ok(synth::learn_prior(&views, &|i| synth::SearchOptions {
            chunk_elems: chunk_elems(&opts, jobs[i].word_bits) as usize,
            sample_elems: opts.sample_elems,
            depth: opts.depth,
            ..synth::SearchOptions::new(0)
        }))
    })
}

/// A caller-supplied program for tensor `i` (None: let the chooser decide).
pub type ProgramOverride<'a> = &'a (dyn Fn(usize, &synth::TensorView) -> Option<dsl::Node> + Sync);

/// Like [`compress`], but lets the caller impose programs (used to build golden archives that
/// exercise every operator, and by tests). A program that does not apply to its tensor is an error.
#[doc(hidden)]
pub fn compress_with_programs(input: &[u8], opts: &Options, programs: ProgramOverride) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_pool(input, &opts.clamped(), Some(programs), None))
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
    pool(opts.threads)?.install(|| compress_in_pool(input, &opts.clamped(), Some(programs), Some(&r)))
}

fn plan<'a>(input: &'a [u8], refs: Option<&'a reference::Reference>) -> Vec<Job<'a>> {
    let spans = tensor::safetensors::layout(input).unwrap_or_default();
    let content = refs.map(|r| r.content_index());
    let mut jobs: Vec<Job> = Vec::with_capacity(spans.len() + 1);
    // Bytes outside tensors go to the residue, except long gaps and trailing data (or a whole
    // file that is not safetensors), which are coded as byte streams.
    let gap = |jobs: &mut Vec<Job<'a>>, a: usize, b: usize| {
        if b - a > RESIDUE_MAX || (spans.is_empty() && b > a) {
            jobs.push(Job {
                name: String::new(),
                dtype: tensor::DType::Other(String::new()),
                shape: vec![(b - a) as u64],
                word_bits: 8,
                offset: a as u64,
                bytes: &input[a..b],
                reference: None,
                from_header: false,
            });
        }
    };
    // The length prefix and JSON header always stay in the residue: the index describes the
    // header's tensors by reference to it.
    let mut pos = if spans.is_empty() { 0 } else { 8 + u64::from_le_bytes(input[..8].try_into().unwrap()) as usize };
    for s in &spans {
        gap(&mut jobs, pos, s.start as usize);
        let bytes = &input[s.start as usize..s.end as usize];
        let word_bits = s.word_bits();
        let reference = refs.and_then(|r| {
            // Same name and layout, else identical content under another name.
            let by_name = r
                .tensor(&s.name)
                .filter(|(rs, _)| rs.len() == s.len() && rs.word_bits() == word_bits)
                .map(|(_, b)| (s.name.clone(), b));
            by_name.or_else(|| {
                let name = content.as_ref()?.get(&(s.len(), xxh3_128(bytes)))?;
                r.tensor(name).map(|(_, b)| (name.clone(), b))
            })
        });
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
        pos = s.end as usize;
    }
    gap(&mut jobs, pos, input.len());
    jobs
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

fn compress_in_pool(
    input: &[u8],
    opts: &Options,
    forced: Option<ProgramOverride>,
    refs: Option<&reference::Reference>,
) -> Result<Vec<u8>> {
    let jobs = plan(input, refs);

    // Duplicates: identical bytes of an earlier tensor with the same word width become `copy`.
    let mut seen: HashMap<(u128, u32), usize> = HashMap::new();
    let dup_of: Vec<Option<usize>> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            if j.bytes.is_empty() {
                return None;
            }
            let key = (xxh3_128(j.bytes), j.word_bits);
            match seen.get(&key) {
                Some(&k) if jobs[k].bytes == j.bytes => Some(k),
                _ => {
                    seen.insert(key, i);
                    None
                }
            }
        })
        .collect();

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
    });

    // One program per tensor: imposed, a copy of a duplicate, or chosen.
    let chosen: Vec<(dsl::Node, bool, u64)> = jobs
        .par_iter()
        .zip(&dup_of)
        .enumerate()
        .map(|(i, (j, dup))| {
            let view = view(j);
            if let Some(p) = forced.and_then(|f| f(i, &view)) {
                return (p, true, 0);
            }
            if let Some(k) = dup {
                return (dsl::build::copy(*k as u32), true, 0);
            }
            let c = synth::choose(&view, &search_opts(j, prior.clone()));
            (c.program, false, c.standalone_estimate)
        })
        .collect();

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
    let encode_chunk = |program: &dsl::Node, i: usize, s: usize, e: usize| -> Result<Vec<u8>> {
        let j = &jobs[i];
        let mut out = Vec::new();
        if !program.reads_payload() {
            return Ok(out);
        }
        let ty = dsl::Ty::u(j.word_bits);
        let stream = dsl::Stream::from_le_bytes(ty, &j.bytes[s..e])?;
        let reference = match (&j.reference, program.uses_reference()) {
            (Some((_, rb)), true) => Some(dsl::Stream::from_le_bytes(ty, &rb[s..e])?),
            _ => None,
        };
        program.encode_at(&stream, &[], reference.as_ref(), (s / (j.word_bits / 8) as usize) as u64, &mut out)?;
        Ok(out)
    };
    let mut programs: Vec<dsl::Node> = chosen.iter().map(|c| c.0.clone()).collect();
    let payloads: Vec<Result<Vec<u8>>> =
        work.par_iter().map(|&(i, s, e)| encode_chunk(&programs[i], i, s, e)).collect();

    // A chunk that the program chosen on a sample cannot code sends its whole tensor to `raw`.
    let mut failed = vec![false; jobs.len()];
    for (w, p) in work.iter().zip(&payloads) {
        if let Err(Error::Invalid(_)) = p {
            if chosen[w.0].1 {
                return Err(Error::invalid(format!("the program given for tensor {} does not apply", w.0)));
            }
            failed[w.0] = true;
        }
    }
    for (i, f) in failed.iter().enumerate() {
        if *f {
            programs[i] = dsl::build::raw();
        }
    }
    let payloads: Vec<Vec<u8>> = work
        .par_iter()
        .zip(payloads)
        .map(|(&(i, s, e), p)| if failed[i] { encode_chunk(&programs[i], i, s, e) } else { p })
        .collect::<Result<Vec<_>>>()?;

    // Residue: everything outside tensors, in order.
    let mut residue = Vec::new();
    let mut pos = 0usize;
    for j in &jobs {
        residue.extend_from_slice(&input[pos..j.offset as usize]);
        pos = j.offset as usize + j.bytes.len();
    }
    residue.extend_from_slice(&input[pos..]);

    let mut offset = container::HEADER_LEN as u64;
    let mut tensors = Vec::with_capacity(jobs.len());
    let mut k = 0;
    for (i, j) in jobs.iter().enumerate() {
        let mut chunks = Vec::new();
        let reads = programs[i].reads_payload();
        while k < work.len() && work[k].0 == i {
            let (_, s, e) = work[k];
            let len = if reads { payloads[k].len() as u64 } else { 0 };
            chunks.push(ChunkEntry {
                offset,
                len,
                elems: ((e - s) / (j.word_bits / 8) as usize) as u64,
                checksum: reads.then(|| xxh3_64(&j.bytes[s..e])),
            });
            offset += len;
            k += 1;
        }
        let reference = match (&j.reference, programs[i].uses_reference()) {
            (Some((name, rb)), true) => {
                Some(container::TensorRef { name: name.clone(), hash: xxh3_64(rb), standalone_estimate: chosen[i].2 })
            }
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
        original_size: input.len() as u64,
        original_hash: xxh3_64(input),
        reference: refs.filter(|_| uses_ref).map(|r| r.identity()),
        chunk_bytes: opts.chunk_bytes as u64,
        residue,
        tensors,
    };
    let out = container::write_archive(&index, &payloads)?;
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

/// An opened archive: its index, and random access to each tensor.
pub struct Archive<'a> {
    bytes: &'a [u8],
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
        Ok(Archive { bytes, index: container::read_index(bytes, memory_limit)?, memory_limit, reference: None })
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
}
