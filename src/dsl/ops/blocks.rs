//! `blocks(t)` (id 0x20): split a byte stream of ggml quantization blocks of type `t` (its GGUF
//! type id) into its fields, one child stream per field: the block scales (fp16 `d`, `m`; the
//! f32 `d` of Q8_K), the sub-block scales of K-quants (6-bit packed scales and mins, unpacked),
//! and the quants, each unpacked to one value of `b` bits (the high-bit planes of Q5_x / Q3_K /
//! Q5_K / Q6_K joined to their low bits), in element order. Q8_K's `bsums` are a field of
//! their own. Layouts: ggml's `ggml-common.h`.
//!
//! `blocks(t, packed)` (id 0x21) splits the same blocks with the quants left packed: each run of
//! bytes that holds quants (the nibble bytes `qs`, the high-bit bytes `qh`, K-quants' `ql`/`hmask`)
//! is a u8 field as stored, one child value per byte, while the scales are split as in
//! `blocks(t)`. Half as many symbols for 4-bit quants, and a byte alphabet that holds the two
//! nibbles' joint statistics: the search weighs one split against the other. The types whose
//! quants are whole bytes already (Q8_0, Q8_1, Q8_K) have no packed form.
//!
//! A chunk need not start or end on a block boundary: the stream's first byte is byte
//! `elem_offset` of the tensor, so the bytes before the first whole block and after the last
//! one (fewer than a block each) go to child 0 (the *edge* bytes, u8), then come the fields of
//! the whole blocks. Every bit of a block belongs to exactly one field value, so the split is
//! a bijection for any bytes.

use super::prelude::*;
use std::ops::Range;

/// One piece of a field value: `len` bits at bit `shift` of byte `byte` of the block are bits
/// `at .. at + len` of the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    byte: u16,
    shift: u8,
    len: u8,
    at: u8,
}

/// A field: `count` values of `bits` bits per block, each made of its pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub bits: u32,
    /// Pieces of each value of the field in a block.
    pieces: Vec<Vec<Piece>>,
    /// How the kernels move it (the same bits as `pieces`, faster).
    kind: Kind,
}

/// The shapes of field that have their own kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Value j is the `n` bytes at `off + j n`, little-endian.
    Bytes { off: usize, n: usize },
    /// 32 values: value j < 16 the low nibble of byte `qs + j`, value j + 16 its high nibble,
    /// with (Q5_x) bit 4 of value e from bit e of the 32-bit word at `qh`.
    Nibbles { qs: usize, qh: Option<usize> },
    /// Q6_K's 256 quants: element `128 n + 32 g + l` is nibble `g >> 1` of byte
    /// `ql + 64 n + 32 (g & 1) + l` with bits `2 g .. 2 g + 2` of byte `qh + 32 n + l` above it.
    SixBit { ql: usize, qh: usize },
    /// Q4_K's and Q5_K's 256 quants: element `64 g + 32 h + l` is nibble `h` of byte
    /// `qs + 32 g + l`, with (Q5_K) bit 4 from bit `2 g + h` of byte `qh + l`.
    KNibbles { qs: usize, qh: Option<usize> },
    /// 256 2-bit quants (Q2_K, TQ2_0): element `128 n + 32 j + l` is bits `2 j` of byte
    /// `qs + 32 n + l`; with `hmask` (Q3_K), bit 2 is bit `e / 32` of byte `hmask + e % 32`.
    Crumbs { qs: usize, hmask: Option<usize> },
    /// Value `i` is the low (`high`: the high) nibble of byte `off + i`; or-ed in.
    HalfBytes { off: usize, high: bool },
    /// Q3_K's 16 scales of 6 bits in the 12 bytes at `sc`: the low nibble of value `i` is
    /// nibble `i / 8` of byte `sc + i % 8`, its bits 4-5 are bits `2 (i / 4)` of byte
    /// `sc + 8 + i % 4`; or-ed in.
    Q3Scales { sc: usize },
    /// Q4_K's and Q5_K's 8 scales (or, `mins`, 8 mins) of 6 bits in the 12 bytes at `sc`, as
    /// ggml's `get_scale_min_k4` reads them; or-ed in, like pieces.
    ScaleMin { sc: usize, mins: bool },
    /// Anything else: the pieces, `ppv` per value (padded with empty pieces).
    Pieces { ppv: usize },
}

impl Field {
    fn new(bits: u32, pieces: Vec<Vec<Piece>>) -> Field {
        let kind = Self::bytes_kind(&pieces)
            .or_else(|| Self::six_bit_kind(&pieces))
            .unwrap_or(Kind::Pieces { ppv: pieces.iter().map(|v| v.len()).max().unwrap_or(0) });
        Field { bits, pieces, kind }
    }

    /// `Kind::Bytes` when every value is whole consecutive bytes, the values one after another.
    fn bytes_kind(pieces: &[Vec<Piece>]) -> Option<Kind> {
        let n = pieces.first()?.len();
        let off = pieces[0].first()?.byte as usize;
        let whole = pieces.iter().enumerate().all(|(j, v)| {
            v.len() == n
                && v.iter().enumerate().all(|(t, q)| {
                    q.shift == 0 && q.len == 8 && q.at as usize == 8 * t && q.byte as usize == off + j * n + t
                })
        });
        whole.then_some(Kind::Bytes { off, n })
    }

