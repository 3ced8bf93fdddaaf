//! `brevis_reader`: the original of an archive file read at any offset, and as a C `FILE *`, for
//! runtimes that load models through a file handle (llama.cpp's `llama_model_load_from_file_ptr`).

use super::codec::path_of;
use super::*;
use crate::archive::Reader;
use std::sync::atomic::{AtomicI32, Ordering};

/// An archive file opened for reads of its original at any offset (`brevis_reader_open`). Any
/// number of threads may read at once.
pub struct brevis_reader {
    reader: Reader,
    /// The status of the first read through a `FILE *` of `brevis_reader_fopen` that failed.
    error: AtomicI32,
}

/// Opens the archive file at `path` for reads of its original (`brevis_reader_read_at`,
/// `brevis_reader_fopen`) and sets `*out` to a new handle (free it with `brevis_reader_free`).
/// Only the archive's index is read here; each read decodes the chunks it covers, each checked
/// against its checksum. A read of one tensor's bytes (what a model loader does, tensor after
/// tensor) also starts a thread that decodes the tensors after it in the file into a staging
/// area of at most 16 MiB (a quarter of `BREVIS_OPTION_MEMORY_LIMIT` when that is smaller), from
/// which the next reads are copied. `ref_path`: the file the archive was made against (the same
/// file, or an archive of it), or NULL; an archive made against a reference without it, or with
/// another file, fails with `BREVIS_ERROR_INVALID_ARGUMENT`. The archive (and reference) file
/// must not change while the handle is open. `opts` NULL uses the defaults
/// (`BREVIS_OPTION_MEMORY_LIMIT` bounds the index).
///
/// # Safety
/// `path` must be a NUL-terminated string, `ref_path` NULL or one, `opts` NULL or a live
/// handle, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_reader_open(
    path: *const c_char,
    ref_path: *const c_char,
    opts: *const brevis_options,
    out: *mut *mut brevis_reader,
) -> c_int {
    guard(|| {
        // SAFETY (all four): by the caller's contract.
        let path = unsafe { path_of(path) }?;
        let reference = if ref_path.is_null() { None } else { Some(unsafe { path_of(ref_path) }?) };
        let out = unsafe { out_ref(out) }?;
        let o = unsafe { settings(opts) };
        let reader = Reader::open(&path, reference.as_deref(), &o.decode)?;
        *out = Box::into_raw(Box::new(brevis_reader { reader, error: AtomicI32::new(BREVIS_OK) }));
        Ok(())
    })
}

/// Sets `*size` to the size of the original, in bytes.
///
/// # Safety
/// `r` must be NULL or a live handle, `size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_reader_size(r: *const brevis_reader, size: *mut u64) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let r = unsafe { r.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let size = unsafe { out_ref(size) }?;
        *size = r.reader.size();
        Ok(())
    })
}

/// Decodes bytes `[offset, offset + len)` of the original into `dst`; a range past the original's
/// end fails with `BREVIS_ERROR_INVALID_ARGUMENT`. On error the contents of `dst` are
/// unspecified.
///
/// # Safety
/// `r` must be NULL or a live handle, `dst` valid for `len` bytes (NULL when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn brevis_reader_read_at(
    r: *const brevis_reader,
    offset: u64,
    dst: *mut u8,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let r = unsafe { r.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let dst = unsafe { out_slice(dst, len) }?;
        r.reader.read_at(offset, dst)?;
        Ok(())
    })
}

