//! The table part of a block (see the wire form in the module above): what the wire carries (a
//! [`Spec`]), how it is written and read, and the frequencies both sides derive from it (a
//! [`Model`], by one integer-only normalization).

use super::{EXTENDED, MAX_CLASSES, MAX_LOG, MAX_PREC, MAX_RANKS, MAX_SLOTS, MAX_SYMBOLS, MIN_PREC, SHORT_CLASSES};
use crate::coder::bitio::BitWriter;
use crate::coder::shared::{self, ceil_log2, gamma_len, unzigzag, zigzag};
use crate::error::{Error, Result};

pub(super) fn q_max(r_log: u32) -> u32 {
    ((MAX_LOG + 1) << r_log) - 1
}

/// Weight of a quantized log-count at resolution `r_log`.
pub(super) fn weight(q: u32, r_log: u32) -> u128 {
    shared::weight(q as u64, r_log)
}

/// The table part of a block with at least two distinct symbols.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Spec {
    /// Used symbols, ascending.
    pub(super) syms: Vec<u16>,
    pub(super) prec: u32,
    pub(super) r_log: u32,
    /// Quantized log-count of each symbol.
    pub(super) q: Vec<u32>,
    /// Symbols with `q < q_t` are escaped.
    pub(super) q_t: u32,
    /// Class thresholds on the previous symbol's rank.
    pub(super) thresholds: Vec<u16>,
    /// With several classes: per class, per rank, 0 (absent) or 1 + quantized log-count.
    pub(super) class_v: Vec<Vec<u32>>,
}

/// Frequencies of a block, derived from a [`Spec`] in the same way by both sides.
#[derive(Clone, Debug)]
pub(super) struct Model {
    pub(super) prec: u32,
    /// Coded symbols, ascending (rank order).
    pub(super) coded: Vec<u16>,
    /// Escaped symbols, ascending.
    pub(super) escs: Vec<u16>,
    pub(super) thresholds: Vec<u16>,
    /// Per class, per rank: frequencies summing to `2^prec` (0 for ranks absent from the class).
    pub(super) freqs: Vec<Vec<u32>>,
}

impl Model {
    pub(super) fn ranks(&self) -> usize {
        self.coded.len() + !self.escs.is_empty() as usize
    }
    pub(super) fn esc_bits(&self) -> u32 {
        ceil_log2(self.escs.len() as u64)
    }
}

/// Heap key for the normalization fix-up: `w / d` compared exactly, ties by lower index first.
#[derive(PartialEq, Eq)]
pub(super) struct Key {
    pub(super) w: u128,
    pub(super) d: u32,
    pub(super) i: usize,
}

