//! The `brevis` command line: compress, decompress, inspect, verify.
//!
//! zstd's habits: the input is never modified or deleted; an existing output is never replaced
//! without `-f`; output goes to a temporary file in the destination folder that is renamed into
//! place only when complete (and removed on error or Ctrl-C); errors are one line on stderr
//! and a non-zero exit.

#[path = "brevis/bench.rs"]
mod bench;

use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::io::Write;
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
    Compress {
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
        #[command(flatten)]
        search: SearchArgs,
        #[command(flatten)]
        common: Common,
    },
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
    Bench {
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
        #[command(flatten)]
        common: Common,
    },
    /// Restore the original file from an archive.
    Decompress {
        input: PathBuf,
        /// Output path (default: INPUT without .brv).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// The reference the archive was made against (safetensors or .brv).
        #[arg(long = "ref", value_name = "BASE")]
        reference: Option<PathBuf>,
        #[arg(short, long)]
        force: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Show each tensor's program, sizes and bits per element.
    Inspect { archive: PathBuf },
    /// Check every checksum; with ORIGINAL, also compare the restored bytes with it.
    Verify {
        archive: PathBuf,
        original: Option<PathBuf>,
        /// The reference the archive was made against.
        #[arg(long = "ref", value_name = "BASE")]
        reference: Option<PathBuf>,
    },
}

/// How the search for each tensor's program runs (never stored in the archive).
#[derive(Args, Clone)]
struct SearchArgs {
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

/// The temporary output being written, removed by the Ctrl-C handler.
static PENDING: Mutex<Option<PathBuf>> = Mutex::new(None);

fn main() -> ExitCode {
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
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let len = f.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?.len();
    if len == 0 {
        return Ok(Input::Empty);
    }
    // SAFETY: the map is read-only and private to this process; like zstd and every mmap-based
    // tool, we rely on the file not being truncated by another process while we read it.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| format!("cannot map {}: {e}", path.display()))?;
    Ok(Input::Map(map))
}

enum Input {
    Empty,
    Map(memmap2::Mmap),
}

impl std::ops::Deref for Input {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Input::Empty => &[],
            Input::Map(m) => m,
        }
    }
}

/// Writes `data` to `out` atomically: temp file in the same folder, fsync, rename.
fn write_atomic(out: &Path, force: bool, data: &[u8]) -> Result<(), String> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".brevis-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| format!("cannot create a temporary file in {}: {e}", dir.display()))?;
    *PENDING.lock().unwrap() = Some(tmp.path().to_path_buf());
    let res = (|| {
        tmp.write_all(data).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        tmp.as_file().sync_all().map_err(|e| format!("cannot sync {}: {e}", out.display()))?;
        if force {
            tmp.persist(out).map(|_| ()).map_err(|e| format!("cannot create {}: {}", out.display(), e.error))
        } else {
            tmp.persist_noclobber(out).map(|_| ()).map_err(|e| {
                if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                    format!("{} already exists; use -f to overwrite", out.display())
                } else {
                    format!("cannot create {}: {}", out.display(), e.error)
                }
            })
        }
    })();
    *PENDING.lock().unwrap() = None;
    res
}

fn check_output(input: &Path, out: &Path, force: bool) -> Result<(), String> {
    if out.exists() {
        if !force {
            return Err(format!("{} already exists; use -f to overwrite", out.display()));
        }
        if let (Ok(a), Ok(b)) = (std::fs::canonicalize(input), std::fs::canonicalize(out)) {
            if a == b {
                return Err("input and output are the same file".into());
            }
        }
    }
    Ok(())
}

