//! `brevis_archive`: random access to the tensors of an archive, for loaders.

use super::*;
use crate::Archive;

/// An opened archive. It borrows the archive bytes given to `brevis_archive_open`, which must
/// stay valid and unchanged until `brevis_archive_free`. Once opened it is never modified: any
/// number of threads may use it at once (for example to decode different tensors).
pub struct brevis_archive {
    archive: Archive<'static>,
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
    /// The safetensors dtype string ("F32", "BF16", ...), NUL-terminated.
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
/// unchanged until the handle is freed. No tensor data is decoded here.
///
/// # Safety
/// `src` must be valid for `src_size` bytes until the handle is freed; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_open(src: *const u8, src_size: usize, out: *mut *mut brevis_archive) -> c_int {
    guard(|| {
        // SAFETY: valid until `brevis_archive_free` by the caller's contract, hence `'static` for
        // the handle, which is the only holder of the slice.
        let src: &'static [u8] = unsafe { in_slice(src, src_size) }?;
        // SAFETY: by the caller's contract.
        let out = unsafe { out_ref(out) }?;
        let archive = Archive::open(src)?;
        let (mut names, mut dtypes) = (Vec::with_capacity(archive.len()), Vec::with_capacity(archive.len()));
        for i in 0..archive.len() {
            let t = archive.info(i).ok_or(BREVIS_ERROR_PANIC)?;
            names.push(c_string(t.name));
            dtypes.push(c_string(t.dtype));
        }
        *out = Box::into_raw(Box::new(brevis_archive { archive, names, dtypes }));
        Ok(())
    })
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
/// and checking each against its checksum. On error the contents of `dst` are unspecified.
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
        if t.nbytes > dst.len() as u64 {
            return Err(BREVIS_ERROR_DST_TOO_SMALL);
        }
        a.archive.decode_tensor_into(index, &mut dst[..t.nbytes as usize])?;
        Ok(())
    })
}

/// Releases an archive handle (not the bytes it borrows); NULL is a no-op.
///
/// # Safety
/// `a` must be NULL or come from `brevis_archive_open`, and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_free(a: *mut brevis_archive) {
    guard_value((), || {
        if !a.is_null() {
            // SAFETY: allocated by `brevis_archive_open`, freed once by the caller's contract.
            drop(unsafe { Box::from_raw(a) });
        }
    })
}
