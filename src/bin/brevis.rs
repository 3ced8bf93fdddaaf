//! The `brevis` command line: compress, decompress, inspect, verify.
//!
//! zstd's habits: the input is never modified or deleted; an existing output is never replaced
//! without `-f`; output goes to a temporary file in the destination folder that is renamed into
//! place only when complete (and removed on error or Ctrl-C); errors are one line on stderr
//! that names the file concerned, and a non-zero exit. Outputs take their input's permission
//! bits (under the umask), modification time and, for root, owner; decompression takes the
//! original's mode and time from the archive when it records them (unless `--no-preserve`).

#[path = "brevis/bench.rs"]
mod bench;

use brevis::file_meta::OutputAttrs;
use brevis::source::MappedFile as Input;
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "brevis", version, about = "Lossless checkpoint compression by program synthesis")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct Common {
    /// Worker threads (0 = all cores).
    #[arg(short = 'T', long = "threads", default_value_t = 0)]
    threads: usize,
    /// Print nothing but errors.
    #[arg(short, long)]
    quiet: bool,
    /// Print more (per-tensor programs when compressing).
    #[arg(short, long)]
    verbose: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compress a file (safetensors or anything else) into a Brevis archive.
    Compress(CompressArgs),
    /// Learn a production prior from checkpoints, to reuse with `compress --prior`.
    Prior {
        #[command(subcommand)]
        cmd: PriorCmd,
    },
    /// Measure the search: total size and compression time against the budget, with the
    /// learned prior and with the uniform prior over the same productions.
    ///
    /// Without `--search`: speed and size of Brevis (compress, decompress with 1 and all threads)
    /// against zstd -3 and -9, lz4, deflate and memcpy, on the same bytes in memory.
    Bench(BenchArgs),
    /// Restore the original file from an archive.
    Decompress(DecompressArgs),
    /// Show each tensor's program, sizes and bits per element.
    Inspect { archive: PathBuf },
    /// Check every checksum; with ORIGINAL, also compare the restored bytes with it.
    Verify(VerifyArgs),
}