fn mb(n: u64) -> String {
    format!("{:.2} MB", n as f64 / 1e6)
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.cmd {
        Cmd::Compress { input, output, force, chunk_size, reference, search, common } => {
            let out = output.unwrap_or_else(|| {
                let mut s = input.clone().into_os_string();
                s.push(".brv");
                PathBuf::from(s)
            });
            check_output(&input, &out, force)?;
            let data = read_input(&input)?;
            if chunk_size == 0 {
                return Err("--chunk-size must be positive".into());
            }
            if !common.quiet && data.len() > 64 << 20 {
                eprint!("brevis: compressing {} ({})...\r", input.display(), mb(data.len() as u64));
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
                ..Default::default()
            };
            let archive = match &reference {
                Some(r) => brevis::compress_with_ref(&data, &read_input(r)?, &opts),
                None => brevis::compress(&data, &opts),
            }
            .map_err(|e| e.to_string())?;
            write_atomic(&out, force, &archive)?;
            if common.verbose {
                print_programs(&archive)?;
            }
            if let (Some(st), false) = (&stats, common.quiet) {
                let st: &brevis::synth::SearchStats = st;
                eprintln!("{}", st.summary());
            }
            if !common.quiet {
                let pct = if data.is_empty() { 0.0 } else { 100.0 * archive.len() as f64 / data.len() as f64 };
                eprintln!(
                    "{}: {} -> {} ({pct:.2}%) in {:.2} s => {}",
                    input.display(),
                    mb(data.len() as u64),
                    mb(archive.len() as u64),
                    t0.elapsed().as_secs_f64(),
                    out.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Decompress { input, output, force, reference, common } => {
            let out = match output {
                Some(o) => o,
                None => match input.to_str().and_then(|s| s.strip_suffix(".brv")) {
                    Some(s) if !s.is_empty() => PathBuf::from(s),
                    _ => return Err(format!("{} does not end in .brv; give the output with -o", input.display())),
                },
            };
            check_output(&input, &out, force)?;
            let data = read_input(&input)?;
            let t0 = Instant::now();
            let opts = brevis::DecodeOptions { threads: common.threads, ..Default::default() };
            let original = match &reference {
                Some(r) => brevis::decompress_with_ref(&data, &read_input(r)?, &opts),
                None => brevis::decompress_with(&data, &opts),
            }
            .map_err(|e| format!("{}: {e}", input.display()))?;
            write_atomic(&out, force, &original)?;
            if !common.quiet {
                eprintln!(
                    "{}: {} -> {} in {:.2} s => {}",
                    input.display(),
                    mb(data.len() as u64),
                    mb(original.len() as u64),
                    t0.elapsed().as_secs_f64(),
                    out.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Prior { cmd: PriorCmd::Learn { files, output, force, common } } => {
            if output.exists() && !force {
                return Err(format!("{} already exists; use -f to overwrite", output.display()));
            }
            let t0 = Instant::now();
            let mut prior = brevis::synth::Prior::uniform();
            for f in &files {
                let data = read_input(f)?;
                let p = brevis::learn_prior(&data, &brevis::Options { threads: common.threads, ..Default::default() })
                    .map_err(|e| format!("{}: {e}", f.display()))?;
                prior.merge(&p);
            }
            write_atomic(&output, force, prior.to_json().as_bytes())?;
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
        Cmd::Bench { search: false, files, runs, compress_runs, common, .. } => {
            if runs == 0 || compress_runs == 0 {
                return Err("--runs and --compress-runs must be positive".into());
            }
            let inputs: Vec<(String, Vec<u8>)> = files
                .iter()
                .map(|f| Ok((f.display().to_string(), read_input(f)?.to_vec())))
                .collect::<Result<_, String>>()?;
            bench::run(&inputs, runs, compress_runs, common.threads)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench { search: true, files, budgets, common, .. } => {
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
        Cmd::Inspect { archive } => {
            let data = read_input(&archive)?;
            print_programs(&data)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Verify { archive, original, reference } => {
            let data = read_input(&archive)?;
            let opts = brevis::DecodeOptions::default();
            let restored = match &reference {
                Some(r) => brevis::decompress_with_ref(&data, &read_input(r)?, &opts),
                None => brevis::decompress_with(&data, &opts),
            }
            .map_err(|e| format!("{}: {e}", archive.display()))?;
            if let Some(orig) = original {
                let o = read_input(&orig)?;
                if *o != restored[..] {
                    let at = o.iter().zip(&restored).position(|(a, b)| a != b).unwrap_or(o.len().min(restored.len()));
                    return Err(format!("{} differs from {} at byte {at}", archive.display(), orig.display()));
                }
            }
            println!("{}: OK ({} restored, all checksums match)", archive.display(), mb(restored.len() as u64));
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_programs(archive: &[u8]) -> Result<(), String> {
    let a = brevis::Archive::open(archive).map_err(|e| e.to_string())?;
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
        pct(archive.len() as u64, total)
    );
    Ok(())
}
