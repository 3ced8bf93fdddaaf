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
    let lib =
        brevis::compress(&cases[1].1, &brevis::Options { chunk_bytes: 100, threads: 1, ..Default::default() }).unwrap();
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
    no_temp_files(d);
}
