//! Whole-buffer and whole-file compression and decompression.

use super::*;
use crate::archive::Archive;
use crate::file_meta::OutputAttrs;
use crate::options::Options;
use std::fs::File;
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
    capped(src, opts, cap, crate::api::compress(src, opts)?)
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
fn raw_archive(src: &[u8], opts: &Options) -> crate::error::Result<Vec<u8>> {
    let opts = Options { chunk_bytes: opts.chunk_bytes.max(FALLBACK_CHUNK_BYTES), ..opts.clone() };
    crate::api::compress_with_programs(src, &opts, &|_, _| Some(crate::dsl::build::raw()))
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
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry(In(src, src_size), Out(dst, dst_capacity, dst_size), opts, |src, out, o| {
            let archive = compress_capped(src, &o.compress, out.capacity())?;
            out.put(&archive)
        })
    }
}

/// Sets `*out_size` to the size of the file the archive `src[0..src_size)` decompresses to
/// (reads and checks only its header and index).
///
/// # Safety
/// `src` must be valid for `src_size` bytes, `out_size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompressed_size(src: *const u8, src_size: usize, out_size: *mut u64) -> c_int {
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry(In(src, src_size), Ref(out_size), std::ptr::null(), |src, out_size, _| {
            *out_size = Archive::open(src)?.original_size();
            Ok(())
        })
    }
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
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry(In(src, src_size), Out(dst, dst_capacity, dst_size), opts, |src, out, o| {
            decompress_archive(&Archive::open_with_limit(src, o.decode.memory_limit)?, out, &o.decode)
        })
    }
}

/// Restores an opened archive into `out`.
fn decompress_archive(a: &Archive, out: Output, decode: &crate::options::DecodeOptions) -> Result<(), Status> {
    out.fill(a.original_size(), |buf| Ok(a.decompress_into(buf, decode)?))
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
    let input = (In(src, src_size), In(reference, reference_size));
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry(input, Out(dst, dst_capacity, dst_size), opts, |(src, reference), out, o| {
            let archive =
                capped(src, &o.compress, out.capacity(), crate::api::compress_with_ref(src, reference, &o.compress)?)?;
            out.put(&archive)
        })
    }
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
    // SAFETY: the same contract.
    unsafe {
        brevis_decompress_with_ref_and_options(
            src,
            src_size,
            reference,
            reference_size,
            dst,
            dst_capacity,
            std::ptr::null(),
            dst_size,
        )
    }
}

/// `brevis_decompress_with_ref` with settings, as `brevis_decompress_with_options`:
/// `BREVIS_OPTION_THREADS`, `BREVIS_OPTION_VERIFY`, and `BREVIS_OPTION_MEMORY_LIMIT` (which
/// bounds what reading the archive's index may allocate; a limit too small for it fails with
/// `BREVIS_ERROR_LIMIT`). `opts` NULL uses the defaults.
///
/// # Safety
/// As `brevis_decompress_with_ref`; `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress_with_ref_and_options(
    src: *const u8,
    src_size: usize,
    reference: *const u8,
    reference_size: usize,
    dst: *mut u8,
    dst_capacity: usize,
    opts: *const brevis_options,
    dst_size: *mut usize,
) -> c_int {
    let input = (In(src, src_size), In(reference, reference_size));
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry(input, Out(dst, dst_capacity, dst_size), opts, |(src, reference), out, o| {
            let mut a = Archive::open_with_limit(src, o.decode.memory_limit)?;
            a.set_reference(reference)?;
            decompress_archive(&a, out, &o.decode)
        })
    }
}

/// A required path argument, NUL-terminated: on Unix any bytes, elsewhere UTF-8.
pub(super) struct PathIn(pub(super) *const c_char);

impl Arg<'_> for PathIn {
    type Checked = PathBuf;
    unsafe fn check(self) -> Result<PathBuf, Status> {
        // SAFETY: by the caller's contract.
        unsafe { path_of(self.0) }
    }
}

