//! Static rANS with optional context selection, four interleaved states.
//!
//! A block codes `n` symbols (values < 2^16) with `K` frequency tables. Which table codes symbol `i`
//! is chosen by a *context value* `c[i]` (the previous symbol, or the value of an already decoded
//! sibling stream at the same position) through sorted thresholds: `table = #{t : t <= c[i]}`. The
//! encoder picks the thresholds by merging value ranges while that saves bits, so a block pays for
//! contexts only where they help.
//!
//! Frequencies are sent as quantized logarithms (`q = round(r * log2(count))`), and both sides
//! rebuild the exact integer frequencies from `q` with the same integer-only normalization, which
//! keeps tables to a few bits per used symbol.
//!
//! Wire form (all in one LSB-first bit stream, then byte aligned):
//! `gamma(K)`, `K-1` thresholds as gamma gaps, `K` tables, then the rANS part: `varint(words)`,
//! four `u32` final states, `words` little-endian `u16` renormalization words.

use crate::coder::bitio::{put_varint, BitReader, BitWriter, ByteReader};
use crate::coder::counts_cost;
use crate::coder::shared::{ceil_log2, unzigzag, weight, zigzag};
use crate::error::{Error, Result};

/// Where a symbol's context value comes from.
#[derive(Clone, Copy)]
pub enum Ctx<'a> {
    /// One table for the whole block.
    None,
    /// The symbol `stride` positions earlier in the same stream (0 before the first `stride`):
    /// stride 1 is the previous symbol, the row length the symbol above.
    Back(usize),
    /// [`Ctx::Back`] within each of four runs: the first `4q` symbols (`q = n / 4`) are four runs
    /// of `q`, state `j` codes run `j`, and a symbol's context is the symbol `stride` earlier in
    /// its run. The four states then decode independently of each other (with `Back(1)` each
    /// symbol waits for the previous one, decoded by another state). On the wire this is a
    /// `Back(4 stride)` block over the *coded order*: run 0's first symbol, run 1's first, run 2's,
    /// run 3's, run 0's second, ..., then the last `n - 4q` symbols.
    Split(usize),
    /// The number of set bits in the `stride` symbols before it in its run, over the four runs
    /// of [`Ctx::Split`]: the density of a bit mask around the symbol (a pruned tensor's rows
    /// differ in how many weights they keep). On the wire the block is one over the coded order
    /// of `Split` whose symbol at coded position `i` has the context value
    /// `popcount(s[i - 4]) + ... + popcount(s[i - 4 stride])` (terms before the start are 0), at
    /// most `16 stride`; `1 <= stride <= MAX_POP`.
    Pop(usize),
    /// A stream decoded earlier, one value per symbol.
    Side(&'a [u16]),
}

const L: u32 = 1 << 16;
const MAX_PROB_BITS: u32 = 16;
const MIN_PROB_BITS: u32 = 10;
/// Largest log2 of a weight: quantized log-counts satisfy `q >> r_log <= MAX_LOG` (counts up to 2^40),
/// so weights stay below 2^61 and their sum fits easily in u128.
const MAX_LOG: u64 = 40;
/// Most contexts a block may use.
pub const MAX_CONTEXTS: usize = 64;
/// Largest window of [`Ctx::Pop`], in symbols.
pub const MAX_POP: usize = 64;

/// One frequency table: used symbols in ascending order and their frequencies (sum 2^prob_bits).
#[derive(Clone, Debug, PartialEq)]
struct Table {
    prob_bits: u32,
    syms: Vec<u16>,
    freqs: Vec<u32>,
}

/// Integer-only normalization shared by encoder and decoder.
fn normalize(qs: &[u64], r_log: u32, prob_bits: u32) -> Vec<u32> {
    let total: u32 = 1 << prob_bits;
    let w: Vec<u128> = qs.iter().map(|&q| weight(q, r_log)).collect();
    let sum: u128 = w.iter().sum();
    let mut f: Vec<u32> = w.iter().map(|&wi| ((wi * total as u128) / sum).max(1) as u32).collect();
    let assigned: i64 = f.iter().map(|&x| x as i64).sum();
    let mut diff = total as i64 - assigned;
    if diff > 0 {
        let (imax, _) = w.iter().enumerate().fold((0, 0u128), |b, (i, &x)| if x > b.1 { (i, x) } else { b });
        f[imax] += diff as u32;
    } else if diff < 0 {
        // Take from the largest frequencies first; ties by position.
        let mut order: Vec<usize> = (0..f.len()).collect();
        order.sort_by(|&a, &b| f[b].cmp(&f[a]).then(a.cmp(&b)));
        for i in order {
            if diff == 0 {
                break;
            }
            let take = ((f[i] - 1) as i64).min(-diff);
            f[i] -= take as u32;
            diff += take;
        }
    }
    f
}

