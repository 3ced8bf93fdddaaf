//! The decoder: the block's tables, then the kernel for the CPU level: `scalar.rs` (32 lanes
//! unrolled), `avx2.rs` (four vectors of eight lanes), `avx512.rs` (the same with AVX-512 VL
//! refills; on Intel's cores, two vectors of sixteen lanes with the hardware gather). All give
//! identical results, errors included.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

use super::model::{build_model, read_spec, Model, SpecReader};
use super::{Ctx, L, LANES, SEGMENT};
use crate::coder::bitio::ByteReader;
use crate::error::{Error, Result};
use crate::simd::{Isa, RunWord};
use scalar::scalar_run;

/// Decode tables of a block.
pub(super) struct Tables {
    pub(super) prec: u32,
    /// `classes << prec` packed entries: `freq - 1 | (slot - cum) << 12 | index << 24`.
    pub(super) tab: Vec<u32>,
    /// Mapped mode: value of each index (0 for the escape and unused indices).
    pub(super) map: [u32; 256],
    pub(super) mapped: bool,
    /// Direct mode: value of index 0.
    pub(super) base: u16,
    /// Index of the escape (256 when nothing is escaped).
    pub(super) esc_idx: u32,
    /// Table offset (`class << prec`) by the previous symbol's index.
    pub(super) class_off: [u32; 256],
    /// Class thresholds in index space.
    pub(super) idx_thresholds: Vec<u32>,
}

pub(super) fn build_tables(model: &Model) -> Tables {
    let c = model.coded.len();
    let direct = c > 0 && (model.coded[c - 1] - model.coded[0]) as usize <= 254;
    // Bytes that span more (a byte's every value, as quants of signed bytes or two packed
    // nibbles take) are their own indices too, where a byte value can stand for the escape:
    // none is needed, or no context class depends on the index (a block with an escape codes at
    // most 255 values, so one is free). The decoders take them as direct ones from 0, without a
    // map look-up per symbol (a third of a step's instructions in the SIMD decoders).
    let bytes = !direct && c > 0 && model.coded[c - 1] <= 255 && (model.escs.is_empty() || model.thresholds.is_empty());
    let mapped = !direct && !bytes;
    let base = if direct { model.coded[0] } else { 0 };
    // The escape's index: past the coded ones, or (bytes) the first value not coded (`coded` is
    // ascending).
    let esc = match (direct, bytes) {
        (true, _) => 255,
        (_, true) => model.coded.iter().zip(0u32..).find(|&(&s, v)| s as u32 != v).map_or(c as u32, |(_, v)| v),
        _ => c as u32,
    };
    let idx = |r: usize| -> u32 {
        if r == c {
            esc
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
pub(super) struct EscReader<'a> {
    pub(super) data: &'a [u8],
    pub(super) bit: usize,
    pub(super) left: u64,
    pub(super) bits: u32,
    pub(super) syms: &'a [u16],
}

impl EscReader<'_> {
    #[cold]
    #[inline(never)]
    pub(super) fn next(&mut self) -> Result<u16> {
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
pub(super) const CTX_NONE: u8 = 0;
pub(super) const CTX_PREV: u8 = 1;
pub(super) const CTX_BACK: u8 = 2;

/// Decoder state between kernels: lane states, previous indices, next word.
pub(super) struct Lanes {
    pub(super) x: [u32; LANES],
    pub(super) prev: [u8; LANES],
    pub(super) pos: usize,
    /// `CTX_BACK`: the indices of the last `ring.len() / 32` steps, step `t` at row
    /// `t % (ring.len() / 32)` (zeros before the first step); a step reads its context from its
    /// row, then overwrites it with its own indices.
    pub(super) ring: Vec<u8>,
    /// `CTX_BACK`: the row of the next step in `ring`.
    pub(super) row: usize,
}

/// The words and escapes of a block.
pub(super) struct Input<'a> {
    /// `nwords` little-endian words; when there are none, one zero word (never counted).
    pub(super) words: &'a [u8],
    pub(super) nwords: usize,
}

impl Input<'_> {
    /// Word `pos`, or the last word when `pos` is past the end (the caller then fails the block).
    #[inline(always)]
    pub(super) fn word(&self, pos: usize) -> u32 {
        let last = self.words.len() / 2 - 1;
        let p = pos.min(last);
        debug_assert!(2 * p + 1 < self.words.len());
        // SAFETY: `words` holds at least one word (see `Input::words`) and `p <= last`.
        unsafe { u16::from_le_bytes([*self.words.get_unchecked(2 * p), *self.words.get_unchecked(2 * p + 1)]) as u32 }
    }
}

/// Decodes exactly `out.len()` symbols from the start of a block encoded with [`Ctx::None`] or
/// [`Ctx::Prev`]; returns the bytes consumed. Forged or truncated input gives
/// `Err(Error::Corrupt(..))` (`out` then holds unspecified values), never a panic or an
/// out-of-bounds read; memory is bounded by the tables (at most 32 KiB of decode table and a few
/// KiB more).
pub fn decode(input: &[u8], out: &mut [u16]) -> Result<usize> {
    decode_ctx_at(crate::simd::isa(), input, Ctx::Prev, out)
}

/// [`decode`] at a given SIMD level (lowered to what the CPU has).
pub fn decode_at(isa: Isa, input: &[u8], out: &mut [u16]) -> Result<usize> {
    decode_ctx_at(isa, input, Ctx::Prev, out)
}

/// Decodes a block encoded with context `ctx` (as [`decode`]; `None` and `Prev` decode alike, as
/// the block says whether it has classes). `Ctx::Back(d)` with `d` out of range:
/// `Err(Error::Corrupt(..))`. `Back(d)` also keeps the indices of the last `d` symbols
/// (`min(d, out.len())` bytes).
pub fn decode_ctx(input: &[u8], ctx: Ctx, out: &mut [u16]) -> Result<usize> {
    decode_ctx_at(crate::simd::isa(), input, ctx, out)
}

/// [`decode_ctx`] at a given SIMD level (lowered to what the CPU has).
pub fn decode_ctx_at(isa: Isa, input: &[u8], ctx: Ctx, out: &mut [u16]) -> Result<usize> {
    decode_block(isa, input, ctx, false, out)
}

/// [`decode_ctx_at`] of a block of a leaf that allows splitting where `split`
/// ([`super::encode_block`]).
pub fn decode_block(isa: Isa, input: &[u8], ctx: Ctx, split: bool, out: &mut [u16]) -> Result<usize> {
    decode_segments(Kernel::of(isa), input, ctx, split, out.len(), |next| {
        // A split block takes its segments two at a time.
        for seg in out.chunks_mut(if split { PAIR } else { usize::MAX }) {
            next(seg)?;
        }
        Ok(())
    })
}

/// A decoder kernel: the CPU level (lowered to what the CPU has) and, at the AVX-512 level,
/// whether table lookups take the hardware gather (the sixteen-lane decoder, `run_wide`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Kernel {
    pub(super) isa: Isa,
    pub(super) gather: bool,
}

