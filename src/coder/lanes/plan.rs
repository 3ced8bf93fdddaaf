//! The encoder's choice of tables for a block: the escape threshold, the log-count resolution,
//! the precision and the context classes, each by estimated size.

use super::model::{build_model, classes_fit, q_max, spec_bits, Model, Spec};
use super::{Ctx, CTX_MIN_GAIN, LANES, MAX_CLASSES, MAX_PREC, MAX_RANKS, MAX_SYMBOLS, MIN_CTX_SYMBOLS, MIN_PREC};
use crate::coder::{counts_cost, log2_approx};
use crate::error::{Error, Result};
use std::cell::Cell;

/// log2 of 1..=4096 (index 0 unused).
pub(super) fn log2_table() -> &'static [f64] {
    static T: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    T.get_or_init(|| (0..=4096u32).map(|f| if f == 0 { 0.0 } else { log2_approx(f as f64) }).collect())
}

/// The threshold on log-counts `q` that escapes exactly the symbols of `esc_set`, if `q`
/// separates them (every escaped one below every coded one).
pub(super) fn escape_threshold(q: &[u32], esc_set: &[bool]) -> Option<u32> {
    let lo = q.iter().zip(esc_set).filter(|x| *x.1).map(|x| *x.0).max();
    let hi = q.iter().zip(esc_set).filter(|x| !*x.1).map(|x| *x.0).min();
    match (lo, hi) {
        (None, _) => Some(0),
        (Some(l), Some(h)) if l < h => Some(h),
        (Some(l), None) => Some(l + 1),
        _ => None,
    }
}

/// Quantized log-count of a count >= 1.
pub(super) fn quantize(c: u64, r_log: u32) -> u32 {
    ((log2_approx(c as f64) * (1u32 << r_log) as f64).round() as u32).min(q_max(r_log))
}

/// Estimated bits of `counts` (per rank) coded with `freqs` at `prec`.
pub(super) fn data_bits(counts: &[u64], freqs: &[u32], prec: u32) -> f64 {
    let lg = log2_table();
    counts.iter().zip(freqs).filter(|x| *x.0 > 0).map(|(&c, &f)| c as f64 * (prec as f64 - lg[f as usize])).sum()
}

/// The encoder's choice for a block.
pub(super) struct Plan {
    pub(super) spec: Option<Spec>,
    pub(super) model: Model,
    /// Estimated total bits (tables and data; for comparisons only).
    pub(super) est: f64,
}

/// Highest precision for `k` classes.
pub(super) fn max_prec(k: usize) -> u32 {
    (MIN_PREC..=MAX_PREC).rev().find(|&p| classes_fit(k, p)).unwrap_or(MIN_PREC)
}

/// Bytes after the table bits, except the words: varints, states, escape stream.
pub(super) fn fixed_bytes(n: usize, model: &Model, words: usize, escapes: u64) -> usize {
    let varint_len = |v: u64| (64 - (v | 1).leading_zeros() as usize).div_ceil(7);
    let mut b = varint_len(words as u64) + 4 * n.min(LANES);
    if !model.escs.is_empty() {
        b += varint_len(escapes) + (escapes as u128 * model.esc_bits() as u128).div_ceil(8) as usize;
    }
    b
}

/// One-class plan for given resolution, precision and escape threshold; with its estimate.
pub(super) fn plan_one(hist: &[(u16, u64)], q: &[u32], r_log: u32, prec: u32, q_t: u32, n: usize) -> Option<Plan> {
    let spec = Spec {
        syms: hist.iter().map(|h| h.0).collect(),
        prec,
        r_log,
        q: q.to_vec(),
        q_t,
        thresholds: Vec::new(),
        class_v: Vec::new(),
    };
    let model = build_model(&spec).ok()?;
    let mut counts: Vec<u64> = Vec::with_capacity(model.ranks());
    let mut esc = 0u64;
    for (h, &qj) in hist.iter().zip(q) {
        if qj < q_t {
            esc += h.1;
        } else {
            counts.push(h.1);
        }
    }
    if !model.escs.is_empty() {
        counts.push(esc);
    }
    // (The escape indices are part of the fixed bytes.)
    let est = data_bits(&counts, &model.freqs[0], prec)
        + spec_bits(&spec) as f64
        + 8.0 * fixed_bytes(n, &model, 0, esc) as f64;
    Some(Plan { spec: Some(spec), model, est })
}

