use super::decode::*;
use super::encode::*;
use super::model::*;
use super::plan::*;
use super::*;
use crate::coder::bitio::{put_varint, BitWriter, ByteReader};
use crate::error::Error;
use crate::simd::Isa;

mod bytes;
mod split;

/// Histogram of `symbols` (at least one): used symbols ascending with their counts.
fn histogram(symbols: &[u16]) -> Vec<(u16, u64)> {
    crate::coder::used_counts(symbols, crate::coder::alphabet_of(symbols))
}

/// The pairs counted by symbol value give the histogram and the counts by rank that the
/// two passes give (`plan` takes either way by the span of the symbol values).
#[test]
fn byte_pairs_count_what_the_two_passes_count() {
    let mut seed = 31;
    let mut cases = 0;
    for case in 0..60 {
        let n = [40usize, 4096, 5000, 70_001][case % 4];
        let alpha = [2u64, 7, 60, 256][case / 4 % 4];
        let s: Vec<u16> = match case % 3 {
            0 => geometric(n, &mut seed, alpha),
            1 => (0..n).map(|_| (lcg(&mut seed) % alpha) as u16).collect(),
            _ => (0..n).map(|i| ((i / 7) as u64 % alpha) as u16).collect(),
        };
        // Symbol values from 0, or from higher up (exponents): counted from the smallest.
        let base = [0u16, 357, 1000][case / 16 % 3];
        let s: Vec<u16> = s.iter().map(|&v| v + base).collect();
        let a = crate::coder::alphabet_of(&s);
        for d in [32usize, 64, 384, n - 1].into_iter().filter(|&d| d < n) {
            let hist = histogram(&s);
            let lo = *s.iter().min().unwrap() as usize;
            let got = with_byte_pairs(&s, d, lo, a - lo, |p| p.histogram());
            assert_eq!(got, hist, "case {case} n {n} d {d}");
            // Ranks as a model gives them: by count, with the rarest escaped.
            let mut by_count = hist.clone();
            by_count.sort_by_key(|h| std::cmp::Reverse(h.1));
            let ranks = by_count.len().min(5);
            let mut rank = vec![0u8; a];
            for (r, h) in by_count.iter().enumerate() {
                rank[h.0 as usize] = r.min(ranks - 1) as u8;
            }
            let want = with_pair_counts(&s, d, ranks, &rank, None, |h2| h2.to_vec());
            let got = with_byte_pairs(&s, d, lo, a - lo, |p| {
                with_pair_counts(&s, d, ranks, &rank, Some((p, &hist)), |h2| h2.to_vec())
            });
            assert_eq!(got, want, "case {case} n {n} d {d}");
            cases += 1;
        }
    }
    assert_eq!(cases, 210);
}

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *seed >> 33
}

/// Encodes, checks `encoded_len`, decodes at every level with bytes before and after the
/// block; returns the block.
fn round_trip(symbols: &[u16], ctx: Ctx) -> Vec<u8> {
    let mut out = vec![7u8; 3];
    encode(symbols, ctx, &mut out).unwrap();
    let block = out[3..].to_vec();
    assert_eq!(encoded_len(symbols, ctx).unwrap(), block.len(), "encoded_len, n {}", symbols.len());
    // The estimate misses by the information left in the 32 final states at most.
    let est = estimated_len(symbols, ctx).unwrap() as i64;
    let len = block.len() as i64;
    assert!((est - len).abs() <= 128 + len / 500, "estimated {est}, coded {len}, n {}, {ctx:?}", symbols.len());
    out.extend_from_slice(b"tail");
    // The AVX-512 kernel with either table lookup (the hardware gather on Intel's cores).
    for k in Kernel::all() {
        let mut dec = vec![0xAAAAu16; symbols.len()];
        assert_eq!(decode_ctx_kernel(k, &out[3..], ctx, false, &mut dec).unwrap(), block.len(), "{k:?}");
        assert!(dec == symbols, "{k:?} n {} ctx {ctx:?}", symbols.len());
    }
    for l in crate::simd::available() {
        let mut dec = vec![0xAAAAu16; symbols.len()];
        let used = decode_ctx_at(l, &out[3..], ctx, &mut dec).unwrap();
        assert_eq!(used, block.len(), "{l:?}");
        assert!(dec == symbols, "{l:?} n {} ctx {ctx:?}", symbols.len());
        if matches!(ctx, Ctx::None | Ctx::Prev) {
            let mut dec2 = vec![0xAAAAu16; symbols.len()];
            assert_eq!(decode_at(l, &out[3..], &mut dec2).unwrap(), block.len());
            assert!(dec2 == symbols);
        }
        if ctx == Ctx::Prev {
            // A few steps at a time, moved to their runs.
            let mut want = vec![0u16; symbols.len()];
            crate::simd::from_runs(symbols, &mut want);
            let mut runs = vec![0xAAAAu16; symbols.len()];
            assert_eq!(decode_runs_at(l, &out[3..], &mut runs).unwrap(), block.len());
            assert!(runs == want, "{l:?} n {} decode_runs", symbols.len());
        }
    }
    block
}

/// Rows of `w` bf16 head symbols whose magnitude depends on the column (a few outlier
/// columns, as in embeddings): symbol `i - w` predicts symbol `i`'s exponent.
fn column_scaled(n: usize, w: usize, seed: &mut u64) -> Vec<u16> {
    let sd: Vec<f32> = (0..w).map(|_| 0.02 * 2f32.powf((lcg(seed) % 1000) as f32 / 1000.0 * 6.0 - 3.0)).collect();
    let z = bf16_heads(n, seed, 1.0);
    // Rescale the unit deviates through their bf16 value (exact enough for a test source).
    z.iter()
        .enumerate()
        .map(|(i, &h)| {
            let v = half::bf16::from_bits(h << 4 | 8).to_f32() * sd[i % w];
            (half::bf16::from_f32(v).to_bits() >> 4) & 0x7FF
        })
        .collect()
}