/// The path of a required NUL-terminated string argument.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
pub(super) unsafe fn path_of(p: *const c_char) -> Result<PathBuf, Status> {
    // SAFETY: by the caller's contract.
    let bytes = unsafe { in_cstr(p) }?;
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

/// The file functions' compression: `src` (against `reference`) into `dst`, atomically.
fn compress_path(src: &Path, reference: Option<&Path>, dst: &Path, o: &brevis_options) -> Result<(), Status> {
    let (input, meta) = open_input(src)?;
    let reference = reference.map(|r| open_input(r).map(|(f, _)| f)).transpose()?;
    let mut compress = o.compress.clone();
    compress.file_meta = o.preserve.then(|| crate::file_meta::FileMeta::of(&meta));
    write_atomic(dst, &output_attrs(o.preserve, &meta, None), |out| {
        match &reference {
            Some(r) => crate::api::compress_file_with_ref(&input, out, r, &compress)?,
            None => crate::api::compress_file(&input, out, &compress)?,
        };
        Ok(())
    })
}

/// The file functions' decompression: the archive `src` (against `reference`) into `dst`,
/// atomically, written as it is decoded.
fn decompress_path(src: &Path, reference: Option<&Path>, dst: &Path, o: &brevis_options) -> Result<(), Status> {
    let (input, meta) = open_input(src)?;
    let reference = reference.map(|r| open_input(r).map(|(f, _)| f)).transpose()?;
    let mut a = Archive::open_source(crate::source::Source::file(&input)?, o.decode.memory_limit)?;
    if let Some(r) = &reference {
        a.set_reference_file(r)?;
    }
    write_atomic(dst, &output_attrs(o.preserve, &meta, a.file_meta()), |out| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, out);
        a.decompress_to(&mut w, &o.decode)?;
        w.flush().map_err(|_| BREVIS_ERROR_IO)
    })
}

/// Opens an input file and reads its metadata.
fn open_input(path: &Path) -> Result<(File, std::fs::Metadata), Status> {
    let f = File::open(path).map_err(|_| BREVIS_ERROR_IO)?;
    let meta = f.metadata().map_err(|_| BREVIS_ERROR_IO)?;
    Ok((f, meta))
}

/// What an output of the input `meta` gets: with `preserve`, the permission bits and time of
/// `recorded` (the original's, from an archive) or else of the input; otherwise a plain file.
fn output_attrs(preserve: bool, meta: &std::fs::Metadata, recorded: Option<crate::file_meta::FileMeta>) -> OutputAttrs {
    if preserve {
        OutputAttrs::like(meta, recorded.as_ref())
    } else {
        OutputAttrs::plain()
    }
}

/// Writes `out` atomically: `write` fills a temporary file in the same folder, created with
/// `attrs`'s mode (under the umask), which is given `attrs`'s time and owner, synced and renamed
/// over `out` (an existing file is replaced) only when `write` succeeds. On an error or a panic
/// the temporary file is removed, and `out` is left as it was.
fn write_atomic(
    out: &Path,
    attrs: &OutputAttrs,
    write: impl FnOnce(&mut File) -> Result<(), Status>,
) -> Result<(), Status> {
    let mut tmp = attrs.temp_file_beside(out).map_err(|_| BREVIS_ERROR_IO)?;
    write(tmp.as_file_mut())?;
    attrs.apply(tmp.as_file()).map_err(|_| BREVIS_ERROR_IO)?;
    tmp.as_file().sync_all().map_err(|_| BREVIS_ERROR_IO)?;
    tmp.persist(out).map_err(|_| BREVIS_ERROR_IO)?;
    Ok(())
}

/// Compresses the file at `src_path` into a new archive at `dst_path` (replaced if it exists;
/// written to a temporary file in the same folder and renamed into place when complete; on error
/// nothing is left behind and an existing `dst_path` is unchanged). The input is read in windows
/// and the archive written as it is made: memory stays near `BREVIS_OPTION_MEMORY_LIMIT` (about
/// `BREVIS_OPTION_THREADS` x `BREVIS_OPTION_CHUNK_BYTES` x 6 at most, plus the index) whatever
/// the file size. By default (`BREVIS_OPTION_PRESERVE` 1) the archive records the input's
/// permission bits and modification time, and the archive file gets them too; with
/// `BREVIS_OPTION_PRESERVE` 0 the archive is the one `brevis_compress` makes of the same bytes.
/// `opts` NULL uses the defaults. The input must not change meanwhile (a change of size is an
/// error).
///
/// # Safety
/// `src_path` and `dst_path` must be NUL-terminated strings, `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_compress_file(
    src_path: *const c_char,
    dst_path: *const c_char,
    opts: *const brevis_options,
) -> c_int {
    // SAFETY: the caller's contract is `entry`'s.
    unsafe { entry(PathIn(src_path), PathIn(dst_path), opts, |src, dst, o| compress_path(&src, None, &dst, o)) }
}

