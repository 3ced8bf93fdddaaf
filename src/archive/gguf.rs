//! GGUF access for llama.cpp-style loaders: the bytes a GGUF parser reads (from the start of the
//! file to its data section: header, key/values, tensor infos, padding), and for each entry of
//! the archive its ggml type, its dimensions in GGUF order and its offset in the data section.
//! A loader parses the header as it would parse the file's, allocates the data section, and
//! decodes each tensor into place at its offset.

use super::Archive;
use crate::error::{Error, Result};
use crate::tensor::gguf;

/// The GGUF original of an archive, as a loader sees it.
#[derive(Clone, Debug)]
pub struct GgufView {
    /// The GGUF version (2 or 3).
    pub version: u32,
    /// The alignment of the data section and of tensor offsets (`general.alignment`, or 32).
    pub alignment: u64,
    /// The original's bytes from its start to its data section; their length is the data
    /// section's offset in the file.
    pub header: Vec<u8>,
    /// Per entry of the archive: its GGUF tensor, or None for a byte region (metadata or a gap
    /// coded as bytes).
    pub tensors: Vec<Option<GgufTensor>>,
}

/// One tensor as its GGUF tensor info describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    /// The ggml type id (`enum ggml_type`).
    pub ggml_type: u32,
    /// The dimensions in GGUF order: fastest first (`ne[0]` is the row length).
    pub dims: Vec<u64>,
    /// The tensor's offset from the start of the data section.
    pub data_offset: u64,
}

impl Archive<'_> {
    /// The GGUF view of the archive's original; None when the original is not a consistent
    /// GGUF file whose tensors are the archive's entries (a safetensors file, any other file, a
    /// GGUF file coded as bytes). Reads the original from its start in growing windows until the
    /// header parses, decoding only what of it is not in the index (nothing, unless the header
    /// was too large for the index); a window above the memory limit is `Error::Limit`.
    pub fn gguf(&self) -> Result<Option<GgufView>> {
        let idx = &self.index;
        let first = idx.tensors.iter().find(|t| !t.dtype.is_empty()).map_or(idx.original_size, |t| t.offset);
        let Some((layout, mut prefix)) = self.gguf_layout(first)? else {
            return Ok(None);
        };
        if (prefix.len() as u64) < layout.data_start {
            prefix = self.prefix_within_limit(layout.data_start)?;
        }
        let mut spans = layout.spans.iter().peekable();
        let mut tensors = Vec::with_capacity(idx.tensors.len());
        for t in &idx.tensors {
            let s = spans.next_if(|s| s.start == t.offset);
            let Some(s) = s else {
                tensors.push(None);
                continue;
            };
            let ggml_type = gguf::type_id(s.dtype.name());
            if s.len() != t.nbytes || s.dtype.name() != t.dtype || ggml_type.is_none() {
                return Ok(None);
            }
            let dims = s.shape.iter().rev().copied().collect();
            tensors.push(Some(GgufTensor {
                ggml_type: ggml_type.unwrap(),
                dims,
                data_offset: s.start - layout.data_start,
            }));
        }
        if spans.next().is_some() {
            return Ok(None);
        }
        let mut header = prefix;
        header.truncate(layout.data_start as usize);
        Ok(Some(GgufView { version: layout.version, alignment: layout.alignment, header, tensors }))
    }

    /// The GGUF layout of the original and the prefix it was read from, which grows from 64 KiB
    /// until the header fits in it (at most `first` bytes, where the first tensor starts); None
    /// when the original is not consistent GGUF.
    fn gguf_layout(&self, first: u64) -> Result<Option<(gguf::Layout, Vec<u8>)>> {
        let mut want = first.min(1 << 16);
        loop {
            let prefix = self.prefix_within_limit(want)?;
            if !prefix.starts_with(gguf::MAGIC) {
                return Ok(None);
            }
            match gguf::layout_from_prefix(&prefix, self.index.original_size) {
                Ok(l) => return Ok(Some((l, prefix))),
                Err(gguf::Stop::Short) if want < first => want = first.min(want.saturating_mul(4)),
                Err(_) => return Ok(None),
            }
        }
    }

    /// [`Archive::original_prefix`], refused above the memory limit.
    fn prefix_within_limit(&self, end: u64) -> Result<Vec<u8>> {
        if end > self.memory_limit {
            return Err(Error::Limit(format!(
                "a GGUF header of more than {end} bytes, above the memory limit of {} bytes",
                self.memory_limit
            )));
        }
        self.original_prefix(end)
    }

    /// The original's bytes `[0, end)`: the residue, and the chunks of the entries that start
    /// before `end` (decoded whole, then cut).
    fn original_prefix(&self, end: u64) -> Result<Vec<u8>> {
        let idx = &self.index;
        if idx.residue_delta.is_some() {
            return Err(
                crate::reference::missing(idx).unwrap_or_else(|| Error::corrupt("a residue without its reference"))
            );
        }
        let end = end.min(idx.original_size) as usize;
        let mut out = Vec::with_capacity(end);
        let push = |out: &mut Vec<u8>, bytes: &[u8]| {
            let room = end - out.len();
            out.extend_from_slice(&bytes[..bytes.len().min(room)]);
        };
        let (mut pos, mut rpos) = (0u64, 0usize);
        for (t, te) in idx.tensors.iter().enumerate() {
            if out.len() >= end {
                return Ok(out);
            }
            let gap = (te.offset - pos) as usize;
            push(&mut out, &idx.residue[rpos..rpos + gap]);
            rpos += gap;
            for (c, ce) in te.chunks.iter().enumerate() {
                if out.len() >= end {
                    return Ok(out);
                }
                let mut buf = vec![0u8; (ce.elems * te.word_bytes()) as usize];
                self.decode_chunk(t, c, &mut buf, true, None)?;
                push(&mut out, &buf);
            }
            pos = te.offset + te.nbytes;
        }
        push(&mut out, &idx.residue[rpos..]);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prefixes of a file read back from its archive: from a byte stream's chunks (the whole
    /// file is one entry), cut anywhere, and past the end.
    #[test]
    fn prefixes_come_from_the_residue_and_the_chunks() {
        let f: Vec<u8> = (0..(3u32 << 19) + 77).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 % 17).collect();
        let opts = crate::options::Options { chunk_bytes: 1 << 18, threads: 1, ..Default::default() };
        let arc = crate::api::compress(&f, &opts).unwrap();
        let a = Archive::open(&arc).unwrap();
        assert!(a.len() == 1 && a.index().tensors[0].chunks.len() > 4);
        for end in [0, 1, 1 << 18, (1 << 18) + 1, 1 << 20, f.len() as u64 - 1, f.len() as u64, u64::MAX] {
            let want = &f[..end.min(f.len() as u64) as usize];
            assert!(a.original_prefix(end).unwrap() == want, "{end}");
        }
        assert!(a.gguf().unwrap().is_none());
    }
}