    /// `Kind::SixBit` when the pieces are exactly that pattern.
    fn six_bit_kind(pieces: &[Vec<Piece>]) -> Option<Kind> {
        let first = pieces.first()?;
        let (ql, qh) = (first.first()?.byte as usize, first.get(1)?.byte as usize);
        let fits = pieces.len() == 256
            && pieces.iter().enumerate().all(|(e, v)| {
                let (n, g, l) = (e / 128, (e / 32) % 4, e % 32);
                *v == [
                    p(ql + 64 * n + 32 * (g & 1) + l, 4 * (g >> 1) as u32, 4, 0),
                    p(qh + 32 * n + l, 2 * g as u32, 2, 4),
                ]
            });
        fits.then_some(Kind::SixBit { ql, qh })
    }

    pub fn count(&self) -> usize {
        self.pieces.len()
    }

    /// The pieces as one table, `ppv` per value (padded with empty pieces).
    fn flat(&self, ppv: usize) -> Vec<Piece> {
        let pad = Piece { byte: 0, shift: 0, len: 0, at: 0 };
        self.pieces.iter().flat_map(|v| v.iter().copied().chain(std::iter::repeat(pad)).take(ppv)).collect()
    }
}

/// The word types a field's values are stored in.
trait Word: Copy + Default {
    fn from_u64(v: u64) -> Self;
    fn to_u64(self) -> u64;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn to_u64(self) -> u64 {
                self as u64
            }
        }
    };
}
word!(u8);
word!(u16);
word!(u32);
word!(u64);

/// The values of field `f` in `k` blocks of `body`.
fn gather<T: Word>(f: &Field, body: &[u8], b: usize, k: usize) -> Vec<T> {
    let m = f.count();
    let mut out = vec![T::default(); k * m];
    if m == 0 {
        return out;
    }
    let blocks = body.chunks_exact(b).zip(out.chunks_exact_mut(m));
    match f.kind {
        Kind::Bytes { off, n: 1 } => {
            for (blk, o) in blocks {
                for (v, &x) in o.iter_mut().zip(&blk[off..off + m]) {
                    *v = T::from_u64(x as u64);
                }
            }
        }
        Kind::Bytes { off, n: 2 } => {
            for (blk, o) in blocks {
                for (v, x) in o.iter_mut().zip(blk[off..off + 2 * m].chunks_exact(2)) {
                    *v = T::from_u64(u16::from_le_bytes([x[0], x[1]]) as u64);
                }
            }
        }
        Kind::Bytes { off, n } => {
            for (blk, o) in blocks {
                for (v, x) in o.iter_mut().zip(blk[off..off + m * n].chunks_exact(n)) {
                    let mut w = [0u8; 8];
                    w[..n].copy_from_slice(x);
                    *v = T::from_u64(u64::from_le_bytes(w));
                }
            }
        }
        Kind::Nibbles { qs, qh } => {
            for (blk, o) in blocks {
                let h = qh.map_or(0, |q| u32::from_le_bytes(blk[q..q + 4].try_into().unwrap()));
                let (lo, hi) = o.split_at_mut(16);
                for (j, ((l, u), &x)) in lo.iter_mut().zip(hi).zip(&blk[qs..qs + 16]).enumerate() {
                    *l = T::from_u64((x & 15) as u64 | (((h >> j) & 1) << 4) as u64);
                    *u = T::from_u64((x >> 4) as u64 | (((h >> (j + 16)) & 1) << 4) as u64);
                }
            }
        }
        _ => {
            let ppv = f.pieces.iter().map(|v| v.len()).max().unwrap_or(0);
            let flat = f.flat(ppv);
            for (blk, o) in blocks {
                for (v, ps) in o.iter_mut().zip(flat.chunks_exact(ppv)) {
                    *v = T::from_u64(ps.iter().fold(0u64, |a, q| {
                        a | ((((blk[q.byte as usize] >> q.shift) as u64) & ((1u64 << q.len) - 1)) << q.at)
                    }));
                }
            }
        }
    }
    out
}

/// The `m` bytes at `off` of each whole `b`-byte block of `body` (a field of whole bytes, as u8
/// values). The sizes that block layouts have are constants, so that each block's copy is an
/// inlined move rather than a `memcpy` call.
fn gather_bytes(body: &[u8], b: usize, off: usize, m: usize) -> Vec<u8> {
    fn run<const M: usize>(body: &[u8], b: usize, off: usize, out: &mut [u8]) {
        for (blk, v) in body.chunks_exact(b).zip(out.chunks_exact_mut(M)) {
            let v: &mut [u8; M] = v.try_into().unwrap();
            *v = blk[off..off + M].try_into().unwrap();
        }
    }
    let mut out = vec![0u8; body.len() / b * m];
    match m {
        16 => run::<16>(body, b, off, &mut out),
        32 => run::<32>(body, b, off, &mut out),
        64 => run::<64>(body, b, off, &mut out),
        128 => run::<128>(body, b, off, &mut out),
        _ => {
            for (blk, v) in body.chunks_exact(b).zip(out.chunks_exact_mut(m)) {
                v.copy_from_slice(&blk[off..off + m]);
            }
        }
    }
    out
}

/// Writes `vals` into the `m` bytes at `off` of each whole block of `body` ([`gather_bytes`]'s
/// inverse).
fn scatter_bytes(vals: &[u8], body: &mut [u8], b: usize, off: usize, m: usize) {
    fn run<const M: usize>(vals: &[u8], body: &mut [u8], b: usize, off: usize) {
        for (blk, v) in body.chunks_exact_mut(b).zip(vals.chunks_exact(M)) {
            let d: &mut [u8; M] = (&mut blk[off..off + M]).try_into().unwrap();
            *d = v.try_into().unwrap();
        }
    }
    match m {
        16 => run::<16>(vals, body, b, off),
        32 => run::<32>(vals, body, b, off),
        64 => run::<64>(vals, body, b, off),
        128 => run::<128>(vals, body, b, off),
        _ => {
            for (blk, v) in body.chunks_exact_mut(b).zip(vals.chunks_exact(m)) {
                blk[off..off + m].copy_from_slice(v);
            }
        }
    }
}

