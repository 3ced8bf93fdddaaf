//! Generators: leaves that need no chunk data.
//! `const(value)` (id 0x05): every word is `value`.
//! `arange(start, step)` (id 0x06): word `i` of the tensor is `start + step * i` (wrapping at the
//! word width); a chunk starts at its element offset in the tensor.

use super::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Const {
    pub value: u64,
}

impl Const {
    pub const ID: u8 = 0x05;

    pub fn fits(x: &Stream) -> Option<Const> {
        let v = if x.is_empty() { 0 } else { x.get(0) };
        x.iter().all(|w| w == v).then_some(Const { value: v })
    }

    pub fn decode(&self, ty: Ty, n: usize) -> Result<Stream> {
        if self.value & !ty.mask() != 0 {
            return Err(Error::corrupt("const: value does not fit its type"));
        }
        Ok(Stream::from_fn(ty, n, |_| self.value))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arange {
    pub start: u64,
    pub step: u64,
}

impl Arange {
    pub const ID: u8 = 0x06;

    /// Detects an arithmetic progression over a whole tensor (given as one stream).
    pub fn fits(x: &Stream) -> Option<Arange> {
        if x.len() < 2 {
            return None;
        }
        let m = x.ty.mask();
        let start = x.get(0);
        let step = x.get(1).wrapping_sub(start) & m;
        let a = Arange { start, step };
        (0..x.len()).all(|i| a.at(i as u64, m) == x.get(i)).then_some(a)
    }

    fn at(&self, i: u64, m: u64) -> u64 {
        self.start.wrapping_add(self.step.wrapping_mul(i)) & m
    }

    pub fn decode(&self, ty: Ty, n: usize, offset: u64) -> Result<Stream> {
        let m = ty.mask();
        if (self.start | self.step) & !m != 0 {
            return Err(Error::corrupt("arange: parameters do not fit the type"));
        }
        Ok(Stream::from_fn(ty, n, |i| self.at(offset + i as u64, m)))
    }
}