/// Chooses the table for a histogram: returns (table, wire bits of the table, estimated data bits).
fn build_table(hist: &[(u16, u64)]) -> (Table, Vec<u64>, u32, f64) {
    let used = hist.len() as u64;
    let n: u64 = hist.iter().map(|h| h.1).sum();
    let prob_bits = (ceil_log2(used) + 2).max(ceil_log2(n).min(14)).clamp(MIN_PROB_BITS, MAX_PROB_BITS);
    let prob_bits = if used > (1 << 15) { MAX_PROB_BITS } else { prob_bits };
    let syms: Vec<u16> = hist.iter().map(|h| h.0).collect();
    let mut best: Option<(Table, Vec<u64>, u32, f64)> = None;
    for r_log in [1u32, 2, 3] {
        let r = (1u64 << r_log) as f64;
        let qmax = ((MAX_LOG + 1) << r_log) - 1;
        let qs: Vec<u64> = hist.iter().map(|h| (((h.1 as f64).log2() * r).round() as u64).min(qmax)).collect();
        let freqs = if used == 1 { vec![1 << prob_bits] } else { normalize(&qs, r_log, prob_bits) };
        let mut data_bits = 0f64;
        for (h, &f) in hist.iter().zip(&freqs) {
            data_bits += h.1 as f64 * (prob_bits as f64 - (f as f64).log2());
        }
        let table_bits = q_bits(&qs) as f64;
        let cost = data_bits + table_bits;
        if best.as_ref().is_none_or(|b| cost < b.3) {
            best = Some((Table { prob_bits, syms: syms.clone(), freqs }, qs, r_log, cost));
        }
        if used == 1 {
            break;
        }
    }
    best.unwrap()
}

fn q_bits(qs: &[u64]) -> u64 {
    let mut bits = 0u64;
    let mut prev = 0i64;
    for &q in qs {
        let d = zigzag(q as i64 - prev);
        bits += 2 * (64 - (d + 1).leading_zeros() as u64) - 1;
        prev = q as i64;
    }
    bits
}

fn write_table(w: &mut BitWriter, t: &Table, qs: &[u64], r_log: u32) {
    w.gamma(t.syms.len() as u64);
    let mut prev = -1i64;
    for &s in &t.syms {
        w.gamma((s as i64 - prev) as u64);
        prev = s as i64;
    }
    w.put((t.prob_bits - MIN_PROB_BITS) as u64, 3);
    if t.syms.len() > 1 {
        w.put(r_log as u64 - 1, 2);
        let mut prev = 0i64;
        for &q in qs {
            w.gamma0(zigzag(q as i64 - prev));
            prev = q as i64;
        }
    }
}

fn read_table(r: &mut BitReader) -> Result<Table> {
    let used = r.gamma()?;
    if used > 1 << 16 {
        return Err(Error::corrupt("rANS table: too many symbols"));
    }
    let mut syms = Vec::with_capacity(used as usize);
    let mut prev = -1i64;
    for _ in 0..used {
        let s = prev + r.gamma()? as i64;
        if s > u16::MAX as i64 {
            return Err(Error::corrupt("rANS table: symbol out of range"));
        }
        syms.push(s as u16);
        prev = s;
    }
    let prob_bits = r.get(3)? as u32 + MIN_PROB_BITS;
    // The writer (`build_table`) never uses more precision than max(14, ceil_log2(used) + 2)
    // bits; refusing more bounds the slot tables that a forged block can make the decoder build.
    if prob_bits > MAX_PROB_BITS || (1u64 << prob_bits) < used || prob_bits > (ceil_log2(used) + 2).max(14) {
        return Err(Error::corrupt("rANS table: bad precision"));
    }
    let freqs = if used == 1 {
        vec![1 << prob_bits]
    } else {
        let r_log = r.get(2)? as u32 + 1;
        if r_log > 3 {
            return Err(Error::corrupt("rANS table: bad resolution"));
        }
        let mut qs = Vec::with_capacity(used as usize);
        let mut prev = 0i64;
        for _ in 0..used {
            let q = prev + unzigzag(r.gamma0()?);
            if q < 0 || (q as u64 >> r_log) > MAX_LOG {
                return Err(Error::corrupt("rANS table: frequency out of range"));
            }
            qs.push(q as u64);
            prev = q;
        }
        normalize(&qs, r_log, prob_bits)
    };
    Ok(Table { prob_bits, syms, freqs })
}

/// Estimated cost in bits of coding `hist` with its own table.
fn block_cost(hist: &[(u16, u64)]) -> f64 {
    counts_cost(hist.iter().map(|h| h.1))
}

fn merge_hist(a: &[(u16, u64)], b: &[(u16, u64)]) -> Vec<(u16, u64)> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if j == b.len() || (i < a.len() && a[i].0 < b[j].0) {
            out.push(a[i]);
            i += 1;
        } else if i == a.len() || b[j].0 < a[i].0 {
            out.push(b[j]);
            j += 1;
        } else {
            out.push((a[i].0, a[i].1 + b[j].1));
            i += 1;
            j += 1;
        }
    }
    out
}

/// Context value of every symbol (`Ctx::None`: none).
fn context_values<'a>(symbols: &[u16], ctx: Ctx<'a>) -> std::borrow::Cow<'a, [u16]> {
    use std::borrow::Cow;
    match ctx {
        Ctx::None => Cow::Owned(Vec::new()),
        Ctx::Back(d) => {
            let n = symbols.len();
            let mut v = vec![0u16; n];
            if d < n {
                v[d..].copy_from_slice(&symbols[..n - d]);
            }
            Cow::Owned(v)
        }
        Ctx::Side(s) => Cow::Borrowed(s),
        // `encode` and `estimated_len` code them over their coded order.
        Ctx::Split(_) | Ctx::Pop(_) => unreachable!("a context in four runs is coded over its coded order"),
    }
}

/// Most used symbols for which bucket histograms are dense arrays (counted in one pass, merged
/// element by element); with more, (bucket, symbol) pairs are sorted into sparse histograms,
/// whose merges cost what the buckets hold rather than the alphabet.
const DENSE_SYMBOLS: usize = 1024;

