//! Whole-buffer and whole-file compression and decompression.

use super::*;
use crate::{Archive, Options};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Largest safetensors JSON header (with its 8-byte length prefix) the layout parser accepts: the
/// index repeats what it describes (names, dtypes, shapes), so it cannot outgrow it by much.
const HEADER_MAX: usize = 100_000_008;

/// Chunk size of the all-`raw` archive written when the chooser's does not fit in the bound.
const FALLBACK_CHUNK_BYTES: usize = 16 << 20;

/// The most bytes `brevis_compress` can write for `src_size` bytes of input, whatever the input
/// and the options: a `dst_capacity` of this size never fails with `BREVIS_ERROR_DST_TOO_SMALL`.
/// Saturates at `SIZE_MAX`.
///
/// An archive is at most the input (tensor data coded `raw` in the worst case, everything else
/// kept verbatim) plus its index, which repeats the names, dtypes and shapes of the file's
/// header (at most 100 MB) and adds a few bytes per tensor and chunk. The bound allows twice the
/// header, 1/256 of the input and 4 KiB on top of the input.
#[no_mangle]
pub extern "C" fn brevis_compress_bound(src_size: usize) -> usize {
    guard_value(usize::MAX, || {
        src_size
            .saturating_add(src_size.min(HEADER_MAX).saturating_mul(2))
            .saturating_add(src_size / 256)
            .saturating_add(4096)
    })
}

/// Compresses `src` into an archive of at most `cap` bytes.
fn compress_capped(src: &[u8], opts: &Options, cap: usize) -> Result<Vec<u8>, Status> {
    capped(src, opts, cap, crate::compress(src, opts)?)
}

/// `archive` if it fits in `cap`, else the all-`raw` archive when that fits.
fn capped(src: &[u8], opts: &Options, cap: usize, archive: Vec<u8>) -> Result<Vec<u8>, Status> {
    if archive.len() <= cap {
        return Ok(archive);
    }
    if archive.len() <= brevis_compress_bound(src.len()) {
        return Err(BREVIS_ERROR_DST_TOO_SMALL);
    }
    // Past the bound (tiny chunks, or data the sample misjudged): every tensor `raw`, big chunks.
    let raw = raw_archive(src, opts)?;
    if raw.len() <= cap {
        Ok(raw)
    } else {
        Err(BREVIS_ERROR_DST_TOO_SMALL)
    }
}

/// The archive with every tensor coded `raw`: the one whose size the bound is about.
fn raw_archive(src: &[u8], opts: &Options) -> crate::Result<Vec<u8>> {
    let opts = Options { chunk_bytes: opts.chunk_bytes.max(FALLBACK_CHUNK_BYTES), ..opts.clone() };
    crate::compress_with_programs(src, &opts, &|_, _| Some(crate::dsl::build::raw()))
}

/// Compresses `src[0..src_size)` (any file; safetensors files get a program per tensor) into
/// `dst[0..dst_capacity)` and sets `*dst_size` to the archive's size. `opts` NULL uses the
/// defaults. A `dst_capacity` of `brevis_compress_bound(src_size)` is always enough; less may
/// fail with `BREVIS_ERROR_DST_TOO_SMALL`. `src` and `dst` must not overlap; on error `*dst_size`
/// is unchanged and the contents of `dst` are unspecified.
///
/// # Safety
/// `src` must be valid for `src_size` bytes, `dst` for `dst_capacity` bytes (either may be NULL
/// when its size is 0), `opts` NULL or a live handle, `dst_size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_compress(
    src: *const u8,
    src_size: usize,
    dst: *mut u8,
    dst_capacity: usize,
    opts: *const brevis_options,
    dst_size: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY (all four): by the caller's contract.
        let src = unsafe { in_slice(src, src_size) }?;
        let dst = unsafe { out_slice(dst, dst_capacity) }?;
        let dst_size = unsafe { out_ref(dst_size) }?;
        let o = unsafe { options_or_default(opts) };
        o.maybe_panic();
        let archive = compress_capped(src, &o.compress, dst.len())?;
        dst[..archive.len()].copy_from_slice(&archive);
        *dst_size = archive.len();
        Ok(())
    })
}

