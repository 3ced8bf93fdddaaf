//! The original file's mode and modification time: recorded in the archive (format
//! version 3's record 1) only when asked, restored by `brevis decompress`, given by `brevis
//! compress` to the archive as zstd does, all under the umask; `--no-preserve`; old archives;
//! and every CLI error naming its file (directories as input or output, a write error).
#![cfg(unix)]

mod support;

use brevis::FileMeta;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::st::*;

/// 2020-09-13 12:26:40.123456789 UTC.
const THEN: (i64, u32) = (1_600_000_000, 123_456_789);

fn then() -> SystemTime {
    UNIX_EPOCH + Duration::new(THEN.0 as u64, THEN.1)
}

fn model() -> Vec<u8> {
    let mut rng = Rng(17);
    file(
        &[
            tensor("w", "BF16", &[32, 64], data_for("BF16", 32 * 64, &mut rng, true)),
            tensor("b", "F32", &[64], data_for("F32", 64, &mut rng, false)),
        ],
        None,
    )
}

/// Runs the brevis binary in `dir` under `umask` (octal, as the shell's `umask` takes it).
fn brevis(dir: &Path, umask: &str, args: &[&str]) -> Output {
    brevis_after(dir, &format!("umask {umask}"), args)
}

/// Runs the brevis binary in `dir` from a shell that first runs `setup`.
fn brevis_after(dir: &Path, setup: &str, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{setup} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cannot run the brevis binary")
}

#[track_caller]
fn ok(o: &Output) {
    assert!(o.status.success(), "brevis failed: {}", String::from_utf8_lossy(&o.stderr));
}

/// Non-zero exit with one line on stderr; returns it.
#[track_caller]
fn fails(o: &Output) -> String {
    assert!(!o.status.success(), "brevis succeeded");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr: {err:?}");
    lines[0].to_string()
}

fn write_with(path: &Path, bytes: &[u8], mode: u32, mtime: SystemTime) {
    std::fs::write(path, bytes).unwrap();
    set_attrs(path, mode, mtime);
}

fn set_attrs(path: &Path, mode: u32, mtime: SystemTime) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
}