/// The best one-class plan: escape threshold, resolution and precision by estimated size.
pub(super) fn plan_order0(hist: &[(u16, u64)], n: usize, k_prec: u32) -> Plan {
    let u = hist.len();
    let qs = |r: u32| -> Vec<u32> { hist.iter().map(|h| quantize(h.1, r)).collect() };
    // Escape thresholds: none, then escaping ever more of the rarest symbols while they stay a
    // small part of the block (escapes take the decoder's slow path), and at least enough for
    // the ranks to fit.
    let candidates = |q: &[u32]| -> Vec<u32> {
        let mut order: Vec<(u32, u64)> = q.iter().zip(hist).map(|(&q, h)| (q, h.1)).collect();
        order.sort_unstable();
        let budget = (n as u64 / 128).max(16);
        let mut out = Vec::new();
        let (mut escaped, mut esc_count, mut j) = (0usize, 0u64, 0usize);
        loop {
            // This threshold escapes `order[..j]`.
            let qt = if escaped == 0 {
                0
            } else if j < u {
                order[j].0
            } else {
                order[u - 1].0 + 1
            };
            if u - escaped + (escaped > 0) as usize <= MAX_RANKS {
                out.push(qt);
            }
            if j == u {
                break;
            }
            let qv = order[j].0;
            while j < u && order[j].0 == qv {
                escaped += 1;
                esc_count += order[j].1;
                j += 1;
            }
            if !out.is_empty() && esc_count > budget {
                break;
            }
        }
        out
    };
    let mut best: Option<Plan> = None;
    let consider = |p: Option<Plan>, best: &mut Option<Plan>| {
        if let Some(p) = p {
            if best.as_ref().is_none_or(|b| p.est < b.est) {
                *best = Some(p);
            }
        }
    };
    let q3 = qs(3);
    // The estimate is about unimodal in the threshold: stop once it has grown twice in a row.
    let (mut last, mut worse) = (f64::MAX, 0);
    for qt in candidates(&q3) {
        let Some(p) = plan_one(hist, &q3, 3, k_prec, qt, n) else { continue };
        worse = if p.est > last { worse + 1 } else { 0 };
        last = p.est;
        consider(Some(p), &mut best);
        if worse >= 2 {
            break;
        }
    }
    // Coarser log-counts for the chosen escape set (cheaper tables for small blocks).
    let chosen = best.as_ref().and_then(|b| b.spec.as_ref()).map_or(0, |s| s.q_t);
    let esc_set: Vec<bool> = q3.iter().map(|&q| q < chosen).collect();
    for r in [2u32, 1] {
        let q = qs(r);
        let Some(qt) = escape_threshold(&q, &esc_set) else { continue };
        consider(plan_one(hist, &q, r, k_prec, qt, n), &mut best);
    }
    // Lower precisions for small blocks, where building the decode table costs about as much
    // as decoding: the least `estimate * (1 + 2^p / 64 n)` (a table slot costs about half a
    // symbol's decoding; 1% of size is worth about a third of the decoding time).
    let mut best = best.expect("some escape threshold fits");
    if n < 1 << 17 {
        let score = |p: &Plan| p.est * (1.0 + (1u64 << p.model.prec) as f64 / (64.0 * n as f64));
        let b = best.spec.clone().expect("a spec");
        for p in MIN_PREC..k_prec {
            if let Some(c) = plan_one(hist, &b.q, b.r_log, p, b.q_t, n) {
                if score(&c) < score(&best) {
                    best = c;
                }
            }
        }
    }
    best
}