/// Sets `*out_size` to the size of the file the archive `src[0..src_size)` decompresses to
/// (reads and checks only its header and index).
///
/// # Safety
/// `src` must be valid for `src_size` bytes, `out_size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompressed_size(src: *const u8, src_size: usize, out_size: *mut u64) -> c_int {
    guard(|| {
        // SAFETY (both): by the caller's contract.
        let src = unsafe { in_slice(src, src_size) }?;
        let out_size = unsafe { out_ref(out_size) }?;
        *out_size = Archive::open(src)?.original_size();
        Ok(())
    })
}

/// Decompresses the archive `src[0..src_size)` into `dst[0..dst_capacity)` and sets `*dst_size`
/// to the original's size (`brevis_decompressed_size`; a smaller `dst_capacity` fails with
/// `BREVIS_ERROR_DST_TOO_SMALL`). Every chunk and the whole file are checked against their
/// checksums. `src` and `dst` must not overlap; on error `*dst_size` is unchanged and the
/// contents of `dst` are unspecified.
///
/// # Safety
/// `src` must be valid for `src_size` bytes, `dst` for `dst_capacity` bytes (either may be NULL
/// when its size is 0), `dst_size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress(
    src: *const u8,
    src_size: usize,
    dst: *mut u8,
    dst_capacity: usize,
    dst_size: *mut usize,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { brevis_decompress_with_options(src, src_size, dst, dst_capacity, std::ptr::null(), dst_size) }
}

/// `brevis_decompress` with settings: `BREVIS_OPTION_THREADS`, `BREVIS_OPTION_VERIFY`, and
/// `BREVIS_OPTION_MEMORY_LIMIT` (which bounds what reading the archive's index may allocate).
/// `opts` NULL uses the defaults.
///
/// # Safety
/// As `brevis_decompress`; `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress_with_options(
    src: *const u8,
    src_size: usize,
    dst: *mut u8,
    dst_capacity: usize,
    opts: *const brevis_options,
    dst_size: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY (all four): by the caller's contract.
        let src = unsafe { in_slice(src, src_size) }?;
        let dst = unsafe { out_slice(dst, dst_capacity) }?;
        let dst_size = unsafe { out_ref(dst_size) }?;
        let o = unsafe { options_or_default(opts) };
        o.maybe_panic();
        let a = Archive::open_with_limit(src, o.decode.memory_limit)?;
        decompress_archive(&a, dst, dst_size, &o.decode)
    })
}

/// Restores an opened archive into `dst`, setting `*dst_size` only on success.
fn decompress_archive(
    a: &Archive,
    dst: &mut [u8],
    dst_size: &mut usize,
    decode: &crate::DecodeOptions,
) -> Result<(), Status> {
    let n = a.original_size();
    if n > dst.len() as u64 {
        return Err(BREVIS_ERROR_DST_TOO_SMALL);
    }
    a.decompress_into(&mut dst[..n as usize], decode)?;
    *dst_size = n as usize;
    Ok(())
}

/// Compresses `src[0..src_size)` against the reference checkpoint `reference[0..reference_size)`
/// (a safetensors file, or a Brevis archive of one): tensors with a match in the reference are
/// coded against it where that is smaller. Decompressing needs the same reference
/// (`brevis_decompress_with_ref`). Otherwise as `brevis_compress`, with the same bound.
///
/// # Safety
/// As `brevis_compress`; `reference` must be valid for `reference_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn brevis_compress_with_ref(
    src: *const u8,
    src_size: usize,
    reference: *const u8,
    reference_size: usize,
    dst: *mut u8,
    dst_capacity: usize,
    opts: *const brevis_options,
    dst_size: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY (all five): by the caller's contract.
        let src = unsafe { in_slice(src, src_size) }?;
        let reference = unsafe { in_slice(reference, reference_size) }?;
        let dst = unsafe { out_slice(dst, dst_capacity) }?;
        let dst_size = unsafe { out_ref(dst_size) }?;
        let o = unsafe { options_or_default(opts) };
        o.maybe_panic();
        let archive = capped(src, &o.compress, dst.len(), crate::compress_with_ref(src, reference, &o.compress)?)?;
        dst[..archive.len()].copy_from_slice(&archive);
        *dst_size = archive.len();
        Ok(())
    })
}

