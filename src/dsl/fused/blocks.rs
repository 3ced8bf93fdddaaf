//! The fused writer of GGUF blocks: a `blocks(t)` or `blocks(t, packed)` root whose last field
//! (the quants, or the bytes that pack them) is coded by an in-order `lanes` leaf, or by a
//! `palette(g)` whose indices are.
//!
//! The other fields (scales, counts, gaps: a few values per block) are decoded as streams by
//! the interpreter. The last field, one value per quant, is not: its symbols are decoded a
//! `lanes` segment at a time ([`SEGMENT`] symbols, whole blocks) into L1, the palette's values
//! rebuilt from them there, and the segment's blocks completed in the caller's buffer at once
//! ([`Blocks::inverse_into_with`]). The interpreter would write the indices, then the values,
//! as streams of a byte per quant, and read each back.

use crate::coder::bitio::ByteReader;
use crate::coder::lanes::SEGMENT;
use crate::dsl::ops::blocks::{Blocks, Values};
use crate::dsl::ops::lanes::Lanes;
use crate::dsl::ops::palette::Palette;
use crate::dsl::{Data, Env, Node, Op, Ty};
use crate::error::{Error, Result};
use crate::simd::{self, PaletteParts, PaletteWord};

/// Whether [`decode_into`] takes the program `p`, a `blocks` root with operator `b`: its last
/// child an in-order `lanes` leaf or a palette of one, with the field's values per block and
/// the palette's group dividing a segment (so that every segment holds whole blocks and groups).
pub fn applies(b: &Blocks, p: &Node) -> bool {
    let (Some(last), Some(&m)) = (p.children.last(), b.field_counts().last()) else {
        return false;
    };
    let in_order = |n: &Node| matches!(&n.op, Op::Lanes(l) if l.in_order());
    m > 0
        && SEGMENT.is_multiple_of(m)
        && p.children.len() == b.field_counts().len() + 1
        && match &last.op {
            Op::Lanes(l) => l.in_order(),
            Op::Palette(pal) => {
                SEGMENT.is_multiple_of(pal.group as usize) && last.children.get(3).is_some_and(in_order)
            }
            _ => false,
        }
}

/// Decodes a program for which [`applies`] holds into `out` (the chunk's bytes).
pub fn decode_into(b: &Blocks, p: &Node, ty: Ty, r: &mut ByteReader, env: &Env, out: &mut [u8]) -> Result<()> {
    let tys = b.child_types(ty)?;
    let lens = b.child_lens(out.len(), env.elem_offset);
    let k = p.children.len();
    if tys.len() != k || lens.len() != k {
        return Err(Error::corrupt("program arity does not match the operator"));
    }
    let parts = Node::decode_each(&p.children[..k - 1], &tys, &lens, r, env)?;
    let (last, ty, n) = (&p.children[k - 1], tys[k - 1], lens[k - 1]);
    b.inverse_into_with(env.elem_offset, &parts, out, |sink| match &last.op {
        Op::Lanes(l) if ty.bits <= 8 => {
            let mut bytes = [0u8; SEGMENT];
            l.decode_with(ty, r.bytes()?, n, |start, seg| sink(start, Values::U8(narrow(seg, &mut bytes))))
        }
        Op::Lanes(l) => l.decode_with(ty, r.bytes()?, n, |start, seg| sink(start, Values::U16(seg))),
        Op::Palette(pal) => palette_segments(pal, last, ty, n, r, env, sink),
        _ => Err(Error::invalid("fused blocks: not a program it takes")),
    })
}

/// Symbols of at most 8 bits (checked by the leaf) as bytes, in `buf`.
fn narrow<'b>(seg: &[u16], buf: &'b mut [u8; SEGMENT]) -> &'b [u8] {
    let out = &mut buf[..seg.len()];
    for (d, &s) in out.iter_mut().zip(seg) {
        *d = s as u8;
    }
    out
}