impl Ord for Key {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.w * o.d as u128).cmp(&(o.w * self.d as u128)).then(o.i.cmp(&self.i))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Integer-only normalization of weights to frequencies summing to `total` (zero weight: zero
/// frequency, others at least 1): the exact shares rounded to nearest, then units added where
/// `w / (2f + 1)` is largest or taken where `w / (2f - 1)` is smallest (the greedy optimum of
/// `sum w log f`). `None` when no weight is positive or more are positive than `total`.
pub(super) fn normalize(w: &[u128], total: u32) -> Option<Vec<u32>> {
    let sum: u128 = w.iter().sum();
    let used = w.iter().filter(|&&x| x > 0).count();
    if sum == 0 || used > total as usize {
        return None;
    }
    let mut f: Vec<u32> =
        w.iter().map(|&x| if x == 0 { 0 } else { ((2 * x * total as u128 + sum) / (2 * sum)).max(1) as u32 }).collect();
    let mut have: u64 = f.iter().map(|&x| x as u64).sum();
    let total = total as u64;
    use std::collections::BinaryHeap;
    // A few units: linear scans (the same choices as the heaps below).
    if have.abs_diff(total) <= 8 {
        while have < total {
            let mut b = Key { w: 0, d: 1, i: usize::MAX };
            for (i, (&x, &fi)) in w.iter().zip(&f).enumerate() {
                let k = Key { w: x, d: 2 * fi + 1, i };
                if x > 0 && (b.i == usize::MAX || k > b) {
                    b = k;
                }
            }
            f[b.i] += 1;
            have += 1;
        }
        while have > total {
            let mut b = Key { w: 0, d: 1, i: usize::MAX };
            for (i, (&x, &fi)) in w.iter().zip(&f).enumerate() {
                // Smallest w / d first, ties by lower index: compare as the reversed heap does.
                let k = Key { w: x, d: 2 * fi - (fi > 0) as u32, i };
                let better = b.i == usize::MAX
                    || (k.w * b.d as u128).cmp(&(b.w * k.d as u128)).then(b.i.cmp(&k.i)) == std::cmp::Ordering::Less;
                if x > 0 && fi > 1 && better {
                    b = k;
                }
            }
            f[b.i] -= 1;
            have -= 1;
        }
        return Some(f);
    }
    if have < total {
        let mut heap: BinaryHeap<Key> =
            w.iter().enumerate().filter(|x| *x.1 > 0).map(|(i, &x)| Key { w: x, d: 2 * f[i] + 1, i }).collect();
        while have < total {
            let k = heap.pop().expect("a positive weight");
            f[k.i] += 1;
            have += 1;
            heap.push(Key { w: k.w, d: 2 * f[k.i] + 1, i: k.i });
        }
    } else if have > total {
        // Smallest loss first: a max-heap of d / w, i.e. keys with the roles swapped.
        #[derive(PartialEq, Eq)]
        struct Rev(Key);
        impl Ord for Rev {
            fn cmp(&self, o: &Self) -> std::cmp::Ordering {
                (o.0.w * self.0.d as u128).cmp(&(self.0.w * o.0.d as u128)).then(o.0.i.cmp(&self.0.i))
            }
        }
        impl PartialOrd for Rev {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(o))
            }
        }
        let mut heap: BinaryHeap<Rev> = w
            .iter()
            .enumerate()
            .filter(|x| *x.1 > 0 && f[x.0] > 1)
            .map(|(i, &x)| Rev(Key { w: x, d: 2 * f[i] - 1, i }))
            .collect();
        while have > total {
            // `used <= total` leaves a frequency above 1 while the sum exceeds `total`.
            let Rev(k) = heap.pop().expect("a frequency above 1");
            f[k.i] -= 1;
            have -= 1;
            if f[k.i] > 1 {
                heap.push(Rev(Key { w: k.w, d: 2 * f[k.i] - 1, i: k.i }));
            }
        }
    }
    Some(f)
}

/// Most classes at precision `prec`.
pub(super) fn classes_fit(k: usize, prec: u32) -> bool {
    k <= MAX_CLASSES && (k << prec) <= MAX_SLOTS
}

/// Derives the frequencies of a spec; `Err(Corrupt)` for a spec no encoder writes.
pub(super) fn build_model(spec: &Spec) -> Result<Model> {
    let bad = |m: &str| Err(Error::corrupt(format!("lanes: {m}")));
    let u = spec.syms.len();
    if !(MIN_PREC..=MAX_PREC).contains(&spec.prec) || !(1..=3).contains(&spec.r_log) || spec.q.len() != u || u < 2 {
        return bad("bad table header");
    }
    let (mut coded, mut escs) = (Vec::with_capacity(u), Vec::new());
    let mut esc_w = 0u128;
    let mut coded_w = Vec::with_capacity(u);
    for (&s, &q) in spec.syms.iter().zip(&spec.q) {
        if q < spec.q_t {
            escs.push(s);
            esc_w += weight(q, spec.r_log);
        } else {
            coded.push(s);
            coded_w.push(weight(q, spec.r_log));
        }
    }
    let ranks = coded.len() + !escs.is_empty() as usize;
    if ranks > MAX_RANKS {
        return bad("too many coded symbols");
    }
    let k = spec.thresholds.len() + 1;
    if !classes_fit(k, spec.prec) {
        return bad("too many classes");
    }
    let mut prev = 0u16;
    for &t in &spec.thresholds {
        if t <= prev || t as usize >= ranks {
            return bad("bad class threshold");
        }
        prev = t;
    }
    let total = 1u32 << spec.prec;
    let freqs = if k == 1 {
        if !spec.class_v.is_empty() {
            return bad("bad class tables");
        }
        let mut w = coded_w;
        if !escs.is_empty() {
            w.push(esc_w);
        }
        vec![normalize(&w, total).ok_or_else(|| Error::corrupt("lanes: empty table"))?]
    } else {
        if spec.class_v.len() != k {
            return bad("bad class tables");
        }
        let mut freqs = Vec::with_capacity(k);
        for v in &spec.class_v {
            if v.len() != ranks {
                return bad("bad class table");
            }
            let w: Vec<u128> = v.iter().map(|&v| if v == 0 { 0 } else { weight(v - 1, spec.r_log) }).collect();
            freqs.push(normalize(&w, total).ok_or_else(|| Error::corrupt("lanes: empty class table"))?);
        }
        freqs
    };
    Ok(Model { prec: spec.prec, coded, escs, thresholds: spec.thresholds.clone(), freqs })
}