/// Decompresses the archive at `src_path` into `dst_path` (replaced if it exists; written to a
/// temporary file in the same folder and renamed into place when complete, every checksum
/// verified; on error nothing is left behind and an existing `dst_path` is unchanged). The
/// original is written as it is decoded, a batch of chunks at a time: memory stays near
/// `BREVIS_OPTION_MEMORY_LIMIT` (about `BREVIS_OPTION_THREADS` x chunk size x 6 at most, plus
/// the index) whatever the file size. By default (`BREVIS_OPTION_PRESERVE` 1) the output gets
/// the original's permission bits and modification time as the archive records them, else the
/// archive file's. `opts` NULL uses the defaults.
///
/// # Safety
/// `src_path` and `dst_path` must be NUL-terminated strings, `opts` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress_file(
    src_path: *const c_char,
    dst_path: *const c_char,
    opts: *const brevis_options,
) -> c_int {
    // SAFETY: the caller's contract is `entry`'s.
    unsafe { entry(PathIn(src_path), PathIn(dst_path), opts, |src, dst, o| decompress_path(&src, None, &dst, o)) }
}

/// `brevis_compress_file` against a reference file (a safetensors or GGUF file, or an archive of
/// one), as `brevis_compress_with_ref` codes against a reference in memory: the input and the
/// reference are both read in windows, so memory stays near `BREVIS_OPTION_MEMORY_LIMIT`
/// whatever their sizes (a reference archive is decoded into an anonymous temporary file
/// first). Decoding the archive needs the same reference (`brevis_decompress_file_with_ref`).
///
/// # Safety
/// `src_path`, `ref_path` and `dst_path` must be NUL-terminated strings, `opts` NULL or a live
/// handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_compress_file_with_ref(
    src_path: *const c_char,
    ref_path: *const c_char,
    dst_path: *const c_char,
    opts: *const brevis_options,
) -> c_int {
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry((PathIn(src_path), PathIn(ref_path)), PathIn(dst_path), opts, |(src, r), dst, o| {
            compress_path(&src, Some(&r), &dst, o)
        })
    }
}

/// `brevis_decompress_file` of an archive made against a reference, given as the file at
/// `ref_path` (the same file, or an archive of it), which is read in windows as the chunks need
/// it. A missing, truncated or different reference fails with `BREVIS_ERROR_INVALID_ARGUMENT`
/// and leaves nothing behind.
///
/// # Safety
/// `src_path`, `ref_path` and `dst_path` must be NUL-terminated strings, `opts` NULL or a live
/// handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress_file_with_ref(
    src_path: *const c_char,
    ref_path: *const c_char,
    dst_path: *const c_char,
    opts: *const brevis_options,
) -> c_int {
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry((PathIn(src_path), PathIn(ref_path)), PathIn(dst_path), opts, |(src, r), dst, o| {
            decompress_path(&src, Some(&r), &dst, o)
        })
    }
}

