//! Where bytes are read from: a slice in memory, or a file read in windows (positioned reads,
//! so that memory holds only the windows in use, whatever the file size, and any number of
//! threads may read at once).

use crate::error::{Error, Result};
use std::borrow::Cow;
use std::fs::File;

/// A whole input: memory, an open file of a known length, or bytes computed as they are read.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    Memory(&'a [u8]),
    File { file: &'a File, len: u64 },
    Computed(&'a dyn Computed),
}

/// Bytes that are computed when read rather than stored (the prediction a derivation of a
/// reference tensor makes, `compress::plan`): any range of them, at any time, from any thread.
pub trait Computed: Sync + std::fmt::Debug {
    /// How many bytes there are.
    fn len(&self) -> u64;
    /// Bytes `[start, start + len)` (within [`Computed::len`]).
    fn compute(&self, start: u64, len: usize) -> Result<Vec<u8>>;
}

impl<'a> Source<'a> {
    /// A file as a source; its length is taken now (the file must not change while it is read).
    pub fn file(file: &'a File) -> Result<Source<'a>> {
        Ok(Source::File { file, len: file.metadata()?.len() })
    }

    pub fn len(&self) -> u64 {
        match self {
            Source::Memory(b) => b.len() as u64,
            Source::File { len, .. } => *len,
            Source::Computed(c) => c.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole source as a byte range.
    pub fn all(self) -> Result<Bytes<'a>> {
        self.range(0, self.len())
    }

    /// Bytes `[start, end)`; an error when out of range or too long for this machine's `usize`.
    pub fn range(self, start: u64, end: u64) -> Result<Bytes<'a>> {
        if start > end || end > self.len() {
            return Err(Error::invalid(format!("byte range {start}..{end} is outside the input")));
        }
        let len = usize::try_from(end - start).map_err(|_| Error::Limit("input range too large".into()))?;
        Ok(Bytes { src: self, start, len })
    }

    /// Calls `f` with bytes `[start, start + len)`: borrowed from memory, or read from the file
    /// into a per-thread buffer that is reused from call to call (no allocation in the decode
    /// loop). Calls may nest: an inner call on the same thread reads into a buffer of its own.
    pub fn with_read<R>(&self, start: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        thread_local! {
            static BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
        }
        match *self {
            Source::Memory(_) | Source::Computed(_) => Ok(f(&self.read(start, len)?)),
            Source::File { file, .. } => {
                self.check(start, len)?;
                let mut buf = BUF.take();
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                let r = read_exact_at(file, &mut buf[..len], start).map_err(read_error).map(|()| f(&buf[..len]));
                BUF.set(buf);
                r
            }
        }
    }

    /// An error unless `[start, start + len)` is within the source.
    fn check(&self, start: u64, len: usize) -> Result<()> {
        match start.checked_add(len as u64) {
            Some(e) if e <= self.len() => Ok(()),
            _ => Err(Error::corrupt(format!("read of {len} bytes at {start} is past the end of the input"))),
        }
    }

    /// Reads bytes `[start, start + len)`: borrowed from memory, or read from the file.
    pub fn read(&self, start: u64, len: usize) -> Result<Cow<'a, [u8]>> {
        self.check(start, len)?;
        match *self {
            Source::Memory(b) => Ok(Cow::Borrowed(&b[start as usize..start as usize + len])),
            Source::File { file, .. } => Ok(Cow::Owned(read_new(file, start, len).map_err(read_error)?)),
            Source::Computed(c) => Ok(Cow::Owned(c.compute(start, len)?)),
        }
    }
}

fn read_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::invalid("the input file became shorter while it was read"),
        _ => Error::Io(e),
    }
}

