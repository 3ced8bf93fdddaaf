//! Worker pools and how many chunks are in flight at once: one formula for compression and
//! decompression.

use crate::error::{Error, Result};

/// Original bytes per chunk in flight, as a multiple of the chunk size: the window read, its
/// words, the intermediate streams of a program and the payload.
pub(crate) const CHUNK_WORKING_SET: u64 = 6;

/// A pool of `threads` workers (0: one per core), owned by one call.
pub(crate) fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::invalid(format!("cannot start worker threads: {e}")))
}

/// Chunks coded or decoded at once: enough to keep every thread busy, few enough that about
/// [`CHUNK_WORKING_SET`] chunk sizes each stay within `memory_limit`.
pub(crate) fn batch(chunk_bytes: u64, memory_limit: u64, threads: usize) -> usize {
    let per_chunk = chunk_bytes.saturating_mul(CHUNK_WORKING_SET).max(1);
    ((memory_limit / per_chunk) as usize).clamp(1, 4 * threads.max(1))
}

/// Asks the kernel to back the 2 MiB-aligned interior of `buf` with huge pages, where it is
/// large enough to matter (Linux; a hint, its result ignored). A decoder writes every byte of
/// its output: on a freshly allocated buffer, first-touch faults of 4 KiB pages cost about as
/// much as decoding (one fault per 4 KiB); huge pages take one per 2 MiB. Memory the caller had
/// already touched is unchanged.
pub(crate) fn advise_huge_pages<T>(buf: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let len = std::mem::size_of_val(buf);
        if len < 4 * HUGE {
            return;
        }
        let start = buf.as_mut_ptr() as usize;
        let (a, b) = (start.next_multiple_of(HUGE), (start + len) / HUGE * HUGE);
        if b > a {
            // SAFETY: `a..b` lies within `buf`, which this function borrows mutably; the advice
            // does not change the contents of the range.
            unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// Whether `buf` looks freshly allocated: none of its first, middle and last pages is in memory
/// (Linux; elsewhere, or when the kernel cannot tell, false). Such a buffer is worth
/// [`populate`]-ing a chunk at a time; one already touched is not.
pub(crate) fn untouched(buf: &[u8]) -> bool {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        if buf.len() < 4 * PAGE {
            return false;
        }
        let start = buf.as_ptr() as usize;
        let probes = [start, start + buf.len() / 2, start + buf.len() - 1];
        probes.iter().all(|&p| {
            let mut resident = 0u8;
            // SAFETY: the page of `p` lies within the mapping of `buf`; `mincore` writes one
            // byte for one page into `resident`.
            let r = unsafe { libc::mincore((p / PAGE * PAGE) as *mut libc::c_void, 1, &mut resident) };
            r == 0 && resident & 1 == 0
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = buf;
        false
    }
}

/// Faults in the pages that lie wholly inside `buf` before a decoder writes them (Linux 5.14+;
/// a hint, its result ignored): the kernel zeroes a fresh page when it is first touched, and
/// doing that before the decoder's own working set is loaded keeps the zeroing from evicting
/// it (on an untouched fp32 output, 0.71x -> 0.94x the speed into an existing buffer,
/// `scripts/decode_breakdown.py`). Pages already present are left as they are.
pub(crate) fn populate(buf: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = buf.as_mut_ptr() as usize;
        let (a, b) = (start.next_multiple_of(PAGE), (start + buf.len()) / PAGE * PAGE);
        if b > a {
            // SAFETY: `a..b` lies within `buf`, which this function borrows mutably; populating
            // does not change the contents of the range.
            unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_POPULATE_WRITE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}
