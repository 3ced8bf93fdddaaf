//! `brevis_archive`: random access to the tensors of an archive, for loaders.

use super::*;
use crate::archive::{Archive, GgufView};
use std::sync::OnceLock;

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
    /// The GGUF view of the original (None: not GGUF), made on first use.
    gguf: OnceLock<Result<Option<GgufView>, Status>>,
}

/// What the archive's index says about one tensor. Its pointers stay valid until the archive is
/// freed.
#[repr(C)]
pub struct brevis_tensor_info {
    /// The tensor's name, NUL-terminated; `name_len` bytes long (a name may itself contain NUL
    /// bytes: use `name_len`). A file that is not safetensors, and long gaps between tensors,
    /// appear as tensors with an empty name and an empty dtype.
    pub name: *const c_char,
    /// The name's length in bytes (without the terminating NUL).
    pub name_len: usize,
    /// The dtype string, NUL-terminated: the safetensors dtype ("F32", "BF16", ...). For a GGUF
    /// tensor, its ggml type name: "F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64" (the
    /// same strings as the safetensors dtypes of the same layout), "Q4_0", "Q4_1", "Q5_0",
    /// "Q5_1", "Q8_0", "Q8_1", "Q2_K" to "Q8_K", "IQ2_XXS", ..., "TQ1_0", "TQ2_0", "MXFP4",
    /// "NVFP4", "Q1_0" (ggml's names), or `"GGML_TYPE_<id>"` for a type id this library does not
    /// know; `brevis_archive_gguf_tensor_info` gives the type id itself.
    pub dtype: *const c_char,
    /// Number of dimensions, and the `ndim` dimensions (NULL when `ndim` is 0), slowest first,
    /// as in safetensors. For a GGUF tensor that is the reverse of its GGUF dimensions (`ne[]`,
    /// fastest first), which `brevis_archive_gguf_tensor_info` gives in GGUF order.
    pub ndim: usize,
    /// The dimensions (see `ndim`).
    pub shape: *const u64,
    /// Size of the tensor's data, in bytes: what `brevis_archive_decode_tensor` writes.
    pub nbytes: u64,
    /// Byte offset of the tensor's data in the original file.
    pub offset: u64,
    /// Bytes of the archive that the tensor's data takes.
    pub compressed_bytes: u64,
}

/// The GGUF header of an archive's original (`brevis_archive_gguf_header`). Its pointer stays
/// valid until the archive is freed.
#[repr(C)]
pub struct brevis_gguf_header {
    /// The original file's bytes from its start to its data section: the GGUF header, the
    /// metadata key/values, the tensor infos and the alignment padding, exactly as in the file
    /// (what a GGUF parser such as llama.cpp's `gguf_init_from_file` reads).
    pub data: *const u8,
    /// Their length: the offset of the data section in the original file, a multiple of
    /// `alignment`. Tensor `i` starts `data_offset` bytes into the data section
    /// (`brevis_gguf_tensor_info`); `brevis_tensor_info.offset` is `size + data_offset`.
    pub size: usize,
    /// The GGUF version, 2 or 3.
    pub version: u32,
    /// The alignment of the data section and of every tensor offset: the `general.alignment`
    /// key, or 32 when it is absent.
    pub alignment: u64,
}

/// What the GGUF tensor info of one tensor says (`brevis_archive_gguf_tensor_info`).
#[repr(C)]
pub struct brevis_gguf_tensor_info {
    /// The ggml type id (`enum ggml_type` of ggml.h: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0,
    /// 30 BF16, ...), as the file records it, also for ids this library does not know.
    pub ggml_type: u32,
    /// Number of dimensions (0 to 4).
    pub n_dims: u32,
    /// The dimensions in GGUF order, fastest first (`ne[0]` is the row length); 1 past `n_dims`.
    pub ne: [u64; 4],
    /// The tensor's offset from the start of the data section, as the file records it.
    pub data_offset: u64,
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
fn open(src: &'static [u8], decode: &crate::options::DecodeOptions) -> Result<brevis_archive, Status> {
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
    Ok(brevis_archive { archive, memory_limit: decode.memory_limit, pool, names, dtypes, gguf: OnceLock::new() })
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
/// and checking each against its checksum. `dst` may have any alignment: the decoder writes
/// bytes, so a loader passes the place the tensor takes in its own buffer (for a GGUF file,
/// `data_offset` into a data section it aligned to `brevis_gguf_header.alignment`). The chunks
/// decode in parallel in the handle's pool (see `brevis_archive_open_with_options`); a tensor
/// larger than the handle's memory limit fails with `BREVIS_ERROR_LIMIT`. On error the contents
/// of `dst` are unspecified.
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

/// The GGUF view of the handle's original, made on the first call (it decodes the bytes before
/// the first tensor that the index does not hold: usually none).
fn gguf_view(a: &brevis_archive) -> Result<&GgufView, Status> {
    let view = a.gguf.get_or_init(|| a.archive.gguf().map_err(Status::from));
    view.as_ref().map_err(|&e| e)?.as_ref().ok_or(BREVIS_ERROR_NOT_FOUND)
}

/// Sets `*out` to the GGUF header of the archive's original: its bytes from the start of the
/// file to the data section (held by the handle until `brevis_archive_free`), its version and
/// alignment. `BREVIS_ERROR_NOT_FOUND` when the original is not a GGUF file whose tensors the
/// archive holds one by one (a safetensors file, any other file, or a GGUF file that was coded
/// as bytes). The first call on a handle may decode a little (thread-safe; later calls return
/// the same bytes); `BREVIS_ERROR_LIMIT` when the header is larger than the handle's memory
/// limit.
///
/// # Safety
/// `a` must be NULL or a live handle, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_gguf_header(a: *const brevis_archive, out: *mut brevis_gguf_header) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let a = unsafe { a.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let out = unsafe { out_ref(out) }?;
        let g = gguf_view(a)?;
        *out = brevis_gguf_header {
            data: g.header.as_ptr(),
            size: g.header.len(),
            version: g.version,
            alignment: g.alignment,
        };
        Ok(())
    })
}

/// Describes tensor `index` (0 to count - 1, as for `brevis_archive_tensor_info`) as its GGUF
/// tensor info does, in `*out`: ggml type id, dimensions in GGUF order, offset in the data
/// section. `BREVIS_ERROR_INVALID_ARGUMENT` past the end; `BREVIS_ERROR_NOT_FOUND` when the
/// original is not GGUF (see `brevis_archive_gguf_header`) or entry `index` is not a tensor (a
/// byte region: its name and dtype are empty).
///
/// # Safety
/// `a` must be NULL or a live handle, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_gguf_tensor_info(
    a: *const brevis_archive,
    index: usize,
    out: *mut brevis_gguf_tensor_info,
) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let a = unsafe { a.as_ref() }.ok_or(BREVIS_ERROR_NULL_POINTER)?;
        let out = unsafe { out_ref(out) }?;
        if index >= a.archive.len() {
            return Err(BREVIS_ERROR_INVALID_ARGUMENT);
        }
        let t = gguf_view(a)?.tensors[index].as_ref().ok_or(BREVIS_ERROR_NOT_FOUND)?;
        let mut ne = [1u64; 4];
        ne[..t.dims.len()].copy_from_slice(&t.dims);
        *out = brevis_gguf_tensor_info {
            ggml_type: t.ggml_type,
            n_dims: t.dims.len() as u32,
            ne,
            data_offset: t.data_offset,
        };
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