impl Kernel {
    /// The kernel of level `isa` on this CPU: the hardware gather where it is fast
    /// ([`crate::simd::fast_gather`]).
    pub(super) fn of(isa: Isa) -> Kernel {
        let isa = isa.min(crate::simd::detected());
        Kernel { isa, gather: isa == Isa::Avx512 && crate::simd::fast_gather() }
    }

    /// Every kernel this CPU can run (for tests): each level, and at the AVX-512 level both the
    /// eight-lane decoder with scalar table loads and the sixteen-lane one with the gather.
    #[cfg(test)]
    pub(super) fn all() -> Vec<Kernel> {
        let mut all: Vec<Kernel> =
            crate::simd::available().into_iter().map(|isa| Kernel { isa, gather: false }).collect();
        if all.iter().any(|k| k.isa == Isa::Avx512) {
            all.push(Kernel { isa: Isa::Avx512, gather: true });
        }
        all
    }
}

/// [`decode_ctx_at`] with a given kernel (for tests).
#[cfg(test)]
pub(super) fn decode_ctx_kernel(k: Kernel, input: &[u8], ctx: Ctx, split: bool, out: &mut [u16]) -> Result<usize> {
    decode_segments(k, input, ctx, split, out.len(), |next| {
        for seg in out.chunks_mut(if split { PAIR } else { usize::MAX }) {
            next(seg)?;
        }
        Ok(())
    })
}