/// Adds context classes (thresholds on the rank of symbol `i - d`) to a one-class plan when
/// they pay for their tables.
pub(super) fn plan_ctx(symbols: &[u16], hist: &[(u16, u64)], base: Plan, d: usize, pairs: Option<&BytePairs>) -> Plan {
    let n = symbols.len();
    let model = &base.model.clone();
    let ranks = model.ranks();
    if n < MIN_CTX_SYMBOLS || ranks < 2 || d >= n {
        return base;
    }
    let spec0 = &base.spec.clone().expect("two symbols or more");
    let alphabet = hist.last().map_or(0, |h| h.0 as usize + 1);
    let rank_of = rank_table(model, alphabet);
    let (mut starts, mut hists) = with_pair_counts(symbols, d, ranks, &rank_of, pairs.map(|p| (p, hist)), |h2| {
        let row = |c: usize| &h2[c * ranks..(c + 1) * ranks];
        // Quantile buckets of the context rank, then merges of neighbours while the estimate shrinks.
        let min_fill = (n / 64).max(512) as u64;
        let mut starts: Vec<usize> = vec![0];
        let mut fill = 0u64;
        for c in 0..ranks {
            let t: u64 = row(c).iter().map(|&x| x as u64).sum();
            if t > 0 && fill >= min_fill {
                starts.push(c);
                fill = 0;
            }
            fill += t;
        }
        let hists: Vec<Vec<u64>> = starts
            .iter()
            .zip(starts.iter().skip(1).chain([&ranks]))
            .map(|(&a, &b)| {
                let mut h = vec![0u64; ranks];
                for c in a..b {
                    for (x, &y) in h.iter_mut().zip(row(c)) {
                        *x += y as u64;
                    }
                }
                h
            })
            .collect();
        (starts, hists)
    });
    // Each bucket's cost and the cost change of merging it with the next, updated locally.
    let cost: Vec<f64> = hists.iter().map(|h| counts_cost(h.iter().copied())).collect();
    let merged_cost = |a: &[u64], b: &[u64]| {
        let m: Vec<u64> = a.iter().zip(b).map(|(a, b)| a + b).collect();
        counts_cost(m.iter().copied())
    };
    let (mut cost, mut delta) = (cost, Vec::new());
    for i in 0..hists.len().saturating_sub(1) {
        delta.push(merged_cost(&hists[i], &hists[i + 1]) - cost[i] - cost[i + 1]);
    }
    loop {
        let mut best: Option<(usize, f64)> = None;
        for (i, &d) in delta.iter().enumerate() {
            if (d < 0.0 || hists.len() > MAX_CLASSES) && best.is_none_or(|b| d < b.1) {
                best = Some((i, d));
            }
        }
        let Some((i, _)) = best else { break };
        let b = hists.remove(i + 1);
        for (x, y) in hists[i].iter_mut().zip(b) {
            *x += y;
        }
        starts.remove(i + 1);
        cost[i] = counts_cost(hists[i].iter().copied());
        cost.remove(i + 1);
        delta.remove(i);
        if i > 0 {
            delta[i - 1] = merged_cost(&hists[i - 1], &hists[i]) - cost[i - 1] - cost[i];
        }
        if i + 1 < hists.len() {
            delta[i] = merged_cost(&hists[i], &hists[i + 1]) - cost[i] - cost[i + 1];
        }
    }
    let k = hists.len();
    if k == 1 {
        return base;
    }
    let prec = max_prec(k);
    let esc = !model.escs.is_empty();
    let n_esc: u64 = hists.iter().map(|h| if esc { h[ranks - 1] } else { 0 }).sum();
    let bar = base.est * (1.0 - 1.0 / CTX_MIN_GAIN);
    let mut best = base;
    for r_log in [3u32, 2, 1] {
        let class_v: Vec<Vec<u32>> = hists
            .iter()
            .map(|h| h.iter().map(|&c| if c == 0 { 0 } else { quantize(c, r_log) + 1 }).collect())
            .collect();
        // The pooled log-counts at this resolution, with the same escaped symbols.
        let q: Vec<u32> = hist.iter().map(|h| quantize(h.1, r_log)).collect();
        let esc_set: Vec<bool> = spec0.q.iter().map(|&x| x < spec0.q_t).collect();
        let Some(q_t) = escape_threshold(&q, &esc_set) else { continue };
        let spec = Spec {
            syms: spec0.syms.clone(),
            prec,
            r_log,
            q,
            q_t,
            thresholds: starts[1..].iter().map(|&s| s as u16).collect(),
            class_v,
        };
        let Ok(m) = build_model(&spec) else { continue };
        let est = hists.iter().zip(&m.freqs).map(|(h, f)| data_bits(h, f, prec)).sum::<f64>()
            + spec_bits(&spec) as f64
            + 8.0 * fixed_bytes(n, &m, 0, n_esc) as f64;
        if est < bar && est < best.est {
            best = Plan { spec: Some(spec), model: m, est };
        }
    }
    best
}