/// Sets `*out` to a new read-only C stream (`FILE *`, glibc's or musl's `fopencookie`) over the
/// original: `fread` decodes what it reads, `fseek` and `ftell` move over the original's bytes.
/// The stream's buffer is refilled with one chunk at a time, so that reading a tensor from its
/// start decodes each of its chunks once, straight into that buffer, with the read-ahead of
/// `brevis_reader_open`, which starts here on the file's first chunks (a loader reads the
/// header first, then the tensors); it reserves address space for the whole original (an anonymous
/// mapping with no memory reserved, of which only a chunk's length is ever touched). A program
/// that takes a `FILE *` reads the original through it without the original being on disk or in
/// memory whole; llama.cpp loads a model so (`llama_model_load_from_file_ptr` with mmap off: the
/// stream has no descriptor to map). A failed read sets `errno` to `EIO`, and `brevis_reader_error` gives its status. The
/// stream borrows `r`: `fclose` it before `brevis_reader_free`. Linux only: elsewhere
/// `BREVIS_ERROR_UNSUPPORTED`.
///
/// # Safety
/// `r` must be a live handle that outlives the stream, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_reader_fopen(r: *mut brevis_reader, out: *mut *mut libc::FILE) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let reader = unsafe { r.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let out = unsafe { out_ref(out) }?;
        #[cfg(target_os = "linux")]
        {
            *out = stream::open(reader)?;
            reader.reader.read_ahead();
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (reader, out);
            Err(BREVIS_ERROR_UNSUPPORTED)
        }
    })
}

/// The status of the first read through a stream of `brevis_reader_fopen` that failed
/// (`BREVIS_ERROR_CHECKSUM` for a damaged archive, say), or `BREVIS_OK` when none has (also for
/// NULL).
///
/// # Safety
/// `r` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_reader_error(r: *const brevis_reader) -> c_int {
    // SAFETY: by the caller's contract.
    guard_value(BREVIS_ERROR_PANIC, || unsafe { r.as_ref() }.map_or(BREVIS_OK, |r| r.error.load(Ordering::Relaxed)))
}

/// Releases a reader handle; NULL is a no-op. Streams of `brevis_reader_fopen` must be closed
/// first.
///
/// # Safety
/// `r` must be NULL or come from `brevis_reader_open`, and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn brevis_reader_free(r: *mut brevis_reader) {
    if !r.is_null() {
        // SAFETY: from `Box::into_raw` in `brevis_reader_open`, by the caller's contract.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(r) })));
    }
}

/// The `FILE *` of `brevis_reader_fopen`: glibc's and musl's `fopencookie`, whose functions
/// read, seek and close a cookie (the reader and a position). Not part of the header:
///
/// cbindgen:ignore
#[cfg(target_os = "linux")]
mod stream {
    use super::*;
    use std::ffi::c_void;

    type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize;
    type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize;
    type SeekFn = unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int;
    type CloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

    /// `cookie_io_functions_t` of `<stdio.h>`.
    #[repr(C)]
    struct CookieIoFunctions {
        read: Option<ReadFn>,
        write: Option<WriteFn>,
        seek: Option<SeekFn>,
        close: Option<CloseFn>,
    }

    extern "C" {
        fn fopencookie(cookie: *mut c_void, mode: *const c_char, funcs: CookieIoFunctions) -> *mut libc::FILE;
    }

    struct Cookie {
        reader: *const brevis_reader,
        pos: u64,
        /// The stream's buffer (stdio reads through it whatever the mode; see `open`).
        buf: Buffer,
    }

    /// The stream's buffer: address space reserved for the whole original, of which reads touch
    /// only the start (a piece at a time), or where that cannot be reserved, a piece's length.
    struct Buffer {
        ptr: *mut u8,
        len: usize,
        mapped: bool,
    }

