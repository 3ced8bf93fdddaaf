//! `brevis_options`: an opaque settings handle with enum-keyed setters.

use super::*;
use crate::options::{DecodeOptions, Options};

/// Settings for compression and decompression, set one key at a time with `brevis_options_set`.
/// Create with `brevis_options_new`, release with `brevis_options_free`. A handle may be shared
/// by threads that only read it (pass it to calls); setting a key while another thread uses the
/// handle is a data race.
#[derive(Clone)]
pub struct brevis_options {
    pub(crate) compress: Options,
    pub(crate) decode: DecodeOptions,
    /// `BREVIS_OPTION_PRESERVE`: the file functions record and give outputs the input's mode
    /// and modification time.
    pub(crate) preserve: bool,
    /// The test hook's setting (see [`test_hook`]).
    #[cfg(any(test, feature = "test-hooks"))]
    test_panic: bool,
}

/// Test hook: `brevis_options_set(o, test_hook::KEY, 1)` makes the next call that uses `o` panic
/// inside a worker thread, to show that the panic comes back as `BREVIS_ERROR_PANIC`. The key is
/// outside `brevis_option` and kept out of the header. It is compiled only into the library's
/// own unit tests and into builds with the `test-hooks` feature, which Cargo.toml's self
/// dev-dependency turns on for `cargo test` alone: a `cargo build` library rejects the key as it
/// rejects any unknown key (tests/ffi_release.rs checks the release library).
#[cfg(any(test, feature = "test-hooks"))]
pub(crate) mod test_hook {
    use std::ffi::c_int;

    /// The test hook's key, 0x7e570001 (ctests/test_api.c and tests/ffi_api.rs use the number).
    pub const KEY: c_int = 0x7e57_0001;

    /// Panics inside a rayon worker thread.
    pub fn panic_in_a_worker() {
        use rayon::prelude::*;
        (0..4).into_par_iter().for_each(|i| {
            if i == 3 {
                panic!("brevis: panic requested through the test-only option");
            }
        });
    }
}

impl brevis_options {
    fn defaults() -> Self {
        brevis_options {
            compress: Options::default(),
            decode: DecodeOptions::default(),
            preserve: true,
            #[cfg(any(test, feature = "test-hooks"))]
            test_panic: false,
        }
    }

    /// Runs the test hook when it is set (and compiled in).
    fn run_test_hook(&self) {
        #[cfg(any(test, feature = "test-hooks"))]
        if self.test_panic {
            test_hook::panic_in_a_worker();
        }
    }
}

/// The settings of one call: a copy of what `opts` points to, or the defaults for NULL. Runs
/// the test hook.
///
/// # Safety
/// A non-NULL `opts` must come from `brevis_options_new` and not be freed.
pub(crate) unsafe fn settings(opts: *const brevis_options) -> brevis_options {
    // SAFETY: by the caller's contract.
    let o = unsafe { opts.as_ref() }.map_or_else(brevis_options::defaults, brevis_options::clone);
    o.run_test_hook();
    o
}

/// Keys of `brevis_options_set`. The values are fixed and never reused.
#[repr(C)]
pub enum brevis_option {
    /// Worker threads for compression and decompression, and the size of the pool in which a
    /// handle of `brevis_archive_open_with_options` decodes tensors; 0 (the default) uses every
    /// core. Range 0 to 1024.
    BREVIS_OPTION_THREADS = 1,
    /// Target bytes of original data per chunk; chunks decode independently, and smaller chunks
    /// give finer random access at some cost in size. Range 1 to 67108864 (64 MiB); default
    /// 1048576.
    BREVIS_OPTION_CHUNK_BYTES = 2,
    /// Search budget: elements of each tensor on which candidate programs are compared. More is
    /// slower and may find smaller programs. At least 1; default 131072 (the default level's;
    /// `fast` uses at most 32768, `max` twice the value).
    BREVIS_OPTION_SAMPLE_ELEMS = 3,
    /// Memory limit, in bytes. Decompression: bounds what reading an archive's index may
    /// allocate (every call that reads an archive), the largest tensor
    /// `brevis_archive_decode_tensor` decodes from a handle of `brevis_archive_open_with_options`,
    /// and the working memory of `brevis_decompress_file` (the chunks decoded at once: the output
    /// is streamed to the file, never held whole). Compression: the working memory to aim for
    /// (the chunks coded at once; `brevis_compress_file` reads the input in windows, whatever its
    /// size) and the largest safetensors header read. An index or a header above the limit fails
    /// with `BREVIS_ERROR_LIMIT`. At least 0; default 2^40 for decompression, 1073741824 (1 GiB)
    /// for compression.
    BREVIS_OPTION_MEMORY_LIMIT = 4,
    /// 1 (the default): decompression verifies the whole-file checksum, which covers every chunk
    /// (each chunk's own is checked only if it fails, to name the damaged one); 0: it does not,
    /// and checks each chunk's checksum as it is decoded.
    BREVIS_OPTION_VERIFY = 5,
    /// Compression level: how the search trades size against decode time. 1 (fast): programs
    /// that decode fastest, for a little more size; 2 (the default): close to the smallest
    /// programs, without decoders that are much slower for little gain; 3 (max): the smallest
    /// programs. Any level decodes with the same functions.
    BREVIS_OPTION_LEVEL = 6,
    /// 1 (the default): `brevis_compress_file` records the input's permission bits and
    /// modification time in the archive, and gives them to the archive file; and
    /// `brevis_decompress_file` gives the output the original's, as the archive records them
    /// (else the archive file's). Outputs get the permission bits under the process's umask
    /// and, when the process runs as root, the input's owner. 0: outputs are plain new files
    /// (mode 0666 under the umask, the current time) and the archive records nothing, as
    /// `brevis_compress` of the same bytes. The buffer functions never read or record them.
    BREVIS_OPTION_PRESERVE = 7,
}

