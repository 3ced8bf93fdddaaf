//! The archive: header, residue blob, chunk payloads, index, footer. See docs/FORMAT.md.
//!
//! Everything read from an archive is checked against the bytes that remain and against the
//! caller's memory limit before anything is allocated from it.

use crate::coder::bitio::{put_bytes, put_varint, ByteReader};
use crate::dsl::{Env, Node, Stream, Ty};
use crate::error::{Error, Result};
use xxhash_rust::xxh3::xxh3_64;

pub const MAGIC: [u8; 8] = *b"\x89BRV\r\n\x1a\n";
pub const END_MAGIC: [u8; 8] = *b"BRVINDEX";
/// Format version written by this build.
pub const VERSION: u16 = 1;
/// Oldest format version this build reads.
pub const MIN_VERSION: u16 = 1;
pub const HEADER_LEN: usize = 16;
/// Largest original size of one chunk. Bounds the memory one chunk's decoding may take
/// (a few times this, for the intermediate streams), whatever the archive says.
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;
pub const FOOTER_LEN: usize = 24;

/// How the residue (every byte of the original outside tensor data) is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResidueCodec {
    Raw = 0,
    Zstd = 1,
}

#[derive(Clone, Debug)]
pub struct ChunkEntry {
    /// Offset of the payload in the archive.
    pub offset: u64,
    pub len: u64,
    pub elems: u64,
    /// xxh3-64 of the chunk's original bytes.
    pub checksum: u64,
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
    pub chunks: Vec<ChunkEntry>,
}

impl TensorEntry {
    pub fn compressed_len(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }
    pub fn word_bytes(&self) -> u64 {
        self.word_bits as u64 / 8
    }
}

#[derive(Clone, Debug)]
pub struct Index {
    pub version: u16,
    pub original_size: u64,
    pub original_hash: u64,
    pub residue_codec: ResidueCodec,
    pub residue_offset: u64,
    pub residue_len: u64,
    pub residue_hash: u64,
    pub tensors: Vec<TensorEntry>,
}

impl Index {
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

    pub fn residue_raw_len(&self) -> u64 {
        self.original_size - self.tensors.iter().map(|t| t.nbytes).sum::<u64>()
    }

    fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, self.original_size);
        out.extend_from_slice(&self.original_hash.to_le_bytes());
        put_varint(out, self.residue_codec as u64);
        put_varint(out, self.residue_len);
        out.extend_from_slice(&self.residue_hash.to_le_bytes());
        put_varint(out, self.tensors.len() as u64);
        for t in &self.tensors {
            put_bytes(out, t.name.as_bytes());
            put_bytes(out, t.dtype.as_bytes());
            put_varint(out, t.shape.len() as u64);
            for &d in &t.shape {
                put_varint(out, d);
            }
            put_varint(out, t.word_bits as u64);
            put_varint(out, t.offset);
            put_varint(out, t.nbytes);
            put_bytes(out, &t.program.to_bytes());
            put_varint(out, t.chunks.len() as u64);
            for c in &t.chunks {
                put_varint(out, c.elems);
                put_varint(out, c.len);
                out.extend_from_slice(&c.checksum.to_le_bytes());
            }
        }
    }

    fn read(bytes: &[u8], version: u16, data_end: u64) -> Result<Index> {
        let mut r = ByteReader::new(bytes);
        let original_size = r.varint()?;
        let original_hash = r.u64_le()?;
        let residue_codec = match r.varint()? {
            0 => ResidueCodec::Raw,
            1 => ResidueCodec::Zstd,
            c => return Err(Error::corrupt(format!("unknown residue codec {c}"))),
        };
        let residue_len = r.varint()?;
        let residue_hash = r.u64_le()?;
        let mut pos = HEADER_LEN as u64;
        let residue_offset = pos;
        pos = pos
            .checked_add(residue_len)
            .filter(|&p| p <= data_end)
            .ok_or_else(|| Error::corrupt("residue out of range"))?;
        // Every tensor takes at least 8 index bytes: bound the count before allocating.
        let nt = r.len(r.remaining() as u64 / 8)?;
        let mut tensors = Vec::with_capacity(nt);
        let mut orig_pos = 0u64;
        for _ in 0..nt {
            let name =
                String::from_utf8(r.bytes()?.to_vec()).map_err(|_| Error::corrupt("tensor name is not UTF-8"))?;
            let dtype = String::from_utf8(r.bytes()?.to_vec()).map_err(|_| Error::corrupt("dtype is not UTF-8"))?;
            let ndim = r.len(r.remaining() as u64)?;
            let shape = (0..ndim).map(|_| r.varint()).collect::<Result<Vec<_>>>()?;
            let word_bits = r.len(64)? as u32;
            if !matches!(word_bits, 8 | 16 | 32 | 64) {
                return Err(Error::corrupt(format!("tensor {name:?}: bad word width")));
            }
            let offset = r.varint()?;
            let nbytes = r.varint()?;
            let end = offset.checked_add(nbytes).ok_or_else(|| Error::corrupt("tensor range overflows"))?;
            if offset < orig_pos || end > original_size || nbytes % (word_bits as u64 / 8) != 0 {
                return Err(Error::corrupt(format!("tensor {name:?}: byte range out of order or out of range")));
            }
            orig_pos = end;
            let program = Node::parse(r.bytes()?, Ty::u(word_bits)).map_err(|e| match e {
                Error::Unsupported(m) => Error::Unsupported(format!("tensor {name:?}: {m}")),
                e => Error::corrupt(format!("tensor {name:?}: bad program: {e}")),
            })?;
            let nc = r.len(r.remaining() as u64 / 10)?;
            let mut chunks = Vec::with_capacity(nc);
            let mut elems_total = 0u64;
            for _ in 0..nc {
                let elems = r.varint()?;
                let len = r.varint()?;
                let checksum = r.u64_le()?;
                let offset = pos;
                pos = pos
                    .checked_add(len)
                    .filter(|&p| p <= data_end)
                    .ok_or_else(|| Error::corrupt("chunk out of range"))?;
                elems_total = elems_total.checked_add(elems).ok_or_else(|| Error::corrupt("chunk sizes overflow"))?;
                if elems == 0 || elems > MAX_CHUNK_BYTES / (word_bits as u64 / 8) {
                    return Err(Error::corrupt("chunk size out of range"));
                }
                chunks.push(ChunkEntry { offset, len, elems, checksum });
            }
            if elems_total.checked_mul(word_bits as u64 / 8) != Some(nbytes) {
                return Err(Error::corrupt(format!("tensor {name:?}: chunk sizes do not add up")));
            }
            tensors.push(TensorEntry { name, dtype, shape, word_bits, offset, nbytes, program, chunks });
        }
        if !r.is_empty() {
            return Err(Error::corrupt("index: trailing bytes"));
        }
        if pos != data_end {
            return Err(Error::corrupt("payload sizes do not add up"));
        }
        let idx = Index {
            version,
            original_size,
            original_hash,
            residue_codec,
            residue_offset,
            residue_len,
            residue_hash,
            tensors,
        };
        if residue_codec == ResidueCodec::Raw && residue_len != idx.residue_raw_len() {
            return Err(Error::corrupt("raw residue has the wrong size"));
        }
        Ok(idx)
    }
}