/// The `palette(g)` node `node` over the field's `n` values of type `ty`: its counts, smallest
/// words and gaps decoded as streams, then its indices (an in-order `lanes` leaf) a segment at
/// a time, each turned into its values and handed to `sink`. As [`Palette::inverse`] (the same
/// checks: the counts use up the gaps exactly, every index is below its group's count).
fn palette_segments(
    pal: &Palette,
    node: &Node,
    ty: Ty,
    n: usize,
    r: &mut ByteReader,
    env: &Env,
    sink: &mut dyn FnMut(usize, Values) -> Result<()>,
) -> Result<()> {
    let [(ct, cn), (lt, ln), (gt, gn), (it, inn)] = pal.read_header(ty, n, r)?;
    let (Some(Op::Lanes(leaf)), true) = (node.children.get(3).map(|c| &c.op), node.children.len() == 4) else {
        return Err(Error::invalid("fused blocks: not a palette of a lanes leaf"));
    };
    let parts = Node::decode_each(&node.children[..3], &[ct, lt, gt], &[cn, ln, gn], r, env)?;
    let [count, low, gaps] = &parts[..] else {
        return Err(Error::corrupt("palette: four parts expected"));
    };
    if low.ty != ty || gaps.ty != ty || inn != n {
        return Err(Error::corrupt("palette: parts of the wrong shape"));
    }
    let Data::U8(count) = &count.data else {
        return Err(Error::corrupt("palette: counts or indices wider than a byte"));
    };
    let input = r.bytes()?;
    let g = pal.group as usize;
    match (&low.data, &gaps.data) {
        (Data::U8(low), Data::U8(gaps)) => {
            let p = Groups { count, low, gaps, g, mask: ty.mask() as u8 };
            p.decode(leaf, it, input, n, sink, |v| Values::U8(v))
        }
        (Data::U16(low), Data::U16(gaps)) => {
            let p = Groups { count, low, gaps, g, mask: ty.mask() as u16 };
            p.decode(leaf, it, input, n, sink, |v| Values::U16(v))
        }
        _ => Err(Error::corrupt("palette: parts of the wrong shape")),
    }
}

/// A palette's groups (counts, smallest words, gaps), whose indices come a segment at a time.
struct Groups<'a, T> {
    count: &'a [u8],
    low: &'a [T],
    gaps: &'a [T],
    g: usize,
    mask: T,
}

