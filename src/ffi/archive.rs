//! `brevis_archive`: random access to the tensors of an archive, for loaders.

use super::*;
use crate::Archive;

/// An opened archive. It borrows the archive bytes given to `brevis_archive_open`, which must
/// stay valid and unchanged until `brevis_archive_free`. Once opened it is never modified: any
/// number of threads may use it at once (for example to decode different tensors).
pub struct brevis_archive {
    archive: Archive<'static>,
    /// Largest tensor `brevis_archive_decode_tensor` decodes (`BREVIS_OPTION_MEMORY_LIMIT`).
    memory_limit: u64,
    /// The pool tensors decode in: `BREVIS_OPTION_THREADS` threads of the handle's own, or
    /// rayon's global pool (every core) for 0.
    pool: Option<rayon::ThreadPool>,
    /// NUL-terminated copies of each tensor's name and dtype, so that `brevis_tensor_info` can
    /// hand out C strings that live as long as the handle.
    names: Vec<Box<[u8]>>,
    dtypes: Vec<Box<[u8]>>,
}

/// What the archive's index says about one tensor. Its pointers stay valid until the archive is
/// freed.
#[repr(C)]
pub struct brevis_tensor_info {
    /// The tensor's name, NUL-terminated; `name_len` bytes long (a name may itself contain NUL
    /// bytes: use `name_len`). A file that is not safetensors, and long gaps between tensors,
    /// appear as tensors with an empty name and an empty dtype.
    pub name: *const c_char,
    pub name_len: usize,
    /// The dtype string, NUL-terminated: the safetensors dtype ("F32", "BF16", ...); for a GGUF
    /// tensor of a quantized or unknown ggml type, its ggml type name ("Q4_1", "GGML_TYPE_<id>").
    pub dtype: *const c_char,
    /// Number of dimensions, and the `ndim` dimensions (NULL when `ndim` is 0).
    pub ndim: usize,
    pub shape: *const u64,
    /// Size of the tensor's data, in bytes: what `brevis_archive_decode_tensor` writes.
    pub nbytes: u64,
    /// Byte offset of the tensor's data in the original file.
    pub offset: u64,
    /// Bytes of the archive that the tensor's data takes.
    pub compressed_bytes: u64,
}

fn c_string(s: &str) -> Box<[u8]> {
    let mut v = Vec::with_capacity(s.len() + 1);
    v.extend_from_slice(s.as_bytes());
    v.push(0);
    v.into_boxed_slice()
}

/// Opens the archive `src[0..src_size)`, checking its header and index, and sets `*out` to a new
/// handle (free it with `brevis_archive_free`). The handle borrows `src`: it must stay valid and
/// unchanged until the handle is freed. No tensor data is decoded here. The handle has the
/// default settings (`brevis_archive_open_with_options` with NULL options).
///
/// # Safety
/// `src` must be valid for `src_size` bytes until the handle is freed; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_open(src: *const u8, src_size: usize, out: *mut *mut brevis_archive) -> c_int {
    // SAFETY: the same contract.
    unsafe { brevis_archive_open_with_options(src, src_size, std::ptr::null(), out) }
}

/// `brevis_archive_open` with settings, which the handle keeps: `BREVIS_OPTION_MEMORY_LIMIT`
/// bounds what reading the index may allocate (`BREVIS_ERROR_LIMIT` here when it does not fit)
/// and the largest tensor `brevis_archive_decode_tensor` decodes (`BREVIS_ERROR_LIMIT` there);
/// `BREVIS_OPTION_THREADS` > 0 gives the handle its own pool of that many worker threads (named
/// `brevis-archive-N`, all started before this call returns), in which every
/// `brevis_archive_decode_tensor` call on it decodes; 0, the default, decodes in the library's
/// shared pool (one thread per core). The pool's threads end at `brevis_archive_free`. Other
/// keys do not apply. `opts` NULL uses the defaults; the handle keeps no pointer to it.
///
/// # Safety
/// `src` must be valid for `src_size` bytes until the handle is freed; `opts` NULL or a live
/// handle; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_open_with_options(
    src: *const u8,
    src_size: usize,
    opts: *const brevis_options,
    out: *mut *mut brevis_archive,
) -> c_int {
    // SAFETY: the caller's contract is `entry`'s; `src` stays valid until `brevis_archive_free`,
    // hence `'static` for the handle, which is the only holder of the slice.
    unsafe {
        entry(In(src, src_size), Ref(out), opts, |src: &'static [u8], out, o| {
            *out = Box::into_raw(Box::new(open(src, &o.decode)?));
            Ok(())
        })
    }
}

