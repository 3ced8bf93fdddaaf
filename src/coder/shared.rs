//! Helpers the coders share: integer codes (zigzag, Elias gamma lengths, `ceil_log2`), the
//! fixed-point weights of quantized log-counts that rANS and lanes tables are rebuilt from, and
//! symbol counts with their estimated cost (what the search compares candidates by).

/// `ceil(log2 v)` (0 for `v <= 1`).
#[inline]
pub(crate) fn ceil_log2(v: u64) -> u32 {
    if v <= 1 {
        0
    } else {
        64 - (v - 1).leading_zeros()
    }
}

/// Zigzag code of a signed value: 0, -1, 1, -2, ... as 0, 1, 2, 3, ...
#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Bits of the Elias gamma code of `v >= 1`.
#[inline]
pub(crate) fn gamma_len(v: u64) -> u64 {
    debug_assert!(v >= 1);
    2 * (63 - v.max(1).leading_zeros() as u64) + 1
}

/// 2^(j/8) in 20-bit fixed point; both sides of a coder turn quantized log-counts into weights
/// with it.
const POW2_EIGHTHS: [u64; 8] = [1048576, 1143480, 1246974, 1359835, 1482910, 1617125, 1763488, 1923097];

/// Weight of a quantized log-count `q` at resolution `r_log` (steps of `2^-r_log` octaves,
/// `r_log` in 1..=3): `2^(q / 2^r_log)` in fixed point, exact integers on every machine.
#[inline]
pub(crate) fn weight(q: u64, r_log: u32) -> u128 {
    let j = ((q & ((1 << r_log) - 1)) << (3 - r_log)) as usize;
    (POW2_EIGHTHS[j] as u128) << (q >> r_log)
}

/// log2 of `x > 0` to about 1e-9: the exponent, and `ln` of the mantissa (normalized to
/// [sqrt(1/2), sqrt(2))) from five terms of `2 atanh(t)`, `t = (m - 1) / (m + 1)`. Plain
/// arithmetic, so every machine gets the same bits (the cost model only compares estimates).
#[inline]
pub(crate) fn log2_approx(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7FF) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let ln = t * (2.0 + t2 * (2.0 / 3.0 + t2 * (2.0 / 5.0 + t2 * (2.0 / 7.0 + t2 * (2.0 / 9.0)))));
    e as f64 + ln * std::f64::consts::LOG2_E
}