impl<T: PaletteWord> Groups<'_, T> {
    /// Decodes the `n` indices (type `it`, coded by `leaf` in `input`) a segment at a time, each
    /// turned into its words in L1 and handed to `sink` (through `wrap`).
    fn decode(
        &self,
        leaf: &Lanes,
        it: Ty,
        input: &[u8],
        n: usize,
        sink: &mut dyn FnMut(usize, Values) -> Result<()>,
        wrap: impl for<'v> Fn(&'v [T]) -> Values<'v>,
    ) -> Result<()> {
        let bad = || Error::corrupt("palette: counts, gaps and indices do not match");
        if self.count.len() != n.div_ceil(self.g) || self.low.len() != self.count.len() {
            return Err(Error::corrupt("palette: parts of the wrong shape"));
        }
        let (mut index, mut words) = ([0u8; SEGMENT], [T::default(); SEGMENT]);
        // The first gap of the segment's first group.
        let mut at = 0;
        leaf.decode_with(it, input, n, |start, seg| {
            // `start` is a multiple of the segment, and so of the group.
            let groups = start / self.g..(start + seg.len()).div_ceil(self.g);
            let count = &self.count[groups.clone()];
            let used = count.iter().map(|&c| c as usize).sum::<usize>();
            let gaps = self.gaps.get(at..at + used).ok_or_else(bad)?;
            at += used;
            let p = PaletteParts {
                count,
                low: &self.low[groups],
                gaps,
                index: narrow(seg, &mut index),
                g: self.g,
                mask: self.mask,
            };
            let words = &mut words[..seg.len()];
            if !simd::palette(&p, words) {
                return Err(bad());
            }
            sink(start, wrap(words))
        })?;
        if at != self.gaps.len() {
            return Err(bad());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsl::build::*;
    use crate::dsl::Stream;

    /// Quantization blocks of `b` bytes: each block's bytes drawn from a few values (so that
    /// palettes and contexts have something to take), from `seed`.
    fn blocks_bytes(b: usize, k: usize, extra: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut v = Vec::with_capacity(k * b + extra);
        for _ in 0..k {
            let spread = 1 + next() % 48;
            v.extend((0..b).map(|_| (next() % spread) as u8));
        }
        v.extend((0..extra).map(|_| next() as u8));
        v
    }

    fn no_copy(_: u32) -> Result<Stream> {
        Err(Error::invalid("no copy"))
    }

    /// The interpreter's bytes and the fused writer's, or their errors.
    fn both(p: &Node, payload: &[u8], n: usize, off: u64) -> (Result<Vec<u8>>, Result<Vec<u8>>) {
        let env = Env::new(off, &no_copy);
        let mut r = ByteReader::new(payload);
        let slow = p.decode(Ty::u(8), n, &mut r, &[], &env).and_then(|s| match (s.data, r.is_empty()) {
            (Data::U8(v), true) => Ok(v),
            _ => Err(Error::corrupt("left over")),
        });
        let Op::Blocks(b) = &p.op else { panic!("a blocks program") };
        let mut out = vec![0xA5u8; n];
        let mut r = ByteReader::new(payload);
        let fast = decode_into(b, p, Ty::u(8), &mut r, &env, &mut out).and_then(|()| {
            if r.is_empty() {
                Ok(out)
            } else {
                Err(Error::corrupt("left over"))
            }
        });
        (slow, fast)
    }

    /// Programs the fused writer takes, over blocks of every kind of last field: 4-, 5-, 6- and
    /// 8-bit quants, packed quant bytes, and 16-bit values (Q8_K's sums), each coded by `lanes`
    /// or by a palette of `lanes` indices.
    fn programs() -> Vec<Node> {
        let packed = |id, kids| Node::new(Op::Blocks(Blocks::packed(id).unwrap()), kids);
        vec![
            blocks(6, vec![raw(), huffman(), palette(32, huffman(), raw(), lanes_adj(), lanes())]),
            blocks(6, vec![raw(), lanes_adj(), lanes_prev()]),
            blocks(2, vec![raw(), rans_prev(), palette(32, raw(), rans(), lanes(), lanes_prev())]),
            blocks(8, vec![raw(), huffman(), lanes()]),
            blocks(14, vec![raw(), raw(), lanes(), palette(16, lanes(), lanes(), lanes_adj(), lanes())]),
            blocks(15, vec![raw(), raw(), lanes(), palette(16, raw(), raw(), raw(), lanes())]),
            blocks(15, vec![raw(), raw(), huffman(), lanes_prev()]),
            packed(12, vec![raw(), raw(), raw(), raw(), raw(), lanes()]),
        ]
    }

    /// Every program above, at chunk offsets inside a block, over a few blocks, several
    /// segments, and enough values for split `lanes` blocks: the fused writer's bytes are the
    /// interpreter's and the original's.
    #[test]
    fn writes_what_the_interpreter_does() {
        for p in programs() {
            let Op::Blocks(b) = &p.op else { unreachable!() };
            assert!(applies(b, &p), "{p}");
            let bb = b.block_bytes();
            let m = *b.field_counts().last().unwrap();
            // Blocks for 2^18 values of the last field (a split block), and one more segment.
            let big = (crate::coder::lanes::SPLIT_MIN + SEGMENT) / m + 3;
            for (k, off) in [(0, 0), (1, 0), (3, 5), (SEGMENT / m + 1, bb as u64 - 1), (5 * SEGMENT / m, 7), (big, 1)] {
                let x = blocks_bytes(bb, k, 11, (k * 31 + off as usize) as u64);
                let n = x.len();
                let mut payload = Vec::new();
                p.encode_at(&Stream { ty: Ty::u(8), data: Data::U8(x.clone()) }, &[], None, off, &mut payload).unwrap();
                let (slow, fast) = both(&p, &payload, n, off);
                assert!(slow.unwrap() == x, "{p}: interpreter, {k} blocks at {off}");
                assert!(fast.unwrap() == x, "{p}: fused writer, {k} blocks at {off}");
            }
        }
    }

    /// Damaged payloads (bytes changed, cut short): the fused writer fails where the
    /// interpreter does, and writes its bytes where it does not.
    #[test]
    fn damage_is_an_error_where_the_interpreter_finds_one() {
        for p in programs() {
            let Op::Blocks(b) = &p.op else { unreachable!() };
            let bb = b.block_bytes();
            let k = 3 * SEGMENT / b.field_counts().last().unwrap() + 2;
            let x = blocks_bytes(bb, k, 3, 77);
            let mut payload = Vec::new();
            p.encode_at(&Stream { ty: Ty::u(8), data: Data::U8(x.clone()) }, &[], None, 2, &mut payload).unwrap();
            let mut s = 0x2545_F491_4F6C_DD1Du64;
            for t in 0..300 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let mut bad = payload.clone();
                if t % 10 == 0 {
                    bad.truncate((s as usize) % payload.len());
                } else {
                    let at = (s as usize) % bad.len();
                    bad[at] ^= 1 << (s >> 61);
                }
                let (slow, fast) = both(&p, &bad, x.len(), 2);
                match (slow, fast) {
                    (Ok(a), Ok(c)) => assert!(a == c, "{p}: both decode, to different bytes"),
                    (Err(_), Err(_)) => {}
                    (a, c) => panic!("{p}: interpreter {:?}, fused writer {:?}", a.err(), c.err()),
                }
            }
        }
    }

    /// Programs it does not take: a last field coded otherwise, palettes whose indices are
    /// not an in-order `lanes` leaf or whose group does not divide a segment.
    #[test]
    fn takes_only_lanes_and_palettes_of_lanes() {
        for p in [
            blocks(6, vec![raw(), huffman(), huffman()]),
            blocks(6, vec![raw(), huffman(), palette(32, raw(), raw(), raw(), lanes_adj())]),
            blocks(6, vec![raw(), huffman(), palette(24, raw(), raw(), raw(), lanes())]),
            blocks(6, vec![raw(), huffman(), palette(32, raw(), raw(), raw(), huffman())]),
        ] {
            let Op::Blocks(b) = &p.op else { unreachable!() };
            assert!(!applies(b, &p), "{p}");
        }
    }
}
