//! The original read at any offset, decoding only what the read covers: what a runtime that
//! reads models through a file handle needs (llama.cpp's `llama_model_load_from_file_ptr` over
//! the `FILE *` of `brevis_reader_fopen`: it reads the GGUF header, then each tensor's bytes).
//!
//! [`Archive::read_at`] decodes one range. [`Reader`] owns an archive file (and its reference),
//! serves reads a piece at a time ([`Reader::read_some`]: a stream's buffer is refilled with one
//! whole chunk, decoded straight into it) and reads ahead: a runtime reads one tensor at a time,
//! most tensors are a chunk or two, so the chunks that follow the one read in the file are
//! decoded by the worker pool (every core) into a bounded staging area while the caller copies,
//! and the next reads take them from there.

use super::{locked, Archive, Piece};
use crate::error::{Error, Result};
use crate::options::DecodeOptions;
use rayon::prelude::*;
use std::sync::{Arc, Condvar, Mutex};

/// The pieces of the original in file order, each with its offset in the original.
struct Layout {
    starts: Vec<u64>,
    pieces: Vec<Piece>,
}

impl Layout {
    fn of(a: &Archive) -> Result<Layout> {
        let pieces = a.pieces()?;
        let mut starts = Vec::with_capacity(pieces.len());
        let mut at = 0u64;
        for p in &pieces {
            starts.push(at);
            at += p.len() as u64;
        }
        Ok(Layout { starts, pieces })
    }
}

/// One part of a read: a piece of the original and the part of the caller's buffer it fills.
struct Part<'o> {
    piece: usize,
    /// Where `out` starts within the piece.
    skip: usize,
    out: &'o mut [u8],
}

impl Archive<'_> {
    /// Decodes bytes `[offset, offset + out.len())` of the original into `out`, decoding only
    /// the chunks the range covers: residue bytes are copied, chunks covered whole decode
    /// straight into `out`, a chunk cut by either end of the range is decoded aside and its part
    /// copied. The chunks decode in parallel (in the current rayon pool), each checked against
    /// its own checksum; the whole-file checksum is not (a read sees only part of the file). A
    /// range past the end of the original is an error.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.read_layout(&Layout::of(self)?, offset, out)
    }

    fn read_layout(&self, layout: &Layout, offset: u64, out: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(out.len() as u64).filter(|&e| e <= self.index.original_size).ok_or_else(|| {
            Error::invalid(format!("read of {} bytes at {offset} is past the original's end", out.len()))
        })?;
        if out.is_empty() {
            return Ok(());
        }
        // The piece holding `offset`, and every piece to `end`.
        let first = layout.starts.partition_point(|&s| s <= offset) - 1;
        let mut parts = Vec::new();
        let mut rest = out;
        let mut at = offset;
        for k in first..layout.pieces.len() {
            if at == end {
                break;
            }
            let skip = (at - layout.starts[k]) as usize;
            let n = (layout.pieces[k].len() - skip).min((end - at) as usize);
            let (part, r) = std::mem::take(&mut rest).split_at_mut(n);
            rest = r;
            at += n as u64;
            match layout.pieces[k] {
                Piece::Residue(a, _) => part.copy_from_slice(&self.index.residue[a + skip..a + skip + n]),
                Piece::Chunk { .. } => parts.push(Part { piece: k, skip, out: part }),
            }
        }
        parts.into_par_iter().with_max_len(1).try_for_each(|p| {
            let Piece::Chunk { t, c, len } = layout.pieces[p.piece] else { unreachable!("residue is copied above") };
            if p.skip == 0 && p.out.len() == len {
                self.decode_chunk(t, c, p.out, true, None)
            } else {
                let mut whole = vec![0u8; len];
                self.decode_chunk(t, c, &mut whole, true, None)?;
                p.out.copy_from_slice(&whole[p.skip..p.skip + p.out.len()]);
                Ok(())
            }
        })
    }
}

/// A file the reader owns, leaked for as long as the archive that borrows it lives. The
/// archive is always dropped first: it comes before the files in [`Inner`].
struct Owned(*mut std::fs::File);

// SAFETY: a `File` is Send and Sync; `Owned` is only its box.
unsafe impl Send for Owned {}
// SAFETY: as above.
unsafe impl Sync for Owned {}

