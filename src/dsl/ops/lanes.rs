//! `lanes(ctx)` (id 0x08): the decode-speed entropy leaf over streams of at most 16 bits:
//! 32 interleaved rANS lanes with small tables (`coder::lanes`), symbol `i` in lane `i % 32`.
//! Context kinds: `none` (order 0), `prev` (the previous symbol of the same lane, the word 32
//! positions back), `back d` (the word `d` positions back, `d` a multiple of 32: the row above
//! in a matrix with rows of `d` words) and `adj` (format version 4: the adjacent word `i - 1`).
//! For `adj` each lane owns a contiguous run: the stream's first `32 r` words (`r = n / 32`) are
//! coded in the order `y[32 t + j] = x[r j + t]` (the last `n - 32 r` words follow as they are)
//! with the `prev` context, so that the lane's previous symbol is the word before; the decoder
//! writes the runs back in place. Each block (chunk) carries its own tables.
//!
//! From format version 14 the search writes `none` and `prev` as the context kinds 4 and 5, the
//! same contexts whose blocks of at least `lanes::SPLIT_MIN` symbols are *split*: one table, two
//! streams that take the block's segments of 2048 symbols in turn, each with its own 32 states
//! and words (`coder::lanes`), so that a decoder runs two independent sets of chains.

use super::prelude::*;
use crate::coder::lanes;
use std::cell::Cell;

/// How a lanes leaf assigns words to lanes and which word is the context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LanesCtx {
    /// Word `i` in lane `i % 32`, with the coder's context (none, prev or back `d`).
    Interleaved(lanes::Ctx),
    /// Each lane owns a contiguous run of words; the context is the previous word.
    Adjacent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    pub ctx: LanesCtx,
    /// Whether large blocks are split into two streams (`none` and `prev` only; format version
    /// 14 on).
    pub split: bool,
}

thread_local! {
    /// Symbols in coded order, for [`LanesCtx::Adjacent`] (decoded, or to encode).
    static RUNS: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
}

/// The coded order of [`LanesCtx::Adjacent`] (`simd::to_runs`) of words `x` (bytes or 16-bit
/// words) into `y` (resized to `x.len()`).
fn to_runs_into<T: crate::simd::RunWord>(x: &[T], y: &mut Vec<u16>) {
    // (Every word is written: a reused buffer needs no clearing.)
    y.resize(x.len(), 0);
    crate::simd::to_runs(x, y);
}

/// [`to_runs_into`] a new buffer.
fn to_runs<T: crate::simd::RunWord>(x: &[T]) -> Vec<u16> {
    let mut y = Vec::new();
    to_runs_into(x, &mut y);
    y
}

impl Lanes {
    pub const ID: u8 = 0x08;

    /// The interleaved leaf with coder context `ctx`, its large blocks split where the context
    /// allows it (`none`, `prev`).
    pub const fn interleaved(ctx: lanes::Ctx) -> Lanes {
        Lanes { ctx: LanesCtx::Interleaved(ctx), split: matches!(ctx, lanes::Ctx::None | lanes::Ctx::Prev) }
    }

    /// The leaf `lanes(adj)`.
    pub const fn adjacent() -> Lanes {
        Lanes { ctx: LanesCtx::Adjacent, split: false }
    }

