//! `brevis exec ARCHIVE... -- PROGRAM ARGS...`: runs a program we do not build (llama.cpp's
//! `llama-server`, a Python script) on archives as if they were the original files. Each archive
//! is decoded, every checksum verified, into a sealed anonymous in-memory file (a memfd) that the
//! program inherits; every argument of PROGRAM that names an archive is replaced by the path of
//! its decoded bytes, `/proc/self/fd/N` (a folder made by `compress -r`: a private temporary
//! folder of links, `NAME` -> `/proc/self/fd/N` for each `NAME.brv` and -> the file itself for
//! the others, removed when PROGRAM exits). PROGRAM's stdin, stdout and stderr are brevis's; its
//! exit status is brevis's, and a signal that kills it kills brevis the same way once the folder
//! is removed. Signals sent to brevis (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) are
//! passed to PROGRAM. Linux only.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `brevis exec` was given.
pub struct Exec<'a> {
    pub archives: &'a [PathBuf],
    pub reference: Option<&'a Path>,
    pub command: &'a [OsString],
    pub memory_limit: u64,
    pub threads: usize,
}

#[cfg(target_os = "linux")]
pub fn run(e: &Exec) -> Result<ExitCode, String> {
    linux::run(e)
}

#[cfg(not(target_os = "linux"))]
pub fn run(_: &Exec) -> Result<ExitCode, String> {
    Err("exec: needs Linux (memfd_create and /proc/self/fd); use brevis decompress instead".into())
}

