//! The fused writer of 32-bit float programs: `fields(e,m,k)[H, S, L]` over 32-bit words (fp32:
//! `e8 m23`), with `H` an entropy leaf of `e + k <= 16` bits or `byteplanes` of such a leaf and
//! a part (for `e + k > 8`), `S` raw, constant or an entropy leaf, and `L` (the `m - k` low
//! mantissa bits, more than 8) raw, constant, `zstd` or `dict` of a table and raw, constant or
//! entropy-coded indices (the table decoded by the interpreter: at most 2^16 words). The head symbols
//! are decoded into a per-thread buffer; then, a block at a time (the block stays in L1), the
//! sign and low parts are unpacked and merged with them straight into the caller's buffer. No
//! stream is allocated; the interpreter writes the same bytes.

use super::{head_leaf, leaf, merge_planes, part, Part, Scratch, BLOCK, SCRATCH};
use crate::coder::bitio::ByteReader;
use crate::coder::{self, packed_len};
use crate::dsl::{Env, Node, Op, Stream, Ty};
use crate::error::{Error, Result};
use crate::hash::Trail;

/// Whether [`decode_into`] takes `p` over words of type `ty`.
pub(super) fn applies(p: &Node, ty: Ty) -> bool {
    let Op::Fields(f) = &p.op else { return false };
    ty.bits == 32
        && p.children.len() == 3
        && 1 + f.exp + f.mant == 32
        && f.exp + f.k <= 16
        && f.mant - f.k > 8
        && head(&p.children[0], f.exp + f.k)
        && part(&p.children[1])
        && (matches!(p.children[2].op, Op::Raw(_) | Op::Const(_) | Op::Zstd(_)) || dict_low(&p.children[2]))
}

/// `dict[table, indices]` with a table program that needs nothing but its payload and indices
/// that are a part.
fn dict_low(p: &Node) -> bool {
    matches!(p.op, Op::Dict(_)) && p.children.len() == 2 && standalone(&p.children[0]) && part(&p.children[1])
}

/// A program that reads nothing but its payload: no copy, reference or position.
fn standalone(p: &Node) -> bool {
    !matches!(p.op, Op::Copy(_) | Op::Arange(_)) && !p.uses_reference() && p.children.iter().all(standalone)
}

/// An entropy leaf, or (for a head of 9 to 16 bits) `byteplanes` of an entropy leaf and a part.
fn head(p: &Node, bits: u32) -> bool {
    head_leaf(p)
        || (matches!(p.op, Op::BytePlanes(_))
            && (9..=16).contains(&bits)
            && p.children.len() == 2
            && head_leaf(&p.children[0])
            && part(&p.children[1]))
}