    /// Context kinds on the wire: 0 none, 1 prev, 2 back (varint `d`), 3 adj; 4 none and 5 prev
    /// with large blocks split (format version 14).
    pub fn write(&self, out: &mut Vec<u8>) {
        match self.ctx {
            LanesCtx::Interleaved(lanes::Ctx::None) => out.push(if self.split { 4 } else { 0 }),
            LanesCtx::Interleaved(lanes::Ctx::Prev) => out.push(if self.split { 5 } else { 1 }),
            LanesCtx::Interleaved(lanes::Ctx::Back(d)) => {
                out.push(2);
                put_varint(out, d as u64);
            }
            LanesCtx::Adjacent => out.push(3),
        }
    }

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let kind = r.u8()?;
        let ctx = match kind {
            0 | 4 => LanesCtx::Interleaved(lanes::Ctx::None),
            1 | 5 => LanesCtx::Interleaved(lanes::Ctx::Prev),
            2 => {
                let d = r.varint()?;
                if d == 0 || d % lanes::LANES as u64 != 0 || d > lanes::MAX_BACK as u64 {
                    return Err(Error::corrupt("lanes: bad context distance"));
                }
                LanesCtx::Interleaved(lanes::Ctx::Back(d as u32))
            }
            3 => LanesCtx::Adjacent,
            k => return Err(Error::Unsupported(format!("lanes: unknown context kind {k}"))),
        };
        Ok(Lanes { ctx, split: kind >= 4 })
    }

    pub fn encode(&self, x: &Stream, out: &mut Vec<u8>) -> Result<()> {
        if x.ty.bits > 16 {
            return Err(Error::invalid("lanes leaf over words wider than 16 bits"));
        }
        match (&x.data, self.ctx) {
            // Byte planes go to the coded order straight from their bytes.
            (Data::U8(d), LanesCtx::Adjacent) => Self::encode_adjacent(d, out),
            _ => self.encode_symbols(&x.u16_symbols(), out),
        }
    }

    /// [`LanesCtx::Adjacent`]'s coding of the words `x`: in the coded order, with the previous
    /// symbol as context.
    fn encode_adjacent<T: crate::simd::RunWord>(x: &[T], out: &mut Vec<u8>) -> Result<()> {
        if x.is_empty() {
            return Ok(());
        }
        let mut y = RUNS.take();
        to_runs_into(x, &mut y);
        let done = lanes::encode(&y, lanes::Ctx::Prev, out);
        RUNS.set(y);
        done
    }

    /// [`Lanes::encode`] of the words `x` of a stream of at most 16 bits.
    pub fn encode_symbols(&self, x: &[u16], out: &mut Vec<u8>) -> Result<()> {
        if x.is_empty() {
            return Ok(());
        }
        match self.ctx {
            LanesCtx::Interleaved(ctx) => lanes::encode_block(crate::simd::isa(), x, ctx, self.split, out),
            LanesCtx::Adjacent => Self::encode_adjacent(x, out),
        }
    }

    /// The length [`Lanes::encode`] would append, with the coded symbols estimated from the model.
    pub fn estimated_len(&self, x: &Stream) -> Result<usize> {
        if x.ty.bits > 16 {
            return Err(Error::invalid("lanes leaf over words wider than 16 bits"));
        }
        match self.ctx {
            LanesCtx::Interleaved(ctx) => lanes::estimated_len_block(&x.u16_symbols(), ctx, self.split),
            LanesCtx::Adjacent => {
                let runs = match &x.data {
                    Data::U8(d) => to_runs(d),
                    _ => to_runs(&x.u16_symbols()[..]),
                };
                lanes::estimated_len(&runs, lanes::Ctx::Prev)
            }
        }
    }

    /// Decodes `out.len()` symbols of type `ty` (at most 16 bits) into `out`.
    pub fn decode_into(&self, ty: Ty, input: &[u8], out: &mut [u16]) -> Result<()> {
        if out.is_empty() {
            if !input.is_empty() {
                return Err(Error::corrupt("lanes leaf: bytes for an empty stream"));
            }
            return Ok(());
        }
        let used = match self.ctx {
            LanesCtx::Interleaved(ctx) => lanes::decode_block(crate::simd::isa(), input, ctx, self.split, out)?,
            // Each few steps moved to their runs while in L1.
            LanesCtx::Adjacent => lanes::decode_runs(input, out)?,
        };
        if used != input.len() {
            return Err(Error::corrupt("lanes leaf: trailing bytes"));
        }
        super::entropy::check_range(ty, out)
    }

    /// Whether [`Lanes::decode_with`] takes this leaf: its symbols are coded in their order
    /// (not `lanes(adj)`, whose runs span the whole stream).
    pub fn in_order(&self) -> bool {
        matches!(self.ctx, LanesCtx::Interleaved(_))
    }

    /// Decodes `n` symbols of type `ty` (at most 16 bits) a few steps at a time into a buffer in
    /// L1, each segment checked and handed to `sink` with the index of its first symbol (so that
    /// what merges them into words reads them from L1). For a leaf [`Lanes::in_order`].
    pub fn decode_with(
        &self,
        ty: Ty,
        input: &[u8],
        n: usize,
        mut sink: impl FnMut(usize, &[u16]) -> Result<()>,
    ) -> Result<()> {
        let LanesCtx::Interleaved(ctx) = self.ctx else {
            return Err(Error::invalid("lanes(adj) decodes in runs, not in segments"));
        };
        if n == 0 {
            if !input.is_empty() {
                return Err(Error::corrupt("lanes leaf: bytes for an empty stream"));
            }
            return Ok(());
        }
        let used = lanes::decode_with(input, ctx, self.split, n, |start, seg| {
            super::entropy::check_range(ty, seg)?;
            sink(start, seg)
        })?;
        if used != input.len() {
            return Err(Error::corrupt("lanes leaf: trailing bytes"));
        }
        Ok(())
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        if ty.container_bytes() == 1 {
            match self.ctx {
                LanesCtx::Interleaved(ctx) => return self.decode_bytes(ctx, ty, n, input),
                LanesCtx::Adjacent if n > 0 => {
                    let mut out = vec![0u8; n];
                    let check = |s: &[u16]| super::entropy::check_range(ty, s);
                    if lanes::decode_runs_checked(crate::simd::isa(), input, &mut out, check)? != input.len() {
                        return Err(Error::corrupt("lanes leaf: trailing bytes"));
                    }
                    return Ok(Stream { ty, data: Data::U8(out) });
                }
                _ => {}
            }
        }
        let mut out = vec![0u16; n];
        self.decode_into(ty, input, &mut out)?;
        Ok(Stream::from_u16(ty, out))
    }

    /// [`Lanes::decode`] of symbols of at most 8 bits: a few steps at a time, checked and
    /// narrowed to bytes while in L1.
    fn decode_bytes(&self, ctx: lanes::Ctx, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        let mut out = Vec::with_capacity(n);
        if n > 0 {
            let used = lanes::decode_with(input, ctx, self.split, n, |_, seg| {
                super::entropy::check_range(ty, seg)?;
                out.extend(seg.iter().map(|&s| s as u8));
                Ok(())
            })?;
            if used != input.len() {
                return Err(Error::corrupt("lanes leaf: trailing bytes"));
            }
        } else if !input.is_empty() {
            return Err(Error::corrupt("lanes leaf: bytes for an empty stream"));
        }
        Ok(Stream { ty, data: Data::U8(out) })
    }
}