/// Histograms of the buckets: dense over the block's used symbols, or sparse (symbol, count).
enum BucketHists {
    Dense { used: Vec<u16>, hists: Vec<Vec<u32>> },
    Sparse(Vec<Vec<(u16, u64)>>),
}

/// Histogram of each bucket: symbol `i` falls in bucket `bucket_of[cv[i]] < nb`.
fn bucket_hists(symbols: &[u16], cv: &[u16], bucket_of: &[u8], nb: usize, alphabet: usize) -> BucketHists {
    let used: Vec<u16> = super::used_counts(symbols, alphabet).iter().map(|u| u.0).collect();
    let u = used.len();
    if u <= DENSE_SYMBOLS && symbols.len() <= u32::MAX as usize {
        let mut rank = vec![0u32; alphabet];
        for (r, &s) in used.iter().enumerate() {
            rank[s as usize] = r as u32;
        }
        // Partial counts (position i counts in copy i % copies), so that runs of one (bucket,
        // symbol) pair do not wait on each other's increments: four copies while they stay
        // small enough for the L2 cache, else two.
        let cells = nb * u;
        let copies = if cells <= 1 << 14 { 4 } else { 2 };
        let mut flat = vec![0u32; copies * cells];
        let cell = |i: usize| bucket_of[cv[i] as usize] as usize * u + rank[symbols[i] as usize] as usize;
        let whole = symbols.len() - symbols.len() % copies;
        for i in (0..whole).step_by(copies) {
            for c in 0..copies {
                flat[c * cells + cell(i + c)] += 1;
            }
        }
        for i in whole..symbols.len() {
            flat[cell(i)] += 1;
        }
        let (first, rest) = flat.split_at_mut(cells);
        for other in rest.chunks_exact(cells) {
            for (a, &b) in first.iter_mut().zip(other) {
                *a += b;
            }
        }
        let hists = first.chunks_exact(u).map(|h| h.to_vec()).collect();
        BucketHists::Dense { used, hists }
    } else {
        let mut hists: Vec<Vec<(u16, u64)>> = vec![Vec::new(); nb];
        let mut keys: Vec<u32> =
            symbols.iter().zip(cv).map(|(&s, &c)| (bucket_of[c as usize] as u32) << 16 | s as u32).collect();
        keys.sort_unstable();
        for run in keys.chunk_by(|a, b| a == b) {
            hists[(run[0] >> 16) as usize].push((run[0] as u16, run.len() as u64));
        }
        BucketHists::Sparse(hists)
    }
}

/// Merges neighbouring buckets while the estimated total shrinks, the pair that saves most first
/// (the first such pair on ties). Returns the merged histograms and the first bucket of each;
/// removes the thresholds between merged buckets from `bounds`.
fn merge_buckets<H>(
    mut hists: Vec<H>,
    bounds: &mut Vec<u16>,
    merge: impl Fn(&H, &H) -> H,
    cost: impl Fn(&H) -> f64,
) -> (Vec<H>, Vec<usize>) {
    let mut costs: Vec<f64> = hists.iter().map(&cost).collect();
    let mut first: Vec<usize> = (0..hists.len()).collect();
    // The merge of each neighbour pair and what it saves; only the pairs next to a merge change.
    let pair = |hists: &[H], costs: &[f64], i: usize| {
        let m = merge(&hists[i], &hists[i + 1]);
        let c = cost(&m);
        (c - costs[i] - costs[i + 1], c, m)
    };
    let mut pairs: Vec<(f64, f64, H)> = (0..hists.len().saturating_sub(1)).map(|i| pair(&hists, &costs, i)).collect();
    loop {
        let mut best: Option<(usize, f64)> = None;
        for (i, p) in pairs.iter().enumerate() {
            if p.0 < 0.0 && best.is_none_or(|b| p.0 < b.1) {
                best = Some((i, p.0));
            }
        }
        let Some((i, _)) = best else { break };
        let (_, c, m) = pairs.remove(i);
        costs[i] = c;
        hists[i] = m;
        hists.remove(i + 1);
        costs.remove(i + 1);
        bounds.remove(i);
        first.remove(i + 1);
        if i > 0 {
            pairs[i - 1] = pair(&hists, &costs, i - 1);
        }
        if i + 1 < hists.len() {
            pairs[i] = pair(&hists, &costs, i);
        }
    }
    (hists, first)
}

/// The contexts of a block: thresholds on the context value, the table of every symbol (empty
/// with one table) and each table's histogram.
struct Contexts {
    thresholds: Vec<u16>,
    table_of: Vec<u8>,
    hists: Vec<Vec<(u16, u64)>>,
}

/// Quantile buckets over context values (`cvals[v]`: symbols with context value `v`, `n` in
/// all), each at least `n / MAX_CONTEXTS` and 1024 symbols: the start value of each bucket after
/// the first, and the bucket of every value.
fn quantile_buckets(cvals: &[u64], n: usize) -> (Vec<u16>, Vec<u8>) {
    let min_fill = (n / MAX_CONTEXTS).max(1024) as u64;
    let mut bounds: Vec<u16> = Vec::new();
    let mut fill = 0u64;
    let mut bucket_of = vec![0u8; cvals.len()];
    let mut b = 0usize;
    for (v, &c) in cvals.iter().enumerate() {
        if c > 0 {
            if fill >= min_fill && b + 1 < MAX_CONTEXTS {
                b += 1;
                bounds.push(v as u16);
                fill = 0;
            }
            fill += c;
        }
        bucket_of[v] = b as u8;
    }
    (bounds, bucket_of)
}