/// Runs `f` on the counts per (rank of symbol `i - d`, rank of symbol `i`), `ranks x ranks`
/// (context rank 0 for `i < d`): from `pairs` and their histogram where they were counted,
/// else counted here ([`count_pairs`]), in a per-thread buffer (up to a megabyte, not allocated
/// and faulted in for each block).
pub(super) fn with_pair_counts<R>(
    symbols: &[u16],
    d: usize,
    ranks: usize,
    rank_of: &[u8],
    pairs: Option<(&BytePairs, &[(u16, u64)])>,
    f: impl FnOnce(&[u32]) -> R,
) -> R {
    let n = symbols.len();
    let cells = ranks * ranks;
    if let Some((pairs, hist)) = pairs {
        let mut buf = H2.take();
        buf.clear();
        buf.resize(cells, 0);
        pairs.by_rank(hist, rank_of, ranks, &mut buf);
        let r = f(&buf);
        H2.set(buf);
        return r;
    }
    let mut buf = H2.take();
    let rank: Vec<u32> = rank_of.iter().map(|&r| r as u32).collect();
    let row_of: Vec<u32> = rank.iter().map(|&r| r * ranks as u32).collect();
    let (prev, cur) = (&symbols[..n - d], &symbols[d..]);
    count_pairs(&mut buf, cells, prev, cur, |p, s| (row_of[p as usize] + rank[s as usize]) as usize);
    for &s in &symbols[..d] {
        buf[rank[s as usize] as usize] += 1;
    }
    let r = f(&buf);
    H2.set(buf);
    r
}

/// Counts the pairs `(prev[i], cur[i])` in cells `cell(prev[i], cur[i])` (below `cells`) of
/// `buf`, which it leaves `cells` long. Partial counts while they stay small enough for the L2
/// cache (runs of one pair do not wait on each other's increments), then merged into the first.
pub(super) fn count_pairs(
    buf: &mut Vec<u32>,
    cells: usize,
    prev: &[u16],
    cur: &[u16],
    cell: impl Fn(u16, u16) -> usize + Copy,
) {
    let copies = match cells {
        0..=4096 => 4,
        4097..=65536 => 2,
        _ => 1,
    };
    buf.clear();
    buf.resize(copies * cells, 0);
    match copies {
        4 => count_copies::<4>(buf, cells, prev, cur, cell),
        2 => count_copies::<2>(buf, cells, prev, cur, cell),
        _ => count_copies::<1>(buf, cells, prev, cur, cell),
    }
    let (first, rest) = buf.split_at_mut(cells);
    for other in rest.chunks_exact(cells) {
        for (a, &b) in first.iter_mut().zip(other) {
            *a += b;
        }
    }
    buf.truncate(cells);
}

/// Adds pair `i` to partial count `i % C` of [`count_pairs`].
pub(super) fn count_copies<const C: usize>(
    t: &mut [u32],
    cells: usize,
    prev: &[u16],
    cur: &[u16],
    cell: impl Fn(u16, u16) -> usize,
) {
    let whole = cur.len() - cur.len() % C;
    for (p, s) in prev[..whole].chunks_exact(C).zip(cur[..whole].chunks_exact(C)) {
        for c in 0..C {
            t[c * cells + cell(p[c], s[c])] += 1;
        }
    }
    for (&p, &s) in prev[whole..].iter().zip(&cur[whole..]) {
        t[cell(p, s)] += 1;
    }
}

