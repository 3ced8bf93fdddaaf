//! The archive: header, chunk payloads, meta (index + residue), footer. See docs/FORMAT.md.
//!
//! The meta block is one zstd frame holding the index and the residue (the original's bytes
//! outside tensor data: the safetensors length prefix and JSON header, padding, small gaps), so
//! names, dtypes and shapes that appear in both cost little. Everything read from an archive is
//! checked against the bytes that remain and against the caller's memory limit before anything
//! is allocated from it.

use crate::coder::bitio::{put_bytes, put_varint, ByteReader};
use crate::dsl::{fused, Env, Node, Stream, Ty};
use crate::error::{Error, Result};
use crate::file_meta::FileMeta;
use crate::hash::{xxh3_64, Trail};
use crate::source::Source;

mod gguf_residue;
pub mod header_model;
pub mod residue_delta;
pub mod writer;

pub use writer::{write_archive, Writer};

pub const MAGIC: [u8; 8] = *b"\x89BRV\r\n\x1a\n";
pub const END_MAGIC: [u8; 8] = *b"BRVINDEX";
/// Format version written by this build.
pub const VERSION: u16 = 15;
/// Oldest format version this build reads.
pub const MIN_VERSION: u16 = 1;
pub const HEADER_LEN: usize = 16;
pub const FOOTER_LEN: usize = 32;
/// Largest original size of one chunk. Bounds the memory one chunk's decoding may take
/// (a few times this, for the intermediate streams), whatever the archive says.
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;
/// Largest decoded meta block (index + residue) a reader accepts.
pub const MAX_META_BYTES: u64 = 256 << 20;
/// Level of the zstd frame that holds the meta block (the `default` and `max` compression
/// levels; `Level::meta_zstd`).
pub(crate) const META_LEVEL: i32 = 19;

/// A raw-content zstd dictionary for the meta block: the vocabulary of safetensors headers
/// (JSON keys, dtype names, words common in tensor names), so that even a file of a few tensors
/// pays little for its header. Part of the format: changing it changes the format version.
pub const META_DICT: &[u8] = br#"{"__metadata__":{"format":"pt"},"dtype":"F32","shape":[1],"data_offsets":[0,0]},"dtype":"F16","shape":[],"data_offsets":[],"dtype":"BF16","shape":[],"data_offsets":[],"dtype":"I64","shape":[],"data_offsets":[],"dtype":"I32","dtype":"U8","dtype":"I8","dtype":"BOOL","dtype":"F64","dtype":"F8_E4M3","dtype":"F8_E5M2","dtype":"U16","dtype":"I16","dtype":"U32","dtype":"U64","#
    .as_slice();

fn zstd_decode_dict(input: &[u8], n: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(n);
    let mut dec = zstd::bulk::Decompressor::with_dictionary(META_DICT)?;
    let got = dec.decompress_to_buffer(input, &mut out).map_err(|e| Error::corrupt(format!("index: {e}")))?;
    if got != n {
        return Err(Error::corrupt("index: wrong decoded length"));
    }
    Ok(out)
}

/// From format version 13, a chunk of at most this many original bytes stores the low 32 bits
/// of its xxh3-64 (FORMAT.md, Checksums): on a small model's many small tensors the full 8 bytes
/// were most of the index.
pub const SHORT_CHECK_BYTES: u64 = 1 << 16;

/// Whether a chunk of `elems` words of `word_bits` bits stores a 32-bit checksum in format
/// `version`.
pub fn short_check(version: u16, word_bits: u32, elems: u64) -> bool {
    version >= 13 && elems.saturating_mul(word_bits as u64 / 8) <= SHORT_CHECK_BYTES
}

#[derive(Clone, Debug)]
pub struct ChunkEntry {
    /// Offset of the payload in the archive.
    pub offset: u64,
    pub len: u64,
    pub elems: u64,
    /// xxh3-64 of the chunk's original bytes (its low 32 bits where [`short_check`]); None for
    /// programs that read no payload (generators and copies), which the index checksum already
    /// covers. [`Index::chunk_ok`] compares it.
    pub checksum: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct TensorEntry {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    /// Width of the root stream's words (8, 16, 32 or 64).
    pub word_bits: u32,
    /// Byte range in the original file.
    pub offset: u64,
    pub nbytes: u64,
    pub program: Node,
    /// Elements per chunk (the last chunk may be shorter), from the index's chunk size.
    pub chunk_elems: u64,
    pub chunks: Vec<ChunkEntry>,
    /// The reference tensor this one is coded against, when its program reads one.
    pub reference: Option<TensorRef>,
    /// Name, dtype, shape and byte range come from the safetensors header (kept in the residue)
    /// rather than from the index.
    pub from_header: bool,
}

/// Identity of the reference tensor a tensor was coded against.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorRef {
    /// Its name in the reference file.
    pub name: String,
    /// xxh3-64 of its bytes.
    pub hash: u64,
    /// Informational: the encoder's estimate of the tensor's size coded alone, in bytes.
    pub standalone_estimate: u64,
}