/// Decompresses the archive at `src_path` into a new anonymous in-memory file (Linux
/// `memfd_create`) and gives its descriptor in `*fd_out`: the original's only copy, never on disk.
/// The file is complete, every checksum verified, and sealed against writes and size changes
/// (`F_SEAL_WRITE`, `F_SEAL_GROW`, `F_SEAL_SHRINK`). A runtime that opens models by path opens
/// `/proc/self/fd/N` (N = `*fd_out`) and maps the same pages: llama.cpp's
/// `llama_model_load_from_file` loads a `.gguf.brv` so, in about the memory of the model
/// (`bindings/cpp/brevis_llama.hpp` does it for llama.cpp programs). The descriptor is
/// close-on-exec; `close` it when done (a mapping of the file keeps its pages alive). The
/// original's size must be within `BREVIS_OPTION_MEMORY_LIMIT`; an archive made against a
/// reference is refused (`BREVIS_ERROR_INVALID_ARGUMENT`). On an error `*fd_out` is unchanged
/// and nothing is left open. Linux only: elsewhere `BREVIS_ERROR_UNSUPPORTED`. `opts` NULL uses
/// the defaults.
///
/// # Safety
/// `src_path` must be a NUL-terminated string, `fd_out` valid for a write of an `int`, `opts`
/// NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn brevis_decompress_file_to_memfd(
    src_path: *const c_char,
    opts: *const brevis_options,
    fd_out: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract is `entry`'s.
    unsafe {
        entry(PathIn(src_path), Ref(fd_out), opts, |src, fd_out, o| {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::IntoRawFd;
                let (input, _) = open_input(&src)?;
                let a = Archive::open_file(&input, o.decode.memory_limit)?;
                if a.needs_reference() {
                    return Err(BREVIS_ERROR_INVALID_ARGUMENT);
                }
                let stem = src.file_name().map(|n| n.to_string_lossy().trim_end_matches(".brv").to_string());
                let file = a.decompress_to_memfd(&format!("brevis:{}", stem.unwrap_or_default()), &o.decode)?;
                *fd_out = file.into_raw_fd();
                Ok(())
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = (src, fd_out, o);
                Err(BREVIS_ERROR_UNSUPPORTED)
            }
        })
    }
}

/// The safetensors builder of the integration tests (one builder for every test).
#[cfg(test)]
#[path = "../../tests/support/st.rs"]
mod st;

#[cfg(test)]
mod tests {
    use super::st::*;
    use super::*;

    /// Inputs built to make the index as large as possible next to the file.
    fn hostile_inputs() -> Vec<Vec<u8>> {
        let mut rng = Rng(1);
        let mut v: Vec<Vec<u8>> = (0..40).map(|n| rng.bytes(n)).collect();
        v.push(rng.bytes(200_000));
        // Many empty tensors with random names: a file that is all header.
        for (k, len) in [(1, 0), (1, 1), (50, 1), (2000, 0), (500, 40)] {
            let ts: Vec<Tensor> = (0..k)
                .map(|i| {
                    let name: String = (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
                    tensor(&format!("{name}{i}"), "F32", &[0], Vec::new())
                })
                .collect();
            v.push(file(&ts, None));
        }
        // Many one-byte and one-word tensors of noise; long shapes.
        let ts: Vec<Tensor> = (0..3000).map(|i| tensor(&format!("{i}"), "U8", &[1], rng.bytes(1))).collect();
        v.push(file(&ts, None));
        let ts: Vec<Tensor> = (0..2000).map(|i| tensor(&format!("{i}"), "F32", &[1; 7], rng.bytes(4))).collect();
        v.push(file(&ts, None));
        let ts: Vec<Tensor> = (0..8).map(|i| tensor(&format!("t{i}"), "BF16", &[4096], rng.bytes(8192))).collect();
        v.push(file(&ts, None));
        v
    }

    #[test]
    fn raw_archives_fit_the_bound() {
        for input in hostile_inputs() {
            let raw = raw_archive(&input, &Options::default()).unwrap();
            let bound = brevis_compress_bound(input.len());
            assert!(raw.len() <= bound, "{} bytes: raw archive {} > bound {bound}", input.len(), raw.len());
            assert_eq!(crate::api::decompress(&raw).unwrap(), input);
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
                assert_eq!(crate::api::decompress(&a).unwrap(), input);
            }
        }
    }

    #[test]
    fn past_the_bound_the_raw_archive_takes_over() {
        let input = Rng(5).bytes(12_000);
        let tiny = Options { chunk_bytes: 1, threads: 1, ..Options::default() };
        let bound = brevis_compress_bound(input.len());
        assert!(crate::api::compress(&input, &tiny).unwrap().len() > bound, "one-byte chunks should exceed the bound");
        let a = compress_capped(&input, &tiny, bound).unwrap();
        assert!(a.len() <= bound);
        assert_eq!(crate::api::decompress(&a).unwrap(), input);
        assert_eq!(compress_capped(&input, &tiny, a.len() - 1), Err(BREVIS_ERROR_DST_TOO_SMALL));
    }

    #[test]
    fn bound_saturates() {
        assert_eq!(brevis_compress_bound(usize::MAX), usize::MAX);
        assert_eq!(brevis_compress_bound(0), 4096);
    }
}
