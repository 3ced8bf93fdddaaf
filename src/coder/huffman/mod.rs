//! Canonical, length-limited Huffman coder over 16-bit symbols.
//!
//! Everything lives in one LSB-first bit stream (see `bitio`): the code-length table, then the
//! codes.
//!
//! Table:
//! - `gamma(k)`: number of directly coded symbols (1..=65536);
//! - 1 bit `esc`: whether an escape leaf exists (only when there are more than 2^MAX_LEN distinct
//!   symbols; an escaped symbol is the escape code followed by its raw 16-bit value);
//! - the `k` symbols, ascending, as `gamma(gap)`, the first gap taken from -1;
//! - if the code has at least two leaves (`k + esc >= 2`): the first length as 4 bits (`len - 1`),
//!   then each further length (the escape leaf last) as `gamma0(zigzag(len - previous len))`.
//!   A single symbol without escape has a zero-length code: the table alone, no data bits.
//!
//! Lengths are optimal under the limit `MAX_LEN` (plain Huffman when it fits, package-merge
//! otherwise; ties broken by symbol, so deterministic); codes are canonical in (length, symbol)
//! order with the escape leaf after every symbol. With more than 2^MAX_LEN distinct symbols the
//! encoder tries a few direct-table sizes (4095, 2047, ... 255 most frequent symbols) and keeps the
//! smallest result; `encoded_size` makes the same choice. Codes are written bit-reversed,
//! so a decoder peeking `MAX_LEN` bits LSB-first indexes a 2^MAX_LEN lookup table.
//! The decoder accepts only complete codes (Kraft sum exactly one), which the encoder always
//! produces.

use crate::coder::bitio::{BitReader, BitWriter, Bits32};
use crate::coder::shared::{gamma_len, unzigzag, zigzag};
use crate::error::{Error, Result};

/// Maximum code length.
pub const MAX_LEN: u32 = 12;

const TABLE_SIZE: usize = 1 << MAX_LEN;
const TABLE_MASK: u64 = TABLE_SIZE as u64 - 1;
/// Most leaves a code limited to `MAX_LEN` bits can have.
const MAX_LEAVES: usize = 1 << MAX_LEN;
/// Raw bits that follow an escape code.
const ESC_BITS: u32 = 16;
/// Number of possible symbol values.
const ALPHABET: usize = 1 << 16;
/// Direct-table sizes tried when there are more distinct symbols than a code can have leaves.
const ESC_CANDIDATES: [usize; 5] = [MAX_LEAVES - 1, 2047, 1023, 511, 255];

/// Decoder table entry: bits 0..8 code length, bit 8 escape flag, bits 16..32 symbol.
const ENTRY_ESC: u32 = 1 << 8;
/// Symbol counts from which building the two-symbol decoding table pays off.
const PAIR_MIN: usize = 2048;

/// The chosen code for one histogram.
struct Plan {
    /// Directly coded symbols, ascending.
    syms: Vec<u16>,
    /// Code length per direct symbol, then the escape leaf's when `esc`; empty for a
    /// zero-length code.
    lens: Vec<u8>,
    esc: bool,
    /// Total bits of table and data.
    bits: u64,
}

/// Bits of the serialized table.
fn table_bits(syms: &[u16], lens: &[u8]) -> u64 {
    let mut bits = gamma_len(syms.len() as u64) + 1;
    let mut prev = -1i64;
    for &s in syms {
        bits += gamma_len((i64::from(s) - prev) as u64);
        prev = i64::from(s);
    }
    if let Some((&first, rest)) = lens.split_first() {
        bits += 4;
        let mut p = first;
        for &l in rest {
            bits += gamma_len(zigzag(i64::from(l) - i64::from(p)) + 1);
            p = l;
        }
    }
    bits
}

/// Optimal code lengths limited to `MAX_LEN` for `w` (2..=2^MAX_LEN positive weights).
/// Deterministic: ties are broken by index. Plain Huffman when its depth fits the limit,
/// package-merge otherwise.
fn limited_lengths(w: &[u64]) -> Vec<u8> {
    let n = w.len();
    debug_assert!((2..=MAX_LEAVES).contains(&n));
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by_key(|&i| (w[i as usize], i));
    let leaves: Vec<u64> = order.iter().map(|&i| w[i as usize]).collect();
    let sorted_lens = huffman_depths(&leaves).unwrap_or_else(|| package_merge(&leaves));
    let mut lens = vec![0u8; n];
    for (i, &o) in order.iter().enumerate() {
        lens[o as usize] = sorted_lens[i];
    }
    debug_assert_eq!(lens.iter().map(|&l| 1u64 << (MAX_LEN - u32::from(l))).sum::<u64>(), TABLE_SIZE as u64);
    lens
}

