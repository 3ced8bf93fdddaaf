//! XXH3-64, the checksum of chunks and of whole files: bit for bit what
//! `xxhash_rust::xxh3::xxh3_64` computes (the tests compare the two), with the long-input loop run
//! by the CPU's best kernel and, over long inputs, spread across threads.
//!
//! Why not xxhash-rust alone: it picks its SIMD kernel when it is compiled (SSE2 in a default
//! x86-64 build), and its XXH3 is one sequential loop, so the whole-file checksum was a serial
//! pass after a parallel decode. No crate exposes what makes XXH3 parallel: its long loop is, per
//! 1 KiB block, "add the block's sixteen stripe terms to the eight accumulators, then scramble
//! them", and the terms depend on the data alone. Threads compute the sums of many blocks at
//! once ([`block_sums`]); one cheap pass adds and scrambles them in order ([`fold`]).
//! Inputs of at most 240 bytes take xxhash-rust's short paths unchanged.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use crate::error::Result;
use crate::simd::Isa;
use crate::source::Bytes;
use rayon::prelude::*;

/// The eight 64-bit accumulators.
type Acc = [u64; 8];

const STRIPE: usize = 64;
/// Sixteen stripes; the secret advances by 8 bytes per stripe.
const BLOCK: usize = 1024;
const STRIPES_PER_BLOCK: usize = BLOCK / STRIPE;
/// Longer inputs take the long loop.
const MID_MAX: usize = 240;

/// XXH3's default secret.
const SECRET: [u8; 192] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, 0x6d,
    0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0,
    0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0,
    0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b,
    0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac,
    0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51,
    0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34,
    0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49,
    0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8,
    0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b,
    0x40, 0x7e,
];

const PRIME32_1: u64 = 0x9E37_79B1;
const PRIME32_2: u64 = 0x85EB_CA77;
const PRIME32_3: u64 = 0xC2B2_AE3D;
const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME64_4: u64 = 0x85EB_CA77_C2B2_AE63;
const PRIME64_5: u64 = 0x27D4_EB2F_1656_67C5;

const INIT: Acc = [PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1];

fn read64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// XXH3-64 of `data` (one thread).
pub fn xxh3_64(data: &[u8]) -> u64 {
    xxh3_64_at(crate::simd::isa(), data)
}

/// [`xxh3_64`] with the block kernel of `level` (lowered to what the CPU has).
pub fn xxh3_64_at(isa: Isa, data: &[u8]) -> u64 {
    if data.len() <= MID_MAX {
        return xxhash_rust::xxh3::xxh3_64(data);
    }
    let full = (data.len() - 1) / BLOCK;
    let mut acc = INIT;
    let mut sums = [[0u64; 8]; 32];
    for group in data[..full * BLOCK].chunks(sums.len() * BLOCK) {
        let sums = &mut sums[..group.len() / BLOCK];
        block_sums(isa, group, sums);
        fold(&mut acc, sums);
    }
    finish(acc, &data[full * BLOCK..], &data[data.len() - STRIPE..], data.len())
}

/// XXH3-64 of `bytes`, read in windows of about `window` bytes that threads hash at once (a
/// few windows per thread in flight).
pub fn xxh3_64_of(bytes: &Bytes, window: usize) -> Result<u64> {
    let len = bytes.len();
    if len <= MID_MAX {
        return Ok(xxhash_rust::xxh3::xxh3_64(&bytes.read_all()?));
    }
    let isa = crate::simd::isa();
    let full = block_count(len);
    let step = window.max(BLOCK) / BLOCK * BLOCK;
    let starts: Vec<usize> = (0..full * BLOCK).step_by(step).collect();
    let mut folder = Folder::new(len);
    for group in starts.chunks(4 * rayon::current_num_threads()) {
        let sums = group
            .par_iter()
            .map(|&a| {
                let b = (a + step).min(full * BLOCK);
                let mut s = vec![[0u64; 8]; (b - a) / BLOCK];
                bytes.with_read(a, b, |w| block_sums(isa, w, &mut s))?;
                Ok(s)
            })
            .collect::<Result<Vec<_>>>()?;
        for (&a, s) in group.iter().zip(&sums) {
            folder.fold(a / BLOCK, s, bytes)?;
        }
    }
    folder.finish(bytes)
}

