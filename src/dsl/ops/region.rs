//! Regions of a stream: `concat(len...)` (id 0x19) cuts it into consecutive parts, each with its
//! own sub-program (the last part takes the rest); `repeat(period)` (id 0x1A) keeps the first
//! `period` words of a stream in which every word equals the one `period` earlier.

use super::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Concat {
    pub lens: Vec<u64>,
}

/// Most parts a concat may have.
pub const MAX_PARTS: usize = 4096;

impl Concat {
    pub const ID: u8 = 0x19;

    pub fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, self.lens.len() as u64);
        for &l in &self.lens {
            put_varint(out, l);
        }
    }

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let k = r.len(MAX_PARTS as u64 - 1)?;
        let lens = (0..k).map(|_| r.varint()).collect::<Result<Vec<_>>>()?;
        Ok(Concat { lens })
    }

    pub fn arity(&self) -> usize {
        self.lens.len() + 1
    }

    pub fn child_lens(&self, n: usize) -> Result<Vec<usize>> {
        let mut rest = n as u64;
        let mut out = Vec::with_capacity(self.arity());
        for &l in &self.lens {
            if l > rest {
                return Err(Error::corrupt("concat: parts longer than the stream"));
            }
            out.push(l as usize);
            rest -= l;
        }
        out.push(rest as usize);
        Ok(out)
    }

    pub fn forward(&self, x: &Stream) -> Result<Vec<Stream>> {
        let mut start = 0usize;
        let mut out = Vec::new();
        for len in self.child_lens(x.len())? {
            out.push(Stream::from_fn(x.ty, len, |i| x.get(start + i)));
            start += len;
        }
        Ok(out)
    }

    pub fn inverse(&self, ty: Ty, n: usize, parts: Vec<Stream>) -> Stream {
        let mut out = Stream::with_capacity(ty, n);
        for p in &parts {
            for v in p.iter() {
                out.push(v);
            }
        }
        out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeat {
    pub period: u64,
}

impl Repeat {
    pub const ID: u8 = 0x1A;

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let period = r.varint()?;
        if period == 0 {
            return Err(Error::corrupt("repeat: zero period"));
        }
        Ok(Repeat { period })
    }

    pub fn child_len(&self, n: usize) -> usize {
        (self.period as usize).min(n)
    }

    /// None when the stream is not periodic with this period.
    pub fn forward(&self, x: &Stream) -> Option<Stream> {
        let p = self.period as usize;
        if (p..x.len()).any(|i| x.get(i) != x.get(i - p)) {
            return None;
        }
        Some(Stream::from_fn(x.ty, p.min(x.len()), |i| x.get(i)))
    }

    pub fn inverse(&self, ty: Ty, n: usize, period: Stream) -> Result<Stream> {
        if period.is_empty() && n > 0 {
            return Err(Error::corrupt("repeat: empty period"));
        }
        let p = period.len();
        Ok(Stream::from_fn(ty, n, |i| period.get(i % p)))
    }
}

/// `view(bits)` (id 0x1B): reinterpret little-endian words as words of another width
/// (8, 16, 32 or 64 bits), e.g. fp32 as bytes or bytes as 16-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub bits: u32,
}

impl View {
    pub const ID: u8 = 0x1B;

    fn ok_width(b: u32) -> bool {
        matches!(b, 8 | 16 | 32 | 64)
    }

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        let bits = r.len(64)? as u32;
        if !Self::ok_width(bits) {
            return Err(Error::corrupt("view: bad width"));
        }
        Ok(View { bits })
    }

    pub fn child_len(&self, ty: Ty, n: usize) -> Result<usize> {
        if !Self::ok_width(ty.bits) {
            return Err(Error::corrupt("view: input is not a whole-byte word"));
        }
        let total = n as u128 * ty.bits as u128;
        if !total.is_multiple_of(self.bits as u128) {
            return Err(Error::corrupt("view: length does not divide"));
        }
        Ok((total / self.bits as u128) as usize)
    }

    pub fn forward(&self, x: &Stream) -> Result<Stream> {
        self.child_len(x.ty, x.len())?;
        Stream::from_le_bytes(Ty::u(self.bits), &x.to_le_bytes())
    }

    pub fn inverse(&self, ty: Ty, y: Stream) -> Result<Stream> {
        Stream::from_le_bytes(ty, &y.to_le_bytes())
    }
}