thread_local! {
    /// Four partial counts per symbol, left zeroed after each use (see [`symbol_counts`]).
    static PARTS: std::cell::Cell<Vec<[u32; 4]>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` on the counts of `symbols` (all below `alphabet`), as four partials per symbol, then
/// clears them. Four partials, so that runs of one symbol (a skewed source) do not wait on each
/// other's increments; chunks keep the u32 partials from overflowing (`f` runs once per chunk).
/// The partials are a per-thread buffer: a 16-bit alphabet's megabyte is not allocated (and
/// faulted in) again for every sample the search codes.
fn with_counts(symbols: &[u16], alphabet: usize, mut f: impl FnMut(&mut [[u32; 4]])) {
    let mut part = PARTS.take();
    if part.len() < alphabet {
        part.resize(alphabet, [0; 4]);
    }
    for chunk in symbols.chunks(1 << 30) {
        let mut quads = chunk.chunks_exact(4);
        for q in &mut quads {
            part[q[0] as usize][0] += 1;
            part[q[1] as usize][1] += 1;
            part[q[2] as usize][2] += 1;
            part[q[3] as usize][3] += 1;
        }
        for &s in quads.remainder() {
            part[s as usize][0] += 1;
        }
        f(&mut part[..alphabet]);
    }
    PARTS.set(part);
}

/// One more than the largest symbol (1 for none): the alphabet a block's counts need. A fold on
/// values, which vectorizes (`max()` on references does not).
#[inline]
pub(crate) fn alphabet_of(symbols: &[u16]) -> usize {
    symbols.iter().fold(0, |m, &s| m.max(s)) as usize + 1
}

/// Counts of each symbol below `alphabet` (every symbol is).
pub(crate) fn symbol_counts(symbols: &[u16], alphabet: usize) -> Vec<u64> {
    let mut total = vec![0u64; alphabet];
    with_counts(symbols, alphabet, |part| {
        for (t, p) in total.iter_mut().zip(part.iter_mut()) {
            *t += p.iter().map(|&x| x as u64).sum::<u64>();
            *p = [0; 4];
        }
    });
    total
}

/// The used symbols below `alphabet` (every symbol is), ascending, with their counts: what
/// [`symbol_counts`] holds, without its dense array.
pub(crate) fn used_counts(symbols: &[u16], alphabet: usize) -> Vec<(u16, u64)> {
    if symbols.len() < SPARSE_BELOW && alphabet > SPARSE_ALPHABET {
        // A short block over a wide alphabet (a search's sample of 16-bit words): only the
        // symbols seen are read back, rather than the whole alphabet.
        let mut used = Vec::new();
        with_seen(symbols, alphabet, |s, c| used.push((s, c as u64)));
        return used;
    }
    let mut used: Vec<(u16, u64)> = Vec::new();
    let mut first = true;
    with_counts(symbols, alphabet, |part| {
        let mut k = 0;
        for (s, p) in part.iter_mut().enumerate() {
            if *p != [0; 4] {
                let c = p.iter().map(|&x| x as u64).sum::<u64>();
                *p = [0; 4];
                // (A later chunk adds to the symbols of the first, in the same order, or new ones.)
                if first {
                    used.push((s as u16, c));
                } else {
                    while k < used.len() && used[k].0 < s as u16 {
                        k += 1;
                    }
                    match used.get_mut(k) {
                        Some(u) if u.0 == s as u16 => u.1 += c,
                        _ => used.insert(k, (s as u16, c)),
                    }
                }
            }
        }
        first = false;
    });
    used
}

/// Blocks shorter than this over alphabets wider than [`SPARSE_ALPHABET`] are counted by
/// [`with_seen`].
const SPARSE_BELOW: usize = 1 << 14;
const SPARSE_ALPHABET: usize = 1 << 12;

/// Calls `f(symbol, count)` for every symbol of `symbols` (all below `alphabet`), ascending: the
/// counts in a per-thread table (left zeroed), each symbol noted the first time it is seen, so
/// that when they are few the work is the block's and theirs, not the alphabet's.
pub(crate) fn with_seen(symbols: &[u16], alphabet: usize, mut f: impl FnMut(u16, u32)) {
    thread_local! {
        static ONE: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let mut t = ONE.take();
    if t.len() < alphabet {
        t.resize(alphabet, 0);
    }
    let mut seen: Vec<u16> = Vec::new();
    for &s in symbols {
        let c = &mut t[s as usize];
        if *c == 0 {
            seen.push(s);
        }
        *c += 1;
    }
    if seen.len() * 64 <= alphabet {
        seen.sort_unstable();
        for s in seen {
            f(s, std::mem::take(&mut t[s as usize]));
        }
    } else {
        // Many distinct symbols (the low bits of floats): a scan of the table costs less than
        // sorting them.
        for (s, c) in t[..alphabet].iter_mut().enumerate() {
            if *c > 0 {
                f(s as u16, std::mem::take(c));
            }
        }
    }
    ONE.set(t);
}

/// Estimated cost in bits of coding counts `c` (in symbol order; zeros are skipped) with their
/// own table: `n log2 n - sum c log2 c`, 12 bits, and 7 bits per used symbol. Sparse and dense
/// histograms of the same counts get the same bits.
pub(crate) fn counts_cost(c: impl Iterator<Item = u64>) -> f64 {
    let (mut n, mut used, mut sum) = (0u64, 0u64, 0f64);
    for c in c {
        n += c;
        used += (c > 0) as u64;
        sum += c_log2_c_cached(c);
    }
    c_log2_c(n) - sum + 12.0 + 7.0 * used as f64
}

/// `c log2 c` (0 for 0), from a table below `C_LOG_TABLE` (made with the same formula, so the
/// bits are the same either way).
#[inline]
fn c_log2_c_cached(c: u64) -> f64 {
    static TABLE: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    if c < C_LOG_TABLE {
        let t = TABLE.get_or_init(|| (0..C_LOG_TABLE).map(c_log2_c).collect());
        t[c as usize]
    } else {
        c_log2_c(c)
    }
}

const C_LOG_TABLE: u64 = 4096;

/// `c log2 c` (0 for 0 and 1), from [`log2_approx`].
#[inline]
pub(crate) fn c_log2_c(c: u64) -> f64 {
    if c > 1 {
        c as f64 * log2_approx(c as f64)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `used_counts` holds the nonzero `symbol_counts`, for skewed, flat and empty sources.
    #[test]
    fn used_counts_are_the_nonzero_symbol_counts() {
        for (n, alphabet) in [(0usize, 1usize), (5, 3), (1000, 40), (100_000, 65_536), (70_001, 300), (8000, 65_536)] {
            let symbols: Vec<u16> =
                (0..n).map(|i| ((i * i * 7 + i / 3) % alphabet) as u16 & if i % 3 == 0 { 0 } else { 0xFFFF }).collect();
            let want: Vec<(u16, u64)> = symbol_counts(&symbols, alphabet)
                .iter()
                .enumerate()
                .filter(|c| *c.1 > 0)
                .map(|(s, &c)| (s as u16, c))
                .collect();
            assert_eq!(used_counts(&symbols, alphabet), want, "n {n}");
            // The buffer is left clear for the next call.
            assert_eq!(used_counts(&symbols, alphabet), want, "n {n} again");
        }
    }

    #[test]
    fn integer_codes() {
        for v in [0i64, 1, -1, 2, -2, i64::MAX, i64::MIN, 12345, -98765] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!((zigzag(0), zigzag(-1), zigzag(1), zigzag(-2)), (0, 1, 2, 3));
        assert_eq!(
            (ceil_log2(0), ceil_log2(1), ceil_log2(2), ceil_log2(3), ceil_log2(4), ceil_log2(5)),
            (0, 0, 1, 2, 2, 3)
        );
        assert_eq!((gamma_len(1), gamma_len(2), gamma_len(3), gamma_len(4)), (1, 3, 3, 5));
        assert_eq!(weight(0, 3), 1 << 20);
        assert_eq!(weight(8, 3), 2 << 20);
        assert_eq!(weight(1, 1), weight(4, 3));
    }
}