/// Rank of every symbol value below `alphabet` (escaped symbols: the escape's rank).
pub(super) fn rank_table(model: &Model, alphabet: usize) -> Vec<u8> {
    let mut rank = vec![0u8; alphabet];
    for (r, &s) in model.coded.iter().enumerate() {
        if (s as usize) < alphabet {
            rank[s as usize] = r as u8;
        }
    }
    let c = model.coded.len();
    for &s in &model.escs {
        if (s as usize) < alphabet {
            rank[s as usize] = c as u8;
        }
    }
    rank
}

/// The encoder's context distance; `Err(Invalid)` when out of range.
pub(super) fn enc_distance(ctx: Ctx) -> Result<usize> {
    ctx.distance().ok_or_else(|| Error::invalid(format!("lanes: bad context {ctx:?}")))
}

/// The plan of a block of `symbols` (at least one), and their alphabet (the largest symbol
/// plus one). With a context over at most [`PAIR_SPAN`] symbol values, one pass counts the pairs
/// by symbol value ([`BytePairs`]), which give both the histogram and the context counts.
pub(super) fn plan(symbols: &[u16], ctx: Ctx) -> Result<(Plan, usize)> {
    let n = symbols.len();
    let d = enc_distance(ctx)?;
    let (lo, hi) = symbols.iter().fold((u16::MAX, 0), |(lo, hi), &s| (lo.min(s), hi.max(s)));
    let (lo, alphabet) = (lo as usize, hi as usize + 1);
    if ctx != Ctx::None && alphabet - lo <= PAIR_SPAN && n >= MIN_CTX_SYMBOLS && d < n {
        return with_byte_pairs(symbols, d, lo, alphabet - lo, |pairs| {
            plan_with(symbols, ctx, pairs.histogram(), Some(pairs))
        });
    }
    plan_with(symbols, ctx, crate::coder::used_counts(symbols, alphabet), None)
}

/// [`plan`] from the histogram `hist` of `symbols` (and their pair counts, where counted).
pub(super) fn plan_with(
    symbols: &[u16],
    ctx: Ctx,
    hist: Vec<(u16, u64)>,
    pairs: Option<&BytePairs>,
) -> Result<(Plan, usize)> {
    let n = symbols.len();
    let d = enc_distance(ctx)?;
    let alphabet = hist.last().map_or(0, |h| h.0 as usize + 1);
    if hist.len() > MAX_SYMBOLS {
        return Err(Error::invalid(format!("lanes: {} distinct symbols (at most {MAX_SYMBOLS})", hist.len())));
    }
    if hist.len() == 1 {
        let model = Model {
            prec: MIN_PREC,
            coded: vec![hist[0].0],
            escs: Vec::new(),
            thresholds: Vec::new(),
            freqs: Vec::new(),
        };
        return Ok((Plan { spec: None, model, est: 0.0 }, alphabet));
    }
    let base = plan_order0(&hist, n, max_prec(1));
    let plan = match ctx {
        Ctx::None => base,
        Ctx::Prev | Ctx::Back(_) => plan_ctx(symbols, &hist, base, d, pairs),
    };
    Ok((plan, alphabet))
}

/// Most symbol values (from the smallest to the largest) of a context block whose pairs are
/// counted by symbol value ([`BytePairs`]): byte planes, and the exponents of bf16 and fp16.
pub(super) const PAIR_SPAN: usize = 256;

/// The pairs `(symbol i - d, symbol i)` of a block whose symbols lie in `lo..lo + span` (`span`
/// at most [`PAIR_SPAN`]), counted by symbol value ([`count_pairs`]), and the symbols `i < d`
/// (whose context is rank 0): the histogram is their sum by second symbol, and the context
/// counts by rank are their sum by the ranks of both, so the block is read once where a
/// histogram and then counts by rank read it twice and look every symbol up.
pub(super) struct BytePairs<'a> {
    pub(super) lo: usize,
    pub(super) span: usize,
    /// `span x span` counts, row `symbol i - d`, of symbols from `lo`.
    pub(super) counts: &'a [u32],
    pub(super) head: Vec<u64>,
}

