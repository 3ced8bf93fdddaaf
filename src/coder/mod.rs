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
mod zstd_frames;

#[cfg(test)]
pub(crate) use pack::packing_cases;
pub use pack::{pack, pack_u16, pack_u8, packed_len};
pub(crate) use shared::{alphabet_of, counts_cost, log2_approx, symbol_counts, used_counts, with_seen};

pub(crate) use zstd_frames::with_zstd_memo;
pub use zstd_frames::{zstd_decode, zstd_encode};