/// [`scatter`] of byte values: the kernels take them as they are.
fn scatter_u8(f: &Field, vals: &[u8], body: &mut [u8], b: usize) {
    match f.kind {
        Kind::Bytes { off, n: 1 } => scatter_bytes(vals, body, b, off, f.count()),
        Kind::Nibbles { qs, qh } => crate::simd::nibble_blocks(vals, body, b, qs, qh),
        Kind::SixBit { ql, qh } => crate::simd::six_bit_blocks(vals, body, b, ql, qh),
        Kind::KNibbles { qs, qh } => crate::simd::k_nibble_blocks(vals, body, b, qs, qh),
        Kind::ScaleMin { sc, mins } => scatter_scale_min(vals, body, b, sc, mins),
        Kind::Crumbs { qs, hmask } => crate::simd::crumb_blocks(vals, body, b, qs, hmask),
        Kind::HalfBytes { off, high } => scatter_half_bytes(vals, body, b, off, high, f.count()),
        Kind::Q3Scales { sc } => scatter_q3_scales(vals, body, b, sc),
        _ => scatter(f, vals, body, b),
    }
}

/// Writes the values of field `f` into the `k` blocks of `body` (zeroed where the field lies).
fn scatter<T: Word>(f: &Field, vals: &[T], body: &mut [u8], b: usize) {
    let m = f.count();
    if m == 0 {
        return;
    }
    let blocks = body.chunks_exact_mut(b).zip(vals.chunks_exact(m));
    match f.kind {
        Kind::Bytes { off, n: 1 } => {
            for (blk, vs) in blocks {
                for (d, v) in blk[off..off + m].iter_mut().zip(vs) {
                    *d = v.to_u64() as u8;
                }
            }
        }
        // One block scale: a store of two bytes (the loop below is a `memcpy` call per block,
        // the compiler finds).
        Kind::Bytes { off, n: 2 } if m == 1 => {
            for (blk, vs) in blocks {
                let d: &mut [u8; 2] = (&mut blk[off..off + 2]).try_into().unwrap();
                *d = (vs[0].to_u64() as u16).to_le_bytes();
            }
        }
        Kind::Bytes { off, n: 2 } => {
            for (blk, vs) in blocks {
                for (d, v) in blk[off..off + m * 2].chunks_exact_mut(2).zip(vs) {
                    d.copy_from_slice(&(v.to_u64() as u16).to_le_bytes());
                }
            }
        }
        Kind::Bytes { off, n } => {
            for (blk, vs) in blocks {
                for (d, v) in blk[off..off + m * n].chunks_exact_mut(n).zip(vs) {
                    d.copy_from_slice(&v.to_u64().to_le_bytes()[..n]);
                }
            }
        }
        // As bytes, to the kernels of `scatter_u8`: they read at most bits 0..6 of each value,
        // which the low byte holds.
        Kind::Nibbles { .. }
        | Kind::SixBit { .. }
        | Kind::KNibbles { .. }
        | Kind::ScaleMin { .. }
        | Kind::Crumbs { .. }
        | Kind::HalfBytes { .. }
        | Kind::Q3Scales { .. } => {
            let bytes: Vec<u8> = vals.iter().map(|v| v.to_u64() as u8).collect();
            scatter_u8(f, &bytes, body, b)
        }
        Kind::Pieces { ppv } => {
            let flat = f.flat(ppv);
            for (blk, vs) in blocks {
                for (v, ps) in vs.iter().zip(flat.chunks_exact(ppv)) {
                    let v = v.to_u64();
                    for q in ps {
                        blk[q.byte as usize] |= (((v >> q.at) & ((1u64 << q.len) - 1)) as u8) << q.shift;
                    }
                }
            }
        }
    }
}

/// The fields of one block type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub block_bytes: usize,
    pub fields: Vec<Field>,
}

impl Layout {
    /// The bytes of a block that or-ed fields write (pieces, and the kinds of scales that share
    /// their bytes), so the decoder clears these first; as ranges in order.
    fn or_bytes(&self) -> Vec<std::ops::Range<usize>> {
        let mut held = vec![false; self.block_bytes];
        let or_ed = |k: Kind| {
            matches!(k, Kind::Pieces { .. } | Kind::ScaleMin { .. } | Kind::HalfBytes { .. } | Kind::Q3Scales { .. })
        };
        for f in self.fields.iter().filter(|f| or_ed(f.kind)) {
            for q in f.pieces.iter().flatten() {
                held[q.byte as usize] = true;
            }
        }
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, _) in held.iter().enumerate().filter(|(_, &h)| h) {
            match ranges.last_mut() {
                Some(r) if r.end == i => r.end += 1,
                _ => ranges.push(i..i + 1),
            }
        }
        ranges
    }
}

fn p(byte: usize, shift: u32, len: u32, at: u32) -> Piece {
    Piece { byte: byte as u16, shift: shift as u8, len: len as u8, at: at as u8 }
}

/// A little-endian scalar of `n` bytes at `off` (fp16 `d`, f32 `d`, i16 `bsums`), `count` of them.
fn scalars(off: usize, n: usize, count: usize) -> Field {
    let pieces = (0..count).map(|i| (0..n).map(|b| p(off + i * n + b, 0, 8, 8 * b as u32)).collect()).collect();
    Field::new(8 * n as u32, pieces)
}

