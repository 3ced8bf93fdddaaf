//! The encoder: each symbol's entry, then the state machine, last symbol first (scalar here;
//! whole steps in vectors in `avx2.rs` and `avx512.rs`, which write the same bytes), and the
//! block's bytes.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use super::model::{spec_bits, write_spec, Model};
use super::plan::{enc_distance, fixed_bytes, plan, rank_table, split_plan, Plan};
use super::{Ctx, L, LANES};
use crate::coder::bitio::{put_varint, BitWriter, Bits32};
use crate::coder::shared::{ceil_log2, gamma_len};
use crate::error::Result;
use crate::simd::Isa;
use std::cell::Cell;

/// Encoder entry of one rank of one class. The state update `x -> (x / f) << p | x % f + cum` is
/// computed as `x + cum + q * (2^p - f)` with `q = x / f` from a multiplication by the rounded-up
/// reciprocal `m = ceil(2^(32 + l) / f)` (`l = ceil(log2 f)`, `rcp = m - 2^32`), exact for every
/// 32-bit `x` (Granlund and Montgomery 1994, theorem 4.2).
#[derive(Clone, Copy, Default)]
pub(super) struct EncSym {
    pub(super) rcp: u32,
    pub(super) freq: u32,
    pub(super) cum: u32,
    pub(super) cmpl: u32,
    pub(super) l: u32,
}