/// Picks context thresholds: start from up to `MAX_CONTEXTS` quantile buckets of the context value,
/// then merge neighbours while the estimated total (data + tables) shrinks.
fn choose_contexts(symbols: &[u16], ctx: Ctx, alphabet: usize) -> Contexts {
    let n = symbols.len();
    let single = |symbols: &[u16]| Contexts {
        thresholds: Vec::new(),
        table_of: Vec::new(),
        hists: vec![super::used_counts(symbols, alphabet)],
    };
    if matches!(ctx, Ctx::None) || n < 4096 {
        return single(symbols);
    }
    let cv = context_values(symbols, ctx);
    let range = cv.iter().copied().max().unwrap_or(0) as usize + 1;
    let (mut bounds, bucket_of) = quantile_buckets(&super::symbol_counts(&cv, range), n);
    if bounds.is_empty() {
        return single(symbols);
    }
    let nb = bounds.len() + 1;
    let (hists, first) = match bucket_hists(symbols, &cv, &bucket_of, nb, alphabet) {
        BucketHists::Dense { used, hists } => {
            let merge = |a: &Vec<u32>, b: &Vec<u32>| a.iter().zip(b).map(|(x, y)| x + y).collect::<Vec<u32>>();
            let cost = |h: &Vec<u32>| counts_cost(h.iter().map(|&c| c as u64));
            let (hists, first) = merge_buckets(hists, &mut bounds, merge, cost);
            let sparse =
                |h: &Vec<u32>| h.iter().zip(&used).filter(|x| *x.0 > 0).map(|(&c, &s)| (s, c as u64)).collect();
            (hists.iter().map(sparse).collect(), first)
        }
        BucketHists::Sparse(hists) => merge_buckets(hists, &mut bounds, |a, b| merge_hist(a, b), |h| block_cost(h)),
    };
    let k = first.len();
    let table_of = if k > 1 {
        let mut group = vec![0u8; nb];
        for (g, w) in first.iter().zip(first.iter().skip(1).chain([&nb])).enumerate() {
            group[*w.0..*w.1].fill(g as u8);
        }
        let table: Vec<u8> = bucket_of.iter().map(|&b| group[b as usize]).collect();
        cv.iter().map(|&c| table[c as usize]).collect()
    } else {
        Vec::new()
    };
    Contexts { thresholds: bounds, table_of, hists }
}

/// Table index of every context value below `range`.
fn ctx_map(thresholds: &[u16], range: usize) -> Vec<u8> {
    let mut map = vec![0u8; range];
    let mut k = 0usize;
    for (v, m) in map.iter_mut().enumerate() {
        while k < thresholds.len() && thresholds[k] as usize <= v {
            k += 1;
        }
        *m = k as u8;
    }
    map
}

/// Encoder entry of one symbol of one table. The state update `x -> (x / f) << p | x % f + cum`
/// is computed as `x + cum + q * (2^p - f)` with `q = x / f` from a multiplication by the
/// rounded-up reciprocal `m = ceil(2^(32 + l) / f)` (`l = ceil(log2 f)`, so `2^32 <= m < 2^33`;
/// `rcp` holds `m - 2^32`), which is exact for every 32-bit `x` (Granlund and Montgomery,
/// "Division by invariant integers using multiplication", 1994, theorem 4.2).
#[derive(Clone, Copy, Default)]
struct EncSym {
    rcp: u32,
    freq: u32,
    cum: u16,
    cmpl: u16,
    l: u8,
    /// `32 - p`: states with `x >> renorm >= freq` are renormalized first.
    renorm: u8,
}

impl EncSym {
    fn new(f: u32, cum: u32, p: u32) -> EncSym {
        let l = ceil_log2(f as u64);
        let m = (1u128 << (32 + l)).div_ceil(f as u128);
        debug_assert!((1 << 32..1 << 33).contains(&m) && cum < 1 << 16 && (1 << p) - f < 1 << 16);
        EncSym {
            rcp: (m - (1 << 32)) as u32,
            freq: f,
            cum: cum as u16,
            cmpl: ((1u32 << p) - f) as u16,
            l: l as u8,
            renorm: (32 - p) as u8,
        }
    }

    #[inline(always)]
    fn quotient(&self, x: u32) -> u32 {
        ((((x as u64 * self.rcp as u64) >> 32) + x as u64) >> self.l) as u32
    }

    /// One symbol: renormalize into `words[*len]` (one word at most per symbol), then code.
    /// Branch-free: whether a word goes out is as good as random, so the word is always
    /// stored and `len` advances by 0 or 1.
    #[inline(always)]
    fn put(&self, x: &mut u32, words: &mut [u16], len: &mut usize) {
        let need = (*x >> self.renorm >= self.freq) as u32;
        words[*len] = *x as u16;
        *len += need as usize;
        *x >>= need << 4;
        let q = self.quotient(*x);
        *x = x.wrapping_add(self.cum as u32).wrapping_add(q.wrapping_mul(self.cmpl as u32));
    }
}