impl Owned {
    fn new(f: std::fs::File) -> (Owned, &'static std::fs::File) {
        let p = Box::into_raw(Box::new(f));
        // SAFETY: `p` is a live box that `Owned` frees only after every borrow is gone (the
        // archive borrowing it is dropped before it: field order of `Inner`).
        (Owned(p), unsafe { &*p })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `Box::into_raw` and nothing borrows it any more.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// What the read-ahead holds of one chunk.
enum Slot {
    /// Being decoded by a worker.
    Busy,
    /// Decoded, waiting for its read.
    Ready(Vec<u8>),
}

struct Ahead {
    /// Chunks staged or being staged, by piece.
    slots: std::collections::HashMap<usize, Slot>,
    /// Chunks read already: not staged again.
    done: Vec<bool>,
    /// Bytes held in the slots.
    staged: u64,
    /// Buffers of chunks read, for the next ones staged (fresh memory would cost a page fault
    /// per 4 KiB each time).
    spare: Vec<Vec<u8>>,
    /// The last chunk cut by a read, decoded whole (a reader with a small buffer reads a chunk in
    /// parts).
    part: Option<(usize, Arc<Vec<u8>>)>,
}

struct Inner {
    // Field order matters: the archive borrows the files below and must be dropped first.
    archive: Archive<'static>,
    layout: Layout,
    /// At most this many bytes are staged ahead.
    window: u64,
    ahead: Mutex<Ahead>,
    wake: Condvar,
    _files: Vec<Owned>,
}

/// An archive file opened for reads of its original at any offset, with read-ahead of the
/// chunks that follow the one read (see the module's documentation). Any thread may read.
pub struct Reader {
    inner: Arc<Inner>,
}

/// Bytes staged ahead at most: enough for both cores to stay ahead of llama.cpp's reads, which
/// take a layer's tensors in another order than the file's (SmolLM2-135M: 8 MiB stalls the
/// reads, 32 MiB is no faster than 16), little beside the model's own memory.
const WINDOW: u64 = 16 << 20;

impl Reader {
    /// Opens the archive at `path`; `reference`: the file it was made against (the same file,
    /// or an archive of it), needed when the archive names one. `opts.memory_limit` bounds the
    /// index and the staging area (a quarter of it, at most 16 MiB).
    pub fn open(path: &std::path::Path, reference: Option<&std::path::Path>, opts: &DecodeOptions) -> Result<Reader> {
        let (file, f) = Owned::new(std::fs::File::open(path)?);
        let mut files = vec![file];
        let mut archive = Archive::open_file(f, opts.memory_limit)?;
        if let Some(r) = reference {
            let (file, f) = Owned::new(
                std::fs::File::open(r)
                    .map_err(|e| Error::invalid(format!("cannot open the reference {}: {e}", r.display())))?,
            );
            files.push(file);
            archive.set_reference_file(f)?;
        } else if let Some(e) = crate::reference::missing(&archive.index) {
            return Err(e);
        }
        let layout = Layout::of(&archive)?;
        let ahead = Ahead {
            slots: std::collections::HashMap::new(),
            done: vec![false; layout.pieces.len()],
            staged: 0,
            spare: Vec::new(),
            part: None,
        };
        let inner = Inner {
            archive,
            layout,
            window: WINDOW.min(opts.memory_limit / 4),
            ahead: Mutex::new(ahead),
            wake: Condvar::new(),
            _files: files,
        };
        Ok(Reader { inner: Arc::new(inner) })
    }

    /// The size of the original, in bytes.
    pub fn size(&self) -> u64 {
        self.inner.archive.original_size()
    }

    /// The most bytes one [`Reader::read_some`] gives: the longest piece (a stream buffer this
    /// long is refilled with a whole chunk at a time).
    pub fn piece_max(&self) -> usize {
        self.inner.layout.pieces.iter().map(Piece::len).max().unwrap_or(0)
    }

    /// Decodes bytes `[offset, offset + out.len())` of the original into `out` (as
    /// [`Archive::read_at`], with the read-ahead of [`Reader::read_some`]).
    pub fn read_at(&self, mut offset: u64, mut out: &mut [u8]) -> Result<()> {
        if offset.checked_add(out.len() as u64).is_none_or(|e| e > self.size()) {
            return Err(Error::invalid(format!("read of {} bytes at {offset} is past the original's end", out.len())));
        }
        while !out.is_empty() {
            let n = self.read_some(offset, out)?;
            out = &mut std::mem::take(&mut out)[n..];
            offset += n as u64;
        }
        Ok(())
    }

    /// Decodes bytes of the original from `offset` into `out`, up to the end of `out` or of the
    /// piece (residue span or chunk) that holds `offset`, whichever comes first, and returns how
    /// many (0 at the end of the original). A read from a chunk's start that holds the whole
    /// chunk decodes it straight into `out`, or copies it from the staging area; either way the
    /// chunks after it are staged ahead.
    pub fn read_some(&self, offset: u64, out: &mut [u8]) -> Result<usize> {
        let inner = &*self.inner;
        if offset >= self.size() || out.is_empty() {
            return Ok(0);
        }
        let k = inner.layout.starts.partition_point(|&s| s <= offset) - 1;
        let skip = (offset - inner.layout.starts[k]) as usize;
        let (t, c, len) = match inner.layout.pieces[k] {
            Piece::Residue(a, b) => {
                let n = (b - a - skip).min(out.len());
                out[..n].copy_from_slice(&inner.archive.index.residue[a + skip..a + skip + n]);
                return Ok(n);
            }
            Piece::Chunk { t, c, len } => (t, c, len),
        };
        if skip == 0 && out.len() >= len {
            self.stage_from(k + 1);
            match inner.take(k) {
                Some(v) => {
                    out[..len].copy_from_slice(&v[..len]);
                    locked(&inner.ahead).spare.push(v);
                }
                None => inner.archive.decode_chunk(t, c, &mut out[..len], true, None)?,
            }
            return Ok(len);
        }
        let whole = inner.part(k)?;
        let n = (len - skip).min(out.len());
        out[..n].copy_from_slice(&whole[skip..skip + n]);
        Ok(n)
    }

    /// Starts decoding the first chunks of the file into the staging area, as a read of a
    /// chunk does for the chunks after it: for a loader that parses the header first and reads
    /// the tensors after (llama.cpp takes tens of milliseconds over a tokenizer before it reads
    /// a tensor, on one core).
    pub fn read_ahead(&self) {
        self.stage_from(0);
    }

    /// Starts the decoding of the chunks from piece `k` on in file order that are neither read
    /// nor staged, in the worker pool, while they fit in the window.
    fn stage_from(&self, k: usize) {
        let inner = &self.inner;
        let mut ahead = locked(&inner.ahead);
        for j in k..inner.layout.pieces.len() {
            let Piece::Chunk { t, c, len } = inner.layout.pieces[j] else { continue };
            // A chunk larger than the window is left to its read.
            if ahead.done[j] || ahead.slots.contains_key(&j) || len as u64 > inner.window {
                continue;
            }
            if ahead.staged + len as u64 > inner.window {
                break;
            }
            ahead.staged += len as u64;
            ahead.slots.insert(j, Slot::Busy);
            let mut v = ahead.spare.pop().unwrap_or_default();
            let inner = Arc::clone(inner);
            rayon::spawn(move || {
                if v.len() < len {
                    v.resize(len, 0);
                }
                // A panic here would abort the process (rayon's spawn has no one to give it
                // to): it is a failure like an error, which the read then meets itself.
                let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    inner.archive.decode_chunk(t, c, &mut v[..len], true, None).is_ok()
                }))
                .unwrap_or(false);
                let mut ahead = locked(&inner.ahead);
                if ok {
                    ahead.slots.insert(j, Slot::Ready(v));
                } else {
                    // The read decodes it again and reports the error.
                    ahead.slots.remove(&j);
                    ahead.staged -= len as u64;
                }
                inner.wake.notify_all();
            });
        }
    }
}