/// Identity of the reference file (the original bytes, also when given as an archive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FileRef {
    /// Its size in bytes.
    pub size: u64,
    /// The xxh3-64 of its bytes.
    pub hash: u64,
}

impl TensorEntry {
    pub fn compressed_len(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }
    pub fn word_bytes(&self) -> u64 {
        self.word_bits as u64 / 8
    }
}

/// The index record of a chunk of `n` words whose payload starts at `pos` (before `data_end`):
/// its length and checksum where the program reads payload (`payload`: the format version and
/// word width, which say how wide the checksum is), else an empty chunk.
fn read_chunk(r: &mut ByteReader, payload: Option<(u16, u32)>, n: u64, pos: u64, data_end: u64) -> Result<ChunkEntry> {
    let (len, checksum) = match payload {
        Some((version, word_bits)) if short_check(version, word_bits, n) => (r.varint()?, Some(r.u32_le()? as u64)),
        Some(_) => (r.varint()?, Some(r.u64_le()?)),
        None => (0, None),
    };
    pos.checked_add(len).filter(|&p| p <= data_end).ok_or_else(|| Error::corrupt("chunk out of range"))?;
    Ok(ChunkEntry { offset: pos, len, elems: n, checksum })
}

/// Chunk element counts of a tensor of `elems` elements.
pub fn chunk_sizes(elems: u64, chunk_elems: u64) -> impl Iterator<Item = u64> {
    let mut left = elems;
    std::iter::from_fn(move || {
        (left > 0).then(|| {
            let n = left.min(chunk_elems);
            left -= n;
            n
        })
    })
}

#[derive(Clone, Debug)]
pub struct Index {
    pub version: u16,
    pub original_size: u64,
    pub original_hash: u64,
    /// The reference file, when some tensor is coded against one.
    pub reference: Option<FileRef>,
    /// Original bytes per chunk: tensors of `w`-byte words are cut every `max(1, chunk_bytes / w)` words.
    pub chunk_bytes: u64,
    /// Every original byte outside tensor data, in file order (empty while `residue_delta`
    /// waits for the reference).
    pub residue: Vec<u8>,
    /// The residue coded against the reference's header (residue model 3), until the reference
    /// is supplied ([`Index::resolve_residue`]).
    pub residue_delta: Option<residue_delta::Delta>,
    pub tensors: Vec<TensorEntry>,
    /// The original file's mode and modification time, when the writer was given them
    /// (version 3's record 1; versions 1 and 2 have none).
    pub file_meta: Option<FileMeta>,
}

/// Tag of the record that holds the original file's mode and modification time.
const RECORD_FILE_META: u64 = 1;

/// Writes the records that follow the entries (version 3): a count, then each record as a
/// tag and its bytes.
fn write_records(out: &mut Vec<u8>, file_meta: Option<&FileMeta>) {
    let Some(m) = file_meta else {
        put_varint(out, 0);
        return;
    };
    put_varint(out, 1);
    put_varint(out, RECORD_FILE_META);
    let mut body = Vec::new();
    put_varint(&mut body, (m.mode & FileMeta::MODE_BITS) as u64);
    put_varint(&mut body, ((m.mtime << 1) ^ (m.mtime >> 63)) as u64);
    put_varint(&mut body, m.mtime_nanos as u64);
    put_bytes(out, &body);
}

