//! The `brevis` command line: compress, decompress, inspect, verify.
//!
//! zstd's habits: several inputs in one call, `-` for stdin, `-c` for stdout, `-r` for folders
//! (src/bin/brevis/jobs.rs), `brevis -d` for `brevis decompress`; the input is kept (deleted
//! only with `--rm`, after the output is verified); an existing output is never replaced
//! without `-f`; output goes to a temporary file in the destination folder that is renamed into
//! place only when complete (and removed on error or Ctrl-C); errors are one line on stderr
//! that names the file concerned, and a non-zero exit. Outputs take their input's permission
//! bits (under the umask), modification time and, for root, owner; decompression takes the
//! original's mode and time from the archive when it records them (unless `--no-preserve`).

#[path = "brevis/bench.rs"]
mod bench;
#[path = "brevis/codec.rs"]
mod codec;
#[path = "brevis/exec.rs"]
mod exec;
#[path = "brevis/family.rs"]
mod family;
#[path = "brevis/fsio.rs"]
mod fsio;
#[path = "brevis/jobs.rs"]
mod jobs;
#[path = "brevis/progress.rs"]
mod progress;

use brevis::MappedFile as Input;
use brevis::OutputAttrs;
use clap::{Args, Parser, Subcommand};
use fsio::{check_output, open, open_regular, read_input, write_atomic, Compare, Watch, PENDING};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Exit codes (also in `brevis --help` and the README).
const EXIT_CODES: &str = "\
`brevis -d ARGS` is short for `brevis decompress ARGS`.

Exit codes: 0 success (every input done); 1 an input or output failed (each failure is one
line on stderr; with several inputs the others are still done); 2 a usage error (nothing
done); 130 interrupted (Ctrl-C; the output being written is removed).";

mod exit {
    /// Some input or output failed.
    pub const FAILED: u8 = 1;
    /// The command line itself is wrong; nothing was done.
    pub const USAGE: u8 = 2;

    pub fn usage(msg: &str) -> std::process::ExitCode {
        eprintln!("brevis: {msg}");
        std::process::ExitCode::from(USAGE)
    }
}

#[derive(Parser)]
#[command(name = "brevis", version, about = "Lossless checkpoint compression by program synthesis")]
#[command(after_help = EXIT_CODES)]
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
    /// Compress files (safetensors, GGUF or anything else) into Brevis archives.
    #[command(after_help = EXIT_CODES)]
    Compress(CompressArgs),
    /// Learn a production prior from checkpoints, to reuse with `compress --prior`.
    Prior {
        #[command(subcommand)]
        cmd: PriorCmd,
    },
    /// Measure the search: total size and compression time against the budget, with the prior
    /// learned and backed off to the built-in one, the built-in, the learned and the uniform
    /// prior over the same productions.
    ///
    /// Without `--search`: speed and size of Brevis (compress, decompress with 1 and all threads)
    /// against zstd -3 and -9, lz4, deflate and memcpy, on the same bytes in memory.
    Bench(BenchArgs),
    /// Restore the original files from archives.
    #[command(visible_alias = "d", after_help = EXIT_CODES)]
    Decompress(DecompressArgs),
    /// Show each tensor's program, sizes and bits per element.
    Inspect(InspectArgs),
    /// Check every checksum; with ORIGINAL, also compare the restored bytes with it.
    Verify(VerifyArgs),
    /// Run a program on archives as on the original files (Linux): each ARCHIVE (a .brv file, or
    /// a folder made by compress -r) is decoded into sealed anonymous memory, never to disk, and
    /// every argument of PROGRAM that names it is replaced by the path of its decoded bytes
    /// (/proc/self/fd/N; for a folder, a private temporary folder of links, removed when PROGRAM
    /// exits). PROGRAM's exit status (or the signal that killed it) is brevis's.
    ///
    /// Example: brevis exec model.gguf.brv -- llama-server -m model.gguf.brv
    Exec(ExecArgs),
}

#[derive(Args)]
struct ExecArgs {
    /// Archives (.brv files, or folders of them) to decode for PROGRAM.
    #[arg(value_name = "ARCHIVE", required = true)]
    archives: Vec<PathBuf>,
    /// The reference the archives were made against (safetensors, GGUF or .brv), where an
    /// archive needs one that no archive given restores.
    #[arg(long = "ref", value_name = "BASE")]
    reference: Option<PathBuf>,
    /// PROGRAM and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "PROGRAM ARGS")]
    command: Vec<std::ffi::OsString>,
    /// Worker threads of the decode (0 = all cores).
    #[arg(short = 'T', long = "threads", default_value_t = 0)]
    threads: usize,
}