/// Huffman code lengths for ascending `leaves` (two-queue method), or `None` if deeper than
/// `MAX_LEN`.
fn huffman_depths(leaves: &[u64]) -> Option<Vec<u8>> {
    let n = leaves.len();
    // Nodes 0..n are leaves, n..2n-1 internal nodes in creation (ascending weight) order.
    let mut weight = Vec::with_capacity(2 * n - 1);
    weight.extend_from_slice(leaves);
    let mut parent = vec![0u32; 2 * n - 1];
    let (mut a, mut b) = (0usize, n);
    for node in n..2 * n - 1 {
        let mut pick = || {
            // Leaf first on ties.
            if a < n && (b >= node || weight[a] <= weight[b]) {
                a += 1;
                a - 1
            } else {
                b += 1;
                b - 1
            }
        };
        let x = pick();
        let y = pick();
        parent[x] = node as u32;
        parent[y] = node as u32;
        weight.push(weight[x].saturating_add(weight[y]));
    }
    let mut depth = vec![0u8; 2 * n - 1];
    for node in (0..2 * n - 2).rev() {
        depth[node] = depth[parent[node] as usize] + 1;
        if u32::from(depth[node]) > MAX_LEN {
            return None;
        }
    }
    depth.truncate(n);
    Some(depth)
}

/// Package-merge: optimal lengths limited to `MAX_LEN` for ascending `leaves`.
fn package_merge(leaves: &[u64]) -> Vec<u8> {
    let n = leaves.len();
    // Only the first 2n-2 items of any list can be selected.
    let cap = 2 * n - 2;
    // flags[j][i]: whether item i of list j (j = 0 is the deepest level) is a leaf.
    let mut flags: Vec<Vec<bool>> = Vec::with_capacity(MAX_LEN as usize);
    let mut cur = leaves.to_vec();
    flags.push(vec![true; n]);
    for _ in 1..MAX_LEN {
        let packages = cur.len() / 2;
        let mut next = Vec::with_capacity(cap);
        let mut f = Vec::with_capacity(cap);
        let (mut a, mut b) = (0usize, 0usize);
        while next.len() < cap && (a < n || b < packages) {
            let pw = if b < packages { cur[2 * b].saturating_add(cur[2 * b + 1]) } else { u64::MAX };
            if a < n && leaves[a] <= pw {
                next.push(leaves[a]);
                f.push(true);
                a += 1;
            } else {
                next.push(pw);
                f.push(false);
                b += 1;
            }
        }
        cur = next;
        flags.push(f);
    }
    let mut sorted_lens = vec![0u8; n];
    let mut take = cap;
    for f in flags.iter().rev() {
        let leaves_taken = f[..take].iter().filter(|&&x| x).count();
        for l in &mut sorted_lens[..leaves_taken] {
            *l += 1;
        }
        take = 2 * (take - leaves_taken);
    }
    debug_assert_eq!(take, 0);
    sorted_lens
}

/// Bit-reversed canonical codes for `lens` (all in 1..=MAX_LEN), assigned in (length, index) order.
fn canonical_codes(lens: &[u8]) -> Vec<u16> {
    let mut count = [0u32; MAX_LEN as usize + 2];
    for &l in lens {
        count[l as usize] += 1;
    }
    let mut next = [0u32; MAX_LEN as usize + 2];
    let mut code = 0u32;
    for len in 1..=MAX_LEN as usize {
        code = (code + count[len - 1]) << 1;
        next[len] = code;
    }
    lens.iter()
        .map(|&l| {
            let c = next[l as usize];
            next[l as usize] += 1;
            ((c as u16).reverse_bits()) >> (16 - u32::from(l))
        })
        .collect()
}

/// Normalizes a histogram that breaks the documented precondition (unsorted, repeated symbols,
/// zero counts), so that `encoded_size` never panics.
fn normalized(hist: &[(u16, u64)]) -> Option<Vec<(u16, u64)>> {
    if hist.windows(2).all(|p| p[0].0 < p[1].0) && hist.iter().all(|&(_, c)| c > 0) {
        return None;
    }
    let mut h: Vec<(u16, u64)> = hist.iter().copied().filter(|&(_, c)| c > 0).collect();
    h.sort_unstable_by_key(|&(s, _)| s);
    h.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 = a.1.saturating_add(b.1);
            true
        } else {
            false
        }
    });
    Some(h)
}