/// Runs the coder over symbols `n - 1` down to 0 (`entry(i)`: symbol i's entry); symbol i is coded
/// by state `i & 3`. Returns the final states and the renormalization words in the order written.
#[inline(always)]
fn code_symbols<'e>(n: usize, entry: impl Fn(usize) -> &'e EncSym) -> ([u32; 4], Vec<u16>) {
    let mut states = [L; 4];
    let mut words: Vec<u16> = vec![0; n + 1];
    let mut len = 0usize;
    let n4 = n & !3;
    for i in (n4..n).rev() {
        entry(i).put(&mut states[i & 3], &mut words, &mut len);
    }
    let [mut x0, mut x1, mut x2, mut x3] = states;
    for i in (0..n4).step_by(4).rev() {
        entry(i + 3).put(&mut x3, &mut words, &mut len);
        entry(i + 2).put(&mut x2, &mut words, &mut len);
        entry(i + 1).put(&mut x1, &mut words, &mut len);
        entry(i).put(&mut x0, &mut words, &mut len);
    }
    words.truncate(len);
    ([x0, x1, x2, x3], words)
}

/// What the encoder decides before coding: the block's header (context thresholds and tables),
/// the encoder entries, and the estimated bits of the coded symbols.
struct Prepared {
    header: Vec<u8>,
    k: usize,
    compact: bool,
    rank: Vec<u16>,
    stride: usize,
    enc: Vec<EncSym>,
    table_of: Vec<u8>,
    data_bits: f64,
}

/// `with_enc`: also the encoder entries (an estimate needs only the header and the bits).
fn prepare(symbols: &[u16], ctx: Ctx, with_enc: bool) -> Prepared {
    assert!(!symbols.is_empty());
    if let Ctx::Side(s) = ctx {
        assert_eq!(s.len(), symbols.len());
    }
    let alphabet = *symbols.iter().max().unwrap() as usize + 1;
    let Contexts { thresholds, table_of, hists } = choose_contexts(symbols, ctx, alphabet);
    let k = hists.len();
    let mut w = BitWriter::new();
    w.gamma(k as u64);
    let mut prev = 0u64;
    for &t in &thresholds {
        w.gamma(t as u64 - prev);
        prev = t as u64;
    }
    // Encoder entries of table c at c * stride: indexed by the symbol itself when the tables are
    // small, else by the symbol's rank among the block's symbols.
    let compact = with_enc && k > 1 && k * alphabet > 1 << 16;
    let rank: Vec<u16> = if compact {
        let mut seen = vec![false; alphabet];
        hists.iter().flatten().for_each(|h| seen[h.0 as usize] = true);
        let mut rank = vec![0u16; alphabet];
        // At most 2^16 symbols are used, so ranks fit in u16.
        for (r, s) in (0..alphabet).filter(|&s| seen[s]).enumerate() {
            rank[s] = r as u16;
        }
        rank
    } else {
        Vec::new()
    };
    let stride = match (with_enc, compact) {
        (false, _) => 0,
        (true, true) => rank.iter().max().map_or(0, |&r| r as usize + 1),
        (true, false) => alphabet,
    };
    let mut enc: Vec<EncSym> = vec![EncSym::default(); k * stride];
    let mut data_bits = 0f64;
    for (c, hist) in hists.iter().enumerate() {
        let hist: &[(u16, u64)] = if hist.is_empty() { &[(0, 1)] } else { hist };
        let (table, qs, r_log, _) = build_table(hist);
        write_table(&mut w, &table, &qs, r_log);
        let mut cum = 0u32;
        for (&s, &f) in table.syms.iter().zip(&table.freqs).filter(|_| with_enc) {
            if (s as usize) < alphabet {
                let j = if compact { rank[s as usize] as usize } else { s as usize };
                enc[c * stride + j] = EncSym::new(f, cum, table.prob_bits);
            }
            cum += f;
        }
        for (h, &f) in hist.iter().zip(&table.freqs) {
            data_bits += h.1 as f64 * (table.prob_bits as f64 - (f as f64).log2());
        }
    }
    Prepared { header: w.finish(), k, compact, rank, stride, enc, table_of, data_bits }
}

/// The block's length in bytes as [`encode`] would write it, with the coded symbols estimated
/// from the tables (within a few bytes; the search compares candidates with it).
pub fn estimated_len(symbols: &[u16], ctx: Ctx) -> usize {
    match ctx {
        Ctx::Split(d) => return estimated_len(&coded_order(symbols), Ctx::Back(4 * d)),
        Ctx::Pop(d) => {
            let coded = coded_order(symbols);
            return estimated_len(&coded, Ctx::Side(&pop_values(&coded, d)));
        }
        _ => {}
    }
    let p = prepare(symbols, ctx, false);
    let words = (p.data_bits / 16.0).ceil() as usize;
    p.header.len() + (64 - (words as u64 | 1).leading_zeros() as usize).div_ceil(7) + 16 + 2 * words
}

/// Encodes `symbols` (at least one) and appends the block to `out`.
pub fn encode(symbols: &[u16], ctx: Ctx, out: &mut Vec<u8>) {
    match ctx {
        Ctx::Split(d) => return encode(&coded_order(symbols), Ctx::Back(4 * d), out),
        // The same block as a side context of these values: the decoder computes them itself.
        Ctx::Pop(d) => {
            let coded = coded_order(symbols);
            return encode(&coded, Ctx::Side(&pop_values(&coded, d)), out);
        }
        _ => {}
    }
    let Prepared { header, k, compact, rank, stride, enc, table_of, .. } = prepare(symbols, ctx, true);
    out.extend_from_slice(&header);

    let n = symbols.len();
    let (states, words) = if k == 1 {
        code_symbols(n, |i| &enc[symbols[i] as usize])
    } else if compact {
        code_symbols(n, |i| &enc[table_of[i] as usize * stride + rank[symbols[i] as usize] as usize])
    } else {
        code_symbols(n, |i| &enc[table_of[i] as usize * stride + symbols[i] as usize])
    };
    put_varint(out, words.len() as u64);
    for s in states {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.reserve(words.len() * 2);
    for &wd in words.iter().rev() {
        out.extend_from_slice(&wd.to_le_bytes());
    }
}

/// The coded order of [`Ctx::Split`]: the four runs of `n / 4` symbols interleaved, then the tail.
fn coded_order(symbols: &[u16]) -> Vec<u16> {
    let q = symbols.len() / 4;
    let mut out = Vec::with_capacity(symbols.len());
    for r in 0..q {
        out.extend([symbols[r], symbols[q + r], symbols[2 * q + r], symbols[3 * q + r]]);
    }
    out.extend_from_slice(&symbols[4 * q..]);
    out
}

/// Bits set in each 16-bit word, by byte.
static POPCOUNT: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u32).count_ones() as u8;
        i += 1;
    }
    t
};