/// Decodes a block of `n` symbols encoded with `ctx` a few steps at a time into a buffer in L1,
/// handing each segment (at most [`SEGMENT`] symbols) to `sink` with the index of its first
/// symbol: what narrows symbols to bytes, or merges them into words, takes them without a
/// whole-block buffer of 16-bit symbols.
/// Returns the bytes consumed; errors as [`decode_ctx`] (`sink`'s included; segments handed
/// before a corrupt block is found hold unspecified values).
pub fn decode_with(
    input: &[u8],
    ctx: Ctx,
    split: bool,
    n: usize,
    mut sink: impl FnMut(usize, &[u16]) -> Result<()>,
) -> Result<usize> {
    // A split block is decoded two segments at a time (a segment of each stream at once) and
    // handed to `sink` one segment at a time; a block that is not split, a segment at a time.
    let mut buf = [0u16; PAIR];
    let step = if super::splits(split, n) { PAIR } else { SEGMENT };
    decode_segments(Kernel::of(crate::simd::isa()), input, ctx, split, n, |next| {
        for start in (0..n).step_by(step) {
            let seg = &mut buf[..(n - start).min(step)];
            next(seg)?;
            for (j, s) in seg.chunks(SEGMENT).enumerate() {
                sink(start + j * SEGMENT, s)?;
            }
        }
        Ok(())
    })
}

/// Steps decoded at a time by [`decode_runs`]: 4 KiB, in L1 until they are moved. A segment of
/// a split block.
const RUN_STEPS: usize = 64;
const _: () = assert!(RUN_STEPS * LANES == SEGMENT);
/// Symbols a split block decodes at a time: a segment of each stream (8 KiB, in L1 until
/// [`decode_with`] moves them).
const PAIR: usize = 2 * SEGMENT;

/// Decodes a block of `out.len()` symbols encoded with [`Ctx::Prev`] in the order of
/// `simd::to_runs`, and writes them back in run order (`simd::from_runs`): 64 steps
/// at a time into a buffer in L1, each moved to its runs at once. As [`decode`] otherwise.
pub fn decode_runs(input: &[u8], out: &mut [u16]) -> Result<usize> {
    decode_runs_at(crate::simd::isa(), input, out)
}

/// [`decode_runs`] at a given SIMD level (lowered to what the CPU has).
pub fn decode_runs_at(isa: Isa, input: &[u8], out: &mut [u16]) -> Result<usize> {
    decode_runs_checked(isa, input, out, |_| Ok(()))
}

/// [`decode_runs`] into words of 8 or 16 bits: `check` sees every symbol while it is in L1
/// (before it is narrowed to a byte) and stops the decoding with its error.
pub fn decode_runs_checked<T: RunWord>(
    isa: Isa,
    input: &[u8],
    out: &mut [T],
    check: impl Fn(&[u16]) -> Result<()>,
) -> Result<usize> {
    let n = out.len();
    let r = n / LANES;
    let mut buf = [0u16; RUN_STEPS * LANES];
    decode_segments(Kernel::of(isa), input, Ctx::Prev, false, n, |next| {
        for t0 in (0..r).step_by(RUN_STEPS) {
            let block = &mut buf[..RUN_STEPS.min(r - t0) * LANES];
            next(block)?;
            check(block)?;
            crate::simd::from_runs_steps_at(isa, block, out, t0);
        }
        // The last `n % 32` symbols are in place.
        let tail = &mut buf[..n - LANES * r];
        next(tail)?;
        check(tail)?;
        for (o, &v) in out[LANES * r..].iter_mut().zip(tail.iter()) {
            *o = T::narrow(v);
        }
        Ok(())
    })
}

