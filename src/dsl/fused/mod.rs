//! The fused float paths of the programs that code most 16-bit float tensors:
//! `fields(e,m,k)[H, S, L]` over 16-bit words, with `H` an entropy leaf (`lanes`, `huffman`,
//! `rans` without a reference or sibling context) and `S`, `L` raw, constant or such an entropy
//! leaf; `byteplanes[H, L]` the same; and a root entropy leaf over 16-bit words.
//!
//! - The writer ([`decode_into`]) decodes straight into the caller's buffer: the entropy
//!   leaves' symbols into per-thread buffers, then raw parts unpacked a block at a time (the
//!   block stays in L1) and merged with them into the output words.
//! - The reader ([`encode_from`]) codes straight from the chunk's little-endian bytes: the head
//!   symbols split into a per-thread buffer, raw parts extracted and packed a block at a time.
//!
//! No stream is allocated; everything else takes the interpreter ([`Node::decode`],
//! [`Node::encode_at`]), which writes and reads the same bytes.

use super::ops::entropy::check_range;
use super::ops::fields::Fields;
use super::{Node, Op, Ty};
use crate::coder::bitio::ByteReader;
use crate::coder::{self, huffman, packed_len, rans};
use crate::error::{Error, Result};
use crate::hash::Trail;
use crate::simd;
use std::cell::RefCell;

pub mod blocks;
mod word32;

/// Elements merged per block: the unpacked sign and low parts of a block (2 x 4 KiB) stay in L1.
const BLOCK: usize = 4096;

thread_local! {
    /// Decoded head symbols, output words when the caller's buffer is not 2-byte aligned, and the
    /// decoded symbols of entropy-coded sign and low parts.
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
}

/// Per-thread buffers of the fused writer (reused: the hot path allocates nothing).
struct Scratch {
    head: Vec<u16>,
    words: Vec<u16>,
    parts: [Vec<u16>; 2],
    /// The bytes of an LZ-coded part (`word32`).
    bytes: Vec<u8>,
    /// The table of a `dict` part (`word32`).
    table: Vec<u32>,
}

impl Scratch {
    const fn new() -> Scratch {
        Scratch {
            head: Vec::new(),
            words: Vec::new(),
            parts: [Vec::new(), Vec::new()],
            bytes: Vec::new(),
            table: Vec::new(),
        }
    }
}

/// Whether [`decode_into`] takes `p` over words of type `ty` (checked before any byte is read):
/// the 16-bit programs of [`applies`], and `fields` over 32-bit floats (`word32`).
pub fn decodes(p: &Node, ty: Ty) -> bool {
    applies(p, ty) || word32::applies(p, ty)
}

/// Whether [`encode_from`] (and [`decode_into`]) takes `p` over words of type `ty` (checked
/// before any byte is read): the 16-bit programs.
pub fn applies(p: &Node, ty: Ty) -> bool {
    if ty.bits != 16 {
        return false;
    }
    match &p.op {
        _ if head_leaf(p) => true,
        Op::Fields(f) => {
            p.children.len() == 3
                && f.exp + f.k <= 16
                && 1 + f.exp + f.mant == 16
                && head_leaf(&p.children[0])
                && part(&p.children[1])
                && part(&p.children[2])
        }
        Op::BytePlanes(_) => p.children.len() == 2 && head_leaf(&p.children[0]) && part(&p.children[1]),
        _ => false,
    }
}

/// A raw or constant leaf, or an entropy leaf of its own payload.
fn part(p: &Node) -> bool {
    matches!(p.op, Op::Raw(_) | Op::Const(_)) || head_leaf(p)
}

/// An entropy leaf whose symbols depend on its own payload only.
fn head_leaf(p: &Node) -> bool {
    match &p.op {
        Op::Lanes(_) | Op::Huffman(_) => true,
        Op::Rans(r) => r.own_ctx().is_some(),
        _ => false,
    }
}

