use super::*;
use crate::coder::log2_approx;
use std::f64::consts::SQRT_2;

/// The encoder as it was before the single-pass context histograms and the reciprocal
/// state update: `encode` must write exactly the same bytes.
mod reference {
    use super::super::*;

    impl Ctx<'_> {
        #[inline]
        fn value(&self, symbols: &[u16], i: usize) -> u16 {
            match self {
                Ctx::None => 0,
                Ctx::Back(d) => {
                    if i < *d {
                        0
                    } else {
                        symbols[i - d]
                    }
                }
                Ctx::Side(s) => s[i],
                Ctx::Split(_) | Ctx::Pop(_) => unreachable!(),
            }
        }
    }

    /// Sparse histogram of `symbols` restricted to positions whose context falls in each bucket.
    fn histogram(symbols: &[u16], alphabet: usize) -> Vec<(u16, u64)> {
        let mut counts = vec![0u64; alphabet];
        for &s in symbols {
            counts[s as usize] += 1;
        }
        counts.iter().enumerate().filter(|c| *c.1 > 0).map(|(s, &c)| (s as u16, c)).collect()
    }

    /// Picks context thresholds: start from up to `MAX_CONTEXTS` quantile buckets of the context value,
    /// then merge neighbours while the estimated total (data + tables) shrinks.
    fn choose_thresholds(symbols: &[u16], ctx: Ctx, alphabet: usize) -> Vec<u16> {
        if matches!(ctx, Ctx::None) || symbols.len() < 4096 {
            return Vec::new();
        }
        let n = symbols.len();
        let range = (0..n).map(|i| ctx.value(symbols, i)).max().unwrap_or(0) as usize + 1;
        let mut cvals = vec![0u64; range];
        for i in 0..n {
            cvals[ctx.value(symbols, i) as usize] += 1;
        }
        let (mut bounds, bucket_of) = quantile_buckets(&cvals, n);
        if bounds.is_empty() {
            return bounds;
        }
        let nb = bounds.len() + 1;
        let mut per: Vec<Vec<u16>> = vec![Vec::new(); nb];
        for i in 0..n {
            per[bucket_of[ctx.value(symbols, i) as usize] as usize].push(symbols[i]);
        }
        let mut hists: Vec<Vec<(u16, u64)>> = per.iter().map(|p| histogram(p, alphabet)).collect();
        let mut costs: Vec<f64> = hists.iter().map(|h| block_cost(h)).collect();
        loop {
            // The merge of buckets `i` and `i + 1` that saves the most: (i, cost change, merged).
            type Merge = (usize, f64, Vec<(u16, u64)>);
            let mut best: Option<Merge> = None;
            for i in 0..hists.len().saturating_sub(1) {
                let m = merge_hist(&hists[i], &hists[i + 1]);
                let delta = block_cost(&m) - costs[i] - costs[i + 1];
                if delta < 0.0 && best.as_ref().is_none_or(|b| delta < b.1) {
                    best = Some((i, delta, m));
                }
            }
            let Some((i, _, m)) = best else { break };
            costs[i] = block_cost(&m);
            hists[i] = m;
            hists.remove(i + 1);
            costs.remove(i + 1);
            bounds.remove(i);
        }
        bounds
    }

    /// Encodes `symbols` (at least one) and appends the block to `out`.
    pub fn encode_reference(symbols: &[u16], ctx: Ctx, out: &mut Vec<u8>) {
        assert!(!symbols.is_empty());
        if let Ctx::Side(s) = ctx {
            assert_eq!(s.len(), symbols.len());
        }
        let alphabet = *symbols.iter().max().unwrap() as usize + 1;
        let thresholds = choose_thresholds(symbols, ctx, alphabet);
        let k = thresholds.len() + 1;
        let map = if k > 1 {
            let range = (0..symbols.len()).map(|i| ctx.value(symbols, i)).max().unwrap_or(0) as usize + 1;
            ctx_map(&thresholds, range)
        } else {
            Vec::new()
        };
        let mut per: Vec<Vec<u64>> = vec![vec![0u64; alphabet]; k];
        let mut ctx_of = Vec::with_capacity(if k > 1 { symbols.len() } else { 0 });
        for (i, &s) in symbols.iter().enumerate() {
            let c = if k > 1 { map[ctx.value(symbols, i) as usize] as usize } else { 0 };
            if k > 1 {
                ctx_of.push(c as u8);
            }
            per[c][s as usize] += 1;
        }
        let mut w = BitWriter::new();
        w.gamma(k as u64);
        let mut prev = 0u64;
        for &t in &thresholds {
            w.gamma(t as u64 - prev);
            prev = t as u64;
        }
        // Encoder lookup: per context, per symbol (freq, cum).
        let mut enc: Vec<Vec<(u32, u32)>> = Vec::with_capacity(k);
        let mut bits: Vec<u32> = Vec::with_capacity(k);
        for counts in &per {
            let hist: Vec<(u16, u64)> =
                counts.iter().enumerate().filter(|c| *c.1 > 0).map(|(s, &c)| (s as u16, c)).collect();
            let hist = if hist.is_empty() { vec![(0u16, 1u64)] } else { hist };
            let (table, qs, r_log, _) = build_table(&hist);
            write_table(&mut w, &table, &qs, r_log);
            let mut e = vec![(0u32, 0u32); alphabet];
            let mut cum = 0u32;
            for (&s, &f) in table.syms.iter().zip(&table.freqs) {
                e[s as usize] = (f, cum);
                cum += f;
            }
            enc.push(e);
            bits.push(table.prob_bits);
        }
        out.extend_from_slice(&w.finish());

        let mut states = [L; 4];
        let mut words: Vec<u16> = Vec::with_capacity(symbols.len() / 2 + 8);
        for i in (0..symbols.len()).rev() {
            let c = if k > 1 { ctx_of[i] as usize } else { 0 };
            let (f, cum) = enc[c][symbols[i] as usize];
            let p = bits[c];
            let x = &mut states[i & 3];
            let x_max = (((L >> p) as u64) << 16) * f as u64;
            if *x as u64 >= x_max {
                words.push(*x as u16);
                *x >>= 16;
            }
            *x = ((*x / f) << p) + (*x % f) + cum;
        }
        put_varint(out, words.len() as u64);
        for s in states {
            out.extend_from_slice(&s.to_le_bytes());
        }
        for &wd in words.iter().rev() {
            out.extend_from_slice(&wd.to_le_bytes());
        }
    }
}

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *seed >> 33
}

