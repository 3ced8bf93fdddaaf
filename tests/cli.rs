//! The `brevis` binary, run in a temporary directory: output naming, refusing to overwrite,
//! atomic output (nothing left behind on error), inspect, verify, and error reporting.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::st::*;

fn brevis(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cannot run the brevis binary")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[track_caller]
fn ok(o: &Output) {
    assert!(o.status.success(), "brevis failed ({:?}): {}", o.status.code(), stderr(o));
}

/// Non-zero exit with exactly one non-empty line on stderr; returns the line.
#[track_caller]
fn fails_with_one_line(o: &Output) -> String {
    assert!(!o.status.success(), "brevis succeeded; stderr: {}", stderr(o));
    assert_ne!(o.status.code(), Some(0));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err:?}");
    lines[0].to_string()
}

/// Names of the files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[track_caller]
fn no_temp_files(dir: &Path) {
    let tmp: Vec<String> =
        listing(dir).into_iter().filter(|n| n.starts_with(".brevis-") || n.ends_with(".tmp")).collect();
    assert!(tmp.is_empty(), "temporary files left behind: {tmp:?}");
}

fn model() -> Vec<u8> {
    let mut rng = Rng(77);
    let tensors = vec![
        tensor("model.embed_tokens.weight", "BF16", &[64, 128], data_for("BF16", 64 * 128, &mut rng, true)),
        tensor("model.norm.weight", "F32", &[128], words(4, 128, |_| 1.0f32.to_bits() as u64)),
        tensor("position_ids", "I64", &[512], words(8, 512, |i| i as u64)),
        tensor("lm_head.weight", "F16", &[32, 64], data_for("F16", 32 * 64, &mut rng, true)),
    ];
    file(&tensors, Some(&[("format", "pt")]))
}

fn setup() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let m = model();
    std::fs::write(dir.path().join("model.safetensors"), &m).unwrap();
    (dir, m)
}

#[test]
fn compress_names_the_output_and_decompress_strips_brv() {
    let (dir, m) = setup();
    let d = dir.path();
    let input = d.join("model.safetensors");
    let before = std::fs::metadata(&input).unwrap();
    // Make any write to the input visible in its mtime.
    std::thread::sleep(std::time::Duration::from_millis(20));
    ok(&brevis(d, &["compress", "model.safetensors"]));
    assert_eq!(listing(d), ["model.safetensors", "model.safetensors.brv"]);
    // The input is untouched: same bytes, same mtime, same length.
    let after = std::fs::metadata(&input).unwrap();
    assert_eq!(std::fs::read(&input).unwrap(), m);
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    assert_eq!(after.len(), before.len());
    let archive = std::fs::read(d.join("model.safetensors.brv")).unwrap();
    assert_eq!(brevis::decompress(&archive).unwrap(), m);

    // Decompress next to the archive, under the name without .brv.
    std::fs::rename(&input, d.join("original")).unwrap();
    ok(&brevis(d, &["decompress", "model.safetensors.brv"]));
    assert_eq!(std::fs::read(&input).unwrap(), m);
    assert_eq!(std::fs::read(d.join("model.safetensors.brv")).unwrap(), archive, "the archive was modified");
    assert_eq!(listing(d), ["model.safetensors", "model.safetensors.brv", "original"]);

    // Explicit outputs, in another directory, with an absolute path.
    std::fs::create_dir(d.join("sub")).unwrap();
    let abs = d.join("sub").join("x.brv");
    ok(&brevis(d, &["compress", "-q", "original", "-o", abs.to_str().unwrap()]));
    ok(&brevis(d, &["decompress", "-q", "sub/x.brv", "-o", "sub/x"]));
    assert_eq!(std::fs::read(d.join("sub/x")).unwrap(), m);
    no_temp_files(d);
    no_temp_files(&d.join("sub"));
}

#[test]
fn decompress_without_brv_and_without_output_fails() {
    let (dir, _) = setup();
    let d = dir.path();
    ok(&brevis(d, &["compress", "-q", "model.safetensors", "-o", "archive.bin"]));
    std::fs::write(d.join(".brv"), std::fs::read(d.join("archive.bin")).unwrap()).unwrap();
    let files = listing(d);
    for name in ["archive.bin", ".brv"] {
        let line = fails_with_one_line(&brevis(d, &["decompress", name]));
        assert!(line.contains("-o"), "{line}");
        assert!(line.contains(name), "{line}");
        assert_eq!(listing(d), files, "decompress {name} created files");
    }
    ok(&brevis(d, &["decompress", "-q", "archive.bin", "-o", "restored"]));
    assert_eq!(std::fs::read(d.join("restored")).unwrap(), std::fs::read(d.join("model.safetensors")).unwrap());
}