/// Geometric ranks spread over `alpha` values (skewed, with a long tail of rare symbols).
fn geometric(n: usize, seed: &mut u64, alpha: u64) -> Vec<u16> {
    (0..n).map(|_| ((lcg(seed) as u32 | 1 << 31).trailing_zeros() as u64 * 7 % alpha) as u16).collect()
}

/// bf16 head symbols `(w >> 4) & 0x7FF` of normal weights (sd `sd`).
fn bf16_heads(n: usize, seed: &mut u64, sd: f32) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let u = (lcg(seed) as f64 + 0.5) / (1u64 << 31) as f64;
            let v = lcg(seed) as f64 / (1u64 << 31) as f64;
            let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            (half::bf16::from_f32(sd * z as f32).to_bits() >> 4) & 0x7FF
        })
        .collect()
}

/// A source where the previous symbol of the lane matters: two regimes of magnitude.
fn lane_regimes(n: usize, seed: &mut u64) -> Vec<u16> {
    let mut s = vec![0u16; n];
    for i in 0..n {
        let big = if i >= LANES { s[i - LANES] >= 100 } else { lcg(seed).is_multiple_of(2) };
        let stay = !lcg(seed).is_multiple_of(16);
        let big = big == stay;
        s[i] = if big { 100 + (lcg(seed) % 40) as u16 } else { (lcg(seed) % 20) as u16 };
    }
    s
}

#[test]
fn sizes_and_alphabets() {
    let mut seed = 1;
    for &n in &[0usize, 1, 2, 31, 32, 33, 63, 64, 65, 100, 1000, 4097, (1 << 16) + 5] {
        for alpha in [1u64, 2, 3, 256, 300, 4095] {
            let uni: Vec<u16> = (0..n).map(|_| (lcg(&mut seed) % alpha) as u16 * 3).collect();
            round_trip(&uni, Ctx::None);
            round_trip(&uni, Ctx::Prev);
            let geo = geometric(n, &mut seed, alpha.max(2));
            round_trip(&geo, Ctx::None);
            round_trip(&geo, Ctx::Prev);
        }
    }
}

#[test]
fn large_blocks() {
    let mut seed = 2;
    let n = 1 << 19;
    let s = bf16_heads(n, &mut seed, 0.02);
    let b = round_trip(&s, Ctx::None);
    // Near the order-0 entropy (escapes, 12-bit tables, 128 bytes of states).
    let mut counts = vec![0u64; 2048];
    s.iter().for_each(|&x| counts[x as usize] += 1);
    let h: f64 = counts.iter().filter(|&&c| c > 0).map(|&c| c as f64 * (n as f64 / c as f64).log2()).sum();
    assert!((b.len() as f64) < h / 8.0 * 1.001 + 300.0, "{} vs entropy {}", b.len(), h / 8.0);
    round_trip(&s, Ctx::Prev);
    round_trip(&geometric(n, &mut seed, 4000), Ctx::None);
    let all: Vec<u16> = (0..n).map(|i| (i % 4095) as u16 * 16).collect();
    round_trip(&all, Ctx::Prev);
}

#[test]
fn alphabet_limit() {
    for u in [4096usize, 5000, 65536] {
        let s: Vec<u16> = (0..u.max(70_000)).map(|i| (i % u) as u16).collect();
        for ctx in [Ctx::None, Ctx::Prev] {
            let mut out = vec![1u8];
            assert!(matches!(encode(&s, ctx, &mut out), Err(Error::Invalid(_))));
            assert_eq!(out, [1u8], "nothing appended");
            assert!(matches!(encoded_len(&s, ctx), Err(Error::Invalid(_))));
        }
    }
    let s: Vec<u16> = (0..4095u16).collect();
    round_trip(&s, Ctx::None);
}

/// Single symbols, extreme values, wide spans (mapped mode), everything escaped.
#[test]
fn edge_cases() {
    for n in [1usize, 5, 32, 33, 1000] {
        for v in [0u16, 1, 65535] {
            let b = round_trip(&vec![v; n], Ctx::None);
            assert!(b.len() <= 5);
        }
    }
    round_trip(&[0, 65535], Ctx::None);
    let mut seed = 3;
    // Two common symbols far apart, and a spread of rare ones.
    let wide: Vec<u16> = (0..50_000)
        .map(|_| match lcg(&mut seed) % 100 {
            0..=44 => 3,
            45..=89 => 60_000,
            _ => (lcg(&mut seed) % 3000) as u16 * 20,
        })
        .collect();
    round_trip(&wide, Ctx::None);
    round_trip(&wide, Ctx::Prev);
    // Nearly uniform over many values: most are escaped or coded flat.
    let flat: Vec<u16> = (0..100_000).map(|_| (lcg(&mut seed) % 4000) as u16).collect();
    round_trip(&flat, Ctx::None);
    // Very skewed: one symbol almost always.
    let skew: Vec<u16> = (0..100_000).map(|_| if lcg(&mut seed).is_multiple_of(5000) { 9 } else { 4 }).collect();
    let b = round_trip(&skew, Ctx::None);
    assert!(b.len() < 100_000 / 8 / 30, "{}", b.len());
}

#[test]
fn back_round_trips() {
    let mut seed = 12;
    for &n in &[0usize, 1, 31, 33, 1000, (1 << 16) + 5, 1 << 19] {
        let s = column_scaled(n, 384, &mut seed);
        let up = |v: usize| (v.div_ceil(LANES) * LANES).max(LANES) as u32;
        for d in [32, 64, 384, 4096, up(n), up(n) + 32] {
            round_trip(&s, Ctx::Back(d));
        }
        if n <= 1000 {
            let g = geometric(n, &mut seed, 300);
            round_trip(&g, Ctx::Back(64));
        }
    }
    // Small alphabets, escapes, mapped mode: the context rank of every kind of symbol.
    let wide: Vec<u16> = column_scaled(50_000, 96, &mut seed).iter().map(|&s| s.wrapping_mul(29)).collect();
    round_trip(&wide, Ctx::Back(96));
    let regimes = lane_regimes(40_000, &mut seed);
    round_trip(&regimes, Ctx::Back(32 * 7));
}

