//! The search: the first release's candidate programs stay reachable, the budget and
//! the depth bound the search, the learned prior is deterministic, reusable as JSON and never
//! needed to decode, and the archive does not depend on the thread count.

mod support;
use brevis::PriorSource;
use std::sync::Arc;
use support::st::*;

/// A small checkpoint with several dtypes and roles.
fn checkpoint() -> Vec<u8> {
    let mut rng = Rng(7);
    let mut ts = Vec::new();
    let bf16 = |rng: &mut Rng, n: usize, sd: f64| -> Vec<u8> {
        (0..n).flat_map(|_| half::bf16::from_f64(rng.normal(sd)).to_bits().to_le_bytes()).collect()
    };
    for l in 0..3 {
        ts.push(tensor(&format!("layers.{l}.attn.q_proj.weight"), "BF16", &[64, 128], bf16(&mut rng, 64 * 128, 0.02)));
        ts.push(tensor(&format!("layers.{l}.mlp.fc1.weight"), "BF16", &[128, 64], bf16(&mut rng, 128 * 64, 0.05)));
        ts.push(tensor(&format!("layers.{l}.norm.weight"), "BF16", &[64], bf16(&mut rng, 64, 1.0)));
    }
    let f16: Vec<u8> =
        (0..32 * 16 * 9).flat_map(|_| half::f16::from_f64(rng.normal(0.1)).to_bits().to_le_bytes()).collect();
    ts.push(tensor("conv.weight", "F16", &[32, 16, 3, 3], f16));
    let f32s: Vec<u8> = (0..4096).flat_map(|_| (rng.normal(0.3) as f32).to_le_bytes()).collect();
    ts.push(tensor("embed.weight", "F32", &[64, 64], f32s));
    let ints: Vec<u8> = (0..1000i64).flat_map(|i| (i * i % 977).to_le_bytes()).collect();
    ts.push(tensor("counts", "I64", &[1000], ints));
    file(&ts, None)
}

/// Transform levels above the deepest leaf.
fn depth(n: &brevis::internals::dsl::Node) -> usize {
    n.children.iter().map(|c| 1 + depth(c)).max().unwrap_or(0)
}

#[test]
fn budget_and_depth_bound_the_search() {
    let f = checkpoint();
    for (budget, max_depth) in [(1, 1), (4, 2), (16, 4)] {
        let stats = Arc::new(brevis::SearchStats::default());
        let opts = brevis::Options::default().with_budget(budget).with_depth(max_depth).with_stats(Some(stats.clone()));
        let a = brevis::compress(&f, &opts).unwrap();
        assert_eq!(brevis::decompress(&a).unwrap(), f);
        let load = |x: &std::sync::atomic::AtomicU64| x.load(std::sync::atomic::Ordering::Relaxed);
        let searched = load(&stats.tensors);
        assert!(searched > 0);
        assert!(load(&stats.expansions) <= searched * budget as u64, "budget {budget}: {}", stats.summary());
        // Every phase of compression was timed, and the summary says so.
        assert!(stats.phase_ns.iter().all(|p| load(p) > 0), "{}", stats.summary());
        assert!(stats.summary().contains("time: reading"), "{}", stats.summary());
        let arch = brevis::Archive::open(&a).unwrap();
        for i in 0..arch.len() {
            let p = &brevis::internals::index(&arch).tensors[i].program;
            assert!(depth(p) <= max_depth, "depth {max_depth}: {p}");
        }
    }
}

#[test]
fn more_budget_is_not_worse_here_and_beats_budget_one() {
    let f = checkpoint();
    let size = |budget| brevis::compress(&f, &brevis::Options::default().with_budget(budget)).unwrap().len();
    let (small, large) = (size(1), size(64));
    assert!(large < small, "budget 64: {large}, budget 1: {small}");
}

#[test]
fn same_archive_whatever_the_thread_count() {
    let f = checkpoint();
    for level in brevis::Level::ALL {
        let one = brevis::compress(&f, &brevis::Options::default().with_threads(1).with_level(level)).unwrap();
        for threads in [2, 3] {
            let other =
                brevis::compress(&f, &brevis::Options::default().with_threads(threads).with_level(level)).unwrap();
            assert!(one == other, "{threads} threads gave another archive at {}", level.name());
        }
    }
}

