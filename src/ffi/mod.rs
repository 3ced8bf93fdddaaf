//! The C ABI: the only module with C types. Each function wraps the safe core (`crate::compress`,
//! `crate::Archive`) and follows one set of rules, written down once in the header
//! (`include/brevis.h`, generated from this module by cbindgen in `build.rs`):
//!
//! - every exported symbol starts with `brevis_` / `BREVIS_`;
//! - functions return an `int` status: `BREVIS_OK` (0) or one of the fixed negative codes below,
//!   which are never renumbered nor reused;
//! - results go through out-pointers, written only on success; every pointer is NULL-checked
//!   (a NULL buffer with a length of 0 is an empty buffer);
//! - every body runs inside `catch_unwind`: a panic becomes `BREVIS_ERROR_PANIC`, never an unwind
//!   into the host or an abort;
//! - `*_free(NULL)` is a no-op; handles are opaque, and new settings arrive as new
//!   `brevis_option` keys, so no public struct changes size.
//!
//! Test hook (`options::test_hook`, in the builds `cargo test` makes only): a `brevis_options_set`
//! key outside `brevis_option`, kept out of the header, makes the next call that uses the handle
//! panic inside a worker thread, to show that the panic comes back as `BREVIS_ERROR_PANIC`.

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_camel_case_types)]

// The header lists these modules' functions in this order.
mod options;

mod codec;

mod archive;

mod reader;

mod family;

pub use archive::*;
pub use codec::*;
pub use family::*;
pub use options::*;
pub use reader::*;

use crate::error::Error;
use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Status codes: what every `int`-returning function returns. The values are fixed and never
/// reused; `brevis_error_string` describes each.
#[repr(C)]
pub enum brevis_status {
    /// Success.
    BREVIS_OK = 0,
    /// A required pointer argument is NULL.
    BREVIS_ERROR_NULL_POINTER = -1,
    /// An argument is out of range: unknown option key or bad value, tensor index past the end,
    /// a request the library cannot meet.
    BREVIS_ERROR_INVALID_ARGUMENT = -2,
    /// The destination buffer is too small (see `brevis_compress_bound`,
    /// `brevis_decompressed_size`, `brevis_tensor_info.nbytes`).
    BREVIS_ERROR_DST_TOO_SMALL = -3,
    /// The input is not a Brevis archive, or it is truncated or damaged.
    BREVIS_ERROR_CORRUPT = -4,
    /// The archive was written by a newer or unknown format version.
    BREVIS_ERROR_UNSUPPORTED = -5,
    /// Decoded data does not match its checksum.
    BREVIS_ERROR_CHECKSUM = -6,
    /// A size limit was exceeded (`BREVIS_OPTION_MEMORY_LIMIT`, or a size that does not fit in
    /// memory).
    BREVIS_ERROR_LIMIT = -7,
    /// A file could not be read or written (file helpers only).
    BREVIS_ERROR_IO = -8,
    /// No tensor has that name.
    BREVIS_ERROR_NOT_FOUND = -9,
    /// Internal error: the library panicked; the panic was caught and the call had no effect on its
    /// out-pointers. Please report it.
    BREVIS_ERROR_PANIC = -10,
}