/// `len` bytes of `file` from `offset`, into a new vector (read straight into its capacity: no
/// zero fill first, on Unix).
fn read_new(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        let mut done = 0;
        while done < len {
            let at = libc::off_t::try_from(offset + done as u64).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            // SAFETY: the destination is the vector's capacity past `done` (`len - done` bytes,
            // allocated above); `pread` writes at most that many bytes there.
            let got = unsafe { libc::pread(file.as_raw_fd(), buf.as_mut_ptr().add(done).cast(), len - done, at) };
            match got {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n if n > 0 => done += n as usize,
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        // SAFETY: `pread` wrote all `len` bytes (the loop ends only when `done == len`).
        unsafe { buf.set_len(len) };
        Ok(buf)
    }
    #[cfg(not(unix))]
    {
        let mut buf = vec![0u8; len];
        read_exact_at(file, &mut buf, offset)?;
        Ok(buf)
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A byte range of a source (a tensor's data, a gap between tensors), read in windows.
#[derive(Clone, Copy, Debug)]
pub struct Bytes<'a> {
    src: Source<'a>,
    start: u64,
    len: usize,
}

impl<'a> From<&'a [u8]> for Bytes<'a> {
    fn from(b: &'a [u8]) -> Bytes<'a> {
        Bytes { src: Source::Memory(b), start: 0, len: b.len() }
    }
}

impl<'a> From<&'a Vec<u8>> for Bytes<'a> {
    fn from(b: &'a Vec<u8>) -> Bytes<'a> {
        Bytes::from(b.as_slice())
    }
}

impl<'a> Bytes<'a> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `[a, b)` of this range (panics if out of range, like slicing).
    pub fn slice(&self, a: usize, b: usize) -> Bytes<'a> {
        assert!(a <= b && b <= self.len, "byte range {a}..{b} outside {}", self.len);
        Bytes { src: self.src, start: self.start + a as u64, len: b - a }
    }

    /// An error unless `[a, b)` is within this range.
    fn check(&self, a: usize, b: usize) -> Result<()> {
        if a > b || b > self.len {
            return Err(Error::invalid(format!("byte range {a}..{b} outside a range of {}", self.len)));
        }
        Ok(())
    }

    /// Reads bytes `[a, b)` of this range.
    pub fn read(&self, a: usize, b: usize) -> Result<Cow<'a, [u8]>> {
        self.check(a, b)?;
        self.src.read(self.start + a as u64, b - a)
    }

    /// Calls `f` with bytes `[a, b)` of this range, read into a per-thread buffer when they
    /// are not in memory ([`Source::with_read`]).
    pub fn with_read<R>(&self, a: usize, b: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.check(a, b)?;
        self.src.with_read(self.start + a as u64, b - a, f)
    }

    /// All the bytes at once (for small ranges: residue spans, tests).
    pub fn read_all(&self) -> Result<Cow<'a, [u8]>> {
        self.read(0, self.len)
    }

    /// Calls `f(position, window)` on consecutive windows of at most `step` bytes (at least 1),
    /// in order; stops at the first error or when `f` returns false. Returns whether it ran to
    /// the end.
    pub fn each_window(&self, step: usize, mut f: impl FnMut(usize, &[u8]) -> bool) -> Result<bool> {
        let step = step.max(1);
        let mut a = 0;
        while a < self.len {
            let b = (a + step).min(self.len);
            if !f(a, &self.read(a, b)?) {
                return Ok(false);
            }
            a = b;
        }
        Ok(true)
    }

    /// Whether two ranges hold the same bytes (compared window by window).
    pub fn same_as(&self, other: &Bytes, step: usize) -> Result<bool> {
        if self.len != other.len {
            return Ok(false);
        }
        let mut err = None;
        let same = self.each_window(step, |a, w| match other.read(a, a + w.len()) {
            Ok(o) => *o == *w,
            Err(e) => {
                err = Some(e);
                false
            }
        })?;
        match err {
            Some(e) => Err(e),
            None => Ok(same),
        }
    }

    /// xxh3-128 of the bytes, hashed window by window.
    pub fn xxh3_128(&self, step: usize) -> Result<u128> {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        self.each_window(step, |_, w| {
            h.update(w);
            true
        })?;
        Ok(h.digest128())
    }
}

/// Window of a sequential pass over a file (hashing, comparing, checking generators).
pub const WINDOW: usize = 1 << 20;

/// A whole file mapped read-only (an empty file is an empty slice: it cannot be mapped). For the
/// callers that need the whole input at once (the C ABI's file helpers, `brevis prior learn`,
/// `bench`, compressing against a reference); the file must not change while it is mapped.
pub enum MappedFile {
    /// An empty file.
    Empty,
    /// The file's pages.
    Map(memmap2::Mmap),
}

impl MappedFile {
    /// Maps the file at `path`.
    pub fn open(path: &std::path::Path) -> std::io::Result<MappedFile> {
        Self::of(&File::open(path)?)
    }

    /// Maps an open file (from its start, whatever its position).
    pub fn of(f: &File) -> std::io::Result<MappedFile> {
        if f.metadata()?.len() == 0 {
            return Ok(MappedFile::Empty);
        }
        // SAFETY: the map is read-only and private to this process; like zstd and every
        // mmap-based tool, we rely on the file not being truncated by another process while we
        // read it.
        Ok(MappedFile::Map(unsafe { memmap2::Mmap::map(f) }?))
    }
}

impl std::ops::Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            MappedFile::Empty => &[],
            MappedFile::Map(m) => m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_of_memory_and_file_agree() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        let file = Source::file(&f).unwrap().range(100, 9_000).unwrap();
        let mem = Bytes::from(&data[100..9_000]);
        assert_eq!(file.len(), mem.len());
        assert_eq!(*file.read(7, 4_000).unwrap(), *mem.read(7, 4_000).unwrap());
        assert!(file.same_as(&mem, 333).unwrap());
        assert!(!file.same_as(&Bytes::from(&data[101..9_001]), 333).unwrap());
        for step in [1, 7, 4096, 1 << 20] {
            assert_eq!(file.xxh3_128(step).unwrap(), xxhash_rust::xxh3::xxh3_128(&data[100..9_000]));
        }
        assert!(file.read(8_000, 9_000).is_err());
        assert!(Source::file(&f).unwrap().range(0, 10_001).is_err());
    }
}