/// Permission bits and modification time (whole seconds) of `path`.
fn attrs(path: &Path) -> (u32, i64) {
    let m = FileMeta::of(&std::fs::metadata(path).unwrap());
    (m.mode, m.mtime)
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn recorded(archive: &Path) -> Option<FileMeta> {
    brevis::Archive::open(&std::fs::read(archive).unwrap()).unwrap().file_meta()
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

#[test]
fn the_library_records_metadata_only_when_given() {
    let m = model();
    let plain = brevis::compress(&m, &brevis::Options::default()).unwrap();
    assert_eq!(brevis::Archive::open(&plain).unwrap().file_meta(), None);
    for meta in [
        FileMeta { mode: 0o640, mtime: THEN.0, mtime_nanos: THEN.1 },
        FileMeta { mode: 0o4755, mtime: -86_401, mtime_nanos: 999_999_999 },
        FileMeta { mode: 0, mtime: i64::MIN, mtime_nanos: 0 },
        FileMeta { mode: 0o7777, mtime: i64::MAX, mtime_nanos: 1 },
    ] {
        let opts = brevis::Options::default().with_file_meta(Some(meta));
        let a = brevis::compress(&m, &opts).unwrap();
        assert_eq!(a, brevis::compress(&m, &opts).unwrap(), "deterministic");
        assert_ne!(a, plain);
        let archive = brevis::Archive::open(&a).unwrap();
        assert_eq!(archive.file_meta(), Some(meta));
        assert_eq!(brevis::internals::index(&archive).version, brevis::internals::container::VERSION);
        assert_eq!(brevis::decompress(&a).unwrap(), m);
        // The file path makes the same archive.
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::write(&input, &m).unwrap();
        let mut out = tempfile::tempfile().unwrap();
        let len = brevis::compress_file(&std::fs::File::open(&input).unwrap(), &mut out, &opts).unwrap();
        let mut back = Vec::new();
        std::io::Seek::rewind(&mut out).unwrap();
        std::io::Read::read_to_end(&mut out, &mut back).unwrap();
        assert_eq!(len as usize, a.len());
        assert!(back == a, "compress_file made another archive");
    }
}

#[test]
fn old_archives_decode_and_record_nothing() {
    let root = support::tools::root().join("tests/golden");
    for v in ["v1", "v2"] {
        for name in ["ops.brv", "silero.brv", "ref.brv"] {
            let bytes = std::fs::read(root.join(v).join(name)).unwrap();
            let a = brevis::Archive::open(&bytes).unwrap();
            assert_eq!(a.file_meta(), None, "{v}/{name}");
            assert!(brevis::internals::index(&a).version < 3);
            if !a.needs_reference() {
                assert_eq!(a.decompress(&Default::default()).unwrap().len() as u64, a.original_size());
            }
        }
    }
    // Through the CLI: the output takes the archive file's mode and time.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let old = std::fs::read(root.join("v2/ops.brv")).unwrap();
    write_with(&d.join("ops.brv"), &old, 0o640, then());
    ok(&brevis(d, "022", &["decompress", "-q", "ops.brv", "-o", "ops.out"]));
    assert_eq!(attrs(&d.join("ops.out")), (0o640, THEN.0));
}

/// The index's meta block of `archive` edited by `f`, the archive reassembled around it.
fn with_meta(archive: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    use brevis::internals::container::{FOOTER_LEN, META_DICT};
    let foot = archive.len() - FOOTER_LEN;
    let word = |i: usize| u64::from_le_bytes(archive[foot + 8 * i..foot + 8 * i + 8].try_into().unwrap());
    let meta_start = foot - word(0) as usize;
    let mut raw = zstd::bulk::Decompressor::with_dictionary(META_DICT)
        .unwrap()
        .decompress(&archive[meta_start..foot], word(1) as usize)
        .unwrap();
    f(&mut raw);
    let frame = zstd::bulk::Compressor::with_dictionary(3, META_DICT).unwrap().compress(&raw).unwrap();
    let mut out = archive[..meta_start].to_vec();
    out.extend_from_slice(&frame);
    out.extend_from_slice(&(frame.len() as u64).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&frame).to_le_bytes());
    out.extend_from_slice(&brevis::internals::container::END_MAGIC);
    out
}

#[test]
fn records_are_extensible_and_checked() {
    let m = b"any bytes".to_vec();
    let plain = brevis::compress(&m, &Default::default()).unwrap();
    // A record count of 0 ends a version 3 index without metadata.
    let replace_count = |records: &'static [u8]| {
        move |raw: &mut Vec<u8>| {
            assert_eq!(raw.pop(), Some(0), "the record count ends the index");
            raw.extend_from_slice(records);
        }
    };
    // The writer's form, as docs/FORMAT.md gives it: after the entries, one record, tag 1.
    let m0640 = FileMeta { mode: 0o640, mtime: THEN.0, mtime_nanos: THEN.1 };
    let with = brevis::compress(&m, &brevis::Options::default().with_file_meta(Some(m0640))).unwrap();
    let mut tail = Vec::new();
    with_meta(&with, |raw| tail = raw[raw.len() - 14..].to_vec());
    // Record count 1, tag 1, an 11-byte body.
    assert_eq!(tail, [1, 1, 0x0b, 0xa0, 0x03, 0x80, 0xc0, 0xf0, 0xf5, 0x0b, 0x95, 0x9a, 0xef, 0x3a]);
    // Tag 1: mode 0o640 (varint 0xa0 0x03), mtime 5 (zigzag 10), nanos 7.
    let meta = Some(FileMeta { mode: 0o640, mtime: 5, mtime_nanos: 7 });
    for (records, want) in [
        (&[1, 1, 4, 0xa0, 0x03, 10, 7][..], meta),
        // An unknown tag is skipped; bytes after a known record's fields too.
        (&[3, 9, 2, 0xff, 0xff, 1, 6, 0xa0, 0x03, 10, 7, 42, 43, 2, 0][..], meta),
        (&[1, 77, 0][..], None),
    ] {
        let a = with_meta(&plain, replace_count(records));
        let archive = brevis::Archive::open(&a).unwrap();
        assert_eq!(archive.file_meta(), want, "{records:?}");
        assert_eq!(brevis::decompress(&a).unwrap(), m);
    }
    for (records, what) in [
        (&[2, 1, 4, 0xa0, 0x03, 10, 7, 1, 4, 0xa0, 0x03, 10, 7][..], "twice"),
        (&[1, 1, 4, 0x80, 0x20, 10, 7][..], "mode"),
        (&[1, 1, 8, 0xa0, 0x03, 10, 0x80, 0x94, 0xeb, 0xdc, 0x03][..], "nanoseconds"),
        (&[1, 1, 2, 0xa0, 0x03][..], "end of data"),
        (&[1, 1, 9, 0xa0][..], "out of range"),
        (&[0, 0][..], "trailing"),
        (&[][..], "end of data"),
    ] {
        let a = with_meta(&plain, replace_count(records));
        let err = brevis::Archive::open(&a).err().unwrap_or_else(|| panic!("{records:?} was accepted"));
        assert!(matches!(err, brevis::Error::Corrupt(_)), "{records:?}: {err}");
        assert!(err.to_string().contains(what), "{records:?}: {err}");
    }
}

