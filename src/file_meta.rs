//! The original file's permission bits and modification time, which an archive may record
//! (format version 3, docs/FORMAT.md) so that decompression restores them as tar does, and
//! what a new output file takes from its input, as zstd gives it: the input's permission bits
//! (under the umask), its modification time and, when run as root, its owner.
//!
//! Nothing here is read implicitly: [`crate::compress`] records metadata only when
//! [`crate::Options::file_meta`] is set, so archives of the same bytes and options are
//! identical. The command line and the C ABI's file functions set it from the input file.

use std::fs::{File, Metadata};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Permission bits and modification time of the file an archive was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileMeta {
    /// Permission bits, `st_mode & 0o7777` (at most [`FileMeta::MODE_BITS`]).
    pub mode: u32,
    /// Modification time: whole seconds since the Unix epoch (negative before it)...
    pub mtime: i64,
    /// ...plus these nanoseconds (below 1 000 000 000).
    pub mtime_nanos: u32,
}

impl FileMeta {
    /// The mode bits an archive may record: permissions, setuid, setgid, sticky.
    pub const MODE_BITS: u32 = 0o7777;

    /// A file's permission bits and modification time, from its metadata.
    pub fn of(m: &Metadata) -> FileMeta {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileMeta { mode: m.mode() & Self::MODE_BITS, mtime: m.mtime(), mtime_nanos: m.mtime_nsec() as u32 }
        }
        #[cfg(not(unix))]
        {
            let mode = if m.permissions().readonly() { 0o444 } else { 0o644 };
            FileMeta::at(mode, m.modified().unwrap_or(UNIX_EPOCH))
        }
    }

    /// `mode` and the time `t`.
    pub fn at(mode: u32, t: SystemTime) -> FileMeta {
        let (mtime, mtime_nanos) = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => (i64::try_from(d.as_secs()).unwrap_or(i64::MAX), d.subsec_nanos()),
            Err(e) => {
                // Before the epoch: whole seconds rounded down, nanoseconds counted up from them.
                let d = e.duration();
                let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                match d.subsec_nanos() {
                    0 => (-secs, 0),
                    n => (-secs - 1, 1_000_000_000 - n),
                }
            }
        };
        FileMeta { mode: mode & Self::MODE_BITS, mtime, mtime_nanos }
    }

    /// The modification time, or None when this platform cannot represent it.
    pub fn modified(&self) -> Option<SystemTime> {
        let nanos = Duration::from_nanos(self.mtime_nanos as u64);
        if self.mtime >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_secs(self.mtime as u64))?.checked_add(nanos)
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_secs(self.mtime.unsigned_abs()))?.checked_add(nanos)
        }
    }
}

/// What a new output file is given: the permission bits it is created with (the process's
/// umask then clears some), and, once written and before it is renamed into place, a
/// modification time and an owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputAttrs {
    /// Permission bits to create the file with (0o666 for a plain new file); the umask applies.
    pub mode: u32,
    /// Modification time to set (None: the time of writing).
    pub mtime: Option<SystemTime>,
    /// Owner and group to set, only when running as root (None: the creator's).
    pub owner: Option<(u32, u32)>,
}

impl OutputAttrs {
    /// A plain new file: mode 0o666 under the umask, the time of writing, the creator's owner.
    pub fn plain() -> OutputAttrs {
        OutputAttrs { mode: 0o666, mtime: None, owner: None }
    }

    /// What zstd gives an output: the permission bits and modification time of `recorded` (the
    /// original file's, from an archive) or else of `source` (the input file's metadata), and,
    /// when this process runs as root, `source`'s owner. Setuid, setgid and sticky bits are
    /// never given.
    pub fn like(source: &Metadata, recorded: Option<&FileMeta>) -> OutputAttrs {
        let meta = recorded.copied().unwrap_or_else(|| FileMeta::of(source));
        OutputAttrs { mode: meta.mode & 0o777, mtime: meta.modified(), owner: owner_if_root(source) }
    }

    /// Gives the written file `f` its owner (failures ignored: the file keeps the creator's)
    /// and its modification time.
    pub fn apply(&self, f: &File) -> std::io::Result<()> {
        #[cfg(unix)]
        if let Some((uid, gid)) = self.owner {
            let _ = std::os::unix::fs::fchown(f, Some(uid), Some(gid));
        }
        if let Some(t) = self.mtime {
            f.set_times(std::fs::FileTimes::new().set_modified(t))?;
        }
        Ok(())
    }

    /// The output's temporary file: `.brevis-*.tmp` in `out`'s folder (so that renaming it over
    /// `out` is atomic), created with these permission bits (the umask then applies).
    pub fn temp_file_beside(&self, out: &std::path::Path) -> std::io::Result<tempfile::NamedTempFile> {
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let mut b = tempfile::Builder::new();
        b.prefix(".brevis-").suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            b.permissions(std::fs::Permissions::from_mode(self.mode));
        }
        b.tempfile_in(dir).map_err(|e| std::io::Error::new(e.kind(), format!("in {}: {e}", dir.display())))
    }
}

/// `m`'s owner and group when this process runs as root (who alone may give files away).
fn owner_if_root(m: &Metadata) -> Option<(u32, u32)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        (unsafe { libc::geteuid() } == 0).then(|| (m.uid(), m.gid()))
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_on_both_sides_of_the_epoch() {
        for (secs, nanos) in [(0i64, 0u32), (1_700_000_000, 123_456_789), (-1, 999_999_999), (-86_400, 0), (-5, 1)] {
            let m = FileMeta { mode: 0o640, mtime: secs, mtime_nanos: nanos };
            let t = m.modified().unwrap();
            assert_eq!(FileMeta::at(0o640, t), m, "{secs}.{nanos}");
        }
        let before = UNIX_EPOCH - Duration::new(3, 250_000_000);
        assert_eq!(FileMeta::at(0o1755, before), FileMeta { mode: 0o1755, mtime: -4, mtime_nanos: 750_000_000 });
        assert_eq!(FileMeta::at(0o100644, UNIX_EPOCH).mode, 0o644);
    }

    #[test]
    fn outputs_take_the_recorded_meta_first_and_never_special_bits() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let md = std::fs::metadata(&f).unwrap();
        let rec = FileMeta { mode: 0o4750, mtime: 1_000_000_000, mtime_nanos: 5 };
        let a = OutputAttrs::like(&md, Some(&rec));
        assert_eq!((a.mode, a.mtime), (0o750, rec.modified()));
        let b = OutputAttrs::like(&md, None);
        assert_eq!((b.mode, b.mtime), (FileMeta::of(&md).mode & 0o777, md.modified().ok()));
        assert_eq!(OutputAttrs::plain(), OutputAttrs { mode: 0o666, mtime: None, owner: None });
    }
}