/// A field of `count` values given by `f(value index)`.
fn field(bits: u32, count: usize, f: impl Fn(usize) -> Vec<Piece>) -> Field {
    Field::new(bits, (0..count).map(f).collect())
}

/// 32 4-bit quants at `qs`: element j < 16 in the low nibble of byte j, element j + 16 in its high nibble.
fn nibbles32(qs: usize, high: Option<usize>) -> Field {
    let bits = if high.is_some() { 5 } else { 4 };
    let f = field(bits, 32, |e| {
        let mut v = vec![p(qs + e % 16, 4 * (e / 16) as u32, 4, 0)];
        if let Some(qh) = high {
            v.push(p(qh + e / 8, (e % 8) as u32, 1, 4));
        }
        v
    });
    Field { kind: Kind::Nibbles { qs, qh: high }, ..f }
}

/// 256 2-bit values (Q2_K, Q3_K's low bits, TQ2_0): element 128n + 32j + l is bits 2j of byte 32n + l.
fn crumbs256(qs: usize, e: usize) -> Piece {
    let (n, j, l) = (e / 128, (e / 32) % 4, e % 32);
    p(qs + 32 * n + l, 2 * j as u32, 2, 0)
}

/// 256 quants of 2 bits at `qs` (Q2_K, TQ2_0), or of 3 with bit 2 in `hmask` (Q3_K).
fn crumb_quants(qs: usize, hmask: Option<usize>) -> Field {
    let f = field(if hmask.is_some() { 3 } else { 2 }, 256, |e| {
        let mut v = vec![crumbs256(qs, e)];
        if let Some(h) = hmask {
            v.push(p(h + e % 32, (e / 32) as u32, 1, 2));
        }
        v
    });
    Field { kind: Kind::Crumbs { qs, hmask }, ..f }
}

/// `count` 4-bit values, the low (`high`: high) nibbles of the bytes from `off` (Q2_K's scales
/// and mins).
fn half_bytes(off: usize, count: usize, high: bool) -> Field {
    let f = field(4, count, |i| vec![p(off + i, if high { 4 } else { 0 }, 4, 0)]);
    Field { kind: Kind::HalfBytes { off, high }, ..f }
}

/// Q3_K's 16 scales of 6 bits in the 12 bytes at `sc`.
fn q3_scales(sc: usize) -> Field {
    let f = field(6, 16, |i| {
        let lo = if i < 8 { p(sc + i, 0, 4, 0) } else { p(sc + i - 8, 4, 4, 0) };
        vec![lo, p(sc + 8 + i % 4, 2 * (i / 4) as u32, 2, 4)]
    });
    Field { kind: Kind::Q3Scales { sc }, ..f }
}

/// Or-s [`Kind::HalfBytes`] values into their nibbles.
fn scatter_half_bytes(vals: &[u8], body: &mut [u8], b: usize, off: usize, high: bool, m: usize) {
    let shift = if high { 4 } else { 0 };
    for (blk, v) in body.chunks_exact_mut(b).zip(vals.chunks_exact(m)) {
        for (d, &x) in blk[off..off + m].iter_mut().zip(v) {
            *d |= (x & 15) << shift;
        }
    }
}

/// Or-s [`Kind::Q3Scales`] values (16 per block) into the 12 bytes at `sc`.
fn scatter_q3_scales(vals: &[u8], body: &mut [u8], b: usize, sc: usize) {
    for (blk, v) in body.chunks_exact_mut(b).zip(vals.chunks_exact(16)) {
        let q: &mut [u8; 12] = (&mut blk[sc..sc + 12]).try_into().unwrap();
        for i in 0..8 {
            q[i] |= (v[i] & 15) | (v[i + 8] & 15) << 4;
        }
        for i in 0..4 {
            q[8 + i] |=
                (v[i] >> 4 & 3) | (v[i + 4] >> 4 & 3) << 2 | (v[i + 8] >> 4 & 3) << 4 | (v[i + 12] >> 4 & 3) << 6;
        }
    }
}

/// The 6-bit scales (`mins = false`) or mins of Q4_K and Q5_K (`get_scale_min_k4`).
fn scale_min_k4(sc: usize, mins: bool) -> Field {
    let f = field(6, 8, |j| match (j < 4, mins) {
        (true, false) => vec![p(sc + j, 0, 6, 0)],
        (true, true) => vec![p(sc + j + 4, 0, 6, 0)],
        (false, false) => vec![p(sc + j + 4, 0, 4, 0), p(sc + j - 4, 6, 2, 4)],
        (false, true) => vec![p(sc + j + 4, 4, 4, 0), p(sc + j, 6, 2, 4)],
    });
    Field { kind: Kind::ScaleMin { sc, mins }, ..f }
}

/// Or-s the 6-bit values of a [`Kind::ScaleMin`] field (8 per block) into the 12 bytes at `sc`
/// of each block (the bytes the pieces of [`scale_min_k4`] name, without their table).
fn scatter_scale_min(vals: &[u8], body: &mut [u8], b: usize, sc: usize, mins: bool) {
    for (blk, v) in body.chunks_exact_mut(b).zip(vals.chunks_exact(8)) {
        let q: &mut [u8; 12] = (&mut blk[sc..sc + 12]).try_into().unwrap();
        // Value j < 4 is six bits of byte j (mins: j + 4); value j + 4 is the low (mins: high)
        // nibble of byte j + 8, with its bits 4-5 in bits 6-7 of the byte of value j.
        let (at, nibble) = if mins { (4, 4) } else { (0, 0) };
        for j in 0..4 {
            let (lo, hi) = (v[j] & 63, v[j + 4] & 63);
            q[at + j] |= lo | (hi >> 4) << 6;
            q[8 + j] |= (hi & 15) << nibble;
        }
    }
}

