//! The decode side: an opened archive, random access to each tensor, and the whole file
//! rebuilt in memory or written sequentially.

use crate::container::{self, Index, TensorEntry};
use crate::error::{Error, Result};
use crate::options::DecodeOptions;
use crate::reference::{self, Reference};
use crate::source::{Bytes, Source};
use crate::{dsl, hash, work};
use rayon::prelude::*;

mod gguf;
mod reader;
pub use gguf::{GgufTensor, GgufView};
pub(crate) use reader::Reader;

/// An opened archive: its index, and random access to each tensor.
pub struct Archive<'a> {
    bytes: Source<'a>,
    index: Index,
    memory_limit: u64,
    reference: Option<Reference<'a>>,
}

/// What the index says about one tensor: the stable public view of a [`TensorEntry`] (whose
/// fields follow the format version), with its compressed size summed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TensorInfo<'a> {
    /// The tensor's name in the original file.
    pub name: &'a str,
    /// Its dtype as the original file names it (`BF16`, `F32`, `Q4_K`, ...).
    pub dtype: &'a str,
    /// Its shape as the original file gives it.
    pub shape: &'a [u64],
    /// Its size in the original file, in bytes.
    pub nbytes: u64,
    /// Where its bytes start in the original file.
    pub offset: u64,
    /// The bytes its chunks take in the archive.
    pub compressed_bytes: u64,
    /// The chunks it is coded in (each decodes on its own).
    pub chunks: usize,
    /// The reference tensor it is coded against, if any.
    pub reference: Option<TensorReference<'a>>,
    program: &'a dsl::Node,
}

impl TensorInfo<'_> {
    /// The tensor's program in the DSL's text form (docs/DSL.md), e.g.
    /// `fields(bf16; lanes(prev), raw(1), lanes)`.
    pub fn program(&self) -> String {
        self.program.to_string()
    }

    /// The program's shape: its operators without their parameters (`brevis inspect` groups
    /// tensors by it).
    pub fn program_shape(&self) -> String {
        self.program.shape()
    }
}

/// The reference tensor a tensor is coded against ([`TensorInfo::reference`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct TensorReference<'a> {
    /// Its name in the reference file.
    pub name: &'a str,
    /// The compressor's estimate of the tensor's size coded alone, in bytes.
    pub standalone_estimate: u64,
}

/// A reference from the bytes the caller gives: a safetensors or GGUF file as it is, or a
/// Brevis archive of one, decoded here.
pub(crate) fn load_reference(file: &[u8]) -> Result<Reference<'_>> {
    if !file.starts_with(&container::MAGIC) {
        return Reference::new(std::borrow::Cow::Borrowed(file));
    }
    let original = Archive::open(file)
        .and_then(|a| a.decompress(&DecodeOptions::default()))
        .map_err(|e| Error::invalid(format!("reference archive: {e}")))?;
    Reference::new(std::borrow::Cow::Owned(original))
}

/// [`load_reference`] of a file, read in windows within `memory_limit`: a Brevis archive is
/// decoded into an anonymous temporary file first.
pub(crate) fn load_reference_file(file: &std::fs::File, memory_limit: u64) -> Result<Reference<'_>> {
    let src = Source::file(file)?;
    if src.len() < container::MAGIC.len() as u64 || *src.read(0, container::MAGIC.len())? != container::MAGIC[..] {
        return Reference::from_source(src, memory_limit);
    }
    let archive_error = |e: Error| Error::invalid(format!("reference archive: {e}"));
    let a = Archive::open_file(file, memory_limit).map_err(archive_error)?;
    let tmp = tempfile::tempfile()?;
    a.decompress_to_file(&tmp, &DecodeOptions::default().with_memory_limit(memory_limit)).map_err(archive_error)?;
    Reference::from_owned_file(tmp, memory_limit)
}

/// A piece of the original file, in file order: a span of the residue or one chunk.
enum Piece {
    /// Bytes `[start, end)` of the index's residue.
    Residue(usize, usize),
    /// Chunk `c` of tensor `t`, `len` bytes.
    Chunk { t: usize, c: usize, len: usize },
}