pub(super) fn write_spec(spec: &Spec, w: &mut BitWriter) {
    w.gamma(spec.syms.len() as u64);
    let mut prev = -1i64;
    for &s in &spec.syms {
        w.gamma((s as i64 - prev) as u64);
        prev = s as i64;
    }
    if spec.syms.len() == 1 {
        return;
    }
    w.put((spec.prec - MIN_PREC) as u64, 2);
    if spec.thresholds.len() < SHORT_CLASSES {
        w.put(spec.r_log as u64 - 1, 2);
        w.put(spec.thresholds.len() as u64, 2);
    } else {
        w.put(EXTENDED, 2);
        w.put(spec.r_log as u64 - 1, 2);
        w.put(spec.thresholds.len() as u64, 3);
    }
    let mut prev = 0i64;
    for &q in &spec.q {
        w.gamma0(zigzag(q as i64 - prev));
        prev = q as i64;
    }
    w.gamma0(spec.q_t as u64);
    let mut prev = 0u64;
    for &t in &spec.thresholds {
        w.gamma(t as u64 - prev);
        prev = t as u64;
    }
    for v in &spec.class_v {
        let mut prev = 0i64;
        for &x in v {
            w.gamma0(zigzag(x as i64 - prev));
            prev = x as i64;
        }
    }
}

/// Bits [`write_spec`] writes, without writing.
pub(super) fn spec_bits(spec: &Spec) -> u64 {
    let mut bits = gamma_len(spec.syms.len() as u64);
    let mut prev = -1i64;
    for &s in &spec.syms {
        bits += gamma_len((s as i64 - prev) as u64);
        prev = s as i64;
    }
    if spec.syms.len() == 1 {
        return bits;
    }
    // The extended header: 2 bits of marker before `r - 1`, and 3 bits of `K - 1` for 2.
    let extended = if spec.thresholds.len() < SHORT_CLASSES { 0 } else { 3 };
    bits += 6 + extended + gamma_len(spec.q_t as u64 + 1);
    bits += signed_seq_bits(&spec.q);
    let mut prev = 0u64;
    for &t in &spec.thresholds {
        bits += gamma_len(t as u64 - prev);
        prev = t as u64;
    }
    bits + spec.class_v.iter().map(|v| signed_seq_bits(v)).sum::<u64>()
}

pub(super) fn signed_seq_bits(v: &[u32]) -> u64 {
    let mut prev = 0i64;
    let mut bits = 0;
    for &x in v {
        bits += gamma_len(zigzag(x as i64 - prev) + 1);
        prev = x as i64;
    }
    bits
}

/// LSB-first bit reader for the table part (the bits of [`BitWriter`]), with gamma codes read
/// from the count of trailing zeros rather than bit by bit. Every read is bounds-checked.
pub(super) struct SpecReader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    pub(super) acc: u64,
    pub(super) n: u32,
}

