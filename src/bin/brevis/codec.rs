//! `brevis compress` and `brevis decompress`: every job of the call in turn (a failing one is
//! reported and the others still run), each output complete or absent, `--rm` after a
//! verified success.

use crate::fsio::{self, check_output, named, open, open_regular, write_atomic_with};
use crate::jobs::{self, Dst, Job, Mode, Src};
use crate::progress::Progress;
use crate::{exit, mb, CompressArgs, DecompressArgs, Files};
use brevis::OutputAttrs;
use std::fs::File;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// An opened input: the file read by position, and its metadata when it is a named file.
struct In {
    file: File,
    meta: Option<std::fs::Metadata>,
}

impl In {
    fn open(src: &Src) -> Result<In, String> {
        match src {
            Src::Stdin => Ok(In { file: fsio::stdin_file()?, meta: None }),
            Src::File(p) => open_regular(p).map(|(file, meta)| In { file, meta: Some(meta) }),
        }
    }

    fn len(&self) -> Result<u64, String> {
        self.file.metadata().map(|m| m.len()).map_err(|e| format!("cannot stat the input: {e}"))
    }
}

/// Runs every job of `files` with `one`, after creating the output folders; returns 0, 1 when
/// any input failed (each reported on its own line), or 2 for a usage error.
fn run_all(
    mode: Mode,
    files: &Files,
    prepare: impl FnOnce(&mut jobs::Plan) -> Result<(), String>,
    mut one: impl FnMut(&Job) -> Result<(), String>,
) -> ExitCode {
    let mut plan = match jobs::plan(mode, files) {
        Ok(p) => p,
        Err(msg) => return exit::usage(&msg),
    };
    if let Err(msg) = prepare(&mut plan) {
        eprintln!("brevis: {msg}");
        return ExitCode::from(exit::FAILED);
    }
    let mut failed = plan.errors.len();
    for e in &plan.errors {
        eprintln!("brevis: {e}");
    }
    for d in &plan.dirs {
        if let Err(e) = std::fs::create_dir_all(d) {
            eprintln!("brevis: cannot create the folder {}: {e}", d.display());
            failed += 1;
        }
    }
    for job in &plan.jobs {
        if let Err(msg) = check_pair(job, files.force).and_then(|()| one(job)) {
            eprintln!("brevis: {msg}");
            failed += 1;
        }
    }
    if failed > 0 {
        ExitCode::from(exit::FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

/// The checks made before any work: the input exists (named in the error when it does not),
/// and the output may be written.
fn check_pair(job: &Job, force: bool) -> Result<(), String> {
    if let Src::File(p) = &job.src {
        open_regular(p)?;
    }
    match &job.dst {
        Dst::Stdout => fsio::check_stdout(force),
        Dst::File(out) => {
            let input = match &job.src {
                Src::File(p) => p.as_path(),
                Src::Stdin => Path::new(""),
            };
            check_output(input, out, force)
        }
    }
}

/// After a verified success, removes a named input that went to a named output (as zstd,
/// `--rm` does nothing when writing to stdout): the output's folder is synced first.
fn remove_input(job: &Job, files: &Files) -> Result<(), String> {
    if let (true, Src::File(p), Dst::File(out)) = (files.rm, &job.src, &job.dst) {
        fsio::sync_parent(out)?;
        std::fs::remove_file(p).map_err(|e| format!("cannot remove {}: {e}", p.display()))?;
    }
    Ok(())
}

pub fn compress(args: &CompressArgs) -> ExitCode {
    if args.chunk_size == 0 {
        return exit::usage("--chunk-size must be positive");
    }
    if args.search.budget == 0 {
        return exit::usage("--budget must be positive");
    }
    let prior = match args.search.prior() {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("brevis: {msg}");
            return ExitCode::from(exit::FAILED);
        }
    };
    // With -r, each checkpoint against the best file of its family (family::references).
    let family = std::cell::RefCell::new(std::collections::HashMap::new());
    let family_mode = args.files.recursive && args.reference.is_none() && !args.no_family;
    let prepare = |plan: &mut jobs::Plan| {
        if family_mode {
            *family.borrow_mut() = crate::family::references(plan, args.memory_limit, args.common.quiet)?;
        }
        Ok(())
    };
    let one = |job: &Job| compress_one(job, args, &prior, job_reference(&family.borrow(), job, &args.reference));
    run_all(Mode::Compress, &args.files, prepare, one)
}

/// The reference of `job`: the file of its family that `-r` chose, else the one given (`--ref`).
fn job_reference<'a>(
    family: &'a std::collections::HashMap<std::path::PathBuf, std::path::PathBuf>,
    job: &Job,
    given: &'a Option<std::path::PathBuf>,
) -> Option<&'a Path> {
    let chosen = match &job.src {
        Src::File(p) => family.get(p).map(|r| r.as_path()),
        Src::Stdin => None,
    };
    chosen.or(given.as_deref())
}

