//! What one `compress` or `decompress` call works on: each input (a file, `-` for standard
//! input, or with `-r` every file under a folder) paired with its output.
//!
//! Folders (`-r`): every regular file is one job, in name order; with `-o OUT_DIR` the tree is
//! mirrored under OUT_DIR (`OUT_DIR/<relative path>.brv`, and back), empty folders included;
//! without it each output goes next to its input. Symbolic links to files are followed (the
//! output is a regular file with the target's bytes; links run first, so that `--rm` deletes
//! the link before its target); links to folders are not followed (no
//! cycles), and they, broken links and special files are reported as failures: a run that exits
//! with 0 has written every file of the tree.

use crate::Files;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Where a job reads.
pub enum Src {
    Stdin,
    File(PathBuf),
}

/// Where a job writes.
pub enum Dst {
    Stdout,
    File(PathBuf),
}

pub struct Job {
    pub src: Src,
    pub dst: Dst,
}

impl Src {
    pub fn name(&self) -> String {
        match self {
            Src::Stdin => "stdin".into(),
            Src::File(p) => p.display().to_string(),
        }
    }
}

impl Dst {
    pub fn name(&self) -> String {
        match self {
            Dst::Stdout => "stdout".into(),
            Dst::File(p) => p.display().to_string(),
        }
    }
}

/// The jobs of a call, the output folders to create first (mirrored folders, empty ones too)
/// and the inputs that cannot be jobs (reported as failures; the others still run).
#[derive(Default)]
pub struct Plan {
    pub jobs: Vec<Job>,
    /// The jobs of symbolic links to files met in folders: they run first, so that `--rm`
    /// removing a link's target (in the same tree) does not leave the link without its bytes.
    links: Vec<Job>,
    pub dirs: Vec<PathBuf>,
    pub errors: Vec<String>,
}

/// Whether the call compresses (outputs named INPUT.brv) or decompresses (INPUT without .brv).
#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    Compress,
    Decompress,
}

impl Mode {
    /// The output of `input` next to it (or under a mirrored folder), None when a decompressed
    /// name cannot be made (no `.brv` suffix, or nothing before it).
    fn rename(self, input: &Path) -> Option<PathBuf> {
        match self {
            Mode::Compress => {
                let mut s = input.as_os_str().to_owned();
                s.push(".brv");
                Some(PathBuf::from(s))
            }
            Mode::Decompress => {
                let name = input.file_name()?.to_str()?.strip_suffix(".brv").filter(|s| !s.is_empty())?;
                Some(input.with_file_name(name))
            }
        }
    }
}

/// Pairs the inputs of `f` with their outputs; an error is a usage error (exit code 2).
pub fn plan(mode: Mode, f: &Files) -> Result<Plan, String> {
    let mut inputs = f.inputs.clone();
    if inputs.is_empty() {
        if std::io::stdin().is_terminal() {
            return Err("no input: give files, or - to read stdin".into());
        }
        inputs.push(PathBuf::from("-"));
    }
    let stdin = |p: &PathBuf| p.as_os_str() == "-";
    if inputs.iter().filter(|p| stdin(p)).count() > 1 {
        return Err("stdin (-) can be read only once".into());
    }
    let to_stdout = f.stdout || f.output.as_ref().is_some_and(|o| o.as_os_str() == "-");
    if f.recursive && to_stdout {
        return Err("-r writes files: it cannot be combined with -c".into());
    }
    if !f.recursive && inputs.len() > 1 && f.output.is_some() {
        return Err("-o names one output: with several inputs each goes next to its input (or -r -o DIR)".into());
    }
    if mode == Mode::Compress && to_stdout && inputs.len() > 1 {
        return Err("archives cannot be concatenated: -c takes a single input when compressing".into());
    }
    let mut plan = Plan::default();
    for input in inputs {
        if stdin(&input) {
            let dst = match &f.output {
                Some(o) if !to_stdout => Dst::File(o.clone()),
                _ => Dst::Stdout,
            };
            plan.jobs.push(Job { src: Src::Stdin, dst });
        } else if f.recursive {
            plan.tree(mode, &input, f.output.as_deref());
        } else if to_stdout {
            plan.jobs.push(Job { src: Src::File(input), dst: Dst::Stdout });
        } else if let Some(o) = &f.output {
            plan.jobs.push(Job { src: Src::File(input), dst: Dst::File(o.clone()) });
        } else {
            match mode.rename(&input) {
                Some(o) => plan.jobs.push(Job { src: Src::File(input), dst: Dst::File(o) }),
                None => plan.errors.push(format!("{} does not end in .brv; give the output with -o", input.display())),
            }
        }
    }
    plan.jobs.splice(0..0, std::mem::take(&mut plan.links));
    Ok(plan)
}