#[test]
fn back_context_pays_where_it_should() {
    let mut seed = 13;
    let s = column_scaled(1 << 18, 384, &mut seed);
    let none = round_trip(&s, Ctx::None);
    let back = round_trip(&s, Ctx::Back(384));
    assert!((back.len() as f64) < none.len() as f64 * 0.97, "{} vs {}", back.len(), none.len());
    // The classes are in the block: decoding with another distance fails or gives other symbols.
    let mut out = vec![0u16; s.len()];
    assert!(decode_ctx(&back, Ctx::Back(352), &mut out).map_or(true, |_| out != s));
    assert!(decode(&back, &mut out).map_or(true, |_| out != s));
    // Back(32) is Prev.
    for src in [&s, &lane_regimes(100_000, &mut seed)] {
        assert_eq!(round_trip(src, Ctx::Back(32)), round_trip(src, Ctx::Prev));
    }
    // Independent symbols: one class.
    let iid = bf16_heads(100_000, &mut seed, 0.02);
    assert_eq!(round_trip(&iid, Ctx::Back(384)), round_trip(&iid, Ctx::None));
}

/// Context classes whose thresholds are the ends of the byte range (index 1, and index 255 in a
/// block of bytes that codes every value): the SIMD decoders compare a step's context indices
/// as bytes, unsigned, and must find the same classes as the scalar one.
#[test]
fn back_classes_at_the_ends_of_the_byte_range() {
    let mut seed = 15;
    let d = 64;
    let mut s: Vec<u16> = Vec::with_capacity(1 << 17);
    for i in 0..1 << 17 {
        let ctx = if i >= d { s[i - d] } else { 1 };
        let r = lcg(&mut seed);
        // After 0 and 255 mostly the same again; elsewhere any byte, 254 often enough to
        // close the class below 255 (classes start at quantiles of the context).
        s.push(match ctx {
            0 | 255 if !r.is_multiple_of(10) => ctx,
            _ if r % 10 < 3 => 254,
            _ => (r >> 8 & 255) as u16,
        });
    }
    let block = round_trip(&s, Ctx::Back(d as u32));
    let spec = read_spec(&mut SpecReader::new(&block), &mut 0).unwrap().unwrap();
    let tables = build_tables(&build_model(&spec).unwrap());
    assert!(!tables.mapped && tables.esc_idx == 256, "a block of bytes, every value coded");
    assert_eq!(tables.idx_thresholds, [1, 255]);
}

fn classes(block: &[u8]) -> usize {
    block_classes(block).unwrap()
}

/// Eight column regimes, each with its own distribution: more than four classes pay, and
/// take the extended table header; blocks of at most four classes keep the short header.
#[test]
fn up_to_eight_classes() {
    let mut seed = 21;
    let w = 256;
    let isa: Vec<u16> = (0..w).map(|_| (lcg(&mut seed) % 8) as u16).collect();
    let s: Vec<u16> = (0..1 << 17).map(|i| isa[i % w] * 6 + (lcg(&mut seed) % 4 + lcg(&mut seed) % 4) as u16).collect();
    let back = round_trip(&s, Ctx::Back(w as u32));
    assert!(classes(&back) > 4, "{} classes", classes(&back));
    let none = round_trip(&s, Ctx::None);
    assert!((back.len() as f64) < none.len() as f64 * 0.8, "{} vs {}", back.len(), none.len());
    // Two regimes: few classes, the short header (the extended marker is not there).
    let s2: Vec<u16> = s.iter().map(|&x| x % 12).collect();
    let b2 = round_trip(&s2, Ctx::Back(w as u32));
    assert!(classes(&b2) <= 4);
    // Every truncation of an extended-header block is an error, never a panic.
    let mut out = vec![0u16; s.len()];
    for cut in (0..back.len()).step_by(97) {
        assert!(decode_ctx(&back[..cut], Ctx::Back(w as u32), &mut out).is_err());
    }
}

#[test]
fn bad_back_distances() {
    let mut seed = 14;
    let s = column_scaled(5000, 64, &mut seed);
    let block = round_trip(&s, Ctx::Back(64));
    for d in [0u32, 1, 31, 33, 100, MAX_BACK + 32, u32::MAX - 31, u32::MAX] {
        for syms in [&s[..], &[]] {
            let mut out = Vec::new();
            assert!(matches!(encode(syms, Ctx::Back(d), &mut out), Err(Error::Invalid(_))), "{d}");
            assert!(out.is_empty());
            assert!(matches!(encoded_len(syms, Ctx::Back(d)), Err(Error::Invalid(_))));
            for l in crate::simd::available() {
                let mut dec = vec![0u16; syms.len()];
                assert!(matches!(decode_ctx_at(l, &block, Ctx::Back(d), &mut dec), Err(Error::Corrupt(_))));
            }
        }
    }
    // The largest distance is legal (all contexts rank 0).
    round_trip(&s, Ctx::Back(MAX_BACK));
    let mut dec = vec![0u16; s.len()];
    let _ = decode_ctx(&block, Ctx::Back(MAX_BACK), &mut dec);
}

#[test]
fn prev_context_pays_where_it_should() {
    let mut seed = 4;
    let s = lane_regimes(200_000, &mut seed);
    let none = round_trip(&s, Ctx::None);
    let prev = round_trip(&s, Ctx::Prev);
    // Entropy ratio of this source: (H(1/16) + 4.82) / 5.82 = 0.886.
    assert!((prev.len() as f64) < none.len() as f64 * 0.9, "{} vs {}", prev.len(), none.len());
    // Independent symbols: Prev keeps one class (the same bytes as None).
    let iid = bf16_heads(100_000, &mut seed, 0.02);
    assert_eq!(round_trip(&iid, Ctx::Prev), round_trip(&iid, Ctx::None));
}