fn compress_one(
    job: &Job,
    args: &CompressArgs,
    prior: &brevis::PriorSource,
    reference: Option<&Path>,
) -> Result<(), String> {
    let CompressArgs { files, chunk_size, memory_limit, no_preserve, search, common, .. } = args;
    let input = In::open(&job.src)?;
    let size = input.len()?;
    let t0 = Instant::now();
    let stats = (search.stats || common.verbose).then(|| std::sync::Arc::new(Default::default()));
    let mut progress = Progress::start(!common.quiet, size, job.src.name(), "searching");
    let meta = input.meta.as_ref().filter(|_| !no_preserve);
    let opts = brevis::Options::default()
        .with_threads(common.threads)
        .with_chunk_bytes(*chunk_size)
        .with_budget(search.budget)
        .with_depth(search.depth)
        .with_prior(prior.clone())
        .with_stats(stats.clone())
        .with_memory_limit(*memory_limit)
        .with_reuse(!search.search_each)
        .with_level(search.level)
        .with_file_meta(meta.map(brevis::FileMeta::of))
        .with_progress(Some(progress.counter()));
    let attrs = meta.map_or_else(OutputAttrs::plain, |m| OutputAttrs::like(m, None));
    let (src, out) = (Path::new(&job.src.name()).to_path_buf(), Path::new(&job.dst.name()).to_path_buf());
    let code = |f: &mut File| -> Result<u64, String> {
        match reference {
            // Against a reference, the input and the reference are both read in windows.
            Some(r) => brevis::compress_file_with_ref(&input.file, f, &open(r)?, &opts).map_err(|e| {
                if e.is_write_error() {
                    named(e, &src, &out, false)
                } else {
                    format!("{} against {}: {e}", src.display(), r.display())
                }
            }),
            None => brevis::compress_file(&input.file, f, &opts).map_err(|e| named(e, &src, &out, false)),
        }
    };
    let archive_len = write_output(&job.dst, files.force, &attrs, code, |f| {
        progress.finish();
        // The programs go to stdout: not when the archive does.
        if common.verbose && matches!(job.dst, Dst::File(_)) {
            let reference = reference.map(open).transpose()?;
            crate::print_programs(&out, f, None, reference.as_ref())?;
        }
        Ok(())
    })?;
    if let (Some(st), false) = (&stats, common.quiet) {
        let st: &brevis::SearchStats = st;
        eprintln!("{}", st.summary());
    }
    if files.rm {
        verify_archive(job, &input, reference, common.threads)?;
    }
    remove_input(job, files)?;
    if !common.quiet {
        let pct = if size == 0 { 0.0 } else { 100.0 * archive_len as f64 / size as f64 };
        let secs = t0.elapsed().as_secs_f64();
        eprintln!(
            "{}: {} -> {} ({pct:.2}%) in {secs:.2} s => {}",
            src.display(),
            mb(size),
            mb(archive_len),
            out.display()
        );
    }
    Ok(())
}

/// Writes a job's output with `fill` (which returns its length): a named file atomically, or
/// standard output once the whole output is in a temporary file. `then` sees the complete
/// output before it is renamed into place or copied out.
fn write_output(
    dst: &Dst,
    force: bool,
    attrs: &OutputAttrs,
    fill: impl FnOnce(&mut File) -> Result<u64, String>,
    then: impl FnOnce(&File) -> Result<(), String>,
) -> Result<u64, String> {
    let mut len = 0;
    match dst {
        Dst::File(out) => write_atomic_with(out, force, attrs, |f| {
            len = fill(f)?;
            then(f)
        })?,
        Dst::Stdout => {
            let mut spool = fsio::spool()?;
            len = fill(&mut spool)?;
            then(&spool)?;
            fsio::spool_to_stdout(&mut spool, len)?;
        }
    }
    Ok(len)
}