impl Plan {
    /// The jobs of `input` under -r: a folder's files, or the file itself.
    fn tree(&mut self, mode: Mode, input: &Path, out_dir: Option<&Path>) {
        let meta = match std::fs::metadata(input) {
            Ok(m) => m,
            Err(e) => return self.errors.push(format!("cannot open {}: {e}", input.display())),
        };
        if !meta.is_dir() {
            let rel = PathBuf::from(input.file_name().unwrap_or(input.as_os_str()));
            return self.file(mode, input.to_path_buf(), &rel, out_dir);
        }
        // An output folder inside the input folder is not walked (its archives are outputs).
        let skip = out_dir.and_then(|o| std::fs::canonicalize(o).ok());
        if let Some(o) = out_dir {
            self.dirs.push(o.to_path_buf());
        }
        self.walk(mode, input, Path::new(""), out_dir, skip.as_deref());
    }

    /// Adds the files under `root/rel`, in name order.
    fn walk(&mut self, mode: Mode, root: &Path, rel: &Path, out_dir: Option<&Path>, skip: Option<&Path>) {
        let dir = root.join(rel);
        if skip.is_some() && std::fs::canonicalize(&dir).ok().as_deref() == skip {
            return;
        }
        let read = std::fs::read_dir(&dir).and_then(|it| it.collect::<std::io::Result<Vec<_>>>());
        let mut entries = match read {
            Ok(v) => v,
            Err(e) => return self.errors.push(format!("cannot read the folder {}: {e}", dir.display())),
        };
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let (path, sub) = (e.path(), rel.join(e.file_name()));
            let kind = match e.file_type() {
                Ok(t) if t.is_symlink() => std::fs::metadata(&path).map(|m| (m.file_type(), true)),
                Ok(t) => Ok((t, false)),
                Err(err) => Err(err),
            };
            match kind {
                Ok((t, false)) if t.is_file() => self.file(mode, path, &sub, out_dir),
                Ok((t, true)) if t.is_file() => {
                    let before = self.jobs.len();
                    self.file(mode, path, &sub, out_dir);
                    let linked: Vec<Job> = self.jobs.drain(before..).collect();
                    self.links.extend(linked);
                }
                Ok((t, false)) if t.is_dir() => {
                    if let Some(o) = out_dir {
                        self.dirs.push(o.join(&sub));
                    }
                    self.walk(mode, root, &sub, out_dir, skip)
                }
                Ok((t, true)) if t.is_dir() => {
                    self.errors.push(format!("{} is a symbolic link to a folder: not followed", path.display()))
                }
                Ok(_) => self.errors.push(format!("{} is not a regular file: skipped", path.display())),
                Err(err) => self.errors.push(format!("cannot open {}: {err}", path.display())),
            }
        }
    }

    /// One file of a tree, `rel` its path under the tree's root.
    fn file(&mut self, mode: Mode, path: PathBuf, rel: &Path, out_dir: Option<&Path>) {
        match (mode.rename(rel), out_dir) {
            (Some(r), Some(o)) => self.jobs.push(Job { src: Src::File(path), dst: Dst::File(o.join(r)) }),
            (Some(_), None) if mode == Mode::Compress && is_archive_name(&path) => {}
            (Some(_), None) => {
                let dst = mode.rename(&path).expect("renamed above");
                self.jobs.push(Job { src: Src::File(path), dst: Dst::File(dst) })
            }
            // In place, files without .brv are the folder's other files: left alone.
            (None, None) => {}
            (None, Some(_)) => self.errors.push(format!("{} does not end in .brv: not restored", path.display())),
        }
    }
}

/// In-place `compress -r` leaves the archives already in the folder alone (zstd does the same
/// with .zst), so that running it again does not compress archives.
fn is_archive_name(path: &Path) -> bool {
    Mode::Decompress.rename(path).is_some()
}