/// Decodes the words of type `ty` that fill `out` with program `p` (for which [`decodes`] holds)
/// from the chunk payload `r`, little-endian into `out`.
/// With `trail`, the checksum blocks of `out` are summed while the writer is past them, in L1
/// (where it writes in order; the caller finishes the trail).
pub fn decode_into(p: &Node, ty: Ty, r: &mut ByteReader, out: &mut [u8], trail: Option<&mut Trail>) -> Result<()> {
    debug_assert!(decodes(p, ty));
    if ty.bits == 32 {
        return word32::decode_into(p, r, out, trail);
    }
    SCRATCH.with(|cell| {
        let Scratch { head, words, parts, .. } = &mut *cell.borrow_mut();
        match &p.op {
            // The merges write a block at a time, also where `out` is not 2-byte aligned.
            Op::Fields(f) => return merge_fields(f, &p.children, r, head, parts, out, trail),
            Op::BytePlanes(_) => return merge_planes(&p.children, 16, r, head, &mut parts[0], out, trail),
            _ => {}
        }
        let aligned = bytemuck::try_cast_slice_mut::<u8, u16>(out).is_ok();
        let n = out.len() / 2;
        if !aligned && words.len() < n {
            // Every word is written below: what is reused needs no clearing.
            words.resize(n, 0);
        }
        let dst: &mut [u16] = if aligned { bytemuck::cast_slice_mut(out) } else { &mut words[..n] };
        match &p.op {
            // A `lanes` root decodes straight into the output.
            Op::Lanes(l) => l.decode_into(ty, r.bytes()?, dst)?,
            _ => {
                leaf(p, ty, r.bytes()?, n, head)?;
                dst.copy_from_slice(head);
            }
        }
        if !aligned {
            out.copy_from_slice(bytemuck::cast_slice(&words[..n]));
        }
        Ok(())
    })
}

/// Writes words `start..start + b` of the little-endian words `out` with `f`: straight into
/// `out` where it is 2-byte aligned, else into `tmp` (a block in L1) and copied in.
fn put_words(out: &mut [u8], start: usize, b: usize, tmp: &mut [u16; BLOCK], f: impl FnOnce(&mut [u16])) {
    let bytes = &mut out[2 * start..2 * (start + b)];
    match bytemuck::try_cast_slice_mut::<u8, u16>(bytes) {
        Ok(words) => f(words),
        Err(_) => {
            f(&mut tmp[..b]);
            bytes.copy_from_slice(bytemuck::cast_slice(&tmp[..b]));
        }
    }
}

/// Decodes an entropy leaf's `n` symbols of type `ty` from `input` into `buf` (which then holds
/// exactly them).
fn leaf(p: &Node, ty: Ty, input: &[u8], n: usize, buf: &mut Vec<u16>) -> Result<()> {
    if let Op::Lanes(l) = &p.op {
        // The decoder writes every symbol: the buffer's stale contents need no clearing.
        buf.resize(n, 0);
        return l.decode_into(ty, input, buf);
    }
    buf.clear();
    let used = match &p.op {
        _ if n == 0 => 0,
        Op::Huffman(_) => huffman::decode(input, n, buf)?,
        Op::Rans(r) => {
            let ctx = r.own_ctx().ok_or_else(|| Error::corrupt("fused decode: not an entropy leaf"))?;
            rans::decode(input, n, ctx, buf)?
        }
        _ => return Err(Error::corrupt("fused decode: not an entropy leaf")),
    };
    if used != input.len() || buf.len() != n {
        return Err(Error::corrupt("entropy leaf: trailing bytes"));
    }
    check_range(ty, buf)
}

/// A part of a word: its packed bytes, its value, or its decoded symbols.
enum Part<'a> {
    Packed(&'a [u8]),
    Const(u16),
    Symbols(&'a [u16]),
}

impl<'a> Part<'a> {
    /// The part coded by `p` (values of `bits` bits), its symbols decoded into `buf` if `p` is an
    /// entropy leaf.
    fn read<'b: 'a>(p: &Node, bits: u32, n: usize, r: &mut ByteReader<'b>, buf: &'a mut Vec<u16>) -> Result<Part<'a>> {
        match &p.op {
            _ if head_leaf(p) => {
                leaf(p, Ty::u(bits), r.bytes()?, n, buf)?;
                Ok(Part::Symbols(&buf[..]))
            }
            Op::Raw(_) => {
                let b = r.bytes()?;
                if b.len() != packed_len(n, bits) {
                    return Err(Error::corrupt("raw leaf: wrong length"));
                }
                Ok(if bits == 0 { Part::Const(0) } else { Part::Packed(b) })
            }
            Op::Const(c) if c.value <= Ty::u(bits).mask() => Ok(Part::Const(c.value as u16)),
            Op::Const(_) => Err(Error::corrupt("const: value does not fit its type")),
            _ => Err(Error::corrupt("fused decode: not a raw or constant part")),
        }
    }

    /// Values `start..start + out.len()` (`start` a multiple of 8) of at most 8 bits into `out`.
    fn unpack(&self, bits: u32, start: usize, out: &mut [u8]) {
        match *self {
            Part::Const(v) => out.fill(v as u8),
            Part::Packed(b) => simd::unpack_u8(&b[start * bits as usize / 8..], bits, out),
            Part::Symbols(s) => {
                let s = &s[start..start + out.len()];
                for (o, &v) in out.iter_mut().zip(s) {
                    *o = v as u8;
                }
            }
        }
    }

    /// [`Part::unpack`] of values of at most 16 bits.
    fn unpack16(&self, bits: u32, start: usize, out: &mut [u16]) {
        match *self {
            Part::Const(v) => out.fill(v),
            Part::Packed(b) => simd::unpack_u16(&b[start * bits as usize / 8..], bits, out),
            Part::Symbols(s) => out.copy_from_slice(&s[start..start + out.len()]),
        }
    }
}