#[test]
fn levels_agree_on_damaged_blocks() {
    let isas = crate::simd::available();
    let mut seed = 5;
    let mut blocks = Vec::new();
    let mut syms = bf16_heads(6000, &mut seed, 0.02);
    syms.extend(lane_regimes(6000, &mut seed));
    for ctx in [Ctx::None, Ctx::Prev] {
        blocks.push((round_trip(&syms, ctx), syms.len(), ctx));
    }
    let wide: Vec<u16> = (0..3000)
        .map(|_| if lcg(&mut seed).is_multiple_of(2) { 7 } else { 40_000 + (lcg(&mut seed) % 5) as u16 })
        .collect();
    blocks.push((round_trip(&wide, Ctx::None), wide.len(), Ctx::None));
    let rows = column_scaled(12_000, 384, &mut seed);
    let block = round_trip(&rows, Ctx::Back(384));
    assert!(block.len() < round_trip(&rows, Ctx::None).len(), "classes");
    blocks.push((block, rows.len(), Ctx::Back(384)));
    for (block, n, ctx) in &blocks {
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for _ in 0..600 {
            let mut b = block.clone();
            for _ in 0..1 + lcg(&mut seed) % 3 {
                let bit = (lcg(&mut seed) % (8 * b.len() as u64)) as usize;
                b[bit / 8] ^= 1 << (bit % 8);
            }
            cases.push(b);
        }
        for _ in 0..200 {
            let cut = (lcg(&mut seed) % block.len() as u64) as usize;
            cases.push(block[..cut].to_vec());
        }
        for b in &cases {
            let mut results = Vec::new();
            for &l in &isas {
                let mut out = vec![0u16; *n];
                let r = decode_ctx_at(l, b, *ctx, &mut out);
                let same = r.as_ref().map(|&u| u).map_err(|e| e.to_string());
                results.push((same, if r.is_ok() { out } else { Vec::new() }));
                if let Err(e) = r {
                    assert!(matches!(e, Error::Corrupt(_)), "{e}");
                }
            }
            assert!(results.windows(2).all(|w| w[0] == w[1]), "isas disagree");
            if *ctx == Ctx::Prev {
                // `decode_runs` fails where `decode_ctx` does, and otherwise gives its symbols
                // in run order.
                for &l in &isas {
                    let mut out = vec![0u16; *n];
                    let r = decode_runs_at(l, b, &mut out).map_err(|e| e.to_string());
                    assert_eq!(r, results[0].0, "{l:?}: decode_runs");
                    if r.is_ok() {
                        let mut want = vec![0u16; *n];
                        crate::simd::from_runs(&results[0].1, &mut want);
                        assert!(out == want, "{l:?}: decode_runs");
                    }
                }
            }
        }
    }
}

/// `block` (of streams of `lens` symbols: one, or the two of a split block) with only the first
/// `1 / keep[s]` of stream `s`'s escapes (the escape counts and bits cut, the words intact), or
/// `None` without escapes: decoding fails at the first escape past them.
fn forge_escapes(block: &[u8], lens: &[usize], keep: &[u64]) -> Option<Vec<u8>> {
    let mut r = SpecReader::new(block);
    let model = build_model(&read_spec(&mut r, &mut 0).ok()??).ok()?;
    if model.escs.is_empty() {
        return None;
    }
    let head = r.bytes_consumed();
    let mut br = ByteReader::new(&block[head..]);
    let nwords: Vec<u64> = lens.iter().map(|_| br.varint().ok()).collect::<Option<_>>()?;
    let n_esc: Vec<u64> = lens.iter().map(|_| br.varint().ok()).collect::<Option<_>>()?;
    let states = br.take(lens.iter().map(|&m| 4 * m.min(LANES)).sum()).ok()?;
    let esc_bytes = |e: u64| (e * model.esc_bits() as u64).div_ceil(8) as usize;
    let esc_data: Vec<&[u8]> = n_esc.iter().map(|&e| br.take(esc_bytes(e)).ok()).collect::<Option<_>>()?;
    let mut out = block[..head].to_vec();
    for &w in &nwords {
        put_varint(&mut out, w);
    }
    for (&e, &k) in n_esc.iter().zip(keep) {
        put_varint(&mut out, e / k);
    }
    out.extend_from_slice(states);
    for ((d, &e), &k) in esc_data.iter().zip(&n_esc).zip(keep) {
        out.extend_from_slice(&d[..esc_bytes(e / k)]);
    }
    out.extend_from_slice(br.rest());
    Some(out)
}

/// Decodes `b` as `m` symbols with each of `kernels`, and asserts that they give the same result
/// (the same symbols, or the same error, which joins `errors`).
fn kernels_agree(
    kernels: &[Kernel],
    b: &[u8],
    ctx: Ctx,
    split: bool,
    m: usize,
    errors: &mut std::collections::BTreeSet<String>,
    what: &str,
) {
    let results: Vec<_> = kernels
        .iter()
        .map(|&k| {
            let mut out = vec![0u16; m];
            decode_ctx_kernel(k, b, ctx, split, &mut out).map(|u| (u, out)).map_err(|e| e.to_string())
        })
        .collect();
    let errs: Vec<_> = results.iter().map(|r| r.as_ref().err()).collect();
    assert!(results.windows(2).all(|w| w[0] == w[1]), "kernels disagree ({what}): {errs:?}");
    if let Err(e) = &results[0] {
        errors.insert(e.clone());
    }
}

