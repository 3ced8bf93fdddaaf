//! Entropy coders and bit packing: the leaves of every program end here.
//!
//! Each coder is self-delimiting given the number of symbols, which the interpreter knows from
//! the program's type rules, and reports how many bytes it consumed.
pub mod bitio;
pub mod huffman;
pub mod lanes;
mod pack;
pub mod rans;
mod shared;

#[cfg(test)]
pub(crate) use pack::packing_cases;
pub use pack::{pack, pack_u16, pack_u8, packed_len};
pub(crate) use shared::{alphabet_of, counts_cost, log2_approx, symbol_counts, used_counts, with_seen};

use crate::error::{Error, Result};

/// zstd on a byte stream (the LZ leaf for long repeats): one zstd frame, appended to `out`.
/// Each thread keeps its compressor for the last level it used: making one (its tables and
/// windows, zeroed) took about a tenth of the zstd time in the search's estimates of small
/// streams.
pub fn zstd_encode(bytes: &[u8], level: i32, out: &mut Vec<u8>) -> Result<()> {
    thread_local! {
        static ENCODER: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
            const { std::cell::RefCell::new(None) };
    }
    ENCODER.with(|e| -> Result<()> {
        let mut e = e.borrow_mut();
        let z = match &mut *e {
            Some((l, z)) if *l == level => z,
            slot => &mut slot.insert((level, zstd::bulk::Compressor::new(level)?)).1,
        };
        out.extend_from_slice(&z.compress(bytes)?);
        Ok(())
    })
}

thread_local! {
    /// Each thread's zstd decoder, reused: creating one costs about as much as decoding the
    /// few kilobytes of a `dict` table.
    static ZSTD_DECODER: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decodes `input` (exactly one zstd frame) into exactly `n` bytes.
pub fn zstd_decode(input: &[u8], n: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(n);
    let got = ZSTD_DECODER.with(|cell| -> Result<usize> {
        let mut slot = cell.borrow_mut();
        let dec = match &mut *slot {
            Some(d) => d,
            empty => empty.insert(zstd::bulk::Decompressor::new()?),
        };
        // `decompress_to_buffer` never writes past the capacity: a forged frame cannot grow
        // memory. A frame that fails leaves the decoder ready for the next one (each call starts
        // a new frame).
        dec.decompress_to_buffer(input, &mut out).map_err(|e| Error::corrupt(format!("zstd: {e}")))
    })?;
    if got != n {
        return Err(Error::corrupt("zstd: wrong decoded length"));
    }
    Ok(out)
}