fn round_trip(symbols: &[u16], ctx_side: Option<&[u16]>, prev: bool) -> usize {
    let ctx = match (ctx_side, prev) {
        (Some(s), _) => Ctx::Side(s),
        (None, true) => Ctx::Back(1),
        _ => Ctx::None,
    };
    let mut out = Vec::new();
    encode(symbols, ctx, &mut out);
    out.extend_from_slice(b"tail");
    let mut dec = Vec::new();
    let used = decode(&out, symbols.len(), ctx, &mut dec).unwrap();
    assert_eq!(used, out.len() - 4);
    assert_eq!(dec, symbols);
    // The estimate misses by the information left in the four final states at most.
    let est = estimated_len(symbols, ctx) as i64;
    assert!((est - used as i64).abs() <= 16 + used as i64 / 500, "estimated {est}, coded {used}");
    used
}

#[test]
fn skewed_and_contexts() {
    let mut seed = 7;
    let n = 200_000;
    // Context-dependent source: symbol depends on a side stream.
    let side: Vec<u16> = (0..n).map(|_| (lcg(&mut seed) % 8) as u16).collect();
    let syms: Vec<u16> = side.iter().map(|&c| c * 30 + (lcg(&mut seed) % 4) as u16).collect();
    let plain = round_trip(&syms, None, false);
    let with = round_trip(&syms, Some(&side), false);
    assert!(with * 2 < plain, "contexts must pay here: {with} vs {plain}");
    round_trip(&syms, None, true);
    // Near-entropy on a geometric source.
    let geo: Vec<u16> = (0..n).map(|_| (lcg(&mut seed) as u32).trailing_zeros().min(20) as u16).collect();
    let size = round_trip(&geo, None, false);
    assert!((size as f64) < n as f64 * 2.0 / 8.0 * 1.01 + 64.0, "size {size}");
}