#[test]
fn outputs_keep_modes_under_the_umask_and_times() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = model();
    for umask in [0o022u32, 0o077] {
        for mode in [0o644u32, 0o640] {
            let u = format!("{umask:03o}");
            let want = mode & !umask;
            let (input, archive, back) = (format!("m{mode:o}"), format!("m{mode:o}-{u}.brv"), format!("r{mode:o}-{u}"));
            write_with(&d.join(&input), &m, mode, then());
            ok(&brevis(d, &u, &["compress", "-q", &input, "-o", &archive]));
            assert_eq!(attrs(&d.join(&archive)), (want, THEN.0), "archive, mode {mode:o} umask {u}");
            assert_eq!(recorded(&d.join(&archive)), Some(FileMeta { mode, mtime: THEN.0, mtime_nanos: THEN.1 }));
            // The archive copied around: another mode, touched; the original's come back.
            set_attrs(&d.join(&archive), 0o604, SystemTime::now());
            ok(&brevis(d, &u, &["decompress", "-q", &archive, "-o", &back]));
            assert_eq!(attrs(&d.join(&back)), (want, THEN.0), "restored, mode {mode:o} umask {u}");
            assert!(std::fs::read(d.join(&back)).unwrap() == m, "restored bytes differ");
            // The input is untouched.
            assert_eq!(attrs(&d.join(&input)), (mode, THEN.0));
        }
    }
    assert!(!listing(d).iter().any(|n| n.starts_with(".brevis-")), "{:?}", listing(d));
}

#[test]
fn no_preserve_makes_plain_files_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = model();
    write_with(&d.join("m"), &m, 0o640, then());
    let t0 = now_secs();
    ok(&brevis(d, "022", &["compress", "-q", "--no-preserve", "m", "-o", "plain.brv"]));
    let (mode, mtime) = attrs(&d.join("plain.brv"));
    assert_eq!(mode, 0o644);
    assert!(mtime >= t0 - 1, "{mtime} < {t0}");
    assert_eq!(recorded(&d.join("plain.brv")), None);
    // The library's archive of the same bytes.
    let lib = brevis::compress(&m, &Default::default()).unwrap();
    assert!(std::fs::read(d.join("plain.brv")).unwrap() == lib, "not the library's archive");
    // Without a record, decompress gives the archive file's mode and time (as zstd).
    set_attrs(&d.join("plain.brv"), 0o600, then());
    ok(&brevis(d, "022", &["decompress", "-q", "plain.brv", "-o", "from-plain"]));
    assert_eq!(attrs(&d.join("from-plain")), (0o600, THEN.0));
    // With a record, --no-preserve ignores it: 0666 under the umask, now.
    ok(&brevis(d, "077", &["compress", "-q", "m", "-o", "rec.brv"]));
    assert_eq!(attrs(&d.join("rec.brv")), (0o600, THEN.0));
    let t0 = now_secs();
    ok(&brevis(d, "027", &["decompress", "-q", "--no-preserve", "rec.brv", "-o", "fresh"]));
    let (mode, mtime) = attrs(&d.join("fresh"));
    assert_eq!(mode, 0o640);
    assert!(mtime >= t0 - 1, "{mtime} < {t0}");
    assert!(std::fs::read(d.join("fresh")).unwrap() == m, "restored bytes differ");
}

#[test]
fn inspect_shows_the_recorded_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_with(&d.join("m"), &model(), 0o640, then());
    ok(&brevis(d, "022", &["compress", "-q", "m"]));
    let o = brevis(d, "022", &["inspect", "m.brv"]);
    ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("mode 0640, modified 1600000000.123456789"), "{out}");
}