/// Assembles an archive from its parts (payloads in index order).
pub fn write_archive(index: &Index, residue_blob: &[u8], payloads: &[Vec<u8>]) -> Vec<u8> {
    let total: usize = residue_blob.len() + payloads.iter().map(|p| p.len()).sum::<usize>();
    let mut out = Vec::with_capacity(HEADER_LEN + total + 1024);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&[0u8; 6]);
    out.extend_from_slice(residue_blob);
    for p in payloads {
        out.extend_from_slice(p);
    }
    let mut idx = Vec::new();
    index.write(&mut idx);
    out.extend_from_slice(&idx);
    out.extend_from_slice(&(idx.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxh3_64(&idx).to_le_bytes());
    out.extend_from_slice(&END_MAGIC);
    out
}

/// Reads and validates the header, footer and index.
pub fn read_index(archive: &[u8]) -> Result<Index> {
    if archive.len() < HEADER_LEN + FOOTER_LEN {
        return Err(Error::corrupt(if archive.len() >= 8 && archive[..8] == MAGIC {
            "archive is truncated"
        } else {
            "not a Brevis archive (too short)"
        }));
    }
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
    let foot = &archive[archive.len() - FOOTER_LEN..];
    if foot[16..] != END_MAGIC {
        return Err(Error::corrupt("archive is truncated or its footer is damaged"));
    }
    let idx_len = u64::from_le_bytes(foot[..8].try_into().unwrap());
    let idx_hash = u64::from_le_bytes(foot[8..16].try_into().unwrap());
    let body_end = (archive.len() - FOOTER_LEN) as u64;
    if idx_len > body_end - HEADER_LEN as u64 {
        return Err(Error::corrupt("index length out of range"));
    }
    let idx_start = (body_end - idx_len) as usize;
    let idx_bytes = &archive[idx_start..body_end as usize];
    if xxh3_64(idx_bytes) != idx_hash {
        return Err(Error::Checksum("archive index".into()));
    }
    Index::read(idx_bytes, version, idx_start as u64)
}

/// Decodes the residue blob into its raw bytes.
pub fn decode_residue(archive: &[u8], index: &Index) -> Result<Vec<u8>> {
    let blob = &archive[index.residue_offset as usize..(index.residue_offset + index.residue_len) as usize];
    let raw_len = index.residue_raw_len() as usize;
    let raw = match index.residue_codec {
        ResidueCodec::Raw => blob.to_vec(),
        ResidueCodec::Zstd => crate::coder::zstd_decode(blob, raw_len)?,
    };
    if xxh3_64(&raw) != index.residue_hash {
        return Err(Error::Checksum("residue (file header, padding and gaps)".into()));
    }
    Ok(raw)
}

/// Decodes chunk `c` of tensor `t` into `out` (exactly the chunk's bytes) and verifies it.
pub fn decode_chunk(archive: &[u8], index: &Index, t: usize, c: usize, out: &mut [u8]) -> Result<()> {
    let s = chunk_stream(archive, index, t, c, 0)?;
    let tensor = &index.tensors[t];
    write_stream(&s, out)?;
    if xxh3_64(out) != tensor.chunks[c].checksum {
        return Err(Error::Checksum(format!("tensor {:?}, chunk {c}", tensor.name)));
    }
    Ok(())
}

fn chunk_stream(archive: &[u8], index: &Index, t: usize, c: usize, depth: usize) -> Result<Stream> {
    let tensor = &index.tensors[t];
    let chunk = &tensor.chunks[c];
    let elem_offset: u64 = tensor.chunks[..c].iter().map(|k| k.elems).sum();
    let payload = &archive[chunk.offset as usize..(chunk.offset + chunk.len) as usize];
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
        chunk_stream(archive, index, src, c, depth + 1)
    };
    let env = Env { elem_offset, copy: &copy };
    let mut r = ByteReader::new(payload);
    let n = usize::try_from(chunk.elems).map_err(|_| Error::corrupt("chunk too large"))?;
    let s = tensor.program.decode(Ty::u(tensor.word_bits), n, &mut r, &[], &env).map_err(|e| match e {
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
