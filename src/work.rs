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