/// A new handle on `src`: its index read within the memory limit, the C strings of its names and
/// dtypes, its pool.
fn open(src: &'static [u8], decode: &crate::DecodeOptions) -> Result<brevis_archive, Status> {
    let archive = Archive::open_with_limit(src, decode.memory_limit)?;
    let (mut names, mut dtypes) = (Vec::with_capacity(archive.len()), Vec::with_capacity(archive.len()));
    for i in 0..archive.len() {
        let t = archive.info(i).ok_or(BREVIS_ERROR_PANIC)?;
        names.push(c_string(t.name));
        dtypes.push(c_string(t.dtype));
    }
    let pool = match decode.threads {
        0 => None,
        n => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(|i| format!("brevis-archive-{i}"))
                .build()
                .map_err(|_| BREVIS_ERROR_INVALID_ARGUMENT)?;
            // Every thread has started (and is named) when the handle is returned.
            pool.broadcast(|_| ());
            Some(pool)
        }
    };
    Ok(brevis_archive { archive, memory_limit: decode.memory_limit, pool, names, dtypes })
}

/// The number of tensors in the archive (0 for NULL).
///
/// # Safety
/// `a` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_tensor_count(a: *const brevis_archive) -> usize {
    // SAFETY: by the caller's contract.
    guard_value(0, || unsafe { a.as_ref() }.map_or(0, |a| a.archive.len()))
}

/// Describes tensor `index` (0 to count - 1) in `*out`; `BREVIS_ERROR_INVALID_ARGUMENT` past the
/// end.
///
/// # Safety
/// `a` must be NULL or a live handle, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_tensor_info(
    a: *const brevis_archive,
    index: usize,
    out: *mut brevis_tensor_info,
) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let a = unsafe { a.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let out = unsafe { out_ref(out) }?;
        let t = a.archive.info(index).ok_or(BREVIS_ERROR_INVALID_ARGUMENT)?;
        let offset = a.archive.index().tensors[index].offset;
        *out = brevis_tensor_info {
            name: a.names[index].as_ptr().cast(),
            name_len: t.name.len(),
            dtype: a.dtypes[index].as_ptr().cast(),
            ndim: t.shape.len(),
            shape: if t.shape.is_empty() { std::ptr::null() } else { t.shape.as_ptr() },
            nbytes: t.nbytes,
            offset,
            compressed_bytes: t.compressed_bytes,
        };
        Ok(())
    })
}

/// Sets `*index` to the index of the first tensor named `name` (a NUL-terminated string);
/// `BREVIS_ERROR_NOT_FOUND` if there is none.
///
/// # Safety
/// `a` must be NULL or a live handle, `name` NULL or NUL-terminated, `index` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_find(
    a: *const brevis_archive,
    name: *const c_char,
    index: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY (all three): by the caller's contract.
        let a = unsafe { a.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let name = unsafe { in_cstr(name) }?;
        let index = unsafe { out_ref(index) }?;
        *index = a.names.iter().position(|n| &n[..n.len() - 1] == name).ok_or(BREVIS_ERROR_NOT_FOUND)?;
        Ok(())
    })
}

/// Decodes tensor `index` into `dst[0..nbytes)` (`nbytes` from `brevis_tensor_info`; a smaller
/// `dst_capacity` fails with `BREVIS_ERROR_DST_TOO_SMALL`), reading only that tensor's chunks
/// and checking each against its checksum. The chunks decode in parallel in the handle's pool
/// (see `brevis_archive_open_with_options`); a tensor larger than the handle's memory limit
/// fails with `BREVIS_ERROR_LIMIT`. On error the contents of `dst` are unspecified.
///
/// # Safety
/// `a` must be NULL or a live handle, `dst` valid for `dst_capacity` bytes (NULL when it is 0).
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_decode_tensor(
    a: *const brevis_archive,
    index: usize,
    dst: *mut u8,
    dst_capacity: usize,
) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let a = unsafe { a.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let dst = unsafe { out_slice(dst, dst_capacity) }?;
        let t = a.archive.info(index).ok_or(BREVIS_ERROR_INVALID_ARGUMENT)?;
        if t.nbytes > a.memory_limit {
            return Err(BREVIS_ERROR_LIMIT);
        }
        if t.nbytes > dst.len() as u64 {
            return Err(BREVIS_ERROR_DST_TOO_SMALL);
        }
        let dst = &mut dst[..t.nbytes as usize];
        match &a.pool {
            Some(pool) => pool.install(|| a.archive.decode_tensor_into(index, dst)),
            None => a.archive.decode_tensor_into(index, dst),
        }?;
        Ok(())
    })
}

/// Releases an archive handle (not the bytes it borrows); NULL is a no-op.
///
/// # Safety
/// `a` must be NULL or come from `brevis_archive_open` or `brevis_archive_open_with_options`,
/// and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_free(a: *mut brevis_archive) {
    guard_value((), || {
        if !a.is_null() {
            // SAFETY: allocated by `brevis_archive_open_with_options`, freed once by the caller's
            // contract.
            drop(unsafe { Box::from_raw(a) });
        }
    })
}
