//! Bit-level and byte-level I/O shared by the coders and the wire forms.
//!
//! Bits are written least-significant first into little-endian 64-bit words; a reader never reads
//! past the end of its slice (missing bits are an error, not zeros).

use crate::error::{Error, Result};

/// Appends bits LSB-first to a byte vector, 32 bits at a time: the fast path of the coders'
/// payloads, for values of at most 32 bits (the same bytes as [`BitWriter`]).
pub struct Bits32<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    n: u32,
}

impl<'a> Bits32<'a> {
    /// Continues after `n < 8` pending bits `acc` (the partial last byte of what came before).
    pub fn new(out: &'a mut Vec<u8>, acc: u64, n: u32) -> Self {
        debug_assert!(n < 8 && acc >> n == 0);
        Bits32 { out, acc, n }
    }

    /// Writes the low `bits <= 32` bits of `v` (the higher bits of `v` must be zero).
    #[inline(always)]
    pub fn put(&mut self, v: u64, bits: u32) {
        debug_assert!(bits <= 32 && (bits == 32 || v >> bits == 0));
        self.acc |= v << self.n;
        self.n += bits;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.n -= 32;
        }
    }

    /// Writes the pending bits, the last byte padded with zeros.
    pub fn finish(mut self) {
        while self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n = self.n.saturating_sub(8);
        }
    }
}

/// Appends bits LSB-first.
#[derive(Default)]
pub struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes the low `bits` bits of `v` (`bits` <= 57).
    #[inline]
    pub fn put(&mut self, v: u64, bits: u32) {
        debug_assert!(bits <= 57);
        debug_assert!(bits == 64 || v >> bits == 0 || bits == 0 && v == 0);
        self.acc |= v << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Writes up to 64 bits.
    pub fn put_wide(&mut self, v: u64, bits: u32) {
        if bits > 32 {
            self.put(v & 0xFFFF_FFFF, 32);
            self.put(v >> 32, bits - 32);
        } else {
            self.put(v, bits);
        }
    }

    /// Elias-gamma code of `v >= 1`.
    pub fn gamma(&mut self, v: u64) {
        debug_assert!(v >= 1);
        let len = 63 - v.leading_zeros();
        self.put(0, len.min(57));
        if len > 57 {
            self.put(0, len - 57);
        }
        self.put(1, 1);
        self.put_wide(v & !(1u64 << len), len);
    }

    /// Gamma code of `v + 1` (so zero is allowed).
    pub fn gamma0(&mut self, v: u64) {
        self.gamma(v + 1);
    }

    pub fn bit_len(&self) -> usize {
        self.out.len() * 8 + self.n as usize
    }

    /// Pads to a byte boundary and returns the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// Reads bits LSB-first; every read is bounds-checked.
pub struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    acc: u64,
    n: u32,
}

impl<'a> BitReader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0, acc: 0, n: 0 }
    }

    #[inline]
    fn refill(&mut self) {
        while self.n <= 56 && self.pos < self.data.len() {
            self.acc |= (self.data[self.pos] as u64) << self.n;
            self.pos += 1;
            self.n += 8;
        }
    }

    /// Reads `bits` (<= 57) bits.
    #[inline]
    pub fn get(&mut self, bits: u32) -> Result<u64> {
        if bits == 0 {
            return Ok(0);
        }
        if self.n < bits {
            self.refill();
            if self.n < bits {
                return Err(Error::corrupt("bit stream ends early"));
            }
        }
        let v = self.acc & ((1u64 << bits) - 1);
        self.acc >>= bits;
        self.n -= bits;
        Ok(v)
    }

    /// Reads up to 64 bits.
    pub fn get_wide(&mut self, bits: u32) -> Result<u64> {
        if bits > 32 {
            let lo = self.get(32)?;
            Ok(lo | (self.get(bits - 32)? << 32))
        } else {
            self.get(bits)
        }
    }

    pub fn gamma(&mut self) -> Result<u64> {
        // The whole code in the bits at hand (the bits above them are zero): its zeros counted
        // at once, its value taken in one read.
        if self.n < 57 {
            self.refill();
        }
        let len = self.acc.trailing_zeros();
        if 2 * len < self.n {
            self.acc >>= len + 1;
            self.n -= len + 1;
            let v = self.acc & ((1u64 << len) - 1);
            self.acc >>= len;
            self.n -= len;
            return Ok((1u64 << len) | v);
        }
        let mut len = 0u32;
        while self.get(1)? == 0 {
            len += 1;
            if len > 63 {
                return Err(Error::corrupt("gamma code too long"));
            }
        }
        Ok((1u64 << len) | self.get_wide(len)?)
    }

    pub fn gamma0(&mut self) -> Result<u64> {
        Ok(self.gamma()? - 1)
    }

    /// Bytes consumed so far, counting a partly read byte as consumed.
    pub fn bytes_consumed(&self) -> usize {
        self.pos - (self.n / 8) as usize
    }
}