impl std::fmt::Display for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ctx {
            LanesCtx::Interleaved(lanes::Ctx::None) => write!(f, "lanes"),
            LanesCtx::Interleaved(lanes::Ctx::Prev) => write!(f, "lanes(prev)"),
            LanesCtx::Interleaved(lanes::Ctx::Back(d)) => write!(f, "lanes(back {d})"),
            LanesCtx::Adjacent => write!(f, "lanes(adj)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coded order is a permutation that `simd::from_runs` inverts, for every length around
    /// the multiples of 32 and of the block of 16 steps.
    #[test]
    fn runs_invert() {
        for n in [1usize, 2, 31, 32, 33, 63, 64, 65, 511, 512, 513, 32 * 16 * 3 + 7, 100_000] {
            let x: Vec<u16> = (0..n).map(|i| (i * 7919 % 65_521) as u16).collect();
            let y = to_runs(&x[..]);
            let r = n / 32;
            for (i, &v) in x.iter().enumerate().take(32 * r) {
                assert_eq!(y[32 * (i % r) + i / r], v, "n {n} i {i}");
            }
            let mut back = vec![0u16; n];
            crate::simd::from_runs(&y, &mut back);
            assert_eq!(back, x, "n {n}");
            // From bytes, the same order.
            let bytes: Vec<u8> = x.iter().map(|&v| v as u8).collect();
            let mut from_bytes = Vec::new();
            to_runs_into(&bytes, &mut from_bytes);
            let widened: Vec<u16> = bytes.iter().map(|&v| v as u16).collect();
            assert_eq!(from_bytes, to_runs(&widened[..]), "n {n}");
        }
    }

    /// Every context decodes a byte stream (narrowed a few steps at a time) as it decodes the
    /// same symbols in 16-bit containers, and rejects a symbol out of the byte type's range.
    #[test]
    fn bytes_decode_under_every_context() {
        let ctxs = [
            LanesCtx::Interleaved(lanes::Ctx::None),
            LanesCtx::Interleaved(lanes::Ctx::Prev),
            LanesCtx::Interleaved(lanes::Ctx::Back(64)),
            LanesCtx::Interleaved(lanes::Ctx::Back(512)),
            LanesCtx::Adjacent,
        ];
        for n in [0usize, 1, 33, 1000, 70_000, lanes::SPLIT_MIN + lanes::SEGMENT + 5] {
            // Rows of 64 that repeat with noise: the row above predicts.
            let x = Stream::from_fn(Ty::u(6), n, |i| ((i % 64) * 7 % 61 + ((i * 2_654_435_761) >> 29) % 3) as u64);
            let split = |ctx| [false, matches!(ctx, LanesCtx::Interleaved(lanes::Ctx::None | lanes::Ctx::Prev))];
            for (ctx, split) in ctxs.into_iter().flat_map(|c| split(c).map(|s| (c, s))) {
                let op = Lanes { ctx, split };
                let mut payload = Vec::new();
                op.encode(&x, &mut payload).unwrap();
                let got = op.decode(Ty::u(6), n, &payload).unwrap();
                assert!(matches!(got.data, Data::U8(_)), "{op}");
                assert_eq!(got, x, "{op} n {n}");
                let wide = op.decode(Ty::u(9), n, &payload).unwrap();
                assert_eq!(wide.u16_symbols(), x.u16_symbols(), "{op} n {n}");
                if n > 100 {
                    assert!(op.decode(Ty::u(2), n, &payload).is_err(), "{op} n {n}: out of range");
                }
            }
        }
    }
}
