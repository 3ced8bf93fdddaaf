//! `dict` (id 0x18): u(w) -> [table: the distinct words in ascending order, u(w);
//! indices into the table, u(ceil log2 t)]. The chunk header carries the table size t.

use super::prelude::*;
use crate::simd::Lane;
use rustc_hash::FxHashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dict;

/// Largest table the encoder builds (indices then stay codable as 16-bit symbols).
pub const MAX_ENTRIES: usize = 1 << 16;

fn index_bits(t: usize) -> u32 {
    if t <= 1 {
        0
    } else {
        usize::BITS - (t - 1).leading_zeros()
    }
}

impl Dict {
    pub const ID: u8 = 0x18;

    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        Ok(vec![ty, Ty::u(16)])
    }

    /// Table size from the chunk header, then (table type and length, index type and length).
    pub fn read_header(&self, ty: Ty, n: usize, r: &mut ByteReader) -> Result<[(Ty, usize); 2]> {
        let t = r.len(MAX_ENTRIES as u64)?;
        if t > n || (n > 0 && t == 0) {
            return Err(Error::corrupt("dict: table size out of range"));
        }
        Ok([(ty, t), (Ty::u(index_bits(t)), n)])
    }

    /// Returns None when the stream has too many distinct words.
    pub fn forward(&self, x: &Stream, header: &mut Vec<u8>) -> Option<Vec<Stream>> {
        let (vals, idx) = if x.ty.bits <= 16 { Self::forward_small(x)? } else { Self::forward_wide(x)? };
        put_varint(header, vals.len() as u64);
        Some(vec![Stream::from_iter(x.ty, vals.into_iter()), idx])
    }

    /// Words of at most 16 bits: the table from a presence map, each index by lookup.
    fn forward_small(x: &Stream) -> Option<(Vec<u64>, Stream)> {
        let mut rank = vec![u16::MAX; 1 << x.ty.bits];
        for v in x.u16_symbols().iter() {
            rank[*v as usize] = 0;
        }
        let mut vals = Vec::new();
        for (v, r) in rank.iter_mut().enumerate().filter(|(_, r)| **r == 0) {
            if vals.len() >= MAX_ENTRIES {
                return None;
            }
            *r = vals.len() as u16;
            vals.push(v as u64);
        }
        let idx = x.map_words(Ty::u(index_bits(vals.len())), |v| rank[v as usize] as u64);
        Some((vals, idx))
    }

    /// Wider words: the sorted distinct words, each index by one hash lookup. Each word gets
    /// a provisional index in order of first appearance as it is read, in one pass that gives
    /// up as soon as there are too many distinct words (a stream that is no dictionary's is
    /// dropped after a part of it); only the distinct words are then sorted, and the
    /// provisional indices renamed through a table of at most [`MAX_ENTRIES`].
    fn forward_wide(x: &Stream) -> Option<(Vec<u64>, Stream)> {
        match &x.data {
            Data::U8(d) => Self::first_seen(d),
            Data::U16(d) => Self::first_seen(d),
            Data::U32(d) => Self::first_seen(d),
            Data::U64(d) => Self::first_seen(d),
        }
    }

    fn first_seen<L: Lane + Eq + std::hash::Hash>(words: &[L]) -> Option<(Vec<u64>, Stream)> {
        let mut seen: FxHashMap<L, u16> = FxHashMap::default();
        seen.reserve(words.len().min(MAX_ENTRIES));
        let mut first = Vec::with_capacity(words.len());
        for &v in words {
            let next = seen.len();
            if next == MAX_ENTRIES {
                // Full: a word not yet seen would be one too many.
                first.push(*seen.get(&v)?);
            } else {
                first.push(*seen.entry(v).or_insert(next as u16));
            }
        }
        let mut vals: Vec<(u64, u16)> = seen.into_iter().map(|(v, id)| (v.to_u64(), id)).collect();
        vals.sort_unstable();
        let mut rank = vec![0u16; vals.len()];
        for (r, &(_, id)) in vals.iter().enumerate() {
            rank[id as usize] = r as u16;
        }
        for i in &mut first {
            *i = rank[*i as usize];
        }
        let idx = Stream::from_u16(Ty::u(index_bits(vals.len())), first);
        Some((vals.into_iter().map(|(v, _)| v).collect(), idx))
    }

    /// Each index's table word: one pass for the largest index (which must be in the table),
    /// then a lookup per word in the containers' own types.
    pub fn inverse(&self, ty: Ty, n: usize, parts: Vec<Stream>) -> Result<Stream> {
        let (table, idx) = (&parts[0], &parts[1]);
        if idx.len() != n {
            return Err(Error::corrupt("dict: index stream of the wrong length"));
        }
        let data = match (&table.data, &idx.data) {
            (Data::U8(t), Data::U8(i)) => lookup(t, i).map(Data::U8),
            (Data::U8(t), Data::U16(i)) => lookup(t, i).map(Data::U8),
            (Data::U16(t), Data::U8(i)) => lookup(t, i).map(Data::U16),
            (Data::U16(t), Data::U16(i)) => lookup(t, i).map(Data::U16),
            (Data::U32(t), Data::U8(i)) => lookup(t, i).map(Data::U32),
            (Data::U32(t), Data::U16(i)) => lookup(t, i).map(Data::U32),
            (Data::U64(t), Data::U8(i)) => lookup(t, i).map(Data::U64),
            (Data::U64(t), Data::U16(i)) => lookup(t, i).map(Data::U64),
            _ => return Err(Error::corrupt("dict: indices wider than 16 bits")),
        };
        let data = data.ok_or_else(|| Error::corrupt("dict: index out of range"))?;
        if table.ty != ty {
            return Err(Error::corrupt("dict: table of another type"));
        }
        Ok(Stream { ty, data })
    }
}

/// `table[i]` for each index, or None when an index is not below the table's length.
fn lookup<T: Copy, I: Copy + Into<usize>>(table: &[T], idx: &[I]) -> Option<Vec<T>> {
    let largest = idx.iter().fold(0usize, |m, &j| m.max(j.into()));
    if !idx.is_empty() && largest >= table.len() {
        return None;
    }
    // SAFETY: every index is at most `largest`, which is below `table.len()` (checked above).
    Some(idx.iter().map(|&j| unsafe { *table.get_unchecked(j.into()) }).collect())
}
