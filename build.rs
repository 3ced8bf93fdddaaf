//! With the `header` feature (which the test builds turn on), writes the C header,
//! `$OUT_DIR/brevis.h`, from `src/ffi/` with cbindgen (pinned in Cargo.toml, configured by
//! cbindgen.toml). `include/brevis.h` is the checked-in copy: tests/ffi_header.rs fails when the
//! two differ, and `BREVIS_BLESS=1 cargo test --test ffi_header` refreshes it. Without the
//! feature (every downstream build), this does nothing and cbindgen is not compiled.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "header")]
    header::write();
}

#[cfg(feature = "header")]
mod header {
    use std::env;
    use std::path::PathBuf;

    pub fn write() {
        println!("cargo:rerun-if-changed=cbindgen.toml");
        println!("cargo:rerun-if-changed=src/ffi");
        let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
        let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("brevis.h");
        let mut config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
        // The version macros come from Cargo.toml, so the header cannot disagree with the library.
        let v = |k: &str| env::var(k).unwrap();
        let (major, minor, patch) =
            (v("CARGO_PKG_VERSION_MAJOR"), v("CARGO_PKG_VERSION_MINOR"), v("CARGO_PKG_VERSION_PATCH"));
        let number =
            major.parse::<u32>().unwrap() * 10000 + minor.parse::<u32>().unwrap() * 100 + patch.parse::<u32>().unwrap();
        config.after_includes = Some(format!(
            "\n#define BREVIS_VERSION_MAJOR {major}\n#define BREVIS_VERSION_MINOR {minor}\n#define BREVIS_VERSION_PATCH {patch}\n\
             #define BREVIS_VERSION_STRING \"{major}.{minor}.{patch}\"\n\
             /* MAJOR * 10000 + MINOR * 100 + PATCH, as brevis_version_number() returns. */\n\
             #define BREVIS_VERSION_NUMBER {number}"
        ));
        cbindgen::Builder::new()
            .with_config(config)
            .with_src(root.join("src/ffi/mod.rs"))
            .generate()
            .expect("cbindgen could not generate the C header from src/ffi/")
            .write_to_file(&out);
    }
}