/// Chooses the code for a histogram (sorted by symbol, counts > 0, at least one entry).
fn plan(hist: &[(u16, u64)]) -> Plan {
    let m = hist.len();
    debug_assert!(m >= 1);
    if m == 1 {
        let syms = vec![hist[0].0];
        let bits = table_bits(&syms, &[]);
        return Plan { syms, lens: Vec::new(), esc: false, bits };
    }
    if m <= MAX_LEAVES {
        let w: Vec<u64> = hist.iter().map(|&(_, c)| c).collect();
        let lens = limited_lengths(&w);
        let syms: Vec<u16> = hist.iter().map(|&(s, _)| s).collect();
        let data: u64 = w.iter().zip(&lens).map(|(&c, &l)| c * u64::from(l)).sum();
        let bits = table_bits(&syms, &lens) + data;
        return Plan { syms, lens, esc: false, bits };
    }
    // Too many distinct symbols: code the most frequent directly, escape the rest. Indices into
    // `hist` by count descending, then symbol ascending.
    let mut order: Vec<u32> = (0..m as u32).collect();
    let by_count_desc = |a: &u32, b: &u32| hist[*b as usize].1.cmp(&hist[*a as usize].1).then(a.cmp(b));
    let top = ESC_CANDIDATES[0];
    order.select_nth_unstable_by(top, by_count_desc);
    order[..top].sort_unstable_by(by_count_desc);
    let mut best: Option<Plan> = None;
    for &k in &ESC_CANDIDATES {
        let mut top: Vec<u32> = order[..k].to_vec();
        top.sort_unstable();
        let esc_w: u64 = order[k..].iter().map(|&i| hist[i as usize].1).sum();
        let mut w: Vec<u64> = top.iter().map(|&i| hist[i as usize].1).collect();
        w.push(esc_w);
        let lens = limited_lengths(&w);
        let syms: Vec<u16> = top.iter().map(|&i| hist[i as usize].0).collect();
        let data: u64 = w.iter().zip(&lens).map(|(&c, &l)| c * u64::from(l)).sum::<u64>() + esc_w * u64::from(ESC_BITS);
        let bits = table_bits(&syms, &lens) + data;
        if best.as_ref().is_none_or(|b| bits < b.bits) {
            best = Some(Plan { syms, lens, esc: true, bits });
        }
    }
    best.expect("at least one candidate")
}

/// Encodes `symbols` (values < 1<<16; the alphabet may be sparse, e.g. a few thousand distinct u16 values)
/// as: a code-length table, then the bit stream. Self-delimiting given the symbol count, which the caller stores.
/// Appends to `out`. Precondition: symbols.len() >= 1 (an empty input appends nothing, and
/// `decode` with `n == 0` consumes nothing).
pub fn encode(symbols: &[u16], out: &mut Vec<u8>) {
    if symbols.is_empty() {
        return;
    }
    let alphabet = super::alphabet_of(symbols);
    let plan = plan(&super::used_counts(symbols, alphabet));

    let mut w = BitWriter::new();
    w.gamma(plan.syms.len() as u64);
    w.put(u64::from(plan.esc), 1);
    let mut prev = -1i64;
    for &s in &plan.syms {
        w.gamma((i64::from(s) - prev) as u64);
        prev = i64::from(s);
    }
    if let Some((&first, rest)) = plan.lens.split_first() {
        w.put(u64::from(first - 1), 4);
        let mut p = first;
        for &l in rest {
            w.gamma0(zigzag(i64::from(l) - i64::from(p)));
            p = l;
        }
    }
    let table_len = w.bit_len();
    let mut bytes = w.finish();
    if plan.lens.is_empty() {
        debug_assert_eq!(plan.bits, table_len as u64);
        out.extend_from_slice(&bytes);
        return;
    }

    // Per symbol value: (bits << 32) | value, where value is the reversed code (and, for an
    // escaped symbol, the raw symbol above the escape code).
    let codes = canonical_codes(&plan.lens);
    // (Only as long as the alphabet: a block of bytes filled 512 KB for 256 entries.)
    let mut enc = vec![0u64; alphabet];
    if plan.esc {
        let el = u32::from(plan.lens[plan.syms.len()]);
        let ec = u64::from(codes[plan.syms.len()]);
        for (s, e) in enc.iter_mut().enumerate() {
            *e = (u64::from(el + ESC_BITS) << 32) | ((s as u64) << el) | ec;
        }
    }
    for (i, &s) in plan.syms.iter().enumerate() {
        enc[s as usize] = (u64::from(plan.lens[i]) << 32) | u64::from(codes[i]);
    }

    // Continue the bit stream where the table ended: take back its partial last byte.
    let (acc, n) = match table_len % 8 {
        0 => (0u64, 0u32),
        r => (u64::from(bytes.pop().unwrap_or(0)), r as u32),
    };
    out.reserve(bytes.len() + (plan.bits as usize - table_len) / 8 + 8);
    out.extend_from_slice(&bytes);
    let mut w = Bits32::new(out, acc, n);
    for &s in symbols {
        let e = enc[s as usize];
        w.put(e & 0xFFFF_FFFF, (e >> 32) as u32);
    }
    w.finish();
}