/// 256 quants of Q4_K / Q5_K: element 64g + 32h + l is nibble h of byte 32g + l, and (Q5_K)
/// its high bit is bit 2g + h of `qh[l]`.
fn quants_k(qs: usize, high: Option<usize>) -> Field {
    let f = field(if high.is_some() { 5 } else { 4 }, 256, |e| {
        let (g, h, l) = (e / 64, (e / 32) % 2, e % 32);
        let mut v = vec![p(qs + 32 * g + l, 4 * h as u32, 4, 0)];
        if let Some(qh) = high {
            v.push(p(qh + l, (2 * g + h) as u32, 1, 4));
        }
        v
    });
    Field { kind: Kind::KNibbles { qs, qh: high }, ..f }
}

/// The layout of ggml type `id`, when it is one this operator splits.
pub fn layout(id: u32) -> Option<Layout> {
    let h = |off| scalars(off, 2, 1);
    let (block_bytes, fields) = match id {
        // Q4_0, IQ4_NL: d, qs[16].
        2 | 20 => (18, vec![h(0), nibbles32(2, None)]),
        // Q4_1: d, m, qs[16].
        3 => (20, vec![h(0), h(2), nibbles32(4, None)]),
        // Q5_0: d, qh[4], qs[16].
        6 => (22, vec![h(0), nibbles32(6, Some(2))]),
        // Q5_1: d, m, qh[4], qs[16].
        7 => (24, vec![h(0), h(2), nibbles32(8, Some(4))]),
        // Q8_0: d, qs[32].
        8 => (34, vec![h(0), field(8, 32, |e| vec![p(2 + e, 0, 8, 0)])]),
        // Q8_1: d, s, qs[32].
        9 => (36, vec![h(0), h(2), field(8, 32, |e| vec![p(4 + e, 0, 8, 0)])]),
        // Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
        10 => (84, vec![h(80), h(82), half_bytes(0, 16, false), half_bytes(0, 16, true), crumb_quants(16, None)]),
        // Q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales), d.
        11 => (110, vec![h(108), q3_scales(96), crumb_quants(32, Some(0))]),
        // Q4_K: d, dmin, scales[12], qs[128].
        12 => (144, vec![h(0), h(2), scale_min_k4(4, false), scale_min_k4(4, true), quants_k(16, None)]),
        // Q5_K: d, dmin, scales[12], qh[32], qs[128].
        13 => (176, vec![h(0), h(2), scale_min_k4(4, false), scale_min_k4(4, true), quants_k(48, Some(16))]),
        // Q6_K: ql[128], qh[64], scales[16] (i8), d. Element 128n + 32g + l: the nibble g >> 1
        // of ql[64n + 32(g & 1) + l], and bits 2g of qh[32n + l] above it.
        14 => (
            210,
            vec![
                h(208),
                field(8, 16, |i| vec![p(192 + i, 0, 8, 0)]),
                field(6, 256, |e| {
                    let (n, g, l) = (e / 128, (e / 32) % 4, e % 32);
                    vec![
                        p(64 * n + 32 * (g & 1) + l, 4 * (g >> 1) as u32, 4, 0),
                        p(128 + 32 * n + l, 2 * g as u32, 2, 4),
                    ]
                }),
            ],
        ),
        // Q8_K: d (f32), qs[256], bsums[16] (i16).
        15 => (292, vec![scalars(0, 4, 1), field(8, 256, |e| vec![p(4 + e, 0, 8, 0)]), scalars(260, 2, 16)]),
        // TQ2_0: qs[64], d.
        35 => (66, vec![h(64), crumb_quants(0, None)]),
        // MXFP4: e (e8m0), qs[16].
        39 => (17, vec![field(8, 1, |_| vec![p(0, 0, 8, 0)]), nibbles32(1, None)]),
        _ => return None,
    };
    Some(Layout { block_bytes, fields })
}

/// `count` bytes at `off`, one u8 value each.
fn bytes(off: usize, count: usize) -> Field {
    field(8, count, |e| vec![p(off + e, 0, 8, 0)])
}

/// The layout of ggml type `id` with its quants left packed (`blocks(t, packed)`), when it
/// has one: the scale fields of [`layout`], then the bytes that hold the quants.
pub fn packed_layout(id: u32) -> Option<Layout> {
    let h = |off| scalars(off, 2, 1);
    let (block_bytes, fields) = match id {
        2 | 20 => (18, vec![h(0), bytes(2, 16)]),
        3 => (20, vec![h(0), h(2), bytes(4, 16)]),
        6 => (22, vec![h(0), bytes(2, 4), bytes(6, 16)]),
        7 => (24, vec![h(0), h(2), bytes(4, 4), bytes(8, 16)]),
        10 => {
            let mut f = layout(10)?.fields;
            f[4] = bytes(16, 64);
            (84, f)
        }
        11 => {
            let mut f = layout(11)?.fields;
            f[2] = bytes(32, 64);
            f.push(bytes(0, 32));
            (110, f)
        }
        12 => {
            let mut f = layout(12)?.fields;
            f[4] = bytes(16, 128);
            (144, f)
        }
        13 => {
            let mut f = layout(13)?.fields;
            f[4] = bytes(16, 32);
            f.push(bytes(48, 128));
            (176, f)
        }
        14 => (210, vec![h(208), bytes(192, 16), bytes(0, 128), bytes(128, 64)]),
        35 => (66, vec![h(64), bytes(0, 64)]),
        39 => (17, vec![bytes(0, 1), bytes(1, 16)]),
        _ => return None,
    };
    Some(Layout { block_bytes, fields })
}

