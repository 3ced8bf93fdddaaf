//! A real archive, damaged: truncated at 100+ points and with 300+ single-bit flips, `brevis
//! decompress` must exit non-zero with one clear line, never panic, and leave no output file.
//! The checksums cover the decoded bytes: a flip in a bit that no decoder reads (an unused bit of
//! a zstd frame) gives back the original file, which is the one other acceptable outcome, and
//! must stay rare.

use std::process::Command;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
}

#[test]
fn truncations_and_bit_flips_fail_cleanly() {
    let bin = env!("CARGO_BIN_EXE_brevis");
    let dir = tempfile::tempdir().unwrap();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/silero_vad_16k.safetensors");
    // A copy with a fixed modification time, which the archive records: the same archive, so
    // the same damaged bytes, on every checkout.
    let input = dir.path().join("in.st");
    std::fs::copy(fixture, &input).unwrap();
    let when = std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_789);
    std::fs::File::options().write(true).open(&input).unwrap().set_modified(when).unwrap();
    let original = std::fs::read(&input).unwrap();
    let archive_path = dir.path().join("a.brv");
    let st = Command::new(bin).args(["compress", "-q"]).arg(&input).arg("-o").arg(&archive_path).status().unwrap();
    assert!(st.success());
    let archive = std::fs::read(&archive_path).unwrap();
    let n = archive.len();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    // 120 truncations: every byte near both ends, the rest evenly spaced.
    let mut cuts: Vec<usize> = (0..20).chain(n - 40..n).collect();
    cuts.extend((1..=60).map(|i| i * n / 61));
    for c in cuts {
        cases.push((format!("truncated to {c}"), archive[..c].to_vec()));
    }
    // 320 single-bit flips: the first and last 64 bytes, and random positions.
    let mut rng = Lcg(99);
    for k in 0..320 {
        let pos = match k {
            0..=63 => k,
            64..=127 => n - 128 + k,
            _ => rng.next() as usize % n,
        };
        let mut d = archive.clone();
        d[pos] ^= 1 << (rng.next() % 8);
        cases.push((format!("bit flip at byte {pos}"), d));
    }
    assert!(cases.len() >= 420);
    let damaged = dir.path().join("damaged.brv");
    let out = dir.path().join("out.st");
    let mut unread = Vec::new();
    for (what, bytes) in &cases {
        std::fs::write(&damaged, bytes).unwrap();
        let o = Command::new(bin).arg("decompress").arg(&damaged).arg("-o").arg(&out).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        if o.status.success() && what.starts_with("bit flip") {
            // Only the original file itself is acceptable from a damaged archive.
            assert!(std::fs::read(&out).unwrap() == original, "{what}: decoded to other bytes");
            std::fs::remove_file(&out).unwrap();
            unread.push(what.clone());
            continue;
        }
        assert_eq!(o.status.code(), Some(1), "{what}: exit {:?}, stderr {err}", o.status);
        assert!(
            !err.contains("panicked") && err.starts_with("brevis: ") && err.trim_end().lines().count() == 1,
            "{what}: {err}"
        );
        assert!(!out.exists(), "{what}: an output file was left");
    }
    assert!(unread.len() <= 4, "{} flips not detected: {unread:?}", unread.len());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with(".brevis-")), "temporary files left: {names:?}");
}