#[test]
fn existing_outputs_are_kept_without_force() {
    let (dir, m) = setup();
    let d = dir.path();
    let out = d.join("model.safetensors.brv");
    std::fs::write(&out, b"precious").unwrap();
    let line = fails_with_one_line(&brevis(d, &["compress", "model.safetensors"]));
    assert!(line.contains("exists") && line.contains("-f"), "{line}");
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    no_temp_files(d);

    ok(&brevis(d, &["compress", "-q", "-f", "model.safetensors"]));
    let archive = std::fs::read(&out).unwrap();
    assert_eq!(brevis::decompress(&archive).unwrap(), m);

    // The same for decompress: the existing file (here the original) stays as it is.
    std::fs::write(d.join("model.safetensors"), b"other").unwrap();
    let line = fails_with_one_line(&brevis(d, &["decompress", "model.safetensors.brv"]));
    assert!(line.contains("exists"), "{line}");
    assert_eq!(std::fs::read(d.join("model.safetensors")).unwrap(), b"other");
    ok(&brevis(d, &["decompress", "-q", "--force", "model.safetensors.brv"]));
    assert_eq!(std::fs::read(d.join("model.safetensors")).unwrap(), m);

    // -f never lets the output replace the input itself.
    let line = fails_with_one_line(&brevis(d, &["compress", "-f", "model.safetensors", "-o", "model.safetensors"]));
    assert!(!line.is_empty());
    assert_eq!(std::fs::read(d.join("model.safetensors")).unwrap(), m);
    no_temp_files(d);
}

/// An output that is a pipe or a device is written, not replaced by a file (with or without
/// -f): `-o /dev/null` must leave /dev/null a device. Tried on a FIFO read by another thread.
#[test]
fn outputs_that_are_pipes_are_written_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let (dir, m) = setup();
    let d = dir.path();
    let fifo = d.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo (coreutils) is needed for this test");
    ok(&brevis(d, &["compress", "-q", "model.safetensors", "-o", "model.brv"]));
    for args in
        [&["decompress", "-q", "model.brv", "-o", "pipe"][..], &["decompress", "-q", "-f", "model.brv", "-o", "pipe"]]
    {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        ok(&brevis(d, args));
        // (Checked before joining: a reader of a replaced pipe would wait forever.)
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "{args:?} replaced the pipe");
        assert_eq!(reader.join().unwrap(), m, "{args:?}");
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    ok(&brevis(d, &["compress", "-q", "-f", "model.safetensors", "-o", "pipe"]));
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "compress replaced the pipe");
    assert_eq!(brevis::decompress(&reader.join().unwrap()).unwrap(), m);
    no_temp_files(d);
}

#[test]
fn corrupt_archives_leave_no_output() {
    let (dir, m) = setup();
    let d = dir.path();
    ok(&brevis(d, &["compress", "-q", "model.safetensors", "-o", "good.brv"]));
    let archive = std::fs::read(d.join("good.brv")).unwrap();
    let mut flipped = archive.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x10;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("flipped.brv", flipped),
        ("truncated.brv", archive[..archive.len() - 1].to_vec()),
        ("short.brv", archive[..10].to_vec()),
        ("empty.brv", Vec::new()),
        ("text.brv", b"hello, this is not an archive\n".to_vec()),
        ("model.brv", m.clone()),
    ];
    for (name, bytes) in &cases {
        std::fs::write(d.join(name), bytes).unwrap();
        let files = listing(d);
        let line = fails_with_one_line(&brevis(d, &["decompress", name]));
        assert!(line.contains(name), "{line}");
        assert_eq!(listing(d), files, "decompress {name} left files behind");
        no_temp_files(d);
        let line = fails_with_one_line(&brevis(d, &["decompress", name, "-o", "out", "-f"]));
        assert!(line.contains(name), "{line}");
        assert!(!d.join("out").exists());
        assert!(!brevis(d, &["verify", name]).status.success(), "verify {name}");
        // inspect reads only the index, which a flip in a payload leaves intact.
        if *name != "flipped.brv" {
            assert!(!brevis(d, &["inspect", name]).status.success(), "inspect {name}");
        }
        no_temp_files(d);
    }
    // A corrupt archive does not replace an existing output even with -f.
    std::fs::write(d.join("out"), b"keep").unwrap();
    assert!(!brevis(d, &["decompress", "flipped.brv", "-o", "out", "-f"]).status.success());
    assert_eq!(std::fs::read(d.join("out")).unwrap(), b"keep");
    no_temp_files(d);
}