/// Reads the records that follow the entries (version 3). Unknown tags are skipped, and so are
/// bytes after the fields a known record has, so that later versions can add either.
fn read_records(r: &mut ByteReader) -> Result<Option<FileMeta>> {
    // Each record takes at least 2 bytes (tag, length).
    let n = r.len(r.remaining() as u64 / 2)?;
    let mut file_meta = None;
    for _ in 0..n {
        let tag = r.varint()?;
        let mut body = ByteReader::new(r.bytes()?);
        if tag != RECORD_FILE_META {
            continue;
        }
        if file_meta.is_some() {
            return Err(Error::corrupt("file metadata recorded twice"));
        }
        let bad = |what: &str| Error::corrupt(format!("file metadata: {what} out of range"));
        let mode =
            u32::try_from(body.varint()?).ok().filter(|&m| m <= FileMeta::MODE_BITS).ok_or_else(|| bad("mode"))?;
        let z = body.varint()?;
        let mtime = (z >> 1) as i64 ^ -((z & 1) as i64);
        let mtime_nanos =
            u32::try_from(body.varint()?).ok().filter(|&n| n < 1_000_000_000).ok_or_else(|| bad("nanoseconds"))?;
        file_meta = Some(FileMeta { mode, mtime, mtime_nanos });
    }
    Ok(file_meta)
}

impl Index {
    /// Whether `bytes` are what chunk `c` of tensor `t` checks against: its stored xxh3-64, or
    /// that hash's low 32 bits where the chunk stores a short one ([`short_check`]). Chunks
    /// without a checksum always pass.
    pub fn chunk_ok(&self, t: usize, c: usize, bytes: &[u8]) -> bool {
        let te = &self.tensors[t];
        let ch = &te.chunks[c];
        // (An index the compressor built holds the whole hash of a short chunk: compare the
        // stored half either way.)
        let mask = if short_check(self.version, te.word_bits, ch.elems) { 0xFFFF_FFFF } else { u64::MAX };
        ch.checksum.is_none_or(|h| h & mask == xxh3_64(bytes) & mask)
    }

    /// The original byte ranges outside all tensors, in order.
    pub fn residue_spans(&self) -> Vec<(u64, u64)> {
        let mut spans = Vec::new();
        let mut pos = 0u64;
        for t in &self.tensors {
            if t.offset > pos {
                spans.push((pos, t.offset - pos));
            }
            pos = t.offset + t.nbytes;
        }
        if self.original_size > pos {
            spans.push((pos, self.original_size - pos));
        }
        spans
    }

    fn write(&self, out: &mut Vec<u8>) {
        let (model, stored) = match &self.residue_delta {
            Some(d) => (header_model::REF_DELTA, residue_delta::store(d)),
            None => header_model::encode(&self.residue),
        };
        let (head, tail) = self.write_around(model, stored.len());
        out.extend_from_slice(&head);
        out.extend_from_slice(&stored);
        out.extend_from_slice(&tail);
    }

    /// The serialized index without its stored residue: what comes before it (ending with the
    /// residue's model and length) and what comes after it.
    pub(crate) fn write_around(&self, model: u8, stored_len: usize) -> (Vec<u8>, Vec<u8>) {
        let mut head = Vec::new();
        let out = &mut head;
        put_varint(out, self.original_size);
        out.extend_from_slice(&self.original_hash.to_le_bytes());
        match &self.reference {
            None => out.push(0),
            Some(f) => {
                out.push(1);
                put_varint(out, f.size);
                out.extend_from_slice(&f.hash.to_le_bytes());
            }
        }
        put_varint(out, self.chunk_bytes);
        out.push(model);
        put_varint(out, stored_len as u64);
        let mut tail = Vec::new();
        let out = &mut tail;
        put_varint(out, self.tensors.len() as u64);
        for t in &self.tensors {
            if t.from_header {
                out.push(1);
            } else {
                out.push(0);
                put_bytes(out, t.name.as_bytes());
                put_bytes(out, t.dtype.as_bytes());
                put_varint(out, t.shape.len() as u64);
                for &d in &t.shape {
                    put_varint(out, d);
                }
                put_varint(out, t.word_bits as u64);
                put_varint(out, t.offset);
                put_varint(out, t.nbytes);
            }
            put_bytes(out, &t.program.to_bytes());
            if t.program.uses_reference() {
                let r = t.reference.as_ref().expect("a tensor coded against a reference records it");
                put_bytes(out, r.name.as_bytes());
                out.extend_from_slice(&r.hash.to_le_bytes());
                put_varint(out, r.standalone_estimate);
            }
            if t.program.reads_payload() {
                for c in &t.chunks {
                    put_varint(out, c.len);
                    let h = c.checksum.unwrap_or(0);
                    // The layout of this build's version, which the header it writes gives.
                    if short_check(VERSION, t.word_bits, c.elems) {
                        out.extend_from_slice(&(h as u32).to_le_bytes());
                    } else {
                        out.extend_from_slice(&h.to_le_bytes());
                    }
                }
            }
        }
        write_records(out, self.file_meta.as_ref());
        (head, tail)
    }