impl Inner {
    /// Chunk `k`'s staged bytes (the first `len` of the buffer), waiting for them while a worker
    /// decodes it; None when the caller is to decode it. Either way it is marked read.
    fn take(&self, k: usize) -> Option<Vec<u8>> {
        let mut ahead = locked(&self.ahead);
        ahead.done[k] = true;
        loop {
            match ahead.slots.remove(&k) {
                Some(Slot::Busy) => {
                    ahead.slots.insert(k, Slot::Busy);
                    ahead = self.wake.wait(ahead).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                Some(Slot::Ready(v)) => {
                    let Piece::Chunk { len, .. } = self.layout.pieces[k] else { unreachable!("a chunk") };
                    ahead.staged -= len as u64;
                    return Some(v);
                }
                None => return None,
            }
        }
    }

    /// Chunk `k` decoded whole, for a read of part of it: the last one so decoded is kept.
    fn part(&self, k: usize) -> Result<Arc<Vec<u8>>> {
        if let Some((j, v)) = &locked(&self.ahead).part {
            if *j == k {
                return Ok(Arc::clone(v));
            }
        }
        let Piece::Chunk { t, c, len } = self.layout.pieces[k] else { unreachable!("a chunk") };
        let v = match self.take(k) {
            Some(mut v) => {
                v.truncate(len);
                v
            }
            None => {
                let mut v = vec![0u8; len];
                self.archive.decode_chunk(t, c, &mut v, true, None)?;
                v
            }
        };
        let v = Arc::new(v);
        locked(&self.ahead).part = Some((k, Arc::clone(&v)));
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of BF16 tensors `t0`, `t1`, ... of these lengths (noise around 0).
    fn safetensors(lens: &[usize]) -> Vec<u8> {
        let (mut data, mut entries, mut x) = (Vec::new(), Vec::new(), 7u64);
        for (i, &n) in lens.iter().enumerate() {
            let start = data.len();
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // bf16 words of small magnitude: a sign, an exponent near 120, noise below.
                data.extend_from_slice(&((((x >> 60) as u16) << 15) | 0x3c00 | (x as u16 & 0x3ff)).to_le_bytes());
            }
            entries.push(format!(r#""t{i}":{{"dtype":"BF16","shape":[{n}],"data_offsets":[{start},{}]}}"#, data.len()));
        }
        let mut header = format!("{{{}}}", entries.join(","));
        while header.len() % 8 != 0 {
            header.push(' ');
        }
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.extend_from_slice(&data);
        f
    }

    /// A file of tensors of several sizes (many chunks of 4 KiB, one chunk, empty), its archive
    /// in a temporary file, and a reader on it.
    fn setup() -> (Vec<u8>, tempfile::NamedTempFile, Reader) {
        let orig = safetensors(&[40_000, 3000, 0, 100, 25_000, 7, 4096]);
        let opts = crate::Options::default().with_chunk_bytes(4096).with_level(crate::Level::Fast);
        let arc = crate::compress(&orig, &opts).unwrap();
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), &arc).unwrap();
        let r = Reader::open(tmp.path(), None, &DecodeOptions::default()).unwrap();
        (orig, tmp, r)
    }

    #[test]
    fn ranges_read_as_the_original() {
        let (orig, tmp, r) = setup();
        assert_eq!(r.size(), orig.len() as u64);
        let arc = std::fs::read(tmp.path()).unwrap();
        let a = Archive::open(&arc).unwrap();
        let mut x = 3u64;
        for i in 0..300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let at = (x >> 33) as usize % orig.len();
            let len = ((x >> 13) as usize % if i % 4 == 0 { 30_000 } else { 600 }).min(orig.len() - at);
            let (mut x, mut y) = (vec![0u8; len], vec![0u8; len]);
            r.read_at(at as u64, &mut x).unwrap();
            a.read_at(at as u64, &mut y).unwrap();
            assert!(x == orig[at..at + len] && y == x, "{len} bytes at {at}");
        }
        let mut all = vec![0u8; orig.len()];
        r.read_at(0, &mut all).unwrap();
        assert!(all == orig);
        assert!(r.read_at(orig.len() as u64 - 1, &mut [0u8; 2]).is_err());
        assert!(a.read_at(u64::MAX, &mut [0u8; 1]).is_err());
        r.read_at(orig.len() as u64, &mut []).unwrap();
    }