/// Byte-oriented writer with LEB128 varints.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes of `v` as a varint ([`put_varint`]).
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Writes `v` as a varint over the whole of `dst`, which must be [`varint_len`] bytes long.
pub fn write_varint(dst: &mut [u8], mut v: u64) {
    debug_assert_eq!(dst.len(), varint_len(v));
    let last = dst.len() - 1;
    for b in &mut dst[..last] {
        *b = (v as u8) | 0x80;
        v >>= 7;
    }
    dst[last] = v as u8;
}

/// Length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Bounds-checked byte reader.
#[derive(Clone)]
pub struct ByteReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn u8(&mut self) -> Result<u8> {
        let b = *self.data.get(self.pos).ok_or_else(|| Error::corrupt("unexpected end of data"))?;
        self.pos += 1;
        Ok(b)
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::corrupt("length exceeds the remaining data"));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u32_le(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    pub fn u64_le(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    pub fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7F) as u64) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    break;
                }
                return Ok(v);
            }
        }
        Err(Error::corrupt("varint too long"))
    }

    /// A varint that must fit in usize and be at most `max`.
    pub fn len(&mut self, max: u64) -> Result<usize> {
        let v = self.varint()?;
        if v > max {
            return Err(Error::corrupt("length field out of range"));
        }
        usize::try_from(v).map_err(|_| Error::corrupt("length field out of range"))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.len(self.remaining() as u64)?;
        self.take(n)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.data[self.pos..];
        self.pos = self.data.len();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_gamma_round_trip() {
        let mut w = BitWriter::new();
        let vals: Vec<(u64, u32)> =
            (0..500u64).map(|i| ((i * 2654435761) & ((1 << (i % 57)) - 1), (i % 57) as u32)).collect();
        for &(v, b) in &vals {
            w.put(v, b);
            w.gamma(v + 1);
            w.put_wide(u64::MAX - v, 64);
        }
        let bytes = w.finish();
        let mut r = BitReader::new(&bytes);
        for &(v, b) in &vals {
            assert_eq!(r.get(b).unwrap(), v);
            assert_eq!(r.gamma().unwrap(), v + 1);
            assert_eq!(r.get_wide(64).unwrap(), u64::MAX - v);
        }
        assert!(r.get(16).is_err());
    }

    /// Gamma codes read whole from the bits at hand or bit by bit give the same values; cut
    /// short, the stream gives the values before the cut and then an error, never a wrong
    /// value; sixty-four zeros are too long a code.
    #[test]
    fn gamma_codes_cut_anywhere() {
        let vals: Vec<u64> = (0..300u64).map(|i| 1 + (i * 2654435761) % (1 << (i % 40))).collect();
        let mut w = BitWriter::new();
        for &v in &vals {
            w.gamma(v);
        }
        let bytes = w.finish();
        for cut in 0..=bytes.len() {
            let mut r = BitReader::new(&bytes[..cut]);
            for &v in &vals {
                match r.gamma() {
                    Ok(got) => assert_eq!(got, v, "cut {cut}"),
                    Err(_) => break,
                }
            }
        }
        assert!(BitReader::new(&[0u8; 9]).gamma().is_err());
    }

    #[test]
    fn varints() {
        let mut out = Vec::new();
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            put_varint(&mut out, v);
        }
        let mut r = ByteReader::new(&out);
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            assert_eq!(r.varint().unwrap(), v);
        }
        assert!(r.varint().is_err());
        assert!(ByteReader::new(&[0xFF; 11]).varint().is_err());
    }
}
