//! Model families: which file of a family each file is best coded against, and what an archive
//! records of its original and of its reference (to restore a family's files in order).

use super::*;
use crate::archive::Archive;

/// A file's identity as an archive records it: its size in bytes and the xxh3-64 of its bytes.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct brevis_file_identity {
    /// The file's size in bytes.
    pub size: u64,
    /// XXH3-64 (seed 0) of the file's bytes.
    pub hash: u64,
}

impl From<crate::container::FileRef> for brevis_file_identity {
    fn from(r: crate::container::FileRef) -> Self {
        brevis_file_identity { size: r.size, hash: r.hash }
    }
}

/// For each of the `count` files at `paths` (safetensors or GGUF: a master and its casts and
/// quantizations, a base and its fine-tunes), the index in `paths` of the file it is best coded
/// against (`brevis_compress_file_with_ref`), or -1 for a file coded alone, written to
/// `refs[0..count]`: what `brevis compress -r` chooses. Files are ranked from the highest
/// precision down and each may use only a file ranked before it, so references form no cycles;
/// the one whose tensors predict most of a file's tensor bytes (identical tensors, the same
/// content, or a cast or quantization of them) is chosen when it predicts at least a quarter of
/// them. The files are read in windows (memory stays near `BREVIS_OPTION_MEMORY_LIMIT` whatever
/// their sizes). `opts` NULL uses the defaults (`BREVIS_OPTION_THREADS` and
/// `BREVIS_OPTION_MEMORY_LIMIT` apply).
///
/// # Safety
/// `paths` must point to `count` NUL-terminated strings (it may be NULL when `count` is 0),
/// `refs` must be valid for `count` writes of `int64_t`, `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_family_references(
    paths: *const *const c_char,
    count: usize,
    refs: *mut i64,
    opts: *const brevis_options,
) -> c_int {
    guard(|| {
        if count > 0 && (paths.is_null() || refs.is_null()) {
            return Err(BREVIS_ERROR_NULL_POINTER);
        }
        let mut files = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: `paths` holds `count` pointers to NUL-terminated strings (the contract).
            let path = unsafe { super::codec::path_of(*paths.add(i)) }?;
            files.push(std::fs::File::open(&path).map_err(|_| BREVIS_ERROR_IO)?);
        }
        // SAFETY: the contract; refs is valid for `count` writes.
        let settings = unsafe { settings(opts) };
        let files: Vec<&std::fs::File> = files.iter().collect();
        let chosen = crate::api::family_references_of_files(&files, &settings.compress)?;
        if count > 0 {
            // SAFETY: `refs` is valid for `count` writes (the contract) and not NULL (checked).
            let out = unsafe { std::slice::from_raw_parts_mut(refs, count) };
            for (o, c) in out.iter_mut().zip(chosen) {
                *o = c.map_or(-1, |j| j as i64);
            }
        }
        Ok(())
    })
}

/// What the archive at `path` records: the identity of its original file in `*original`, and
/// of the reference file it was made against in `*reference` (size 0 and hash 0 when it needs
/// none). A family's archives are restored in order with it: an archive whose reference is the
/// original of another is restored after that one, against it. Reads only the archive's index
/// (within `BREVIS_OPTION_MEMORY_LIMIT`). `opts` NULL uses the defaults.
///
/// # Safety
/// `path` must be a NUL-terminated string, `original` and `reference` valid for a write of a
/// `brevis_file_identity`, `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_archive_file_identity(
    path: *const c_char,
    original: *mut brevis_file_identity,
    reference: *mut brevis_file_identity,
    opts: *const brevis_options,
) -> c_int {
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry(super::codec::PathIn(path), (Ref(original), Ref(reference)), opts, |path, (original, reference), o| {
            let f = std::fs::File::open(path).map_err(|_| BREVIS_ERROR_IO)?;
            let a = Archive::open_file(&f, o.decode.memory_limit)?;
            *original = a.original_file().into();
            *reference = a.reference_file().map(Into::into).unwrap_or_default();
            Ok(())
        })
    }
}
