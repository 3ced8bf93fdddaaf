//! Streams: what flows between operators. A stream holds `n` unsigned words of `bits` bits
//! (1..=64; 0 for an empty field), stored in the narrowest of u8/u16/u32/u64.

use crate::error::{Error, Result};
use crate::simd::Lane;

/// The type of a stream: unsigned words of `bits` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ty {
    pub bits: u32,
}

impl Ty {
    pub const fn u(bits: u32) -> Ty {
        Ty { bits }
    }
    pub fn mask(self) -> u64 {
        if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }
    /// Bytes of the container one word is stored in.
    pub fn container_bytes(self) -> usize {
        match self.bits {
            0..=8 => 1,
            9..=16 => 2,
            17..=32 => 4,
            _ => 8,
        }
    }
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "u{}", self.bits)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    pub ty: Ty,
    pub data: Data,
}

impl Stream {
    pub fn with_capacity(ty: Ty, n: usize) -> Stream {
        let data = match ty.container_bytes() {
            1 => Data::U8(Vec::with_capacity(n)),
            2 => Data::U16(Vec::with_capacity(n)),
            4 => Data::U32(Vec::with_capacity(n)),
            _ => Data::U64(Vec::with_capacity(n)),
        };
        Stream { ty, data }
    }

    /// Builds a stream from a function of the index; values are masked to the type.
    pub fn from_fn(ty: Ty, n: usize, mut f: impl FnMut(usize) -> u64) -> Stream {
        let m = ty.mask();
        let data = match ty.container_bytes() {
            1 => Data::U8((0..n).map(|i| (f(i) & m) as u8).collect()),
            2 => Data::U16((0..n).map(|i| (f(i) & m) as u16).collect()),
            4 => Data::U32((0..n).map(|i| (f(i) & m) as u32).collect()),
            _ => Data::U64((0..n).map(|i| f(i) & m).collect()),
        };
        Stream { ty, data }
    }

    pub fn from_iter(ty: Ty, it: impl Iterator<Item = u64>) -> Stream {
        let mut s = Stream::with_capacity(ty, it.size_hint().0);
        for v in it {
            s.push(v);
        }
        s
    }

    #[inline]
    pub fn push(&mut self, v: u64) {
        match &mut self.data {
            Data::U8(d) => d.push(v as u8),
            Data::U16(d) => d.push(v as u16),
            Data::U32(d) => d.push(v as u32),
            Data::U64(d) => d.push(v),
        }
    }