/// Exact size in bytes that `encode` would append, computed from a histogram without encoding
/// (hist: (symbol, count) pairs sorted by symbol, counts > 0).
pub fn encoded_size(hist: &[(u16, u64)]) -> usize {
    let norm = normalized(hist);
    let hist = norm.as_deref().unwrap_or(hist);
    if hist.is_empty() {
        return 0;
    }
    plan(hist).bits.div_ceil(8) as usize
}

/// Exact size in bytes that `encode` would append for `symbols`, without encoding.
pub fn encoded_len(symbols: &[u16]) -> usize {
    if symbols.is_empty() {
        return 0;
    }
    let alphabet = super::alphabet_of(symbols);
    plan(&super::used_counts(symbols, alphabet)).bits.div_ceil(8) as usize
}

/// Counts the bits read from a `BitReader` so the code stream can start mid-byte.
struct TableReader<'a> {
    r: BitReader<'a>,
    bits: u64,
}

impl TableReader<'_> {
    fn get(&mut self, bits: u32) -> Result<u64> {
        let v = self.r.get(bits)?;
        self.bits += u64::from(bits);
        Ok(v)
    }

    fn gamma(&mut self) -> Result<u64> {
        let v = self.r.gamma()?;
        self.bits += gamma_len(v);
        Ok(v)
    }
}

/// Decodes exactly `n` symbols from the start of `input`, appending them to `out`; returns the number of bytes
/// of `input` consumed. Any malformed input (bad table, over-subscribed or incomplete code that cannot be
/// decoded, truncated data, a code that does not map to a symbol) returns Err(Error::corrupt(..)) — never panics,
/// never loops forever, never allocates more than O(n + 2^MAX_LEN + 65536) memory.
pub fn decode(input: &[u8], n: usize, out: &mut Vec<u16>) -> Result<usize> {
    if n == 0 {
        return Ok(0);
    }
    let mut r = TableReader { r: BitReader::new(input), bits: 0 };
    let k = r.gamma()?;
    if k > ALPHABET as u64 {
        return Err(Error::corrupt("huffman: too many table symbols"));
    }
    let k = k as usize;
    let esc = r.get(1)? == 1;
    let leaves = k + usize::from(esc);
    if leaves > MAX_LEAVES {
        return Err(Error::corrupt("huffman: more code leaves than the length limit allows"));
    }
    let mut syms = Vec::with_capacity(k);
    let mut prev = -1i64;
    for _ in 0..k {
        let gap = r.gamma()?;
        if gap > ALPHABET as u64 || prev + gap as i64 >= ALPHABET as i64 {
            return Err(Error::corrupt("huffman: table symbol out of range"));
        }
        prev += gap as i64;
        syms.push(prev as u16);
    }

    if leaves == 1 {
        // Zero-length code: every symbol is the one table symbol.
        let consumed = r.bits.div_ceil(8) as usize;
        out.try_reserve(n).map_err(|_| Error::corrupt("huffman: symbol count too large"))?;
        out.extend(std::iter::repeat_n(syms[0], n));
        return Ok(consumed);
    }

    let mut lens = Vec::with_capacity(leaves);
    let first = r.get(4)? as u32 + 1;
    if first > MAX_LEN {
        return Err(Error::corrupt("huffman: code length out of range"));
    }
    lens.push(first as u8);
    let mut p = i64::from(first);
    for _ in 1..leaves {
        let z = r.gamma()? - 1;
        if z > 2 * u64::from(MAX_LEN) {
            return Err(Error::corrupt("huffman: code length out of range"));
        }
        p += unzigzag(z);
        if !(1..=i64::from(MAX_LEN)).contains(&p) {
            return Err(Error::corrupt("huffman: code length out of range"));
        }
        lens.push(p as u8);
    }
    let kraft: u64 = lens.iter().map(|&l| 1u64 << (MAX_LEN - u32::from(l))).sum();
    if kraft != TABLE_SIZE as u64 {
        return Err(Error::corrupt(if kraft > TABLE_SIZE as u64 {
            "huffman: over-subscribed code"
        } else {
            "huffman: incomplete code"
        }));
    }

    let codes = canonical_codes(&lens);
    let mut table = [0u32; TABLE_SIZE];
    for (i, (&l, &c)) in lens.iter().zip(&codes).enumerate() {
        let entry = if i < k { (u32::from(syms[i]) << 16) | u32::from(l) } else { ENTRY_ESC | u32::from(l) };
        for slot in table.iter_mut().skip(c as usize).step_by(1 << l) {
            *slot = entry;
        }
    }

    let start_bit = r.bits as usize;
    // Every symbol takes at least one bit: refuse counts the input cannot hold before allocating.
    let avail = (input.len() as u64 * 8).saturating_sub(start_bit as u64);
    if n as u64 > avail {
        return Err(Error::corrupt("huffman: bit stream ends early"));
    }
    let start = out.len();
    out.resize(start + n, 0);
    let res = decode_stream(input, start_bit, &table, &lens, esc, &mut out[start..]);
    if res.is_err() {
        out.truncate(start);
    }
    res
}