/// Decodes the head leaf `p` (`n` symbols of type `ty` from `input`) and hands its symbols to
/// `merge` with the index of the first: an in-order lanes leaf a few steps at a time, so that
/// they are merged into words while in L1; any other leaf all at once, through `buf`.
fn head_with(
    p: &Node,
    ty: Ty,
    input: &[u8],
    n: usize,
    buf: &mut Vec<u16>,
    mut merge: impl FnMut(usize, &[u16]) -> Result<()>,
) -> Result<()> {
    match &p.op {
        Op::Lanes(l) if l.in_order() => l.decode_with(ty, input, n, merge),
        _ => {
            leaf(p, ty, input, n, buf)?;
            merge(0, buf)
        }
    }
}

/// `fields(e,m,k)[head, sign, low]` into `out`.
fn merge_fields(
    f: &Fields,
    kids: &[Node],
    r: &mut ByteReader,
    head: &mut Vec<u16>,
    parts: &mut [Vec<u16>; 2],
    out: &mut [u8],
    mut trail: Option<&mut Trail>,
) -> Result<()> {
    let n = out.len() / 2;
    let lo = f.mant - f.k;
    let hty = Ty::u(f.exp + f.k);
    let hin = r.bytes()?;
    let [sbuf, lbuf] = parts;
    let sign = Part::read(&kids[1], 1, n, r, sbuf)?;
    let low = Part::read(&kids[2], lo, n, r, lbuf)?;
    let mut s = [0u8; BLOCK];
    let mut m8 = [0u8; BLOCK];
    let mut m16 = [0u16; BLOCK];
    let mut tmp = [0u16; BLOCK];
    head_with(&kids[0], hty, hin, n, head, |at, h| {
        for (j, h) in h.chunks(BLOCK).enumerate() {
            let (start, b) = (at + j * BLOCK, h.len());
            sign.unpack(1, start, &mut s[..b]);
            if lo <= 8 {
                low.unpack(lo, start, &mut m8[..b]);
                put_words(out, start, b, &mut tmp, |o| simd::merge_fields16(h, &s[..b], &m8[..b], lo, o));
            } else {
                // fp16 with k < 2: the low part takes 9 or 10 bits.
                low.unpack16(lo, start, &mut m16[..b]);
                put_words(out, start, b, &mut tmp, |o| {
                    for (((o, &h), &s), &m) in o.iter_mut().zip(h).zip(&s[..b]).zip(&m16[..b]) {
                        *o = (s as u16) << 15 | h << lo | m;
                    }
                });
            }
            if let Some(t) = trail.as_deref_mut() {
                t.advance(out, 2 * (start + b));
            }
        }
        Ok(())
    })
}

/// `byteplanes[high, low]` of words of `bits` bits (9..=16) into `out`: an entropy-coded high
/// byte and a raw, constant or entropy-coded low part of `bits - 8` bits (`head` and `buf` hold
/// their symbols).
fn merge_planes(
    kids: &[Node],
    bits: u32,
    r: &mut ByteReader,
    head: &mut Vec<u16>,
    buf: &mut Vec<u16>,
    out: &mut [u8],
    mut trail: Option<&mut Trail>,
) -> Result<()> {
    debug_assert!((9..=16).contains(&bits));
    let (n, sh) = (out.len() / 2, bits - 8);
    let hin = r.bytes()?;
    let low = Part::read(&kids[1], sh, n, r, buf)?;
    let mut m = [0u8; BLOCK];
    let mut tmp = [0u16; BLOCK];
    head_with(&kids[0], Ty::u(8), hin, n, head, |at, h| {
        for (j, h) in h.chunks(BLOCK).enumerate() {
            let (start, b) = (at + j * BLOCK, h.len());
            // Raw low bytes are the plane itself; other parts are unpacked a block at a time.
            let lo = match low {
                Part::Packed(p) if sh == 8 => &p[start..start + b],
                _ => {
                    low.unpack(sh, start, &mut m[..b]);
                    &m[..b]
                }
            };
            put_words(out, start, b, &mut tmp, |o| simd::merge_planes16(h, lo, sh, o));
            if let Some(t) = trail.as_deref_mut() {
                t.advance(out, 2 * (start + b));
            }
        }
        Ok(())
    })
}

