//! Runs the Go (`go test`), Java (JUnit 4 over JNA) and Python (unittest over ctypes) bindings'
//! own tests against this build's libbrevis.so. Each says SKIPPED when its toolchain is missing
//! (a failure under `BREVIS_REQUIRE_ALL=1`); `.ci/run` installs them (Debian: golang-go, default-jdk-headless, libjna-java, junit4).

mod support;

use std::path::Path;
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
    assert!(out.contains("OK ("), "{out}");
}

#[test]
fn python_binding() {
    if !have("python3", &["--version"]) {
        return skip("python3 is not installed; the Python binding was not tested");
    }
    let out = run(
        "python3 -m unittest",
        Command::new("python3")
            .args(["-m", "unittest", "-v", "test_brevis"])
            .current_dir(root().join("bindings/python"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("BREVIS_LIBRARY", lib_dir().join("libbrevis.so"))
            .env("BREVIS_FIXTURE", fixture()),
    );
    let _ = out;
}
