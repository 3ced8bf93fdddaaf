//! Operators that read the **reference**: the same chunk of the matching tensor in another
//! checkpoint (a fine-tune's base, the previous step of a training run), supplied to the
//! interpreter by the caller and identified in the archive by hashes.
//!
//! - `xorref` (id 0x40): u(w) -> [u(w)]: each word xor the reference word.
//! - `subref` (id 0x41): u(w) -> [u(w)]: the difference of the words in the order-preserving
//!   integer view of floats (`key(v) = v | sign` for positive, `!v` for negative), wrapping at
//!   `w` bits, zigzagged so small moves up or down give small numbers.
//! - `copyref` (id 0x42): leaf; the chunk equals the reference chunk.
//!
//! A leaf may also take its context from the reference (`rans(ref shift bits)`, see
//! `entropy.rs`): e.g. the reference's exponent, which predicts how far a weight moves in ulps.

use super::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefOp {
    Xor,
    Sub,
    Copy,
}

impl RefOp {
    pub const XOR_ID: u8 = 0x40;
    pub const SUB_ID: u8 = 0x41;
    pub const COPY_ID: u8 = 0x42;

    pub fn id(&self) -> u8 {
        match self {
            RefOp::Xor => Self::XOR_ID,
            RefOp::Sub => Self::SUB_ID,
            RefOp::Copy => Self::COPY_ID,
        }
    }

    /// The reference, which must match the stream's type and length.
    pub fn reference(r: Option<&Stream>, ty: Ty, n: usize) -> Result<&Stream> {
        let r = r.ok_or_else(|| Error::invalid("this tensor is coded against a reference, and none was given"))?;
        if r.ty != ty || r.len() != n {
            return Err(Error::corrupt("reference chunk does not match the tensor's layout"));
        }
        Ok(r)
    }

    fn key(v: u64, w: u32, m: u64) -> u64 {
        let sign = 1u64 << (w - 1);
        if v & sign != 0 {
            !v & m
        } else {
            v | sign
        }
    }

    fn unkey(k: u64, w: u32, m: u64) -> u64 {
        let sign = 1u64 << (w - 1);
        if k & sign != 0 {
            k & !sign
        } else {
            !k & m
        }
    }

    pub fn forward(&self, x: &Stream, r: &Stream) -> Stream {
        let (w, m) = (x.ty.bits, x.ty.mask());
        let sign = 1u64 << (w - 1);
        match self {
            RefOp::Xor => Stream::from_fn(x.ty, x.len(), |i| x.get(i) ^ r.get(i)),
            _ => Stream::from_fn(x.ty, x.len(), |i| {
                let d = Self::key(x.get(i), w, m).wrapping_sub(Self::key(r.get(i), w, m)) & m;
                // zigzag in w bits
                if d & sign != 0 {
                    ((!d & m) << 1 | 1) & m
                } else {
                    (d << 1) & m
                }
            }),
        }
    }

    pub fn inverse(&self, y: &Stream, r: &Stream) -> Stream {
        let (w, m) = (y.ty.bits, y.ty.mask());
        match self {
            RefOp::Xor => Stream::from_fn(y.ty, y.len(), |i| y.get(i) ^ r.get(i)),
            _ => Stream::from_fn(y.ty, y.len(), |i| {
                let z = y.get(i);
                let d = if z & 1 != 0 { !(z >> 1) & m } else { z >> 1 };
                Self::unkey(d.wrapping_add(Self::key(r.get(i), w, m)) & m, w, m)
            }),
        }
    }

    pub fn check(&self, ty: Ty) -> Result<()> {
        if ty.bits == 0 {
            return Err(Error::corrupt("reference operator over an empty word"));
        }
        Ok(())
    }
}

impl std::fmt::Display for RefOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefOp::Xor => "xorref",
            RefOp::Sub => "subref",
            RefOp::Copy => "copyref",
        })
    }
}