    fn read(bytes: &[u8], version: u16, data_end: u64, memory_limit: u64) -> Result<Index> {
        // Chunk entries are made for every chunk, also of payload-free tensors: bound them.
        let mut entries_left = memory_limit / std::mem::size_of::<ChunkEntry>() as u64;
        let mut r = ByteReader::new(bytes);
        let original_size = r.varint()?;
        let original_hash = r.u64_le()?;
        let reference = match r.u8()? {
            0 => None,
            1 => Some(FileRef { size: r.varint()?, hash: r.u64_le()? }),
            _ => return Err(Error::corrupt("bad reference flag")),
        };
        let chunk_bytes = r.varint()?;
        if chunk_bytes == 0 || chunk_bytes > MAX_CHUNK_BYTES {
            return Err(Error::corrupt("chunk size out of range"));
        }
        let (residue, residue_delta) =
            read_residue(&mut r, version, reference.is_some(), original_size.min(memory_limit))?;
        let residue_bytes = residue_delta.as_ref().map_or(residue.len() as u64, |d| d.len);
        let mut header_spans: Option<std::vec::IntoIter<crate::tensor::safetensors::TensorSpan>> = None;
        let mut pos = HEADER_LEN as u64;
        // Every tensor takes at least 3 index bytes (kind, program length, operator id): bound
        // the count before allocating.
        let nt = r.len(r.remaining() as u64 / 3)?;
        let mut tensors = Vec::with_capacity(nt);
        let mut orig_pos = 0u64;
        let mut tensor_bytes = 0u64;
        for _ in 0..nt {
            let from_header = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(Error::corrupt("bad tensor entry kind")),
            };
            let (name, dtype, shape, word_bits, offset, nbytes) = if from_header {
                if residue_delta.is_some() {
                    return Err(Error::corrupt("tensors described by a header coded against a reference"));
                }
                header_placement(&mut header_spans, &residue, original_size)?
            } else {
                read_placement(&mut r)?
            };
            if !matches!(word_bits, 8 | 16 | 32 | 64) {
                return Err(Error::corrupt(format!("tensor {name:?}: bad word width")));
            }
            let wb = word_bits as u64 / 8;
            let end = offset.checked_add(nbytes).ok_or_else(|| Error::corrupt("tensor range overflows"))?;
            if offset < orig_pos || end > original_size || nbytes % wb != 0 {
                return Err(Error::corrupt(format!("tensor {name:?}: byte range out of order or out of range")));
            }
            orig_pos = end;
            tensor_bytes += nbytes;
            let program = Node::parse(r.bytes()?, Ty::u(word_bits)).map_err(|e| match e {
                Error::Unsupported(m) => Error::Unsupported(format!("tensor {name:?}: {m}")),
                e => Error::corrupt(format!("tensor {name:?}: bad program: {e}")),
            })?;
            let tref = if program.uses_reference() {
                if reference.is_none() {
                    return Err(Error::corrupt(format!("tensor {name:?} reads a reference the archive does not name")));
                }
                let rname = String::from_utf8(r.bytes()?.to_vec())
                    .map_err(|_| Error::corrupt("reference name is not UTF-8"))?;
                Some(TensorRef { name: rname, hash: r.u64_le()?, standalone_estimate: r.varint()? })
            } else {
                None
            };
            let chunk_elems = (chunk_bytes / wb).max(1);
            let elems = nbytes / wb;
            let nchunks = if elems == 0 { 0 } else { elems.div_ceil(chunk_elems) };
            let payload = program.reads_payload();
            entries_left = entries_left
                .checked_sub(nchunks)
                .ok_or_else(|| Error::Limit(format!("tensor {name:?}: {nchunks} chunks exceed the memory limit")))?;
            // A payload-bearing chunk takes at least 5 index bytes (9 before version 13).
            let least = if version >= 13 { 5 } else { 9 };
            if payload && nchunks > r.remaining() as u64 / least {
                return Err(Error::corrupt(format!("tensor {name:?}: more chunks than the index holds")));
            }
            let mut chunks = Vec::with_capacity(if payload { nchunks as usize } else { 0 });
            for n in chunk_sizes(elems, chunk_elems) {
                let c = read_chunk(&mut r, payload.then_some((version, word_bits)), n, pos, data_end)?;
                pos = c.offset + c.len;
                chunks.push(c);
            }
            tensors.push(TensorEntry {
                name,
                dtype,
                shape,
                word_bits,
                offset,
                nbytes,
                program,
                chunk_elems,
                chunks,
                reference: tref,
                from_header,
            });
        }
        let file_meta = if version >= 3 { read_records(&mut r)? } else { None };
        if !r.is_empty() {
            return Err(Error::corrupt("index: trailing bytes"));
        }
        if pos != data_end {
            return Err(Error::corrupt("payload sizes do not add up"));
        }
        if tensor_bytes.checked_add(residue_bytes) != Some(original_size) {
            return Err(Error::corrupt("tensors and residue do not add up to the original size"));
        }
        Ok(Index {
            version,
            original_size,
            original_hash,
            reference,
            chunk_bytes,
            residue,
            residue_delta,
            tensors,
            file_meta,
        })
    }

    /// How many of the reference file's first bytes the residue is coded against, while it
    /// waits for them ([`Index::resolve_residue`]).
    pub fn residue_prefix_len(&self) -> Option<u64> {
        self.residue_delta.as_ref().map(|d| d.prefix_len)
    }

    /// Decodes a residue coded against the reference, given the reference file's first
    /// [`Index::residue_prefix_len`] bytes (the reference is checked first: `Reference::check`).
    pub fn resolve_residue(&mut self, prefix: &[u8]) -> Result<()> {
        if let Some(d) = &self.residue_delta {
            self.residue = residue_delta::decode(d, prefix)?;
            self.residue_delta = None;
        }
        Ok(())
    }
}