impl<'a> SpecReader<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        SpecReader { data, pos: 0, acc: 0, n: 0 }
    }

    #[inline]
    pub(super) fn refill(&mut self) {
        while self.n <= 56 {
            let Some(&b) = self.data.get(self.pos) else { break };
            self.acc |= (b as u64) << self.n;
            self.pos += 1;
            self.n += 8;
        }
    }

    /// Reads `bits <= 56` bits.
    #[inline]
    pub(super) fn get(&mut self, bits: u32) -> Result<u64> {
        debug_assert!(bits <= 56);
        if self.n < bits {
            self.refill();
            if self.n < bits {
                return Err(Error::corrupt("lanes: table ends early"));
            }
        }
        let v = self.acc & ((1u64 << bits) - 1);
        self.acc >>= bits;
        self.n -= bits;
        Ok(v)
    }

    pub(super) fn gamma(&mut self) -> Result<u64> {
        let mut len = 0u32;
        loop {
            self.refill();
            if self.n == 0 {
                return Err(Error::corrupt("lanes: table ends early"));
            }
            let z = self.acc.trailing_zeros().min(self.n);
            len += z;
            if len > 63 {
                return Err(Error::corrupt("lanes: gamma code too long"));
            }
            if z < self.n {
                // The zeros and the one (all 64 bits when the one is the top bit).
                self.acc = self.acc.checked_shr(z + 1).unwrap_or(0);
                self.n -= z + 1;
                break;
            }
            self.acc = 0;
            self.n = 0;
        }
        let low = if len > 32 { self.get(32)? | self.get(len - 32)? << 32 } else { self.get(len)? };
        Ok(1u64 << len | low)
    }

    pub(super) fn gamma0(&mut self) -> Result<u64> {
        Ok(self.gamma()? - 1)
    }

    /// Bytes consumed, a partly read byte counting as consumed.
    pub(super) fn bytes_consumed(&self) -> usize {
        self.pos - (self.n / 8) as usize
    }
}

/// Reads the table part: `Ok(None)` for one distinct symbol (returned in `single`).
pub(super) fn read_spec(r: &mut SpecReader, single: &mut u16) -> Result<Option<Spec>> {
    let bad = |m: &str| Error::corrupt(format!("lanes: {m}"));
    let u = r.gamma()?;
    if u as usize > MAX_SYMBOLS {
        return Err(bad("too many symbols"));
    }
    let u = u as usize;
    let mut syms = Vec::with_capacity(u);
    let mut prev = -1i64;
    for _ in 0..u {
        let g = r.gamma()?;
        if g > 1 << 16 {
            return Err(bad("symbol out of range"));
        }
        let s = prev + g as i64;
        if s > u16::MAX as i64 {
            return Err(bad("symbol out of range"));
        }
        syms.push(s as u16);
        prev = s;
    }
    if u == 1 {
        *single = syms[0];
        return Ok(None);
    }
    let prec = r.get(2)? as u32 + MIN_PREC;
    let (r_log, k) = match r.get(2)? {
        EXTENDED => (r.get(2)? as u32 + 1, r.get(3)? as usize + 1),
        v => (v as u32 + 1, r.get(2)? as usize + 1),
    };
    if prec > MAX_PREC || r_log > 3 {
        return Err(bad("bad table header"));
    }
    let qm = q_max(r_log) as i64;
    let q = read_deltas(r, u, qm)?;
    let q_t = r.gamma0()?;
    if q_t > qm as u64 + 1 {
        return Err(bad("bad escape threshold"));
    }
    let mut thresholds = Vec::with_capacity(k - 1);
    let mut prev = 0u64;
    for _ in 1..k {
        let g = r.gamma()?;
        if g > MAX_RANKS as u64 {
            return Err(bad("bad class threshold"));
        }
        prev += g;
        thresholds.push(prev as u16);
    }
    let mut class_v = Vec::new();
    if k > 1 {
        let coded = q.iter().filter(|&&x| x >= q_t as u32).count();
        let ranks = coded + (coded < u) as usize;
        if ranks > MAX_RANKS {
            return Err(bad("too many coded symbols"));
        }
        for _ in 0..k {
            class_v.push(read_deltas(r, ranks, qm + 1)?);
        }
    }
    Ok(Some(Spec { syms, prec, r_log, q, q_t: q_t as u32, thresholds, class_v }))
}

/// `n` values in `0..=max` sent as `gamma0(zz(v - v_prev))` from `v_prev = 0`.
pub(super) fn read_deltas(r: &mut SpecReader, n: usize, max: i64) -> Result<Vec<u32>> {
    let bad = |m: &str| Error::corrupt(format!("lanes: {m}"));
    let mut out = Vec::with_capacity(n);
    let mut prev = 0i64;
    for _ in 0..n {
        let d = r.gamma0()?;
        if d > 1 << 20 {
            return Err(bad("log-count out of range"));
        }
        let v = prev + unzigzag(d);
        if !(0..=max).contains(&v) {
            return Err(bad("log-count out of range"));
        }
        out.push(v as u32);
        prev = v;
    }
    Ok(out)
}
