//! `sparse(g)` (id 0x1C): u(w) -> [mask: u(g), one word per group of g input words, bit i set
//! where word i of the group is not zero (the last group's missing words clear); values: u(w),
//! the words that are not zero, in order]. The chunk header carries the number of values.
//!
//! Pruned weights: the mask codes where the zeros are (a 2:4 group takes one of 6 patterns, an
//! 8-word group of 2:4 one of 36), the values code what the other words hold, with their own
//! statistics. A zero is the all-zero word: a float's -0.0 is a value.

use super::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sparse {
    /// Words per mask word (1 to 16).
    pub group: u8,
}

/// Largest group (the mask's words stay codable as 16-bit symbols).
pub const MAX_GROUP: u8 = 16;

impl Sparse {
    pub const ID: u8 = 0x1C;

    pub fn read(r: &mut ByteReader) -> Result<Sparse> {
        let group = r.u8()?;
        if !(1..=MAX_GROUP).contains(&group) {
            return Err(Error::corrupt("sparse: group out of range"));
        }
        Ok(Sparse { group })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.group);
    }

    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        if !(1..=MAX_GROUP).contains(&self.group) {
            return Err(Error::invalid("sparse: group out of range"));
        }
        Ok(vec![Ty::u(self.group as u32), ty])
    }

    fn groups(&self, n: usize) -> usize {
        n.div_ceil(self.group as usize)
    }

    /// Value count from the chunk header, then (mask type and length, values type and length).
    pub fn read_header(&self, ty: Ty, n: usize, r: &mut ByteReader) -> Result<[(Ty, usize); 2]> {
        let values = r.len(n as u64)?;
        Ok([(Ty::u(self.group as u32), self.groups(n)), (ty, values)])
    }

    /// The mask and the values; the value count goes to `header`.
    pub fn forward(&self, x: &Stream, header: &mut Vec<u8>) -> Vec<Stream> {
        let (mask, values) = match &x.data {
            Data::U8(d) => split(d, self.group, x.ty),
            Data::U16(d) => split(d, self.group, x.ty),
            Data::U32(d) => split(d, self.group, x.ty),
            Data::U64(d) => split(d, self.group, x.ty),
        };
        put_varint(header, values.len() as u64);
        vec![mask, values]
    }

    /// Scatters the values where the mask says, zeros elsewhere. The mask's set bits must
    /// number the values exactly, and bits past the last word must be clear.
    pub fn inverse(&self, ty: Ty, n: usize, parts: Vec<Stream>) -> Result<Stream> {
        let (mask, values) = (&parts[0], &parts[1]);
        if mask.len() != self.groups(n) || values.ty != ty {
            return Err(Error::corrupt("sparse: mask or values of the wrong shape"));
        }
        let g = self.group;
        let data = match (&mask.data, &values.data) {
            (Data::U8(m), Data::U8(v)) => scatter(m, v, g, n).map(Data::U8),
            (Data::U8(m), Data::U16(v)) => scatter(m, v, g, n).map(Data::U16),
            (Data::U8(m), Data::U32(v)) => scatter(m, v, g, n).map(Data::U32),
            (Data::U8(m), Data::U64(v)) => scatter(m, v, g, n).map(Data::U64),
            (Data::U16(m), Data::U8(v)) => scatter(m, v, g, n).map(Data::U8),
            (Data::U16(m), Data::U16(v)) => scatter(m, v, g, n).map(Data::U16),
            (Data::U16(m), Data::U32(v)) => scatter(m, v, g, n).map(Data::U32),
            (Data::U16(m), Data::U64(v)) => scatter(m, v, g, n).map(Data::U64),
            _ => None,
        };
        let data = data.ok_or_else(|| Error::corrupt("sparse: mask does not match the values"))?;
        Ok(Stream { ty, data })
    }
}

