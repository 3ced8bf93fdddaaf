//! Runs the Go (`go test`), Java (JUnit 4 over JNA) and Python (unittest over ctypes) bindings'
//! own tests against this build's libbrevis.so, and checks that each of their tests ran (the
//! reference round trip included); the Python tests also hand back what the binding returned,
//! which is checked here against the library. Each says SKIPPED when its toolchain is missing (a
//! failure under `BREVIS_REQUIRE_ALL=1`); `.ci/run` installs them (Debian: golang-go,
//! default-jdk-headless, libjna-java, junit4). The Python package (`pip install ./bindings/python`)
//! is installed into a virtual environment under the target folder, made here with pip from
//! PyPI, and its pytest tests run against the installed copy.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::skip;
use support::tools::*;

#[test]
fn go_binding() {
    if !have("go", &["version"]) {
        return skip("Go is not installed (apt-get install golang-go); the Go binding was not tested");
    }
    let lib = lib_dir();
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        "go test",
        Command::new("go")
            .args(["test", "-count=1", "-v", "./..."])
            .current_dir(root().join("bindings/go"))
            .env("CGO_ENABLED", "1")
            .env("CGO_LDFLAGS", format!("-L{0} -Wl,-rpath,{0}", lib.display()))
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("GOTOOLCHAIN", "local")
            .env("GOPATH", tmp.path().join("gopath"))
            .env("BREVIS_FIXTURE", fixture()),
    );
    assert!(out.contains("\nok ") || out.starts_with("ok "), "{out}");
    for test in [
        "TestBytesRoundTrip",
        "TestCheckpointAndArchive",
        "TestErrors",
        "TestReferenceRoundTrip",
        "TestArchiveWithOptions",
    ] {
        assert!(out.contains(&format!("--- PASS: {test} ")), "{test} did not pass:\n{out}");
    }
}

#[test]
fn java_binding() {
    let jars = Path::new("/usr/share/java");
    let (jna, junit, hamcrest) = (jars.join("jna.jar"), jars.join("junit4.jar"), jars.join("hamcrest-core.jar"));
    if !have("javac", &["-version"]) || !jna.is_file() || !junit.is_file() || !hamcrest.is_file() {
        return skip(&format!(
            "javac, {}, {} or {} is missing (apt-get install default-jdk-headless libjna-java junit4); \
             the Java binding was not tested",
            jna.display(),
            junit.display(),
            hamcrest.display()
        ));
    }
    let dir = root().join("bindings/java");
    let tmp = tempfile::tempdir().unwrap();
    let classes = tmp.path().join("classes");
    let mut sources = Vec::new();
    for sub in ["src/main/java/org/brevis", "src/test/java/org/brevis"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            sources.push(e.unwrap().path());
        }
    }
    let cp =
        |extra: &[&Path]| -> String { extra.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":") };
    run(
        "javac",
        Command::new("javac")
            .args(["-Xlint:all", "-Werror", "-d"])
            .arg(&classes)
            .arg("-cp")
            .arg(cp(&[&jna, &junit]))
            .args(&sources),
    );
    let out = run(
        "JUnit",
        Command::new("java")
            .arg(format!("-Djna.library.path={}", lib_dir().display()))
            .arg("-cp")
            .arg(cp(&[&classes, &jna, &junit, &hamcrest]))
            .args(["org.junit.runner.JUnitCore", "org.brevis.BrevisTest"])
            .current_dir(&dir)
            .env("BREVIS_FIXTURE", fixture()),
    );
    // Every @Test of BrevisTest ran (JUnit prints "OK (N tests)").
    let tests =
        std::fs::read_to_string(dir.join("src/test/java/org/brevis/BrevisTest.java")).unwrap().matches("@Test").count();
    assert!(tests >= 7, "{tests}");
    assert!(out.contains(&format!("OK ({tests} tests)")), "{out}");
}

#[test]
fn python_binding() {
    if !have("python3", &["--version"]) {
        return skip("python3 is not installed; the Python binding was not tested");
    }
    let out_dir = tempfile::tempdir().unwrap();
    let cmd = Command::new("python3")
        .args(["-m", "unittest", "-v", "test_brevis"])
        .current_dir(root().join("bindings/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("BREVIS_LIBRARY", lib_dir().join("libbrevis.so"))
        .env("BREVIS_FIXTURE", fixture())
        .env("BREVIS_TEST_OUT", out_dir.path())
        .output()
        .unwrap();
    // unittest reports on stderr.
    let report = String::from_utf8_lossy(&cmd.stderr);
    println!("{}{report}", String::from_utf8_lossy(&cmd.stdout));
    assert!(cmd.status.success(), "python3 -m unittest failed:\n{report}");
    let tests = std::fs::read_to_string(root().join("bindings/python/test_brevis.py"))
        .unwrap()
        .matches("    def test_")
        .count();
    assert!(tests >= 8 && report.contains(&format!("Ran {tests} tests")) && report.contains("\nOK"), "{report}");
    assert!(!report.contains("skipped"), "{report}");
    check_python_outputs(out_dir.path());
}

/// What the Python binding returned, checked against the library: its archive of the fixture
/// decodes to the fixture; its index listing is the archive's; its archive against a reference
/// needs that reference and restores the fine-tuned checkpoint, which is what it decoded too.
fn check_python_outputs(dir: &Path) {
    let read =
        |name: &str| std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("the Python tests wrote no {name}: {e}"));
    let original = std::fs::read(fixture()).unwrap();
    let archive = read("fixture.brv");
    assert!(brevis::decompress(&archive).unwrap() == original, "the Python binding's archive");
    let a = brevis::Archive::open(&archive).unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&read("tensors.json")).unwrap();
    let want: Vec<serde_json::Value> = (0..a.len())
        .map(|i| {
            let t = a.info(i).unwrap();
            serde_json::json!([t.name, t.dtype, t.shape, t.nbytes, brevis::internals::index(&a).tensors[i].offset])
        })
        .collect();
    assert_eq!(listed, serde_json::Value::Array(want), "the Python binding's tensor list");
    let tuned = nudged(&original);
    let delta = read("tuned.brv");
    assert!(brevis::Archive::open(&delta).unwrap().needs_reference());
    assert!(brevis::decompress_with_ref(&delta, &original, &Default::default()).unwrap() == tuned);
    assert!(read("tuned.out") == tuned, "the Python binding's decompress_with_ref");
}

