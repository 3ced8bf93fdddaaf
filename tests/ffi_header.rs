//! The checked-in C header (include/brevis.h) is what cbindgen generates from src/ffi/ (build.rs
//! writes it to OUT_DIR), and its version macros agree with Cargo.toml.
//!
//! After changing src/ffi/ or the version: `BREVIS_BLESS=1 cargo test --test ffi_header` copies
//! the generated header over include/brevis.h.

use std::path::PathBuf;

const GENERATED: &str = include_str!(concat!(env!("OUT_DIR"), "/brevis.h"));

fn checked_in_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/brevis.h")
}

/// Where two headers first differ, or None when they are the same.
fn first_difference(checked_in: &str, generated: &str) -> Option<String> {
    if checked_in == generated {
        return None;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (checked_in.lines().collect(), generated.lines().collect());
    let i = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    Some(format!(
        "line {}:\n  include/brevis.h: {:?}\n  generated:        {:?}",
        i + 1,
        a.get(i).copied().unwrap_or("<end of file>"),
        b.get(i).copied().unwrap_or("<end of file>")
    ))
}

#[test]
fn checked_in_header_is_the_generated_one() {
    let path = checked_in_path();
    if std::env::var_os("BREVIS_BLESS").is_some() {
        std::fs::write(&path, GENERATED).unwrap();
        println!("wrote {}", path.display());
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if let Some(diff) = first_difference(&checked_in, GENERATED) {
        panic!(
            "include/brevis.h differs from the header cbindgen generates from src/ffi/ ({}):\n{diff}\n\
             Run `BREVIS_BLESS=1 cargo test --test ffi_header` and review the diff.",
            concat!(env!("OUT_DIR"), "/brevis.h")
        );
    }
}

#[test]
fn the_comparison_catches_any_change() {
    assert_eq!(first_difference(GENERATED, GENERATED), None);
    let edited = GENERATED.replacen("brevis_compress_bound(size_t src_size)", "brevis_compress_bound(size_t n)", 1);
    assert_ne!(edited, GENERATED);
    assert!(first_difference(&edited, GENERATED).unwrap().contains("brevis_compress_bound"));
    assert!(first_difference(&GENERATED[..GENERATED.len() - 2], GENERATED).is_some());
    assert!(first_difference(&format!("{GENERATED}\n"), GENERATED).is_some());
}

/// The `version = "..."` of Cargo.toml's [package] section, read from the file itself.
fn cargo_toml_version() -> (u32, u32, u32) {
    let toml = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let mut in_package = false;
    for line in toml.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if let (true, Some(v)) = (in_package, line.strip_prefix("version")) {
            let v = v.trim_start().trim_start_matches('=').trim().trim_matches('"');
            let p: Vec<u32> = v.split(['.', '-', '+']).take(3).map(|x| x.parse().unwrap()).collect();
            return (p[0], p[1], p[2]);
        }
    }
    panic!("no version in Cargo.toml's [package]");
}

fn macro_value<'a>(header: &'a str, name: &str) -> &'a str {
    header
        .lines()
        .find_map(|l| l.strip_prefix("#define ")?.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} is not defined in the header"))
        .trim()
}

#[test]
fn version_macros_match_cargo_toml() {
    let (major, minor, patch) = cargo_toml_version();
    let header = std::fs::read_to_string(checked_in_path()).unwrap();
    for h in [header.as_str(), GENERATED] {
        assert_eq!(macro_value(h, "BREVIS_VERSION_MAJOR"), major.to_string());
        assert_eq!(macro_value(h, "BREVIS_VERSION_MINOR"), minor.to_string());
        assert_eq!(macro_value(h, "BREVIS_VERSION_PATCH"), patch.to_string());
        assert_eq!(macro_value(h, "BREVIS_VERSION_STRING"), format!("\"{major}.{minor}.{patch}\""));
        assert_eq!(macro_value(h, "BREVIS_VERSION_NUMBER"), (major * 10000 + minor * 100 + patch).to_string());
    }
    let runtime = unsafe { std::ffi::CStr::from_ptr(brevis::internals::ffi::brevis_version()) };
    assert_eq!(runtime.to_str().unwrap(), format!("{major}.{minor}.{patch}"));
    assert_eq!(brevis::internals::ffi::brevis_version_number(), major * 10000 + minor * 100 + patch);
}

