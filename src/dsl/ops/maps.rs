//! Word-wise bijections: `xorconst(c)` (id 0x15), `zigzag` (id 0x16), `rotate(r)` (id 0x17).

use super::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Map {
    XorConst(u64),
    ZigZag,
    /// Rotate left by `r` bits within the word.
    Rotate(u32),
}

impl Map {
    pub const XORCONST_ID: u8 = 0x15;
    pub const ZIGZAG_ID: u8 = 0x16;
    pub const ROTATE_ID: u8 = 0x17;

    pub fn id(&self) -> u8 {
        match self {
            Map::XorConst(_) => Self::XORCONST_ID,
            Map::ZigZag => Self::ZIGZAG_ID,
            Map::Rotate(_) => Self::ROTATE_ID,
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Map::XorConst(c) => put_varint(out, *c),
            Map::ZigZag => {}
            Map::Rotate(r) => put_varint(out, *r as u64),
        }
    }

    pub fn read(id: u8, r: &mut ByteReader) -> Result<Self> {
        Ok(match id {
            Self::XORCONST_ID => Map::XorConst(r.varint()?),
            Self::ZIGZAG_ID => Map::ZigZag,
            _ => Map::Rotate(r.len(63)? as u32),
        })
    }

    pub fn check(&self, ty: Ty) -> Result<()> {
        // Every map needs a non-empty word.
        let ok = ty.bits >= 1
            && match self {
                Map::XorConst(c) => c & !ty.mask() == 0,
                Map::ZigZag => true,
                Map::Rotate(r) => *r < ty.bits,
            };
        if ok {
            Ok(())
        } else {
            Err(Error::corrupt("map: parameter does not fit the word size"))
        }
    }

    fn rotl(v: u64, r: u32, w: u32, m: u64) -> u64 {
        if r == 0 {
            v
        } else {
            ((v << r) | (v >> (w - r))) & m
        }
    }

    pub fn apply(&self, x: &Stream, inverse: bool) -> Stream {
        let w = x.ty.bits;
        let m = x.ty.mask();
        let sign = 1u64 << (w - 1);
        Stream::from_fn(x.ty, x.len(), |i| {
            let v = x.get(i);
            match (*self, inverse) {
                (Map::XorConst(c), _) => v ^ c,
                (Map::ZigZag, false) => {
                    if v & sign != 0 {
                        ((!v & m) << 1 | 1) & m
                    } else {
                        (v << 1) & m
                    }
                }
                (Map::ZigZag, true) => {
                    if v & 1 != 0 {
                        !(v >> 1) & m
                    } else {
                        v >> 1
                    }
                }
                (Map::Rotate(r), false) => Self::rotl(v, r, w, m),
                (Map::Rotate(r), true) => Self::rotl(v, (w - r) % w, w, m),
            }
        })
    }
}

impl std::fmt::Display for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Map::XorConst(c) => write!(f, "xorconst({c:#x})"),
            Map::ZigZag => write!(f, "zigzag"),
            Map::Rotate(r) => write!(f, "rotate({r})"),
        }
    }
}