/// Every way of naming a directory as the output fails, naming it, and creates nothing.
#[test]
fn a_directory_as_output_is_an_error_that_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("m"), model()).unwrap();
    ok(&brevis(d, "022", &["compress", "-q", "m"]));
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::create_dir(d.join("sub.brv")).unwrap();
    let before = listing(d);
    for args in [
        vec!["compress", "m", "-o", "sub"],
        vec!["compress", "m", "-o", "sub/"],
        vec!["compress", "-f", "m", "-o", "sub"],
        vec!["compress", "m", "-o", "new/"],
        vec!["decompress", "m.brv", "-o", "sub"],
        vec!["decompress", "m.brv", "-o", "sub/"],
        vec!["decompress", "-f", "m.brv", "-o", "sub"],
        vec!["decompress", "-f", "m.brv", "-o", "new/"],
        vec!["prior", "learn", "m", "-o", "sub"],
    ] {
        let line = fails(&brevis(d, "022", &args));
        let out = args[args.len() - 1];
        assert!(line.contains(out) && line.contains("directory"), "{args:?}: {line}");
        assert!(!line.contains("already exists"), "{args:?}: {line}");
        assert_eq!(listing(d), before, "{args:?}");
        assert!(listing(&d.join("sub")).is_empty(), "{args:?}");
    }
}

#[test]
fn a_directory_as_input_is_an_error_that_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::create_dir(d.join("sub.brv")).unwrap();
    std::fs::write(d.join("m"), model()).unwrap();
    ok(&brevis(d, "022", &["compress", "-q", "m"]));
    let before = listing(d);
    for (args, path) in [
        (vec!["compress", "sub", "-o", "x.brv"], "sub"),
        (vec!["compress", "sub"], "sub"),
        (vec!["decompress", "sub.brv", "-o", "x"], "sub.brv"),
        (vec!["decompress", "sub.brv"], "sub.brv"),
        (vec!["inspect", "sub.brv"], "sub.brv"),
        (vec!["verify", "sub.brv"], "sub.brv"),
        (vec!["verify", "m.brv", "sub"], "sub"),
        (vec!["compress", "m", "-o", "y.brv", "--ref", "sub"], "sub"),
        (vec!["prior", "learn", "sub", "-o", "p.json"], "sub"),
    ] {
        let line = fails(&brevis(d, "022", &args));
        assert!(line.contains(&format!("{path} is a directory")), "{args:?}: {line}");
        assert_eq!(listing(d), before, "{args:?}");
    }
}

/// A write that fails (here: past the file-size limit, EFBIG, as a full disk gives ENOSPC)
/// names the output, and leaves nothing behind.
#[test]
fn write_errors_name_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rng = Rng(3);
    std::fs::write(d.join("noise"), rng.bytes(200_000)).unwrap();
    ok(&brevis(d, "022", &["compress", "-q", "noise"]));
    let before = listing(d);
    for (args, out) in [
        (vec!["compress", "noise", "-o", "small.brv"], "small.brv"),
        (vec!["decompress", "noise.brv", "-o", "small.out"], "small.out"),
    ] {
        // 100 blocks of 512 bytes (or 1024, by the shell): less than either output.
        let o = brevis_after(d, "ulimit -f 100 && trap '' XFSZ", &args);
        let line = fails(&o);
        assert!(line.starts_with(&format!("brevis: cannot write {out}: ")), "{args:?}: {line}");
        assert_eq!(listing(d), before, "{args:?}");
    }
}

/// Errors of the archive name it; errors of the reference name it too.
#[test]
fn library_errors_name_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("m"), model()).unwrap();
    ok(&brevis(d, "022", &["compress", "-q", "m"]));
    let mut bad = std::fs::read(d.join("m.brv")).unwrap();
    let n = bad.len();
    bad[n - 40] ^= 1;
    std::fs::write(d.join("bad.brv"), &bad).unwrap();
    std::fs::write(d.join("bad-ref.brv"), &bad).unwrap();
    for (args, path) in [
        (vec!["decompress", "bad.brv", "-o", "x"], "bad.brv"),
        (vec!["inspect", "bad.brv"], "bad.brv"),
        (vec!["verify", "bad.brv"], "bad.brv"),
        (vec!["decompress", "m.brv", "-o", "y", "--ref", "bad-ref.brv"], "bad-ref.brv"),
        (vec!["compress", "m", "-o", "z.brv", "--ref", "bad-ref.brv"], "bad-ref.brv"),
    ] {
        let line = fails(&brevis(d, "022", &args));
        assert!(line.contains(path), "{args:?}: {line}");
    }
    assert!(!d.join("x").exists() && !d.join("y").exists() && !d.join("z.brv").exists());
}