    /// A stream's way: a buffer of the longest piece refilled by `read_some` from wherever the
    /// reader seeks; tensors taken in an order other than the file's (llama.cpp's), each from its
    /// start, some twice: every byte as the original's, whatever the read-ahead staged.
    #[test]
    fn tensor_reads_in_any_order_through_a_buffer() {
        let (orig, tmp, r) = setup();
        reads_in_any_order(&orig, &r);
        // Windows of a few chunks, and smaller than one chunk (nothing staged).
        for limit in [64 << 10, 12 << 10] {
            let r = Reader::open(tmp.path(), None, &DecodeOptions::default().with_memory_limit(limit)).unwrap();
            r.read_ahead();
            reads_in_any_order(&orig, &r);
        }
    }

    fn reads_in_any_order(orig: &[u8], r: &Reader) {
        let a = &r.inner.archive;
        let mut buf = vec![0u8; r.piece_max()];
        let mut order: Vec<usize> = (0..a.len()).rev().collect();
        order.extend([1, 0, 3, 2, 1, 5]);
        for t in order {
            let info = a.info(t).unwrap();
            let (start, end) = (info.offset, info.offset + info.nbytes);
            let mut at = start;
            let mut got = Vec::new();
            while at < end {
                let n = r.read_some(at, &mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
                at += n as u64;
            }
            // A read stops at the end of a piece, so never past the tensor.
            assert_eq!(at, end, "tensor {t}");
            assert!(got == orig[start as usize..end as usize], "tensor {t}");
        }
    }
}