impl EncSym {
    pub(super) fn new(f: u32, cum: u32, p: u32) -> EncSym {
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
    pub(super) fn same(&self, e: &EncSym) -> bool {
        self.freq == e.freq && self.cum == e.cum
    }

    #[inline(always)]
    pub(super) fn quotient(&self, x: u32) -> u32 {
        ((((x as u64 * self.rcp as u64) >> 32) + x as u64) >> self.l) as u32
    }

    /// Renormalizes (one word at most; stored when `STORE`, always written and kept or not, so
    /// no branch) and codes.
    #[inline(always)]
    pub(super) fn put<const STORE: bool>(&self, x: &mut u32, shift: u32, words: &mut [u16], len: &mut usize) {
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
pub(super) struct Coded {
    pub(super) states: [u32; LANES],
    pub(super) words: Vec<u16>,
    pub(super) nwords: usize,
    pub(super) escapes: Vec<u16>,
}

/// Lookups of the encoder's state machine.
pub(super) struct Encoder<'a> {
    pub(super) symbols: &'a [u16],
    pub(super) rank_of: Vec<u8>,
    pub(super) class_of: [u8; 256],
    pub(super) enc: Vec<EncSym>,
    pub(super) ranks: usize,
    pub(super) shift: u32,
    /// Rank of the escape (`usize::MAX` when nothing is escaped).
    pub(super) esc_rank: usize,
    /// Index of each escaped symbol among the escaped ones (empty when they need no bits).
    pub(super) esc_of: Vec<u16>,
    /// Context distance.
    pub(super) d: usize,
}

impl Encoder<'_> {
    /// The entry of every symbol (`class * ranks + rank`), and the escape indices in symbol
    /// order: table lookups ahead of the state machine, so that it does nothing else.
    pub(super) fn entries<const CTX: bool>(&self, idx: &mut Vec<u16>, escapes: &mut Vec<u16>) {
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
    pub(super) fn run<const STORE: bool, const CTX: bool>(&self, isa: Isa, coded: &mut Coded) {
        let alphabet = self.rank_of.len();
        if !CTX && alphabet <= DIRECT_ALPHABET.min(self.symbols.len()) {
            let by_symbol: Vec<EncSym> = self.rank_of.iter().map(|&r| self.enc[r as usize]).collect();
            // The state machine notes where it codes the escape's entry (last first).
            let esc = (self.esc_rank != usize::MAX).then(|| self.enc[self.esc_rank]);
            let mut hits = Vec::new();
            self.steps::<STORE>(isa, self.symbols, &by_symbol, esc, &mut hits, coded);
            let esc_of = |i: usize| self.esc_of.get(self.symbols[i] as usize).copied().unwrap_or(0);
            coded.escapes.extend(hits.iter().rev().map(|&i| esc_of(i)));
            return;
        }
        let mut idx = ENTRIES.take();
        self.entries::<CTX>(&mut idx, &mut coded.escapes);
        self.steps::<STORE>(isa, &idx, &self.enc, None, &mut Vec::new(), coded);
        ENTRIES.set(idx);
    }

    /// The state machine over the entry indices `idx` (into `enc`) of every symbol (see
    /// [`Encoder::run`]). With `esc`, the positions of the symbols coded with that entry are
    /// appended to `hits`, last first.
    pub(super) fn steps<const STORE: bool>(
        &self,
        isa: Isa,
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
        if full > 0 && isa.min(crate::simd::detected()) >= Isa::Avx2 {
            let wide = isa.min(crate::simd::detected()) == Isa::Avx512;
            // Elements a vector.
            let width = if wide { 16 } else { 8 };
            let t = VecTable::new(enc);
            assert!(t.len() == enc.len() && t.len() > 0 && (!STORE || *len + full <= words.len()));
            let e = esc.map(|e| VecTable::pack(&e));
            let mut masks = vec![0u16; if e.is_some() { full / width } else { 0 }];
            let (e, has) = (e.unwrap_or(0), e.is_some());
            let (idx, m) = (&idx[..full], &mut masks);
            // SAFETY: the AVX-512 level (AVX-512 F, BW and VL and POPCNT), or the AVX2 level
            // (AVX2 and POPCNT) was detected; the table is not empty, and the words of `full`
            // more symbols (one at most each) fit in `words` (both asserted above); `full` is a
            // multiple of 32, and with an escape there is a mask for every vector.
            unsafe {
                match (wide, has) {
                    (true, true) => avx512::steps::<STORE, true>(&t, idx, shift, states, words, len, e, m),
                    (true, false) => avx512::steps::<STORE, false>(&t, idx, shift, states, words, len, e, m),
                    (false, true) => avx2::steps::<STORE, true>(&t, idx, shift, states, words, len, e, m),
                    (false, false) => avx2::steps::<STORE, false>(&t, idx, shift, states, words, len, e, m),
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
        let _ = isa;
        for step in (0..full).step_by(LANES).rev() {
            for (lane, x) in states.iter_mut().enumerate().rev() {
                put(step + lane, x, words, len);
            }
        }
    }
}

/// Largest alphabet whose order-0 blocks are coded from a table by symbol (see
/// [`Encoder::run`]): byte planes and 10-bit fields, whose tables stay in L1.
pub(super) const DIRECT_ALPHABET: usize = 1 << 10;

thread_local! {
    /// The encoder's entry indices, and its words, reused from block to block (a chunk's
    /// megabytes are not allocated and faulted in again for each).
    static ENTRIES: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
    static WORDS: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
}

/// Runs the encoder on `symbols` (all below `alphabet`): `Coded::words` holds at least
/// `symbols.len() + 1` words (the first `nwords` written) when `STORE`; give it back with
/// [`recycle`].
pub(super) fn run_encoder<const STORE: bool>(
    isa: Isa,
    symbols: &[u16],
    alphabet: usize,
    model: &Model,
    d: usize,
) -> Coded {
    let n = symbols.len();
    let ranks = model.ranks();
    // (A stream of a split block may use fewer symbols than the block.)
    debug_assert!(alphabet >= crate::coder::alphabet_of(symbols));
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
        e.run::<STORE, true>(isa, &mut coded);
    } else {
        e.run::<STORE, false>(isa, &mut coded);
    }
    coded
}

/// Gives the words of a [`run_encoder`] back for the next block.
pub(super) fn recycle(coded: Coded) {
    WORDS.set(coded.words);
}

/// The encoder entries as two arrays for gathers: the reciprocal, and `freq | cum << 13 |
/// s << 26` with `s = l - 1`. The quotient is `(hi + ((x - hi) >> 1)) >> s`, `hi = (x * rcp)
/// >> 32`, which is `(hi + x) >> l` without the 33-bit sum (`hi <= x`). For `freq == 1`
/// (`l == 0`, `q == x`) the entry has `rcp = 2^32 - 1` and `s = 0`, which gives `q = x - 1`
/// (`hi = x - 1` for `x >= 1`; a renormalized state is at least 16), and `cum + cmpl` for
/// `cum`, which makes up for the missing `cmpl`. Entries of frequency 0 are never used (the
/// scalar `put` asserts it).
pub(super) struct VecTable {
    pub(super) rcp: Vec<u32>,
    pub(super) packed: Vec<u32>,
}

impl VecTable {
    pub(super) fn new(enc: &[EncSym]) -> VecTable {
        let rcp = enc.iter().map(|e| if e.freq == 1 { u32::MAX } else { e.rcp }).collect();
        VecTable { rcp, packed: enc.iter().map(VecTable::pack).collect() }
    }

    /// The packed form of an entry (see [`VecTable`]).
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

/// Encodes `symbols` (values < 2^16) as one self-delimiting block appended to `out`.
/// `Err(Error::Invalid(..))` when the block cannot be coded by this coder (more than
/// [`MAX_SYMBOLS`](super::MAX_SYMBOLS) distinct symbols); the caller then uses another leaf.
pub fn encode(symbols: &[u16], ctx: Ctx, out: &mut Vec<u8>) -> Result<()> {
    encode_at(crate::simd::isa(), symbols, ctx, out)
}

/// [`encode`] with the state machine at a given SIMD level (lowered to what the CPU has; AVX-512
/// and AVX2 run whole steps in vectors, the scalar level does not). Every level writes the same
/// bytes.
pub fn encode_at(isa: Isa, symbols: &[u16], ctx: Ctx, out: &mut Vec<u8>) -> Result<()> {
    encode_block(isa, symbols, ctx, false, out)
}

/// [`encode_at`] of a leaf that allows splitting (`split`): a block of at least
/// [`SPLIT_MIN`](super::SPLIT_MIN) symbols is written as two streams ([`super::splits`]).
/// `Ctx::Back` blocks are never split (`Error::Invalid` with `split`).
pub fn encode_block(isa: Isa, symbols: &[u16], ctx: Ctx, split: bool, out: &mut Vec<u8>) -> Result<()> {
    let d = split_distance(ctx, split)?;
    if symbols.is_empty() {
        return Ok(());
    }
    let two = super::splits(split, symbols.len());
    let (plan, alphabet) = if two { split_plan(symbols, ctx)? } else { plan(symbols, ctx)? };
    write_block(isa, symbols, alphabet, &plan, d, two, out);
    Ok(())
}

/// The context distance of `ctx` for a leaf that allows splitting where `split` (only `None`
/// and `Prev`).
fn split_distance(ctx: Ctx, split: bool) -> Result<usize> {
    if split && matches!(ctx, Ctx::Back(_)) {
        return Err(crate::error::Error::invalid("lanes: a split block with a context distance"));
    }
    enc_distance(ctx)
}

/// The streams of a block: its symbols, or where `two` (a split block) its segments `0, 2, ..`
/// and `1, 3, ..`.
fn streams(symbols: &[u16], two: bool) -> Vec<std::borrow::Cow<'_, [u16]>> {
    if !two {
        return vec![symbols.into()];
    }
    // Segment by segment: a flattened iterator moved one symbol at a time (a seventh of the
    // encoding at `fast` on whisper-base).
    let stream = |s| {
        let mut v = Vec::with_capacity(symbols.len() / 2 + super::SEGMENT);
        symbols.chunks(super::SEGMENT).skip(s).step_by(2).for_each(|seg| v.extend_from_slice(seg));
        v
    };
    vec![stream(0).into(), stream(1).into()]
}

/// Appends the block of `symbols` (at least one, all below `alphabet`) coded as `plan` says; as
/// two streams where `two`.
pub(super) fn write_block(
    isa: Isa,
    symbols: &[u16],
    alphabet: usize,
    plan: &Plan,
    d: usize,
    two: bool,
    out: &mut Vec<u8>,
) {
    let mut w = BitWriter::new();
    let Some(spec) = &plan.spec else {
        w.gamma(1);
        w.gamma(plan.model.coded[0] as u64 + 1);
        out.extend_from_slice(&w.finish());
        return;
    };
    write_spec(spec, &mut w);
    let model = &plan.model;
    let streams = streams(symbols, two);
    let coded: Vec<Coded> = streams.iter().map(|x| run_encoder::<true>(isa, x, alphabet, model, d)).collect();
    out.reserve(
        w.bit_len() / 8
            + 1
            + streams
                .iter()
                .zip(&coded)
                .map(|(x, c)| fixed_bytes(x.len(), model, c.nwords, c.escapes.len() as u64) + 2 * c.nwords)
                .sum::<usize>(),
    );
    out.extend_from_slice(&w.finish());
    for c in &coded {
        put_varint(out, c.nwords as u64);
    }
    if !model.escs.is_empty() {
        for c in &coded {
            put_varint(out, c.escapes.len() as u64);
        }
    }
    for (x, c) in streams.iter().zip(&coded) {
        for s in &c.states[..x.len().min(LANES)] {
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
    if !model.escs.is_empty() {
        let b = model.esc_bits();
        for c in &coded {
            let mut bw = Bits32::new(out, 0, 0);
            for &e in &c.escapes {
                bw.put(e as u64, b);
            }
            bw.finish();
        }
    }
    // The words in decode order, little-endian (reversed in place, then copied: no zero fill).
    for mut c in coded {
        let words = &mut c.words[..c.nwords];
        words.reverse();
        if cfg!(target_endian = "little") {
            out.extend_from_slice(bytemuck::cast_slice(words));
        } else {
            out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
        }
        recycle(c);
    }
}

/// Exact encoded size in bytes (what [`encode`] would append): the same choices and state
/// machine, without storing anything.
pub fn encoded_len(symbols: &[u16], ctx: Ctx) -> Result<usize> {
    encoded_len_at(crate::simd::isa(), symbols, ctx)
}

/// [`encoded_len`] with the state machine at a given SIMD level (as [`encode_at`]).
pub fn encoded_len_at(isa: Isa, symbols: &[u16], ctx: Ctx) -> Result<usize> {
    encoded_len_block(isa, symbols, ctx, false)
}

/// The length [`encode_block`] would append.
pub fn encoded_len_block(isa: Isa, symbols: &[u16], ctx: Ctx, split: bool) -> Result<usize> {
    let d = split_distance(ctx, split)?;
    if symbols.is_empty() {
        return Ok(0);
    }
    let two = super::splits(split, symbols.len());
    let (plan, alphabet) = if two { split_plan(symbols, ctx)? } else { plan(symbols, ctx)? };
    let Some(spec) = &plan.spec else {
        return Ok((gamma_len(1) + gamma_len(plan.model.coded[0] as u64 + 1)).div_ceil(8) as usize);
    };
    let mut len = spec_bits(spec).div_ceil(8) as usize;
    for x in &streams(symbols, two) {
        let coded = run_encoder::<false>(isa, x, alphabet, &plan.model, d);
        len += fixed_bytes(x.len(), &plan.model, coded.nwords, coded.escapes.len() as u64) + 2 * coded.nwords;
    }
    Ok(len)
}

/// The block's length in bytes as [`encode`] would write it, with the coded symbols estimated
/// from the model (within a few bytes; the search compares candidates with it): the plan
/// without the state machine.
pub fn estimated_len(symbols: &[u16], ctx: Ctx) -> Result<usize> {
    estimated_len_block(symbols, ctx, false)
}

/// [`estimated_len`] of the block [`encode_block`] would append: a split block adds the second
/// stream's states and counts.
pub fn estimated_len_block(symbols: &[u16], ctx: Ctx, split: bool) -> Result<usize> {
    split_distance(ctx, split)?;
    if symbols.is_empty() {
        return Ok(0);
    }
    let (plan, _) = plan(symbols, ctx)?;
    if plan.spec.is_none() {
        return Ok((gamma_len(1) + gamma_len(plan.model.coded[0] as u64 + 1)).div_ceil(8) as usize);
    }
    // The estimate counts the words' varint as one byte.
    let words = plan.est / 16.0;
    let second =
        if super::splits(split, symbols.len()) { 4 * LANES + 2 + usize::from(!plan.model.escs.is_empty()) } else { 0 };
    Ok((plan.est / 8.0).ceil() as usize + (64 - (words as u64 | 1).leading_zeros() as usize).div_ceil(7) - 1 + second)
}
