//! The C API from C and C++: ctests/test_api.c linked against the static library and, through the
//! pkg-config file, the shared one; the same program under valgrind; the C++ loader example
//! (bindings/cpp/loader.cpp), its delta path against a reference included; the C++ GGUF loader
//! example (bindings/cpp/gguf_loader.cpp) on GGUF files built here and on the development set's
//! (SKIPPED without the corpus). Needs a C compiler
//! (`cc`, or `$CC`), pkg-config, valgrind, a C++ compiler and nm: each test that lacks one says
//! SKIPPED (a failure under `BREVIS_REQUIRE_ALL=1`).

mod support;

use std::process::Command;
use support::skip;
use support::tools::*;

#[test]
fn c_api_static_library() {
    let Some(cc) = cc() else { return };
    let lib = lib_dir();
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("test_api_static");
    build_test_api_static(&cc, &lib.join("libbrevis.a"), &exe);
    // The real checkpoint goes through the shared library (below); the static one gets the small file.
    let small = write(tmp.path(), "small.safetensors", &small_checkpoint());
    run_test_api("test_api static, small", &exe, &small, tmp.path(), &[], &[]);
}

/// An outside program: the installed header and `-lbrevis` found through pkg-config.
#[test]
fn c_api_shared_library_through_pkg_config() {
    let Some(cc) = cc() else { return };
    if !have("pkg-config", &["--version"]) {
        return skip("pkg-config is not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("prefix");
    run(
        "install.sh",
        Command::new("sh").arg(root().join("bindings/c/install.sh")).arg(&prefix).env("BREVIS_LIB_DIR", lib_dir()),
    );
    let pc = |arg: &str| -> Vec<String> {
        let out = run(
            "pkg-config",
            Command::new("pkg-config").arg(arg).arg("brevis").env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")),
        );
        out.split_whitespace().map(String::from).collect()
    };
    let version = run(
        "pkg-config --modversion",
        Command::new("pkg-config")
            .args(["--modversion", "brevis"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")),
    );
    assert_eq!(version.trim(), env!("CARGO_PKG_VERSION"));
    let exe = tmp.path().join("test_api_shared");
    run(
        "cc (shared, pkg-config)",
        Command::new(&cc)
            .args(c_flags())
            .args(pc("--cflags"))
            .arg(test_api_source())
            .args(pc("--libs"))
            .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
            .arg("-o")
            .arg(&exe),
    );
    let ldd = run("ldd", Command::new("ldd").arg(&exe));
    assert!(ldd.contains(&prefix.join("lib/libbrevis.so").display().to_string()), "not linked to the shared library");
    run_test_api("test_api shared, fixture", &exe, &fixture(), tmp.path(), &[], &[]);
}

/// The C tests under valgrind's memcheck, on a small checkpoint: no invalid access, no definite
/// leak, no error (rayon's global worker threads stay alive: "possibly lost" is not an error).
#[test]
fn c_api_under_valgrind() {
    let Some(cc) = cc() else { return };
    if !have("valgrind", &["--version"]) {
        return skip("valgrind is not installed (apt-get install valgrind); the C API ran without it");
    }
    let lib = lib_dir();
    let tmp = tempfile::tempdir().unwrap();
    let small = write(tmp.path(), "small.safetensors", &small_checkpoint());
    let memcheck = [
        "valgrind",
        "--quiet",
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
    ];
    for linkage in ["static", "shared"] {
        let exe = tmp.path().join(format!("test_api_vg_{linkage}"));
        let mut cmd = Command::new(&cc);
        cmd.args(c_flags()).arg("-I").arg(root().join("include")).arg(test_api_source());
        if linkage == "static" {
            cmd.arg(lib.join("libbrevis.a")).args(STATIC_DEPS);
        } else {
            cmd.arg("-L").arg(&lib).arg("-lbrevis").arg(format!("-Wl,-rpath,{}", lib.display()));
        }
        run(&format!("cc ({linkage}, for valgrind)"), cmd.arg("-o").arg(&exe));
        run_test_api(&format!("valgrind test_api {linkage}, small"), &exe, &small, tmp.path(), &["quick"], &memcheck);
    }
}

/// The llama.cpp-style loader: maps an archive, lists its tensors, decodes each into its own
/// aligned buffer and compares it with the original safetensors file; then its delta path
/// (`--ref`): a fine-tuned copy of the fixture compressed against the fixture and restored with
/// it, whose archive this library must also restore.
#[test]
fn cpp_loader_example() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(exe) = build_cpp_example("loader.cpp", tmp.path()) else { return };
    for (name, original) in [("fixture", std::fs::read(fixture()).unwrap()), ("small", small_checkpoint())] {
        let orig = write(tmp.path(), &format!("{name}.safetensors"), &original);
        let opts = brevis::Options::default().with_threads(2);
        let arc = write(tmp.path(), &format!("{name}.brv"), &brevis::compress(&original, &opts).unwrap());
        let out = run(&format!("loader, {name}"), Command::new(&exe).arg(&arc).arg(&orig));
        assert!(out.contains("all tensors match"), "{out}");
    }
    let base = std::fs::read(fixture()).unwrap();
    let tuned = nudged(&base);
    let tuned_path = write(tmp.path(), "tuned.safetensors", &tuned);
    let arc = tmp.path().join("tuned.brv");
    let out = run("loader --ref", Command::new(&exe).arg("--ref").arg(fixture()).arg(&tuned_path).arg(&arc));
    assert!(out.contains("reference round trip matches"), "{out}");
    let archive = std::fs::read(&arc).unwrap();
    assert!(brevis::Archive::open(&archive).unwrap().needs_reference());
    assert!(brevis::decompress_with_ref(&archive, &base, &Default::default()).unwrap() == tuned);
}

/// Builds a C++ example of bindings/cpp/ into `dir`; None (SKIPPED) without a C++ compiler.
fn build_cpp_example(source: &str, dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if !have(&cxx, &["--version"]) {
        skip(&format!("no C++ compiler ({cxx})"));
        return None;
    }
    let lib = lib_dir();
    let exe = dir.join(source.trim_end_matches(".cpp"));
    run(
        &format!("c++ {source}"),
        Command::new(&cxx)
            .args(["-std=c++17", "-pthread", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-I"])
            .arg(root().join("include"))
            .arg(root().join("bindings/cpp").join(source))
            .arg("-L")
            .arg(&lib)
            .arg("-lbrevis")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-o")
            .arg(&exe),
    );
    Some(exe)
}

/// The llama.cpp-style GGUF loader: gets the header bytes from an archive, parses its tensor
/// infos, decodes every tensor into place in an aligned data section and compares header and
/// data section with the original file byte for byte: on GGUF files of every metadata value
/// type, 0 to 4 dimensions, known, quantized and unknown ggml types, versions 2 and 3 and three
/// alignments (one with a vocabulary that takes the header past 64 KiB), then on every file of
/// the development set's gguf/ folder (SKIPPED without it).
#[test]
fn cpp_gguf_loader_example() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(exe) = build_cpp_example("gguf_loader.cpp", tmp.path()) else { return };
    let opts = brevis::Options::default().with_threads(2);
    for (version, alignment, vocab) in [(3, 32, 10), (2, 64, 20000), (3, 8, 300)] {
        let f = support::gguf::loader_model(version, alignment, vocab, 0).bytes();
        let orig = write(tmp.path(), "m.gguf", &f);
        let arc = write(tmp.path(), "m.brv", &brevis::compress(&f, &opts).unwrap());
        let out =
            run(&format!("gguf_loader v{version} alignment {alignment}"), Command::new(&exe).arg(&arc).arg(&orig));
        assert!(out.contains("every byte matches") && out.contains("type 99"), "{out}");
    }
    let Some(dir) = corpus_dir().map(|d| d.join("gguf")).filter(|d| d.is_dir()) else {
        return skip("no GGUF development set (build it with ../shared/corpus/fetch_gguf.py)");
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    files.retain(|p| p.extension().is_some_and(|x| x == "gguf"));
    files.sort();
    assert!(!files.is_empty(), "no .gguf file in {}", dir.display());
    // The fast level and a small sample: what is checked here is the loader's path, not sizes.
    let fast = opts.with_level(brevis::Level::Fast).with_sample_elems(1 << 14);
    for f in &files {
        let arc = tmp.path().join("dev.brv");
        brevis::compress_file(&std::fs::File::open(f).unwrap(), &mut std::fs::File::create(&arc).unwrap(), &fast)
            .unwrap();
        let out = run(&format!("gguf_loader {}", f.display()), Command::new(&exe).arg(&arc).arg(f));
        assert!(out.contains("every byte matches"), "{}: {out}", f.display());
        eprintln!("{}: {}", f.display(), out.lines().last().unwrap_or(""));
    }
}

/// Every symbol the shared library exports is `brevis_`-prefixed.
#[test]
fn exported_symbols_are_prefixed() {
    if !have("nm", &["--version"]) {
        return skip("nm is not installed");
    }
    let out = run(
        "nm -D",
        Command::new("nm").args(["-D", "--defined-only", "--format=posix"]).arg(lib_dir().join("libbrevis.so")),
    );
    let names: Vec<&str> = out.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(names.contains(&"brevis_compress") && names.contains(&"brevis_archive_decode_tensor"));
    let bad: Vec<&&str> = names.iter().filter(|n| !n.starts_with("brevis_")).collect();
    assert!(bad.is_empty(), "exported without the brevis_ prefix: {bad:?}");
}