/// LSB-first bit buffer over the code stream.
///
/// `buf` holds `count` valid bits; the bits above them are either zero or the true following bits
/// of `data` (the fast refill loads whole words but counts only whole bytes), so a peek is always
/// correct, and a code is accepted only if its length fits in the valid bits.
struct Bits<'a> {
    data: &'a [u8],
    /// Bytes already counted into `buf`.
    pos: usize,
    buf: u64,
    count: u32,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8], start_bit: usize) -> Result<Self> {
        let mut b = Bits { data, pos: start_bit / 8, buf: 0, count: 0 };
        let skip = (start_bit % 8) as u32;
        if skip > 0 {
            let byte = *data.get(b.pos).ok_or_else(|| Error::corrupt("huffman: bit stream ends early"))?;
            b.buf = u64::from(byte) >> skip;
            b.count = 8 - skip;
            b.pos += 1;
        }
        Ok(b)
    }

    /// Whether a word refill may read 8 bytes.
    #[inline(always)]
    fn can_refill_fast(&self) -> bool {
        self.pos + 8 <= self.data.len()
    }

    /// Refills to 56..=63 valid bits; needs `can_refill_fast`.
    #[inline(always)]
    fn refill_fast(&mut self) {
        let word = u64::from_le_bytes(self.data[self.pos..self.pos + 8].try_into().unwrap());
        self.buf |= word << self.count;
        self.pos += ((63 - self.count) >> 3) as usize;
        self.count |= 56;
    }

    /// Refills byte by byte to at least 57 valid bits or the end of the data.
    #[inline]
    fn refill_careful(&mut self) {
        while self.count <= 56 && self.pos < self.data.len() {
            self.buf |= u64::from(self.data[self.pos]) << self.count;
            self.pos += 1;
            self.count += 8;
        }
    }

    #[inline(always)]
    fn consume(&mut self, bits: u32) {
        self.buf >>= bits;
        self.count -= bits;
    }

    /// Bytes consumed, counting a partly read byte.
    fn consumed(&self) -> usize {
        self.pos - (self.count / 8) as usize
    }
}