#[test]
fn inspect_lists_tensors_and_program_shapes() {
    let (dir, _) = setup();
    let d = dir.path();
    ok(&brevis(d, &["compress", "-q", "model.safetensors"]));
    let o = brevis(d, &["inspect", "model.safetensors.brv"]);
    ok(&o);
    let out = stdout(&o);
    for name in ["model.embed_tokens.weight", "model.norm.weight", "position_ids", "lm_head.weight"] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
    assert!(out.contains("program shapes"), "{out}");
    // Each tensor's program is printed, e.g. the generators.
    let line = |name: &str| out.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    assert!(line("position_ids").contains("arange"), "{}", line("position_ids"));
    assert!(line("model.norm.weight").contains("const"), "{}", line("model.norm.weight"));
    // inspect of an archive of a non-safetensors file works too.
    std::fs::write(d.join("notes.txt"), b"plain text, not tensors").unwrap();
    ok(&brevis(d, &["compress", "-q", "notes.txt"]));
    let o = brevis(d, &["inspect", "notes.txt.brv"]);
    ok(&o);
    assert!(stdout(&o).contains("program shapes"));
}

#[test]
fn inspect_times_each_program_shape() {
    let (dir, _) = setup();
    let d = dir.path();
    ok(&brevis(d, &["compress", "-q", "model.safetensors"]));
    let o = brevis(d, &["inspect", "--time", "--runs", "2", "model.safetensors.brv"]);
    ok(&o);
    let out = stdout(&o);
    // Every shape line has its time, share and speed; the shares add up to the whole.
    let shapes: Vec<&str> =
        out.lines().skip_while(|l| !l.starts_with("program shapes")).skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(!shapes.is_empty(), "{out}");
    let mut share = 0.0;
    for l in &shapes {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert!(f[1] == "tensors" && f[4] == "ms" && f[7] == "MB/s", "{l}");
        share += f[5].trim_end_matches('%').parse::<f64>().unwrap();
    }
    assert!((share - 100.0).abs() < 0.1 * shapes.len() as f64, "{out}");
    assert!(out.contains("decode on one thread: ") && out.contains("the fastest of 2 runs"), "{out}");
    // Without --time, no times; --runs 0 is refused.
    let plain = stdout(&brevis(d, &["inspect", "model.safetensors.brv"]));
    assert!(!plain.contains(" ms ") && !plain.contains("decode on one thread"), "{plain}");
    assert!(!brevis(d, &["inspect", "--time", "--runs", "0", "model.safetensors.brv"]).status.success());
}

#[test]
fn verify_compares_with_the_original() {
    let (dir, m) = setup();
    let d = dir.path();
    ok(&brevis(d, &["compress", "-q", "model.safetensors"]));
    let o = brevis(d, &["verify", "model.safetensors.brv", "model.safetensors"]);
    ok(&o);
    assert!(stdout(&o).contains("OK"), "{}", stdout(&o));
    ok(&brevis(d, &["verify", "model.safetensors.brv"]));
    // A different original: one byte changed, one byte shorter, one byte longer, empty.
    let mut changed = m.clone();
    let at = m.len() - 100;
    changed[at] ^= 1;
    let mut longer = m.clone();
    longer.push(0);
    for (name, bytes) in
        [("changed", changed), ("shorter", m[..m.len() - 1].to_vec()), ("longer", longer), ("empty", vec![])]
    {
        std::fs::write(d.join(name), &bytes).unwrap();
        let line = fails_with_one_line(&brevis(d, &["verify", "model.safetensors.brv", name]));
        assert!(line.contains(name), "{line}");
    }
    let line = fails_with_one_line(&brevis(d, &["verify", "model.safetensors.brv", "changed"]));
    assert!(line.contains(&at.to_string()), "the first differing byte is {at}: {line}");
    no_temp_files(d);
}

#[test]
fn missing_inputs_exit_1_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("present.brv"), brevis::compress(b"x", &Default::default()).unwrap()).unwrap();
    for args in [
        vec!["compress", "missing.safetensors"],
        vec!["decompress", "missing.brv"],
        vec!["decompress", "missing.brv", "-o", "out"],
        vec!["inspect", "missing.brv"],
        vec!["verify", "missing.brv"],
        vec!["verify", "present.brv", "missing.original"],
    ] {
        let o = brevis(d, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let line = fails_with_one_line(&o);
        assert!(line.contains(args.iter().find(|a| a.starts_with("missing")).unwrap()), "{args:?}: {line}");
        assert_eq!(listing(d), ["present.brv"], "{args:?} created files");
    }
}

