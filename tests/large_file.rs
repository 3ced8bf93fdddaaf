//! Files larger than memory: `brevis compress` and `decompress` of a generated 256 MiB+
//! safetensors file with `--memory-limit 64M -T 2`, and the C ABI's `brevis_compress_file` and
//! `brevis_decompress_file` on the same files with `BREVIS_OPTION_MEMORY_LIMIT` 64M and
//! `BREVIS_OPTION_THREADS` 2, each run as a child whose peak RSS is read from `wait4` (mapped
//! file pages count in it, so the input must be read in windows); the round trips are compared
//! by streaming hashes. The same against a reference (`--ref`): a master and its BF16 cast under
//! other names, each larger than the limit, coded and restored under it. Also: the streaming
//! library path writes exactly the archive the in-memory path writes, whatever the thread count,
//! with or without a reference.
#![cfg(target_os = "linux")]

mod support;

use brevis::internals::ffi::*;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use support::st::*;
use support::tools::run_measured;

const MIB: u64 = 1 << 20;
/// The memory limit given to the CLI and the C ABI, and the peak RSS each child must stay under.
const LIMIT: u64 = 64 * MIB;

/// What the generated file holds: (name, dtype, bytes per element, element count, kind).
fn layout() -> Vec<(&'static str, &'static str, u64, u64, Kind)> {
    vec![
        // Larger than the limit: 16 distinct bf16 values, binomially skewed (a quantized embedding).
        ("embed.weight", "BF16", 2, 56 * MIB, Kind::Quantized),
        ("position_ids", "I64", 8, 4 * MIB, Kind::Arange),
        ("attention_mask", "U8", 1, 16 * MIB, Kind::Const),
        ("layer.0.weight", "F32", 4, 8 * MIB, Kind::Normal(7)),
        // The same bytes again: a copy, found by hashing both tensors in windows.
        ("layer.0.weight_tied", "F32", 4, 8 * MIB, Kind::Normal(7)),
        ("layer.1.weight", "F16", 2, 16 * MIB, Kind::Normal(9)),
    ]
}

#[derive(Clone, Copy)]
enum Kind {
    Quantized,
    Arange,
    Const,
    Normal(u64),
}

/// Trailing bytes after the last tensor (longer than the residue's 64 KiB: a byte stream).
const TAIL: usize = 100_000;

/// Writes the file in pieces of at most 4 MiB, so that this process stays small.
fn generate(path: &Path) -> u64 {
    let mut header = String::from("{");
    let mut off = 0u64;
    for (i, (name, dtype, w, n, _)) in layout().iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        header +=
            &format!(r#"{sep}"{name}":{{"dtype":"{dtype}","shape":[{n}],"data_offsets":[{off},{}]}}"#, off + w * n);
        off += w * n;
    }
    header += "}";
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    let quantized: Vec<u16> = (0..16).map(|k| half::bf16::from_f32((k as f32 - 7.5) * 0.004).to_bits()).collect();
    let piece = 4 * MIB;
    for (_, _, w, n, kind) in layout() {
        let mut rng = Rng(match kind {
            Kind::Normal(seed) => seed,
            _ => 1,
        });
        let mut done = 0u64;
        while done < n {
            let m = (piece / w).min(n - done);
            let mut buf = Vec::with_capacity((m * w) as usize);
            match kind {
                Kind::Quantized => {
                    for _ in 0..m {
                        // popcount of 15 random bits: 0..=15, binomial.
                        let k = (rng.next() & 0x7fff).count_ones() as usize;
                        buf.extend_from_slice(&quantized[k].to_le_bytes());
                    }
                }
                Kind::Arange => (done..done + m).for_each(|i| buf.extend_from_slice(&(i as i64 * 3).to_le_bytes())),
                Kind::Const => buf.resize(m as usize, 1),
                Kind::Normal(_) if w == 4 => {
                    (0..m).for_each(|_| buf.extend_from_slice(&(rng.normal(0.02) as f32).to_le_bytes()))
                }
                Kind::Normal(_) => (0..m)
                    .for_each(|_| buf.extend_from_slice(&half::f16::from_f64(rng.normal(0.1)).to_bits().to_le_bytes())),
            }
            f.write_all(&buf).unwrap();
            done += m;
        }
    }
    let mut rng = Rng(3);
    f.write_all(&rng.bytes(TAIL)).unwrap();
    f.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// xxh3-128 of a file, read in 1 MiB pieces.
fn file_hash(path: &Path) -> u128 {
    let mut f = std::fs::File::open(path).unwrap();
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; MIB as usize];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return h.digest128();
        }
        h.update(&buf[..n]);
    }
}