#[test]
fn learned_prior_round_trips_as_json_and_gives_the_same_archive() {
    let f = checkpoint();
    let prior = brevis::learn_prior(&f, &brevis::Options::default()).unwrap();
    assert!(prior.tensors > 0 && !prior.is_empty());
    let json = prior.to_json();
    let back = brevis::Prior::from_json(&json).unwrap();
    assert_eq!(back, prior);
    // With `PriorSource::Learn`, compress learns exactly this prior from its input.
    let learned = brevis::compress(&f, &brevis::Options::default().with_prior(PriorSource::Learn)).unwrap();
    let given =
        brevis::compress(&f, &brevis::Options::default().with_prior(PriorSource::Given(Arc::new(back)))).unwrap();
    assert!(learned == given);
    // The prior is never needed to decode.
    assert_eq!(brevis::decompress(&given).unwrap(), f);
    assert!(brevis::Prior::from_json("{\"format\":\"other\"}").is_err());
}

#[test]
fn uniform_prior_uses_the_same_productions() {
    let f = checkpoint();
    let u = brevis::compress(&f, &brevis::Options::default().with_prior(PriorSource::Uniform)).unwrap();
    assert_eq!(brevis::decompress(&u).unwrap(), f);
    // With a budget large enough to exhaust the search, the prior changes the order only (at
    // `max`, whose searches spend their whole budget: no patience).
    let big = |prior| {
        let opts = brevis::Options::default().with_budget(100_000).with_prior(prior).with_level(brevis::Level::Max);
        brevis::compress(&f, &opts).unwrap()
    };
    let (a, b) = (big(PriorSource::Uniform), big(PriorSource::Builtin));
    let diff = (a.len() as f64 - b.len() as f64).abs() / a.len() as f64;
    assert!(diff < 0.002, "exhaustive searches differ by {:.3}%", 100.0 * diff);
}

/// The built-in prior parses and is learned (not uniform). The default prior is learned from the
/// input's sample with the built-in one as its backoff, at the default level; at `fast`, it is
/// the built-in one, unlearned.
#[test]
fn the_default_prior_is_learned_and_backs_off_to_the_builtin_one() {
    let p = brevis::internals::synth::builtin_prior();
    assert!(!p.is_uniform() && p.tensors > 0);
    assert!(matches!(brevis::Options::default().prior, PriorSource::LearnBackoff));
    let f = checkpoint();
    let run = |prior: Option<PriorSource>, level| {
        let stats = Arc::new(brevis::SearchStats::default());
        let opts = brevis::Options::default().with_level(level).with_stats(Some(stats.clone()));
        let a = brevis::compress(&f, &prior.map_or(opts.clone(), |p| opts.with_prior(p))).unwrap();
        (a, stats.learn_tensors.load(std::sync::atomic::Ordering::Relaxed))
    };
    let (default, learned) = run(None, brevis::Level::Default);
    assert!(learned > 0, "the default level learned no prior");
    assert!(default == run(Some(PriorSource::LearnBackoff), brevis::Level::Default).0);
    let (builtin, learned) = run(Some(PriorSource::Builtin), brevis::Level::Default);
    assert_eq!(learned, 0, "the built-in prior was learned");
    assert!(builtin == run(Some(PriorSource::Given(p.clone())), brevis::Level::Default).0);
    let (fast, learned) = run(None, brevis::Level::Fast);
    assert_eq!(learned, 0, "fast learned a prior");
    assert!(fast == run(Some(PriorSource::Given(p)), brevis::Level::Fast).0);
    assert_eq!(brevis::decompress(&default).unwrap(), f);
}