/// The name, dtype, shape, word width and byte range of a tensor described by the index itself
/// (not by the safetensors header).
fn read_placement(r: &mut ByteReader) -> Result<(String, String, Vec<u64>, u32, u64, u64)> {
    let name = String::from_utf8(r.bytes()?.to_vec()).map_err(|_| Error::corrupt("tensor name is not UTF-8"))?;
    let dtype = String::from_utf8(r.bytes()?.to_vec()).map_err(|_| Error::corrupt("dtype is not UTF-8"))?;
    let ndim = r.len(r.remaining() as u64)?;
    let shape = (0..ndim).map(|_| r.varint()).collect::<Result<Vec<_>>>()?;
    let word_bits = r.len(64)? as u32;
    Ok((name, dtype, shape, word_bits, r.varint()?, r.varint()?))
}

/// The residue of an index at its model byte (versions 2 on; version 1 keeps it verbatim),
/// decoded, or kept stored when it is coded against the reference (residue model 3, version
/// 15 on: the index must name a reference, `has_reference`); `limit` bounds its length.
fn read_residue(
    r: &mut ByteReader,
    version: u16,
    has_reference: bool,
    limit: u64,
) -> Result<(Vec<u8>, Option<residue_delta::Delta>)> {
    let model = if version >= 2 { r.u8()? } else { header_model::VERBATIM };
    let residue_len = r.len(r.remaining() as u64)?;
    let stored = r.take(residue_len)?;
    if model == header_model::REF_DELTA && version >= 15 {
        if !has_reference {
            return Err(Error::corrupt("a residue coded against a reference the archive does not name"));
        }
        return Ok((Vec::new(), Some(residue_delta::parse(stored, limit)?)));
    }
    Ok((header_model::decode(model, stored, limit)?, None))
}

/// The placement of the next tensor that the safetensors header kept in `residue` describes
/// (`spans`: that header's tensors, parsed at the first).
fn header_placement(
    spans: &mut Option<std::vec::IntoIter<crate::tensor::safetensors::TensorSpan>>,
    residue: &[u8],
    original_size: u64,
) -> Result<(String, String, Vec<u64>, u32, u64, u64)> {
    if spans.is_none() {
        let parsed = crate::tensor::safetensors::layout_from_prefix(residue, original_size)
            .map_err(|e| Error::corrupt(format!("the kept safetensors header does not parse: {e}")))?;
        *spans = Some(parsed.into_iter());
    }
    let s = spans
        .as_mut()
        .and_then(|it| it.next())
        .ok_or_else(|| Error::corrupt("more header tensors in the index than in the header"))?;
    let (wb, offset, nbytes) = (s.word_bits(), s.start, s.len());
    Ok((s.name, s.dtype.name().to_string(), s.shape, wb, offset, nbytes))
}