#[derive(Args)]
struct CompressArgs {
    input: PathBuf,
    /// Output path (default: INPUT.brv).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Overwrite an existing output.
    #[arg(short, long)]
    force: bool,
    /// Bytes of original data per independently decodable chunk.
    #[arg(long, default_value_t = 1 << 20)]
    chunk_size: usize,
    /// Code tensors against this checkpoint (safetensors or .brv) where that is smaller;
    /// decompressing will need it too.
    #[arg(long = "ref", value_name = "BASE")]
    reference: Option<PathBuf>,
    /// Working memory to stay under, e.g. 64M or 2G (K, M, G: powers of 1024): bounds the
    /// chunks in flight (about six chunk sizes each) and the index. Files are read and written
    /// in windows, so the file size does not matter. Not applied to the reference of --ref,
    /// which is read whole.
    #[arg(long = "memory-limit", value_name = "SIZE", default_value = "1G", value_parser = parse_size)]
    memory_limit: u64,
    /// Neither record the input's mode and modification time in the archive nor give them to
    /// the archive file (it gets mode 0666 under the umask and the current time); the archive is
    /// then the one the library makes of the same bytes.
    #[arg(long = "no-preserve")]
    no_preserve: bool,
    #[command(flatten)]
    search: SearchArgs,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct BenchArgs {
    /// The search benchmark instead of the speed benchmark.
    #[arg(long)]
    search: bool,
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Budgets to measure (expansions per tensor; search benchmark).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    budgets: Vec<usize>,
    /// Timed runs per figure (speed benchmark); the median is reported.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Timed runs of Brevis compression, the slow part (speed benchmark).
    #[arg(long, default_value_t = 3)]
    compress_runs: usize,
    /// Compression level of the Brevis archives (speed benchmark).
    #[arg(long, value_name = "fast|default|max", default_value = "default", value_parser = parse_level)]
    level: brevis::Level,
    /// Also run this peer script on each file in the same run (`../shared/corpus/speed_peers.py`:
    /// ZipNN and zstd in process against this build's C library, found beside this executable
    /// in target/release), with `--python` (default python3), and print its figures.
    #[arg(long, value_name = "SCRIPT")]
    peers: Option<PathBuf>,
    #[arg(long, value_name = "PYTHON", default_value = "python3")]
    python: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct DecompressArgs {
    input: PathBuf,
    /// Output path (default: INPUT without .brv).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The reference the archive was made against (safetensors or .brv).
    #[arg(long = "ref", value_name = "BASE")]
    reference: Option<PathBuf>,
    #[arg(short, long)]
    force: bool,
    /// Working memory to stay under, e.g. 64M (K, M, G: powers of 1024; default 1G): bounds
    /// the chunks decoded at once and the index. The archive is read and the output written
    /// in windows. With --ref, everything is in memory and this bounds the output instead.
    #[arg(long = "memory-limit", value_name = "SIZE", value_parser = parse_size)]
    memory_limit: Option<u64>,
    /// Give the output mode 0666 under the umask and the current time, instead of the
    /// original's mode and modification time as the archive records them (else the archive
    /// file's).
    #[arg(long = "no-preserve")]
    no_preserve: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct VerifyArgs {
    archive: PathBuf,
    original: Option<PathBuf>,
    /// The reference the archive was made against.
    #[arg(long = "ref", value_name = "BASE")]
    reference: Option<PathBuf>,
    /// Working memory to stay under (as for decompress).
    #[arg(long = "memory-limit", value_name = "SIZE", value_parser = parse_size)]
    memory_limit: Option<u64>,
}

/// How the search for each tensor's program runs (never stored in the archive).
#[derive(Args, Clone)]
struct SearchArgs {
    /// fast: programs that decode fastest; default: close to the smallest, without decoders
    /// that are much slower for little gain; max: the smallest programs (docs/PERFORMANCE.md).
    #[arg(long, value_name = "fast|default|max", default_value = "default", value_parser = parse_level)]
    level: brevis::Level,
    /// Productions evaluated per tensor by the search.
    #[arg(long, default_value_t = brevis::synth::DEFAULT_BUDGET)]
    budget: usize,
    /// Deepest program the search builds (levels of transforms).
    #[arg(long, default_value_t = brevis::synth::DEFAULT_DEPTH)]
    depth: usize,
    /// Production prior: a JSON file from `brevis prior learn`, `uniform`, or `learn` (the
    /// default: learned from a sample of the input).
    #[arg(long, value_name = "FILE|uniform|learn")]
    prior: Option<String>,
    /// Print search statistics (expansions, pruned nodes, time); also shown by -v.
    #[arg(long)]
    stats: bool,
    /// Search every tensor. By default a tensor of the same dtype, shape and role as an earlier
    /// one (a repeated layer) takes that tensor's best programs, compared on its own sample.
    #[arg(long = "search-each")]
    search_each: bool,
}

impl SearchArgs {
    fn prior(&self) -> Result<brevis::synth::PriorSource, String> {
        use brevis::synth::PriorSource;
        Ok(match self.prior.as_deref() {
            None | Some("learn") => PriorSource::Learn,
            Some("uniform") => PriorSource::Uniform,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
                PriorSource::Given(std::sync::Arc::new(
                    brevis::synth::Prior::from_json(&text).map_err(|e| format!("{path}: {e}"))?,
                ))
            }
        })
    }
}

#[derive(Subcommand)]
enum PriorCmd {
    /// Search a sample of the tensors of FILES widely and count the productions that win.
    Learn {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Where to write the prior (JSON).
        #[arg(short, long)]
        output: PathBuf,
        #[arg(short, long)]
        force: bool,
        #[command(flatten)]
        common: Common,
    },
}

/// A byte count with an optional binary suffix: 65536, 64K, 64M, 1G.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size (examples: 65536, 64K, 64M, 1G)"))?;
    n.checked_mul(1 << shift).filter(|&v| v > 0).ok_or_else(|| format!("size {s:?} is zero or too large"))
}

/// The temporary output being written, removed by the Ctrl-C handler.
static PENDING: Mutex<Option<PathBuf>> = Mutex::new(None);

/// glibc returns freed blocks of a chunk's size (about 1 MiB and up) to the kernel, so the next
/// chunk's buffers fault their pages in and zero them again: keep them in the heap instead
/// (mmap only above 32 MiB, trim the heap only above 256 MiB free). Decompressing MiniLM bf16
/// spends about a third less system time. The peak (what the memory limit bounds) is unchanged.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called once, before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let _ = ctrlc::set_handler(|| {
        if let Some(p) = PENDING.lock().ok().and_then(|g| g.clone()) {
            let _ = std::fs::remove_file(p);
        }
        eprintln!("brevis: interrupted; no output written");
        std::process::exit(130);
    });
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("brevis: {msg}");
            ExitCode::from(1)
        }
    }
}