// The codes as the `int`s that cross the ABI (the header has only the enum).
/// [`brevis_status::BREVIS_OK`] as an `int`.
pub const BREVIS_OK: c_int = brevis_status::BREVIS_OK as c_int;
/// [`brevis_status::BREVIS_ERROR_NULL_POINTER`] as an `int`.
pub const BREVIS_ERROR_NULL_POINTER: c_int = brevis_status::BREVIS_ERROR_NULL_POINTER as c_int;
/// [`brevis_status::BREVIS_ERROR_INVALID_ARGUMENT`] as an `int`.
pub const BREVIS_ERROR_INVALID_ARGUMENT: c_int = brevis_status::BREVIS_ERROR_INVALID_ARGUMENT as c_int;
/// [`brevis_status::BREVIS_ERROR_DST_TOO_SMALL`] as an `int`.
pub const BREVIS_ERROR_DST_TOO_SMALL: c_int = brevis_status::BREVIS_ERROR_DST_TOO_SMALL as c_int;
/// [`brevis_status::BREVIS_ERROR_CORRUPT`] as an `int`.
pub const BREVIS_ERROR_CORRUPT: c_int = brevis_status::BREVIS_ERROR_CORRUPT as c_int;
/// [`brevis_status::BREVIS_ERROR_UNSUPPORTED`] as an `int`.
pub const BREVIS_ERROR_UNSUPPORTED: c_int = brevis_status::BREVIS_ERROR_UNSUPPORTED as c_int;
/// [`brevis_status::BREVIS_ERROR_CHECKSUM`] as an `int`.
pub const BREVIS_ERROR_CHECKSUM: c_int = brevis_status::BREVIS_ERROR_CHECKSUM as c_int;
/// [`brevis_status::BREVIS_ERROR_LIMIT`] as an `int`.
pub const BREVIS_ERROR_LIMIT: c_int = brevis_status::BREVIS_ERROR_LIMIT as c_int;
/// [`brevis_status::BREVIS_ERROR_IO`] as an `int`.
pub const BREVIS_ERROR_IO: c_int = brevis_status::BREVIS_ERROR_IO as c_int;
/// [`brevis_status::BREVIS_ERROR_NOT_FOUND`] as an `int`.
pub const BREVIS_ERROR_NOT_FOUND: c_int = brevis_status::BREVIS_ERROR_NOT_FOUND as c_int;
/// [`brevis_status::BREVIS_ERROR_PANIC`] as an `int`.
pub const BREVIS_ERROR_PANIC: c_int = brevis_status::BREVIS_ERROR_PANIC as c_int;

/// A failed call: the status code to return.
type Status = c_int;

fn status_of(e: &Error) -> Status {
    match e {
        Error::Corrupt(_) => BREVIS_ERROR_CORRUPT,
        Error::Unsupported(_) => BREVIS_ERROR_UNSUPPORTED,
        Error::Checksum(_) => BREVIS_ERROR_CHECKSUM,
        Error::Invalid(_) => BREVIS_ERROR_INVALID_ARGUMENT,
        Error::Limit(_) => BREVIS_ERROR_LIMIT,
        Error::Io(_) => BREVIS_ERROR_IO,
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        status_of(&e)
    }
}

/// Runs an exported body: its error or a caught panic becomes a status code.
fn guard(f: impl FnOnce() -> Result<(), Status>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => BREVIS_OK,
        Ok(Err(code)) => code,
        Err(_) => BREVIS_ERROR_PANIC,
    }
}