/// The low mantissa part: its packed bytes, its value, or its words' little-endian bytes (2 or
/// 4 a word: what `zstd` codes).
enum Low<'a> {
    Packed(&'a [u8]),
    Const(u32),
    Words(&'a [u8], usize),
    /// `dict`: the table (its first `t` words) and the indices (of `bits` bits).
    Dict {
        table: &'a [u32; DICT],
        t: usize,
        idx: Part<'a>,
        bits: u32,
    },
}

/// Table words a `dict` low part can have (`dict::MAX_ENTRIES`): any 16-bit index is inside
/// a table of this size, so the lookup needs no bounds check; indices at or past the table's
/// length are found per block.
const DICT: usize = crate::dsl::ops::dict::MAX_ENTRIES;

/// Decodes `out.len() / 4` words with `p` (for which [`applies`] holds) from the chunk payload
/// `r`, little-endian into `out`.
pub(super) fn decode_into(p: &Node, r: &mut ByteReader, out: &mut [u8], mut trail: Option<&mut Trail>) -> Result<()> {
    let Op::Fields(f) = &p.op else { return Err(Error::corrupt("fused decode: not a fields program")) };
    let kids = &p.children;
    let n = out.len() / 4;
    let lo = f.mant - f.k;
    SCRATCH.with(|cell| {
        let Scratch { head, words, parts, bytes, table } = &mut *cell.borrow_mut();
        let hbits = f.exp + f.k;
        let head: &[u16] = if head_leaf(&kids[0]) {
            leaf(&kids[0], Ty::u(hbits), r.bytes()?, n, head)?;
            head
        } else {
            // `byteplanes` of the head: its high bytes into `head`, its low part into `parts[1]`,
            // merged into `words`.
            words.resize(n, 0);
            merge_planes(
                &kids[0].children,
                hbits,
                r,
                head,
                &mut parts[1],
                bytemuck::cast_slice_mut(&mut words[..]),
                None,
            )?;
            words
        };
        let [sbuf, ibuf] = parts;
        let sign = Part::read(&kids[1], 1, n, r, sbuf)?;
        let low = match &kids[2].op {
            Op::Raw(_) => {
                let b = r.bytes()?;
                if b.len() != packed_len(n, lo) {
                    return Err(Error::corrupt("raw leaf: wrong length"));
                }
                Low::Packed(b)
            }
            Op::Const(c) if c.value <= Ty::u(lo).mask() => Low::Const(c.value as u32),
            Op::Zstd(_) => {
                let width = Ty::u(lo).container_bytes();
                *bytes = coder::zstd_decode(r.bytes()?, n * width)?;
                check_words(bytes, width, lo)?;
                Low::Words(bytes, width)
            }
            Op::Dict(d) => {
                let [(tty, t), (ity, _)] = d.read_header(Ty::u(lo), n, r)?;
                let no_copy = |_: u32| -> Result<Stream> { Err(Error::corrupt("dict table: no copy")) };
                let words = kids[2].children[0].decode(tty, t, r, &[], &Env::new(0, &no_copy))?;
                if words.ty != tty || words.len() != t {
                    return Err(Error::corrupt("dict: table of another type"));
                }
                table.resize(DICT, 0);
                for (o, v) in table.iter_mut().zip(words.iter()) {
                    *o = v as u32;
                }
                let idx = Part::read(&kids[2].children[1], ity.bits, n, r, ibuf)?;
                let table = <&[u32; DICT]>::try_from(&table[..DICT]).expect("resized above");
                Low::Dict { table, t, idx, bits: ity.bits }
            }
            _ => return Err(Error::corrupt("fused decode: the low part is not raw, constant, zstd or dict")),
        };
        let (mut s, mut m) = ([0u8; BLOCK], [0u32; BLOCK]);
        for block in 0..n.div_ceil(BLOCK) {
            let (start, b) = (block * BLOCK, BLOCK.min(n - block * BLOCK));
            let dst = &mut out[4 * start..4 * (start + b)];
            sign.unpack(1, start, &mut s[..b]);
            match low {
                Low::Const(v) => m[..b].fill(v),
                Low::Packed(bytes) => {
                    // `start` is a multiple of 8, so the block's values start on a byte.
                    let a = start * lo as usize / 8;
                    unpack_wide(&bytes[a..a + packed_len(b, lo)], lo, &mut m[..b]);
                }
                Low::Words(bytes, 2) => {
                    for (o, w) in m[..b].iter_mut().zip(bytes[2 * start..2 * (start + b)].chunks_exact(2)) {
                        *o = u16::from_le_bytes([w[0], w[1]]) as u32;
                    }
                }
                Low::Dict { table, t, ref idx, bits } => {
                    let mut ix = [0u16; BLOCK];
                    idx.unpack16(bits, start, &mut ix[..b]);
                    if ix[..b].iter().fold(0, |a, &i| a.max(i)) as usize >= t {
                        return Err(Error::corrupt("dict: index out of range"));
                    }
                    for (o, &i) in m[..b].iter_mut().zip(&ix[..b]) {
                        *o = table[i as usize];
                    }
                }
                Low::Words(bytes, _) => {
                    for (o, w) in m[..b].iter_mut().zip(bytes[4 * start..4 * (start + b)].chunks_exact(4)) {
                        *o = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    }
                }
            }
            let top = f.exp + f.mant;
            let merge = |o: &mut [u32]| {
                for (((o, &h), &s), &m) in o.iter_mut().zip(&head[start..start + b]).zip(&s[..b]).zip(&m[..b]) {
                    *o = ((s as u32) << top | (h as u32) << lo | m).to_le();
                }
            };
            // Into the output's words where it is 4-byte aligned (a loop that vectorizes), else
            // through a copy.
            match bytemuck::try_cast_slice_mut::<u8, u32>(dst) {
                Ok(words) => merge(words),
                Err(_) => {
                    let mut w = [0u32; BLOCK];
                    merge(&mut w[..b]);
                    dst.copy_from_slice(bytemuck::cast_slice(&w[..b]));
                }
            }
            if let Some(t) = trail.as_deref_mut() {
                t.advance(out, 4 * (start + b));
            }
        }
        Ok(())
    })
}

/// Whether every little-endian word of `width` bytes in `bytes` fits in `bits` bits (as the
/// interpreter's `Stream::from_le_bytes` checks what `zstd` decoded).
fn check_words(bytes: &[u8], width: usize, bits: u32) -> Result<()> {
    if bits as usize == 8 * width {
        return Ok(());
    }
    let outside = !((1u64 << bits) - 1);
    let any = match width {
        2 => bytes.chunks_exact(2).fold(0u64, |a, w| a | (u16::from_le_bytes([w[0], w[1]]) as u64 & outside)),
        _ => {
            bytes.chunks_exact(4).fold(0u64, |a, w| a | (u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64 & outside))
        }
    };
    if any != 0 {
        return Err(Error::corrupt("word does not fit its type"));
    }
    Ok(())
}

/// Unpacks `out.len()` values of `bits` bits (9..=32) from the LSB-first bit stream `data`
/// (exactly their packed length): an unaligned 64-bit load per value while eight bytes remain,
/// the last few from a padded copy.
fn unpack_wide(data: &[u8], bits: u32, out: &mut [u32]) {
    debug_assert!((9..=32).contains(&bits) && data.len() == packed_len(out.len(), bits));
    let mask = ((1u64 << bits) - 1) as u32;
    let b = bits as usize;
    // Values whose load `[i b / 8, i b / 8 + 8)` stays inside `data`.
    let fast = if data.len() >= 8 { ((data.len() - 8) * 8 / b + 1).min(out.len()) } else { 0 };
    for (i, o) in out[..fast].iter_mut().enumerate() {
        let bit = i * b;
        let w = u64::from_le_bytes(data[bit / 8..bit / 8 + 8].try_into().expect("8 bytes"));
        *o = (w >> (bit % 8)) as u32 & mask;
    }
    for (i, o) in out.iter_mut().enumerate().skip(fast) {
        let bit = i * b;
        let mut t = [0u8; 8];
        let rest = &data[bit / 8..];
        let k = rest.len().min(8);
        t[..k].copy_from_slice(&rest[..k]);
        *o = (u64::from_le_bytes(t) >> (bit % 8)) as u32 & mask;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsl::build::*;
    use crate::dsl::{Env, Stream};

    /// fp32 bit patterns around 0.05 with a few specials, and the same without signs.
    fn floats(n: usize, seed: u64) -> [Stream; 2] {
        let mut s = seed;
        let x = Stream::from_fn(Ty::u(32), n, |i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.1 * (1.0 + (i % 7) as f64);
            match i % 97 {
                5 => 0x7FC0_0001,
                6 => 0x8000_0000,
                _ => (v as f32).to_bits() as u64,
            }
        });
        let pos = Stream::from_fn(Ty::u(32), n, |i| x.get(i) & 0x7FFF_FFFF);
        [x, pos]
    }

    /// The fused path gives what the interpreter gives for every head leaf, raw, constant and
    /// entropy-coded sign parts, raw, constant, zstd and dict low parts, k from 0 to 8, odd lengths and
    /// aligned and misaligned outputs; and on damaged payloads it fails wherever the interpreter
    /// does.
    #[test]
    fn fused_decode_of_fp32_equals_the_interpreter() {
        let heads = [lanes(), lanes_prev(), lanes_adj(), huffman(), rans(), rans_back(64)];
        let no_copy = |_: u32| -> Result<Stream> { Err(Error::corrupt("no copy")) };
        let env = Env::new(0, &no_copy);
        let mut checked = 0;
        for n in [1usize, 7, 8, 1000, 4096 + 13, 9000] {
            for data in &floats(n, n as u64) {
                for k in [0u32, 2, 5, 8] {
                    for head in &heads {
                        let mut programs = vec![
                            fields(8, 23, k, [head.clone(), raw(), raw()]),
                            fields(8, 23, k, [head.clone(), konst(0), raw()]),
                            fields(8, 23, k, [head.clone(), head.clone(), raw()]),
                            fields(8, 23, k, [head.clone(), raw(), konst(0)]),
                            fields(8, 23, k, [head.clone(), raw(), zstd(3)]),
                            fields(8, 23, k, [head.clone(), raw(), dict(delta(1, zstd(9)), raw())]),
                            fields(8, 23, k, [head.clone(), head.clone(), dict(raw(), head.clone())]),
                        ];
                        if k > 0 {
                            // A head of 9..=16 bits split into byte planes.
                            programs.push(fields(8, 23, k, [byteplanes(vec![head.clone(), raw()]), raw(), raw()]));
                            programs.push(fields(8, 23, k, [byteplanes(vec![head.clone(), huffman()]), raw(), raw()]));
                        }
                        for p in programs {
                            let mut payload = Vec::new();
                            if p.encode(data, &[], &mut payload).is_err() {
                                continue;
                            }
                            assert!(applies(&p, Ty::u(32)), "{p}");
                            let want = p.decode(Ty::u(32), n, &mut ByteReader::new(&payload), &[], &env).unwrap();
                            let want = want.to_le_bytes();
                            let mut buf = vec![0u8; 4 * n + 3];
                            for off in [0usize, 3] {
                                let out = &mut buf[off..off + 4 * n];
                                let mut r = ByteReader::new(&payload);
                                let (start, len) = (7 + off, 7 + off + 4 * n + 5000);
                                let mut sums = vec![[0u64; 8]; crate::hash::blocks_in(start, start + 4 * n, len).len()];
                                let mut trail = Trail::new(start, 4 * n, len, &mut sums);
                                decode_into(&p, &mut r, out, Some(&mut trail)).unwrap();
                                assert!(r.is_empty());
                                assert_eq!(out, &want[..], "{p} n {n} offset {off}");
                                trail.finish(out);
                                let mut want_sums = vec![[0u64; 8]; sums.len()];
                                crate::hash::piece_sums(out, start, len, &mut want_sums);
                                assert!(sums == want_sums, "{p} n {n} offset {off}: checksum blocks");
                            }
                            // Damage: a flipped byte and a cut tail fail (or decode) as the
                            // interpreter does, never panic.
                            for at in [payload.len() / 2, payload.len() - 1] {
                                let mut bad = payload.clone();
                                bad[at] ^= 0x21;
                                let i = p
                                    .decode(Ty::u(32), n, &mut ByteReader::new(&bad), &[], &env)
                                    .map(|s| s.to_le_bytes());
                                let mut out = vec![0u8; 4 * n];
                                let f = decode_into(&p, &mut ByteReader::new(&bad), &mut out, None).map(|_| out);
                                assert_eq!(i.is_ok(), f.is_ok(), "{p} n {n}: damaged at {at}");
                                if let (Ok(i), Ok(f)) = (i, f) {
                                    assert_eq!(i, f, "{p} n {n}: damaged at {at}");
                                }
                            }
                            let mut out = vec![0u8; 4 * n];
                            assert!(decode_into(
                                &p,
                                &mut ByteReader::new(&payload[..payload.len() - 1]),
                                &mut out,
                                None
                            )
                            .is_err());
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked >= 400, "{checked} cases");
        // A table that needs the chunk's position or another tensor takes the interpreter.
        for table in [arange(0, 1), copy(0)] {
            assert!(!applies(&fields(8, 23, 4, [lanes(), raw(), dict(table, raw())]), Ty::u(32)));
        }
    }

    /// `unpack_wide` reads what `coder::pack` writes, at every width and around the end.
    #[test]
    fn unpack_wide_matches_pack() {
        for bits in 9..=32u32 {
            for n in [0usize, 1, 7, 8, 9, 63, 64, 65, 1000] {
                let vals: Vec<u64> =
                    (0..n as u64).map(|i| (i * 2_654_435_761 + bits as u64) & ((1 << bits) - 1)).collect();
                let mut packed = Vec::new();
                crate::coder::pack(vals.iter().copied(), bits, &mut packed);
                let mut out = vec![0u32; n];
                unpack_wide(&packed, bits, &mut out);
                assert!(out.iter().zip(&vals).all(|(&a, &b)| a as u64 == b), "bits {bits} n {n}");
            }
        }
    }
}