/// What the package's tests need from PyPI (torch only under `BREVIS_REQUIRE_ALL=1` or
/// `BREVIS_PYTHON_TORCH=1`: about 2 minutes and 5 GB, CUDA libraries included).
fn python_requirements() -> Vec<&'static str> {
    let mut r = vec!["pip", "setuptools", "wheel", "numpy", "ml_dtypes", "safetensors", "pytest", "ray"];
    if ["BREVIS_REQUIRE_ALL", "BREVIS_PYTHON_TORCH"].iter().any(|v| std::env::var_os(v).is_some_and(|v| v == "1")) {
        r.push("torch");
    }
    r
}

/// `target/python-venv` with the requirements installed (done once; again when they change).
/// Err: why it could not be made (no venv module, no package index).
fn python_venv() -> Result<PathBuf, String> {
    let venv = support::tools::target_dir().join("python-venv");
    let python = venv.join("bin/python");
    let wanted = python_requirements().join(" ");
    let marker = venv.join("brevis-requirements.txt");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted) && python.is_file() {
        return Ok(python);
    }
    let step = |what: &str, cmd: &mut Command| -> Result<(), String> {
        let out = cmd.env_remove("LD_LIBRARY_PATH").output().map_err(|e| format!("{what}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stderr);
        out.status.success().then_some(()).ok_or_else(|| {
            // The last 2000 characters (on a character boundary).
            let tail = text.char_indices().rev().nth(2000).map_or(0, |(i, _)| i);
            format!("{what} failed: {}", &text[tail..])
        })
    };
    if !python.is_file() {
        step("python3 -m venv", Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    step(
        "pip install",
        // No pip cache: torch and its CUDA wheels are about 5 GB installed, and a second copy in the
        // cache can fill a CI machine's disk.
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "--no-cache-dir", "--upgrade"])
            .args(python_requirements()),
    )?;
    std::fs::write(&marker, wanted).unwrap();
    Ok(python)
}

#[test]
fn python_package() {
    if !have("python3", &["-m", "venv", "--help"]) {
        return skip("python3 with its venv module is not installed; the Python package was not tested");
    }
    let python = match python_venv() {
        Ok(p) => p,
        Err(why) => return skip(&format!("no virtual environment for the Python package: {why}")),
    };
    // The user's command: builds libbrevis with cargo and ships it inside the package.
    let mut pip = Command::new(&python);
    pip.args(["-m", "pip", "install", "-q", "--force-reinstall", "--no-deps"]).arg(root().join("bindings/python"));
    if lib_dir().starts_with(support::tools::target_dir().join("release")) {
        // `cargo test --release`: its libbrevis.so (with the test hooks) is in target/release/deps/,
        // where the package's `cargo build --release` would write one without them.
        pip.env("CARGO_TARGET_DIR", support::tools::target_dir().join("python-build"));
    }
    run("pip install ./bindings/python", &mut pip);
    // Away from the source tree, with no BREVIS_LIBRARY: the installed package and its library.
    let tmp = tempfile::tempdir().unwrap();
    let archive = brevis::compress(&std::fs::read(fixture()).unwrap(), &Default::default()).unwrap();
    std::fs::write(tmp.path().join("x.brv"), &archive).unwrap();
    let tensors = brevis::Archive::open(&archive).unwrap().len();
    let script = "import brevis.numpy as b; print(len(b.load_file('x.brv')))";
    let printed = run("python -c", python_cmd(&python, tmp.path()).args(["-c", script]));
    assert_eq!(printed.trim(), tensors.to_string());
    let out = run(
        "pytest",
        python_cmd(&python, tmp.path())
            .args(["-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider"])
            .arg(root().join("bindings/python/tests"))
            .env("BREVIS_EXPECT_INSTALLED", "1")
            .env("BREVIS_FIXTURE", fixture()),
    );
    let last = out.lines().rev().find(|l| l.contains(" passed")).unwrap_or_else(|| panic!("no pytest summary:\n{out}"));
    assert!(!last.contains("failed") && !last.contains("error"), "{last}");
    for line in out.lines().filter(|l| l.starts_with("SKIPPED")) {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
    }
}

fn python_cmd(python: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.current_dir(dir).env_remove("BREVIS_LIBRARY").env_remove("PYTHONPATH").env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}