#[test]
fn edge_cases() {
    round_trip(&[5], None, false);
    round_trip(&[65535; 1000], None, true);
    round_trip(&[0, 65535], None, false);
    let all: Vec<u16> = (0..=65535u16).collect();
    round_trip(&all, None, false);
    let mut seed = 1;
    let sparse: Vec<u16> = (0..100_000).map(|_| (lcg(&mut seed) % 3000 * 17) as u16).collect();
    round_trip(&sparse, None, true);
}

#[test]
fn truncation_and_garbage_never_panic() {
    let mut seed = 3;
    let syms: Vec<u16> = (0..20_000).map(|_| (lcg(&mut seed) % 50) as u16).collect();
    let mut out = Vec::new();
    encode(&syms, Ctx::Back(1), &mut out);
    for cut in 0..out.len() {
        let mut dec = Vec::new();
        assert!(decode(&out[..cut], syms.len(), Ctx::Back(1), &mut dec).is_err());
    }
    for _ in 0..2000 {
        let len = (lcg(&mut seed) % 64) as usize;
        let junk: Vec<u8> = (0..len).map(|_| lcg(&mut seed) as u8).collect();
        let mut dec = Vec::new();
        let _ = decode(&junk, 100, Ctx::Back(1), &mut dec);
    }
}

#[test]
fn reciprocal_division_is_exact() {
    let mut seed = 11;
    let mut fs: Vec<u32> = (1..=4096).collect();
    fs.extend((12..=16).flat_map(|b| [(1u32 << b) - 1, 1 << b, (1 << b) + 1]));
    fs.extend((0..2000).map(|_| (lcg(&mut seed) % 65536) as u32 + 1));
    for &f in &fs {
        let p = ceil_log2(f as u64).clamp(MIN_PROB_BITS, MAX_PROB_BITS);
        if f > 1 << p {
            continue;
        }
        let e = EncSym::new(f, 0, p);
        let mut xs: Vec<u32> = vec![0, 1, f - 1, f, f.wrapping_add(1), u32::MAX, u32::MAX - 1, u32::MAX - f];
        xs.extend((0..200).map(|_| (lcg(&mut seed) as u32) ^ ((lcg(&mut seed) as u32) << 31)));
        for x in xs {
            assert_eq!(e.quotient(x), x / f, "x {x} f {f}");
        }
    }
}

