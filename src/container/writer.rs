//! Writing an archive: the header, the chunk payloads in index order as they are made, then
//! the meta frame (index and residue) and the footer. A tensor can be rewritten from its start
//! (the compressor's fall back to `raw`), so the output must be seekable.

use super::{ChunkEntry, Index, END_MAGIC, HEADER_LEN, MAGIC, META_DICT, META_LEVEL, VERSION};
use crate::error::{Error, Result};
use std::io::{Seek, SeekFrom, Write};
use xxhash_rust::xxh3::xxh3_64;

/// The 16-byte archive header of this format version.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// A residue of at least this many bytes (a GGUF header with its tokenizer, a very long
/// safetensors header) is compressed on its own, while the chunks are coded
/// ([`ResidueFrame`]).
pub const RESIDUE_FRAME_MIN: usize = 256 << 10;

/// The zstd level of a long GGUF header's frame once its strings are gathered (residue model
/// 2): gathered, a MB of tokenizer strings at this level is already a fifth smaller than the
/// verbatim header at the meta's level 19; levels 16 to 19 would take another tenth off it for
/// eight times the time (a quarter of all the compression time of a 100 MB GGUF file).
const GATHERED_LEVEL: i32 = 12;

/// The stored residue of an index compressed ahead of the rest of the meta: at the level of the
/// meta frame, a MB of tokenizer strings takes the better part of a second, which a compressor
/// spends while it codes the chunks instead of after them. The meta is then three zstd frames
/// back to back (what comes before the stored residue, the residue, what comes after it): a
/// zstd decoder reads concatenated frames as one stream, so readers see the same bytes.
pub struct ResidueFrame {
    /// The residue it was made from (its length and xxh3-64), so that a mismatch falls back to
    /// one frame.
    residue: (usize, u64),
    model: u8,
    stored_len: usize,
    frame: Vec<u8>,
}

impl ResidueFrame {
    /// The frame of `residue`, at zstd level `level` (the meta's; [`GATHERED_LEVEL`] at most
    /// for gathered GGUF strings).
    pub fn new(residue: &[u8], level: i32) -> Result<ResidueFrame> {
        let (model, stored) = super::header_model::encode(residue);
        let level = if model == super::header_model::GGUF_STRINGS { GATHERED_LEVEL.min(level) } else { level };
        let frame = zstd::bulk::compress(&stored, level)?;
        Ok(ResidueFrame { residue: (residue.len(), xxh3_64(residue)), model, stored_len: stored.len(), frame })
    }

    /// The frame of `residue` coded against `prefix`, the reference file's first bytes
    /// (residue model 3, `residue_delta`): already compressed, it is stored in a frame of its
    /// own at zstd's fastest level.
    pub fn against(residue: &[u8], prefix: &[u8]) -> Result<ResidueFrame> {
        let stored = super::residue_delta::encode(residue, prefix)?;
        let frame = zstd::bulk::compress(&stored, 1)?;
        let model = super::header_model::REF_DELTA;
        Ok(ResidueFrame { residue: (residue.len(), xxh3_64(residue)), model, stored_len: stored.len(), frame })
    }
}

/// What follows the payloads: the meta frame (index and residue) and the footer.
pub fn meta_and_footer(index: &Index) -> Result<Vec<u8>> {
    meta_and_footer_with(index, None, META_LEVEL)
}

/// [`meta_and_footer`] with the meta frame at zstd level `level`, and the residue's frame made
/// ahead when given (and made from this index's residue).
pub fn meta_and_footer_with(index: &Index, early: Option<&ResidueFrame>, level: i32) -> Result<Vec<u8>> {
    let (mut out, meta_raw_len) = match early {
        Some(rf) if rf.residue == (index.residue.len(), xxh3_64(&index.residue)) => {
            let (head, tail) = index.write_around(rf.model, rf.stored_len);
            let mut out = meta_frame(&head, level)?;
            out.extend_from_slice(&rf.frame);
            out.extend_from_slice(&meta_frame(&tail, level)?);
            (out, head.len() + rf.stored_len + tail.len())
        }
        _ => {
            let mut meta_raw = Vec::new();
            index.write(&mut meta_raw);
            (meta_frame(&meta_raw, level)?, meta_raw.len())
        }
    };
    let meta_len = out.len() as u64;
    let meta_hash = xxh3_64(&out);
    out.extend_from_slice(&meta_len.to_le_bytes());
    out.extend_from_slice(&(meta_raw_len as u64).to_le_bytes());
    out.extend_from_slice(&meta_hash.to_le_bytes());
    out.extend_from_slice(&END_MAGIC);
    Ok(out)
}