/// The sum of one block's stripe terms (see the module's doc).
pub type BlockSum = [u64; 8];

/// The long loop's blocks that lie wholly within bytes `[a, b)` of an input of `len` bytes (those
/// whose sums a piece of the input can give on its own, [`piece_sums`]).
pub fn blocks_in(a: usize, b: usize, len: usize) -> std::ops::Range<usize> {
    if len <= MID_MAX {
        return 0..0;
    }
    let full = (len - 1) / BLOCK;
    let s = a.div_ceil(BLOCK).min(full);
    s..(b / BLOCK).min(full).max(s)
}

/// [`piece_sums`] taken while the piece is written, in order, by its writer: each block is summed
/// as soon as the writer is past its end, while it is still in L1 ([`Trail::advance`]), and what
/// is left once the piece is complete ([`Trail::finish`]).
pub struct Trail<'s> {
    /// Offset in the piece of its first whole block.
    first: usize,
    /// The sums of the piece's whole blocks, in order.
    sums: &'s mut [BlockSum],
    /// Blocks summed so far.
    done: usize,
    isa: Isa,
}

impl<'s> Trail<'s> {
    /// The trail of the piece of the input's bytes from `start` (`piece_len` of them, of an input
    /// of `len` bytes), whose block sums go to `sums` (as [`piece_sums`]'s `out`).
    pub fn new(start: usize, piece_len: usize, len: usize, sums: &'s mut [BlockSum]) -> Trail<'s> {
        let r = blocks_in(start, start + piece_len, len);
        assert_eq!(sums.len(), r.len());
        Trail { first: (r.start * BLOCK).saturating_sub(start), sums, done: 0, isa: crate::simd::isa() }
    }

    /// The piece's first `written` bytes are final: sums the whole blocks within them not summed yet.
    #[inline]
    pub fn advance(&mut self, piece: &[u8], written: usize) {
        let ready = (written.saturating_sub(self.first) / BLOCK).min(self.sums.len());
        if ready > self.done {
            let (a, b) = (self.first + self.done * BLOCK, self.first + ready * BLOCK);
            block_sums(self.isa, &piece[a..b], &mut self.sums[self.done..ready]);
            self.done = ready;
        }
    }

    /// The piece is complete: sums the blocks not summed yet.
    pub fn finish(&mut self, piece: &[u8]) {
        self.advance(piece, piece.len());
    }
}

/// A contiguous piece of the input as [`InOrder`] takes it: its bytes are `head`, then the blocks
/// whose sums are `sums`, then `tail` (where `sums` is not empty, `head` ends on a block boundary
/// and `sums` are the blocks `blocks_in` gives for the piece: [`InOrder::split`]).
#[derive(Clone, Copy)]
pub struct Piece<'a> {
    /// The bytes before the first whole block (all of them where `sums` is empty).
    pub head: &'a [u8],
    /// The sums of the piece's whole blocks.
    pub sums: &'a [BlockSum],
    /// The bytes after the last whole block.
    pub tail: &'a [u8],
}

/// A piece held until the pieces before it are given.
enum Held<'r> {
    Borrowed(&'r [u8]),
    Owned { head: Vec<u8>, sums: Vec<BlockSum>, tail: Vec<u8> },
}

/// The long loop of an input of `len` bytes folded from its pieces while they are still being
/// made, given in any order: each piece is folded as soon as every piece before it was, so the
/// fold runs alongside a parallel decode rather than after it. The bytes of blocks that straddle
/// pieces come from the pieces' heads and tails.
pub struct InOrder<'r> {
    acc: Acc,
    len: usize,
    full: usize,
    /// Blocks folded: bytes before `next * BLOCK` are folded, and `partial` holds the bytes of
    /// block `next` given so far.
    next: usize,
    partial: Vec<u8>,
    /// The next piece to fold.
    at: usize,
    pieces: usize,
    held: std::collections::BTreeMap<usize, Held<'r>>,
    isa: Isa,
}

