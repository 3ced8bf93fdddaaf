//! Round trips and sizes on the development corpus (`$BREVIS_CORPUS`, default
//! `~/.cache/brevis-corpus`). Says SKIPPED when the corpus is absent (a failure under
//! `BREVIS_REQUIRE_ALL=1`).

mod support;

use std::path::{Path, PathBuf};
use support::skip;
use support::tools::corpus_dir;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "safetensors") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// "best tool" per file from PEERS.md, when it is beside the checkout.
fn best_tool(name: &str) -> Option<f64> {
    let peers = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/PEERS.md")).ok()?;
    let line = peers.lines().find(|l| l.starts_with(&format!("| {name} ")))?;
    line.split('|').nth(9)?.trim().trim_matches('*').parse().ok()
}

#[test]
fn corpus_round_trips_and_beats_the_best_tool() {
    let Some(dir) = corpus_dir() else {
        return skip("no development corpus (set BREVIS_CORPUS or build it with ../shared/corpus/fetch_corpus.py)");
    };
    let (mut tot_o, mut tot_c) = (0u64, 0u64);
    let files = files(&dir);
    if files.is_empty() {
        return skip(&format!("the development corpus {} holds no .safetensors file", dir.display()));
    }
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let archive = brevis::compress(&data, &brevis::Options::default()).unwrap();
        let back = brevis::decompress(&archive).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        assert!(back == data, "{name}: round trip differs");
        let pct = 100.0 * archive.len() as f64 / data.len() as f64;
        let best = best_tool(&name);
        eprintln!("{name:<45} {pct:6.2}%  best tool {best:?}");
        match best {
            Some(b) => assert!(pct < b, "{name}: {pct:.2}% is not below the best tool's {b}%"),
            None => {
                skip(&format!("{name}: no best-tool figure in ../shared/corpus/PEERS.md, so its size was not compared"))
            }
        }
        tot_o += data.len() as u64;
        tot_c += archive.len() as u64;
    }
    let total = 100.0 * tot_c as f64 / tot_o.max(1) as f64;
    eprintln!("TOTAL {total:.2}%");
    if tot_o > 400_000_000 {
        assert!(total <= 76.5, "corpus total {total:.2}% is above 76.5%");
    } else {
        skip(&format!("the corpus holds only {tot_o} bytes (a subset?), so its total was not compared"));
    }
}

/// The GGUF development set (`../shared/corpus/fetch_gguf.py`: the real SmolLM2 Q4_1 file and
/// MiniLM written by the reference writer in F32, F16, BF16 and five quantized types): every
/// file round-trips and is smaller than `zstd -3`; the float files come within 0.2 points of the
/// same weights in safetensors form, MiniLM BF16 at most 65.85%; the quantized files
/// (split by `blocks`) are smaller than `zstd -19`, SmolLM2 Q4_1 at most 88.5%.
#[test]
fn gguf_corpus_round_trips_and_floats_match_safetensors() {
    let Some(dir) = corpus_dir() else {
        return skip("no development corpus (set BREVIS_CORPUS or build it with ../shared/corpus/fetch_corpus.py)");
    };
    let gguf = dir.join("gguf");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&gguf)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "gguf")).collect())
        .unwrap_or_default();
    files.sort();
    if files.is_empty() {
        return skip(&format!("no GGUF files in {} (build them with ../shared/corpus/fetch_gguf.py)", gguf.display()));
    }
    let pct = |f: &Path| {
        let data = std::fs::read(f).unwrap();
        let archive = brevis::compress(&data, &brevis::Options::default()).unwrap();
        assert!(brevis::decompress(&archive).unwrap() == data, "{}: round trip differs", f.display());
        let z = zstd::bulk::compress(&data, 3).unwrap().len();
        (100.0 * archive.len() as f64 / data.len() as f64, 100.0 * z as f64 / data.len() as f64)
    };
    let mut floats = 0;
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let (p, z) = pct(f);
        let twin = match name.as_str() {
            "minilm_bf16.gguf" => Some("derived/all-MiniLM-L6-v2_bf16.safetensors"),
            "minilm_f16.gguf" => Some("derived/all-MiniLM-L6-v2_fp16.safetensors"),
            "minilm_f32.gguf" => Some("language/all-MiniLM-L6-v2.safetensors"),
            _ => None,
        };
        let twin = twin.map(|t| dir.join(t));
        if let Some(t) = twin.as_ref().filter(|t| !t.is_file()) {
            skip(&format!("{name}: its safetensors twin {} is missing, so they were not compared", t.display()));
        }
        let st = twin.as_ref().filter(|t| t.is_file()).map(|t| pct(t).0);
        eprintln!("{name:<40} {p:6.2}%  zstd -3 {z:6.2}%  safetensors {st:?}");
        assert!(p < z, "{name}: {p:.2}% is not below zstd -3's {z:.2}%");
        if let Some(s) = st {
            assert!(p <= s + 0.2, "{name}: {p:.2}% against {s:.2}% for the same weights in safetensors");
            floats += 1;
        }
        if name == "minilm_bf16.gguf" {
            assert!(p <= 65.85, "{name}: {p:.2}%");
        }
        if twin.is_none() {
            let data = std::fs::read(f).unwrap();
            let z19 = 100.0 * zstd::bulk::compress(&data, 19).unwrap().len() as f64 / data.len() as f64;
            eprintln!("{name:<40} zstd -19 {z19:6.2}%");
            assert!(p < z19, "{name}: {p:.2}% is not below zstd -19's {z19:.2}%");
        }
        if name == "SmolLM2-135M-Instruct.Q4_1.gguf" {
            assert!(p <= 88.5, "{name}: {p:.2}%");
        }
    }
    if files.len() < 9 {
        skip(&format!("{} holds {} GGUF files, not the 9 of fetch_gguf.py", gguf.display(), files.len()));
    }
    assert!(floats == 3 || files.len() < 9, "{floats} float GGUF files compared with safetensors");
}