/// Decodes the `n` symbols of a block encoded with `ctx` through `f`, which hands `next`
/// consecutive segments of them: each but the last a whole number of steps, `n` symbols in all;
/// for a split block ([`super::splits`]), each two whole segments ([`PAIR`] symbols: a segment
/// of each stream) but the last. Returns the bytes consumed.
fn decode_segments(
    k: Kernel,
    input: &[u8],
    ctx: Ctx,
    split: bool,
    n: usize,
    f: impl FnOnce(&mut dyn FnMut(&mut [u16]) -> Result<()>) -> Result<()>,
) -> Result<usize> {
    let d = ctx.distance().ok_or_else(|| Error::corrupt(format!("lanes: bad context {ctx:?}")))?;
    if split && d != LANES {
        return Err(Error::corrupt("lanes: a split block with a context distance"));
    }
    if n == 0 {
        return Ok(0);
    }
    let mut r = SpecReader::new(input);
    let mut single = 0u16;
    let Some(spec) = read_spec(&mut r, &mut single)? else {
        f(&mut |seg| {
            seg.fill(single);
            Ok(())
        })?;
        return Ok(r.bytes_consumed());
    };
    let model = build_model(&spec)?;
    let head = r.bytes_consumed();
    let mut br = ByteReader::new(&input[head..]);
    let two = super::splits(split, n);
    let lens: &[usize] = &if two { super::stream_lens(n) } else { [n, 0] }[..if two { 2 } else { 1 }];
    let mut nwords = [0usize; 2];
    for (w, &m) in nwords.iter_mut().zip(lens) {
        *w = br.len((br.remaining() as u64 / 2).min(m as u64))?;
    }
    let mut n_esc = [0u64; 2];
    if !model.escs.is_empty() {
        for (e, &m) in n_esc.iter_mut().zip(lens) {
            *e = br.len(m as u64)? as u64;
        }
    }
    let fresh = || Lanes { x: [L; LANES], prev: [0; LANES], pos: 0, ring: Vec::new(), row: 0 };
    let mut st = [fresh(), fresh()];
    for (s, &m) in st.iter_mut().zip(lens) {
        for x in &mut s.x[..m.min(LANES)] {
            *x = br.u32_le()?;
        }
    }
    let mut esc_data: [&[u8]; 2] = [&[], &[]];
    for (e, &c) in esc_data.iter_mut().zip(&n_esc[..lens.len()]) {
        *e = br.take((c as u128 * model.esc_bits() as u128).div_ceil(8) as usize)?;
    }
    let mut words: [&[u8]; 2] = [&[], &[]];
    for (w, &c) in words.iter_mut().zip(&nwords[..lens.len()]) {
        *w = br.take(2 * c)?;
    }
    let consumed = head + br.pos();
    let t = build_tables(&model);
    let inp = [0, 1].map(|s| Input { words: if nwords[s] == 0 { &[0, 0] } else { words[s] }, nwords: nwords[s] });
    let [e0, e1] = [0, 1].map(|s| EscReader {
        data: esc_data[s],
        bit: 0,
        left: n_esc[s],
        bits: model.esc_bits(),
        syms: &model.escs,
    });
    let mut esc = [e0, e1];
    // Context rank 0 is class 0 (thresholds are at least 1): without classes, or when every
    // context is rank 0 (`d >= n`), one class.
    let mode = if t.idx_thresholds.is_empty() || d >= n {
        CTX_NONE
    } else if d == LANES {
        CTX_PREV
    } else {
        st[0].ring = vec![0u8; d];
        CTX_BACK
    };
    let mut done = 0usize;
    if two {
        // A segment of each stream at once: the first stream's into the first half of `seg`,
        // the second's into the rest, in place.
        f(&mut |seg| {
            if seg.len() != PAIR.min(n - done) {
                return Err(Error::invalid("lanes: a split block decodes two segments at a time"));
            }
            done += seg.len();
            let (a, b) = seg.split_at_mut(SEGMENT.min(seg.len()));
            let [s0, s1] = &mut st;
            let [x0, x1] = &mut esc;
            run_pair(k, mode, &t, &inp, [x0, x1], [s0, s1], a, b)
        })?;
    } else {
        f(&mut |seg| {
            debug_assert!(done.is_multiple_of(LANES));
            done += seg.len();
            run(k, mode, &t, &inp[0], &mut esc[0], &mut st[0], seg)
        })?;
    }
    debug_assert_eq!(done, n);
    for ((s, i), (e, &m)) in st.iter().zip(&inp).zip(esc.iter().zip(lens)) {
        if s.pos != i.nwords || s.x[..m.min(LANES)].iter().any(|&x| x != L) || e.left != 0 {
            return Err(Error::corrupt(if s.pos > i.nwords {
                "lanes: data ends early"
            } else {
                "lanes: stream does not end in the initial state"
            }));
        }
    }
    Ok(consumed)
}

