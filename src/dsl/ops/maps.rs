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

    /// The map (or its inverse) of every word: one dispatch on the map and the container, then a
    /// loop the compiler can vectorize.
    pub fn apply(&self, x: &Stream, inverse: bool) -> Stream {
        let w = x.ty.bits;
        let m = x.ty.mask();
        let sign = 1u64 << (w - 1);
        match (*self, inverse) {
            (Map::XorConst(c), _) => x.map_words(x.ty, |v| v ^ c),
            // The sign moved to bit 0, the magnitude's bits flipped when negative.
            (Map::ZigZag, false) => x.map_words(x.ty, |v| (v << 1) ^ (0u64.wrapping_sub((v & sign) >> (w - 1)) & m)),
            (Map::ZigZag, true) => x.map_words(x.ty, |v| (v >> 1) ^ (0u64.wrapping_sub(v & 1) & m)),
            (Map::Rotate(r), false) => x.map_words(x.ty, |v| Self::rotl(v, r, w, m)),
            (Map::Rotate(r), true) => x.map_words(x.ty, |v| Self::rotl(v, (w - r) % w, w, m)),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each map is the definition's, word by word, and its inverse undoes it, at every width.
    #[test]
    fn maps_follow_their_definitions_and_invert() {
        for bits in [1u32, 2, 7, 8, 12, 16, 19, 32, 33, 64] {
            let ty = Ty::u(bits);
            let (m, sign) = (ty.mask(), 1u64 << (bits - 1));
            let x = Stream::from_fn(ty, 3001, |i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 3 & m);
            let zigzag = |v: u64| if v & sign != 0 { ((!v & m) << 1 | 1) & m } else { (v << 1) & m };
            let mut maps = vec![(Map::ZigZag, Stream::from_fn(ty, x.len(), |i| zigzag(x.get(i))))];
            let c = 0x5A5A_5A5A_5A5A_5A5A & m;
            maps.push((Map::XorConst(c), Stream::from_fn(ty, x.len(), |i| x.get(i) ^ c)));
            for r in [1, bits / 2, bits - 1].into_iter().filter(|&r| r > 0 && r < bits) {
                let want = Stream::from_fn(ty, x.len(), |i| (x.get(i) << r | x.get(i) >> (bits - r)) & m);
                maps.push((Map::Rotate(r), want));
            }
            for (map, want) in maps {
                let y = map.apply(&x, false);
                assert_eq!(y, want, "{map} u{bits}");
                assert_eq!(map.apply(&y, true), x, "{map} u{bits} inverse");
            }
        }
    }
}