/// Blocks cut or damaged in their word stream, and decodes of the wrong length: every level
/// (and the AVX-512 one with either table lookup) gives the same result, the same error
/// included (the SIMD decoders fail where the scalar one does).
#[test]
fn levels_give_the_same_errors() {
    let kernels = Kernel::all();
    let mut seed = 11;
    let mut syms = bf16_heads(20_000, &mut seed, 0.02);
    syms.extend(lane_regimes(4000, &mut seed));
    let wide: Vec<u16> = (0..8000)
        .map(|_| if lcg(&mut seed).is_multiple_of(2) { 7 } else { 40_000 + (lcg(&mut seed) % 5) as u16 })
        .collect();
    let rows = column_scaled(16_000, 384, &mut seed);
    // Two common symbols far apart and a spread of rare ones (mapped, with escapes).
    let rare: Vec<u16> = (0..30_000)
        .map(|_| match lcg(&mut seed) % 100 {
            0..=44 => 3,
            45..=89 => 60_000,
            _ => (lcg(&mut seed) % 3000) as u16 * 20,
        })
        .collect();
    let mut errors = std::collections::BTreeSet::new();
    let sources =
        [(&syms, Ctx::None), (&syms, Ctx::Prev), (&wide, Ctx::None), (&rows, Ctx::Back(384)), (&rare, Ctx::None)];
    for (s, ctx) in sources {
        let block = round_trip(s, ctx);
        let n = s.len();
        let mut cases: Vec<(Vec<u8>, usize)> = (1..=64).map(|k| (block[..block.len() - k].to_vec(), n)).collect();
        for _ in 0..300 {
            // The second half of the block is words (and escape bits).
            let mut b = block.clone();
            for _ in 0..1 + lcg(&mut seed) % 2 {
                let bit = 4 * b.len() + (lcg(&mut seed) % (4 * b.len() as u64)) as usize;
                b[bit / 8] ^= 1 << (bit % 8);
            }
            cases.push((b, n));
        }
        for m in [n / 2, n - 33, n - 1, n + 1, n + 32, n + 1000] {
            cases.push((block.clone(), m));
        }
        cases.extend([1, 3].into_iter().filter_map(|keep| Some((forge_escapes(&block, &[n], &[keep])?, n))));
        for (b, m) in &cases {
            kernels_agree(&kernels, b, ctx, false, *m, &mut errors, &format!("{ctx:?}"));
        }
    }
    // The cases reach the errors of the decoding loops, not only those of the header.
    for e in ["more escapes than stored", "data ends early", "initial state"] {
        assert!(errors.iter().any(|m| m.contains(e)), "{e}: {errors:?}");
    }
}

#[test]
fn every_truncation_fails() {
    let mut seed = 6;
    let mut syms = bf16_heads(3000, &mut seed, 0.02);
    syms.extend(lane_regimes(5000, &mut seed));
    for ctx in [Ctx::None, Ctx::Prev, Ctx::Back(64)] {
        let block = round_trip(&syms, ctx);
        for cut in 0..block.len() {
            for l in crate::simd::available() {
                let mut out = vec![0u16; syms.len()];
                assert!(decode_ctx_at(l, &block[..cut], ctx, &mut out).is_err(), "cut {cut} of {}", block.len());
            }
        }
    }
    // Small blocks too (tables only, few words).
    for n in [1usize, 3, 40] {
        let s: Vec<u16> = (0..n).map(|_| (lcg(&mut seed) % 5) as u16).collect();
        let block = round_trip(&s, Ctx::None);
        for cut in 0..block.len() {
            let mut out = vec![0u16; n];
            assert!(decode(&block[..cut], &mut out).is_err());
        }
    }
}

#[test]
fn garbage_never_panics() {
    let mut seed = 7;
    for _ in 0..20_000 {
        let len = (lcg(&mut seed) % 300) as usize;
        let junk: Vec<u8> = (0..len).map(|_| lcg(&mut seed) as u8).collect();
        let n = (lcg(&mut seed) % 200) as usize;
        let ctx = [Ctx::Prev, Ctx::Back(64), Ctx::Back(96)][(lcg(&mut seed) % 3) as usize];
        let mut first = None;
        for l in crate::simd::available() {
            let mut out = vec![0u16; n];
            let r = decode_ctx_at(l, &junk, ctx, &mut out).ok().map(|u| (u, out));
            assert!(first.get_or_insert_with(|| r.clone()) == &r, "isas disagree");
        }
    }
    // A valid block decoded with the wrong length.
    let s = bf16_heads(5000, &mut seed, 0.02);
    let block = round_trip(&s, Ctx::None);
    for n in [1usize, 31, 32, 4999, 5001, 10_000] {
        let mut out = vec![0u16; n];
        assert!(decode(&block, &mut out).is_err());
    }
}

/// Specs that no encoder writes are refused, never normalized into bad tables.
#[test]
fn forged_specs() {
    let good = Spec {
        syms: vec![1, 2, 3, 9],
        prec: 12,
        r_log: 3,
        q: vec![40, 30, 5, 2],
        q_t: 3,
        thresholds: vec![],
        class_v: vec![],
    };
    let m = build_model(&good).unwrap();
    assert_eq!(m.coded, [1, 2, 3]);
    assert_eq!(m.escs, [9]);
    assert_eq!(m.freqs[0].iter().sum::<u32>(), 4096);
    let mut w = BitWriter::new();
    write_spec(&good, &mut w);
    assert_eq!(w.bit_len() as u64, spec_bits(&good));
    let bytes = w.finish();
    assert_eq!(read_spec(&mut SpecReader::new(&bytes), &mut 0).unwrap(), Some(good.clone()));
    let bad = [
        Spec { prec: 13, ..good.clone() },
        Spec { thresholds: vec![4], class_v: vec![vec![1; 4]; 2], ..good.clone() },
        Spec { thresholds: vec![2, 2], class_v: vec![vec![1; 4]; 3], ..good.clone() },
        Spec { thresholds: vec![1], class_v: vec![vec![1; 4], vec![0; 4]], ..good.clone() },
        Spec { thresholds: vec![1], class_v: vec![vec![1; 3]; 2], ..good.clone() },
        Spec { thresholds: vec![1, 2, 3], class_v: vec![vec![1; 4]; 4], ..good.clone() },
        Spec { class_v: vec![vec![1; 4]], ..good.clone() },
        Spec { syms: (0..300).collect(), q: vec![5; 300], q_t: 0, ..good.clone() },
    ];
    for b in &bad {
        assert!(build_model(b).is_err(), "{b:?}");
    }
    // Four classes need precision 11 at most; the thresholds must stay below the ranks.
    let four = Spec { prec: 11, thresholds: vec![1, 2, 3], class_v: vec![vec![1, 0, 2, 3]; 4], ..good.clone() };
    assert!(build_model(&four).is_ok());
}