/// A level that searches more never comes out larger (`max` <= `default` <= `fast`): on the real
/// fixture, a 2:4-sparse fp16 checkpoint and a GGUF file of quantized blocks.
#[test]
fn a_level_that_searches_more_is_never_larger() {
    let mut rng = Rng(11);
    let mut ts = Vec::new();
    for l in 0..2 {
        let mut w: Vec<f64> = (0..256 * 384).map(|_| rng.normal(0.04)).collect();
        for g in w.chunks_mut(4) {
            let mut order = [0, 1, 2, 3];
            order.sort_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()));
            g[order[0]] = 0.0;
            g[order[1]] = 0.0;
        }
        let data = w.iter().flat_map(|&x| half::f16::from_f64(x).to_bits().to_le_bytes()).collect();
        ts.push(tensor(&format!("layers.{l}.mlp.fc1.weight"), "F16", &[256, 384], data));
    }
    let sparse = file(&ts, None);
    let gguf = support::gguf::quant_model(5, 48, 12).bytes();
    let fixture = std::fs::read(support::tools::fixture()).unwrap();
    for (name, f) in [("silero fixture", &fixture), ("2:4 sparse", &sparse), ("quantized GGUF", &gguf)] {
        let size = |level| brevis::compress(f, &brevis::Options::default().with_level(level)).unwrap().len();
        let [fast, default, max] = brevis::Level::ALL.map(size);
        assert!(max <= default && default <= fast, "{name}: fast {fast}, default {default}, max {max}");
    }
}