/// Decompresses an archive made against a reference, given the same reference (a safetensors
/// file or a Brevis archive of one). A missing part, truncated or different reference fails with
/// `BREVIS_ERROR_INVALID_ARGUMENT` and nothing useful in `dst`. Otherwise as `brevis_decompress`.
///
/// # Safety
/// As `brevis_decompress`; `reference` must be valid for `reference_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress_with_ref(
    src: *const u8,
    src_size: usize,
    reference: *const u8,
    reference_size: usize,
    dst: *mut u8,
    dst_capacity: usize,
    dst_size: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY (all four): by the caller's contract.
        let src = unsafe { in_slice(src, src_size) }?;
        let reference = unsafe { in_slice(reference, reference_size) }?;
        let dst = unsafe { out_slice(dst, dst_capacity) }?;
        let dst_size = unsafe { out_ref(dst_size) }?;
        let decode = crate::DecodeOptions::default();
        let mut a = Archive::open_with_limit(src, decode.memory_limit)?;
        a.set_reference(crate::reference::Reference::new(reference)?)?;
        decompress_archive(&a, dst, dst_size, &decode)
    })
}

/// A path argument. On Unix any bytes; elsewhere UTF-8.
fn path_of(bytes: &[u8]) -> Result<PathBuf, Status> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes).map(PathBuf::from).map_err(|_| BREVIS_ERROR_INVALID_ARGUMENT)
    }
}

fn read_input(path: &Path) -> Result<crate::source::MappedFile, Status> {
    crate::source::MappedFile::open(path).map_err(|_| BREVIS_ERROR_IO)
}

/// Writes `data` to `out` atomically: a temporary file in the same folder, synced, then renamed
/// over `out` (an existing file is replaced; on error nothing is left behind).
fn write_atomic(out: &Path, data: &[u8]) -> Result<(), Status> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut b = tempfile::Builder::new();
    b.prefix(".brevis-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o644));
    }
    let mut tmp = b.tempfile_in(&dir).map_err(|_| BREVIS_ERROR_IO)?;
    tmp.write_all(data).map_err(|_| BREVIS_ERROR_IO)?;
    tmp.as_file().sync_all().map_err(|_| BREVIS_ERROR_IO)?;
    tmp.persist(out).map_err(|_| BREVIS_ERROR_IO)?;
    Ok(())
}

/// Compresses the file at `src_path` into a new archive at `dst_path` (replaced if it exists;
/// written to a temporary file in the same folder and renamed into place when complete).
/// `opts` NULL uses the defaults. The input must not be truncated by another process meanwhile.
///
/// # Safety
/// `src_path` and `dst_path` must be NUL-terminated strings, `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_compress_file(
    src_path: *const c_char,
    dst_path: *const c_char,
    opts: *const brevis_options,
) -> c_int {
    guard(|| {
        // SAFETY (all three): by the caller's contract.
        let src_path = path_of(unsafe { in_cstr(src_path) }?)?;
        let dst_path = path_of(unsafe { in_cstr(dst_path) }?)?;
        let o = unsafe { options_or_default(opts) };
        o.maybe_panic();
        let input = read_input(&src_path)?;
        let archive = crate::compress(&input, &o.compress)?;
        write_atomic(&dst_path, &archive)
    })
}