    impl Buffer {
        fn new(size: u64, piece_max: usize) -> Buffer {
            let len = usize::try_from(size.next_power_of_two()).unwrap_or(usize::MAX).max(piece_max).max(64 << 10);
            let len = len.checked_next_power_of_two().unwrap_or(len);
            // SAFETY: a new private anonymous mapping, no memory reserved for it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Buffer { ptr: p.cast(), len, mapped: true };
            }
            let len = piece_max.max(64 << 10);
            let v = Box::into_raw(vec![0u8; len].into_boxed_slice());
            Buffer { ptr: v.cast(), len, mapped: false }
        }
    }

    impl Drop for Buffer {
        fn drop(&mut self) {
            if self.mapped {
                // SAFETY: the mapping of `new`, unused from here on.
                unsafe { libc::munmap(self.ptr.cast(), self.len) };
            } else {
                // SAFETY: the box of `new`.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
            }
        }
    }

    pub(super) fn open(reader: &brevis_reader) -> Result<*mut libc::FILE, Status> {
        // glibc reads a cookie stream through its buffer, one refill at a time, whatever the
        // size of an fread: a refill of a piece at a time (`Reader::read_some`) takes a tensor's
        // chunks whole, each decoded straight into the buffer (or copied from the read-ahead),
        // and never reads past the end of what was asked into the next tensor. The buffer is at
        // least the longest piece. Its length is a power of two at least the original's size:
        // glibc's fseek seeks to the buffer-sized block that holds the target (offset & ~(len -
        // 1)) and reads from there, which for any other length is the middle of some chunk
        // (decoded for nothing); with this length the block is always the file's start, whose
        // read gives one byte (`read`), after which glibc seeks the rest of the way exactly.
        let buf = Buffer::new(reader.reader.size(), reader.reader.piece_max());
        let cookie = Box::into_raw(Box::new(Cookie { reader, pos: 0, buf }));
        let funcs = CookieIoFunctions { read: Some(read), write: None, seek: Some(seek), close: Some(close) };
        // SAFETY: `cookie` is a live box that `close` frees; the mode is NUL-terminated.
        let f = unsafe { fopencookie(cookie.cast(), c"rb".as_ptr(), funcs) };
        if f.is_null() {
            // SAFETY: not handed to a stream.
            drop(unsafe { Box::from_raw(cookie) });
            return Err(BREVIS_ERROR_LIMIT);
        }
        // SAFETY: `f` is a new stream, not used yet; the buffer lives in the cookie, which
        // `close` frees once stdio is done with the stream.
        unsafe {
            let buf = &(*cookie).buf;
            libc::setvbuf(f, buf.ptr.cast(), libc::_IOFBF, buf.len);
        }
        Ok(f)
    }

    fn set_errno(e: c_int) {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = e };
    }

    unsafe extern "C" fn read(cookie: *mut c_void, buf: *mut c_char, size: usize) -> isize {
        let r = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the cookie of `open`, used by one stream operation at a time (the stream's
            // lock); `buf` is valid for `size` bytes (stdio's contract).
            let c = unsafe { &mut *cookie.cast::<Cookie>() };
            let r = unsafe { &*c.reader };
            // From the start, one byte: see `open`.
            let most = if c.pos == 0 { 1 } else { size as u64 };
            let n = r.reader.size().saturating_sub(c.pos).min(most) as usize;
            if n == 0 {
                return Ok(0);
            }
            // SAFETY: as above.
            let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
            match r.reader.read_some(c.pos, out) {
                Ok(n) => {
                    c.pos += n as u64;
                    Ok(n as isize)
                }
                Err(e) => {
                    let _ = r.error.compare_exchange(BREVIS_OK, status_of(&e), Ordering::Relaxed, Ordering::Relaxed);
                    Err(())
                }
            }
        }));
        match r {
            Ok(Ok(n)) => n,
            _ => {
                set_errno(libc::EIO);
                -1
            }
        }
    }

    unsafe extern "C" fn seek(cookie: *mut c_void, offset: *mut i64, whence: c_int) -> c_int {
        // SAFETY: as in `read`; `offset` is valid (stdio's contract).
        let (c, off) = unsafe { (&mut *cookie.cast::<Cookie>(), &mut *offset) };
        // SAFETY: as in `read`.
        let len = unsafe { &*c.reader }.reader.size();
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => c.pos,
            libc::SEEK_END => len,
            _ => {
                set_errno(libc::EINVAL);
                return -1;
            }
        };
        match base.checked_add_signed(*off).filter(|&p| i64::try_from(p).is_ok()) {
            Some(p) => {
                c.pos = p;
                *off = p as i64;
                0
            }
            None => {
                set_errno(libc::EINVAL);
                -1
            }
        }
    }

    unsafe extern "C" fn close(cookie: *mut c_void) -> c_int {
        // SAFETY: the box of `open`, closed once (stdio's contract).
        drop(unsafe { Box::from_raw(cookie.cast::<Cookie>()) });
        0
    }
}