/// The bits set in `v` (a table look-up per byte: the baseline x86-64 target has no `popcnt`).
#[inline(always)]
fn popcount(v: u16) -> u32 {
    POPCOUNT[(v & 0xFF) as usize] as u32 + POPCOUNT[(v >> 8) as usize] as u32
}

/// The context values of [`Ctx::Pop`] over a block in coded order.
fn pop_values(coded: &[u16], d: usize) -> Vec<u16> {
    let mut v = vec![0u16; coded.len()];
    for i in 4..coded.len() {
        let gone = if i >= 4 * (d + 1) { popcount(coded[i - 4 * (d + 1)]) } else { 0 };
        v[i] = (v[i - 4] as u32 + popcount(coded[i - 4]) - gone) as u16;
    }
    v
}

/// One used symbol of a decode table: its value, frequency - 1 and cumulative frequency.
#[derive(Clone, Copy, Default)]
#[repr(C, align(8))]
struct SymInfo {
    sym: u16,
    freq_m1: u16,
    cum: u16,
}

/// Where the table of one context value lives, and its precision.
#[derive(Clone, Copy, Default)]
struct TableRef {
    /// First slot of the table in [`Decoder::slots`].
    slots: u32,
    /// First symbol of the table in [`Decoder::syms`].
    syms: u32,
    prob_bits: u32,
    /// `2^prob_bits - 1`.
    mask: u32,
}

/// Decoder state shared by every step. Each slot holds the index of its symbol within its table
/// (a byte when every table has at most 256 symbols, so a table of 2^14 slots takes 16 KiB and the
/// tables of a block stay in the L2 cache); the table of each context value; and the
/// renormalization words followed by one zero word, so a refill needs no bounds branch (reading
/// past the end is detected once, after the loop).
struct Decoder<'a, I> {
    slots: &'a [I],
    syms: &'a [SymInfo],
    by_ctx: &'a [TableRef],
    words: &'a [u16],
    /// Index of the zero word after the last real one.
    end: usize,
}