/// The table reader reads what `BitWriter` writes: gamma codes of every length at every bit
/// offset, and fails cleanly at the end.
#[test]
fn spec_reader_matches_bit_writer() {
    let mut seed = 10;
    for shift in 0..70u32 {
        let mut w = BitWriter::new();
        w.put(0, shift.min(57));
        w.put(0, shift.saturating_sub(57));
        let mut vals = Vec::new();
        let lens: Vec<u32> = (0..64u32).chain((0..200).map(|_| (lcg(&mut seed) % 64) as u32)).collect();
        for len in lens {
            let v = (1u64 << len) | ((lcg(&mut seed) << 31 ^ lcg(&mut seed)) & ((1u64 << len) - 1));
            let bits = (lcg(&mut seed) % 57) as u32;
            let raw = lcg(&mut seed) & ((1u64 << bits) - 1);
            w.gamma(v);
            w.put(raw, bits);
            vals.push((v, raw, bits));
        }
        let bytes = w.finish();
        let mut r = SpecReader::new(&bytes);
        assert_eq!(r.get(shift.min(56)).unwrap(), 0);
        assert_eq!(r.get(shift.saturating_sub(56)).unwrap(), 0);
        for &(v, raw, bits) in &vals {
            assert_eq!(r.gamma().unwrap(), v);
            assert_eq!(r.get(bits).unwrap(), raw);
        }
        assert_eq!(r.bytes_consumed(), bytes.len());
        assert!(r.get(9).is_err());
        assert!(r.gamma().is_err());
    }
    // 64 zeros: too long.
    assert!(SpecReader::new(&[0u8; 9]).gamma().is_err());
}

/// Blocks with tables the encoder seldom or never picks (everything escaped, one index bit of
/// escapes or none, four classes on short blocks, mapped mode with classes and escapes) decode
/// right at every level.
#[test]
fn forced_tables_round_trip() {
    // `q_t` in units of the quantized log-count, `thresholds` in rank space.
    fn forced(symbols: &[u16], r_log: u32, prec: u32, q_t: u32, thresholds: &[u16]) -> Option<Vec<u8>> {
        let hist = histogram(symbols);
        let q: Vec<u32> = hist.iter().map(|h| quantize(h.1, r_log)).collect();
        let syms: Vec<u16> = hist.iter().map(|h| h.0).collect();
        let base = Spec { syms, prec, r_log, q, q_t, thresholds: Vec::new(), class_v: Vec::new() };
        let mut spec = base.clone();
        if !thresholds.is_empty() {
            let m = build_model(&base).ok()?;
            let rank_of = rank_table(&m, 65536);
            let k = thresholds.len() + 1;
            let class = |r: usize| thresholds.iter().filter(|&&t| t as usize <= r).count();
            let mut counts = vec![vec![0u64; m.ranks()]; k];
            for (i, &s) in symbols.iter().enumerate() {
                let c = if i >= LANES { class(rank_of[symbols[i - LANES] as usize] as usize) } else { class(0) };
                counts[c][rank_of[s as usize] as usize] += 1;
            }
            spec.thresholds = thresholds.to_vec();
            spec.class_v = counts
                .iter()
                .map(|h| h.iter().map(|&c| if c == 0 { 0 } else { quantize(c, r_log) + 1 }).collect())
                .collect();
        }
        let model = build_model(&spec).ok()?;
        let mut out = Vec::new();
        let plan = Plan { spec: Some(spec), model, est: 0.0 };
        write_block(Isa::Scalar, symbols, crate::coder::alphabet_of(symbols), &plan, LANES, false, &mut out);
        for l in crate::simd::available() {
            let mut o = Vec::new();
            write_block(l, symbols, crate::coder::alphabet_of(symbols), &plan, LANES, false, &mut o);
            assert!(o == out, "{l:?} n {} prec {prec} q_t {q_t} thresholds {thresholds:?}", symbols.len());
        }
        Some(out)
    }
    let mut seed = 11;
    let mut built = 0;
    for n in [2usize, 5, 33, 64, 700, 5000] {
        let narrow = geometric(n, &mut seed, 40);
        let wide: Vec<u16> = narrow.iter().map(|&s| s * 1500 + (s % 3)).collect();
        let regimes = lane_regimes(n, &mut seed);
        for syms in [&narrow, &wide, &regimes] {
            let hist = histogram(syms);
            if hist.len() < 2 {
                continue;
            }
            let qmax = hist.iter().map(|h| quantize(h.1, 2)).max().unwrap();
            for q_t in [0, 1, 4, 9, qmax, qmax + 1] {
                for (prec, th) in
                    [(12, &[][..]), (10, &[][..]), (12, &[1][..]), (11, &[1, 2, 3][..]), (11, &[2, 5][..])]
                {
                    let Some(block) = forced(syms, 2, prec, q_t, th) else { continue };
                    built += 1;
                    for l in crate::simd::available() {
                        let mut out = vec![0u16; n];
                        assert_eq!(decode_at(l, &block, &mut out).unwrap(), block.len());
                        assert!(&out == syms, "{l:?} n {n} q_t {q_t} prec {prec} th {th:?}");
                    }
                }
            }
        }
    }
    assert!(built > 150, "{built}");
}

/// Random frequencies of `k` ranks summing to `2^p`: ones, a few large, the rest spread.
fn random_freqs(k: usize, p: u32, seed: &mut u64) -> Vec<u32> {
    let mut f = vec![1u32; k];
    let mut left = (1u32 << p) - k as u32;
    while left > 0 {
        let r = (lcg(seed) % (1 + lcg(seed) % k as u64)) as usize;
        let add = left.min(1 + (lcg(seed) % 700) as u32);
        f[r] += add;
        left -= add;
    }
    f
}