impl<'r> InOrder<'r> {
    /// A fold of the input of `len` bytes made of `pieces` pieces.
    pub fn new(len: usize, pieces: usize) -> InOrder<'r> {
        InOrder {
            acc: INIT,
            len,
            full: block_count(len),
            next: 0,
            partial: Vec::with_capacity(BLOCK),
            at: 0,
            pieces,
            held: Default::default(),
            isa: crate::simd::isa(),
        }
    }

    /// Splits the bytes of the piece from `start` into what lies before and after the blocks
    /// whose sums it gives (`blocks_in(start, start + piece.len(), len)`).
    pub fn split(piece: &[u8], start: usize, len: usize) -> (&[u8], &[u8]) {
        let r = blocks_in(start, start + piece.len(), len);
        if r.is_empty() {
            return (piece, &[]);
        }
        (&piece[..r.start * BLOCK - start], &piece[r.end * BLOCK - start..])
    }

    /// Piece `i` (in input order), borrowed for as long as the fold: held, not copied, until the
    /// pieces before it are given.
    pub fn give_bytes(&mut self, i: usize, bytes: &'r [u8]) {
        if i == self.at {
            self.take(Piece { head: bytes, sums: &[], tail: &[] });
        } else {
            self.held.insert(i, Held::Borrowed(bytes));
        }
    }

    /// Piece `i` (in input order): folded now if every piece before it was, else copied and held.
    pub fn give(&mut self, i: usize, p: Piece) {
        if i == self.at {
            self.take(p);
        } else {
            let (head, sums, tail) = (p.head.to_vec(), p.sums.to_vec(), p.tail.to_vec());
            self.held.insert(i, Held::Owned { head, sums, tail });
        }
    }

    /// Folds piece `at`, then the held pieces that follow it.
    fn take(&mut self, p: Piece) {
        self.fold_piece(p);
        self.at += 1;
        while let Some(h) = self.held.remove(&self.at) {
            match &h {
                Held::Borrowed(b) => self.fold_piece(Piece { head: b, sums: &[], tail: &[] }),
                Held::Owned { head, sums, tail } => self.fold_piece(Piece { head, sums, tail }),
            }
            self.at += 1;
        }
    }

    fn fold_piece(&mut self, p: Piece) {
        self.feed(p.head);
        if !p.sums.is_empty() {
            debug_assert!(self.partial.is_empty() && self.next + p.sums.len() <= self.full);
            fold(&mut self.acc, p.sums);
            self.next += p.sums.len();
        }
        self.feed(p.tail);
    }

    /// Folds the blocks that `bytes`, the input's next bytes, complete.
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.next < self.full {
            if self.partial.is_empty() && bytes.len() >= BLOCK {
                let k = (bytes.len() / BLOCK).min(self.full - self.next).min(64);
                let mut s = [[0u64; 8]; 64];
                block_sums(self.isa, &bytes[..k * BLOCK], &mut s[..k]);
                fold(&mut self.acc, &s[..k]);
                self.next += k;
                bytes = &bytes[k * BLOCK..];
                continue;
            }
            let n = (BLOCK - self.partial.len()).min(bytes.len());
            self.partial.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.partial.len() == BLOCK {
                let mut s = [[0u64; 8]];
                block_sums(self.isa, &self.partial, &mut s);
                fold(&mut self.acc, &s);
                self.next += 1;
                self.partial.clear();
            }
        }
    }

    /// [`InOrder::hash`] of an input read through `input` (a file, say): only its last
    /// bytes are read.
    pub fn hash_of(self, input: &Bytes) -> Result<Option<u64>> {
        if input.len() != self.len || self.at != self.pieces || self.next != self.full {
            return Ok(None);
        }
        if self.len <= MID_MAX {
            return xxh3_64_of(input, 1 << 20).map(Some);
        }
        finish_of(self.acc, input, self.len).map(Some)
    }

    /// XXH3-64 of `input` (the whole input, every piece given); None if a piece is missing.
    pub fn hash(self, input: &[u8]) -> Option<u64> {
        // Reading from memory does not fail.
        self.hash_of(&Bytes::from(input)).ok().flatten()
    }
}

/// Blocks of the long loop of an input of `len` bytes.
pub fn block_count(len: usize) -> usize {
    blocks_in(0, len, len).end
}

/// The sums of the blocks `blocks_in(start, start + piece.len(), len)` (into `out`, one each),
/// from `piece`, the input's bytes from `start`: while a piece is still in cache after it was
/// written, this is most of the work of the whole input's checksum.
pub fn piece_sums(piece: &[u8], start: usize, len: usize, out: &mut [BlockSum]) {
    Trail::new(start, piece.len(), len, out).finish(piece);
}