/// Bytes of blocks [`Blocks::inverse_into`] completes at a time (well within L1).
const TILE_BYTES: usize = 8 << 10;

/// The ggml type ids `blocks` splits.
pub const TYPES: [u32; 15] = [2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20, 35, 39];

/// The ggml type ids that also have a packed form.
pub const PACKED_TYPES: [u32; 12] = [2, 3, 6, 7, 10, 11, 12, 13, 14, 20, 35, 39];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocks {
    /// The GGUF type id of the blocks.
    pub ggml: u32,
    /// Quants left in the bytes that pack them (`blocks(t, packed)`).
    pub packed: bool,
    layout: Layout,
}

impl Blocks {
    pub const ID: u8 = 0x20;
    pub const PACKED_ID: u8 = 0x21;

    /// `blocks` for ggml type `id`, when its layout is known.
    pub fn new(id: u32) -> Option<Blocks> {
        layout(id).map(|layout| Blocks { ggml: id, packed: false, layout })
    }

    /// `blocks(t, packed)` for ggml type `id`, when it has a packed form.
    pub fn packed(id: u32) -> Option<Blocks> {
        packed_layout(id).map(|layout| Blocks { ggml: id, packed: true, layout })
    }

    pub fn id(&self) -> u8 {
        if self.packed {
            Self::PACKED_ID
        } else {
            Self::ID
        }
    }