/// Every function and type of the header is prefixed, and the entry points the C API promises
/// are there with their exact signatures.
#[test]
fn header_names_and_signatures() {
    for sig in [
        "size_t brevis_compress_bound(size_t src_size);",
        "int brevis_decompressed_size(const uint8_t *src, size_t src_size, uint64_t *out_size);",
        "const char *brevis_error_string(int code);",
        "brevis_options *brevis_options_new(void);",
        "int brevis_options_set(brevis_options *o, brevis_option key, int64_t value);",
        "void brevis_options_free(brevis_options *o);",
        "int brevis_archive_open(const uint8_t *src, size_t src_size, brevis_archive **out);",
        "size_t brevis_archive_tensor_count(const brevis_archive *a);",
        "int brevis_archive_tensor_info(const brevis_archive *a, size_t index, brevis_tensor_info *out);",
        "int brevis_archive_find(const brevis_archive *a, const char *name, size_t *index);",
        "void brevis_archive_free(brevis_archive *a);",
    ] {
        assert!(GENERATED.contains(sig), "missing: {sig}");
    }
    let squashed: String = GENERATED.split_whitespace().collect::<Vec<_>>().join(" ");
    for sig in [
        "int brevis_compress(const uint8_t *src, size_t src_size, uint8_t *dst, size_t dst_capacity, const brevis_options *opts, size_t *dst_size);",
        "int brevis_decompress(const uint8_t *src, size_t src_size, uint8_t *dst, size_t dst_capacity, size_t *dst_size);",
        "int brevis_archive_decode_tensor(const brevis_archive *a, size_t index, uint8_t *dst, size_t dst_capacity);",
        "int brevis_archive_open_with_options(const uint8_t *src, size_t src_size, const brevis_options *opts, brevis_archive **out);",
        "int brevis_decompress_with_ref_and_options(const uint8_t *src, size_t src_size, const uint8_t *reference, size_t reference_size, uint8_t *dst, size_t dst_capacity, const brevis_options *opts, size_t *dst_size);",
    ] {
        assert!(squashed.contains(sig), "missing: {sig}");
    }
    for line in GENERATED.lines() {
        let l = line.trim_start();
        if let Some(rest) = l.strip_prefix("#define ") {
            let name = rest.split_whitespace().next().unwrap();
            assert!(name.starts_with("BREVIS_"), "{line}");
        }
        // `typedef struct brevis_x brevis_x;` and the `} brevis_x;` closing a typedef'd body.
        let typedef = l
            .strip_prefix("typedef ")
            .filter(|r| r.ends_with(';'))
            .or_else(|| l.strip_prefix("} ").filter(|r| r.ends_with(';')));
        if let Some(rest) = typedef {
            let name = rest.trim_end_matches(';').split_whitespace().last().unwrap();
            assert!(name.starts_with("brevis_"), "{line}");
        }
    }
    for name in declared_functions(GENERATED) {
        assert!(name.starts_with("brevis_"), "{name}");
    }
}

/// The functions the header declares (a declaration starts at column 0: `int brevis_x(...`).
fn declared_functions(header: &str) -> std::collections::BTreeSet<String> {
    header
        .lines()
        .filter(|l| !l.starts_with([' ', '#', '/', '*', '}']) && !l.starts_with("typedef"))
        .filter_map(|l| Some(l[..l.find('(')?].rsplit([' ', '*']).next()?.to_string()))
        .collect()
}

/// C source without its comments and string literals (so that a name in either is no call).
fn c_code_only(src: &str) -> String {
    let (b, mut out, mut i) = (src.as_bytes(), String::new(), 0);
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            i += src[i..].find("*/").map_or(b.len() - i, |e| e + 2);
        } else if b[i..].starts_with(b"//") {
            i += src[i..].find('\n').unwrap_or(b.len() - i);
        } else if b[i] == b'"' || b[i] == b'\'' {
            let q = b[i];
            i += 1;
            while i < b.len() && b[i] != q {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The `brevis_*` names followed by `(` in C code: the functions it calls.
fn called_functions(code: &str) -> std::collections::BTreeSet<String> {
    let mut called = std::collections::BTreeSet::new();
    for (at, _) in code.match_indices("brevis_") {
        if at > 0 && (code.as_bytes()[at - 1].is_ascii_alphanumeric() || code.as_bytes()[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if code[at + name.len()..].trim_start().starts_with('(') {
            called.insert(name);
        }
    }
    called
}

/// ctests/test_api.c calls every function of the header, so that its claim cannot drift when a
/// function is added.
#[test]
fn the_c_tests_call_every_function_of_the_header() {
    let declared = declared_functions(GENERATED);
    assert!(declared.len() >= 23 && declared.contains("brevis_archive_open_with_options"), "{declared:?}");
    let test_api =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ctests/test_api.c")).unwrap();
    let called = called_functions(&c_code_only(&test_api));
    let missing: Vec<&String> = declared.difference(&called).collect();
    assert!(missing.is_empty(), "ctests/test_api.c never calls {missing:?}");
    // The scanner itself: comments, strings and declarations without a call do not count.
    let probe = "/* brevis_a(1) */ // brevis_b()\n x = \"brevis_c()\"; y = brevis_d (2); z = my_brevis_e(3); brevis_f;";
    let found = called_functions(&c_code_only(probe));
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["brevis_d"]);
}