/// Like [`guard`], for functions that return a value rather than a status.
fn guard_value<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// `(p, len)` as a slice; `(NULL, 0)` is the empty slice.
///
/// # Safety
/// A non-NULL `p` must be valid for reads of `len` bytes for `'a`.
unsafe fn in_slice<'a>(p: *const u8, len: usize) -> Result<&'a [u8], Status> {
    if p.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(BREVIS_ERROR_NULL_POINTER) };
    }
    if len > isize::MAX as usize {
        return Err(BREVIS_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL, and valid for `len` bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// `(p, len)` as a writable slice; `(NULL, 0)` is the empty slice.
///
/// # Safety
/// A non-NULL `p` must be valid for writes of `len` bytes for `'a`, and not overlap any other
/// slice in use.
unsafe fn out_slice<'a>(p: *mut u8, len: usize) -> Result<&'a mut [u8], Status> {
    if p.is_null() {
        return if len == 0 { Ok(&mut []) } else { Err(BREVIS_ERROR_NULL_POINTER) };
    }
    if len > isize::MAX as usize {
        return Err(BREVIS_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL, and valid for `len` bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A required out-pointer, NULL-checked.
///
/// # Safety
/// A non-NULL `p` must be valid for a write of `T`.
unsafe fn out_ref<'a, T>(p: *mut T) -> Result<&'a mut T, Status> {
    // SAFETY: by the caller's contract.
    unsafe { p.as_mut() }.ok_or(BREVIS_ERROR_NULL_POINTER)
}

/// A required C string, NULL-checked (its bytes, without the terminating NUL).
///
/// # Safety
/// A non-NULL `p` must point to a NUL-terminated string valid for `'a`.
unsafe fn in_cstr<'a>(p: *const c_char) -> Result<&'a [u8], Status> {
    if p.is_null() {
        return Err(BREVIS_ERROR_NULL_POINTER);
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
}

/// A C argument, as the caller passed it (pointers and sizes), and the checked Rust value it
/// stands for.
trait Arg<'a> {
    type Checked;
    /// NULL-checks and converts the argument.
    ///
    /// # Safety
    /// Its pointers must be valid as the entry point's own `# Safety` section says, for `'a`.
    unsafe fn check(self) -> Result<Self::Checked, Status>;
}

/// A buffer to read, `(p, len)`; `(NULL, 0)` is the empty buffer.
struct In(*const u8, usize);

/// A buffer to write, `(p, capacity)`, and the required out-pointer that receives the size of
/// what was written.
struct Out(*mut u8, usize, *mut usize);

/// A required out-pointer.
struct Ref<T>(*mut T);

/// A checked [`Out`]: the result and its size are written together, on success only.
struct Output<'a> {
    buf: &'a mut [u8],
    size: &'a mut usize,
}

impl Output<'_> {
    fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Copies `bytes` into the buffer and sets the size (`BREVIS_ERROR_DST_TOO_SMALL` if they
    /// do not fit).
    fn put(self, bytes: &[u8]) -> Result<(), Status> {
        self.fill(bytes.len() as u64, |b| {
            b.copy_from_slice(bytes);
            Ok(())
        })
    }

    /// Lets `write` fill the first `n` bytes of the buffer (`BREVIS_ERROR_DST_TOO_SMALL`
    /// before it runs if they do not fit), then sets the size if it succeeded.
    fn fill(self, n: u64, write: impl FnOnce(&mut [u8]) -> Result<(), Status>) -> Result<(), Status> {
        if n > self.buf.len() as u64 {
            return Err(BREVIS_ERROR_DST_TOO_SMALL);
        }
        write(&mut self.buf[..n as usize])?;
        *self.size = n as usize;
        Ok(())
    }
}

impl<'a> Arg<'a> for In {
    type Checked = &'a [u8];
    unsafe fn check(self) -> Result<&'a [u8], Status> {
        // SAFETY: by the caller's contract.
        unsafe { in_slice(self.0, self.1) }
    }
}

impl<'a> Arg<'a> for Out {
    type Checked = Output<'a>;
    unsafe fn check(self) -> Result<Output<'a>, Status> {
        // SAFETY (both): by the caller's contract.
        let buf = unsafe { out_slice(self.0, self.1) }?;
        let size = unsafe { out_ref(self.2) }?;
        Ok(Output { buf, size })
    }
}

impl<'a, T: 'a> Arg<'a> for Ref<T> {
    type Checked = &'a mut T;
    unsafe fn check(self) -> Result<&'a mut T, Status> {
        // SAFETY: by the caller's contract.
        unsafe { out_ref(self.0) }
    }
}

/// Two arguments checked in order, as one (an input and its reference, say).
impl<'a, A: Arg<'a>, B: Arg<'a>> Arg<'a> for (A, B) {
    type Checked = (A::Checked, B::Checked);
    unsafe fn check(self) -> Result<Self::Checked, Status> {
        // SAFETY (both): by the caller's contract.
        Ok((unsafe { self.0.check() }?, unsafe { self.1.check() }?))
    }
}