/// Decompresses the archive at `src_path` into `dst_path` (replaced if it exists; written to a
/// temporary file in the same folder and renamed into place when complete). `opts` NULL uses the
/// defaults; `BREVIS_OPTION_MEMORY_LIMIT` bounds the size of the output held in memory.
///
/// # Safety
/// `src_path` and `dst_path` must be NUL-terminated strings, `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress_file(
    src_path: *const c_char,
    dst_path: *const c_char,
    opts: *const brevis_options,
) -> c_int {
    guard(|| {
        // SAFETY (all three): by the caller's contract.
        let src_path = path_of(unsafe { in_cstr(src_path) }?)?;
        let dst_path = path_of(unsafe { in_cstr(dst_path) }?)?;
        let o = unsafe { options_or_default(opts) };
        o.maybe_panic();
        let input = read_input(&src_path)?;
        let original = crate::decompress_with(&input, &o.decode)?;
        write_atomic(&dst_path, &original)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic byte generator (xorshift), for incompressible data.
    fn noise(n: usize, mut s: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    fn safetensors(entries: &[(String, &str, Vec<u64>, usize)], data: &[u8]) -> Vec<u8> {
        let mut h = String::from("{");
        let mut pos = 0;
        for (i, (name, dtype, shape, n)) in entries.iter().enumerate() {
            if i > 0 {
                h.push(',');
            }
            let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            h += &format!(
                r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{pos},{}]}}"#,
                shape.join(","),
                pos + n
            );
            pos += n;
        }
        h.push('}');
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(h.as_bytes());
        f.extend_from_slice(&data[..pos]);
        f
    }

    /// Inputs built to make the index as large as possible next to the file.
    fn hostile_inputs() -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = (0..40).map(|n| noise(n, n as u64 + 1)).collect();
        v.push(noise(200_000, 7));
        // Many empty tensors with random names: a file that is all header.
        let names = |k: usize, len: usize| -> Vec<String> {
            (0..k).map(|i| noise(len, i as u64 + 99).iter().map(|b| (b'a' + b % 26) as char).collect()).collect()
        };
        let d = noise(1 << 16, 3);
        for (k, len) in [(1, 0), (1, 1), (50, 1), (2000, 0), (500, 40)] {
            let e: Vec<_> =
                names(k, len).into_iter().enumerate().map(|(i, n)| (format!("{n}{i}"), "F32", vec![0], 0)).collect();
            v.push(safetensors(&e, &d));
        }
        // Many one-byte and one-word tensors of noise; long shapes.
        let e: Vec<_> = (0..3000).map(|i| (format!("{i}"), "U8", vec![1], 1)).collect();
        v.push(safetensors(&e, &d));
        let e: Vec<_> = (0..2000).map(|i| (format!("{i}"), "F32", vec![1, 1, 1, 1, 1, 1, 1], 4)).collect();
        v.push(safetensors(&e, &d));
        let e: Vec<_> = (0..8).map(|i| (format!("t{i}"), "BF16", vec![4096], 8192)).collect();
        v.push(safetensors(&e, &d));
        v
    }

    #[test]
    fn raw_archives_fit_the_bound() {
        for input in hostile_inputs() {
            let raw = raw_archive(&input, &Options::default()).unwrap();
            let bound = brevis_compress_bound(input.len());
            assert!(raw.len() <= bound, "{} bytes: raw archive {} > bound {bound}", input.len(), raw.len());
            assert_eq!(crate::decompress(&raw).unwrap(), input);
        }
    }

    #[test]
    fn the_capped_archive_fits_the_bound_even_with_one_byte_chunks() {
        let tiny = Options { chunk_bytes: 1, threads: 1, ..Options::default() };
        for input in hostile_inputs() {
            for o in [&Options::default(), &tiny] {
                if o.chunk_bytes == 1 && input.len() > 20_000 {
                    continue;
                }
                let bound = brevis_compress_bound(input.len());
                let a = compress_capped(&input, o, bound).unwrap();
                assert!(a.len() <= bound);
                assert_eq!(crate::decompress(&a).unwrap(), input);
            }
        }
    }

    #[test]
    fn past_the_bound_the_raw_archive_takes_over() {
        let input = noise(6000, 5);
        let tiny = Options { chunk_bytes: 1, threads: 1, ..Options::default() };
        let bound = brevis_compress_bound(input.len());
        assert!(crate::compress(&input, &tiny).unwrap().len() > bound, "one-byte chunks should exceed the bound");
        let a = compress_capped(&input, &tiny, bound).unwrap();
        assert!(a.len() <= bound);
        assert_eq!(crate::decompress(&a).unwrap(), input);
        assert_eq!(compress_capped(&input, &tiny, a.len() - 1), Err(BREVIS_ERROR_DST_TOO_SMALL));
    }

    #[test]
    fn bound_saturates() {
        assert_eq!(brevis_compress_bound(usize::MAX), usize::MAX);
        assert_eq!(brevis_compress_bound(0), 4096);
    }
}