#[test]
fn cli_prior_learn_and_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.safetensors");
    std::fs::write(&input, checkpoint()).unwrap();
    let bin = env!("CARGO_BIN_EXE_brevis");
    let prior = dir.path().join("prior.json");
    let run = |args: &[&std::ffi::OsStr]| std::process::Command::new(bin).args(args).output().unwrap();
    let o = run(&["prior".as_ref(), "learn".as_ref(), input.as_os_str(), "-o".as_ref(), prior.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.path().join("m.brv");
    let o = run(&[
        "compress".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--prior".as_ref(),
        prior.as_os_str(),
        "--budget".as_ref(),
        "8".as_ref(),
        "--stats".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("expansions") && err.contains("pruned"), "{err}");
    let o = run(&["verify".as_ref(), out.as_os_str(), input.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o =
        run(&["compress".as_ref(), input.as_os_str(), "-f".as_ref(), "--prior".as_ref(), "/nonexistent.json".as_ref()]);
    assert!(!o.status.success());
}

/// Repeated layers (same dtype, shape and role) take the programs of the first one: fewer
/// searches, the same archive whatever the thread count, about the size of searching each.
#[test]
fn repeated_layers_reuse_the_first_ones_programs() {
    let mut rng = Rng(11);
    let mut ts = Vec::new();
    for l in 0..4 {
        let sd = 0.02 * (1.0 + l as f64 / 4.0);
        let w: Vec<u8> =
            (0..128 * 160).flat_map(|_| half::bf16::from_f64(rng.normal(sd)).to_bits().to_le_bytes()).collect();
        ts.push(tensor(&format!("layers.{l}.attn.q_proj.weight"), "BF16", &[128, 160], w));
    }
    let f = file(&ts, None);
    let stats = Arc::new(brevis::SearchStats::default());
    let opts = brevis::Options::default().with_threads(1).with_stats(Some(stats.clone()));
    let one = brevis::compress(&f, &opts).unwrap();
    assert_eq!(stats.reused.load(std::sync::atomic::Ordering::Relaxed), 3);
    assert_eq!(brevis::decompress(&one).unwrap(), f);
    let two = brevis::compress(&f, &brevis::Options::default().with_threads(2)).unwrap();
    assert!(one == two, "2 threads gave another archive");
    let each = brevis::compress(&f, &brevis::Options::default().with_reuse(false)).unwrap();
    assert!(one.len() as f64 <= each.len() as f64 * 1.005, "reuse {} vs search each {}", one.len(), each.len());
}

/// At `fast`, small tensors of repeated layers (biases, norms) take the programs of the first
/// one too; the default level still searches each of them.
#[test]
fn fast_reuses_the_programs_of_small_repeated_tensors() {
    let mut rng = Rng(12);
    let mut ts = Vec::new();
    for l in 0..4 {
        let b: Vec<u8> = (0..512).flat_map(|_| half::f16::from_f64(rng.normal(0.05)).to_bits().to_le_bytes()).collect();
        ts.push(tensor(&format!("layers.{l}.mlp.fc1.bias"), "F16", &[512], b));
    }
    let f = file(&ts, None);
    let reused = |level: brevis::Level, threads: usize| {
        let stats = Arc::new(brevis::SearchStats::default());
        let opts = brevis::Options::default().with_threads(threads).with_level(level).with_stats(Some(stats.clone()));
        let a = brevis::compress(&f, &opts).unwrap();
        assert_eq!(brevis::decompress(&a).unwrap(), f);
        (stats.reused.load(std::sync::atomic::Ordering::Relaxed), a)
    };
    let (fast, one) = reused(brevis::Level::Fast, 1);
    assert_eq!(fast, 3);
    assert!(one == reused(brevis::Level::Fast, 2).1, "2 threads gave another archive");
    assert_eq!(reused(brevis::Level::Default, 1).0, 0);
}

/// The 256 fp16 weights of `conv2d_2/Kernel` [16, 1, 1, 16] of MediaPipe's face landmark model
/// (PyPI `mediapipe` 0.10.14, `mediapipe/modules/face_landmark/face_landmark.tflite`,
/// Apache-2.0), little-endian, as hex.
const FACE_LANDMARK_CONV: [&str; 11] = [
    "14b1813249b03aa8b23333b4783088b42131143746b2c12efa2f49b013ad51b6beb17a34a630f92ad6b2542f54b21d31",
    "e7198eb38a318db649ac9eb5b1360334dbaf3ca141b5e7306db0e53375a0abae7d31cbb50f2ffdae31b5e9aed337e733",
    "0ab0fb3a15b2a332f624332f0a278bb5502cb0347cb175358834073807b995b4df322eb9ddb6aa2960b0903979365c35",
    "0f33d1a8cfb3c7b2352db335c2ad8c3229b68bb86bb8bd32e1b0403057ad3f2fd4341baed4b84225631d9721e63011ba",
    "ee298334992659ad3d9f8338dcb77db453ab472c1e1ccab41137f39d772bb09b9aa358b4bb2a592429baa9b2992e93b4",
    "4e1c5eb905aca7b061a8922b2f356eb1ac32beb2092acbb1e0ad43b4589c393441b8532a89b4982d32b3b0b067b0bbb7",
    "4824732c01b4b138b3ab019469b41f3269b7671c46309db02eae232505a8e6a7cc325eac60b5d6ad413345addba5b4ad",
    "9db1a0325e2a7ab19035cf336b30b3b3f7a585b442ada831b1a05d349b2e523409a916b1a4b797b6b32c14396b29b62b",
    "d9245aa784310fb194303328d3a84398f5afc111ee2d2228802d032f1c2194262c9c4b34a836c2b1472bf4aed31dccb5",
    "45312ea89c392e29df2f75ba751a5a38aeabf01bfead5799b1380e35cb2adab32a330138b6b0d02d1039b6aad02c7029",
    "e0b08bab5a2d729cb1ba7ca9c3287424b7ac80b0a3b053af1db7fbb0282cc4b4",
];

/// A tensor is never stored larger than its words (plus a few bytes): the search's finalists
/// under the built-in prior, whose screen estimates favour `rans` on these 256 words, all came
/// out larger than `raw` (632 bytes for 512) before `raw` competed with them.
#[test]
fn no_tensor_is_stored_larger_than_its_words() {
    let words: Vec<u8> = FACE_LANDMARK_CONV
        .concat()
        .as_bytes()
        .chunks(2)
        .map(|h| u8::from_str_radix(std::str::from_utf8(h).unwrap(), 16).unwrap())
        .collect();
    assert_eq!(words.len(), 512);
    let f = file(&[tensor("conv2d_2/Kernel", "F16", &[16, 1, 1, 16], words)], None);
    for prior in [PriorSource::Builtin, PriorSource::LearnBackoff, PriorSource::Learn] {
        for level in [brevis::Level::Fast, brevis::Level::Default, brevis::Level::Max] {
            let opts = brevis::Options::default().with_level(level).with_prior(prior.clone());
            let a = brevis::compress(&f, &opts).unwrap();
            let info = brevis::Archive::open(&a).unwrap().info(0).unwrap().compressed_bytes;
            assert!(info <= 512 + 8, "{level:?} {prior:?}: {info} bytes for 512");
            assert_eq!(brevis::decompress(&a).unwrap(), f);
        }
    }
}