/// Maps the input read-only. The file must not change while it is mapped.
fn read_input(path: &Path) -> Result<Input, String> {
    open(path)?;
    Input::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// Writes `data` to `out` atomically: temp file in the same folder, fsync, rename.
fn write_atomic(out: &Path, force: bool, attrs: &OutputAttrs, data: &[u8]) -> Result<(), String> {
    write_atomic_with(out, force, attrs, |f| {
        f.write_all(data).map_err(|e| format!("cannot write {}: {e}", out.display()))
    })
}

/// Lets `fill` write `out` into a temporary file in the same folder, created with `attrs`'s
/// mode (under the umask); then gives it `attrs`'s time and owner, fsyncs it and renames it
/// into place. On an error (or Ctrl-C) the temporary file is removed and nothing is left.
fn write_atomic_with(
    out: &Path,
    force: bool,
    attrs: &OutputAttrs,
    fill: impl FnOnce(&mut std::fs::File) -> Result<(), String>,
) -> Result<(), String> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut b = tempfile::Builder::new();
    b.prefix(".brevis-").suffix(".tmp");
    #[cfg(unix)]
    b.permissions(attrs.permissions());
    let mut tmp =
        b.tempfile_in(&dir).map_err(|e| format!("cannot create a temporary file in {}: {e}", dir.display()))?;
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

/// Refuses an output that is a directory (or names one: it ends in `/`), that exists (without
/// `force`), or that is the input.
fn check_output(input: &Path, out: &Path, force: bool) -> Result<(), String> {
    if out.is_dir() {
        return Err(format!("{} is a directory; give a file name with -o", out.display()));
    }
    if out.as_os_str().to_string_lossy().ends_with(std::path::is_separator) {
        return Err(format!("{} names a directory (it ends in '/'); give a file name with -o", out.display()));
    }
    if out.exists() {
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
/// the archive writer's own [`brevis::container::WriteError`]).
fn named(e: brevis::Error, input: &Path, out: &Path, write_failed: bool) -> String {
    let writing = write_failed || brevis::container::is_write_error(&e);
    match e {
        brevis::Error::Io(io) if writing => format!("cannot write {}: {io}", out.display()),
        e => format!("{}: {e}", input.display()),
    }
}

fn parse_level(s: &str) -> Result<brevis::Level, String> {
    brevis::Level::from_name(s).ok_or_else(|| format!("unknown level {s:?} (fast, default or max)"))
}

fn mb(n: u64) -> String {
    format!("{:.2} MB", n as f64 / 1e6)
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.cmd {
        Cmd::Compress(args) => compress(args),
        Cmd::Decompress(args) => decompress(args),
        Cmd::Prior { cmd: PriorCmd::Learn { files, output, force, common } } => {
            prior_learn(files, output, force, common)
        }
        Cmd::Bench(args) if args.search => bench_search(args),
        Cmd::Bench(args) => bench_speed(args),
        Cmd::Inspect { archive } => {
            print_programs(&archive, &open(&archive)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Verify(args) => verify(args),
    }
}

fn compress(args: CompressArgs) -> Result<ExitCode, String> {
    let CompressArgs { input, output, force, chunk_size, reference, memory_limit, no_preserve, search, common } = args;
    let out = output.unwrap_or_else(|| {
        let mut s = input.clone().into_os_string();
        s.push(".brv");
        PathBuf::from(s)
    });
    let (file, meta) = open_regular(&input)?;
    check_output(&input, &out, force)?;
    let size = meta.len();
    if chunk_size == 0 {
        return Err("--chunk-size must be positive".into());
    }
    if !common.quiet && size > 64 << 20 {
        eprint!("brevis: compressing {} ({})...\r", input.display(), mb(size));
    }
    let t0 = Instant::now();
    if search.budget == 0 {
        return Err("--budget must be positive".into());
    }
    let stats = (search.stats || common.verbose).then(|| std::sync::Arc::new(Default::default()));
    let opts = brevis::Options {
        threads: common.threads,
        chunk_bytes: chunk_size,
        budget: search.budget,
        depth: search.depth,
        prior: search.prior()?,
        stats: stats.clone(),
        memory_limit,
        reuse: !search.search_each,
        level: search.level,
        file_meta: (!no_preserve).then(|| brevis::FileMeta::of(&meta)),
        ..Default::default()
    };
    let attrs = if no_preserve { OutputAttrs::plain() } else { OutputAttrs::like(&meta, None) };
    let mut archive_len = 0u64;
    match &reference {
        // Against a reference, the input and the reference are mapped whole.
        Some(r) => {
            let data = read_input(&input)?;
            let archive = brevis::compress_with_ref(&data, &read_input(r)?, &opts)
                .map_err(|e| format!("{} against {}: {e}", input.display(), r.display()))?;
            archive_len = archive.len() as u64;
            write_atomic(&out, force, &attrs, &archive)?;
        }
        None => write_atomic_with(&out, force, &attrs, |f| {
            archive_len = brevis::compress_file(&file, f, &opts).map_err(|e| named(e, &input, &out, false))?;
            Ok(())
        })?,
    }
    if common.verbose {
        let a = open(&out)?;
        print_programs(&out, &a)?;
    }
    if let (Some(st), false) = (&stats, common.quiet) {
        let st: &brevis::synth::SearchStats = st;
        eprintln!("{}", st.summary());
    }
    if !common.quiet {
        let pct = if size == 0 { 0.0 } else { 100.0 * archive_len as f64 / size as f64 };
        eprintln!(
            "{}: {} -> {} ({pct:.2}%) in {:.2} s => {}",
            input.display(),
            mb(size),
            mb(archive_len),
            t0.elapsed().as_secs_f64(),
            out.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn decompress(args: DecompressArgs) -> Result<ExitCode, String> {
    let DecompressArgs { input, output, force, reference, memory_limit, no_preserve, common } = args;
    let out = match output {
        Some(o) => o,
        None => match input.to_str().and_then(|s| s.strip_suffix(".brv")) {
            Some(s) if !s.is_empty() => PathBuf::from(s),
            _ => return Err(format!("{} does not end in .brv; give the output with -o", input.display())),
        },
    };
    let (file, meta) = open_regular(&input)?;
    check_output(&input, &out, force)?;
    let t0 = Instant::now();
    let opts = decode_options(common.threads, memory_limit, reference.is_some());
    let name = |e: brevis::Error| format!("{}: {e}", input.display());
    let attrs = |recorded: Option<brevis::FileMeta>| {
        if no_preserve {
            OutputAttrs::plain()
        } else {
            OutputAttrs::like(&meta, recorded.as_ref())
        }
    };
    let mut original_len = 0u64;
    match &reference {
        // Against a reference, the archive, the reference and the output are in memory.
        Some(r) => {
            let (data, base) = (read_input(&input)?, read_input(r)?);
            let mut a = brevis::Archive::open_with_limit(&data, opts.memory_limit).map_err(name)?;
            let base = brevis::reference::Reference::new(&base).map_err(|e| format!("{}: {e}", r.display()))?;
            a.set_reference(base).map_err(name)?;
            let original = a.decompress(&opts).map_err(name)?;
            original_len = original.len() as u64;
            write_atomic(&out, force, &attrs(a.file_meta()), &original)?;
        }
        None => {
            let source = brevis::source::Source::file(&file).map_err(name)?;
            let a = brevis::Archive::open_source(source, opts.memory_limit).map_err(name)?;
            // Workers write their chunks in place (positioned writes into the temporary file).
            write_atomic_with(&out, force, &attrs(a.file_meta()), |f| {
                original_len = a.decompress_to_file(f, &opts).map_err(|e| named(e, &input, &out, false))?;
                Ok(())
            })?
        }
    }
    if !common.quiet {
        eprintln!(
            "{}: {} -> {} in {:.2} s => {}",
            input.display(),
            mb(meta.len()),
            mb(original_len),
            t0.elapsed().as_secs_f64(),
            out.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A writer that notes whether writing (or reading, for [`Compare`]) failed, to tell those
/// errors from the archive's own.
struct Watch<W> {
    inner: W,
    failed: bool,
}

impl<W> Watch<W> {
    fn new(inner: W) -> Self {
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

fn prior_learn(files: Vec<PathBuf>, output: PathBuf, force: bool, common: Common) -> Result<ExitCode, String> {
    for f in &files {
        check_output(f, &output, force)?;
    }
    let t0 = Instant::now();
    let mut prior = brevis::synth::Prior::uniform();
    for f in &files {
        let data = read_input(f)?;
        let p = brevis::learn_prior(&data, &brevis::Options { threads: common.threads, ..Default::default() })
            .map_err(|e| format!("{}: {e}", f.display()))?;
        prior.merge(&p);
    }
    write_atomic(&output, force, &OutputAttrs::plain(), prior.to_json().as_bytes())?;
    if !common.quiet {
        eprintln!(
            "prior from {} tensors of {} files, {} (context, production) pairs, in {:.2} s => {}",
            prior.tensors,
            files.len(),
            prior.len(),
            t0.elapsed().as_secs_f64(),
            output.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_speed(args: BenchArgs) -> Result<ExitCode, String> {
    let BenchArgs { files, runs, compress_runs, level, peers, python, common, .. } = args;
    if runs == 0 || compress_runs == 0 {
        return Err("--runs and --compress-runs must be positive".into());
    }
    let inputs: Vec<(String, Vec<u8>)> =
        files.iter().map(|f| Ok((f.display().to_string(), read_input(f)?.to_vec()))).collect::<Result<_, String>>()?;
    bench::run(&inputs, runs, compress_runs, common.threads, level)?;
    if let Some(script) = peers {
        // The project root: this executable is ROOT/target/release/brevis.
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
        let root = exe.ancestors().nth(3).ok_or("cannot find the project root above this executable")?;
        for f in &files {
            println!("\n{} {} {} {} --rounds {runs}", python, script.display(), root.display(), f.display());
            let _ = std::io::stdout().flush();
            let status = std::process::Command::new(&python)
                .arg(&script)
                .arg(root)
                .arg(f)
                .args(["--rounds", &runs.to_string()])
                .status()
                .map_err(|e| format!("cannot run {python} {}: {e}", script.display()))?;
            if !status.success() {
                return Err(format!("{}: {status}", script.display()));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_search(args: BenchArgs) -> Result<ExitCode, String> {
    let BenchArgs { files, budgets, common, .. } = args;
    let inputs: Vec<Input> = files.iter().map(|f| read_input(f)).collect::<Result<_, _>>()?;
    let total: u64 = inputs.iter().map(|d| d.len() as u64).sum();
    println!("{} files, {} bytes; sizes as % of the original, times in seconds", files.len(), total);
    println!("\n| budget | learned prior | time | uniform prior | time |\n|---|---|---|---|---|");
    for &b in &budgets {
        if b == 0 {
            return Err("budgets must be positive".into());
        }
        let mut row = format!("| {b} |");
        for prior in [brevis::synth::PriorSource::Learn, brevis::synth::PriorSource::Uniform] {
            let opts = brevis::Options { threads: common.threads, budget: b, prior, ..Default::default() };
            let t0 = Instant::now();
            let mut size = 0u64;
            for (f, d) in files.iter().zip(&inputs) {
                let a = brevis::compress(d, &opts).map_err(|e| format!("{}: {e}", f.display()))?;
                if common.verbose {
                    eprintln!("budget {b} {:?}: {} {}", opts.prior, f.display(), a.len());
                }
                size += a.len() as u64;
            }
            let pct = 100.0 * size as f64 / total.max(1) as f64;
            row += &format!(" {pct:.3}% ({size}) | {:.1} |", t0.elapsed().as_secs_f64());
        }
        println!("{row}");
        let _ = std::io::stdout().flush();
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(args: VerifyArgs) -> Result<ExitCode, String> {
    let VerifyArgs { archive, original, reference, memory_limit } = args;
    let opts = decode_options(0, memory_limit, reference.is_some());
    // The restored bytes are compared with ORIGINAL as they come (or just counted).
    let mut check = Watch::new(Compare::new(original.as_deref().map(open).transpose()?));
    let res = match &reference {
        Some(r) => {
            let data = read_input(&archive)?;
            brevis::decompress_with_ref(&data, &read_input(r)?, &opts)
                .and_then(|restored| check.write_all(&restored).map(|_| restored.len() as u64).map_err(Into::into))
        }
        None => brevis::decompress_file(&open_regular(&archive)?.0, &mut check, &opts),
    };
    let orig = original.as_deref().unwrap_or(Path::new(""));
    let differs = |at: u64| format!("{} differs from {} at byte {at}", archive.display(), orig.display());
    if let Some(at) = check.inner.differs_at() {
        return Err(differs(at));
    }
    let restored = res.map_err(|e| match e {
        // Only reading ORIGINAL fails in `check`.
        brevis::Error::Io(io) if check.failed => format!("cannot read {}: {io}", orig.display()),
        e => format!("{}: {e}", archive.display()),
    })?;
    if let Some(at) = check.inner.finish().map_err(|e| format!("cannot read {}: {e}", orig.display()))? {
        return Err(differs(at));
    }
    println!("{}: OK ({} restored, all checksums match)", archive.display(), mb(restored));
    Ok(ExitCode::SUCCESS)
}

/// Decoding options: the streaming path's memory limit defaults to 1 GiB; the in-memory path
/// (--ref) keeps the library's default bound on the output.
fn decode_options(threads: usize, memory_limit: Option<u64>, in_memory: bool) -> brevis::DecodeOptions {
    let d = brevis::DecodeOptions::default();
    let fallback = if in_memory { d.memory_limit } else { brevis::DEFAULT_MEMORY_LIMIT };
    brevis::DecodeOptions { threads, memory_limit: memory_limit.unwrap_or(fallback), ..d }
}

/// Opens a file to read; a directory is an error that says so.
fn open(path: &Path) -> Result<std::fs::File, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if f.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(format!("{} is a directory", path.display()));
    }
    Ok(f)
}

/// Opens an input that is read by position (its length taken now): a regular file.
fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), String> {
    let f = open(path)?;
    let meta = f.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    Ok((f, meta))
}

/// A writer that compares what it is given with a file read sequentially (or only counts it),
/// remembering the first differing byte.
struct Compare {
    original: Option<std::io::BufReader<std::fs::File>>,
    pos: u64,
    differs: Option<u64>,
    buf: Vec<u8>,
}

impl Compare {
    fn new(original: Option<std::fs::File>) -> Compare {
        Compare {
            original: original.map(|f| std::io::BufReader::with_capacity(1 << 20, f)),
            pos: 0,
            differs: None,
            buf: Vec::new(),
        }
    }

    fn differs_at(&self) -> Option<u64> {
        self.differs
    }

    /// The first differing byte, counting an original longer than what was written.
    fn finish(mut self) -> std::io::Result<Option<u64>> {
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

/// For an archive of a GGUF file: its version, alignment and header (kept in the index, or in
/// entries when it was too large), what the index frame costs, and the tensors by ggml type.
fn print_gguf(a: &brevis::Archive, archive_len: u64, out: &mut impl Write) -> brevis::Result<()> {
    let Some(g) = a.gguf()? else { return Ok(()) };
    let payloads: u64 = (0..a.len()).map(|i| a.info(i).unwrap().compressed_bytes).sum();
    let index_frame = archive_len.saturating_sub(payloads + 48);
    let in_index = a.index().tensors.first().map_or(true, |t| t.offset >= g.header.len() as u64);
    let _ = writeln!(
        out,
        "\nGGUF v{}, alignment {}: header, metadata and tensor infos {} bytes, {}; index frame {} bytes",
        g.version,
        g.alignment,
        g.header.len(),
        if in_index { "kept in the index" } else { "coded as byte entries" },
        index_frame
    );
    let mut types: BTreeMap<u32, (&str, usize, u64, u64)> = BTreeMap::new();
    for (i, t) in g.tensors.iter().enumerate() {
        if let Some(t) = t {
            let info = a.info(i).unwrap();
            let e = types.entry(t.ggml_type).or_insert((info.dtype, 0, 0, 0));
            (e.1, e.2, e.3) = (e.1 + 1, e.2 + info.nbytes, e.3 + info.compressed_bytes);
        }
    }
    for (id, (name, n, bytes, stored)) in types {
        let pct = if bytes == 0 { 0.0 } else { 100.0 * stored as f64 / bytes as f64 };
        let _ =
            writeln!(out, "  ggml type {id:>2} {name:<8} {n:>5} tensors {bytes:>12} -> {stored:>12} bytes ({pct:.2}%)");
    }
    Ok(())
}

fn print_programs(path: &Path, file: &std::fs::File) -> Result<(), String> {
    let name = |e: brevis::Error| format!("{}: {e}", path.display());
    let archive = brevis::source::Source::file(file).map_err(name)?;
    let a = brevis::Archive::open_source(archive, brevis::DecodeOptions::default().memory_limit).map_err(name)?;
    let mut stdout = std::io::stdout().lock();
    let mut shapes: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
    let (mut orig, mut comp) = (0u64, 0u64);
    let (mut refs, mut ref_saved) = (0usize, 0i64);
    let _ = writeln!(
        stdout,
        "{:<48} {:<8} {:<16} {:>12} {:>12} {:>7}  program",
        "tensor", "dtype", "shape", "bytes", "stored", "bits/el"
    );
    for i in 0..a.len() {
        let t = a.info(i).unwrap();
        let elems: u64 = t.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(u64::MAX).max(1);
        let bpe = if t.nbytes == 0 { 0.0 } else { t.compressed_bytes as f64 * 8.0 / elems as f64 };
        let _ = writeln!(
            stdout,
            "{:<48} {:<8} {:<16} {:>12} {:>12} {:>7.3}  {}",
            t.name,
            t.dtype,
            format!("{:?}", t.shape),
            t.nbytes,
            t.compressed_bytes,
            bpe,
            t.program
        );
        if let Some(r) = &a.index().tensors[i].reference {
            let saved = r.standalone_estimate as i64 - t.compressed_bytes as i64;
            let _ = writeln!(
                stdout,
                "{:<48} uses reference tensor {:?}: saves ~{saved} bytes against ~{} coded alone",
                "", r.name, r.standalone_estimate
            );
            refs += 1;
            ref_saved += saved;
        }
        let e = shapes.entry(t.program.shape()).or_default();
        e.0 += 1;
        e.1 += t.nbytes;
        e.2 += t.compressed_bytes;
        orig += t.nbytes;
        comp += t.compressed_bytes;
    }
    let total = a.original_size();
    let pct = |x: u64, y: u64| {
        if y == 0 {
            0.0
        } else {
            100.0 * x as f64 / y as f64
        }
    };
    if let Some(r) = a.index().reference {
        let _ = writeln!(
            stdout,
            "\nreference: a file of {} bytes, xxh3 {:016x}; {refs} tensors use it, saving ~{ref_saved} bytes",
            r.size, r.hash
        );
    }
    if let Some(m) = a.file_meta() {
        let _ = writeln!(
            stdout,
            "\noriginal file: mode {:04o}, modified {}.{:09} s after the Unix epoch",
            m.mode, m.mtime, m.mtime_nanos
        );
    }
    print_gguf(&a, archive.len(), &mut stdout).map_err(name)?;
    let _ = writeln!(stdout, "\nprogram shapes:");
    for (shape, (n, o, c)) in &shapes {
        let _ = writeln!(stdout, "  {n:>5} tensors  {:>6.2}%  {shape}", pct(*c, *o));
    }
    let _ = writeln!(
        stdout,
        "\ntensors: {} bytes -> {} bytes ({:.2}%); file: {} bytes -> {} bytes ({:.2}%)",
        orig,
        comp,
        pct(comp, orig),
        total,
        archive.len(),
        pct(archive.len(), total)
    );
    Ok(())
}