/// The mask (one word per group) and the non-zero words of `x`.
fn split<T: Copy + Default + PartialEq + Into<u64>>(x: &[T], group: u8, ty: Ty) -> (Stream, Stream) {
    let zero = T::default();
    let mut values = Vec::with_capacity(x.len());
    let mask = Stream::from_iter(
        Ty::u(group as u32),
        x.chunks(group as usize).map(|g| {
            let mut m = 0u64;
            for (i, &v) in g.iter().enumerate() {
                if v != zero {
                    m |= 1 << i;
                    values.push(v.into());
                }
            }
            m
        }),
    );
    (mask, Stream::from_iter(ty, values.into_iter()))
}

/// `n` words: the values in the places of the mask's set bits, zeros elsewhere. None when the
/// set bits do not number the values or a bit lies past the last word.
fn scatter<M: Copy + Into<u32>, T: Copy + Default>(masks: &[M], values: &[T], group: u8, n: usize) -> Option<Vec<T>> {
    let g = group as usize;
    // Every mask word within its group (and the last within the words left), and exactly as
    // many set bits as values.
    let tail = n - (masks.len().saturating_sub(1)) * g;
    let (mut set, mut over) = (0usize, 0u32);
    for &m in masks {
        let m: u32 = m.into();
        set += m.count_ones() as usize;
        over |= m >> g;
    }
    let last_ok = masks.last().is_none_or(|&m| Into::<u32>::into(m) >> tail == 0);
    if set != values.len() || over != 0 || !last_ok {
        return None;
    }
    let mut out = vec![T::default(); n];
    let mut next = values.iter();
    for (k, &m) in masks.iter().enumerate() {
        let group_out = &mut out[k * g..];
        let mut bits: u32 = m.into();
        while bits != 0 {
            // In range: bit i lies within the group, and the group within `out` (checked above);
            // the set bits number the values.
            group_out[bits.trailing_zeros() as usize] = *next.next()?;
            bits &= bits - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_scatters_back_at_every_width_and_group() {
        for bits in [8, 16, 32, 64] {
            for group in [1u8, 3, 4, 8, 16] {
                for n in [0usize, 1, 7, 8, 33, 100] {
                    let x = Stream::from_iter(
                        Ty::u(bits),
                        (0..n as u64).map(|i| if i % 3 == 1 || i % 7 == 0 { 0 } else { i * 0x9E37 + 1 }),
                    );
                    let s = Sparse { group };
                    let mut header = Vec::new();
                    let parts = s.forward(&x, &mut header);
                    let nonzero = x.iter().filter(|&v| v != 0).count();
                    assert_eq!((parts[0].len(), parts[1].len()), (n.div_ceil(group as usize), nonzero));
                    let mut r = ByteReader::new(&header);
                    let [(mt, ml), (vt, vl)] = s.read_header(x.ty, n, &mut r).unwrap();
                    assert_eq!((mt, ml, vt, vl), (parts[0].ty, parts[0].len(), x.ty, nonzero));
                    assert_eq!(s.inverse(x.ty, n, parts).unwrap(), x, "u{bits} group {group} n {n}");
                }
            }
        }
    }

    #[test]
    fn damaged_masks_are_errors() {
        let s = Sparse { group: 4 };
        let ty = Ty::u(16);
        let x = Stream::from_iter(ty, [0u64, 5, 0, 6, 7].into_iter());
        let parts = s.forward(&x, &mut Vec::new());
        // One value too few or too many for the mask.
        for values in [vec![5u64, 6], vec![5, 6, 7, 8]] {
            let bad = vec![parts[0].clone(), Stream::from_iter(ty, values.into_iter())];
            assert!(s.inverse(ty, 5, bad).is_err());
        }
        // A bit past the last word, a bit past the group, a mask of the wrong length.
        for mask in [vec![0b1010u64, 0b11], vec![0b11010, 0b1], vec![0b1010]] {
            let bad = vec![Stream::from_iter(Ty::u(4), mask.into_iter()), parts[1].clone()];
            assert!(s.inverse(ty, 5, bad).is_err());
        }
        assert!(Sparse::read(&mut ByteReader::new(&[0])).is_err());
        assert!(Sparse::read(&mut ByteReader::new(&[17])).is_err());
    }
}
