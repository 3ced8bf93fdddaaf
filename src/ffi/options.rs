//! `brevis_options`: an opaque settings handle with enum-keyed setters.

use super::*;
use crate::{DecodeOptions, Options};

/// Settings for compression and decompression, set one key at a time with `brevis_options_set`.
/// Create with `brevis_options_new`, release with `brevis_options_free`. A handle may be shared
/// by threads that only read it (pass it to calls); setting a key while another thread uses the
/// handle is a data race.
pub struct brevis_options {
    pub(crate) compress: Options,
    pub(crate) decode: DecodeOptions,
    /// Test hook (see the module documentation).
    test_panic: bool,
}

impl brevis_options {
    fn defaults() -> Self {
        brevis_options { compress: Options::default(), decode: DecodeOptions::default(), test_panic: false }
    }

    /// Panics inside a worker thread when the test hook is set.
    pub(crate) fn maybe_panic(&self) {
        if self.test_panic {
            use rayon::prelude::*;
            (0..4).into_par_iter().for_each(|i| {
                if i == 3 {
                    panic!("brevis: panic requested through the test-only option");
                }
            });
        }
    }
}

/// The settings `opts` points to, or the defaults for NULL.
///
/// # Safety
/// A non-NULL `opts` must come from `brevis_options_new` and not be freed.
pub(crate) unsafe fn options_or_default(opts: *const brevis_options) -> brevis_options {
    // SAFETY: by the caller's contract.
    match unsafe { opts.as_ref() } {
        Some(o) => brevis_options { compress: o.compress.clone(), decode: o.decode.clone(), test_panic: o.test_panic },
        None => brevis_options::defaults(),
    }
}

/// Keys of `brevis_options_set`. The values are fixed and never reused.
#[repr(C)]
pub enum brevis_option {
    /// Worker threads for compression and decompression; 0 (the default) uses every core.
    /// Range 0 to 1024.
    BREVIS_OPTION_THREADS = 1,
    /// Target bytes of original data per chunk; chunks decode independently, and smaller chunks
    /// give finer random access at some cost in size. Range 1 to 67108864 (64 MiB); default
    /// 1048576.
    BREVIS_OPTION_CHUNK_BYTES = 2,
    /// Search budget: elements of each tensor on which candidate programs are compared. More is
    /// slower and may find smaller programs. At least 1; default 262144.
    BREVIS_OPTION_SAMPLE_ELEMS = 3,
    /// Memory limit of decompression, in bytes: bounds what reading an archive's index may
    /// allocate (`brevis_decompress_with_options`, `brevis_decompress_file`) and the output that
    /// `brevis_decompress_file` holds in memory. At least 0; default 2^40.
    BREVIS_OPTION_MEMORY_LIMIT = 4,
    /// 1 (the default): decompression verifies the whole-file checksum; 0: it does not (chunk
    /// checksums are always verified).
    BREVIS_OPTION_VERIFY = 5,
}

/// How a `brevis_option` crosses the ABI: a plain int, so that a value outside the enum (which
/// C allows) is an error code rather than undefined behaviour. Named `brevis_option` in the
/// header.
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct BrevisOptionKey(pub c_int);

/// The test hook's key: outside `brevis_option`, and not in the header.
pub const TEST_PANIC_KEY: c_int = 0x7e57_0001;

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
            k if k == BREVIS_OPTION_MEMORY_LIMIT as c_int => o.decode.memory_limit = range(0, i64::MAX)? as u64,
            k if k == BREVIS_OPTION_VERIFY as c_int => o.decode.verify = range(0, 1)? == 1,
            TEST_PANIC_KEY => o.test_panic = range(0, 1)? == 1,
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
