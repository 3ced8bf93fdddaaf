//! Entropy-coded leaves over streams of at most 16 bits:
//! `rans(ctx)` (id 0x02), static rANS with per-block tables and an optional context
//! (`prev`: the previous word; `side j`: the word at the same position of sibling `j`, which the
//! parent decodes first), and `huffman` (id 0x03), canonical length-limited Huffman.
//! `rans(pop d)` (format version 12) takes as context the bits set in the `d` words before each
//! word: the density of a bit mask (a pruned tensor's zero mask) around it.
//! A `prev` or `back d` context comes in two forms: serial (each symbol's table waits for the
//! symbol before it, decoded by another of the four states), and split (format version 7: the
//! block is four runs, one per state, each with its own contexts, so the states decode
//! independently; `rans::Ctx::Split`). The search writes the split form.
//! Each block (chunk) carries its own tables, so coding adapts along a tensor.

use super::prelude::*;
use crate::coder::{huffman, rans};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafCtx {
    None,
    /// The word `stride` positions earlier (1: the previous word; a row length: the word above).
    Back(u64),
    /// Index of an earlier sibling stream (at most 16 bits wide).
    Side(u8),
    /// Bits `shift..shift+bits` of the reference word at the same position (e.g. its exponent).
    Ref {
        shift: u8,
        bits: u8,
    },
    /// The bits set in the `d` words before it (`1 <= d <= rans::MAX_POP`), in four runs as
    /// the split form of `Back` (`rans::Ctx::Pop`).
    Pop(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rans {
    pub ctx: LeafCtx,
    /// With a `Back` context: the block is four runs, each with its own contexts.
    pub split: bool,
}

impl Rans {
    pub const ID: u8 = 0x02;

    /// A leaf with context `ctx`; a `Back` context in its split form.
    pub fn new(ctx: LeafCtx) -> Rans {
        Rans { ctx, split: matches!(ctx, LeafCtx::Back(_)) }
    }

    /// Context kinds on the wire: 0 none, 1 back (varint stride), 2 side (u8 sibling),
    /// 3 ref (u8 shift, u8 bits), 4 back in four runs (varint stride; format version 7),
    /// 5 popcount in four runs (u8 window; format version 12).
    pub fn write(&self, out: &mut Vec<u8>) {
        match self.ctx {
            LeafCtx::None => out.push(0),
            LeafCtx::Back(d) => {
                out.push(if self.split { 4 } else { 1 });
                put_varint(out, d);
            }
            LeafCtx::Side(j) => out.extend_from_slice(&[2, j]),
            LeafCtx::Ref { shift, bits } => out.extend_from_slice(&[3, shift, bits]),
            LeafCtx::Pop(d) => out.extend_from_slice(&[5, d]),
        }
    }

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let kind = r.u8()?;
        let ctx = match kind {
            0 => LeafCtx::None,
            1 | 4 => {
                let d = r.varint()?;
                if d == 0 || d > u32::MAX as u64 {
                    return Err(Error::corrupt("rans: bad context distance"));
                }
                LeafCtx::Back(d)
            }
            2 => LeafCtx::Side(r.u8()?),
            3 => {
                let (shift, bits) = (r.u8()?, r.u8()?);
                if shift >= 64 || bits == 0 || bits > 16 {
                    return Err(Error::corrupt("rans: bad reference context"));
                }
                LeafCtx::Ref { shift, bits }
            }
            5 => {
                let d = r.u8()?;
                if d == 0 || d as usize > rans::MAX_POP {
                    return Err(Error::corrupt("rans: bad popcount window"));
                }
                LeafCtx::Pop(d)
            }
            k => return Err(Error::Unsupported(format!("rans: unknown context kind {k}"))),
        };
        Ok(Rans { ctx, split: kind == 4 })
    }

    /// The context values when they come from another stream (a sibling or the reference).
    fn side(&self, sib: &[Stream], reference: Option<&Stream>, n: usize) -> Result<Option<Vec<u16>>> {
        match self.ctx {
            LeafCtx::Side(j) => {
                let s = sib.get(j as usize).ok_or_else(|| Error::corrupt("rans: context sibling missing"))?;
                if s.ty.bits > 16 || s.len() != n {
                    return Err(Error::corrupt("rans: context sibling does not fit"));
                }
                Ok(Some(s.to_u16()))
            }
            LeafCtx::Ref { shift, bits } => {
                let r = reference
                    .ok_or_else(|| Error::invalid("this tensor is coded against a reference, and none was given"))?;
                if r.len() != n {
                    return Err(Error::corrupt("rans: reference context does not align with the stream"));
                }
                let m = (1u64 << bits) - 1;
                Ok(Some(r.iter().map(|v| ((v >> shift) & m) as u16).collect()))
            }
            _ => Ok(None),
        }
    }

    /// The coder's context for a `Back(d)` context in this leaf's form.
    pub fn back_ctx(&self, d: u64) -> rans::Ctx<'static> {
        if self.split {
            rans::Ctx::Split(d as usize)
        } else {
            rans::Ctx::Back(d as usize)
        }
    }

    /// The coder's context when it comes from the leaf's own symbols (none, a word back, a
    /// popcount); `None` when it comes from another stream.
    pub fn own_ctx(&self) -> Option<rans::Ctx<'static>> {
        match self.ctx {
            LeafCtx::None => Some(rans::Ctx::None),
            LeafCtx::Back(d) => Some(self.back_ctx(d)),
            LeafCtx::Pop(d) => Some(rans::Ctx::Pop(d as usize)),
            LeafCtx::Side(_) | LeafCtx::Ref { .. } => None,
        }
    }

    fn coder_ctx<'a>(&self, side: &'a Option<Vec<u16>>) -> rans::Ctx<'a> {
        match (self.own_ctx(), side) {
            (Some(c), _) => c,
            (None, Some(s)) => rans::Ctx::Side(s),
            (None, None) => rans::Ctx::None,
        }
    }

    pub fn encode(&self, x: &Stream, sib: &[Stream], reference: Option<&Stream>, out: &mut Vec<u8>) -> Result<()> {
        if x.is_empty() {
            return Ok(());
        }
        let side = self.side(sib, reference, x.len())?;
        rans::encode(&x.u16_symbols(), self.coder_ctx(&side), out);
        Ok(())
    }

    /// The length [`Rans::encode`] would append, with the coded symbols estimated from the tables.
    pub fn estimated_len(&self, x: &Stream, sib: &[Stream], reference: Option<&Stream>) -> Result<usize> {
        if x.is_empty() {
            return Ok(0);
        }
        let side = self.side(sib, reference, x.len())?;
        Ok(rans::estimated_len(&x.u16_symbols(), self.coder_ctx(&side)))
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8], sib: &[Stream], reference: Option<&Stream>) -> Result<Stream> {
        if n == 0 {
            if !input.is_empty() {
                return Err(Error::corrupt("rans leaf: bytes for an empty stream"));
            }
            return Ok(Stream::with_capacity(ty, 0));
        }
        let side = self.side(sib, reference, n)?;
        let mut out = Vec::with_capacity(n);
        let used = rans::decode(input, n, self.coder_ctx(&side), &mut out)?;
        if used != input.len() {
            return Err(Error::corrupt("rans leaf: trailing bytes"));
        }
        check_range(ty, &out)?;
        Ok(Stream::from_u16(ty, out))
    }
}