/// Decodes `dst.len()` symbols from the code stream starting at bit `start_bit` of `data`;
/// returns the bytes of `data` consumed.
fn decode_stream(
    data: &[u8],
    start_bit: usize,
    table: &[u32; TABLE_SIZE],
    lens: &[u8],
    esc: bool,
    dst: &mut [u16],
) -> Result<usize> {
    let mut bits = Bits::new(data, start_bit)?;
    let max_len = lens.iter().copied().max().unwrap_or(0);
    // Mean code length under the distribution the code is optimal for, in 1/4096 bits.
    let implied: u64 = lens.iter().map(|&l| u64::from(l) << (MAX_LEN - u32::from(l))).sum();
    let done = if esc {
        fast_escape(&mut bits, table, dst)
    } else if dst.len() >= PAIR_MIN && implied <= 7 * TABLE_SIZE as u64 {
        fast_pairs(&mut bits, table, dst)
    } else {
        match max_len {
            0..=8 => fast_single::<7>(&mut bits, table, dst),
            9 => fast_single::<6>(&mut bits, table, dst),
            10 | 11 => fast_single::<5>(&mut bits, table, dst),
            _ => fast_single::<4>(&mut bits, table, dst),
        }
    };

    // Careful tail: byte-wise refill, every length checked against the valid bits.
    for slot in &mut dst[done..] {
        bits.refill_careful();
        let e = table[(bits.buf & TABLE_MASK) as usize];
        let l = e & 0xFF;
        if l > bits.count {
            return Err(Error::corrupt("huffman: bit stream ends early"));
        }
        bits.consume(l);
        if e & ENTRY_ESC != 0 {
            // The refill left at least 57 bits, or the data is exhausted.
            if bits.count < ESC_BITS {
                return Err(Error::corrupt("huffman: bit stream ends early"));
            }
            *slot = bits.buf as u16;
            bits.consume(ESC_BITS);
        } else {
            *slot = (e >> 16) as u16;
        }
    }
    Ok(bits.consumed())
}

/// `G` symbols per refill; `G * max code length <= 56`. Returns the symbols decoded.
#[inline(never)]
fn fast_single<const G: usize>(bits: &mut Bits, table: &[u32; TABLE_SIZE], dst: &mut [u16]) -> usize {
    let mut done = 0;
    for c in dst.chunks_exact_mut(G) {
        if !bits.can_refill_fast() {
            break;
        }
        bits.refill_fast();
        for slot in c.iter_mut() {
            let e = table[(bits.buf & TABLE_MASK) as usize];
            bits.consume(e & 0xFF);
            *slot = (e >> 16) as u16;
        }
        done += G;
    }
    done
}

/// Two symbols of at most `MAX_LEN + ESC_BITS` = 28 bits per refill.
#[inline(never)]
fn fast_escape(bits: &mut Bits, table: &[u32; TABLE_SIZE], dst: &mut [u16]) -> usize {
    let mut done = 0;
    for c in dst.chunks_exact_mut(2) {
        if !bits.can_refill_fast() {
            break;
        }
        bits.refill_fast();
        for slot in c.iter_mut() {
            let e = table[(bits.buf & TABLE_MASK) as usize];
            bits.consume(e & 0xFF);
            if e & ENTRY_ESC != 0 {
                *slot = bits.buf as u16;
                bits.consume(ESC_BITS);
            } else {
                *slot = (e >> 16) as u16;
            }
        }
        done += 2;
    }
    done
}

/// Two-symbol table: an entry holds both symbols when their codes fit in `MAX_LEN` bits
/// together. Four steps of at most `MAX_LEN` bits and two symbols each per refill.
#[inline(never)]
fn fast_pairs(bits: &mut Bits, table: &[u32; TABLE_SIZE], dst: &mut [u16]) -> usize {
    // Entry: sym0 | sym1 << 16 | total length << 32 | symbol count << 40.
    let mut pairs = vec![0u64; TABLE_SIZE];
    for (idx, p) in pairs.iter_mut().enumerate() {
        let e0 = table[idx];
        let l0 = e0 & 0xFF;
        let e1 = table[idx >> l0];
        let l1 = e1 & 0xFF;
        *p = if l0 + l1 <= MAX_LEN {
            u64::from(e0 >> 16) | (u64::from(e1 >> 16) << 16) | (u64::from(l0 + l1) << 32) | (2 << 40)
        } else {
            u64::from(e0 >> 16) | (u64::from(l0) << 32) | (1 << 40)
        };
    }
    let pairs: &[u64; TABLE_SIZE] = pairs.as_slice().try_into().unwrap();
    let mut done = 0;
    while dst.len() - done >= 8 && bits.can_refill_fast() {
        bits.refill_fast();
        for _ in 0..4 {
            let e = pairs[(bits.buf & TABLE_MASK) as usize];
            bits.consume(((e >> 32) & 0xFF) as u32);
            dst[done] = e as u16;
            dst[done + 1] = (e >> 16) as u16;
            done += (e >> 40) as usize;
        }
    }
    done
}

#[cfg(test)]
mod tests;