impl<I: Copy + Into<usize>> Decoder<'_, I> {
    /// The table of context value `v`.
    #[inline(always)]
    fn table(&self, v: u16) -> TableRef {
        debug_assert!((v as usize) < self.by_ctx.len());
        // SAFETY: context values are decoded symbols (at most the largest symbol of the tables) or
        // side values, and `by_ctx` has an entry for every value up to the largest of either
        // (`decode` sizes it so); a single table is looked up with value 0 only.
        unsafe { *self.by_ctx.get_unchecked(v as usize) }
    }

    /// Decodes one symbol with state `x` and table `t`; `w` is the next word index.
    #[inline(always)]
    fn step(&self, x: &mut u32, t: TableRef, w: &mut usize) -> u16 {
        let slot = *x & t.mask;
        let at = (t.slots + slot) as usize;
        debug_assert!(at < self.slots.len());
        // SAFETY: the table starting at `t.slots` has 2^prob_bits slots (its frequencies sum to
        // 2^prob_bits, see `normalize` and `read_table`) and `slot < 2^prob_bits`.
        let idx = t.syms as usize + unsafe { *self.slots.get_unchecked(at) }.into();
        debug_assert!(idx < self.syms.len());
        // SAFETY: each slot holds the index of a symbol of its own table, whose symbols start at
        // `t.syms` in `syms`.
        let e = unsafe { *self.syms.get_unchecked(idx) };
        let y = (e.freq_m1 as u32 + 1) * (*x >> t.prob_bits) + (slot - e.cum as u32);
        // Branch-free refill: the branch would be taken about half the time, at random (an
        // `if` here compiles to a branch, so the choice is arithmetic: shift by 16 or 0, and
        // the word masked to 0 when it is not needed).
        let need = (y < L) as u32;
        debug_assert!(self.end < self.words.len());
        // SAFETY: `end` indexes the zero word after the last real one (`decode` builds `words`
        // so), and the index is at most `end`.
        let word = unsafe { *self.words.get_unchecked((*w).min(self.end)) } as u32;
        *x = (y << (need << 4)) | (word & need.wrapping_neg());
        *w += need as usize;
        e.sym
    }

    /// Decodes `out.len()` symbols; `table(out, i)` gives symbol `i`'s table from the symbols
    /// before it. Four states in registers, one symbol of each per round.
    #[inline(always)]
    fn run(&self, states: &mut [u32; 4], out: &mut [u16], table: impl Fn(&[u16], usize) -> TableRef) -> usize {
        self.run_from(states, out, 0, 0, table)
    }

    /// [`Self::run`] from symbol `start` on (a multiple of 4, so state `i & 3` codes symbol `i`),
    /// reading words from index `w` on; returns the index of the next word.
    #[inline(always)]
    fn run_from(
        &self,
        states: &mut [u32; 4],
        out: &mut [u16],
        start: usize,
        mut w: usize,
        table: impl Fn(&[u16], usize) -> TableRef,
    ) -> usize {
        debug_assert!(start.is_multiple_of(4));
        let [mut x0, mut x1, mut x2, mut x3] = *states;
        let n = out.len();
        let mut i = start;
        while i + 4 <= n {
            out[i] = self.step(&mut x0, table(out, i), &mut w);
            out[i + 1] = self.step(&mut x1, table(out, i + 1), &mut w);
            out[i + 2] = self.step(&mut x2, table(out, i + 2), &mut w);
            out[i + 3] = self.step(&mut x3, table(out, i + 3), &mut w);
            i += 4;
        }
        let mut tail = [x0, x1, x2, x3];
        while i < n {
            out[i] = self.step(&mut tail[i & 3], table(out, i), &mut w);
            i += 1;
        }
        *states = tail;
        w
    }

    /// Runs the decoder with the context kind of the block. With one table, the table is a
    /// loop constant rather than looked up for every symbol.
    fn decode(&self, states: &mut [u32; 4], out: &mut [u16], ctx: Ctx, one_table: bool) -> usize {
        let first = self.table(0);
        match ctx {
            Ctx::Split(d) | Ctx::Pop(d) if one_table => self.run_split(states, out, d, |_| first),
            Ctx::Split(d) => self.run_split(states, out, d, |v| self.table(v)),
            Ctx::Pop(d) => self.run_pop(states, out, d),
            _ if one_table => self.run(states, out, |_, _| first),
            Ctx::None => self.run(states, out, |_, _| first),
            // Symbols before the first `d` have context 0; afterwards no branch is needed.
            Ctx::Back(d) if d >= 4 && out.len() > d && d % 4 == 0 => {
                let (head, _) = out.split_at_mut(d);
                let w = self.run(states, head, |_, _| first);
                self.run_from(states, out, d, w, |o, i| self.table(o[i - d]))
            }
            Ctx::Back(d) => self.run(states, out, |o, i| if i >= d { self.table(o[i - d]) } else { first }),
            Ctx::Side(s) => self.run(states, out, |_, i| self.table(s[i])),
        }
    }

    /// [`Ctx::Split`]: the four runs decoded side by side into their places (state `j` writes
    /// run `j`), each symbol's table from the one `d` earlier in its run; then the tail, whose
    /// symbol `t` has the context of run `t`'s symbol `q - d` (its coded position less `4 d`).
    #[inline(always)]
    fn run_split(&self, states: &mut [u32; 4], out: &mut [u16], d: usize, table: impl Fn(u16) -> TableRef) -> usize {
        let first = self.table(0);
        let n = out.len();
        let q = n / 4;
        let [mut x0, mut x1, mut x2, mut x3] = *states;
        let mut w = 0usize;
        let o = out.as_mut_ptr();
        // SAFETY (both loops): `r < q`, so every index is below `4 q <= n`, and `r - d` is taken
        // only for `r >= d`.
        unsafe {
            for r in 0..d.min(q) {
                *o.add(r) = self.step(&mut x0, first, &mut w);
                *o.add(q + r) = self.step(&mut x1, first, &mut w);
                *o.add(2 * q + r) = self.step(&mut x2, first, &mut w);
                *o.add(3 * q + r) = self.step(&mut x3, first, &mut w);
            }
            for r in d.min(q)..q {
                *o.add(r) = self.step(&mut x0, table(*o.add(r - d)), &mut w);
                *o.add(q + r) = self.step(&mut x1, table(*o.add(q + r - d)), &mut w);
                *o.add(2 * q + r) = self.step(&mut x2, table(*o.add(2 * q + r - d)), &mut w);
                *o.add(3 * q + r) = self.step(&mut x3, table(*o.add(3 * q + r - d)), &mut w);
            }
        }
        let mut xs = [x0, x1, x2, x3];
        for t in 0..n - 4 * q {
            let table = if q >= d { table(out[t * q + q - d]) } else { first };
            out[4 * q + t] = self.step(&mut xs[t], table, &mut w);
        }
        *states = xs;
        w
    }

    /// [`Ctx::Pop`]: the four runs decoded side by side into their places, each with the bits
    /// set in its last `d` symbols as the context; then the tail, whose symbol `t` has run `t`'s
    /// count after its last symbol (the `d` coded positions `4 k` before it are run `t`'s last).
    #[inline(always)]
    fn run_pop(&self, states: &mut [u32; 4], out: &mut [u16], d: usize) -> usize {
        let n = out.len();
        let q = n / 4;
        let [mut x0, mut x1, mut x2, mut x3] = *states;
        let mut c = [0u32; 4];
        let mut w = 0usize;
        let o = out.as_mut_ptr();
        // SAFETY: `r < q`, so every index is below `4 q <= n`, and `r - d` is taken only for
        // `r >= d`. A count is at most `16 d`, below the length of `by_ctx` (`decode` sizes it so).
        unsafe {
            for r in 0..q {
                let s = [
                    self.step(&mut x0, self.table(c[0] as u16), &mut w),
                    self.step(&mut x1, self.table(c[1] as u16), &mut w),
                    self.step(&mut x2, self.table(c[2] as u16), &mut w),
                    self.step(&mut x3, self.table(c[3] as u16), &mut w),
                ];
                for (j, (cj, sj)) in c.iter_mut().zip(s).enumerate() {
                    *o.add(j * q + r) = sj;
                    *cj += popcount(sj);
                    if r >= d {
                        *cj -= popcount(*o.add(j * q + r - d));
                    }
                }
            }
        }
        let mut xs = [x0, x1, x2, x3];
        for t in 0..n - 4 * q {
            out[4 * q + t] = self.step(&mut xs[t], self.table(c[t] as u16), &mut w);
        }
        *states = xs;
        w
    }
}