    pub fn len(&self) -> usize {
        match &self.data {
            Data::U8(d) => d.len(),
            Data::U16(d) => d.len(),
            Data::U32(d) => d.len(),
            Data::U64(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        match &self.data {
            Data::U8(d) => d[i] as u64,
            Data::U16(d) => d[i] as u64,
            Data::U32(d) => d[i] as u64,
            Data::U64(d) => d[i],
        }
    }

    /// The stream of type `ty` whose word `i` is `f(word i)` masked to `ty`: one dispatch on the
    /// containers, then a loop the compiler can vectorize (the encoders' split transforms).
    pub fn map_words(&self, ty: Ty, f: impl Fn(u64) -> u64) -> Stream {
        fn go<I: Lane, O: Lane>(src: &[I], m: u64, f: &impl Fn(u64) -> u64) -> Vec<O> {
            src.iter().map(|&v| O::from_u64(f(v.to_u64()) & m)).collect()
        }
        macro_rules! from {
            ($src:expr) => {
                match ty.container_bytes() {
                    1 => Data::U8(go($src, ty.mask(), &f)),
                    2 => Data::U16(go($src, ty.mask(), &f)),
                    4 => Data::U32(go($src, ty.mask(), &f)),
                    _ => Data::U64(go($src, ty.mask(), &f)),
                }
            };
        }
        let data = match &self.data {
            Data::U8(d) => from!(d),
            Data::U16(d) => from!(d),
            Data::U32(d) => from!(d),
            Data::U64(d) => from!(d),
        };
        Stream { ty, data }
    }

    /// The stream whose word `i` is word `i` for `i < back`, else `f(word i, word i - back)`
    /// masked to the type: one dispatch on the container, then a loop the compiler can
    /// vectorize (the scans' transforms).
    pub fn zip_back(&self, back: usize, f: impl Fn(u64, u64) -> u64) -> Stream {
        fn go<T: Lane>(src: &[T], back: usize, m: u64, f: &impl Fn(u64, u64) -> u64) -> Vec<T> {
            let head = back.min(src.len());
            let mut out = Vec::with_capacity(src.len());
            out.extend_from_slice(&src[..head]);
            out.extend(src[head..].iter().zip(src).map(|(&c, &p)| T::from_u64(f(c.to_u64(), p.to_u64()) & m)));
            out
        }
        let m = self.ty.mask();
        let data = match &self.data {
            Data::U8(d) => Data::U8(go(d, back, m, &f)),
            Data::U16(d) => Data::U16(go(d, back, m, &f)),
            Data::U32(d) => Data::U32(go(d, back, m, &f)),
            Data::U64(d) => Data::U64(go(d, back, m, &f)),
        };
        Stream { ty: self.ty, data }
    }

    /// The stream whose word `i` is word `i` for `i < back`, else `f(word i, new word i - back)`
    /// masked to the type, in place: the inverse of [`Stream::zip_back`]. One dispatch on the
    /// container; for `back` of at least a vector, rows of `back` words that the compiler can
    /// vectorize.
    pub fn scan_back(mut self, back: usize, f: impl Fn(u64, u64) -> u64) -> Stream {
        fn go<T: Lane>(d: &mut [T], back: usize, m: u64, f: &impl Fn(u64, u64) -> u64) {
            if back >= 8 {
                let mut start = back;
                while start < d.len() {
                    let (done, rest) = d.split_at_mut(start);
                    let row = back.min(rest.len());
                    for (c, &p) in rest[..row].iter_mut().zip(&done[start - back..]) {
                        *c = T::from_u64(f(c.to_u64(), p.to_u64()) & m);
                    }
                    start += row;
                }
            } else {
                for i in back..d.len() {
                    d[i] = T::from_u64(f(d[i].to_u64(), d[i - back].to_u64()) & m);
                }
            }
        }
        let m = self.ty.mask();
        match &mut self.data {
            Data::U8(d) => go(d, back, m, &f),
            Data::U16(d) => go(d, back, m, &f),
            Data::U32(d) => go(d, back, m, &f),
            Data::U64(d) => go(d, back, m, &f),
        }
        self
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// Words of at most 16 bits as u16 symbols (for the entropy coders).
    pub fn to_u16(&self) -> Vec<u16> {
        match &self.data {
            Data::U16(d) => d.clone(),
            Data::U8(d) => d.iter().map(|&v| v as u16).collect(),
            _ => self.iter().map(|v| v as u16).collect(),
        }
    }

    /// Words of at most 16 bits as u16 symbols, borrowed when they are stored as u16.
    pub fn u16_symbols(&self) -> std::borrow::Cow<'_, [u16]> {
        match &self.data {
            Data::U16(d) => std::borrow::Cow::Borrowed(d),
            _ => std::borrow::Cow::Owned(self.to_u16()),
        }
    }

    pub fn as_u16(&self) -> Option<&[u16]> {
        match &self.data {
            Data::U16(d) => Some(d),
            _ => None,
        }
    }

    pub fn from_u16(ty: Ty, v: Vec<u16>) -> Stream {
        debug_assert!(ty.bits <= 16);
        if ty.container_bytes() == 2 {
            Stream { ty, data: Data::U16(v) }
        } else {
            Stream { ty, data: Data::U8(v.into_iter().map(|x| x as u8).collect()) }
        }
    }

    /// Little-endian bytes of the containers.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match &self.data {
            Data::U8(d) => d.clone(),
            Data::U16(d) => d.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Data::U32(d) => d.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Data::U64(d) => d.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// Reads little-endian words of the type's container width from `bytes`.
    pub fn from_le_bytes(ty: Ty, bytes: &[u8]) -> Result<Stream> {
        let cb = ty.container_bytes();
        if !bytes.len().is_multiple_of(cb) {
            return Err(Error::corrupt("byte length is not a multiple of the word size"));
        }
        // Little-endian words are their bytes: one copy into uninitialized words (a loop per
        // word on other machines).
        fn words<T: bytemuck::Pod>(bytes: &[u8], from: impl Fn(&[u8]) -> T) -> Vec<T> {
            let n = bytes.len() / std::mem::size_of::<T>();
            if cfg!(target_endian = "little") {
                let mut v = Vec::<T>::with_capacity(n);
                // SAFETY: the capacity holds `n` words, `n * size_of::<T>() == bytes.len()` bytes
                // (checked by the caller), which the copy initializes; any bytes are a valid `T`
                // (`Pod`), and a little-endian word is its bytes in order.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len());
                    v.set_len(n);
                }
                v
            } else {
                bytes.chunks_exact(std::mem::size_of::<T>()).map(from).collect()
            }
        }
        let data = match cb {
            1 => Data::U8(bytes.to_vec()),
            2 => Data::U16(words(bytes, |c| u16::from_le_bytes([c[0], c[1]]))),
            4 => Data::U32(words(bytes, |c| u32::from_le_bytes(c.try_into().unwrap()))),
            _ => Data::U64(words(bytes, |c| u64::from_le_bytes(c.try_into().unwrap()))),
        };
        let s = Stream { ty, data };
        let m = ty.mask();
        if ty.bits as usize != 8 * cb && s.iter().any(|v| v & !m != 0) {
            return Err(Error::corrupt("word does not fit its type"));
        }
        Ok(s)
    }
}
