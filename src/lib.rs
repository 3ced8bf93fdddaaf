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
}

impl Options {
    fn clamped(&self) -> Options {
        Options { chunk_bytes: self.chunk_bytes.clamp(1, container::MAX_CHUNK_BYTES as usize), ..self.clone() }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options { threads: 0, chunk_bytes: 1 << 20, sample_elems: 1 << 18 }
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

/// A tensor (or the whole file, when it is not safetensors) to compress.
struct Job<'a> {
    name: String,
    dtype: tensor::DType,
    shape: Vec<u64>,
    word_bits: u32,
    offset: u64,
    bytes: &'a [u8],
}

/// Compresses any file; safetensors files get a program per tensor.
pub fn compress(input: &[u8], opts: &Options) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_pool(input, &opts.clamped(), None))
}

/// A caller-supplied program for tensor `i` (None: let the chooser decide).
pub type ProgramOverride<'a> = &'a (dyn Fn(usize, &synth::TensorView) -> Option<dsl::Node> + Sync);

/// Like [`compress`], but lets the caller impose programs (used to build golden archives that
/// exercise every operator, and by tests). A program that does not apply to its tensor is an error.
#[doc(hidden)]
pub fn compress_with_programs(input: &[u8], opts: &Options, programs: ProgramOverride) -> Result<Vec<u8>> {
    pool(opts.threads)?.install(|| compress_in_pool(input, &opts.clamped(), Some(programs)))
}

fn compress_in_pool<'a>(input: &'a [u8], opts: &Options, forced: Option<ProgramOverride>) -> Result<Vec<u8>> {
    let spans = match tensor::safetensors::layout(input) {
        Ok(spans) => spans,
        Err(_) => Vec::new(),
    };
    let mut jobs: Vec<Job> = Vec::with_capacity(spans.len() + 1);
    let mut pos = 0usize;
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
            });
        }
    };
    for s in &spans {
        gap(&mut jobs, pos, s.start as usize);
        jobs.push(Job {
            word_bits: s.word_bits(),
            bytes: &input[s.start as usize..s.end as usize],
            offset: s.start,
            name: s.name.clone(),
            dtype: s.dtype.clone(),
            shape: s.shape.clone(),
        });
        pos = s.end as usize;
    }
    gap(&mut jobs, pos, input.len());

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

    let programs: Vec<(dsl::Node, bool)> = jobs
        .par_iter()
        .zip(&dup_of)
        .enumerate()
        .map(|(i, (j, dup))| {
            let view = synth::TensorView { dtype: &j.dtype, shape: &j.shape, word_bits: j.word_bits, bytes: j.bytes };
            if let Some(p) = forced.and_then(|f| f(i, &view)) {
                return (p, true);
            }
            if let Some(k) = dup {
                return (dsl::build::copy(*k as u32), true);
            }
            let so = synth::SearchOptions {
                chunk_elems: chunk_elems(opts, j.word_bits) as usize,
                sample_elems: opts.sample_elems,
            };
            (synth::choose(&view, &so), false)
        })
        .collect();
    let (programs, pinned): (Vec<dsl::Node>, Vec<bool>) = programs.into_iter().unzip();

    // Chunk jobs, in index order.
    let mut work: Vec<(usize, usize, usize)> = Vec::new(); // (tensor, byte start, byte end)
    for (i, j) in jobs.iter().enumerate() {
        let wb = (j.word_bits / 8) as usize;
        let step = chunk_elems(opts, j.word_bits) as usize * wb;
        let mut s = 0;
        while s < j.bytes.len() {
            let e = (s + step).min(j.bytes.len());
            work.push((i, s, e));
            s = e;
        }
    }
    let payloads: Vec<Result<Vec<u8>>> = work
        .par_iter()
        .map(|&(i, s, e)| {
            let j = &jobs[i];
            let mut out = Vec::new();
            if matches!(programs[i].op, dsl::Op::Copy(_)) {
                return Ok(out);
            }
            let stream = dsl::Stream::from_le_bytes(dsl::Ty::u(j.word_bits), &j.bytes[s..e])?;
            match programs[i].encode(&stream, &[], &mut out) {
                Ok(()) => Ok(out),
                Err(Error::Invalid(_)) => {
                    // The program chosen on a sample does not fit this chunk: fall back to raw.
                    Err(Error::invalid("fallback"))
                }
                Err(e) => Err(e),
            }
        })
        .collect();

    // A chunk that the chosen program cannot code sends its whole tensor to `raw`.
    let mut programs = programs;
    let mut payloads: Vec<Vec<u8>> = {
        let mut failed = vec![false; jobs.len()];
        for (w, p) in work.iter().zip(&payloads) {
            if let Err(Error::Invalid(_)) = p {
                if pinned[w.0] {
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
        work.par_iter()
            .zip(payloads)
            .map(|(&(i, s, e), p)| {
                if failed[i] {
                    let j = &jobs[i];
                    let stream = dsl::Stream::from_le_bytes(dsl::Ty::u(j.word_bits), &j.bytes[s..e])?;
                    let mut out = Vec::new();
                    programs[i].encode(&stream, &[], &mut out)?;
                    Ok(out)
                } else {
                    p
                }
            })
            .collect::<Result<Vec<_>>>()?
    };

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
        });
    }
    let index = Index {
        version: container::VERSION,
        original_size: input.len() as u64,
        original_hash: xxh3_64(input),
        residue,
        tensors,
    };
    let out = container::write_archive(&index, &payloads)?;
    payloads.clear();
    if forced.is_some() {
        // Imposed programs are not checked by the chooser (generators, copies): decode to prove them.
        let back = Archive::open(&out)?.decompress(&DecodeOptions::default());
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
    let a = Archive::open(archive)?;
    a.decompress(opts)
}

/// An opened archive: its index, and random access to each tensor.
pub struct Archive<'a> {
    bytes: &'a [u8],
    index: Index,
    memory_limit: u64,
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
        Ok(Archive { bytes, index: container::read_index(bytes, memory_limit)?, memory_limit })
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
        parts
            .into_par_iter()
            .enumerate()
            .try_for_each(|(c, buf)| container::decode_chunk(self.bytes, &self.index, i, c, buf))
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
        pool(opts.threads)?.install(|| {
            slices
                .into_par_iter()
                .try_for_each(|(t, c, buf)| container::decode_chunk(self.bytes, &self.index, t, c, buf))
        })?;
        if opts.verify && xxh3_64(out) != self.index.original_hash {
            return Err(Error::Checksum("whole file".into()));
        }
        Ok(())
    }
}