pub(crate) fn check_range(ty: Ty, v: &[u16]) -> Result<()> {
    // An OR over all symbols (no early exit) so the loop vectorizes.
    let outside = !(ty.mask() as u16);
    if v.iter().fold(0u16, |a, &s| a | (s & outside)) != 0 {
        return Err(Error::corrupt("entropy leaf: symbol does not fit its type"));
    }
    Ok(())
}

impl std::fmt::Display for Rans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runs = if self.split { ", split" } else { "" };
        match self.ctx {
            LeafCtx::None => write!(f, "rans"),
            LeafCtx::Back(1) => write!(f, "rans(prev{runs})"),
            LeafCtx::Back(d) => write!(f, "rans(back {d}{runs})"),
            LeafCtx::Side(j) => write!(f, "rans(side{j})"),
            LeafCtx::Ref { shift, bits } => write!(f, "rans(ref {shift}:{bits})"),
            LeafCtx::Pop(d) => write!(f, "rans(pop {d})"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Huffman;

impl Huffman {
    pub const ID: u8 = 0x03;

    pub fn encode(&self, x: &Stream, out: &mut Vec<u8>) {
        if !x.is_empty() {
            huffman::encode(&x.u16_symbols(), out);
        }
    }

    /// The exact length [`Huffman::encode`] would append, from the histogram alone.
    pub fn encoded_len(&self, x: &Stream) -> usize {
        huffman::encoded_len(&x.u16_symbols())
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        if n == 0 {
            return Ok(Stream::with_capacity(ty, 0));
        }
        let mut out = Vec::with_capacity(n);
        let used = huffman::decode(input, n, &mut out)?;
        if used != input.len() {
            return Err(Error::corrupt("huffman leaf: trailing bytes"));
        }
        check_range(ty, &out)?;
        Ok(Stream::from_u16(ty, out))
    }
}

/// Order-0 entropy of a stream in bytes: the optimistic cost estimate of an entropy leaf.
pub fn entropy_estimate(x: &Stream) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    let mut counts = std::collections::HashMap::new();
    for v in x.iter() {
        *counts.entry(v).or_insert(0u64) += 1;
    }
    let n = x.len() as f64;
    counts.values().map(|&c| c as f64 * (n / c as f64).log2()).sum::<f64>() / 8.0
}