/// Before `--rm` deletes the input: the archive just written, decoded, gives back the input's
/// bytes exactly.
fn verify_archive(job: &Job, input: &In, reference: Option<&Path>, threads: usize) -> Result<(), String> {
    let (Src::File(_), Dst::File(out)) = (&job.src, &job.dst) else { return Ok(()) };
    let archive = open(out)?;
    let mut original = input.file.try_clone().map_err(|e| format!("cannot read {}: {e}", job.src.name()))?;
    std::io::Seek::rewind(&mut original).map_err(|e| format!("cannot read {}: {e}", job.src.name()))?;
    let mut check = fsio::Compare::new(Some(original));
    let opts = crate::decode_options(threads, None, reference.is_some());
    let res = match reference {
        Some(r) => brevis::decompress_file_with_ref(&archive, &mut check, &open(r)?, &opts).map(|_| ()),
        None => brevis::decompress_file(&archive, &mut check, &opts).map(|_| ()),
    };
    let differs = check.differs_at().is_some() || !matches!(check.finish(), Ok(None));
    match res {
        Ok(()) if !differs => Ok(()),
        Ok(()) => Err(format!("{} does not restore {}; input kept", out.display(), job.src.name())),
        Err(e) => Err(format!("{}: {e}; input kept", out.display())),
    }
}

pub fn decompress(args: &DecompressArgs) -> ExitCode {
    // With -r, an archive made against a file that another archive restores is restored after
    // it, with it (family::restored_references).
    let family = std::cell::RefCell::new(std::collections::HashMap::new());
    let prepare = |plan: &mut jobs::Plan| {
        if args.files.recursive && args.reference.is_none() {
            let limit = args.memory_limit.unwrap_or(brevis::DEFAULT_MEMORY_LIMIT);
            *family.borrow_mut() = crate::family::restored_references(plan, limit)?;
        }
        Ok(())
    };
    let one = |job: &Job| decompress_one(job, args, job_reference(&family.borrow(), job, &args.reference));
    run_all(Mode::Decompress, &args.files, prepare, one)
}

fn decompress_one(job: &Job, args: &DecompressArgs, reference: Option<&Path>) -> Result<(), String> {
    let DecompressArgs { files, memory_limit, no_preserve, common, .. } = args;
    let input = In::open(&job.src)?;
    let t0 = Instant::now();
    let mut opts = crate::decode_options(common.threads, *memory_limit, reference.is_some());
    let (src, out) = (Path::new(&job.src.name()).to_path_buf(), Path::new(&job.dst.name()).to_path_buf());
    let name = |e: brevis::Error| format!("{}: {e}", src.display());
    let attrs = |recorded: Option<brevis::FileMeta>| match (&input.meta, recorded) {
        _ if *no_preserve => OutputAttrs::plain(),
        (Some(m), r) => OutputAttrs::like(m, r.as_ref()),
        // From stdin: the recorded mode and time, if any, on a new file's.
        (None, Some(r)) => {
            input.file.metadata().map_or_else(|_| OutputAttrs::plain(), |m| OutputAttrs::like(&m, Some(&r)))
        }
        (None, None) => OutputAttrs::plain(),
    };
    // Against a reference, it is read in windows as the chunks need it.
    let base = reference.map(open).transpose()?;
    // An archive within the memory limit is mapped where it can be: its payloads are decoded
    // from the page cache in place, not copied into the process first (a fifth of the kernel
    // time of a K-quant GGUF's decode on tmpfs). The pages read count in the process's resident
    // size, so a larger one is read in windows, as is one that cannot be mapped.
    let map = (input.len()? <= opts.memory_limit).then(|| brevis::MappedFile::of(&input.file).ok()).flatten();
    let mut a = match &map {
        Some(m) => brevis::Archive::open_with_limit(m, opts.memory_limit),
        None => brevis::Archive::open_file(&input.file, opts.memory_limit),
    }
    .map_err(name)?;
    if let (Some(r), Some(b)) = (reference, &base) {
        a.set_reference_file(b).map_err(|e| format!("{}: {e}", r.display()))?;
    }
    let mut progress = Progress::start(!common.quiet, a.original_size(), src.display().to_string(), "");
    opts.progress = Some(progress.counter());
    // Workers write their chunks in place (positioned writes into the temporary file).
    let fill = |f: &mut File| a.decompress_to_file(f, &opts).map_err(|e| named(e, &src, &out, false));
    let original_len = write_output(&job.dst, files.force, &attrs(a.file_meta()), fill, |_| Ok(()))?;
    progress.finish();
    remove_input(job, files)?;
    if !common.quiet {
        let secs = t0.elapsed().as_secs_f64();
        let size = input.len()?;
        eprintln!("{}: {} -> {} in {secs:.2} s => {}", src.display(), mb(size), mb(original_len), out.display());
    }
    Ok(())
}