/// XXH3-64 of an input whose block sums arrive in order, piece by piece (as a compressor codes
/// its chunks): blocks that no piece summed (the bytes between pieces, blocks cut by a piece's
/// ends) are read from the input when the next piece comes, and at the end.
pub struct Folder {
    acc: Acc,
    /// The next block to fold.
    next: usize,
    len: usize,
}

impl Folder {
    pub fn new(len: usize) -> Folder {
        Folder { acc: INIT, next: 0, len }
    }

    /// Folds the sums of blocks `first..first + sums.len()` of `input` (the whole input), after
    /// the blocks before `first` not yet folded (read from `input`). Blocks already folded
    /// are skipped, so a piece given again changes nothing.
    pub fn fold(&mut self, first: usize, sums: &[BlockSum], input: &Bytes) -> Result<()> {
        self.catch_up(first, input)?;
        let skip = self.next.saturating_sub(first).min(sums.len());
        fold(&mut self.acc, &sums[skip..]);
        self.next = self.next.max(first + sums.len());
        Ok(())
    }

    /// Reads and folds blocks `self.next..to`.
    fn catch_up(&mut self, to: usize, input: &Bytes) -> Result<()> {
        let isa = crate::simd::isa();
        let mut sums = Vec::new();
        while self.next < to {
            let n = (to - self.next).min(1024);
            sums.resize(n, [0u64; 8]);
            let a = self.next * BLOCK;
            input.with_read(a, a + n * BLOCK, |w| block_sums(isa, w, &mut sums))?;
            fold(&mut self.acc, &sums);
            self.next += n;
        }
        Ok(())
    }

    /// The hash of `input` (of the length given to [`Folder::new`]).
    pub fn finish(mut self, input: &Bytes) -> Result<u64> {
        let len = self.len;
        if len <= MID_MAX || input.len() != len {
            return xxh3_64_of(input, 1 << 20);
        }
        self.catch_up(block_count(len), input)?;
        finish_of(self.acc, input, len)
    }
}

/// The end of the long loop over an input of `len > MID_MAX` bytes whose whole blocks (but the
/// last) are folded into `acc`: the last (partial or whole) block and the 64 bytes that end the
/// input, which may reach back into the block before it, read from `input`.
fn finish_of(acc: Acc, input: &Bytes, len: usize) -> Result<u64> {
    let full = block_count(len);
    let from = (full * BLOCK).min(len - STRIPE);
    let tail = input.read(from, len)?;
    Ok(finish(acc, &tail[full * BLOCK - from..], &tail[tail.len() - STRIPE..], len))
}

/// Adds each block's sum to the accumulators and scrambles them, in order.
fn fold(acc: &mut Acc, sums: &[Acc]) {
    let key: [u64; 8] = std::array::from_fn(|i| read64(&SECRET, SECRET.len() - STRIPE + 8 * i));
    for s in sums {
        for i in 0..8 {
            let a = acc[i].wrapping_add(s[i]);
            acc[i] = ((a ^ (a >> 47)) ^ key[i]).wrapping_mul(PRIME32_1);
        }
    }
}

/// The terms of `n` stripes of `data` (the secret starting at its beginning) added to `acc`.
fn stripes(acc: &mut Acc, data: &[u8], n: usize) {
    for s in 0..n {
        stripe(acc, &data[s * STRIPE..], s * 8);
    }
}

/// One stripe's terms added to `acc`, with the secret from byte `key`.
fn stripe(acc: &mut Acc, data: &[u8], key: usize) {
    for i in 0..8 {
        let v = read64(data, 8 * i);
        let k = v ^ read64(&SECRET, key + 8 * i);
        acc[i ^ 1] = acc[i ^ 1].wrapping_add(v);
        acc[i] = acc[i].wrapping_add((k & 0xFFFF_FFFF) * (k >> 32));
    }
}