/// The files of a compress or decompress call, and what happens to them.
#[derive(Args, Clone)]
struct Files {
    /// Files to read; `-` (or none, when stdin is not a terminal) reads stdin, spooled to a
    /// temporary file in $TMPDIR unless it is a regular file. With -r, also folders.
    #[arg(value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// The output file (one input; `-` is stdout), or with -r the output folder, mirrored.
    /// Default: next to each input (compress: INPUT.brv; decompress: INPUT without .brv);
    /// stdout for stdin.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Write to stdout (only once the whole output is made: nothing partial on an error).
    /// Refused when stdout is a terminal, unless -f.
    #[arg(short = 'c', long = "stdout")]
    stdout: bool,
    /// Take every file under the folders given (one archive per file; see the README).
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Remove each input once its output is written and verified (ignored with -c).
    #[arg(long = "rm", overrides_with = "keep")]
    rm: bool,
    /// Keep the inputs (the default).
    #[arg(short = 'k', long = "keep", overrides_with = "rm")]
    keep: bool,
    /// Overwrite existing outputs (and write binary to a terminal).
    #[arg(short, long)]
    force: bool,
}

#[derive(Args)]
struct CompressArgs {
    #[command(flatten)]
    files: Files,
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
    /// With -r: code every file alone. By default a checkpoint is coded against the file of the
    /// same folders that predicts it best (its master: a cast or quantization is derived from
    /// it, a fine-tune coded as its changes), which decompress -r then finds among the archives
    /// it restores (README, "Model families").
    #[arg(long = "no-family")]
    no_family: bool,
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
    #[command(flatten)]
    files: Files,
    /// The reference the archive was made against (safetensors or .brv).
    #[arg(long = "ref", value_name = "BASE")]
    reference: Option<PathBuf>,
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
struct InspectArgs {
    archive: PathBuf,
    /// Also decode every tensor on one thread and show, per program shape, the decode time, its
    /// share of the whole and the speed (each tensor the best of --runs, into a buffer already
    /// touched): where a file's decode time goes.
    #[arg(long)]
    time: bool,
    /// Timed decodes of each tensor with --time (the fastest is kept).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// The reference the archive was made against (safetensors, GGUF or .brv): needed to show
    /// a GGUF header coded against it, and to time tensors that read it.
    #[arg(long = "ref", value_name = "BASE")]
    reference: Option<PathBuf>,
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
    /// Productions evaluated per tensor by the search (1.5 times as many at --level max).
    #[arg(long, default_value_t = brevis::Options::default().budget)]
    budget: usize,
    /// Deepest program the search builds (levels of transforms).
    #[arg(long, default_value_t = brevis::Options::default().depth)]
    depth: usize,
    /// Production prior: `learn+builtin` (the default: learned from a sample of the input's
    /// tensors, backed off to the built-in prior; `--level fast` uses the built-in one alone),
    /// `builtin` (the prior that ships with Brevis, learned from real checkpoints), `learn`
    /// (learned from the sample alone), `uniform`, or a JSON file from `brevis prior learn`.
    #[arg(long, value_name = "learn+builtin|builtin|learn|uniform|FILE")]
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
    fn prior(&self) -> Result<brevis::PriorSource, String> {
        use brevis::PriorSource;
        Ok(match self.prior.as_deref() {
            Some("builtin") => PriorSource::Builtin,
            None | Some("learn+builtin") => PriorSource::LearnBackoff,
            Some("learn") => PriorSource::Learn,
            Some("uniform") => PriorSource::Uniform,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
                PriorSource::Given(std::sync::Arc::new(
                    brevis::Prior::from_json(&text).map_err(|e| format!("{path}: {e}"))?,
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
        eprintln!("brevis: interrupted; the output being written was removed");
        std::process::exit(130);
    });
    let cli = Cli::parse_from(short_decompress(std::env::args_os()));
    match run(cli) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("brevis: {msg}");
            ExitCode::from(1)
        }
    }
}

fn parse_level(s: &str) -> Result<brevis::Level, String> {
    brevis::Level::from_name(s).ok_or_else(|| format!("unknown level {s:?} (fast, default or max)"))
}

fn mb(n: u64) -> String {
    format!("{:.2} MB", n as f64 / 1e6)
}

/// `brevis -d ARGS` (and zstd's `-dc`, `-df`...) is `brevis decompress ARGS` (with `-c`...).
fn short_decompress(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.collect();
    let flags = args.get(1).and_then(|a| a.to_str()).and_then(|a| a.strip_prefix('-')).map(str::to_string);
    if let Some(f) =
        flags.filter(|f| f == "-decompress" || (f.contains('d') && f.chars().all(|c| c.is_ascii_alphabetic())))
    {
        let rest: String = f.chars().filter(|&c| c != 'd').collect();
        args[1] = "decompress".into();
        if !rest.is_empty() && f != "-decompress" {
            args.insert(2, format!("-{rest}").into());
        }
    }
    args
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.cmd {
        Cmd::Compress(args) => Ok(codec::compress(&args)),
        Cmd::Decompress(args) => Ok(codec::decompress(&args)),
        Cmd::Prior { cmd: PriorCmd::Learn { files, output, force, common } } => {
            prior_learn(files, output, force, common)
        }
        Cmd::Bench(args) if args.search => bench_search(args),
        Cmd::Bench(args) => bench_speed(args),
        Cmd::Inspect(args) => {
            let reference = args.reference.as_deref().map(open).transpose()?;
            let file = open(&args.archive)?;
            print_programs(&args.archive, &file, args.time.then_some(args.runs), reference.as_ref())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Verify(args) => verify(args),
        Cmd::Exec(args) => exec::run(&exec::Exec {
            archives: &args.archives,
            reference: args.reference.as_deref(),
            command: &args.command,
            memory_limit: brevis::DecodeOptions::default().memory_limit,
            threads: args.threads,
        }),
    }
}
fn prior_learn(files: Vec<PathBuf>, output: PathBuf, force: bool, common: Common) -> Result<ExitCode, String> {
    for f in &files {
        check_output(f, &output, force)?;
    }
    let t0 = Instant::now();
    let mut prior = brevis::Prior::uniform();
    for f in &files {
        let data = read_input(f)?;
        let p = brevis::learn_prior(&data, &brevis::Options::default().with_threads(common.threads))
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
    println!(
        "\n| budget | learned + built-in | time | built-in prior | time | learned prior | time | uniform prior | time |\n|---|---|---|---|---|---|---|---|---|"
    );
    for &b in &budgets {
        if b == 0 {
            return Err("budgets must be positive".into());
        }
        let mut row = format!("| {b} |");
        use brevis::PriorSource;
        for prior in [PriorSource::LearnBackoff, PriorSource::Builtin, PriorSource::Learn, PriorSource::Uniform] {
            let opts = brevis::Options::default().with_threads(common.threads).with_budget(b).with_prior(prior);
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
    d.with_threads(threads).with_memory_limit(memory_limit.unwrap_or(fallback))
}

/// What `inspect` says of an archive's reference (`refs` tensors use it, saving about
/// `ref_saved` bytes) and of the original file's mode and time, where it records them.
fn print_records(a: &brevis::Archive, refs: usize, ref_saved: i64, out: &mut impl Write) {
    if let Some(r) = a.reference_file() {
        let _ = writeln!(
            out,
            "\nreference: a file of {} bytes, xxh3 {:016x}; {refs} tensors use it, saving ~{ref_saved} bytes",
            r.size, r.hash
        );
    }
    if let Some(m) = a.file_meta() {
        let _ = writeln!(
            out,
            "\noriginal file: mode {:04o}, modified {}.{:09} s after the Unix epoch",
            m.mode, m.mtime, m.mtime_nanos
        );
    }
}

/// For an archive of a GGUF file: its version, alignment and header (kept in the index, or in
/// entries when it was too large), what the index frame costs, and the tensors by ggml type.
fn print_gguf(a: &brevis::Archive, archive_len: u64, out: &mut impl Write) -> brevis::Result<()> {
    let g = match a.gguf() {
        Ok(Some(g)) => g,
        Ok(None) => return Ok(()),
        // A header coded against the reference (or in entries that read it) waits for it.
        Err(brevis::Error::Invalid(e)) if a.needs_reference() => {
            let _ = writeln!(out, "\nGGUF header: not shown ({e})");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let payloads: u64 = (0..a.len()).map(|i| a.info(i).unwrap().compressed_bytes).sum();
    let index_frame = archive_len.saturating_sub(payloads + 48);
    let in_index = a.info(0).is_none_or(|t| t.offset >= g.header.len() as u64);
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

/// Each tensor's decode time on one thread, in seconds: the fastest of `runs` decodes into a
/// buffer already touched (so that page faults are not timed).
fn decode_times(a: &brevis::Archive, runs: u32, limit: u64) -> Result<Vec<f64>, String> {
    if a.needs_reference() {
        return Err("inspect --time decodes every tensor, and this archive is coded against a reference, which inspect does not take".into());
    }
    let largest = (0..a.len()).filter_map(|i| a.info(i)).map(|t| t.nbytes).max().unwrap_or(0);
    if largest > limit {
        return Err(format!("inspect --time: a tensor of {largest} bytes is above the memory limit of {limit} bytes"));
    }
    let mut buf = vec![1u8; largest as usize];
    let pool =
        rayon::ThreadPoolBuilder::new().num_threads(1).build().map_err(|e| format!("cannot start a thread: {e}"))?;
    pool.install(|| {
        (0..a.len())
            .map(|i| {
                let out = &mut buf[..a.info(i).map_or(0, |t| t.nbytes as usize)];
                let mut best = f64::INFINITY;
                for _ in 0..runs {
                    let t0 = Instant::now();
                    a.decode_tensor_into(i, out).map_err(|e| e.to_string())?;
                    best = best.min(t0.elapsed().as_secs_f64());
                }
                Ok(best)
            })
            .collect()
    })
}

/// The table of `inspect`; with `time_runs`, the decode time of each program shape (the fastest
/// of that many decodes of each tensor).
fn print_programs(
    path: &Path,
    file: &std::fs::File,
    time_runs: Option<u32>,
    reference: Option<&std::fs::File>,
) -> Result<(), String> {
    let name = |e: brevis::Error| format!("{}: {e}", path.display());
    let archive_len = file.metadata().map_err(|e| name(e.into()))?.len();
    let limit = brevis::DecodeOptions::default().memory_limit;
    // Timing decodes from the mapped archive (as `decompress` does within its memory limit):
    // the payloads are not copied in first. Without timing, the index alone is read in windows.
    let map;
    let mut a = if time_runs.is_some() {
        map = Input::of(file).map_err(|e| format!("{}: cannot map: {e}", path.display()))?;
        brevis::Archive::open_with_limit(&map, limit)
    } else {
        brevis::Archive::open_file(file, limit)
    }
    .map_err(name)?;
    if let Some(r) = reference {
        a.set_reference_file(r).map_err(name)?;
    }
    let times = match time_runs {
        Some(runs) => Some(decode_times(&a, runs, limit).map_err(|e| format!("{}: {e}", path.display()))?),
        None => None,
    };
    let mut stdout = std::io::stdout().lock();
    let mut shapes: BTreeMap<String, (usize, u64, u64, f64)> = BTreeMap::new();
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
            t.program()
        );
        if let Some(r) = &t.reference {
            let saved = r.standalone_estimate as i64 - t.compressed_bytes as i64;
            let _ = writeln!(
                stdout,
                "{:<48} uses reference tensor {:?}: saves ~{saved} bytes against ~{} coded alone",
                "", r.name, r.standalone_estimate
            );
            refs += 1;
            ref_saved += saved;
        }
        let e = shapes.entry(t.program_shape()).or_default();
        e.0 += 1;
        e.1 += t.nbytes;
        e.2 += t.compressed_bytes;
        e.3 += times.as_ref().map_or(0.0, |v| v[i]);
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
    print_records(&a, refs, ref_saved, &mut stdout);
    print_gguf(&a, archive_len, &mut stdout).map_err(name)?;
    let _ = writeln!(stdout, "\nprogram shapes:");
    // (A fold from 0: an empty sum of floats is -0.)
    let all = times.iter().flatten().fold(0.0, |a, t| a + t);
    for (shape, (n, o, c, secs)) in &shapes {
        let time = match times {
            Some(_) => format!(
                "  {:>9.2} ms {:>5.1}% {:>6.0} MB/s",
                secs * 1e3,
                100.0 * secs / all.max(f64::MIN_POSITIVE),
                *o as f64 / secs.max(1e-9) / 1e6
            ),
            None => String::new(),
        };
        let _ = writeln!(stdout, "  {n:>5} tensors  {:>6.2}%{time}  {shape}", pct(*c, *o));
    }
    if times.is_some() {
        let _ = writeln!(
            stdout,
            "\ndecode on one thread: {:.2} ms for the tensors' {orig} bytes ({:.0} MB/s), each tensor the fastest of {} runs",
            all * 1e3,
            orig as f64 / all.max(1e-9) / 1e6,
            time_runs.unwrap_or(0)
        );
    }
    let _ = writeln!(
        stdout,
        "\ntensors: {} bytes -> {} bytes ({:.2}%); file: {} bytes -> {} bytes ({:.2}%)",
        orig,
        comp,
        pct(comp, orig),
        total,
        archive_len,
        pct(archive_len, total)
    );
    Ok(())
}
