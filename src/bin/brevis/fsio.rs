//! The files the `brevis` command reads and writes: inputs opened read-only (regular files,
//! or standard input spooled to a temporary file), outputs written atomically (a temporary file
//! in the destination folder renamed into place when complete) or copied whole to standard
//! output, and a writer that compares restored bytes with a file.

use brevis::MappedFile as Input;
use brevis::OutputAttrs;
use std::io::{IsTerminal, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The temporary output being written, removed by the Ctrl-C handler.
pub static PENDING: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Maps the input read-only. The file must not change while it is mapped.
pub fn read_input(path: &Path) -> Result<Input, String> {
    open(path)?;
    Input::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// Writes `data` to `out` atomically: temp file in the same folder, fsync, rename.
pub fn write_atomic(out: &Path, force: bool, attrs: &OutputAttrs, data: &[u8]) -> Result<(), String> {
    write_atomic_with(out, force, attrs, |f| {
        f.write_all(data).map_err(|e| format!("cannot write {}: {e}", out.display()))
    })
}

/// Lets `fill` write `out` into a temporary file in the same folder, created with `attrs`'s
/// mode (under the umask); then gives it `attrs`'s time and owner, fsyncs it and renames it
/// into place. On an error (or Ctrl-C) the temporary file is removed and nothing is left. An
/// `out` that is a device or a pipe (`/dev/null`, a FIFO) is written, not replaced: the whole
/// output is made in an unnamed temporary file first, then copied to it.
pub fn write_atomic_with(
    out: &Path,
    force: bool,
    attrs: &OutputAttrs,
    fill: impl FnOnce(&mut std::fs::File) -> Result<(), String>,
) -> Result<(), String> {
    if is_special(out) {
        let mut spool = spool()?;
        fill(&mut spool)?;
        let len = spool.metadata().map_err(|e| format!("cannot write {}: {e}", out.display()))?.len();
        let mut dev = std::fs::OpenOptions::new()
            .write(true)
            .open(out)
            .map_err(|e| format!("cannot open {}: {e}", out.display()))?;
        return copy_spool(&mut spool, len, &mut dev).map_err(|e| format!("cannot write {}: {e}", out.display()));
    }
    let mut tmp = attrs.temp_file_beside(out).map_err(|e| format!("cannot create a temporary file {e}"))?;
    *PENDING.lock().unwrap() = Some(tmp.path().to_path_buf());
    let res = (|| {
        fill(tmp.as_file_mut())?;
        attrs.apply(tmp.as_file()).map_err(|e| format!("cannot set the time of {}: {e}", out.display()))?;
        tmp.as_file().sync_all().map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        let kept = if force { tmp.persist(out) } else { tmp.persist_noclobber(out) };
        kept.map(|_| ()).map_err(|e| match e.error.kind() {
            std::io::ErrorKind::AlreadyExists if !force => {
                format!("{} already exists; use -f to overwrite", out.display())
            }
            _ if out.is_dir() => format!("{} is a directory", out.display()),
            _ => format!("cannot create {}: {}", out.display(), e.error),
        })
    })();
    *PENDING.lock().unwrap() = None;
    res
}

/// Whether `path` exists and is neither a regular file nor a directory (a device such as
/// `/dev/null`, a FIFO, a socket), following symbolic links.
pub fn is_special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Refuses an output that is a directory (or names one: it ends in `/`), that exists (without
/// `force`; a device or a pipe is written without it), or that is the input.
pub fn check_output(input: &Path, out: &Path, force: bool) -> Result<(), String> {
    if out.is_dir() {
        return Err(format!("{} is a directory; give a file name with -o", out.display()));
    }
    if out.as_os_str().to_string_lossy().ends_with(std::path::is_separator) {
        return Err(format!("{} names a directory (it ends in '/'); give a file name with -o", out.display()));
    }
    if out.exists() && !is_special(out) {
        if !force {
            return Err(format!("{} already exists; use -f to overwrite", out.display()));
        }
        if let (Ok(a), Ok(b)) = (std::fs::canonicalize(input), std::fs::canonicalize(out)) {
            if a == b {
                return Err(format!("{} is both the input and the output", out.display()));
            }
        }
    }
    Ok(())
}

/// A library error about `input`, or about `out` when writing it failed (`write_failed`, or
/// the archive writer's own, [`brevis::Error::is_write_error`]).
pub fn named(e: brevis::Error, input: &Path, out: &Path, write_failed: bool) -> String {
    let writing = write_failed || e.is_write_error();
    match e {
        brevis::Error::Io(io) if writing => format!("cannot write {}: {io}", out.display()),
        e => format!("{}: {e}", input.display()),
    }
}

/// A writer that notes whether writing (or reading, for [`Compare`]) failed, to tell those
/// errors from the archive's own.
pub struct Watch<W> {
    pub inner: W,
    pub failed: bool,
}

impl<W> Watch<W> {
    pub fn new(inner: W) -> Self {
        Watch { inner, failed: false }
    }

    fn note<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        self.failed |= r.is_err();
        r
    }
}

impl<W: Write> Write for Watch<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(data);
        self.note(r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

/// Opens a file to read; a directory is an error that says so.
pub fn open(path: &Path) -> Result<std::fs::File, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if f.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(format!("{} is a directory", path.display()));
    }
    Ok(f)
}

/// Opens an input that is read by position (its length taken now): a regular file.
pub fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), String> {
    let f = open(path)?;
    let meta = f.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    Ok((f, meta))
}