thread_local! {
    /// The context histogram of [`with_pair_counts`].
    static H2: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
    /// The counts of [`BytePairs`].
    static PAIRS: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on the [`BytePairs`] of `symbols` (all in `lo..lo + span`, `span` at most
/// [`PAIR_SPAN`]) at distance `d` (below the block's length).
pub(super) fn with_byte_pairs<R>(
    symbols: &[u16],
    d: usize,
    lo: usize,
    span: usize,
    f: impl FnOnce(&BytePairs) -> R,
) -> R {
    debug_assert!(span <= PAIR_SPAN && d < symbols.len());
    let mut buf = PAIRS.take();
    let mut head = vec![0u64; span];
    for &s in &symbols[..d] {
        head[s as usize - lo] += 1;
    }
    let (prev, cur) = (&symbols[..symbols.len() - d], &symbols[d..]);
    // Cell `(p - lo) * span + s - lo`, as `p * span + s` less a constant.
    let off = lo * span + lo;
    count_pairs(&mut buf, span * span, prev, cur, |p, s| p as usize * span + s as usize - off);
    let r = f(&BytePairs { lo, span, counts: &buf, head });
    PAIRS.set(buf);
    r
}

impl BytePairs<'_> {
    /// Used symbols ascending with their counts (what `coder::used_counts` gives).
    pub(super) fn histogram(&self) -> Vec<(u16, u64)> {
        let mut total = self.head.clone();
        for row in self.counts.chunks_exact(self.span) {
            for (t, &c) in total.iter_mut().zip(row) {
                *t += c as u64;
            }
        }
        total.iter().enumerate().filter(|c| *c.1 > 0).map(|(s, &c)| ((self.lo + s) as u16, c)).collect()
    }

    /// Adds the counts by (rank of symbol `i - d`, rank of symbol `i`) to `h2` (`ranks x
    /// ranks`; the symbols `i < d` in row 0), as [`with_pair_counts`] counts them; `hist` is
    /// the histogram (no other symbol is in a pair).
    pub(super) fn by_rank(&self, hist: &[(u16, u64)], rank: &[u8], ranks: usize, h2: &mut [u32]) {
        let (lo, span) = (self.lo, self.span);
        for (s, &c) in self.head.iter().enumerate() {
            h2[rank[lo + s] as usize] += c as u32;
        }
        for &(p, _) in hist {
            let row = rank[p as usize] as usize * ranks;
            let counts = &self.counts[(p as usize - lo) * span..][..span];
            for &(s, _) in hist {
                h2[row + rank[s as usize] as usize] += counts[s as usize - lo];
            }
        }
    }
}

/// [`plan`] of a block that is split ([`super::splits`]): the classes are counted over the
/// block's order, where a stream's first step of a segment takes its context from its segment
/// before, two back in the block (`p - SEGMENT - 32` for symbol `p`), not from the step before.
/// A (class, rank) pair that only those steps have gets a slot (the smallest count), so that
/// every symbol codes.
pub(super) fn split_plan(symbols: &[u16], ctx: Ctx) -> Result<(Plan, usize)> {
    let (mut plan, alphabet) = plan(symbols, ctx)?;
    let Some(spec) = plan.spec.as_mut().filter(|s| !s.class_v.is_empty()) else { return Ok((plan, alphabet)) };
    let rank_of = rank_table(&plan.model, alphabet);
    let class_of = |r: u8| spec.thresholds.iter().filter(|&&t| t <= r as u16).count();
    let seg = super::SEGMENT;
    let mut missing = false;
    for p in (0..symbols.len()).filter(|p| p % seg < LANES) {
        // Stream order: the same lane's symbol in the stream's segment before (rank 0 in a
        // stream's first segment).
        let c = if p >= 2 * seg { class_of(rank_of[symbols[p - seg - LANES] as usize]) } else { 0 };
        let v = &mut spec.class_v[c][rank_of[symbols[p] as usize] as usize];
        if *v == 0 {
            *v = 1;
            missing = true;
        }
    }
    if missing {
        plan.model = build_model(spec)?;
    }
    Ok((plan, alphabet))
}