/// The encoder writes the same bytes as the straightforward one kept in `reference`.
#[test]
fn same_bytes_as_reference_encoder() {
    let mut seed = 5;
    // Symbols, side context, back distance.
    type Case = (Vec<u16>, Option<Vec<u16>>, Option<usize>);
    let mut cases: Vec<Case> = Vec::new();
    for &(n, alpha) in
        &[(1usize, 3u64), (3, 5), (4097, 40), (20_001, 300), (70_003, 12), (5000, 60_000), (140_003, 60_000)]
    {
        let side: Vec<u16> = (0..n).map(|_| (lcg(&mut seed) % 97) as u16).collect();
        let syms: Vec<u16> = side
            .iter()
            .map(|&c| {
                ((c as u64 * 7 + lcg(&mut seed) % 9 + lcg(&mut seed).is_multiple_of(50) as u64 * (alpha / 2)) % alpha)
                    as u16
            })
            .collect();
        cases.push((syms.clone(), None, None));
        cases.push((syms.clone(), None, Some(1)));
        cases.push((syms.clone(), None, Some(384)));
        cases.push((syms, Some(side), None));
    }
    // A smooth source whose previous value matters (many buckets, many merges).
    let mut v = 500i64;
    let walk: Vec<u16> = (0..100_000)
        .map(|_| {
            v = (v + (lcg(&mut seed) % 21) as i64 - 10).clamp(0, 1000);
            v as u16
        })
        .collect();
    cases.push((walk, None, Some(1)));
    for (syms, side, back) in &cases {
        let ctx = match (side, back) {
            (Some(s), _) => Ctx::Side(s),
            (None, Some(d)) => Ctx::Back(*d),
            _ => Ctx::None,
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode(syms, ctx, &mut a);
        reference::encode_reference(syms, ctx, &mut b);
        assert!(a == b, "n {} ctx side {} back {:?}", syms.len(), side.is_some(), back);
        let mut dec = Vec::new();
        decode(&a, syms.len(), ctx, &mut dec).unwrap();
        assert_eq!(&dec, syms);
    }
}

#[test]
fn log2_approx_is_close() {
    let mut x = 1.0f64;
    while x < 1e12 {
        for v in [x, x + 1.0, x * (SQRT_2 - 1e-4), x * (SQRT_2 + 1e-4), x * 1.999] {
            assert!((log2_approx(v) - v.log2()).abs() < 1e-8, "{v}");
        }
        x *= 1.37;
    }
    assert_eq!(log2_approx(1.0), 0.0);
    assert_eq!(log2_approx(1024.0), 10.0);
}

/// Symbols with a strong previous-symbol dependence (a random walk over a few dozen values).
fn walk(n: usize, seed: u64) -> Vec<u16> {
    let mut g = seed;
    let mut v = 20i32;
    (0..n)
        .map(|_| {
            g = g.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            v = (v + ((g >> 60) as i32 % 5) - 2).clamp(0, 40);
            v as u16
        })
        .collect()
}

#[test]
fn split_round_trips_and_is_back_over_the_coded_order() {
    for n in [1usize, 2, 3, 4, 5, 7, 8, 13, 100, 4095, 4096, 4099, 20_001, 70_000] {
        let s = walk(n, n as u64);
        for d in [1usize, 2, 3, 17, 384, 100_000] {
            let mut block = Vec::new();
            encode(&s, Ctx::Split(d), &mut block);
            let mut out = vec![7u16];
            let used = decode(&block, n, Ctx::Split(d), &mut out).unwrap();
            assert_eq!(used, block.len(), "n={n} d={d}");
            assert_eq!(&out[1..], &s[..], "n={n} d={d}");
            // The same block decodes as Back(4d) to the coded order.
            let mut coded = Vec::new();
            decode(&block, n, Ctx::Back(4 * d), &mut coded).unwrap();
            assert_eq!(coded, coded_order(&s), "n={n} d={d}");
            assert!(estimated_len(&s, Ctx::Split(d)).abs_diff(block.len()) <= 8 + block.len() / 1000);
        }
    }
}

#[test]
fn split_costs_about_what_back_costs() {
    let s = walk(1 << 18, 3);
    let (mut split, mut back) = (Vec::new(), Vec::new());
    encode(&s, Ctx::Split(1), &mut split);
    encode(&s, Ctx::Back(1), &mut back);
    assert!(split.len() as f64 <= back.len() as f64 * 1.001, "{} {}", split.len(), back.len());
    let mut none = Vec::new();
    encode(&s, Ctx::None, &mut none);
    assert!(split.len() * 10 < none.len() * 9, "the context must help: {} {}", split.len(), none.len());
}

#[test]
fn split_rejects_damage_and_zero_distance() {
    rejects_damage(&walk(10_000, 9), Ctx::Split(1), &[Ctx::Split(0)], Ctx::Split(2));
}

/// A block of `s` coded with `ctx`: refused with each of `refused`, and when cut short; decoded
/// with `other`, an error or other symbols (its states do not end where they started).
fn rejects_damage(s: &[u16], ctx: Ctx, refused: &[Ctx], other: Ctx) {
    let mut block = Vec::new();
    encode(s, ctx, &mut block);
    let mut out = Vec::new();
    for &r in refused {
        assert!(decode(&block, s.len(), r, &mut out).is_err());
    }
    for cut in [1, block.len() / 2, block.len() - 1] {
        out.clear();
        assert!(decode(&block[..cut], s.len(), ctx, &mut out).is_err());
    }
    out.clear();
    assert!(decode(&block, s.len(), other, &mut out).map_or(true, |_| out != s));
}

/// Bit masks whose density drifts: runs of bytes with few set bits, then runs with many (the
/// rows of a pruned matrix keep different shares of their weights).
fn drifting_mask(n: usize, seed: u64) -> Vec<u16> {
    let mut g = seed;
    let mut density = 0u64;
    (0..n)
        .map(|i| {
            if i % 48 == 0 {
                g = g.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                density = (g >> 61) + 1;
            }
            (0..8).fold(0u16, |m, b| {
                g = g.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                m | (((g >> 60) < density * 2) as u16) << b
            })
        })
        .collect()
}

#[test]
fn pop_round_trips_and_counts_the_bits_before_each_symbol_of_its_run() {
    for n in [1usize, 2, 3, 4, 5, 7, 8, 13, 100, 4095, 4096, 4099, 20_001, 70_000] {
        let s = drifting_mask(n, n as u64);
        for d in [1usize, 2, 16, MAX_POP] {
            let mut block = Vec::new();
            encode(&s, Ctx::Pop(d), &mut block);
            let mut out = vec![7u16];
            let used = decode(&block, n, Ctx::Pop(d), &mut out).unwrap();
            assert_eq!(used, block.len(), "n={n} d={d}");
            assert_eq!(&out[1..], &s[..], "n={n} d={d}");
            // The same block decodes as a side context of the counts over the coded order, each
            // counted here from its definition.
            let coded = coded_order(&s);
            let counts: Vec<u16> = (0..n)
                .map(|i| (1..=d).filter(|k| i >= 4 * k).map(|k| coded[i - 4 * k].count_ones() as u16).sum())
                .collect();
            let mut back = Vec::new();
            decode(&block, n, Ctx::Side(&counts), &mut back).unwrap();
            assert_eq!(back, coded, "n={n} d={d}");
            assert!(estimated_len(&s, Ctx::Pop(d)).abs_diff(block.len()) <= 8 + block.len() / 1000);
        }
    }
}

#[test]
fn pop_codes_a_drifting_mask_in_less_than_order_0() {
    let s = drifting_mask(1 << 16, 5);
    let (mut pop, mut none) = (Vec::new(), Vec::new());
    encode(&s, Ctx::Pop(16), &mut pop);
    encode(&s, Ctx::None, &mut none);
    assert!(pop.len() * 20 < none.len() * 19, "the density must help: {} {}", pop.len(), none.len());
}

#[test]
fn pop_rejects_damage_and_windows_out_of_range() {
    let s = drifting_mask(10_000, 9);
    rejects_damage(&s, Ctx::Pop(16), &[Ctx::Pop(0), Ctx::Pop(MAX_POP + 1)], Ctx::Pop(3));
    // Every byte flipped in turn: an error or other symbols, never a panic.
    let mut block = Vec::new();
    encode(&s, Ctx::Pop(16), &mut block);
    for i in 0..block.len().min(400) {
        let mut bad = block.clone();
        bad[i] ^= 0x5A;
        let _ = decode(&bad, s.len(), Ctx::Pop(16), &mut Vec::new());
    }
}