/// Slot tables: for each table, the index of each slot's symbol within the table.
fn slot_indices<I: Copy + Default + TryFrom<usize>>(tables: &[Table]) -> Vec<I> {
    let mut slots: Vec<I> = Vec::with_capacity(tables.iter().map(|t| 1usize << t.prob_bits).sum());
    for t in tables {
        for (j, &f) in t.freqs.iter().enumerate() {
            let j = I::try_from(j).unwrap_or_default();
            slots.extend(std::iter::repeat_n(j, f as usize));
        }
    }
    slots
}

/// The number of frequency tables (contexts that the encoder kept) of a block.
pub fn block_tables(block: &[u8]) -> Result<usize> {
    Ok(BitReader::new(block).gamma()? as usize)
}

/// Decodes `n` symbols from the start of `input`; returns the bytes consumed.
pub fn decode(input: &[u8], n: usize, ctx: Ctx, out: &mut Vec<u16>) -> Result<usize> {
    if let Ctx::Side(s) = ctx {
        if s.len() != n {
            return Err(Error::corrupt("rANS: context stream length mismatch"));
        }
    }
    if matches!(ctx, Ctx::Split(0) | Ctx::Back(0) | Ctx::Pop(0)) {
        return Err(Error::corrupt("rANS: zero context distance"));
    }
    if matches!(ctx, Ctx::Pop(d) if d > MAX_POP) {
        return Err(Error::corrupt("rANS: popcount window too long"));
    }
    let mut r = BitReader::new(input);
    let k = r.gamma()?;
    if k as usize > MAX_CONTEXTS || (k > 1 && matches!(ctx, Ctx::None)) {
        return Err(Error::corrupt("rANS: bad context count"));
    }
    let k = k as usize;
    let mut thresholds = Vec::with_capacity(k - 1);
    let mut prev = 0u64;
    for _ in 1..k {
        let t = prev + r.gamma()?;
        if t > u16::MAX as u64 {
            return Err(Error::corrupt("rANS: context threshold out of range"));
        }
        thresholds.push(t as u16);
        prev = t;
    }
    let mut tables: Vec<Table> = Vec::with_capacity(k);
    let mut refs: Vec<TableRef> = Vec::with_capacity(k);
    let mut syms: Vec<SymInfo> = Vec::new();
    let mut nslots = 0usize;
    for _ in 0..k {
        let t = read_table(&mut r)?;
        refs.push(TableRef {
            slots: nslots as u32,
            syms: syms.len() as u32,
            prob_bits: t.prob_bits,
            mask: (1u32 << t.prob_bits) - 1,
        });
        let mut cum = 0u32;
        for (&s, &f) in t.syms.iter().zip(&t.freqs) {
            syms.push(SymInfo { sym: s, freq_m1: (f - 1) as u16, cum: cum as u16 });
            cum += f;
        }
        nslots += 1 << t.prob_bits;
        tables.push(t);
    }
    let max_sym = syms.iter().map(|e| e.sym).max().unwrap_or(0);
    let mut br = ByteReader::new(&input[r.bytes_consumed()..]);
    let nwords = br.len(br.remaining() as u64 / 2)?;
    let mut states = [0u32; 4];
    for s in &mut states {
        *s = br.u32_le()?;
    }
    let data = br.take(nwords * 2)?;
    let consumed = r.bytes_consumed() + br.pos();
    let mut words: Vec<u16> = Vec::with_capacity(nwords + 1);
    words.extend(data.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])));
    words.push(0);
    // Context values are decoded symbols (all in the tables) or side values: one table
    // reference per possible value.
    let by_ctx: Vec<TableRef> = if k > 1 {
        let range = match ctx {
            Ctx::Side(s) => s.iter().copied().max().unwrap_or(0) as usize + 1,
            // A count of set bits in `d` symbols of at most 16 bits.
            Ctx::Pop(d) => 16 * d + 1,
            _ => max_sym as usize + 1,
        };
        ctx_map(&thresholds, range).into_iter().map(|c| refs[c as usize]).collect()
    } else {
        refs.clone()
    };
    let base = out.len();
    out.resize(base + n, 0);
    let dst = &mut out[base..];
    let used = if tables.iter().all(|t| t.syms.len() <= 256) {
        let slots = slot_indices::<u8>(&tables);
        Decoder { slots: &slots, syms: &syms, by_ctx: &by_ctx, words: &words, end: nwords }.decode(
            &mut states,
            dst,
            ctx,
            k == 1,
        )
    } else {
        let slots = slot_indices::<u16>(&tables);
        Decoder { slots: &slots, syms: &syms, by_ctx: &by_ctx, words: &words, end: nwords }.decode(
            &mut states,
            dst,
            ctx,
            k == 1,
        )
    };
    if used != nwords || states.iter().any(|&s| s != L) {
        out.truncate(base);
        return Err(Error::corrupt(if used > nwords {
            "rANS: data ends early"
        } else {
            "rANS: stream does not end in the initial state"
        }));
    }
    Ok(consumed)
}

#[cfg(test)]
mod tests;