/// Codes the little-endian 16-bit words `bytes` with `p` (for which [`applies`] holds over
/// `ty`), appending to `out` the payload that [`Node::encode_at`] appends; `Err(Invalid)` where
/// it fails (a constant part that does not hold, a leaf that cannot code its symbols).
pub fn encode_from(p: &Node, ty: Ty, bytes: &[u8], out: &mut Vec<u8>) -> Result<()> {
    debug_assert!(applies(p, ty));
    if !bytes.len().is_multiple_of(2) {
        return Err(Error::invalid("byte length is not a multiple of the word size"));
    }
    SCRATCH.with(|cell| {
        let Scratch { head, words, parts, .. } = &mut *cell.borrow_mut();
        // The words in place when the bytes are 2-byte aligned (on a little-endian machine),
        // else a copy.
        let words: &[u16] = match bytemuck::try_cast_slice::<u8, u16>(bytes) {
            Ok(w) if cfg!(target_endian = "little") => w,
            _ => {
                words.clear();
                words.extend(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])));
                words
            }
        };
        head.clear();
        let done = match &p.op {
            Op::Fields(f) => {
                let lo = f.mant - f.k;
                head.extend(words.iter().map(|&w| (w & 0x7FFF) >> lo));
                encode_leaf(&p.children[0], head, out)
                    .and_then(|_| encode_part(&p.children[1], words, 15, 1, &mut parts[0], out))
                    .and_then(|_| encode_part(&p.children[2], words, 0, lo, &mut parts[0], out))
            }
            Op::BytePlanes(_) => {
                head.extend(words.iter().map(|&w| w >> 8));
                encode_leaf(&p.children[0], head, out)
                    .and_then(|_| encode_part(&p.children[1], words, 0, 8, &mut parts[0], out))
            }
            _ => encode_leaf(p, words, out),
        };
        done.map_err(|e| match e {
            Error::Corrupt(m) => Error::Invalid(m),
            e => e,
        })
    })
}

/// Codes the symbols `x` with the entropy leaf `p`, length-prefixed as a child's payload.
fn encode_leaf(p: &Node, x: &[u16], out: &mut Vec<u8>) -> Result<()> {
    super::leaf_payload(out, 2 * x.len(), |o| {
        match &p.op {
            _ if x.is_empty() => {}
            Op::Lanes(l) => l.encode_symbols(x, o)?,
            Op::Huffman(_) => huffman::encode(x, o),
            Op::Rans(r) => {
                let ctx = r.own_ctx().ok_or_else(|| Error::invalid("fused encode: not an entropy leaf"))?;
                rans::encode(x, ctx, o)
            }
            _ => return Err(Error::invalid("fused encode: not an entropy leaf")),
        }
        Ok(())
    })
}