/// Reads and validates the header, footer and meta block from any source (reading only those).
/// `memory_limit` bounds the decoded meta.
pub fn read_index_from(src: Source, memory_limit: u64) -> Result<Index> {
    let len = src.len();
    if len < (HEADER_LEN + FOOTER_LEN) as u64 {
        let head = src.read(0, len.min(8) as usize)?;
        return Err(Error::corrupt(if head.len() >= 8 && head[..8] == MAGIC {
            "archive is truncated"
        } else {
            "not a Brevis archive (too short)"
        }));
    }
    let archive = src.read(0, HEADER_LEN)?;
    if archive[..8] != MAGIC {
        return Err(Error::corrupt("not a Brevis archive (bad magic number)"));
    }
    let version = u16::from_le_bytes([archive[8], archive[9]]);
    if !(MIN_VERSION..=VERSION).contains(&version) {
        return Err(Error::Unsupported(format!(
            "format version {version}; this build reads versions {MIN_VERSION} to {VERSION}"
        )));
    }
    if archive[10..16] != [0u8; 6] {
        return Err(Error::corrupt("reserved header bytes are not zero"));
    }
    let body_end = len - FOOTER_LEN as u64;
    let foot = src.read(body_end, FOOTER_LEN)?;
    if foot[24..] != END_MAGIC {
        return Err(Error::corrupt("archive is truncated or its footer is damaged"));
    }
    let word = |i: usize| u64::from_le_bytes(foot[8 * i..8 * i + 8].try_into().unwrap());
    let (meta_len, meta_raw_len, meta_hash) = (word(0), word(1), word(2));
    if meta_len > body_end - HEADER_LEN as u64 {
        return Err(Error::corrupt("index length out of range"));
    }
    // A file's meta frame is read into memory: bound it first (a zstd frame is at most a little
    // larger than what it holds, which the limit bounds below).
    if matches!(src, Source::File { .. }) && meta_len > memory_limit.saturating_add(1 << 20) {
        return Err(Error::Limit(format!("archive index of {meta_len} bytes")));
    }
    let meta_start = body_end - meta_len;
    let meta = src.read(meta_start, meta_len as usize)?;
    if xxh3_64(&meta) != meta_hash {
        return Err(Error::Checksum("archive index".into()));
    }
    if meta_raw_len > MAX_META_BYTES || meta_raw_len > memory_limit {
        return Err(Error::Limit(format!("archive index of {meta_raw_len} bytes")));
    }
    let raw = zstd_decode_dict(&meta, meta_raw_len as usize)?;
    Index::read(&raw, version, meta_start, memory_limit)
}

/// Supplies chunk `c` of the reference tensor of a tensor coded against a reference.
pub type RefChunks<'r> = &'r (dyn Fn(&TensorEntry, usize) -> Result<Stream> + Sync);

/// Decodes chunk `c` of tensor `t` into `out` (exactly the chunk's bytes) and, with `check`,
/// verifies its checksum (a caller that verifies a checksum covering the chunk may leave it).
/// With `trail`, the sums of a whole-file checksum's blocks within `out` are taken (while the
/// fused writer is past them, or at the end).
#[allow(clippy::too_many_arguments)]
pub fn decode_chunk(
    archive: Source,
    index: &Index,
    t: usize,
    c: usize,
    out: &mut [u8],
    refs: Option<RefChunks>,
    check: bool,
    mut trail: Option<&mut Trail>,
) -> Result<()> {
    let tensor = &index.tensors[t];
    let ty = Ty::u(tensor.word_bits);
    if fused::decodes(&tensor.program, ty) {
        // The common float programs decode straight into `out`.
        let chunk = &tensor.chunks[c];
        if out.len() as u64 != chunk.elems.saturating_mul(tensor.word_bytes()) {
            return Err(Error::corrupt("decoded chunk has the wrong size"));
        }
        let len = usize::try_from(chunk.len).map_err(|_| Error::corrupt("chunk too large"))?;
        archive.with_read(chunk.offset, len, |payload| {
            let mut r = ByteReader::new(payload);
            fused::decode_into(&tensor.program, ty, &mut r, out, trail.as_deref_mut()).map_err(|e| match e {
                Error::Corrupt(m) => Error::Corrupt(format!("tensor {:?}, chunk {c}: {m}", tensor.name)),
                e => e,
            })?;
            if !r.is_empty() {
                return Err(Error::corrupt(format!("tensor {:?}, chunk {c}: trailing payload bytes", tensor.name)));
            }
            Ok(())
        })??;
    } else {
        if let Some(s) = chunk_stream(archive, index, t, c, 0, refs, Some(&mut *out))? {
            write_stream(&s, out)?;
        }
    }
    if check && !index.chunk_ok(t, c, out) {
        return Err(Error::Checksum(format!("tensor {:?}, chunk {c}", tensor.name)));
    }
    if let Some(t) = trail {
        t.finish(out);
    }
    Ok(())
}

