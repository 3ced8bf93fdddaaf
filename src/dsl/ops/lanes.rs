//! `lanes(ctx)` (id 0x08): the decode-speed entropy leaf over streams of at most 16 bits:
//! 32 interleaved rANS lanes with small tables (`coder::lanes`), symbol `i` in lane `i % 32`.
//! Context kinds: `none` (order 0), `prev` (the previous symbol of the same lane, the word 32
//! positions back) and `back d` (the word `d` positions back, `d` a multiple of 32: the row above
//! in a matrix with rows of `d` words). Each block (chunk) carries its own tables.

use super::prelude::*;
use crate::coder::lanes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    pub ctx: lanes::Ctx,
}

impl Lanes {
    pub const ID: u8 = 0x08;

    /// Context kinds on the wire: 0 none, 1 prev, 2 back (varint `d`).
    pub fn write(&self, out: &mut Vec<u8>) {
        match self.ctx {
            lanes::Ctx::None => out.push(0),
            lanes::Ctx::Prev => out.push(1),
            lanes::Ctx::Back(d) => {
                out.push(2);
                put_varint(out, d as u64);
            }
        }
    }

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let ctx = match r.u8()? {
            0 => lanes::Ctx::None,
            1 => lanes::Ctx::Prev,
            2 => {
                let d = r.varint()?;
                if d == 0 || d % lanes::LANES as u64 != 0 || d > lanes::MAX_BACK as u64 {
                    return Err(Error::corrupt("lanes: bad context distance"));
                }
                lanes::Ctx::Back(d as u32)
            }
            k => return Err(Error::Unsupported(format!("lanes: unknown context kind {k}"))),
        };
        Ok(Lanes { ctx })
    }

    pub fn encode(&self, x: &Stream, out: &mut Vec<u8>) -> Result<()> {
        if x.ty.bits > 16 {
            return Err(Error::invalid("lanes leaf over words wider than 16 bits"));
        }
        if x.is_empty() {
            return Ok(());
        }
        lanes::encode(&x.to_u16(), self.ctx, out)
    }

    /// Decodes `out.len()` symbols of type `ty` (at most 16 bits) into `out`.
    pub fn decode_into(&self, ty: Ty, input: &[u8], out: &mut [u16]) -> Result<()> {
        if out.is_empty() {
            if !input.is_empty() {
                return Err(Error::corrupt("lanes leaf: bytes for an empty stream"));
            }
            return Ok(());
        }
        let used = lanes::decode_ctx(input, self.ctx, out)?;
        if used != input.len() {
            return Err(Error::corrupt("lanes leaf: trailing bytes"));
        }
        super::entropy::check_range(ty, out)
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        let mut out = vec![0u16; n];
        self.decode_into(ty, input, &mut out)?;
        Ok(Stream::from_u16(ty, out))
    }
}

impl std::fmt::Display for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ctx {
            lanes::Ctx::None => write!(f, "lanes"),
            lanes::Ctx::Prev => write!(f, "lanes(prev)"),
            lanes::Ctx::Back(d) => write!(f, "lanes(back {d})"),
        }
    }
}
