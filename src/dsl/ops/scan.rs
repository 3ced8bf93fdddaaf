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
        let s = usize::try_from(self.stride).unwrap_or(usize::MAX);
        match self.kind {
            ScanKind::Delta => y.scan_back(s, |c, p| c.wrapping_add(p)),
            ScanKind::Xor => y.scan_back(s, |c, p| c ^ p),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse undoes the forward scan, word by word as the definition says, for strides
    /// below and above a vector, at every container width and at a width narrower than its
    /// container.
    #[test]
    fn inverse_undoes_forward_at_every_width_and_stride() {
        for bits in [1u32, 7, 8, 13, 16, 19, 32, 40, 64] {
            let ty = Ty::u(bits);
            let x = Stream::from_fn(ty, 5000, |i| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7 & ty.mask());
            for stride in [1u64, 3, 8, 9, 100, 2048, 6000] {
                for kind in [ScanKind::Delta, ScanKind::Xor] {
                    let s = Scan { kind, stride };
                    let y = s.forward(&x);
                    let d = stride as usize;
                    for i in (0..x.len()).step_by(97) {
                        let want = match (i < d, kind) {
                            (true, _) => x.get(i),
                            (false, ScanKind::Delta) => x.get(i).wrapping_sub(x.get(i - d)) & ty.mask(),
                            (false, ScanKind::Xor) => x.get(i) ^ x.get(i - d),
                        };
                        assert_eq!(y.get(i), want, "{s} u{bits} at {i}");
                    }
                    assert_eq!(s.inverse(y), x, "{s} u{bits}");
                }
            }
        }
    }
}
