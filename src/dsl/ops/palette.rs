//! `palette(g)` (id 0x1D): u(w) (`w <= 16`) -> [count: u(b), one word per group of g input
//! words, the group's number of distinct words less one; low: u(w), each group's smallest word;
//! gaps: u(w), each group's distinct words after its smallest, as differences from the one
//! before (ascending, so every gap is at least 1); index: u(b), each word's rank among the
//! distinct words of its group], with `b = ceil(log2 g)`. The chunk header carries the number of
//! gaps.
//!
//! Weights that were quantized once and stored again in a wider type take few distinct values
//! per quantization block: a model dequantized to bf16 (or trained on a 4-bit grid, as
//! quantization-aware checkpoints are), or a 4-bit model requantized to 8 or 6 bits holds at
//! most 16 values per block of 32. The palette codes each group's few values once and each word
//! as a small index; where the values are free (as many distinct as words), it is larger than
//! coding the words, and the search does not pick it.

use super::prelude::*;
use crate::simd::{self, PaletteParts};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Palette {
    /// Words per group (2 to 256).
    pub group: u16,
}

/// Largest group (counts and indices stay within a byte).
pub const MAX_GROUP: u16 = 256;

impl Palette {
    pub const ID: u8 = 0x1D;

    pub fn read(r: &mut ByteReader) -> Result<Palette> {
        let group = r.varint()?;
        if !(2..=MAX_GROUP as u64).contains(&group) {
            return Err(Error::corrupt("palette: group out of range"));
        }
        Ok(Palette { group: group as u16 })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, self.group as u64);
    }

    /// Bits of a count or an index.
    fn rank_ty(&self) -> Ty {
        Ty::u(u16::BITS - (self.group - 1).leading_zeros())
    }

    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        if !(2..=MAX_GROUP).contains(&self.group) {
            return Err(Error::invalid("palette: group out of range"));
        }
        if !(1..=16).contains(&ty.bits) {
            return Err(Error::invalid("palette: words wider than 16 bits"));
        }
        let r = self.rank_ty();
        Ok(vec![r, ty, ty, r])
    }

    fn groups(&self, n: usize) -> usize {
        n.div_ceil(self.group as usize)
    }

    /// Gap count from the chunk header, then the (type, length) of each child.
    pub fn read_header(&self, ty: Ty, n: usize, r: &mut ByteReader) -> Result<[(Ty, usize); 4]> {
        let gaps = r.len(n as u64)?;
        let (rt, groups) = (self.rank_ty(), self.groups(n));
        Ok([(rt, groups), (ty, groups), (ty, gaps), (rt, n)])
    }

    /// The four children; the gap count goes to `header`. Words wider than 16 bits are refused
    /// by [`Self::child_types`].
    pub fn forward(&self, x: &Stream, header: &mut Vec<u8>) -> Vec<Stream> {
        let (rt, g) = (self.rank_ty(), self.group as usize);
        let groups = self.groups(x.len());
        let mut count = Stream::with_capacity(rt, groups);
        let mut low = Stream::with_capacity(x.ty, groups);
        let mut gaps = Stream::with_capacity(x.ty, x.len() / 2);
        let mut index = Stream::with_capacity(rt, x.len());
        let words = x.u16_symbols();
        let mut distinct: Vec<u16> = Vec::with_capacity(g);
        for group in words.chunks(g) {
            distinct.clear();
            distinct.extend_from_slice(group);
            distinct.sort_unstable();
            distinct.dedup();
            count.push(distinct.len() as u64 - 1);
            low.push(distinct[0] as u64);
            for p in distinct.windows(2) {
                gaps.push((p[1] - p[0]) as u64);
            }
            for v in group {
                // Every word of the group is among its distinct words.
                index.push(distinct.binary_search(v).unwrap_or(0) as u64);
            }
        }
        put_varint(header, gaps.len() as u64);
        vec![count, low, gaps, index]
    }

    /// Each group's distinct words rebuilt from its smallest and the gaps, then each word from
    /// its index. The counts must use up the gaps exactly and every index be below its group's
    /// count.
    pub fn inverse(&self, ty: Ty, n: usize, parts: Vec<Stream>) -> Result<Stream> {
        let [count, low, gaps, index] = &parts[..] else {
            return Err(Error::corrupt("palette: four parts expected"));
        };
        let groups = self.groups(n);
        if count.len() != groups || low.len() != groups || index.len() != n || low.ty != ty || gaps.ty != ty {
            return Err(Error::corrupt("palette: parts of the wrong shape"));
        }
        let (Data::U8(count), Data::U8(index)) = (&count.data, &index.data) else {
            return Err(Error::corrupt("palette: counts or indices wider than a byte"));
        };
        let (g, mask) = (self.group as usize, ty.mask());
        let data = match (&low.data, &gaps.data) {
            (Data::U8(low), Data::U8(gaps)) => {
                let mut out = vec![0u8; n];
                let p = PaletteParts { count, low, gaps, index, g, mask: mask as u8 };
                simd::palette(&p, &mut out).then_some(Data::U8(out))
            }
            (Data::U16(low), Data::U16(gaps)) => {
                let mut out = vec![0u16; n];
                let p = PaletteParts { count, low, gaps, index, g, mask: mask as u16 };
                simd::palette(&p, &mut out).then_some(Data::U16(out))
            }
            _ => None,
        };
        let data = data.ok_or_else(|| Error::corrupt("palette: counts, gaps and indices do not match"))?;
        Ok(Stream { ty, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_rebuilds_at_every_width_and_group() {
        for bits in [1, 5, 8, 11, 16] {
            for group in [2u16, 3, 16, 32, 256] {
                for n in [0usize, 1, 7, 32, 33, 100, 1000] {
                    // Few values per group (a grid) in some groups, all distinct in others.
                    let x = Stream::from_fn(Ty::u(bits), n, |i| {
                        if (i / 64) % 2 == 0 {
                            (i as u64 * 7919) % 5 * 3
                        } else {
                            i as u64 * 0x9E37 + 1
                        }
                    });
                    let p = Palette { group };
                    let mut header = Vec::new();
                    let parts = p.forward(&x, &mut header);
                    let types = p.child_types(x.ty).unwrap();
                    assert_eq!(parts.iter().map(|s| s.ty).collect::<Vec<_>>(), types);
                    let mut r = ByteReader::new(&header);
                    let shapes = p.read_header(x.ty, n, &mut r).unwrap();
                    for (s, (t, l)) in parts.iter().zip(shapes) {
                        assert_eq!((s.ty, s.len()), (t, l));
                    }
                    assert_eq!(p.inverse(x.ty, n, parts).unwrap(), x, "u{bits} group {group} n {n}");
                }
            }
        }
    }

    #[test]
    fn a_grid_takes_few_symbols() {
        // 32 words on 4 values: one count, one low, three gaps, 32 indices below 4.
        let x = Stream::from_fn(Ty::u(8), 32, |i| 100 + 9 * (i as u64 % 4));
        let parts = Palette { group: 32 }.forward(&x, &mut Vec::new());
        assert_eq!(parts[0].iter().collect::<Vec<_>>(), [3]);
        assert_eq!(parts[1].iter().collect::<Vec<_>>(), [100]);
        assert_eq!(parts[2].iter().collect::<Vec<_>>(), [9, 9, 9]);
        assert!(parts[3].iter().all(|i| i < 4));
    }

    #[test]
    fn damaged_parts_are_errors() {
        let p = Palette { group: 4 };
        let ty = Ty::u(8);
        let x = Stream::from_iter(ty, [3u64, 5, 3, 9, 7, 7].into_iter());
        let parts = p.forward(&x, &mut Vec::new());
        let with = |i: usize, s: Stream| {
            let mut v = parts.clone();
            v[i] = s;
            v
        };
        let bad = [
            // A count past its group, a gap left unused, a gap too few.
            with(0, Stream::from_iter(Ty::u(2), [2u64, 3].into_iter())),
            with(2, Stream::from_iter(ty, [2u64, 4, 1].into_iter())),
            with(2, Stream::from_iter(ty, [2u64].into_iter())),
            // An index at its group's count, indices of the wrong length.
            with(3, Stream::from_iter(Ty::u(2), [0u64, 1, 0, 3, 0, 0].into_iter())),
            with(3, Stream::from_iter(Ty::u(2), [0u64, 1, 0].into_iter())),
            // Lows of another type.
            with(1, Stream::from_iter(Ty::u(16), [3u64, 7].into_iter())),
        ];
        for b in bad {
            assert!(p.inverse(ty, 6, b).is_err());
        }
        assert_eq!(p.inverse(ty, 6, parts).unwrap(), x);
        for g in [0u8, 1] {
            assert!(Palette::read(&mut ByteReader::new(&[g])).is_err());
        }
        assert!(Palette::read(&mut ByteReader::new(&[0x81, 0x02])).is_err(), "group 257");
    }
}