/// Runs the brevis binary in `dir` and returns its peak RSS in bytes.
fn run_cli(dir: &Path, args: &[&str]) -> u64 {
    run_measured(Command::new(env!("CARGO_BIN_EXE_brevis")).args(args).current_dir(dir))
}

/// Calls `brevis_compress_file` or `brevis_decompress_file` (`op`) on `src` and `dst` in `dir`,
/// in a child process (this test binary, running [`c_file_function_child`]), with threads 2 and
/// the memory limit; returns the child's peak RSS in bytes.
fn run_c_file_function(dir: &Path, op: &str, src: &str, dst: &str) -> u64 {
    run_measured(
        Command::new(std::env::current_exe().unwrap())
            .args(["c_file_function_child", "--exact", "--ignored", "--test-threads=1", "-q"])
            .env("BREVIS_C_FILE_CHILD", format!("{op}\n{src}\n{dst}"))
            .stdout(std::process::Stdio::null())
            .current_dir(dir),
    )
}

/// The child of [`run_c_file_function`]: one call of the C function through its Rust symbol
/// (the code the shared library exports), which must succeed. Without `BREVIS_C_FILE_CHILD` it
/// has nothing to do: it is a child process's entry point, not a test of its own.
#[test]
#[ignore = "the child process of a_file_four_times_the_memory_limit_round_trips_under_it"]
fn c_file_function_child() {
    let Ok(spec) = std::env::var("BREVIS_C_FILE_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split('\n').collect();
    let (src, dst) = (std::ffi::CString::new(parts[1]).unwrap(), std::ffi::CString::new(parts[2]).unwrap());
    let o = brevis_options_new();
    let set = |k: brevis_option, v: i64| unsafe { brevis_options_set(o, BrevisOptionKey(k as i32), v) };
    assert_eq!(set(brevis_option::BREVIS_OPTION_THREADS, 2), BREVIS_OK);
    assert_eq!(set(brevis_option::BREVIS_OPTION_MEMORY_LIMIT, LIMIT as i64), BREVIS_OK);
    let rc = match parts[0] {
        "compress" => unsafe { brevis_compress_file(src.as_ptr(), dst.as_ptr(), o) },
        "decompress" => unsafe { brevis_decompress_file(src.as_ptr(), dst.as_ptr(), o) },
        op => panic!("unknown operation {op}"),
    };
    unsafe { brevis_options_free(o) };
    assert_eq!(rc, BREVIS_OK, "brevis_{}_file", parts[0]);
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

#[test]
fn a_file_four_times_the_memory_limit_round_trips_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.safetensors");
    let size = generate(&input);
    assert!(size >= 256 * MIB && size >= 4 * LIMIT, "{size}");
    let t0 = std::time::Instant::now();
    let compress_rss = run_cli(
        dir.path(),
        &["compress", "-q", "-T", "2", "--memory-limit", "64M", "big.safetensors", "-o", "big.brv"],
    );
    let t1 = std::time::Instant::now();
    let decompress_rss =
        run_cli(dir.path(), &["decompress", "-q", "-T", "2", "--memory-limit", "64M", "big.brv", "-o", "back"]);
    let t2 = std::time::Instant::now();
    let archive = std::fs::metadata(dir.path().join("big.brv")).unwrap().len();
    eprintln!(
        "large file: {:.1} MiB -> {:.1} MiB; compress peak RSS {:.1} MiB in {:.1} s, decompress {:.1} MiB in {:.1} s",
        mib(size),
        mib(archive),
        mib(compress_rss),
        (t1 - t0).as_secs_f64(),
        mib(decompress_rss),
        (t2 - t1).as_secs_f64()
    );
    assert_eq!(file_hash(&dir.path().join("back")), file_hash(&input), "round trip differs");
    assert!(compress_rss < LIMIT, "compress peak RSS {compress_rss} bytes");
    assert!(decompress_rss < LIMIT, "decompress peak RSS {decompress_rss} bytes");
    // Real programs, not only generators: the quantized and normal tensors carry payload.
    let a = std::fs::File::open(dir.path().join("big.brv")).unwrap();
    let a = brevis::Archive::open_file(&a, LIMIT).unwrap();
    let programs: Vec<String> = (0..a.len()).map(|i| a.info(i).unwrap().program()).collect();
    assert!(programs[0] != "raw" && a.info(0).unwrap().compressed_bytes < 56 * MIB, "{}", programs[0]);
    assert!(programs[1].starts_with("arange"), "{}", programs[1]);
    assert!(programs[2].starts_with("const"), "{}", programs[2]);
    assert!(programs[4].starts_with("copy"), "{}", programs[4]);
    assert!(archive < size / 2, "{archive}");
    c_file_functions_stream_under_the_limit(dir.path(), &input);
}

/// The C ABI's file functions on the same files, each in a child process: under the memory
/// limit, writing the CLI's archive and the original back, leaving no temporary file.
fn c_file_functions_stream_under_the_limit(dir: &Path, input: &Path) {
    let t0 = std::time::Instant::now();
    let compress_rss = run_c_file_function(dir, "compress", "big.safetensors", "c.brv");
    let t1 = std::time::Instant::now();
    let decompress_rss = run_c_file_function(dir, "decompress", "big.brv", "c.back");
    let t2 = std::time::Instant::now();
    eprintln!(
        "large file, C ABI: brevis_compress_file peak RSS {:.1} MiB in {:.1} s, brevis_decompress_file {:.1} MiB in {:.1} s",
        mib(compress_rss),
        (t1 - t0).as_secs_f64(),
        mib(decompress_rss),
        (t2 - t1).as_secs_f64()
    );
    assert_eq!(file_hash(&dir.join("c.brv")), file_hash(&dir.join("big.brv")), "the C ABI's archive is the CLI's");
    assert_eq!(file_hash(&dir.join("c.back")), file_hash(input), "the C ABI's round trip differs");
    assert!(compress_rss < LIMIT, "brevis_compress_file peak RSS {compress_rss} bytes");
    assert!(decompress_rss < LIMIT, "brevis_decompress_file peak RSS {decompress_rss} bytes");
    let names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(!names.iter().any(|n| n.starts_with(".brevis-")), "a temporary file was left: {names:?}");
}

/// Master tensors of the reference pair: (name, element count). The variant holds the first
/// ones cast to BF16 and the last one as it is, all under GGUF-style names.
const MASTER: [(&str, u64); 4] =
    [("l.0.q.weight", 8 * MIB), ("l.0.up.weight", 16 * MIB), ("l.1.q.weight", 8 * MIB), ("l.1.o.weight", 4 * MIB)];

/// Writes the master (F32) or the variant (BF16 casts, round to nearest even, and the last
/// tensor as it is) of the reference pair, in pieces of at most 4 MiB; returns its size.
fn generate_pair_file(path: &Path, variant: bool) -> u64 {
    let dtype = |i: usize| if variant && i + 1 < MASTER.len() { ("BF16", 2) } else { ("F32", 4) };
    let mut entries = Vec::new();
    let mut off = 0;
    for (i, (name, n)) in MASTER.iter().enumerate() {
        let (d, w) = dtype(i);
        let name = if variant { format!("blk.{i}.weight") } else { name.to_string() };
        entries.push(entry(&name, d, &[*n], (off, off + n * w)));
        off += n * w;
    }
    let header = header_json(&entries, None);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    for (i, (_, n)) in MASTER.iter().enumerate() {
        let mut rng = Rng(40 + i as u64);
        let mut done = 0;
        while done < *n {
            let m = MIB.min(n - done);
            let mut buf = Vec::with_capacity((m * 4) as usize);
            for _ in 0..m {
                let x = rng.normal(0.02) as f32;
                match dtype(i) {
                    ("BF16", _) => buf.extend_from_slice(&half::bf16::from_f32(x).to_bits().to_le_bytes()),
                    _ => buf.extend_from_slice(&x.to_le_bytes()),
                }
            }
            f.write_all(&buf).unwrap();
            done += m;
        }
    }
    f.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn a_pair_larger_than_the_memory_limit_round_trips_against_its_reference_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let master = generate_pair_file(&dir.path().join("master.safetensors"), false);
    let variant = generate_pair_file(&dir.path().join("v.safetensors"), true);
    assert!(master > LIMIT && variant > LIMIT, "{master} {variant}");
    let base = ["-q", "-T", "2", "--memory-limit", "64M", "--ref", "master.safetensors"];
    let rss_c = run_cli(dir.path(), &[&["compress"], &base[..], &["v.safetensors", "-o", "v.brv"]].concat());
    let rss_d = run_cli(dir.path(), &[&["decompress"], &base[..], &["v.brv", "-o", "v.back"]].concat());
    let archive = std::fs::metadata(dir.path().join("v.brv")).unwrap().len();
    eprintln!(
        "reference pair: {:.1} MiB against {:.1} MiB -> {archive} B; compress peak RSS {:.1} MiB, decompress {:.1} MiB",
        mib(variant),
        mib(master),
        mib(rss_c),
        mib(rss_d)
    );
    assert_eq!(file_hash(&dir.path().join("v.back")), file_hash(&dir.path().join("v.safetensors")));
    assert!(rss_c < LIMIT, "compress against a reference: peak RSS {rss_c} bytes");
    assert!(rss_d < LIMIT, "decompress against a reference: peak RSS {rss_d} bytes");
    // Every tensor was found under its other name: the casts predicted, the copy copied.
    assert!(archive < variant / 100, "{archive} of {variant}");
    // The reference may also be given as its archive (decoded into a temporary file).
    run_cli(dir.path(), &["compress", "-q", "-T", "2", "--memory-limit", "64M", "master.safetensors"]);
    let rss_a = run_cli(
        dir.path(),
        &[
            "decompress",
            "-q",
            "-T",
            "2",
            "--memory-limit",
            "64M",
            "--ref",
            "master.safetensors.brv",
            "v.brv",
            "-o",
            "v.back2",
        ],
    );
    assert_eq!(file_hash(&dir.path().join("v.back2")), file_hash(&dir.path().join("v.safetensors")));
    assert!(rss_a < LIMIT, "decompress against a reference archive: peak RSS {rss_a} bytes");
}

/// Files that exercise every path of the streaming writer: tensors of every width, generators,
/// copies, gaps, trailing data, non-safetensors bytes, and chunk sizes that split tensors.
fn varied_files() -> Vec<Vec<u8>> {
    let mut rng = Rng(11);
    let mut files = Vec::new();
    let ts = vec![
        tensor("a", "F32", &[3000], data_for("F32", 3000, &mut rng, true)),
        tensor("b", "BF16", &[5000], data_for("BF16", 5000, &mut rng, false)),
        tensor("c", "I64", &[700], words(8, 700, |i| 5 + 2 * i as u64)),
        tensor("d", "U8", &[9000], vec![4u8; 9000]),
        tensor("e", "F16", &[4000], data_for("F16", 4000, &mut rng, true)),
    ];
    let mut with_copy = ts.clone();
    with_copy.push(tensor("a2", "F32", &[3000], ts[0].data.clone()));
    files.push(file(&with_copy, Some(&[("format", "pt")])));
    let mut tail = file(&ts, None);
    tail.extend(rng.bytes(70_001));
    files.push(tail);
    files.push(rng.bytes(20_000));
    files.push(Vec::new());
    files
}

#[test]
fn the_streaming_writer_makes_the_in_memory_archive() {
    let dir = tempfile::tempdir().unwrap();
    for (k, data) in varied_files().iter().enumerate() {
        let path = dir.path().join(format!("in{k}"));
        std::fs::write(&path, data).unwrap();
        for (chunk_bytes, threads) in [(1 << 20, 1), (4096, 1), (4096, 3), (1000, 2)] {
            let opts = brevis::Options::default().with_chunk_bytes(chunk_bytes).with_threads(threads);
            let want = brevis::compress(data, &opts).unwrap();
            let input = std::fs::File::open(&path).unwrap();
            // A stale, longer output must end up truncated to the archive.
            let out_path = dir.path().join("out");
            std::fs::write(&out_path, vec![0xAA; want.len() + 5000]).unwrap();
            let mut out = std::fs::OpenOptions::new().read(true).write(true).open(&out_path).unwrap();
            let small = opts.clone().with_memory_limit(20_000);
            let len = brevis::compress_file(&input, &mut out, &small).unwrap();
            drop(out);
            let got = std::fs::read(&out_path).unwrap();
            assert_eq!(len, got.len() as u64);
            assert!(got == want, "file {k}, chunk {chunk_bytes}, threads {threads}: archives differ");
            // And back, streaming, against the input.
            let mut back = Vec::new();
            let archive = std::fs::File::open(&out_path).unwrap();
            let dopts = brevis::DecodeOptions::default().with_threads(threads).with_memory_limit(1 << 20);
            assert_eq!(brevis::decompress_file(&archive, &mut back, &dopts).unwrap(), data.len() as u64);
            assert!(back == *data, "file {k}: round trip differs");
        }
    }
}

#[test]
fn the_streaming_writer_against_a_reference_makes_the_in_memory_archive() {
    let mut rng = Rng(12);
    let w: Vec<f32> = (0..20_000).map(|_| rng.normal(0.05) as f32).collect();
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let bf16s = |v: &[f32]| v.iter().flat_map(|x| half::bf16::from_f32(*x).to_bits().to_le_bytes()).collect();
    let reference =
        file(&[tensor("a", "F32", &[20_000], f32s(&w)), tensor("b", "F32", &[9_000], f32s(&w[..9_000]))], None);
    let mut cast = w.clone();
    cast[77] += 0.125; // a miss, coded by xorref under derive
    let input =
        file(&[tensor("x", "BF16", &[20_000], bf16s(&cast)), tensor("y", "F32", &[9_000], f32s(&w[..9_000]))], None);
    let dir = tempfile::tempdir().unwrap();
    let (in_path, ref_path, out_path) = (dir.path().join("in"), dir.path().join("ref"), dir.path().join("out"));
    std::fs::write(&in_path, &input).unwrap();
    std::fs::write(&ref_path, &reference).unwrap();
    for (chunk_bytes, threads) in [(1 << 20, 1), (4096, 3), (1000, 2)] {
        let opts = brevis::Options::default().with_chunk_bytes(chunk_bytes).with_threads(threads);
        let want = brevis::compress_with_ref(&input, &reference, &opts).unwrap();
        let mut out = std::fs::File::create(&out_path).unwrap();
        let (i, r) = (std::fs::File::open(&in_path).unwrap(), std::fs::File::open(&ref_path).unwrap());
        let len = brevis::compress_file_with_ref(&i, &mut out, &r, &opts.clone().with_memory_limit(20_000)).unwrap();
        let got = std::fs::read(&out_path).unwrap();
        assert_eq!(len, got.len() as u64);
        assert!(got == want, "chunk {chunk_bytes}, threads {threads}: archives differ");
        assert!(got.len() < input.len() / 10, "{} of {}", got.len(), input.len());
        let mut back = Vec::new();
        let dopts = brevis::DecodeOptions::default().with_threads(threads).with_memory_limit(1 << 20);
        let a = std::fs::File::open(&out_path).unwrap();
        brevis::decompress_file_with_ref(&a, &mut back, &r, &dopts).unwrap();
        assert!(back == input, "chunk {chunk_bytes}: round trip differs");
        // Another reference is an error that names the one expected.
        let e = brevis::decompress_file_with_ref(&a, &mut Vec::new(), &i, &dopts).unwrap_err();
        assert!(e.to_string().contains("wrong reference"), "{e}");
    }
}

#[test]
fn a_damaged_archive_file_is_an_error_from_the_streaming_reader() {
    let data = &varied_files()[0];
    let archive = brevis::compress(data, &brevis::Options::default().with_chunk_bytes(4096)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.brv");
    for (at, what) in [(archive.len() / 3, "payload"), (archive.len() - 40, "index"), (3, "magic")] {
        let mut bad = archive.clone();
        let n = if what == "payload" { 64 } else { 1 };
        bad[at..at + n].iter_mut().for_each(|b| *b = !*b);
        std::fs::write(&path, &bad).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let r = brevis::decompress_file(&f, &mut std::io::sink(), &brevis::DecodeOptions::default());
        assert!(r.is_err(), "a flipped bit in the {what} was not noticed");
    }
    std::fs::write(&path, &archive[..archive.len() - 1]).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    assert!(brevis::decompress_file(&f, &mut std::io::sink(), &brevis::DecodeOptions::default()).is_err());
}
