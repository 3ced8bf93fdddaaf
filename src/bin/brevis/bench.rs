//! `brevis bench FILE...`: speed and size of Brevis against general-purpose codecs, measured in
//! one run on the same bytes in memory. Each figure is the median of `runs` timings; MB/s are
//! megabytes (10^6) of original data per second.

use std::time::Instant;

/// One codec's results on one file.
struct Row {
    name: String,
    /// Compressed bytes (None for memcpy).
    size: Option<usize>,
    /// Compression time in seconds (None when not measured).
    compress_s: Option<f64>,
    decompress_s: f64,
}

/// Median of `runs` timings of `f` (after one untimed warm-up call when `warm`).
fn median<T>(runs: usize, warm: bool, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut last = if warm { Some(f()) } else { None };
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let t0 = Instant::now();
        let r = std::hint::black_box(f());
        times.push(t0.elapsed().as_secs_f64());
        last = Some(r);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let m = times.len();
    let med = if m % 2 == 1 { times[m / 2] } else { (times[m / 2 - 1] + times[m / 2]) / 2.0 };
    (med, last.expect("at least one run"))
}

fn check(name: &str, restored: &[u8], original: &[u8]) -> Result<(), String> {
    if restored != original {
        return Err(format!("{name}: the round trip changed the data"));
    }
    Ok(())
}

/// Measures one file; `threads` is the "all threads" count (0 = all cores).
fn measure(
    data: &[u8],
    runs: usize,
    compress_runs: usize,
    threads: usize,
    level: brevis::Level,
) -> Result<Vec<Row>, String> {
    let all = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
    let mut rows = Vec::new();

    // Brevis: compression is the program search, so it gets its own (smaller) run count.
    let (c_all, archive) = median(compress_runs, false, || {
        brevis::compress(data, &brevis::Options::default().with_threads(all).with_level(level))
    });
    let archive = archive.map_err(|e| format!("brevis compress: {e}"))?;
    let (c_one, again) = median(compress_runs, false, || {
        brevis::compress(data, &brevis::Options::default().with_threads(1).with_level(level))
    });
    if again.map_err(|e| format!("brevis compress: {e}"))? != archive {
        return Err("brevis: the archive depends on the thread count".into());
    }
    for (label, t, c) in [("1 thread", 1, c_one), ("all threads", all, c_all)] {
        let opts = brevis::DecodeOptions::default().with_threads(t);
        let (d, out) = median(runs, true, || brevis::decompress_with(&archive, &opts));
        check("brevis", &out.map_err(|e| format!("brevis decompress: {e}"))?, data)?;
        rows.push(Row {
            name: format!("brevis, {label} ({t})"),
            size: Some(archive.len()),
            compress_s: Some(c),
            decompress_s: d,
        });
    }

    for level in [3, 9] {
        let (c, z) = median(runs, false, || zstd::bulk::compress(data, level));
        let z = z.map_err(|e| format!("zstd: {e}"))?;
        let mut dec = zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?;
        let (d, out) = median(runs, true, || dec.decompress(&z, data.len()));
        check("zstd", &out.map_err(|e| format!("zstd: {e}"))?, data)?;
        rows.push(Row { name: format!("zstd -{level}"), size: Some(z.len()), compress_s: Some(c), decompress_s: d });
    }

    let (c, l) = median(runs, false, || lz4_flex::block::compress(data));
    let (d, out) = median(runs, true, || lz4_flex::block::decompress(&l, data.len()));
    check("lz4", &out.map_err(|e| format!("lz4: {e}"))?, data)?;
    rows.push(Row { name: "lz4 (lz4_flex block)".into(), size: Some(l.len()), compress_s: Some(c), decompress_s: d });

    let deflate = |d: &[u8]| -> std::io::Result<Vec<u8>> {
        use std::io::Write;
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(d)?;
        e.finish()
    };
    let inflate = |z: &[u8]| -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut out = Vec::with_capacity(data.len());
        flate2::read::DeflateDecoder::new(z).read_to_end(&mut out)?;
        Ok(out)
    };
    let (c, z) = median(runs, false, || deflate(data));
    let z = z.map_err(|e| format!("deflate: {e}"))?;
    let (d, out) = median(runs, true, || inflate(&z));
    check("deflate", &out.map_err(|e| format!("deflate: {e}"))?, data)?;
    rows.push(Row { name: "deflate -6 (flate2)".into(), size: Some(z.len()), compress_s: Some(c), decompress_s: d });

    // memcpy: one thread copying into a buffer whose pages are already mapped.
    let mut dst = vec![1u8; data.len()];
    let (d, _) = median(runs, true, || {
        dst.copy_from_slice(data);
        dst[dst.len() / 2]
    });
    check("memcpy", &dst, data)?;
    rows.push(Row { name: "memcpy (1 thread)".into(), size: None, compress_s: None, decompress_s: d });
    Ok(rows)
}

/// Runs the benchmark over `files` and prints one table per file.
pub fn run(
    files: &[(String, Vec<u8>)],
    runs: usize,
    compress_runs: usize,
    threads: usize,
    level: brevis::Level,
) -> Result<(), String> {
    println!(
        "CPU level {}; level {}; medians of {runs} runs ({compress_runs} for Brevis compression); MB = 10^6 bytes of original",
        brevis::internals::simd::isa().name(),
        level.name()
    );
    for (name, data) in files {
        let mb = data.len() as f64 / 1e6;
        let rows = measure(data, runs, compress_runs, threads, level).map_err(|e| format!("{name}: {e}"))?;
        let speed = |s: f64| mb / s.max(1e-12);
        let zstd_d = rows.iter().find(|r| r.name == "zstd -3").map_or(f64::NAN, |r| speed(r.decompress_s));
        let memcpy = rows.iter().find(|r| r.name.starts_with("memcpy")).map_or(f64::NAN, |r| speed(r.decompress_s));
        println!("\n{name}: {mb:.2} MB\n");
        println!("| codec | size % | compress MB/s | decompress MB/s | decompress / zstd -3 | decompress / memcpy |");
        println!("|---|---|---|---|---|---|");
        for r in &rows {
            let size = r.size.map_or("-".into(), |s| format!("{:.2}", 100.0 * s as f64 / data.len().max(1) as f64));
            let c = r.compress_s.map_or("-".into(), |c| format!("{:.1}", speed(c)));
            let d = speed(r.decompress_s);
            println!("| {} | {size} | {c} | {d:.1} | {:.2}x | {:.1}% |", r.name, d / zstd_d, 100.0 * d / memcpy);
        }
    }
    Ok(())
}