/// A meta over this size is also compressed without the dictionary, and the smaller frame kept.
const META_PLAIN_MIN: usize = 64 << 10;

/// The zstd frame of the meta: with `META_DICT`, which helps a small safetensors header; a large
/// meta (a GGUF header with its tokenizer, in the residue) is also tried without it, since zstd's
/// optimal parser codes a large input with a dictionary loaded a fifth worse. Either frame has
/// dictionary ID 0 and decodes with the dictionary loaded (a frame that never refers to it
/// ignores it), so readers need not know which was kept.
fn meta_frame(meta_raw: &[u8], level: i32) -> Result<Vec<u8>> {
    let with =
        || -> Result<Vec<u8>> { Ok(zstd::bulk::Compressor::with_dictionary(level, META_DICT)?.compress(meta_raw)?) };
    if meta_raw.len() <= META_PLAIN_MIN {
        return with();
    }
    // Both at once: at this level a MB of tokenizer strings takes the better part of a second.
    let (with, plain) = rayon::join(with, || zstd::bulk::compress(meta_raw, level));
    let (with, plain) = (with?, plain?);
    Ok(if plain.len() < with.len() { plain } else { with })
}

/// Assembles an archive in memory: header, payloads (in index order, as the index's chunk
/// lengths say), meta, footer.
pub fn write_archive(index: &Index, payloads: &[Vec<u8>]) -> Result<Vec<u8>> {
    let tail = meta_and_footer(index)?;
    let total: usize = payloads.iter().map(|p| p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(HEADER_LEN + total + tail.len());
    out.extend_from_slice(&header());
    for p in payloads {
        out.extend_from_slice(p);
    }
    out.extend_from_slice(&tail);
    Ok(out)
}

/// A streaming archive writer over a seekable output, written from position 0.
pub struct Writer<'w, W: Write + Seek> {
    out: &'w mut W,
    offset: u64,
}

impl<'w, W: Write + Seek> Writer<'w, W> {
    /// Writes the header at the start of `out`.
    pub fn start(out: &'w mut W) -> Result<Self> {
        out.rewind().map_err(Error::write)?;
        out.write_all(&header()).map_err(Error::write)?;
        Ok(Writer { out, offset: HEADER_LEN as u64 })
    }

    /// Where the next payload goes.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Appends one chunk's payload and returns its index entry.
    pub fn put(&mut self, payload: &[u8], elems: u64, checksum: Option<u64>) -> Result<ChunkEntry> {
        self.out.write_all(payload).map_err(Error::write)?;
        let entry = ChunkEntry { offset: self.offset, len: payload.len() as u64, elems, checksum };
        self.offset += payload.len() as u64;
        Ok(entry)
    }

    /// Goes back to `offset` (a tensor's start) to write its chunks again; what was written
    /// past it is overwritten or left beyond the archive's end.
    pub fn rewind_to(&mut self, offset: u64) -> Result<()> {
        self.out.seek(SeekFrom::Start(offset)).map_err(Error::write)?;
        self.offset = offset;
        Ok(())
    }

    /// Writes the meta frame and the footer, with the residue's frame made ahead
    /// ([`ResidueFrame`]) and the meta frame at zstd level `level`; returns the archive's length
    /// (the output may hold stale bytes past it after a rewind).
    pub fn finish_with(self, index: &Index, early: Option<&ResidueFrame>, level: i32) -> Result<u64> {
        let tail = meta_and_footer_with(index, early, level)?;
        self.out.write_all(&tail).map_err(Error::write)?;
        self.out.flush().map_err(Error::write)?;
        Ok(self.offset + tail.len() as u64)
    }
}