/// A writer that compares what it is given with a file read sequentially (or only counts it),
/// remembering the first differing byte.
pub struct Compare {
    original: Option<std::io::BufReader<std::fs::File>>,
    pos: u64,
    differs: Option<u64>,
    buf: Vec<u8>,
}

impl Compare {
    pub fn new(original: Option<std::fs::File>) -> Compare {
        Compare {
            original: original.map(|f| std::io::BufReader::with_capacity(1 << 20, f)),
            pos: 0,
            differs: None,
            buf: Vec::new(),
        }
    }

    pub fn differs_at(&self) -> Option<u64> {
        self.differs
    }

    /// The first differing byte, counting an original longer than what was written.
    pub fn finish(mut self) -> std::io::Result<Option<u64>> {
        if self.differs.is_none() {
            if let Some(o) = &mut self.original {
                if o.read(&mut [0u8; 1])? > 0 {
                    self.differs = Some(self.pos);
                }
            }
        }
        Ok(self.differs)
    }
}

impl Write for Compare {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if let (None, Some(o)) = (self.differs, &mut self.original) {
            self.buf.resize(data.len(), 0);
            let mut got = 0;
            while got < data.len() {
                match o.read(&mut self.buf[got..])? {
                    0 => break,
                    n => got += n,
                }
            }
            if let Some(i) = data[..got].iter().zip(&self.buf[..got]).position(|(a, b)| a != b) {
                self.differs = Some(self.pos + i as u64);
            } else if got < data.len() {
                self.differs = Some(self.pos + got as u64);
            }
        }
        self.pos += data.len() as u64;
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Standard input as a file read by position: itself when it is a regular file read from its
/// start (`< file`), else a copy spooled to an unnamed temporary file in `$TMPDIR` (removed by
/// the system when closed), so memory stays bounded whatever the input's size; the spool needs
/// that much free disk space.
pub fn stdin_file() -> Result<std::fs::File, String> {
    if let Some(f) = stdin_regular_file() {
        return Ok(f);
    }
    let mut spool = tempfile::tempfile().map_err(|e| format!("cannot create a temporary file for stdin: {e}"))?;
    std::io::copy(&mut std::io::stdin().lock(), &mut spool)
        .map_err(|e| format!("cannot spool stdin to a temporary file: {e}"))?;
    Ok(spool)
}

/// Standard input when it is a regular file positioned at its start.
#[cfg(unix)]
fn stdin_regular_file() -> Option<std::fs::File> {
    use std::os::fd::AsFd;
    let mut f = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned().ok()?);
    (f.metadata().ok()?.is_file() && f.stream_position().ok()? == 0).then_some(f)
}

#[cfg(not(unix))]
fn stdin_regular_file() -> Option<std::fs::File> {
    None
}

/// Refuses to write binary data to a terminal (as zstd does), unless forced.
pub fn check_stdout(force: bool) -> Result<(), String> {
    if !force && std::io::stdout().is_terminal() {
        return Err(
            "stdout is a terminal: refusing to write binary data to it (redirect it, or -o FILE; -f forces)".into()
        );
    }
    Ok(())
}

/// An unnamed temporary file in `$TMPDIR` that holds an output for standard output until it
/// is complete.
pub fn spool() -> Result<std::fs::File, String> {
    tempfile::tempfile().map_err(|e| format!("cannot create a temporary file: {e}"))
}

/// Copies the first `len` bytes of the complete output `spool` to standard output.
pub fn spool_to_stdout(spool: &mut std::fs::File, len: u64) -> Result<(), String> {
    copy_spool(spool, len, &mut std::io::stdout().lock()).map_err(|e| format!("cannot write stdout: {e}"))
}

/// Copies the first `len` bytes of the complete output `spool` to `out`.
fn copy_spool(spool: &mut std::fs::File, len: u64, out: &mut impl Write) -> std::io::Result<()> {
    spool.rewind()?;
    let copied = std::io::copy(&mut (&*spool).take(len), out)?;
    if copied != len {
        let why = format!("the temporary output ended after {copied} of {len} bytes");
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why));
    }
    out.flush()
}

/// Flushes the folder holding `path` to disk, so that a rename into it survives a crash.
pub fn sync_parent(path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("cannot sync {}: {e}", dir.display()))
}