/// Adds the bytes of `pieces` to the caller's progress counter, if any.
fn add_progress(opts: &DecodeOptions, pieces: &[Piece]) {
    if let Some(p) = &opts.progress {
        let n: usize = pieces.iter().map(Piece::len).sum();
        p.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Piece {
    /// Its length in the original file.
    fn len(&self) -> usize {
        match *self {
            Piece::Residue(a, b) => b - a,
            Piece::Chunk { len, .. } => len,
        }
    }
}

/// The pieces cut into groups, in order: the residue spans before a run of up to `batch` chunks,
/// and those chunks (trailing residue spans form the last group).
fn groups(pieces: &[Piece], batch: usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut k = 0;
    while k < pieces.len() {
        let mut end = k;
        while matches!(pieces.get(end), Some(Piece::Residue(..))) {
            end += 1;
        }
        let mut chunks = 0;
        while chunks < batch && matches!(pieces.get(end), Some(Piece::Chunk { .. })) {
            end += 1;
            chunks += 1;
        }
        groups.push(k..end);
        k = end;
    }
    groups
}

impl<'a> Archive<'a> {
    /// Opens an archive in memory (reading only its footer and index now), with the default
    /// memory limit.
    pub fn open(bytes: &'a [u8]) -> Result<Archive<'a>> {
        Self::open_with_limit(bytes, DecodeOptions::default().memory_limit)
    }

    /// Opens an archive; `memory_limit` bounds what reading the index and decoding one tensor
    /// may allocate.
    pub fn open_with_limit(bytes: &'a [u8], memory_limit: u64) -> Result<Archive<'a>> {
        Self::open_source(Source::Memory(bytes), memory_limit)
    }

    /// Opens an archive file (reading only its footer and index now; tensors are read as they
    /// are decoded). The file must not change while the archive is open.
    pub fn open_file(file: &'a std::fs::File, memory_limit: u64) -> Result<Archive<'a>> {
        Self::open_source(Source::file(file)?, memory_limit)
    }

    /// Opens an archive in memory or in a file (reading only its footer and index now).
    pub(crate) fn open_source(bytes: Source<'a>, memory_limit: u64) -> Result<Archive<'a>> {
        Ok(Archive { bytes, index: container::read_index_from(bytes, memory_limit)?, memory_limit, reference: None })
    }

    /// Supplies the reference the archive was made against: the reference file's bytes (a
    /// safetensors or GGUF file, or a Brevis archive of it), checked against the identity the
    /// archive records. A different or damaged reference is an error that names what the
    /// archive expects.
    pub fn set_reference(&mut self, reference: &'a [u8]) -> Result<()> {
        self.set_loaded_reference(load_reference(reference)?)
    }

    /// [`Archive::set_reference`] of a reference file, read in windows as chunks need it (within
    /// the archive's memory limit, whatever the reference's size).
    pub fn set_reference_file(&mut self, reference: &'a std::fs::File) -> Result<()> {
        self.set_loaded_reference(load_reference_file(reference, self.memory_limit)?)
    }

    /// [`Archive::set_reference`] of a reference already loaded.
    pub(crate) fn set_loaded_reference(&mut self, r: Reference<'a>) -> Result<()> {
        r.check(&self.index)?;
        if let Some(k) = self.index.residue_prefix_len() {
            if k > self.memory_limit {
                return Err(Error::Limit(format!("a reference header of {k} bytes, above the memory limit")));
            }
            // Within the reference, which `check` found to be the one the archive names.
            let prefix = r.source().read(0, k.min(r.source().len()) as usize)?;
            self.index.resolve_residue(&prefix)?;
        }
        self.reference = Some(r);
        Ok(())
    }

    /// Whether decoding needs a reference.
    pub fn needs_reference(&self) -> bool {
        self.index.reference.is_some()
    }

    /// Largest tensor [`Archive::decode_tensor`] may allocate, in bytes.
    pub fn set_memory_limit(&mut self, bytes: u64) {
        self.memory_limit = bytes;
    }

    /// The archive's index (the format's own structure; internal).
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// The size of the original file, in bytes.
    pub fn original_size(&self) -> u64 {
        self.index.original_size
    }

    /// The original file's mode and modification time, when the archive records them (format
    /// version 3, made with [`crate::Options::file_meta`]); None for older archives and for
    /// archives made without. Decoding never applies them: writers of files do
    /// ([`crate::OutputAttrs::like`]).
    pub fn file_meta(&self) -> Option<crate::file_meta::FileMeta> {
        self.index.file_meta
    }

    /// The original file's identity (its size and xxh3-64), as a reference of another archive
    /// names it ([`Archive::reference_file`]).
    pub fn original_file(&self) -> container::FileRef {
        container::FileRef { size: self.index.original_size, hash: self.index.original_hash }
    }

    /// The reference file the archive was made against (its size and hash), if any.
    pub fn reference_file(&self) -> Option<container::FileRef> {
        self.index.reference
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.index.tensors.len()
    }

    /// Whether the archive holds no tensor (a file that is not a checkpoint, say).
    pub fn is_empty(&self) -> bool {
        self.index.tensors.is_empty()
    }

    /// What the index says about tensor `i` (in file order).
    pub fn info(&self, i: usize) -> Option<TensorInfo<'_>> {
        let t = self.index.tensors.get(i)?;
        Some(TensorInfo {
            name: &t.name,
            dtype: &t.dtype,
            shape: &t.shape,
            nbytes: t.nbytes,
            offset: t.offset,
            compressed_bytes: t.compressed_len(),
            chunks: t.chunks.len(),
            reference: t
                .reference
                .as_ref()
                .map(|r| TensorReference { name: &r.name, standalone_estimate: r.standalone_estimate }),
            program: &t.program,
        })
    }

    /// The index of the tensor named `name`.
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
        crate::work::advise_huge_pages(out);
        let mut rest = out;
        let mut parts = Vec::with_capacity(t.chunks.len());
        for c in &t.chunks {
            let (a, b) = rest.split_at_mut(c.elems as usize * wb);
            parts.push(a);
            rest = b;
        }
        // One chunk per job: see `decompress_into`.
        parts
            .into_par_iter()
            .enumerate()
            .with_max_len(1)
            .try_for_each(|(c, buf)| self.decode_chunk(i, c, buf, true, None))
    }

    /// Decodes one tensor into a new buffer (at most the memory limit).
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

    /// Rebuilds the whole original file in a new anonymous in-memory file (Linux
    /// `memfd_create`, named `name`) and returns it: the original's only copy, never on disk.
    /// The file is sealed against writes and size changes once it is complete; a runtime that
    /// opens models by path (llama.cpp's `llama_model_load_from_file`) opens `/proc/self/fd/N`
    /// of its descriptor and maps the same pages, so loading a model from an archive takes about
    /// the memory of the model itself. The descriptor is close-on-exec. Every checksum is verified
    /// as by [`Archive::decompress_into`] (with `opts.verify`, the whole file's too); the
    /// original's size must be within `opts.memory_limit`. On an error the file is closed and
    /// its memory freed.
    #[cfg(target_os = "linux")]
    pub fn decompress_to_memfd(&self, name: &str, opts: &DecodeOptions) -> Result<std::fs::File> {
        use std::os::fd::FromRawFd;
        let size = self.index.original_size;
        if size > opts.memory_limit {
            return Err(Error::Limit(format!(
                "the original has {size} bytes, above the memory limit of {} bytes",
                opts.memory_limit
            )));
        }
        let name = std::ffi::CString::new(name.replace('\0', "_")).expect("no NUL left in the name");
        // SAFETY: `name` is NUL-terminated; the flags are valid.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        file.set_len(size)?;
        if size > 0 {
            // SAFETY: the memfd is this function's alone until it returns (no other process or
            // mapping can change it meanwhile).
            let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }?;
            self.decompress_into(&mut map, opts)?;
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: `fd` is open (owned by `file`); the mapping above is gone.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(file)
    }

    /// Rebuilds the whole original file into `out` (exactly its size): residue spans are
    /// copied, then every chunk is decoded into its own part of `out`, in parallel.
    pub fn decompress_into(&self, out: &mut [u8], opts: &DecodeOptions) -> Result<()> {
        if out.len() as u64 != self.index.original_size {
            return Err(Error::invalid("output buffer does not have the original size"));
        }
        let pieces = self.pieces()?;
        let fresh = work::untouched(out);
        crate::work::advise_huge_pages(out);
        // The whole-file checksum is folded while the chunks are decoded: each chunk's block
        // sums are taken as it is written (in cache) and folded as soon as the chunks before it
        // are (`hash::InOrder`). Chunks that finish early are held until then, a sixteenth of
        // their size: above `FUSED_SUMS_MAX` the checksum reads the output again instead.
        const FUSED_SUMS_MAX: usize = 1 << 32;
        let len = out.len();
        let folding = opts.verify && len <= FUSED_SUMS_MAX;
        let folder = folding.then(|| std::sync::Mutex::new(hash::InOrder::new(len, pieces.len())));
        // Per chunk: (its piece, tensor, chunk, where it starts in the output, its part of the output).
        let mut slices: Vec<(usize, usize, usize, usize, &mut [u8])> = Vec::new();
        let mut rest: &mut [u8] = out;
        let mut pos = 0;
        for (i, p) in pieces.iter().enumerate() {
            match *p {
                Piece::Residue(a, b) => {
                    let (part, r) = rest.split_at_mut(b - a);
                    part.copy_from_slice(&self.index.residue[a..b]);
                    if let Some(f) = &folder {
                        locked(f).give_bytes(i, &self.index.residue[a..b]);
                    }
                    rest = r;
                    pos += b - a;
                }
                Piece::Chunk { t, c, len: n } => {
                    let (part, r) = rest.split_at_mut(n);
                    rest = r;
                    slices.push((i, t, c, pos, part));
                    pos += n;
                }
            }
        }
        let pool = work::pool(opts.threads)?;
        pool.install(|| {
            // One chunk per job, so that an idle thread takes the next one: left to rayon's
            // splitting, each thread took about half the chunks as a few long runs, and the
            // half holding a file's big tensor (the embeddings, often first) kept one thread
            // busy long after the other ran out (MiniLM bf16: 22.5 against 12.2 ms).
            slices.into_par_iter().with_max_len(1).try_for_each(|(i, t, c, at, buf)| {
                if fresh {
                    work::populate(buf);
                }
                // The whole-file checksum covers this chunk: its own is checked only if that fails.
                // Its checksum blocks are summed as the writer passes them, in cache.
                let mut sums =
                    vec![[0u64; 8]; if folding { hash::blocks_in(at, at + buf.len(), len).len() } else { 0 }];
                let mut trail = folding.then(|| hash::Trail::new(at, buf.len(), len, &mut sums));
                self.decode_chunk(t, c, buf, !opts.verify, trail.as_mut())?;
                if let Some(f) = &folder {
                    let (head, tail) = hash::InOrder::split(buf, at, len);
                    locked(f).give(i, hash::Piece { head, sums: &sums, tail });
                }
                Ok::<(), Error>(())
            })
        })?;
        if opts.verify {
            let whole = match folder
                .and_then(|f| f.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).hash(out))
            {
                Some(h) => h,
                None => pool.install(|| hash::xxh3_64_of(&Bytes::from(&*out), 1 << 20))?,
            };
            if whole != self.index.original_hash {
                return Err(self.damaged_chunk(&pieces, &Bytes::from(&*out)));
            }
        }
        Ok(())
    }

    /// Rebuilds the whole original file into `out`, sequentially: residue spans and chunks in
    /// file order, in groups of a batch of chunks (as many as the threads and `opts.memory_limit`
    /// allow) with the residue spans before them. One group is written while the next one is
    /// decoded. Returns the bytes written.
    pub fn decompress_to(&self, out: &mut dyn std::io::Write, opts: &DecodeOptions) -> Result<u64> {
        let pieces = self.pieces()?;
        let pool = work::pool(opts.threads)?;
        let batch = work::batch(self.index.chunk_bytes, opts.memory_limit, pool.current_num_threads());
        let groups = groups(&pieces, batch);
        // Decodes the chunks of a group into `bufs` (one per chunk, reused, never shrunk).
        let decode = |g: &std::ops::Range<usize>, mut bufs: Vec<Vec<u8>>| -> Result<Vec<Vec<u8>>> {
            let chunks: Vec<(usize, usize, usize)> = pieces[g.clone()]
                .iter()
                .filter_map(|p| match *p {
                    Piece::Chunk { t, c, len } => Some((t, c, len)),
                    Piece::Residue(..) => None,
                })
                .collect();
            if bufs.len() < chunks.len() {
                bufs.resize_with(chunks.len(), Vec::new);
            }
            pool.install(|| {
                chunks.par_iter().zip(&mut bufs[..chunks.len()]).with_max_len(1).try_for_each(|(&(t, c, len), buf)| {
                    // Every byte is written by the decoder: what is reused needs no clearing.
                    buf.resize(len, 0);
                    self.decode_chunk(t, c, &mut buf[..len], !opts.verify, None)
                })
            })?;
            Ok(bufs)
        };
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        let mut written = 0u64;
        let mut emit = |g: &std::ops::Range<usize>, bufs: &[Vec<u8>]| -> Result<()> {
            let mut chunk = 0;
            for p in &pieces[g.clone()] {
                let b = match *p {
                    Piece::Residue(a, b) => &self.index.residue[a..b],
                    Piece::Chunk { len, .. } => {
                        chunk += 1;
                        &bufs[chunk - 1][..len]
                    }
                };
                out.write_all(b)?;
                if opts.verify {
                    hash.update(b);
                }
                written += b.len() as u64;
            }
            add_progress(opts, &pieces[g.clone()]);
            Ok(())
        };
        let mut ready = match groups.first() {
            Some(g) => decode(g, Vec::new())?,
            None => Vec::new(),
        };
        let mut spare = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let next = groups.get(i + 1);
            let (emitted, decoded) = std::thread::scope(|s| {
                let taken = std::mem::take(&mut spare);
                let decoding = next.map(|n| s.spawn(|| decode(n, taken)));
                let emitted = emit(g, &ready);
                let decoded = decoding.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                (emitted, decoded)
            });
            emitted?;
            if let Some(d) = decoded {
                spare = std::mem::replace(&mut ready, d?);
            }
        }
        out.flush()?;
        if opts.verify && hash.digest() != self.index.original_hash {
            return Err(Error::Checksum("whole file".into()));
        }
        Ok(written)
    }

    /// Rebuilds the whole original file into `file` (a regular file, opened for reading and
    /// writing) with positioned writes: each worker decodes a chunk into a buffer and writes it
    /// at its place, or leaves it to the worker that is writing (one writes at a time), so that
    /// decoding and writing overlap without a writer thread, and memory holds at most three
    /// chunks per worker. The file is set to the original's length first. With
    /// `opts.verify`, the whole-file checksum is verified as it is written: each chunk's part
    /// is summed while it is still in cache and folded in order as soon as the pieces before it
    /// are (the residue spans from the index, the bytes of checksum blocks cut by a chunk's ends
    /// from the chunk); only the file's last block is read back. The chunks are decoded in
    /// windows of about `opts.memory_limit` bytes of output, so that the chunks held for the
    /// fold (their sums, a sixteenth of them) stay within it. Returns the bytes written; on
    /// error the file's contents are unspecified (callers write to a temporary file).
    pub fn decompress_to_file(&self, file: &std::fs::File, opts: &DecodeOptions) -> Result<u64> {
        let pieces = self.pieces()?;
        let size = self.index.original_size;
        let len = usize::try_from(size).map_err(|_| Error::Limit("original too large for this machine".into()))?;
        file.set_len(size).map_err(Error::write)?;
        // The whole-file checksum is folded while the chunks are decoded (`hash::InOrder`), by
        // the worker that completes the pieces before a chunk: folded after the decode, it was
        // a serial 2 ms at the end of a 105 MB K-quant file's.
        let folder = opts.verify.then(|| std::sync::Mutex::new(hash::InOrder::new(len, pieces.len())));
        let mut chunks = Vec::new();
        let mut pos = 0usize;
        for (i, p) in pieces.iter().enumerate() {
            match *p {
                Piece::Residue(a, b) => {
                    let bytes = &self.index.residue[a..b];
                    write_all_at(file, bytes, pos as u64)?;
                    if let Some(f) = &folder {
                        locked(f).give_bytes(i, bytes);
                    }
                    pos += b - a;
                    add_progress(opts, std::slice::from_ref(p));
                }
                Piece::Chunk { t, c, len: n } => {
                    chunks.push((i, t, c, n, pos));
                    pos += n;
                }
            }
        }
        let pool = work::pool(opts.threads)?;
        let writer = Writer::new(file, pool.current_num_threads());
        // Decodes one chunk, gives its checksum blocks to the fold and the chunk to the writer.
        let one = |&(i, t, c, n, at): &(usize, usize, usize, usize, usize)| -> Result<()> {
            let mut buf = writer.buffer(n);
            let mut sums = vec![[0u64; 8]; if folder.is_some() { hash::blocks_in(at, at + n, len).len() } else { 0 }];
            // The checksum blocks are summed as the writer passes them, in cache.
            let mut trail = folder.is_some().then(|| hash::Trail::new(at, n, len, &mut sums));
            let r = self.decode_chunk(t, c, &mut buf[..n], !opts.verify, trail.as_mut());
            match r {
                Ok(()) => {
                    if let Some(f) = &folder {
                        let (head, tail) = hash::InOrder::split(&buf[..n], at, len);
                        locked(f).give(i, hash::Piece { head, sums: &sums, tail });
                    }
                    writer.write(buf, n, at as u64)?
                }
                Err(_) => writer.recycle(buf),
            }
            if let Some(p) = &opts.progress {
                p.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
            r
        };
        // Chunks are decoded in windows of about the memory limit: a chunk done before the
        // pieces ahead of it is held by the fold (its sums, a sixteenth of it) until they are.
        let window = usize::try_from(opts.memory_limit).unwrap_or(usize::MAX).max(16 << 20);
        let mut rest = &chunks[..];
        while let Some(&(.., start)) = rest.first() {
            let k = rest.iter().take_while(|&&(.., at)| at - start < window).count();
            let (now, later) = rest.split_at(k);
            rest = later;
            let r = pool.install(|| now.par_iter().with_max_len(1).try_for_each(one));
            writer.flush()?;
            r?;
        }
        if let Some(f) = folder {
            let written = Source::file(file)?.all()?;
            let f = f.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
            if f.hash_of(&written)? != Some(self.index.original_hash) {
                return Err(self.damaged_chunk(&pieces, &written));
            }
        }
        Ok(size)
    }

    /// The error of a whole-file decode into `out` (memory, or the file as written) whose
    /// checksum failed: the first chunk whose own checksum fails, else the whole file's.
    fn damaged_chunk(&self, pieces: &[Piece], out: &Bytes) -> Error {
        let mut pos = 0;
        for p in pieces {
            match *p {
                Piece::Residue(a, b) => pos += b - a,
                Piece::Chunk { t, c, len } => {
                    let te = &self.index.tensors[t];
                    if te.chunks[c].checksum.is_some() {
                        match out.with_read(pos, pos + len, |b| self.index.chunk_ok(t, c, b)) {
                            Ok(true) => {}
                            Ok(false) => return Error::Checksum(format!("tensor {:?}, chunk {c}", te.name)),
                            Err(e) => return e,
                        }
                    }
                    pos += len;
                }
            }
        }
        Error::Checksum("whole file".into())
    }

    /// The pieces of the original in file order, once the archive can be decoded whole (a
    /// reference it needs has been supplied).
    fn pieces(&self) -> Result<Vec<Piece>> {
        if self.reference.is_none() {
            if let Some(e) = reference::missing(&self.index) {
                return Err(e);
            }
        }
        let mut pieces = Vec::new();
        let mut rpos = 0usize;
        let mut pos = 0u64;
        let mut residue = |pieces: &mut Vec<Piece>, n: u64| {
            if n > 0 {
                pieces.push(Piece::Residue(rpos, rpos + n as usize));
                rpos += n as usize;
            }
        };
        for (t, te) in self.index.tensors.iter().enumerate() {
            residue(&mut pieces, te.offset - pos);
            for (c, ce) in te.chunks.iter().enumerate() {
                pieces.push(Piece::Chunk { t, c, len: (ce.elems * te.word_bytes()) as usize });
            }
            pos = te.offset + te.nbytes;
        }
        residue(&mut pieces, self.index.original_size - pos);
        Ok(pieces)
    }

    /// Decodes chunk `c` of tensor `t` into `buf`; `check`: verify the chunk's checksum (a
    /// whole-file decode that verifies the whole file's checksum leaves it to that, which covers
    /// every byte, and looks for the damaged chunk only when it fails: [`Archive::damaged_chunk`]).
    fn decode_chunk(
        &self,
        t: usize,
        c: usize,
        buf: &mut [u8],
        check: bool,
        trail: Option<&mut hash::Trail>,
    ) -> Result<()> {
        let refs = |te: &TensorEntry, c: usize| -> Result<dsl::Stream> {
            let r = self.reference.as_ref().ok_or_else(|| {
                reference::missing(&self.index)
                    .unwrap_or_else(|| Error::corrupt("a tensor coded against a reference in an archive without one"))
            })?;
            let tr = te.reference.as_ref().ok_or_else(|| Error::corrupt("no reference tensor"))?;
            let (span, bytes) =
                r.tensor(&tr.name).ok_or_else(|| Error::invalid(format!("reference lacks {:?}", tr.name)))?;
            let wb = te.word_bytes() as usize;
            let start = c * te.chunk_elems as usize * wb;
            let len = te.chunks[c].elems as usize * wb;
            // Under `derive(k)` the program reads k of the reference tensor, predicted chunk by chunk.
            if let dsl::Op::Derive(d) = &te.program.op {
                let elems =
                    d.kind.elems_of(te.nbytes).ok_or_else(|| Error::corrupt("derive: not a whole number of blocks"))?;
                let part = dsl::ops::derive::predict(d.kind, &span.dtype, bytes, elems, start, len)?;
                return dsl::Stream::from_le_bytes(dsl::Ty::u(te.word_bits), &part);
            }
            if start + len > bytes.len() {
                return Err(Error::invalid("reference tensor too short"));
            }
            bytes.with_read(start, start + len, |part| dsl::Stream::from_le_bytes(dsl::Ty::u(te.word_bits), part))?
        };
        container::decode_chunk(self.bytes, &self.index, t, c, buf, Some(&refs), check, trail)
    }
}

/// Positioned writes of decoded chunks from several workers, one at a time: a worker whose
/// chunk is ready writes it when no other is writing, and otherwise leaves it to the one that is
/// and goes on decoding. (Positioned writes from several threads to one file wait on the file's
/// lock; on tmpfs that wait spun the CPU it would have decoded on.) At most twice as many chunks
/// as workers wait; beyond that a worker waits its turn. The buffers are reused.
struct Writer<'f> {
    file: &'f std::fs::File,
    /// Held while writing.
    turn: std::sync::Mutex<()>,
    /// Chunks waiting to be written (a buffer, the chunk's length in it), with their offsets.
    queue: std::sync::Mutex<Vec<(Vec<u8>, usize, u64)>>,
    /// Buffers written, for the next chunks (each as long as the longest chunk it held).
    spare: std::sync::Mutex<Vec<Vec<u8>>>,
    /// The first write error.
    failed: std::sync::Mutex<Option<Error>>,
    max_queued: usize,
}

impl<'f> Writer<'f> {
    fn new(file: &'f std::fs::File, threads: usize) -> Self {
        use std::sync::Mutex;
        let (turn, failed) = (Mutex::new(()), Mutex::new(None));
        Writer { file, turn, queue: Mutex::default(), spare: Mutex::default(), failed, max_queued: 2 * threads }
    }

    /// A buffer of at least `n` bytes for a chunk (one written before, or a new one). A buffer
    /// keeps its length from chunk to chunk: zero-filling it for each chunk longer than the last
    /// was 2% of a K-quant file's decode (`perf`). Every byte of a chunk is written by the
    /// decoder, so what is reused needs no clearing.
    fn buffer(&self, n: usize) -> Vec<u8> {
        let mut buf = locked(&self.spare).pop().unwrap_or_default();
        if buf.len() < n {
            buf.resize(n, 0);
        }
        buf
    }

    fn recycle(&self, buf: Vec<u8>) {
        locked(&self.spare).push(buf);
    }

    /// Writes the first `n` bytes of `buf` at `at`, now or by the worker that is writing; an
    /// error is a write error (this one's or another's) not yet reported.
    fn write(&self, buf: Vec<u8>, n: usize, at: u64) -> Result<()> {
        let turn = match self.turn.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let mut q = locked(&self.queue);
                if q.len() < self.max_queued {
                    q.push((buf, n, at));
                    return self.error();
                }
                drop(q);
                locked(&self.turn)
            }
        };
        self.put(buf, n, at);
        // What others queued meanwhile (a chunk queued just as this worker stops is written by
        // the next one, or by `flush`).
        self.drain();
        drop(turn);
        self.error()
    }

    /// Writes whatever is still queued.
    fn flush(&self) -> Result<()> {
        let _turn = locked(&self.turn);
        self.drain();
        self.error()
    }

    /// Writes the queued chunks (the caller holds the turn), taking each with the queue's lock
    /// released during the write: a `while let` on the lock's guard would hold it through the
    /// write, and the workers that queue would wait for it.
    fn drain(&self) {
        loop {
            let next = locked(&self.queue).pop();
            match next {
                Some((b, n, a)) => self.put(b, n, a),
                None => return,
            }
        }
    }

    fn put(&self, buf: Vec<u8>, n: usize, at: u64) {
        if let Err(e) = write_all_at(self.file, &buf[..n], at) {
            locked(&self.failed).get_or_insert(e);
        }
        self.recycle(buf);
    }

    /// The write error not yet reported, if any (each is reported once: the decode stops there).
    fn error(&self) -> Result<()> {
        locked(&self.failed).take().map_or(Ok(()), Err)
    }
}

