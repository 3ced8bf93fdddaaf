//! `-r` over model families: `compress -r` codes each checkpoint of the folders against the file
//! that predicts it best (`brevis::family_references`: a master coded alone, its casts and
//! quantizations derived from it), and `decompress -r` restores each archive after the one it
//! needs, given the restored file as its reference. The archive records the reference's identity
//! (size and hash, not its path), so renaming files keeps a family decodable.

use crate::fsio::open_regular;
use crate::jobs::{Dst, Plan, Src};
use std::collections::HashMap;
use std::path::PathBuf;

/// For each file of `plan` that is best coded against another one of it, that file; the jobs are
/// reordered so that a file used as a reference is compressed after the files that use it
/// (`--rm` removes it only then).
pub fn references(plan: &mut Plan, memory_limit: u64, quiet: bool) -> Result<HashMap<PathBuf, PathBuf>, String> {
    let paths: Vec<PathBuf> = plan
        .jobs
        .iter()
        .filter_map(|j| match &j.src {
            Src::File(p) => Some(p.clone()),
            Src::Stdin => None,
        })
        .collect();
    // A file that cannot be read is coded alone (its own job reports the error). The files are
    // read in windows, within the memory limit.
    let readable: Vec<(&PathBuf, std::fs::File)> =
        paths.iter().filter_map(|p| open_regular(p).ok().map(|(f, _)| (p, f))).collect();
    let files: Vec<&std::fs::File> = readable.iter().map(|(_, f)| f).collect();
    let opts = brevis::Options::default().with_memory_limit(memory_limit);
    let chosen = brevis::family_references_of_files(&files, &opts).map_err(|e| format!("choosing references: {e}"))?;
    let mut map = HashMap::new();
    for (i, r) in chosen.iter().enumerate() {
        if let Some(r) = r {
            let (path, reference) = (readable[i].0, readable[*r].0);
            if !quiet {
                eprintln!("brevis: {} against {}", path.display(), reference.display());
            }
            map.insert(path.clone(), reference.clone());
        }
    }
    let depth = |p: &PathBuf| std::iter::successors(Some(p), |q| map.get(*q)).count();
    plan.jobs.sort_by_key(|j| match &j.src {
        Src::File(p) => std::cmp::Reverse(depth(p)),
        Src::Stdin => std::cmp::Reverse(0),
    });
    Ok(map)
}

/// For each archive of `plan` made against a file that another archive of `plan` restores, that
/// file (where it is restored); the jobs are reordered so that it is restored first. An archive
/// whose reference is not among them is left to fail with the error that names the reference.
pub fn restored_references(plan: &mut Plan, memory_limit: u64) -> Result<HashMap<PathBuf, PathBuf>, String> {
    let mut made = HashMap::new();
    let mut needs = HashMap::new();
    for j in &plan.jobs {
        let (Src::File(p), Dst::File(out)) = (&j.src, &j.dst) else { continue };
        let Ok(file) = std::fs::File::open(p) else { continue };
        let Ok(a) = brevis::Archive::open_file(&file, memory_limit) else { continue };
        let o = a.original_file();
        made.insert((o.size, o.hash), out.clone());
        if let Some(r) = a.reference_file() {
            needs.insert(p.clone(), (r.size, r.hash));
        }
    }
    let map: HashMap<PathBuf, PathBuf> =
        needs.iter().filter_map(|(p, id)| made.get(id).map(|out| (p.clone(), out.clone()))).collect();
    let restored_by: HashMap<&PathBuf, &PathBuf> = plan
        .jobs
        .iter()
        .filter_map(|j| match (&j.src, &j.dst) {
            (Src::File(p), Dst::File(out)) => Some((out, p)),
            _ => None,
        })
        .collect();
    // Depth in the chain of references: a master first, then what is made against it.
    let depth = |p: &PathBuf| {
        std::iter::successors(Some(p), |q| map.get(*q).and_then(|out| restored_by.get(out).copied()))
            .take(plan.jobs.len() + 1)
            .count()
    };
    let mut keyed: Vec<(usize, usize)> =
        plan.jobs.iter().enumerate().map(|(i, j)| (if let Src::File(p) = &j.src { depth(p) } else { 0 }, i)).collect();
    keyed.sort();
    let mut jobs: Vec<Option<_>> = std::mem::take(&mut plan.jobs).into_iter().map(Some).collect();
    plan.jobs = keyed.into_iter().filter_map(|(_, i)| jobs[i].take()).collect();
    Ok(map)
}