/// `arg` with `from` (a path as given on the command line, or with a trailing `/`) replaced by
/// `to`: the whole argument, its part after `=` (`--model=PATH`), or a path under the folder
/// `from` (`FOLDER/config.json`). None when `arg` does not name `from`.
fn substitute(arg: &OsStr, from: &Path, to: &Path) -> Option<OsString> {
    let arg = arg.to_str()?;
    let from = from.to_str()?.trim_end_matches('/');
    let to = to.to_str()?;
    let (head, path) = match arg.split_once('=') {
        Some((h, p)) if h.starts_with('-') => (format!("{h}="), p),
        _ => (String::new(), arg),
    };
    let rest = path.strip_prefix(from)?;
    if rest.is_empty() || rest == "/" || rest.starts_with('/') {
        Some(format!("{head}{to}{rest}").into())
    } else {
        None
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use crate::family;
    use crate::jobs::{Dst, Job, Plan, Src};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The running PROGRAM's pid, for the signal handler (0: none).
    static CHILD: AtomicI32 = AtomicI32::new(0);
    /// A signal that came before PROGRAM's pid was known, for PROGRAM once it is (0: none). A
    /// program can start, and its caller signal brevis, before `spawn` has returned the pid.
    static PENDING: AtomicI32 = AtomicI32::new(0);

    const FORWARDED: [libc::c_int; 6] =
        [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

    extern "C" fn forward(sig: libc::c_int) {
        let pid = CHILD.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(pid, sig) };
        } else {
            PENDING.store(sig, Ordering::SeqCst);
        }
    }

    /// Decoded archives: their memfds (kept open, inherited by PROGRAM) and the temporary
    /// folders made for folders (removed on drop).
    #[derive(Default)]
    struct Decoded {
        files: Vec<std::fs::File>,
        folders: Vec<tempfile::TempDir>,
        /// What each archive argument becomes.
        paths: Vec<(PathBuf, PathBuf)>,
    }

    pub fn run(e: &Exec) -> Result<ExitCode, String> {
        let (program, args) = e.command.split_first().ok_or("exec: no PROGRAM after --")?;
        let mut d = Decoded::default();
        let reference = match e.reference {
            Some(r) => Some(std::fs::File::open(r).map_err(|err| format!("{}: {err}", r.display()))?),
            None => None,
        };
        for a in e.archives {
            let to = if a.is_dir() {
                folder(e, a, reference.as_ref(), &mut d)?
            } else {
                file(e, a, reference.as_ref(), &mut d)?
            };
            d.paths.push((a.clone(), to));
        }
        let args: Vec<OsString> = args
            .iter()
            .map(|arg| d.paths.iter().find_map(|(from, to)| substitute(arg, from, to)).unwrap_or_else(|| arg.clone()))
            .collect();
        for f in &d.files {
            // Inherited by PROGRAM: the descriptor was made close-on-exec.
            // SAFETY: `f` is open.
            if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
                return Err(format!("exec: {}", std::io::Error::last_os_error()));
            }
        }
        for sig in FORWARDED {
            // SAFETY: `forward` only reads an atomic and calls kill.
            unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
        }
        let mut child = std::process::Command::new(program)
            .args(&args)
            .spawn()
            .map_err(|err| format!("exec: cannot run {}: {err}", program.to_string_lossy()))?;
        CHILD.store(child.id() as i32, Ordering::SeqCst);
        // A signal handled before the store is passed on here; one handled after it, by the handler.
        let early = PENDING.swap(0, Ordering::SeqCst);
        if early != 0 {
            // SAFETY: a plain kill of the child's pid.
            unsafe { libc::kill(child.id() as i32, early) };
        }
        let status = loop {
            match child.wait() {
                Ok(s) => break s,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(format!("exec: waiting for {}: {err}", program.to_string_lossy())),
            }
        };
        CHILD.store(0, Ordering::SeqCst);
        drop(d);
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            // Die of the same signal, as PROGRAM did (the temporary folders are gone already).
            // SAFETY: default disposition, then the signal to this process.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
            return Ok(ExitCode::from((128 + sig) as u8));
        }
        Ok(ExitCode::from(status.code().unwrap_or(1) as u8))
    }

    /// Decodes the archive `a` (against `reference`, when given and needed) into a memfd;
    /// returns the path PROGRAM opens it by.
    fn file(e: &Exec, a: &Path, reference: Option<&std::fs::File>, d: &mut Decoded) -> Result<PathBuf, String> {
        let f = std::fs::File::open(a).map_err(|err| format!("{}: {err}", a.display()))?;
        let mut archive =
            brevis::Archive::open_file(&f, e.memory_limit).map_err(|err| format!("{}: {err}", a.display()))?;
        if archive.needs_reference() {
            let r =
                reference.ok_or_else(|| format!("{}: made against a reference (give it with --ref)", a.display()))?;
            archive.set_reference_file(r).map_err(|err| format!("{}: {err}", a.display()))?;
        }
        memfd(e, a, &archive, d)
    }

    fn memfd(e: &Exec, a: &Path, archive: &brevis::Archive, d: &mut Decoded) -> Result<PathBuf, String> {
        let name = a.file_name().map(|n| n.to_string_lossy().trim_end_matches(".brv").to_string()).unwrap_or_default();
        let opts = brevis::DecodeOptions::default().with_threads(e.threads);
        let m = archive
            .decompress_to_memfd(&format!("brevis:{name}"), &opts)
            .map_err(|err| format!("{}: {err}", a.display()))?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", m.as_raw_fd()));
        d.files.push(m);
        Ok(path)
    }

    /// A folder made by `compress -r`: a private temporary folder with the same tree, where each
    /// `NAME.brv` is `NAME`, a link to its decoded bytes, and every other file a link to itself.
    /// Archives made against another archive of the folder (a family) are decoded after it,
    /// against its decoded bytes (`family::restored_references`, as `decompress -r` does).
    fn folder(e: &Exec, dir: &Path, reference: Option<&std::fs::File>, d: &mut Decoded) -> Result<PathBuf, String> {
        let tmp = tempfile::Builder::new().prefix("brevis-exec-").tempdir().map_err(|err| format!("exec: {err}"))?;
        let root = tmp.path().to_path_buf();
        d.folders.push(tmp);
        let mut files = Vec::new();
        walk(dir, Path::new(""), &mut files).map_err(|err| format!("{}: {err}", dir.display()))?;
        // Archives to decode (as `decompress -r` restores them); links for the rest.
        let mut plan = Plan::default();
        for rel in files {
            let src = dir.join(&rel);
            if let Some(parent) = rel.parent() {
                std::fs::create_dir_all(root.join(parent)).map_err(|err| format!("exec: {err}"))?;
            }
            if rel.extension().is_some_and(|x| x == "brv") && brevis_magic(&src) {
                plan.jobs.push(Job { src: Src::File(src), dst: Dst::File(root.join(rel.with_extension(""))) });
            } else {
                let target = std::fs::canonicalize(&src).map_err(|err| format!("{}: {err}", src.display()))?;
                std::os::unix::fs::symlink(target, root.join(&rel)).map_err(|err| format!("exec: {err}"))?;
            }
        }
        // A family's master first; each archive made against another one's original reads it
        // through that one's link (/proc/self/fd/N of the memfd, in this process), the others
        // against --ref.
        let restored = family::restored_references(&mut plan, e.memory_limit)?;
        for job in &plan.jobs {
            let (Src::File(src), Dst::File(dst)) = (&job.src, &job.dst) else { continue };
            let named = |err: brevis::Error| format!("{}: {err}", src.display());
            let f = std::fs::File::open(src).map_err(|err| format!("{}: {err}", src.display()))?;
            let against = match restored.get(src) {
                Some(p) => Some(std::fs::File::open(p).map_err(|err| format!("{}: {err}", p.display()))?),
                None => None,
            };
            let mut a = brevis::Archive::open_file(&f, e.memory_limit).map_err(named)?;
            if a.needs_reference() {
                let r = against.as_ref().or(reference).ok_or_else(|| {
                    format!(
                        "{}: made against a file that no archive of the folder restores (give it with --ref)",
                        src.display()
                    )
                })?;
                a.set_reference_file(r).map_err(named)?;
            }
            let path = memfd(e, src, &a, d)?;
            std::os::unix::fs::symlink(&path, dst).map_err(|err| format!("exec: {err}"))?;
        }
        Ok(root)
    }

    /// Every file under `dir` (following no links), as paths relative to it.
    fn walk(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir.join(rel))? {
            let entry = entry?;
            let rel = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                walk(dir, &rel, out)?;
            } else {
                out.push(rel);
            }
        }
        Ok(())
    }

    fn brevis_magic(p: &Path) -> bool {
        let mut head = [0u8; 8];
        std::fs::File::open(p).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok()
            && head == [0x89, b'B', b'R', b'V', b'\r', b'\n', 0x1a, b'\n']
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_naming_an_archive_are_replaced() {
        let (from, to) = (Path::new("m/model.gguf.brv"), Path::new("/proc/self/fd/5"));
        let s = |a: &str| substitute(OsStr::new(a), from, to).map(|o| o.into_string().unwrap());
        assert_eq!(s("m/model.gguf.brv").as_deref(), Some("/proc/self/fd/5"));
        assert_eq!(s("--model=m/model.gguf.brv").as_deref(), Some("--model=/proc/self/fd/5"));
        assert_eq!(s("m/model.gguf.brv.bak"), None);
        assert_eq!(s("x=m/model.gguf.brv"), None);
        assert_eq!(s("-m"), None);
        let (dir, tmp) = (Path::new("folder.brv/"), Path::new("/tmp/brevis-exec-x"));
        let s = |a: &str| substitute(OsStr::new(a), dir, tmp).map(|o| o.into_string().unwrap());
        assert_eq!(s("folder.brv").as_deref(), Some("/tmp/brevis-exec-x"));
        assert_eq!(s("folder.brv/").as_deref(), Some("/tmp/brevis-exec-x/"));
        assert_eq!(s("folder.brv/config.json").as_deref(), Some("/tmp/brevis-exec-x/config.json"));
        assert_eq!(s("folder.brvx"), None);
    }
}