/// Codes bits `shift..shift + bits` of `words` with `p` (raw, constant or an entropy leaf;
/// `buf` holds an entropy leaf's symbols).
fn encode_part(p: &Node, words: &[u16], shift: u32, bits: u32, buf: &mut Vec<u16>, out: &mut Vec<u8>) -> Result<()> {
    let mask = ((1u32 << bits) - 1) as u16;
    let field = move |w: &u16| (w >> shift) & mask;
    match &p.op {
        Op::Raw(_) => super::leaf_payload(out, words.len(), |o| {
            // A block of fields at a time (in L1), packed as `raw` packs its stream (which
            // takes no bytes for fields of 0 bits).
            if bits == 0 {
            } else if bits <= 8 {
                let mut block = [0u8; BLOCK];
                for c in words.chunks(BLOCK) {
                    let b = &mut block[..c.len()];
                    for (v, w) in b.iter_mut().zip(c) {
                        *v = field(w) as u8;
                    }
                    if bits == 8 {
                        o.extend_from_slice(b);
                    } else {
                        coder::pack_u8(b, bits, o);
                    }
                }
            } else {
                let mut block = [0u16; BLOCK];
                for c in words.chunks(BLOCK) {
                    let b = &mut block[..c.len()];
                    for (v, w) in b.iter_mut().zip(c) {
                        *v = field(w);
                    }
                    coder::pack_u16(b, bits, o);
                }
            }
            Ok(())
        }),
        Op::Const(c) => {
            // An OR of the differences over every word (no early exit), so the loop vectorizes.
            if words.iter().fold(0u64, |a, w| a | (field(w) as u64 ^ c.value)) != 0 {
                return Err(Error::invalid("program does not apply to this data"));
            }
            Ok(())
        }
        _ if head_leaf(p) => {
            buf.clear();
            buf.extend(words.iter().map(field));
            encode_leaf(p, buf, out)
        }
        _ => Err(Error::invalid("fused encode: not a raw or constant part")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsl::build::*;
    use crate::dsl::{Env, Stream};

    /// 16-bit floats around `scale` (bf16 or fp16 bit patterns), with a few specials.
    fn floats(n: usize, bf16: bool, seed: u64) -> Stream {
        let mut s = seed;
        Stream::from_fn(Ty::u(16), n, |i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.1 * (1.0 + (i % 7) as f64);
            let w = if bf16 { half::bf16::from_f64(x).to_bits() } else { half::f16::from_f64(x).to_bits() };
            match i % 97 {
                5 => 0x7FC1,
                6 => 0x8000,
                _ => w as u64,
            }
        })
    }

    /// The fused path gives what the interpreter gives, for every head leaf, raw and constant
    /// parts, every low-part width, odd lengths, and aligned and misaligned output buffers.
    #[test]
    fn fused_decode_equals_the_interpreter() {
        let heads = [
            lanes(),
            lanes_prev(),
            lanes_back(64),
            lanes_back(2080),
            lanes_adj(),
            huffman(),
            rans(),
            rans_prev(),
            rans_back(48),
        ];
        let no_copy = |_: u32| -> Result<Stream> { Err(Error::corrupt("no copy")) };
        let env = Env::new(0, &no_copy);
        let mut checked = 0;
        // The last: split `lanes` blocks (only their heads, at one width).
        let split = crate::coder::lanes::SPLIT_MIN + crate::coder::lanes::SEGMENT + 3;
        let sizes =
            [(1usize, true), (7, false), (8, true), (1000, true), (4096 + 13, false), (20000, true), (split, true)];
        for (n, bf16) in sizes {
            let x = floats(n, bf16, n as u64);
            let (e, m) = if bf16 { (8, 7) } else { (5, 10) };
            for k in [0u32, 1, 2, 3, 7] {
                for head in &heads {
                    if n == split && (k != 3 || !matches!(head.op, Op::Lanes(l) if l.split)) {
                        continue;
                    }
                    let mut programs = vec![
                        fields(e, m, k, [head.clone(), raw(), raw()]),
                        head.clone(),
                        byteplanes(vec![head.clone(), raw()]),
                    ];
                    // Constant parts, where the data has them.
                    let pos = Stream::from_fn(Ty::u(16), n, |i| x.get(i) & 0x7FFF);
                    programs.push(fields(e, m, k, [head.clone(), konst(0), raw()]));
                    // Entropy-coded sign and low parts.
                    programs.push(fields(e, m, k, [head.clone(), head.clone(), raw()]));
                    programs.push(fields(e, m, k, [head.clone(), raw(), head.clone()]));
                    programs.push(byteplanes(vec![head.clone(), head.clone()]));
                    for p in programs {
                        for data in [&x, &pos] {
                            let mut payload = Vec::new();
                            if p.encode(data, &[], &mut payload).is_err() {
                                continue;
                            }
                            assert!(applies(&p, Ty::u(16)), "{p}");
                            let want = p.decode(Ty::u(16), n, &mut ByteReader::new(&payload), &[], &env).unwrap();
                            let want = want.to_le_bytes();
                            let mut buf = vec![0u8; 2 * n + 1];
                            for off in [0usize, 1] {
                                let out = &mut buf[off..off + 2 * n];
                                let mut r = ByteReader::new(&payload);
                                let (start, len) = (1000 + off, 1000 + off + 2 * n + 3000);
                                let mut sums = vec![[0u64; 8]; crate::hash::blocks_in(start, start + 2 * n, len).len()];
                                let mut trail = Trail::new(start, 2 * n, len, &mut sums);
                                decode_into(&p, Ty::u(16), &mut r, out, Some(&mut trail)).unwrap();
                                assert!(r.is_empty());
                                assert_eq!(out, &want[..], "{p} n {n} offset {off}");
                                trail.finish(out);
                                let mut want_sums = vec![[0u64; 8]; sums.len()];
                                crate::hash::piece_sums(out, start, len, &mut want_sums);
                                assert!(sums == want_sums, "{p} n {n} offset {off}: checksum blocks");
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        // Every head, most widths and both part kinds were compared (not skipped as inapplicable).
        assert!(checked >= 500, "{checked} cases");
    }

    /// The fused reader writes the interpreter's payload, or fails where it fails, for every
    /// head leaf, raw, constant and entropy-coded parts, every low-part width and odd lengths.
    #[test]
    fn fused_encode_equals_the_interpreter() {
        let heads = [lanes(), lanes_prev(), lanes_adj(), lanes_back(64), huffman(), rans(), rans_prev(), rans_back(48)];
        let (mut same, mut failed) = (0, 0);
        for (n, bf16) in
            [(0usize, true), (1, true), (7, false), (8, true), (1000, true), (4096 + 13, false), (20000, true)]
        {
            let x = floats(n, bf16, n as u64 + 5);
            let pos = Stream::from_fn(Ty::u(16), n, |i| x.get(i) & 0x7FFF);
            let (e, m) = if bf16 { (8, 7) } else { (5, 10) };
            for k in [0u32, 1, 2, 3, 7] {
                for head in &heads {
                    for p in [
                        fields(e, m, k, [head.clone(), raw(), raw()]),
                        head.clone(),
                        byteplanes(vec![head.clone(), raw()]),
                        fields(e, m, k, [head.clone(), konst(0), raw()]),
                        fields(e, m, k, [head.clone(), head.clone(), konst(1)]),
                        fields(e, m, k, [head.clone(), raw(), head.clone()]),
                        byteplanes(vec![head.clone(), head.clone()]),
                        byteplanes(vec![head.clone(), konst(0)]),
                    ] {
                        for data in [&x, &pos] {
                            assert!(applies(&p, Ty::u(16)), "{p}");
                            let mut want = vec![1u8, 2];
                            let want = p.encode_at(data, &[], None, 0, &mut want).map(|_| want);
                            // From 2-byte aligned bytes (the words in place) and from
                            // misaligned ones (a copy).
                            let mut shifted = vec![0u8];
                            shifted.extend(data.to_le_bytes());
                            let mut again = vec![1u8, 2];
                            let again = encode_from(&p, Ty::u(16), &shifted[1..], &mut again).map(|_| again);
                            let mut got = vec![1u8, 2];
                            let got = encode_from(&p, Ty::u(16), &data.to_le_bytes(), &mut got).map(|_| got);
                            assert_eq!(again.as_ref().ok(), got.as_ref().ok(), "{p} n {n}, misaligned");
                            match (want, got) {
                                (Ok(w), Ok(g)) => {
                                    assert!(w == g, "{p} n {n}");
                                    same += 1;
                                }
                                (Err(Error::Invalid(_)), Err(Error::Invalid(_))) => failed += 1,
                                (w, g) => {
                                    panic!("{p} n {n}: {:?} against {:?}", w.map(|v| v.len()), g.map(|v| v.len()))
                                }
                            }
                        }
                    }
                }
            }
        }
        // Most cases code, and the constant parts that do not hold fail both ways.
        assert!(same >= 1000 && failed >= 100, "{same} coded, {failed} failed");
    }

    /// Damaged payloads are errors or the right length, never a panic.
    #[test]
    fn damaged_payloads_never_panic() {
        let x = floats(3000, true, 1);
        for p in [fields(8, 7, 3, [lanes(), raw(), raw()]), fields(8, 7, 2, [huffman(), raw(), konst(1)])] {
            let mut payload = Vec::new();
            if p.encode(&x, &[], &mut payload).is_err() {
                continue;
            }
            let mut out = vec![0u8; 6000];
            for cut in 0..payload.len() {
                let mut r = ByteReader::new(&payload[..cut]);
                let _ = decode_into(&p, Ty::u(16), &mut r, &mut out, None);
            }
            for i in (0..payload.len() * 8).step_by(7) {
                let mut bad = payload.clone();
                bad[i / 8] ^= 1 << (i % 8);
                let mut r = ByteReader::new(&bad);
                let _ = decode_into(&p, Ty::u(16), &mut r, &mut out, None);
            }
        }
    }
}