    /// The operator of id `op_id` (`ID` or `PACKED_ID`), its block type read from `r`.
    pub fn read(op_id: u8, r: &mut ByteReader) -> Result<Self> {
        let id = r.varint()?;
        let make = if op_id == Self::PACKED_ID { Blocks::packed } else { Blocks::new };
        u32::try_from(id)
            .ok()
            .and_then(make)
            .ok_or_else(|| Error::Unsupported(format!("blocks: unknown block type {id}")))
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, self.ggml as u64);
    }

    /// For each child of this split (the edge bytes, then the fields), the index of the child
    /// of `other` (a split of the same type) that holds the same values, if any.
    pub fn shared_fields(&self, other: &Blocks) -> Vec<Option<usize>> {
        let same = |f: &Field| other.layout.fields.iter().position(|g| g == f).map(|j| j + 1);
        std::iter::once(Some(0)).chain(self.layout.fields.iter().map(same)).collect()
    }

    /// Values per block of each field.
    pub fn field_counts(&self) -> Vec<usize> {
        self.layout.fields.iter().map(|f| f.count()).collect()
    }

    pub fn block_bytes(&self) -> usize {
        self.layout.block_bytes
    }

    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        if ty.bits != 8 {
            return Err(Error::corrupt("blocks: input is not a byte stream"));
        }
        Ok(std::iter::once(Ty::u(8)).chain(self.layout.fields.iter().map(|f| Ty::u(f.bits))).collect())
    }

    /// (bytes before the first whole block, whole blocks) of `n` bytes starting at byte `offset`
    /// of the tensor.
    fn split_at(&self, n: usize, offset: u64) -> (usize, usize) {
        let b = self.layout.block_bytes;
        let head = ((b as u64 - offset % b as u64) % b as u64).min(n as u64) as usize;
        (head, (n - head) / b)
    }

    /// Child stream lengths for `n` bytes starting at byte `offset` of the tensor.
    pub fn child_lens(&self, n: usize, offset: u64) -> Vec<usize> {
        let (head, k) = self.split_at(n, offset);
        let edge = n - k * self.layout.block_bytes;
        debug_assert!(edge >= head);
        std::iter::once(edge).chain(self.layout.fields.iter().map(|f| k * f.count())).collect()
    }

    /// Child elements per input byte, for each child (the edge bytes count as none).
    pub fn child_ratios(&self) -> Vec<f64> {
        let b = self.layout.block_bytes as f64;
        std::iter::once(0.0).chain(self.layout.fields.iter().map(|f| f.count() as f64 / b)).collect()
    }

    pub fn forward(&self, x: &Stream, offset: u64) -> Result<Vec<Stream>> {
        let Data::U8(bytes) = &x.data else {
            return Err(Error::invalid("blocks: input is not a byte stream"));
        };
        let b = self.layout.block_bytes;
        let (head, k) = self.split_at(bytes.len(), offset);
        let body = &bytes[head..head + k * b];
        let mut edge = bytes[..head].to_vec();
        edge.extend_from_slice(&bytes[head + k * b..]);
        let mut out = vec![Stream { ty: Ty::u(8), data: Data::U8(edge) }];
        for f in &self.layout.fields {
            let ty = Ty::u(f.bits);
            let data = match (ty.container_bytes(), f.kind) {
                (1, Kind::Bytes { off, n: 1 }) => Data::U8(gather_bytes(body, b, off, f.count())),
                (1, _) => Data::U8(gather(f, body, b, k)),
                (2, _) => Data::U16(gather(f, body, b, k)),
                (4, _) => Data::U32(gather(f, body, b, k)),
                _ => Data::U64(gather(f, body, b, k)),
            };
            out.push(Stream { ty, data });
        }
        Ok(out)
    }

    pub fn inverse(&self, n: usize, offset: u64, parts: &[Stream]) -> Result<Stream> {
        let mut out = vec![0u8; n];
        self.inverse_into(offset, parts, &mut out)?;
        Ok(Stream { ty: Ty::u(8), data: Data::U8(out) })
    }

    /// [`Blocks::inverse`] into `out` (the chunk's `out.len()` bytes), every byte written.
    pub fn inverse_into(&self, offset: u64, parts: &[Stream], out: &mut [u8]) -> Result<()> {
        let body = self.edges_into(offset, parts, out, false)?;
        let b = self.layout.block_bytes;
        let cleared = self.layout.or_bytes();
        // A tile of blocks at a time, every field into it: each line of `out` is fetched once
        // and completed while it is in L1 (a field at a time over the whole body fetches each
        // line once per field).
        let tile = (TILE_BYTES / b).max(1);
        for (i, body) in body.chunks_mut(tile * b).enumerate() {
            self.fill(body, i * tile, &cleared, &parts[1..], None);
        }
        Ok(())
    }

    /// [`Blocks::inverse_into`] with the last field's values not in `parts` (the edge bytes and
    /// every other field) but handed by `last` to the sink it is given, in order, as segments
    /// `(index of the first value, values)` of whole blocks' values. Each segment's blocks are
    /// completed as it comes, while its values are in L1: no stream of the last field is made.
    /// The segments must cover the field exactly.
    pub fn inverse_into_with(
        &self,
        offset: u64,
        parts: &[Stream],
        out: &mut [u8],
        last: impl FnOnce(&mut dyn FnMut(usize, Values) -> Result<()>) -> Result<()>,
    ) -> Result<()> {
        let body = self.edges_into(offset, parts, out, true)?;
        let b = self.layout.block_bytes;
        let m = self.layout.fields.last().map_or(0, Field::count);
        let cleared = self.layout.or_bytes();
        let k = body.len() / b;
        let mut next = 0;
        last(&mut |start, vals| {
            let len = vals.len();
            if m == 0 || start != next || !len.is_multiple_of(m) || start + len > k * m {
                return Err(Error::corrupt("blocks: the last field's values do not cover its blocks"));
            }
            next += len;
            let blocks = start / m..(start + len) / m;
            self.fill(&mut body[blocks.start * b..blocks.end * b], blocks.start, &cleared, &parts[1..], Some(vals));
            // The next segment's blocks (as many), fetched while its values are decoded.
            let ahead = (blocks.end + blocks.len()).min(k);
            crate::simd::prefetch_for_write(&body[blocks.end * b..ahead * b]);
            Ok(())
        })?;
        if next != k * m {
            return Err(Error::corrupt("blocks: the last field's values do not cover its blocks"));
        }
        Ok(())
    }

    /// Checks the child streams' lengths against `out` (the edge bytes and every field, or
    /// every field but the `streamed` last one), writes the edge bytes, and returns the whole
    /// blocks.
    fn edges_into<'o>(&self, offset: u64, parts: &[Stream], out: &'o mut [u8], streamed: bool) -> Result<&'o mut [u8]> {
        let (n, b) = (out.len(), self.layout.block_bytes);
        let mut lens = self.child_lens(n, offset);
        if streamed {
            lens.pop();
        }
        if parts.len() != lens.len() || parts.is_empty() || parts.iter().zip(&lens).any(|(s, &l)| s.len() != l) {
            return Err(Error::corrupt("blocks: child streams of the wrong length"));
        }
        let (head, k) = self.split_at(n, offset);
        let Data::U8(edge) = &parts[0].data else {
            return Err(Error::corrupt("blocks: edge bytes are not bytes"));
        };
        out[..head].copy_from_slice(&edge[..head]);
        out[head + k * b..].copy_from_slice(&edge[head..]);
        Ok(&mut out[head..head + k * b])
    }

    /// Writes the blocks of `body` (blocks `first..` of the chunk's body), every field into
    /// them: from `fields` (one stream per field, or per field but the last when `last` holds
    /// its values for these blocks).
    fn fill(&self, body: &mut [u8], first: usize, cleared: &[Range<usize>], fields: &[Stream], last: Option<Values>) {
        let b = self.layout.block_bytes;
        // Every kernel masks the values to their field's bits; bit pieces are or-ed in, the
        // other kinds assign whole bytes.
        if !cleared.is_empty() {
            for blk in body.chunks_exact_mut(b) {
                for r in cleared {
                    blk[r.clone()].fill(0);
                }
            }
        }
        let blocks = first..first + body.len() / b;
        for (f, s) in self.layout.fields.iter().zip(fields) {
            let m = f.count();
            let vals = blocks.start * m..blocks.end * m;
            match &s.data {
                Data::U8(v) => scatter_u8(f, &v[vals], body, b),
                Data::U16(v) => scatter(f, &v[vals], body, b),
                Data::U32(v) => scatter(f, &v[vals], body, b),
                Data::U64(v) => scatter(f, &v[vals], body, b),
            }
        }
        if let (Some(vals), Some(f)) = (last, self.layout.fields.last()) {
            match vals {
                Values::U8(v) => scatter_u8(f, v, body, b),
                Values::U16(v) => scatter(f, v, body, b),
            }
        }
    }
}