/// The state machine alone, every level against the scalar one: random tables (every
/// precision, frequencies from 1 to `2^p`), random entry sequences (not drawn from the table,
/// so every entry is coded from every kind of state) and random initial states over the whole
/// range `[2^16, 2^32)`; the same words, word count and final states, storing or counting.
/// `simd::available()` holds the levels this CPU has: where it lacks AVX-512, that path is
/// compared on CPUs that have it (and the AVX2 one everywhere on x86-64).
#[test]
fn state_machine_levels_agree() {
    fn run(isa: Isa, e: &Encoder, states: [u32; LANES], store: bool) -> Coded {
        let n = e.symbols.len();
        let words = if store { vec![0u16; n + 1] } else { Vec::new() };
        let mut c = Coded { states, words, nwords: 0, escapes: Vec::new() };
        if store {
            e.run::<true, false>(isa, &mut c);
        } else {
            e.run::<false, false>(isa, &mut c);
        }
        c.words.truncate(c.nwords);
        c
    }
    let mut seed = 21;
    let mut checked = 0;
    for case in 0..400 {
        let p = MIN_PREC + case % (MAX_PREC - MIN_PREC + 1);
        let k = match case % 5 {
            0 => 1,
            1 => 2,
            2 => 256,
            _ => 2 + (lcg(&mut seed) % 255) as usize,
        };
        let freqs = random_freqs(k, p, &mut seed);
        let mut enc = Vec::with_capacity(k);
        let mut cum = 0;
        for &f in &freqs {
            enc.push(EncSym::new(f, cum, p));
            cum += f;
        }
        let n = match case % 7 {
            0 => 32 * (1 + (lcg(&mut seed) % 4) as usize),
            1 => 20_000 + (lcg(&mut seed) % 64) as usize,
            _ => (lcg(&mut seed) % 3000) as usize,
        };
        // Ranks: uniform, or mostly the rarest (many renormalizations), or mostly the commonest.
        let rarest = (0..k).min_by_key(|&r| freqs[r]).unwrap() as u64;
        let symbols: Vec<u16> = (0..n)
            .map(|_| match (case / 5 % 3, lcg(&mut seed) % 4) {
                (1, 0..=2) => rarest as u16,
                (2, 0..=2) => (0..k).max_by_key(|&r| freqs[r]).unwrap() as u16,
                _ => (lcg(&mut seed) % k as u64) as u16,
            })
            .collect();
        let e = Encoder {
            symbols: &symbols,
            rank_of: (0..k).map(|r| r as u8).collect(),
            class_of: [0; 256],
            enc,
            ranks: k,
            shift: 32 - p,
            esc_rank: usize::MAX,
            esc_of: Vec::new(),
            d: LANES,
        };
        let mut states = [0u32; LANES];
        for x in &mut states {
            *x = match lcg(&mut seed) % 4 {
                0 => L,
                1 => u32::MAX - (lcg(&mut seed) % 3) as u32,
                _ => L + (lcg(&mut seed) << 1 | lcg(&mut seed) & 1) as u32 % (u32::MAX - L),
            };
        }
        let want = run(Isa::Scalar, &e, states, true);
        assert!(want.states.iter().all(|&x| x >= L));
        for l in crate::simd::available() {
            let got = run(l, &e, states, true);
            let msg = format!("{l:?} case {case} n {n} k {k} p {p}");
            assert_eq!(got.nwords, want.nwords, "{msg}");
            assert!(got.words == want.words, "{msg}");
            assert_eq!(got.states, want.states, "{msg}");
            let count = run(l, &e, states, false);
            assert_eq!((count.nwords, count.states), (want.nwords, want.states), "{msg}");
            checked += 1;
        }
    }
    assert!(checked >= 400);
}

/// Whole blocks: the bytes of [`encode_at`] and the length of [`encoded_len_at`] at every
/// level equal those of the scalar encoder, and the block decodes, for random sources
/// (lengths 0 to 5000 and a few of about 100k, alphabets of 2 to 300 symbols, flat and
/// skewed, sparse symbols, with and without escapes) under `Ctx::None`, `Prev` and `Back(d)`.
/// `simd::available()` holds the levels this CPU has: where it lacks AVX-512, that path is
/// compared on CPUs that have it (and the AVX2 one everywhere on x86-64).
#[test]
fn encoder_levels_agree() {
    let mut seed = 22;
    let (mut escaped, mut classes, mut blocks, mut direct) = (0, 0, 0, 0);
    let mut lengths: Vec<usize> = (0..70).chain([95, 96, 97, 4999, 5000]).collect();
    lengths.extend((0..120).map(|_| (lcg(&mut seed) % 5001) as usize));
    // Long enough for classes (`MIN_CTX_SYMBOLS`).
    lengths.extend((0..30).map(|_| 4096 + (lcg(&mut seed) % 905) as usize));
    lengths.extend([100_000, 100_003, 131_072 + 17]);
    for (case, &n) in lengths.iter().enumerate() {
        let alpha = 2 + lcg(&mut seed) % 299;
        let s: Vec<u16> = match case % 6 {
            0 => (0..n).map(|_| (lcg(&mut seed) % alpha) as u16).collect(),
            1 => geometric(n, &mut seed, alpha),
            // Sparse symbols with a long tail of rare ones (escapes).
            2 => (0..n)
                .map(|_| match lcg(&mut seed) % 8 {
                    0 => 1000 + (lcg(&mut seed) % 300) as u16 * 7,
                    _ => (lcg(&mut seed) as u32 | 1 << 31).trailing_zeros() as u16 * 97,
                })
                .collect(),
            3 => bf16_heads(n, &mut seed, 0.02),
            4 => lane_regimes(n, &mut seed),
            _ => column_scaled(n, 96, &mut seed),
        };
        let d = [64, 96, 384][case % 3];
        for ctx in [Ctx::None, Ctx::Prev, Ctx::Back(d)] {
            let mut want = Vec::new();
            encode_at(Isa::Scalar, &s, ctx, &mut want).unwrap();
            let want_len = encoded_len_at(Isa::Scalar, &s, ctx).unwrap();
            let k = if n == 0 { 1 } else { plan(&s, ctx).unwrap().0.model.freqs.len() };
            // `spec_bits` counts the extended header (more than 4 classes) as 5 bits more
            // than the short one; it is 3 (`write_spec`), so `encoded_len` can be a byte over.
            let slack = (k > SHORT_CLASSES) as usize;
            assert!((want.len()..=want.len() + slack).contains(&want_len), "case {case} n {n} {ctx:?}");
            for l in crate::simd::available() {
                let mut got = vec![5u8];
                encode_at(l, &s, ctx, &mut got).unwrap();
                assert!(got[1..] == want[..], "{l:?} case {case} n {n} alpha {alpha} {ctx:?}");
                assert_eq!(encoded_len_at(l, &s, ctx).unwrap(), want_len, "{l:?} case {case} n {n} {ctx:?}");
            }
            let mut dec = vec![0u16; n];
            assert_eq!(decode_ctx(&want, ctx, &mut dec).unwrap(), want.len());
            assert!(dec == s, "case {case} n {n} {ctx:?}");
            if n > 0 {
                let esc = !plan(&s, ctx).unwrap().0.model.escs.is_empty();
                escaped += esc as usize;
                classes += (k > 1) as usize;
                blocks += 1;
                // Order 0 from the table by symbol, with escapes (`Encoder::run`).
                let a = crate::coder::alphabet_of(&s);
                direct += (esc && k == 1 && a <= DIRECT_ALPHABET.min(n) && n >= LANES) as usize;
            }
        }
    }
    eprintln!("escapes in {escaped} ({direct} by symbol), classes in {classes} of {blocks} blocks");
    assert!(
        escaped > 20 && classes > 20 && direct > 10,
        "escapes in {escaped} ({direct} by symbol), classes in {classes} of {blocks} blocks"
    );
}