/// The end of the long loop: the stripes of the last block (`rest`, 1 to 1024 bytes), the last
/// 64 bytes of the input (`last`), and the merge of the accumulators.
fn finish(mut acc: Acc, rest: &[u8], last: &[u8], len: usize) -> u64 {
    stripes(&mut acc, rest, (rest.len() - 1) / STRIPE);
    stripe(&mut acc, last, SECRET.len() - STRIPE - 7);
    let mut r = (len as u64).wrapping_mul(PRIME64_1);
    for j in 0..4 {
        let a = acc[2 * j] ^ read64(&SECRET, 11 + 16 * j);
        let b = acc[2 * j + 1] ^ read64(&SECRET, 11 + 16 * j + 8);
        let p = a as u128 * b as u128;
        r = r.wrapping_add(p as u64 ^ (p >> 64) as u64);
    }
    r ^= r >> 37;
    r = r.wrapping_mul(0x1656_6791_9E37_79F9);
    r ^ (r >> 32)
}

/// The sum of each block's stripe terms: `out[b]` for `data[b * BLOCK..][..BLOCK]`.
fn block_sums(isa: Isa, data: &[u8], out: &mut [Acc]) {
    debug_assert_eq!(data.len(), out.len() * BLOCK);
    #[cfg(target_arch = "x86_64")]
    match isa.min(crate::simd::detected()) {
        // SAFETY: the AVX-512 level has AVX-512 F, the AVX2 level AVX2 (`simd::detected`).
        Isa::Avx512 => return unsafe { avx512::block_sums(data, out) },
        Isa::Avx2 => return unsafe { avx2::block_sums(data, out) },
        Isa::Scalar => {}
    }
    let _ = isa;
    for (b, o) in data.chunks_exact(BLOCK).zip(out) {
        *o = [0; 8];
        stripes(o, b, STRIPES_PER_BLOCK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect()
    }

    /// Every length class (short, mid, one block, block edges, stripes that reach back into the
    /// previous block, many blocks) at every level the CPU has.
    #[test]
    fn equals_xxhash_rust() {
        let d = data(300_000);
        let mut lens: Vec<usize> = (0..=300).collect();
        for k in 1..=40 {
            for e in [k * BLOCK - 65, k * BLOCK - 64, k * BLOCK - 63, k * BLOCK - 1, k * BLOCK, k * BLOCK + 1] {
                lens.push(e);
            }
        }
        lens.extend([33 * 1024 + 17, 65_536, 100_001, 299_999, 300_000]);
        for &n in &lens {
            let want = xxhash_rust::xxh3::xxh3_64(&d[..n]);
            for isa in crate::simd::available() {
                assert_eq!(xxh3_64_at(isa, &d[..n]), want, "{n} bytes at {isa:?}");
            }
        }
    }

    /// Pieces of any size and alignment (some as bytes, the rest as heads, block sums and
    /// tails), given in any order, fold to the hash of the whole input; a missing piece gives none.
    #[test]
    fn pieces_agree_in_any_order() {
        let d = data(100_000);
        for len in [0, 100, 241, 1025, 2048, 2049, 99_999, 100_000] {
            let x = &d[..len];
            for cut in [1usize, 700, 1024, 3000, 4096 + 5] {
                let mut spans = Vec::new();
                let mut a = 0;
                while a < len {
                    spans.push((a, (a + cut).min(len)));
                    a += cut;
                }
                let sums: Vec<Vec<BlockSum>> = spans
                    .iter()
                    .map(|&(a, b)| {
                        let mut s = vec![[0u64; 8]; blocks_in(a, b, len).len()];
                        piece_sums(&x[a..b], a, len, &mut s);
                        s
                    })
                    .collect();
                // Given back to front, front to back, and odd before even.
                let n = spans.len();
                let orders: [Vec<usize>; 3] = [
                    (0..n).rev().collect(),
                    (0..n).collect(),
                    (0..n).filter(|i| i % 2 == 1).chain((0..n).filter(|i| i % 2 == 0)).collect(),
                ];
                for order in &orders {
                    let mut f = InOrder::new(len, n);
                    for &i in order {
                        let (a, b) = spans[i];
                        if i % 3 == 1 {
                            f.give_bytes(i, &x[a..b]);
                        } else {
                            let (head, tail) = InOrder::split(&x[a..b], a, len);
                            f.give(i, Piece { head, sums: &sums[i], tail });
                        }
                    }
                    assert_eq!(f.hash(x), Some(xxhash_rust::xxh3::xxh3_64(x)), "{len} by {cut}");
                }
                if n > 1 {
                    let mut f = InOrder::new(len, n);
                    for i in 1..n {
                        f.give_bytes(i, &x[spans[i].0..spans[i].1]);
                    }
                    assert_eq!(f.hash(x), None, "{len} by {cut}: the first piece is missing");
                }
            }
        }
    }

    /// A trail advanced by a writer in steps of any size (backwards too, and past the piece),
    /// then finished, gives exactly the sums of `piece_sums`; and summed blocks are not summed
    /// again (their sums are not overwritten).
    #[test]
    fn trails_agree_with_pieces() {
        let d = data(40_000);
        let len = d.len();
        for (a, b) in
            [(0, 40_000), (3, 9_000), (1000, 1000 + 3 * BLOCK), (5_000, 5_300), (1024, 2048), (39_000, 40_000)]
        {
            let r = blocks_in(a, b, len);
            let mut want = vec![[0u64; 8]; r.len()];
            piece_sums(&d[a..b], a, len, &mut want);
            for steps in [vec![1usize], vec![8192], vec![100, 3000, 50], vec![5000, 0, 2000]] {
                let mut got = vec![[7u64; 8]; r.len()];
                let mut t = Trail::new(a, b - a, len, &mut got);
                let mut written = 0;
                for &s in steps.iter().cycle().take(100) {
                    written = (written + s).min(b - a + 10);
                    t.advance(&d[a..b], written.min(b - a));
                }
                t.advance(&d[a..b], 0);
                let done = t.done;
                t.finish(&d[a..b]);
                assert_eq!(got, want, "{a}..{b} by {steps:?}");
                // What a trail summed stays: a block is summed once.
                let mut t = Trail::new(a, b - a, len, &mut got);
                t.done = done;
                let fresh = [9u64; 8];
                t.sums[..done].fill(fresh);
                t.finish(&d[a..b]);
                assert!(got[..done].iter().all(|s| *s == fresh), "{a}..{b}: summed again");
            }
        }
    }

    /// Pieces folded in order, with gaps between them, repeats and pieces too short to hold a
    /// block, give the hash of the whole input.
    #[test]
    fn folder_agrees() {
        let d = data(50_000);
        for len in [0, 100, 241, 1024, 1025, 5000, 50_000] {
            let x = &d[..len];
            let whole = Bytes::from(x);
            for (step, gap) in [(1000usize, 0usize), (3000, 700), (100, 50), (4096, 1)] {
                let mut f = Folder::new(len);
                let mut a = 0;
                while a < len {
                    let b = (a + step).min(len);
                    let r = blocks_in(a, b, len);
                    let mut sums = vec![[0u64; 8]; r.len()];
                    piece_sums(&x[a..b], a, len, &mut sums);
                    f.fold(r.start, &sums, &whole).unwrap();
                    if a % 2 == 0 {
                        f.fold(r.start, &sums, &whole).unwrap(); // again: no change
                    }
                    a = b + gap;
                }
                assert_eq!(f.finish(&whole).unwrap(), xxhash_rust::xxh3::xxh3_64(x), "{len} by {step} gap {gap}");
            }
        }
    }

    /// The windowed, parallel form gives the same hash whatever the window, from memory and from
    /// a file, and from an offset that is not a multiple of the block.
    #[test]
    fn windows_and_files_agree() {
        let d = data(200_000);
        let path = std::env::temp_dir().join(format!("brevis-hash-{}", std::process::id()));
        std::fs::write(&path, &d).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let src = crate::source::Source::file(&file).unwrap();
        for (a, b) in [(0, 200_000), (7, 199_000), (1000, 1000 + 3 * BLOCK), (5, 300), (9, 9 + 241), (0, 0)] {
            let want = xxhash_rust::xxh3::xxh3_64(&d[a..b]);
            for window in [1, 1000, BLOCK, 5 * BLOCK + 3, 1 << 20] {
                let mem = Bytes::from(&d[..]).slice(a, b);
                assert_eq!(xxh3_64_of(&mem, window).unwrap(), want, "{a}..{b} window {window}");
                let f = src.all().unwrap().slice(a, b);
                assert_eq!(xxh3_64_of(&f, window).unwrap(), want, "file {a}..{b} window {window}");
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
}
