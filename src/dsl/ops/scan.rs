//! `delta(stride)` (id 0x13) and `xor(stride)` (id 0x14): each word against the word `stride`
//! positions earlier (a row above when `stride` is the row length); the first `stride` words
//! are kept. Arithmetic wraps at the word width.

use super::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanKind {
    Delta,
    Xor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scan {
    pub kind: ScanKind,
    pub stride: u64,
}

impl Scan {
    pub const DELTA_ID: u8 = 0x13;
    pub const XOR_ID: u8 = 0x14;

    pub fn id(&self) -> u8 {
        match self.kind {
            ScanKind::Delta => Self::DELTA_ID,
            ScanKind::Xor => Self::XOR_ID,
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, self.stride);
    }

    pub fn read(kind: ScanKind, r: &mut ByteReader) -> Result<Self> {
        let stride = r.varint()?;
        if stride == 0 {
            return Err(Error::corrupt("scan: zero stride"));
        }
        Ok(Scan { kind, stride })
    }

    pub fn forward(&self, x: &Stream) -> Stream {
        let s = usize::try_from(self.stride).unwrap_or(usize::MAX);
        match self.kind {
            ScanKind::Delta => x.zip_back(s, |c, p| c.wrapping_sub(p)),
            ScanKind::Xor => x.zip_back(s, |c, p| c ^ p),
        }
    }

    pub fn inverse(&self, y: Stream) -> Stream {
        let s = self.stride as usize;
        let m = y.ty.mask();
        let mut out = Stream::with_capacity(y.ty, y.len());
        let mut hist: Vec<u64> = Vec::with_capacity(y.len());
        for i in 0..y.len() {
            let v = if i < s {
                y.get(i)
            } else {
                match self.kind {
                    ScanKind::Delta => y.get(i).wrapping_add(hist[i - s]) & m,
                    ScanKind::Xor => y.get(i) ^ hist[i - s],
                }
            };
            hist.push(v);
            out.push(v);
        }
        out
    }
}

impl std::fmt::Display for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.kind {
            ScanKind::Delta => "delta",
            ScanKind::Xor => "xor",
        };
        write!(f, "{name}({})", self.stride)
    }
}