/// Decodes a segment of each stream of a split block, the first stream's into `a` and the
/// second's into `b` (empty after the last segment): at the AVX-512 level with the hardware
/// gather, both at once (four independent vectors of sixteen lanes), then each one's rest; at
/// the other levels one after the other. The first stream's escapes are read before the
/// second's at every level, so that errors agree.
#[allow(clippy::too_many_arguments)]
fn run_pair(
    k: Kernel,
    mode: u8,
    t: &Tables,
    inp: &[Input; 2],
    esc: [&mut EscReader; 2],
    st: [&mut Lanes; 2],
    a: &mut [u16],
    b: &mut [u16],
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if k.isa.min(crate::simd::detected()) == Isa::Avx512 && k.gather && mode != CTX_BACK {
        let esc_on = t.esc_idx < 256;
        macro_rules! go {
            ($m:literal, $e:literal) => {
                if mode == CTX_NONE {
                    pair_entry::<$m, $e, CTX_NONE>(t, inp, esc, st, a, b)
                } else {
                    pair_entry::<$m, $e, CTX_PREV>(t, inp, esc, st, a, b)
                }
            };
        }
        return match (t.mapped, esc_on) {
            (false, false) => go!(false, false),
            (false, true) => go!(false, true),
            (true, false) => go!(true, false),
            (true, true) => go!(true, true),
        };
    }
    let [e0, e1] = esc;
    let [s0, s1] = st;
    run(k, mode, t, &inp[0], e0, s0, a)?;
    run(k, mode, t, &inp[1], e1, s1, b)
}

/// [`run_pair`] at the AVX-512 level with the hardware gather: [`avx512::pair_wide`] while both
/// segments and both word streams hold whole steps, then the escapes of those steps and the
/// rest of each segment, the first stream's before the second's.
#[cfg(target_arch = "x86_64")]
fn pair_entry<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &[Input; 2],
    esc: [&mut EscReader; 2],
    st: [&mut Lanes; 2],
    a: &mut [u16],
    b: &mut [u16],
) -> Result<()> {
    let mut masks = [[0u32; 2]; RUN_STEPS];
    let whole = a.len().min(b.len()).min(SEGMENT) >= LANES
        && st[0].pos + LANES <= inp[0].nwords
        && st[1].pos + LANES <= inp[1].nwords;
    let [s0, s1] = st;
    // SAFETY: `run_pair` calls this only at the AVX-512 level, which has AVX-512 F, BW and VL,
    // AVX2, BMI2 and POPCNT; both segments and both word streams hold at least one step.
    let steps = if whole {
        unsafe { avx512::pair_wide::<MAPPED, ESC, CTX>(t, inp, [&mut *s0, &mut *s1], [&mut *a, &mut *b], &mut masks) }
    } else {
        0
    };
    for (j, (((s, e), out), i)) in [s0, s1].into_iter().zip(esc).zip([a, b]).zip(inp).enumerate() {
        if ESC {
            for (step, m) in masks[..steps].iter().enumerate() {
                let mut m = m[j];
                while m != 0 {
                    out[LANES * step + m.trailing_zeros() as usize] = e.next()?;
                    m &= m - 1;
                }
            }
        }
        simd_entry::<MAPPED, ESC, CTX, true, true>(t, i, e, s, &mut out[LANES * steps..])?;
    }
    Ok(())
}

pub(super) fn run(
    k: Kernel,
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
    match k.isa.min(crate::simd::detected()) {
        // The AVX-512 level includes POPCNT.
        Isa::Avx512 if k.gather => return go!(simd_entry[, true, true]),
        Isa::Avx512 => return go!(simd_entry[, true, false]),
        Isa::Avx2 if std::arch::is_x86_feature_detected!("popcnt") => return go!(simd_entry[, false, false]),
        _ => {}
    }
    let _ = k;
    go!(scalar_entry[])
}

pub(super) fn scalar_entry<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
) -> Result<()> {
    scalar_run::<MAPPED, ESC, CTX>(t, inp, esc, st, out, 0)
}

/// The AVX2 decoder, with AVX-512 VL refills when `AVX512` (or, when `GATHER` too, the
/// sixteen-lane decoder with the hardware gather), on whole steps; then the scalar one.
#[cfg(target_arch = "x86_64")]
pub(super) fn simd_entry<const MAPPED: bool, const ESC: bool, const CTX: u8, const AVX512: bool, const GATHER: bool>(
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
        } else if AVX512 && GATHER {
            avx512::run_wide::<MAPPED, ESC, CTX>(t, inp, esc, st, out)?
        } else if AVX512 {
            avx512::run::<MAPPED, ESC, CTX>(t, inp, esc, st, out)?
        } else {
            avx2::run::<MAPPED, ESC, CTX>(t, inp, esc, st, out)?
        }
    };
    scalar_run::<MAPPED, ESC, CTX>(t, inp, esc, st, out, done)
}