/// How a `brevis_option` crosses the ABI: a plain int, so that a value outside the enum (which
/// C allows) is an error code rather than undefined behaviour. Named `brevis_option` in the
/// header.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct BrevisOptionKey(pub c_int);

/// A new settings handle with every key at its default, or NULL if it cannot be allocated.
#[no_mangle]
pub extern "C" fn brevis_options_new() -> *mut brevis_options {
    guard_value(std::ptr::null_mut(), || Box::into_raw(Box::new(brevis_options::defaults())))
}

/// Sets one key. Returns `BREVIS_OK`, `BREVIS_ERROR_NULL_POINTER`, or
/// `BREVIS_ERROR_INVALID_ARGUMENT` for an unknown key or a value out of the key's range (the
/// setting is then unchanged).
///
/// # Safety
/// `o` must be NULL or come from `brevis_options_new` and not be freed.
#[no_mangle]
pub unsafe extern "C" fn brevis_options_set(o: *mut brevis_options, key: BrevisOptionKey, value: i64) -> c_int {
    guard(|| {
        // SAFETY: by the caller's contract.
        let o = unsafe { out_ref(o) }?;
        let range =
            |lo: i64, hi: i64| if (lo..=hi).contains(&value) { Ok(value) } else { Err(BREVIS_ERROR_INVALID_ARGUMENT) };
        use brevis_option::*;
        match key.0 {
            k if k == BREVIS_OPTION_THREADS as c_int => {
                let n = range(0, 1024)? as usize;
                o.compress.threads = n;
                o.decode.threads = n;
            }
            k if k == BREVIS_OPTION_CHUNK_BYTES as c_int => {
                o.compress.chunk_bytes = range(1, 64 << 20)? as usize;
            }
            k if k == BREVIS_OPTION_SAMPLE_ELEMS as c_int => {
                o.compress.sample_elems = range(1, isize::MAX as i64)? as usize;
            }
            k if k == BREVIS_OPTION_MEMORY_LIMIT as c_int => {
                let n = range(0, i64::MAX)? as u64;
                o.compress.memory_limit = n;
                o.decode.memory_limit = n;
            }
            k if k == BREVIS_OPTION_VERIFY as c_int => o.decode.verify = range(0, 1)? == 1,
            k if k == BREVIS_OPTION_LEVEL as c_int => {
                o.compress.level = crate::level::Level::ALL[range(1, 3)? as usize - 1];
            }
            k if k == BREVIS_OPTION_PRESERVE as c_int => o.preserve = range(0, 1)? == 1,
            #[cfg(any(test, feature = "test-hooks"))]
            test_hook::KEY => o.test_panic = range(0, 1)? == 1,
            _ => return Err(BREVIS_ERROR_INVALID_ARGUMENT),
        }
        Ok(())
    })
}

/// Releases a settings handle; NULL is a no-op.
///
/// # Safety
/// `o` must be NULL or come from `brevis_options_new`, and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn brevis_options_free(o: *mut brevis_options) {
    guard_value((), || {
        if !o.is_null() {
            // SAFETY: allocated by `brevis_options_new`, freed once by the caller's contract.
            drop(unsafe { Box::from_raw(o) });
        }
    })
}