/// The value behind `m` (a panic while it was held leaves nothing half-done that matters here).
fn locked<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes all of `data` at `offset` of `file`; failures are write errors
/// ([`Error::is_write_error`]).
fn write_all_at(file: &std::fs::File, data: &[u8], offset: u64) -> Result<()> {
    #[cfg(unix)]
    let r = std::os::unix::fs::FileExt::write_all_at(file, data, offset);
    #[cfg(windows)]
    let r = (|| {
        use std::os::windows::fs::FileExt;
        let (mut data, mut offset) = (data, offset);
        while !data.is_empty() {
            match file.seek_write(data, offset)? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => {
                    data = &data[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    })();
    r.map_err(Error::write)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks of several lengths handed to the writer by several threads, in any order, all land
    /// at their offsets, and nothing else is written: buffers are reused, and one longer than
    /// its chunk writes the chunk's bytes only.
    #[cfg(unix)]
    #[test]
    fn writer_puts_every_chunk_in_place() {
        let f = tempfile::tempfile().unwrap();
        let lens: Vec<usize> = (0..97).map(|c| [1000, 300, 1700, 5][c % 4]).collect();
        let starts: Vec<usize> = lens.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
        let size = lens.iter().sum::<usize>();
        let want: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
        let w = Writer::new(&f, 4);
        // The first one queued while another worker holds the turn.
        let turn = locked(&w.turn);
        w.write(want[..lens[0]].to_vec(), lens[0], 0).unwrap();
        drop(turn);
        work::pool(4)
            .unwrap()
            .install(|| {
                (1..lens.len()).into_par_iter().with_max_len(1).rev().try_for_each(|c| {
                    let (n, at) = (lens[c], starts[c]);
                    let mut buf = w.buffer(n);
                    assert!(buf.len() >= n);
                    // What the buffer holds past the chunk must not reach the file.
                    buf.fill(0xEE);
                    buf[..n].copy_from_slice(&want[at..at + n]);
                    w.write(buf, n, at as u64)
                })
            })
            .unwrap();
        w.flush().unwrap();
        let mut got = vec![0u8; size + 1];
        let read = std::os::unix::fs::FileExt::read_at(&f, &mut got, 0).unwrap();
        assert_eq!(read, size, "the file has bytes past the chunks");
        assert!(got[..size] == want[..], "the file differs from the chunks written");
        assert!(!locked(&w.spare).is_empty());
    }

    /// A chunk that cannot be written is a write error, reported once, whichever worker wrote it.
    #[test]
    fn writer_reports_a_failed_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, b"").unwrap();
        let read_only = std::fs::File::open(&path).unwrap();
        let w = Writer::new(&read_only, 2);
        let e = w.write(vec![1u8; 100], 100, 0).unwrap_err();
        assert!(e.is_write_error(), "{e}");
        w.flush().unwrap();
        // Queued while another worker holds the turn: the error comes from the flush.
        let turn = locked(&w.turn);
        w.write(vec![2u8; 100], 100, 100).unwrap();
        drop(turn);
        assert!(w.flush().unwrap_err().is_write_error());
    }
}