#[test]
fn odd_inputs_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rng = Rng(5);
    let cases: Vec<(&str, Vec<u8>)> = vec![("empty", vec![]), ("random", rng.bytes(3000)), ("one", vec![7])];
    for (name, bytes) in &cases {
        std::fs::write(d.join(name), bytes).unwrap();
        let o = brevis(d, &["compress", "-q", name]);
        ok(&o);
        assert!(o.stderr.is_empty(), "-q printed: {}", stderr(&o));
        let brv = format!("{name}.brv");
        ok(&brevis(d, &["verify", &brv, name]));
        ok(&brevis(d, &["decompress", "-q", &brv, "-o", &format!("{name}.out")]));
        assert_eq!(&std::fs::read(d.join(format!("{name}.out"))).unwrap(), bytes);
    }
    // A zero chunk size is refused, and nothing is written.
    let files = listing(d);
    let line = fails_with_one_line(&brevis(d, &["compress", "random", "-o", "z.brv", "--chunk-size", "0"]));
    assert!(line.contains("chunk"), "{line}");
    assert_eq!(listing(d), files);
    // Small chunks and one thread give the same archive as the library (with --no-preserve: the
    // input's mode and time are not recorded).
    ok(&brevis(d, &["compress", "-q", "--no-preserve", "random", "-o", "small.brv", "--chunk-size", "100", "-T", "1"]));
    let lib = brevis::compress(&cases[1].1, &brevis::Options::default().with_chunk_bytes(100).with_threads(1)).unwrap();
    assert_eq!(std::fs::read(d.join("small.brv")).unwrap(), lib);
    // An output directory that does not exist: an error, nothing created.
    let line = fails_with_one_line(&brevis(d, &["compress", "random", "-o", "no/such/dir/x.brv"]));
    assert!(!line.is_empty());
    assert!(!d.join("no").exists());
    no_temp_files(d);
}