/// The preamble of the entry points that take an input, an output and settings: inside
/// [`guard`], checks `input` then `output` (NULL pointers, sizes), takes the settings (a copy
/// of `*opts`, the defaults for NULL; the test hook runs here), then runs `body`. Outputs are
/// written by `body` on success only.
///
/// # Safety
/// The arguments' pointers must be valid as the entry point's `# Safety` section says, for
/// `'a`; `opts` must be NULL or a live handle.
unsafe fn entry<'a, I: Arg<'a>, O: Arg<'a>>(
    input: I,
    output: O,
    opts: *const brevis_options,
    body: impl FnOnce(I::Checked, O::Checked, &brevis_options) -> Result<(), Status>,
) -> c_int {
    guard(|| {
        // SAFETY (all three): by the caller's contract.
        let input = unsafe { input.check() }?;
        let output = unsafe { output.check() }?;
        let settings = unsafe { settings(opts) };
        body(input, output, &settings)
    })
}

/// A static message for a status code ("unknown error code" for a code this library does not
/// define). Never NULL; the string must not be freed.
#[no_mangle]
pub extern "C" fn brevis_error_string(code: c_int) -> *const c_char {
    let s: &'static [u8] = match code {
        BREVIS_OK => b"no error\0",
        BREVIS_ERROR_NULL_POINTER => b"a required pointer argument is NULL\0",
        BREVIS_ERROR_INVALID_ARGUMENT => b"invalid argument\0",
        BREVIS_ERROR_DST_TOO_SMALL => b"destination buffer is too small\0",
        BREVIS_ERROR_CORRUPT => b"not a Brevis archive, or the archive is truncated or damaged\0",
        BREVIS_ERROR_UNSUPPORTED => b"unsupported archive format version\0",
        BREVIS_ERROR_CHECKSUM => b"checksum mismatch\0",
        BREVIS_ERROR_LIMIT => b"size limit exceeded\0",
        BREVIS_ERROR_IO => b"file could not be read or written\0",
        BREVIS_ERROR_NOT_FOUND => b"no tensor has that name\0",
        BREVIS_ERROR_PANIC => b"internal error (a panic was caught)\0",
        _ => b"unknown error code\0",
    };
    s.as_ptr().cast()
}

/// The library's version, "MAJOR.MINOR.PATCH" (compare with `BREVIS_VERSION_STRING`, the
/// version of the header). Never NULL; the string must not be freed.
#[no_mangle]
pub extern "C" fn brevis_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library's version as `MAJOR * 10000 + MINOR * 100 + PATCH` (compare with
/// `BREVIS_VERSION_NUMBER`).
#[no_mangle]
pub extern "C" fn brevis_version_number() -> u32 {
    const fn num(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut v = 0u32;
        let mut i = 0;
        while i < b.len() {
            v = v * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        v
    }
    const N: u32 = num(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + num(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + num(env!("CARGO_PKG_VERSION_PATCH"));
    N
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn every_code_has_its_own_message() {
        let codes = [
            BREVIS_OK,
            BREVIS_ERROR_NULL_POINTER,
            BREVIS_ERROR_INVALID_ARGUMENT,
            BREVIS_ERROR_DST_TOO_SMALL,
            BREVIS_ERROR_CORRUPT,
            BREVIS_ERROR_UNSUPPORTED,
            BREVIS_ERROR_CHECKSUM,
            BREVIS_ERROR_LIMIT,
            BREVIS_ERROR_IO,
            BREVIS_ERROR_NOT_FOUND,
            BREVIS_ERROR_PANIC,
        ];
        // SAFETY: brevis_error_string returns a pointer to a static NUL-terminated string.
        let unknown = unsafe { CStr::from_ptr(brevis_error_string(1)) };
        let mut seen = std::collections::HashSet::new();
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(c, -(i as c_int), "codes are fixed and dense");
            // SAFETY: as above, a static NUL-terminated string.
            let m = unsafe { CStr::from_ptr(brevis_error_string(c)) };
            assert_ne!(m, unknown);
            assert!(seen.insert(m.to_bytes().to_vec()));
        }
    }

    #[test]
    fn version() {
        // SAFETY: brevis_version returns a pointer to a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(brevis_version()) }.to_str().unwrap();
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        let parts: Vec<u32> = v.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(brevis_version_number(), parts[0] * 10000 + parts[1] * 100 + parts[2]);
    }
}