/// Values of a field handed to [`Blocks::inverse_into_with`].
#[derive(Clone, Copy, Debug)]
pub enum Values<'a> {
    U8(&'a [u8]),
    U16(&'a [u16]),
}

impl Values<'_> {
    pub fn len(&self) -> usize {
        match self {
            Values::U8(v) => v.len(),
            Values::U16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Display for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let packed = if self.packed { ", packed" } else { "" };
        match crate::tensor::gguf::ggml_type(self.ggml) {
            Some(t) => write!(f, "blocks({}{packed})", t.name),
            None => write!(f, "blocks(#{}{packed})", self.ggml),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bit of a block belongs to exactly one piece of one value, and the block sizes
    /// agree with the GGUF type table.
    /// Every layout, plain and packed.
    fn all_layouts() -> impl Iterator<Item = (u32, Layout)> {
        TYPES
            .into_iter()
            .map(|id| (id, layout(id).unwrap()))
            .chain(PACKED_TYPES.into_iter().map(|id| (id, packed_layout(id).unwrap())))
    }

    #[test]
    fn layouts_cover_every_bit_once() {
        assert!(TYPES.iter().all(|&id| packed_layout(id).is_some() == PACKED_TYPES.contains(&id)));
        for (id, l) in all_layouts() {
            let t = crate::tensor::gguf::ggml_type(id).unwrap();
            assert_eq!(l.block_bytes as u64, t.block_bytes, "{}", t.name);
            let mut seen = vec![0u8; l.block_bytes * 8];
            for f in &l.fields {
                for pieces in &f.pieces {
                    let mut vbits = vec![0u8; f.bits as usize];
                    for q in pieces {
                        for j in 0..q.len as usize {
                            seen[q.byte as usize * 8 + q.shift as usize + j] += 1;
                            vbits[q.at as usize + j] += 1;
                        }
                    }
                    assert!(vbits.iter().all(|&c| c == 1), "{}: value bits", t.name);
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{}: block bits", t.name);
        }
    }

    #[test]
    fn quants_in_element_order() {
        // Q4_0: element 17 is the high nibble of qs[1]; Q5_0: its high bit is bit 17 of qh.
        let q = layout(2).unwrap();
        assert_eq!(q.fields[1].pieces[17], vec![p(3, 4, 4, 0)]);
        let q = layout(6).unwrap();
        assert_eq!(q.fields[1].pieces[17], vec![p(6 + 1, 4, 4, 0), p(2 + 2, 1, 1, 4)]);
        // Q6_K: element 128 + 64 + 5 is the high nibble of ql[64 + 5], bits 4..6 of qh[32 + 5].
        let q = layout(14).unwrap();
        assert_eq!(q.fields[2].pieces[128 + 64 + 5], vec![p(64 + 5, 4, 4, 0), p(128 + 32 + 5, 4, 2, 4)]);
    }

    /// The byte and nibble kernels move the same bits as the pieces say.
    #[test]
    fn kernels_agree_with_pieces() {
        for (id, l) in all_layouts() {
            let b = l.block_bytes;
            let body: Vec<u8> = (0..4 * b).map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7) as u8).collect();
            for f in &l.fields {
                let slow =
                    Field { kind: Kind::Pieces { ppv: f.pieces.iter().map(|v| v.len()).max().unwrap() }, ..f.clone() };
                assert_eq!(gather::<u64>(f, &body, b, 4), gather::<u64>(&slow, &body, b, 4), "type {id}");
                // Scattered back, values out of the field's range included: the same bytes.
                let vals: Vec<u8> =
                    (0..4 * f.count()).map(|i| (i as u32).wrapping_mul(40503).rotate_left(5) as u8).collect();
                let (mut fast_body, mut slow_body) = (vec![0u8; 4 * b], vec![0u8; 4 * b]);
                scatter(f, &vals, &mut fast_body, b);
                scatter(&slow, &vals, &mut slow_body, b);
                assert_eq!(fast_body, slow_body, "type {id}, scatter");
                let wide: Vec<u16> = vals.iter().map(|&v| v as u16).collect();
                let (mut u8_body, mut u16_body) = (vec![0u8; 4 * b], vec![0u8; 4 * b]);
                scatter_u8(f, &vals, &mut u8_body, b);
                scatter(f, &wide, &mut u16_body, b);
                assert_eq!(u8_body, slow_body, "type {id}, scatter of bytes");
                assert_eq!(u16_body, slow_body, "type {id}, scatter of u16");
            }
        }
        // The kernels are found from the pieces: Q6_K's quants have theirs.
        assert!(matches!(layout(14).unwrap().fields[2].kind, Kind::SixBit { ql: 0, qh: 128 }));
        assert!(matches!(layout(13).unwrap().fields[4].kind, Kind::KNibbles { qs: 48, qh: Some(16) }));
        assert!(matches!(layout(12).unwrap().fields[3].kind, Kind::ScaleMin { sc: 4, mins: true }));
        assert!(matches!(layout(11).unwrap().fields[2].kind, Kind::Crumbs { qs: 32, hmask: Some(0) }));
    }

    /// Any phase of the blocks against the stream's start, any length: short ones, and bodies of
    /// several tiles.
    #[test]
    fn round_trip_at_any_phase() {
        for op in TYPES.into_iter().map(Blocks::new).chain(PACKED_TYPES.into_iter().map(Blocks::packed)) {
            let op = op.unwrap();
            let id = op.ggml;
            let b = op.block_bytes();
            let mut s = 0x9E37_79B9_7F4A_7C15u64;
            // Several tiles of `inverse_into`, and a tile's part at the end.
            let bytes: Vec<u8> = (0..(3 * TILE_BYTES / b + 3) * b + 7)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect();
            for offset in [0u64, 1, b as u64 - 1, b as u64, 5 * b as u64 + 3] {
                for n in [0, 1, b - 1, b, 2 * b + 1, bytes.len()] {
                    let x = Stream { ty: Ty::u(8), data: Data::U8(bytes[..n].to_vec()) };
                    let parts = op.forward(&x, offset).unwrap();
                    let lens: Vec<usize> = parts.iter().map(|s| s.len()).collect();
                    assert_eq!(lens, op.child_lens(n, offset));
                    assert_eq!(op.inverse(n, offset, &parts).unwrap(), x, "type {id} offset {offset} n {n}");
                }
            }
        }
    }
}