#[test]
fn normalize_sums_and_orders() {
    let mut seed = 8;
    for _ in 0..300 {
        let k = 1 + (lcg(&mut seed) % 256) as usize;
        let w: Vec<u128> =
            (0..k)
                .map(|_| {
                    if lcg(&mut seed).is_multiple_of(5) {
                        0
                    } else {
                        (lcg(&mut seed) as u128) << (lcg(&mut seed) % 40)
                    }
                })
                .collect();
        for p in MIN_PREC..=MAX_PREC {
            match normalize(&w, 1 << p) {
                None => assert!(w.iter().all(|&x| x == 0)),
                Some(f) => {
                    assert_eq!(f.iter().sum::<u32>(), 1 << p);
                    for (&wi, &fi) in w.iter().zip(&f) {
                        assert_eq!(wi == 0, fi == 0);
                    }
                }
            }
        }
    }
}

#[test]
fn reciprocal_division_is_exact() {
    let mut seed = 9;
    for f in 1..=4096u32 {
        let e = EncSym::new(f, 0, 12);
        for x in [0u32, 1, f - 1, f, f.wrapping_add(1), u32::MAX, u32::MAX - f, (lcg(&mut seed) as u32).wrapping_mul(3)]
        {
            assert_eq!(e.quotient(x), x / f, "x {x} f {f}");
        }
    }
}

/// `decode_with` hands the symbols of `decode` in order, in segments that cover the block (a
/// single symbol value, lengths around a segment, the tail shorter than a step; row contexts
/// shorter and longer than a segment, whose ring of indices runs on from segment to segment),
/// and fails where `decode` fails (every truncation, a failing sink).
#[test]
fn segments_give_what_decode_gives() {
    let mut seed = 12;
    let seg = 64 * LANES;
    for n in [1usize, 31, 32, 33, seg - 1, seg, seg + 1, 3 * seg + 17, 9 * seg + 5] {
        let mut sources = vec![(vec![7u16; n], Ctx::None), (geometric(n, &mut seed, 40), Ctx::None)];
        sources.push((lane_regimes(n, &mut seed), Ctx::None));
        sources.extend(sources.clone().into_iter().map(|(s, _)| (s, Ctx::Prev)));
        // A row of 384 words (12 steps), and one of 2080 (65 steps, longer than a segment).
        for w in [384, 2080] {
            sources.push((column_scaled(n, w, &mut seed), Ctx::Back(w as u32)));
        }
        for (k, (syms, ctx)) in sources.into_iter().enumerate() {
            let block = round_trip(&syms, ctx);
            if n == 9 * seg + 5 && matches!(ctx, Ctx::Back(_)) {
                assert!(block_classes(&block).unwrap() > 1, "the rows take classes ({ctx:?})");
            }
            let mut got = Vec::new();
            let used = decode_with(&block, ctx, false, n, |start, s| {
                assert_eq!(start, got.len());
                got.extend_from_slice(s);
                Ok(())
            })
            .unwrap();
            assert_eq!((used, &got), (block.len(), &syms), "n {n} source {k} {ctx:?}");
            if n == 3 * seg + 17 {
                for cut in [0, block.len() / 2, block.len() - 1] {
                    assert!(decode_with(&block[..cut], ctx, false, n, |_, _| Ok(())).is_err(), "cut {cut}");
                }
                let failing =
                    decode_with(
                        &block,
                        ctx,
                        false,
                        n,
                        |start, _| {
                            if start > 0 {
                                Err(Error::corrupt("sink"))
                            } else {
                                Ok(())
                            }
                        },
                    );
                assert!(failing.is_err());
            }
        }
    }
}

/// `decode_runs_checked` into bytes gives `decode_runs`'s symbols narrowed, at every level, at
/// lengths around a segment and the tail; a failing check stops it with its error.
#[test]
fn runs_into_bytes_give_what_decode_runs_gives() {
    let mut seed = 19;
    let seg = 64 * LANES;
    for n in [1usize, 31, 32, 33, seg - 1, seg, seg + 31, 3 * seg + 17] {
        let syms = geometric(n, &mut seed, 200);
        let mut coded = vec![0u16; n];
        crate::simd::to_runs(&syms[..], &mut coded);
        let block = round_trip(&coded, Ctx::Prev);
        for l in crate::simd::available() {
            let mut bytes = vec![0u8; n];
            let used = decode_runs_checked(l, &block, &mut bytes, |_| Ok(())).unwrap();
            assert_eq!(used, block.len());
            assert!(bytes.iter().zip(&syms).all(|(&b, &s)| b as u16 == s), "n {n} isa {l:?}");
            let big = |s: &[u16]| if s.iter().any(|&v| v >= 150) { Err(Error::corrupt("big")) } else { Ok(()) };
            let r = decode_runs_checked(l, &block, &mut bytes, big);
            assert_eq!(r.is_err(), syms.iter().any(|&v| v >= 150), "n {n} isa {l:?}");
        }
    }
}