#[test]
fn reference_archives_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rng = Rng(31);
    let base_w = data_for("BF16", 8192, &mut rng, false);
    // The fine-tune flips low mantissa bits of a third of the weights.
    let tuned_w: Vec<u8> =
        base_w.iter().enumerate().map(|(i, &b)| if i % 2 == 0 && rng.below(3) == 0 { b ^ 1 } else { b }).collect();
    let norm = words(4, 64, |_| 1.0f32.to_bits() as u64);
    let base = file(&[tensor("w", "BF16", &[64, 128], base_w), tensor("norm", "F32", &[64], norm.clone())], None);
    let tuned = file(&[tensor("w", "BF16", &[64, 128], tuned_w), tensor("norm", "F32", &[64], norm)], None);
    std::fs::write(d.join("base.safetensors"), &base).unwrap();
    std::fs::write(d.join("tuned.safetensors"), &tuned).unwrap();
    let mut other = base.clone();
    let n = other.len();
    other[n - 300] ^= 0x40;
    std::fs::write(d.join("other.safetensors"), &other).unwrap();

    ok(&brevis(d, &["compress", "-q", "--ref", "base.safetensors", "tuned.safetensors"]));
    let files = listing(d);
    // Without the reference, or with another one: one line, no output.
    let line = fails_with_one_line(&brevis(d, &["decompress", "tuned.safetensors.brv", "-o", "out"]));
    assert!(line.contains("reference") || line.contains("--ref"), "{line}");
    let line = fails_with_one_line(&brevis(
        d,
        &["decompress", "--ref", "other.safetensors", "tuned.safetensors.brv", "-o", "out"],
    ));
    assert!(!line.is_empty());
    let o = brevis(d, &["decompress", "--ref", "missing.safetensors", "tuned.safetensors.brv", "-o", "out"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(fails_with_one_line(&o).contains("missing.safetensors"));
    assert!(!brevis(d, &["verify", "tuned.safetensors.brv", "tuned.safetensors"]).status.success());
    assert_eq!(listing(d), files);
    no_temp_files(d);
    // With it.
    ok(&brevis(d, &["decompress", "-q", "--ref", "base.safetensors", "tuned.safetensors.brv", "-o", "out"]));
    assert_eq!(std::fs::read(d.join("out")).unwrap(), tuned);
    let o = brevis(d, &["verify", "--ref", "base.safetensors", "tuned.safetensors.brv", "tuned.safetensors"]);
    ok(&o);
    assert!(stdout(&o).contains("OK"));
    // The reference may be an archive of the base.
    ok(&brevis(d, &["compress", "-q", "base.safetensors"]));
    ok(&brevis(d, &["decompress", "-q", "-f", "--ref", "base.safetensors.brv", "tuned.safetensors.brv", "-o", "out"]));
    assert_eq!(std::fs::read(d.join("out")).unwrap(), tuned);
    // inspect works without the reference.
    let o = brevis(d, &["inspect", "tuned.safetensors.brv"]);
    ok(&o);
    assert!(stdout(&o).contains("norm"));
    // Timing decodes, which needs the reference: refused, with the reason.
    let o = brevis(d, &["inspect", "--time", "tuned.safetensors.brv"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("coded against a reference"), "{o:?}");
    no_temp_files(d);
}

/// Runs brevis with `input` on stdin (a pipe), stdout and stderr captured.
fn brevis_piped(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot run the brevis binary");
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    // A writer thread: brevis reads all of stdin before it writes, but a pipe holds 64 KiB.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// Runs brevis with `file` as stdin (a regular file, read by position).
fn brevis_from_file(dir: &Path, args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .current_dir(dir)
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .expect("cannot run the brevis binary")
}

fn fixture_bytes() -> Vec<u8> {
    std::fs::read(support::tools::fixture()).unwrap()
}

#[test]
fn stdin_to_stdout_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = fixture_bytes();
    // cat x | brevis compress - -c | brevis -d - -c
    let c = brevis_piped(d, &["compress", "-", "-c"], &x);
    ok(&c);
    assert!(c.stdout.len() < x.len(), "the archive ({}) is not smaller than the input", c.stdout.len());
    assert_eq!(brevis::decompress(&c.stdout).unwrap(), x);
    let back = brevis_piped(d, &["-d", "-", "-c"], &c.stdout);
    ok(&back);
    assert_eq!(back.stdout, x, "the round trip through pipes changed the bytes");
    // Stdin defaults to stdout; a stdin that is a regular file is read in place; -dc and d.
    std::fs::write(d.join("x.brv"), &c.stdout).unwrap();
    let c2 = brevis_from_file(d, &["compress", "-q", "--no-preserve"], &support::tools::fixture());
    ok(&c2);
    assert!(c2.stderr.is_empty(), "-q printed: {}", stderr(&c2));
    assert_eq!(c2.stdout, c.stdout, "stdin as a file and as a pipe give different archives");
    assert_eq!(brevis_from_file(d, &["-dc"], &d.join("x.brv")).stdout, x);
    assert_eq!(brevis(d, &["d", "-c", "x.brv"]).stdout, x);
    // Stdin to a named output; the output of stdin is never named after it.
    ok(&brevis_piped(d, &["compress", "-q", "-", "-o", "named.brv"], &x));
    ok(&brevis(d, &["-d", "-q", "named.brv"]));
    assert_eq!(std::fs::read(d.join("named")).unwrap(), x);
    assert_eq!(listing(d), ["named", "named.brv", "x.brv"]);
}

#[test]
fn stdout_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = fixture_bytes();
    let opts = brevis::Options::default().with_chunk_bytes(16 << 10);
    let mut archive = brevis::compress(&x, &opts).unwrap();
    // A flipped byte in a late chunk: streamed, the first chunks would be out before the error
    // (the library's writer path shows it), but stdout gets nothing.
    let at = archive.len() * 3 / 4;
    archive[at] ^= 0x55;
    std::fs::write(d.join("bad.brv"), &archive).unwrap();
    let mut streamed = Vec::new();
    let dopts = brevis::DecodeOptions::default().with_threads(1).with_memory_limit(1 << 20);
    let r = brevis::decompress_file(&std::fs::File::open(d.join("bad.brv")).unwrap(), &mut streamed, &dopts);
    assert!(r.is_err() && !streamed.is_empty(), "the damage is not in a late chunk ({} bytes out)", streamed.len());
    std::fs::remove_file(d.join("bad.brv")).unwrap();
    let o = brevis_piped(d, &["-d", "-", "-c", "-T", "1", "--memory-limit", "1M"], &archive);
    fails_with_one_line(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "{} bytes written to stdout by a failing decompress", o.stdout.len());
    // Not an archive at all.
    let o = brevis_piped(d, &["decompress", "-c", "-"], b"not an archive");
    assert!(fails_with_one_line(&o).contains("stdin"), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    assert!(listing(d).is_empty(), "files left: {:?}", listing(d));
}

#[test]
fn several_inputs_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = fixture_bytes();
    let m = model();
    std::fs::write(d.join("a.safetensors"), &x).unwrap();
    std::fs::write(d.join("b.safetensors"), &m).unwrap();
    std::fs::write(d.join("c.txt"), b"hello hello hello").unwrap();
    ok(&brevis(d, &["compress", "-q", "a.safetensors", "b.safetensors", "c.txt"]));
    assert_eq!(
        listing(d),
        ["a.safetensors", "a.safetensors.brv", "b.safetensors", "b.safetensors.brv", "c.txt", "c.txt.brv"]
    );
    for n in ["a.safetensors", "b.safetensors", "c.txt"] {
        std::fs::rename(d.join(n), d.join(format!("{n}.orig"))).unwrap();
    }
    ok(&brevis(d, &["-d", "-q", "a.safetensors.brv", "b.safetensors.brv", "c.txt.brv"]));
    assert_eq!(std::fs::read(d.join("a.safetensors")).unwrap(), x);
    assert_eq!(std::fs::read(d.join("b.safetensors")).unwrap(), m);
    assert_eq!(std::fs::read(d.join("c.txt")).unwrap(), b"hello hello hello");
    // Decompressing several to stdout concatenates them (as cat would).
    let o = brevis(d, &["-dc", "c.txt.brv", "c.txt.brv"]);
    ok(&o);
    assert_eq!(o.stdout, b"hello hello hellohello hello hello");

    // A failing input in the middle: reported by name, exit 1, the others done.
    let o = brevis(d, &["compress", "-q", "-f", "a.safetensors", "missing.bin", "c.txt"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(fails_with_one_line(&o).contains("missing.bin"));
    assert_eq!(brevis::decompress(&std::fs::read(d.join("c.txt.brv")).unwrap()).unwrap(), b"hello hello hello");
    // Existing outputs without -f: each refused, the new one written.
    std::fs::remove_file(d.join("c.txt.brv")).unwrap();
    let o = brevis(d, &["compress", "-q", "a.safetensors", "b.safetensors", "c.txt"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().filter(|l| l.contains("already exists") && l.contains("-f")).count(), 2, "{err}");
    assert!(d.join("c.txt.brv").exists());
    no_temp_files(d);
}

#[test]
fn usage_errors_exit_2_and_do_nothing() {
    let (dir, _) = setup();
    let d = dir.path();
    std::fs::create_dir(d.join("folder")).unwrap();
    let before = listing(d);
    for args in [
        vec!["compress", "model.safetensors", "model.safetensors", "-o", "x.brv"],
        vec!["compress", "-c", "model.safetensors", "model.safetensors"],
        vec!["compress", "-r", "-c", "folder"],
        vec!["compress", "-", "-"],
        vec!["compress", "model.safetensors", "--chunk-size", "0"],
        vec!["compress", "model.safetensors", "--budget", "0"],
        vec!["compress", "--no-such-flag", "model.safetensors"],
        vec!["frobnicate"],
    ] {
        let o = brevis(d, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty(), "{args:?}");
        assert_eq!(listing(d), before, "{args:?} wrote files");
    }
    // A folder without -r is an input error (exit 1) naming it.
    let o = brevis(d, &["compress", "folder"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(fails_with_one_line(&o).contains("folder"));
    // The exit codes are documented in --help.
    for args in [vec!["--help"], vec!["compress", "--help"], vec!["decompress", "--help"]] {
        let help = stdout(&brevis(d, &args));
        assert!(help.contains("Exit codes: 0") && help.contains("2 a usage error"), "{args:?}: {help}");
    }
}

#[test]
fn rm_removes_inputs_only_after_a_verified_success() {
    let (dir, m) = setup();
    let d = dir.path();
    std::fs::write(d.join("other.bin"), b"some other bytes").unwrap();
    // -k is the default and may be given.
    ok(&brevis(d, &["compress", "-q", "-k", "other.bin"]));
    assert!(d.join("other.bin").exists());
    std::fs::remove_file(d.join("other.bin.brv")).unwrap();
    ok(&brevis(d, &["compress", "-q", "--rm", "model.safetensors", "other.bin"]));
    assert_eq!(listing(d), ["model.safetensors.brv", "other.bin.brv"]);
    ok(&brevis(d, &["-d", "-q", "--rm", "model.safetensors.brv"]));
    assert_eq!(listing(d), ["model.safetensors", "other.bin.brv"]);
    assert_eq!(std::fs::read(d.join("model.safetensors")).unwrap(), m);
    // The last of --rm and -k wins.
    ok(&brevis(d, &["compress", "-q", "--rm", "-k", "model.safetensors"]));
    assert!(d.join("model.safetensors").exists());

    // Failures keep the input: an output that exists (no -f) ...
    let o = brevis(d, &["compress", "--rm", "model.safetensors"]);
    assert!(fails_with_one_line(&o).contains("exists"));
    assert_eq!(std::fs::read(d.join("model.safetensors")).unwrap(), m);
    // ... a damaged archive (no output either) ...
    let mut bad = std::fs::read(d.join("model.safetensors.brv")).unwrap();
    let at = bad.len() / 2;
    bad[at] ^= 1;
    std::fs::write(d.join("bad.brv"), &bad).unwrap();
    let o = brevis(d, &["-d", "--rm", "bad.brv"]);
    fails_with_one_line(&o);
    assert_eq!(std::fs::read(d.join("bad.brv")).unwrap(), bad);
    assert!(!d.join("bad").exists());
    // ... and with -c nothing is removed (as zstd).
    let o = brevis(d, &["-d", "-c", "--rm", "other.bin.brv"]);
    ok(&o);
    assert_eq!(o.stdout, b"some other bytes");
    assert!(d.join("other.bin.brv").exists());
    no_temp_files(d);
}

#[test]
fn progress_line_only_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("x.safetensors"), fixture_bytes()).unwrap();
    // Stderr is a pipe here: no progress line even when it is due at once.
    let o = Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(["compress", "x.safetensors"])
        .env("BREVIS_PROGRESS_DELAY_MS", "0")
        .current_dir(d)
        .output()
        .unwrap();
    ok(&o);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(!err.contains('\r') && !err.contains('\x1b') && !err.contains("MiB"), "{err:?}");
    // On a terminal (`script` gives the command one) the line is drawn, and -q silences it.
    if !support::tools::have("script", &["--version"]) {
        return support::skip("no `script` command to run brevis on a terminal");
    }
    let exe = env!("CARGO_BIN_EXE_brevis");
    let on_tty = |args: &str| {
        let cmd = format!("BREVIS_PROGRESS_DELAY_MS=0 {exe} {args}");
        let o = Command::new("script").args(["-qec", &cmd, "/dev/null"]).current_dir(d).output().unwrap();
        ok(&o);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let shown = on_tty("compress -f x.safetensors");
    assert!(shown.contains("x.safetensors [") && shown.contains("MiB"), "{shown:?}");
    let quiet = on_tty("compress -q -f x.safetensors");
    assert!(quiet.trim().is_empty(), "{quiet:?}");
    // Binary output to a terminal is refused, nothing written, unless -f.
    let cmd = format!("{exe} compress -c x.safetensors");
    let o = Command::new("script").args(["-qec", &cmd, "/dev/null"]).current_dir(d).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("terminal") && !o.status.success(), "{text:?}");
}

/// A model folder as transformers writes a sharded checkpoint: the fixture's tensors in 4
/// shards with model.safetensors.index.json, config and tokenizer files, a nested folder, an
/// empty folder and a symbolic link to a file. Returns the file names (relative) and bytes
/// that a restored copy must hold.
fn sharded_folder(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let x = fixture_bytes();
    let st = safetensors::SafeTensors::deserialize(&x).unwrap();
    let mut tensors = st.tensors();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(tensors.len() >= 4, "the fixture has {} tensors", tensors.len());
    let mut files = Vec::new();
    let mut weight_map = serde_json::Map::new();
    let mut total = 0usize;
    let per = tensors.len().div_ceil(4);
    for (i, part) in tensors.chunks(per).enumerate() {
        let name = format!("model-{:05}-of-00004.safetensors", i + 1);
        let meta = Some([("format".to_string(), "pt".to_string())].into_iter().collect());
        let bytes = safetensors::serialize(part.iter().map(|(n, v)| (n.clone(), v.clone())), &meta).unwrap();
        for (n, v) in part {
            weight_map.insert(n.clone(), name.clone().into());
            total += v.data().len();
        }
        files.push((name, bytes));
    }
    assert_eq!(files.len(), 4);
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    files.push(("model.safetensors.index.json".into(), serde_json::to_vec_pretty(&index).unwrap()));
    files.push(("config.json".into(), br#"{"architectures": ["SileroVAD"], "sampling_rate": 16000}"#.to_vec()));
    files.push(("tokenizer.json".into(), Rng(3).bytes(5000)));
    files.push(("sub/notes.txt".into(), b"a nested file\n".to_vec()));
    files.push(("sub/deeper/empty.bin".into(), Vec::new()));
    for (name, bytes) in &files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    std::fs::create_dir(dir.join("empty")).unwrap();
    std::os::unix::fs::symlink("config.json", dir.join("link.json")).unwrap();
    files.push(("link.json".into(), files[5].1.clone()));
    files.sort();
    files
}

/// A temporary folder holding `model/`, a [`sharded_folder`]; and that folder's files.
fn model_folder() -> (tempfile::TempDir, Vec<(String, Vec<u8>)>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("model")).unwrap();
    let expected = sharded_folder(&dir.path().join("model"));
    (dir, expected)
}

/// The regular files under `dir` (relative names, sorted) with their bytes, and its folders.
fn tree(dir: &Path) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            let t = std::fs::symlink_metadata(&p).unwrap().file_type();
            assert!(!t.is_symlink(), "{rel} is a symbolic link in an output tree");
            if t.is_dir() {
                dirs.push(rel);
                todo.push(p);
            } else {
                files.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    files.sort();
    dirs.sort();
    (files, dirs)
}

#[test]
fn sharded_folder_round_trips_through_r() {
    let (dir, expected) = model_folder();
    let d = dir.path();
    ok(&brevis(d, &["compress", "-q", "-r", "model", "-o", "archives"]));
    let (archives, dirs) = tree(&d.join("archives"));
    let names: Vec<&str> = archives.iter().map(|(n, _)| n.as_str()).collect();
    let want: Vec<String> = expected.iter().map(|(n, _)| format!("{n}.brv")).collect();
    assert_eq!(names, want);
    assert_eq!(dirs, ["empty", "sub", "sub/deeper"]);
    for ((name, archive), (_, original)) in archives.iter().zip(&expected) {
        assert_eq!(&brevis::decompress(archive).unwrap(), original, "{name}");
    }
    let shards: usize = archives.iter().filter(|(n, _)| n.ends_with(".safetensors.brv")).map(|(_, a)| a.len()).sum();
    let originals: usize = expected.iter().filter(|(n, _)| n.ends_with(".safetensors")).map(|(_, a)| a.len()).sum();
    assert!(shards < originals, "shards: {shards} bytes of archives for {originals}");

    ok(&brevis(d, &["decompress", "-q", "-r", "archives", "-o", "restored"]));
    let (restored, dirs) = tree(&d.join("restored"));
    assert_eq!(restored, expected, "the restored folder differs");
    assert_eq!(dirs, ["empty", "sub", "sub/deeper"]);
    // The index names files that are all there, unchanged.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("restored/model.safetensors.index.json")).unwrap()).unwrap();
    for shard in index["weight_map"].as_object().unwrap().values() {
        assert!(d.join("restored").join(shard.as_str().unwrap()).is_file(), "{shard}");
    }
    // Existing outputs are refused without -f (every file reported), replaced with it.
    let o = brevis(d, &["decompress", "-r", "archives", "-o", "restored"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().filter(|l| l.contains("already exists")).count(), expected.len());
    ok(&brevis(d, &["decompress", "-q", "-f", "-r", "archives", "-o", "restored"]));
    assert_eq!(tree(&d.join("restored")).0, expected);
    no_temp_files(&d.join("restored"));
    no_temp_files(&d.join("archives"));
}

#[test]
fn folders_in_place_and_what_is_not_copied() {
    let (dir, expected) = model_folder();
    let (d, model) = (dir.path(), dir.path().join("model"));
    // In place: each archive next to its file; again: the archives are not compressed (and
    // the existing ones are refused without -f).
    ok(&brevis(d, &["compress", "-q", "-r", "model"]));
    let o = brevis(d, &["compress", "-q", "-r", "model"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!stderr(&o).contains(".brv.brv") && !model.join("config.json.brv.brv").exists(), "{}", stderr(&o));
    // --rm in place, then restore in place.
    ok(&brevis(d, &["compress", "-q", "-f", "--rm", "-r", "model"]));
    let names: Vec<String> = tree(&model).0.into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().all(|n| n.ends_with(".brv")), "{names:?}");
    ok(&brevis(d, &["-d", "-q", "--rm", "-r", "model"]));
    assert_eq!(tree(&model).0, expected);

    // A link to a folder is not followed and a stray file in an archive folder is not
    // restored: both reported (exit 1), everything else done.
    std::os::unix::fs::symlink(".", model.join("loop")).unwrap();
    let o = brevis(d, &["compress", "-q", "-r", "model", "-o", "archives"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(fails_with_one_line(&o).contains("loop"));
    assert_eq!(tree(&d.join("archives")).0.len(), expected.len());
    std::fs::write(d.join("archives/stray.txt"), b"not an archive").unwrap();
    let o = brevis(d, &["-d", "-q", "-r", "archives", "-o", "restored"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(fails_with_one_line(&o).contains("stray.txt"));
    assert_eq!(tree(&d.join("restored")).0, expected);
}