/// The decoded stream of chunk `c` of tensor `t`; or, with `into` and a program that can write
/// its words straight into a buffer ([`Node::decode_root_into`]), None once written there.
fn chunk_stream(
    archive: Source,
    index: &Index,
    t: usize,
    c: usize,
    depth: usize,
    refs: Option<RefChunks>,
    into: Option<&mut [u8]>,
) -> Result<Option<Stream>> {
    let tensor = &index.tensors[t];
    let chunk = &tensor.chunks[c];
    let elem_offset: u64 = tensor.chunks[..c].iter().map(|k| k.elems).sum();
    let payload =
        archive.read(chunk.offset, usize::try_from(chunk.len).map_err(|_| Error::corrupt("chunk too large"))?)?;
    let copy = |src: u32| -> Result<Stream> {
        let src = src as usize;
        if src >= t || depth > 64 {
            return Err(Error::corrupt("copy: source must be an earlier tensor"));
        }
        let st = &index.tensors[src];
        if st.word_bits != tensor.word_bits
            || st.chunks.len() != tensor.chunks.len()
            || st.chunks[c].elems != chunk.elems
        {
            return Err(Error::corrupt("copy: source tensor has a different layout"));
        }
        let s = chunk_stream(archive, index, src, c, depth + 1, refs, None)?
            .ok_or_else(|| Error::corrupt("copy: source tensor not decoded"))?;
        // The source's own checksum covers the copy too.
        if !index.chunk_ok(src, c, &s.to_le_bytes()) {
            return Err(Error::Checksum(format!("tensor {:?}, chunk {c} (copied by {:?})", st.name, tensor.name)));
        }
        Ok(s)
    };
    let reference = match (&tensor.reference, refs) {
        (None, _) => None,
        (Some(_), Some(f)) => Some(f(tensor, c)?),
        (Some(r), None) => {
            return Err(Error::invalid(format!(
                "tensor {:?} is coded against reference tensor {:?}; give the reference",
                tensor.name, r.name
            )))
        }
    };
    let env = Env { elem_offset, copy: &copy, reference: reference.as_ref() };
    let mut r = ByteReader::new(&payload);
    let n = usize::try_from(chunk.elems).map_err(|_| Error::corrupt("chunk too large"))?;
    let ty = Ty::u(tensor.word_bits);
    let s = match into {
        Some(out) if tensor.program.decodes_into(ty, n, out.len()) => {
            tensor.program.decode_root_into(ty, &mut r, &env, out).map(|()| None)
        }
        _ => tensor.program.decode(ty, n, &mut r, &[], &env).map(Some),
    }
    .map_err(|e| match e {
        Error::Corrupt(m) => Error::Corrupt(format!("tensor {:?}, chunk {c}: {m}", tensor.name)),
        e => e,
    })?;
    if !r.is_empty() {
        return Err(Error::corrupt(format!("tensor {:?}, chunk {c}: trailing payload bytes", tensor.name)));
    }
    Ok(s)
}

/// Writes a root stream's words little-endian into `out` (which has exactly their size).
fn write_stream(s: &Stream, out: &mut [u8]) -> Result<()> {
    use crate::dsl::Data;
    let cb = s.ty.container_bytes();
    if out.len() != s.len() * cb {
        return Err(Error::corrupt("decoded chunk has the wrong size"));
    }
    match &s.data {
        Data::U8(d) => out.copy_from_slice(d),
        Data::U16(d) => out.copy_from_slice(bytemuck::cast_slice(d)),
        Data::U32(d) => out.copy_from_slice(bytemuck::cast_slice(d)),
        Data::U64(d) => out.copy_from_slice(bytemuck::cast_slice(d)),
    }
    Ok(())
}
