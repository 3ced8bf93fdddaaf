use super::*;

/// xorshift64*: deterministic test data without external crates.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn histogram(symbols: &[u16]) -> Vec<(u16, u64)> {
    let mut counts = vec![0u64; ALPHABET];
    for &s in symbols {
        counts[s as usize] += 1;
    }
    counts.iter().enumerate().filter(|&(_, &c)| c > 0).map(|(s, &c)| (s as u16, c)).collect()
}

/// Encodes, checks the size prediction, decodes (with a prefix and trailing bytes around the
/// stream), and returns the encoded bytes.
fn round_trip(symbols: &[u16]) -> Vec<u8> {
    let mut enc = vec![0xAB];
    encode(symbols, &mut enc);
    let enc = enc.split_off(1);
    assert_eq!(encoded_size(&histogram(symbols)), enc.len(), "encoded_size");
    assert_eq!(encoded_len(symbols), enc.len(), "encoded_len");
    let mut padded = enc.clone();
    padded.extend_from_slice(&[0x5A; 13]);
    for input in [&enc[..], &padded[..]] {
        let mut out = vec![7u16];
        let used = decode(input, symbols.len(), &mut out).unwrap();
        assert_eq!(used, enc.len());
        assert_eq!(out[0], 7);
        assert_eq!(&out[1..], symbols);
    }
    enc
}

fn truncations(symbols: &[u16], enc: &[u8]) {
    for cut in 0..enc.len() {
        let mut out = Vec::new();
        match decode(&enc[..cut], symbols.len(), &mut out) {
            Ok(used) => {
                assert!(used <= cut);
                assert_eq!(out, symbols);
            }
            Err(Error::Corrupt(_)) => assert!(out.is_empty()),
            Err(e) => panic!("unexpected error kind {e}"),
        }
    }
}

fn geometric(rng: &mut Rng, n: usize, p_num: u64) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let mut s = 0u16;
            while s < 400 && rng.below(1000) < p_num {
                s += 1;
            }
            s
        })
        .collect()
}

#[test]
fn single_symbol() {
    for n in [1usize, 2, 1000] {
        let syms = vec![4242u16; n];
        let enc = round_trip(&syms);
        assert!(enc.len() <= 4, "zero-length code: table only, got {}", enc.len());
        truncations(&syms, &enc);
    }
    let enc = round_trip(&[65535]);
    truncations(&[65535], &enc);
    round_trip(&[0]);
}

#[test]
fn n_is_one_and_empty() {
    for s in [0u16, 1, 300, 65535] {
        round_trip(&[s]);
    }
    let mut out = Vec::new();
    encode(&[], &mut out);
    assert!(out.is_empty());
    assert_eq!(decode(&[], 0, &mut Vec::new()).unwrap(), 0);
    assert_eq!(encoded_size(&[]), 0);
}

#[test]
fn two_symbols() {
    let mut rng = Rng(1);
    for n in [2usize, 3, 17, 1000, 100_001] {
        let syms: Vec<u16> = (0..n).map(|i| if i == 0 || rng.below(10) == 0 { 65535 } else { 3 }).collect();
        let enc = round_trip(&syms);
        let table = 10;
        assert!(enc.len() <= (n + table * 8).div_ceil(8) + 1);
        if n <= 1000 {
            truncations(&syms, &enc);
        }
    }
}

#[test]
fn uniform_256() {
    let mut rng = Rng(2);
    let syms: Vec<u16> = (0..200_000).map(|_| rng.below(256) as u16).collect();
    let enc = round_trip(&syms);
    // 8 bits per symbol plus a small table.
    assert!(enc.len() <= 200_000 + 80, "{}", enc.len());
    truncations(&syms[..3000], &round_trip(&syms[..3000]));
}

#[test]
fn skewed_geometric() {
    let mut rng = Rng(3);
    let syms = geometric(&mut rng, 300_000, 700);
    let enc = round_trip(&syms);
    // Entropy of a geometric(0.3) source is about 2.94 bits.
    assert!((enc.len() as f64) < 300_000.0 * 3.0 / 8.0, "{}", enc.len());
    let small = geometric(&mut rng, 2000, 900);
    truncations(&small, &round_trip(&small));
}

#[test]
fn sparse_16_bit_alphabet() {
    let mut rng = Rng(4);
    let mut alphabet: Vec<u16> = (0..3000).map(|_| rng.next() as u16).collect();
    alphabet.sort_unstable();
    alphabet.dedup();
    while alphabet.len() < 3000 {
        alphabet.push(rng.next() as u16);
        alphabet.sort_unstable();
        alphabet.dedup();
    }
    // Every symbol once, then a skewed choice within the alphabet.
    let mut syms = alphabet.clone();
    syms.extend((0..400_000).map(|_| {
        let a = rng.below(3000) as usize;
        let b = rng.below(3000) as usize;
        alphabet[a.min(b)]
    }));
    assert_eq!(histogram(&syms).len(), 3000);
    round_trip(&syms);
    let small: Vec<u16> = syms[2000..7000].to_vec();
    truncations(&small, &round_trip(&small));
}

#[test]
fn length_limiting_fibonacci() {
    // Fibonacci counts give an unconstrained Huffman depth of about the alphabet size.
    let mut counts = vec![1u64, 1];
    while counts.len() < 30 {
        let k = counts.len();
        counts.push(counts[k - 1] + counts[k - 2]);
    }
    let mut syms = Vec::new();
    for (i, &c) in counts.iter().enumerate() {
        syms.extend(std::iter::repeat_n(i as u16 * 7, c as usize));
    }
    let mut rng = Rng(5);
    for i in (1..syms.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        syms.swap(i, j);
    }
    let hist = histogram(&syms);
    let w: Vec<u64> = hist.iter().map(|&(_, c)| c).collect();
    let lens = limited_lengths(&w);
    assert_eq!(*lens.iter().max().unwrap() as u32, MAX_LEN);
    round_trip(&syms);
    truncations(&syms[..2000], &round_trip(&syms[..2000]));
}

#[test]
fn package_merge_matches_huffman_when_the_limit_is_slack() {
    let cost = |w: &[u64], l: &[u8]| -> u64 { w.iter().zip(l).map(|(&a, &l)| a * u64::from(l)).sum() };
    let kraft = |l: &[u8]| -> u64 { l.iter().map(|&l| 1u64 << (MAX_LEN - u32::from(l))).sum() };
    let mut rng = Rng(6);
    let mut limited = 0;
    for round in 0..400 {
        let n = 2 + rng.below(if round % 4 == 0 { 3000 } else { 60 }) as usize;
        let spread = 1 + rng.below(40);
        let mut w: Vec<u64> = (0..n).map(|_| 1 + (rng.next() >> (24 + rng.below(spread)))).collect();
        w.sort_unstable();
        let pm = package_merge(&w);
        assert_eq!(kraft(&pm), TABLE_SIZE as u64);
        assert!(pm.iter().all(|&l| (1..=MAX_LEN as u8).contains(&l)));
        match huffman_depths(&w) {
            Some(h) => {
                assert_eq!(kraft(&h), TABLE_SIZE as u64);
                assert_eq!(cost(&w, &pm), cost(&w, &h), "n={n}");
            }
            None => limited += 1,
        }
        let l = limited_lengths(&w);
        assert_eq!(cost(&w, &l), cost(&w, &pm));
    }
    assert!(limited > 10, "the limit was rarely active: {limited}");
    // Exactly 2^MAX_LEN leaves: all lengths MAX_LEN.
    let w: Vec<u64> = (0..MAX_LEAVES as u64).map(|i| 1 + i * i).collect();
    assert!(limited_lengths(&w).iter().all(|&l| u32::from(l) == MAX_LEN));
    // Lengths follow the weights.
    let l = limited_lengths(&[5, 1, 100, 1]);
    assert!(l[2] <= l[0] && l[0] <= l[1]);
}

#[test]
fn more_symbols_than_leaves_uses_escape() {
    let mut rng = Rng(7);
    // All 65536 values, skewed toward small ones.
    let mut syms: Vec<u16> = (0..=65535u16).collect();
    syms.extend(geometric(&mut rng, 200_000, 990));
    let enc = round_trip(&syms);
    assert!(enc.len() < syms.len() * 2);
    // 4097 distinct symbols, fairly flat.
    let syms: Vec<u16> = (0..100_000).map(|i| ((i * 7919) % 4097) as u16 * 3).collect();
    round_trip(&syms);
    let syms: Vec<u16> = (0..30_000).map(|_| rng.next() as u16).collect();
    let enc = round_trip(&syms);
    assert!(enc.len() <= 30_000 * 2 + 30_000 / 8 + 16);
    // Escapes in both the fast and the careful path, truncated everywhere, and mutated.
    let mut syms: Vec<u16> = (0..=65535u16).step_by(13).collect();
    syms.extend(geometric(&mut rng, 3000, 950));
    let enc = round_trip(&syms);
    truncations(&syms, &enc);
    mutate(&syms, &enc, 3000, &mut rng);
}

#[test]
fn every_fast_path() {
    let mut rng = Rng(11);
    // Flat alphabets of these sizes give maximum code lengths from 8 to 12 (single-symbol
    // loops of 7..4 symbols per refill); small skewed ones take the two-symbol table when long.
    for m in [2u64, 5, 40, 256, 300, 600, 1100, 2100, 4000] {
        for n in [1usize, 7, 8, 9, 100, 2047, 2048, 2049, 20_000] {
            let syms: Vec<u16> = (0..n).map(|i| if (i as u64) < m { i as u16 } else { rng.below(m) as u16 }).collect();
            round_trip(&syms);
            let skewed: Vec<u16> = (0..n)
                .map(|_| {
                    let top = 1 + rng.below(m);
                    rng.below(top) as u16
                })
                .collect();
            round_trip(&skewed);
        }
        let syms: Vec<u16> = (0..3000).map(|_| rng.below(m) as u16 * 5).collect();
        truncations(&syms, &round_trip(&syms));
    }
}

#[test]
fn exactly_4096_distinct() {
    let syms: Vec<u16> = (0..50_000u32).map(|i| (i.wrapping_mul(2654435761u32) >> 20) as u16 * 16).collect();
    assert_eq!(histogram(&syms).len(), 4096);
    round_trip(&syms);
}

#[test]
fn random_streams_round_trip() {
    let mut rng = Rng(8);
    for _ in 0..300 {
        let n = 1 + rng.below(3000) as usize;
        let wide = rng.below(4) == 0;
        let distinct = 1 + rng.below(if wide { 6000 } else { 64 });
        let base = rng.next() as u16;
        let stride = 1 + rng.below(64) as u16;
        let syms: Vec<u16> = (0..n)
            .map(|_| {
                let a = rng.below(distinct);
                let b = rng.below(distinct);
                base.wrapping_add((a.min(b) as u16).wrapping_mul(stride))
            })
            .collect();
        round_trip(&syms);
    }
}

#[test]
fn encoded_size_tolerates_bad_histograms() {
    let h = [(5u16, 3u64), (2, 1), (5, 2), (9, 0)];
    let syms = [5u16, 2, 5, 5, 5, 5];
    let mut enc = Vec::new();
    encode(&syms, &mut enc);
    assert_eq!(encoded_size(&h), enc.len());
    assert_eq!(encoded_size(&[(1, 0)]), 0);
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(9);
    for i in 0..20_000 {
        let len = rng.below(64) as usize;
        let mut input: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if i % 2 == 0 && len > 0 {
            // A plausible header (few symbols) so the length/Kraft checks get exercised.
            input[0] = 0b1000_0000 | (input[0] & 0x7F);
        }
        let n = rng.below(200) as usize;
        let mut out = Vec::new();
        if let Ok(used) = decode(&input, n, &mut out) {
            assert!(used <= input.len());
            assert_eq!(out.len(), n);
        }
    }
    // Forged huge counts with a zero-length code must not abort or hang.
    let mut enc = Vec::new();
    encode(&[9], &mut enc);
    let mut out = Vec::new();
    let _ = decode(&enc, usize::MAX, &mut out);
    // Huge counts against a real code fail fast.
    let mut enc = Vec::new();
    encode(&[1, 2, 3], &mut enc);
    assert!(decode(&enc, usize::MAX / 2, &mut out).is_err());
}

/// Flips bits at random (mostly in the table) and decodes: never panics.
fn mutate(syms: &[u16], enc: &[u8], rounds: usize, rng: &mut Rng) {
    for _ in 0..rounds {
        let mut m = enc.to_vec();
        let flips = 1 + rng.below(3);
        for _ in 0..flips {
            let at = rng.below(m.len().min(64) as u64) as usize;
            m[at] ^= 1 << rng.below(8);
        }
        let mut out = Vec::new();
        if let Ok(used) = decode(&m, syms.len(), &mut out) {
            assert!(used <= m.len());
            assert_eq!(out.len(), syms.len());
        }
    }
}

#[test]
fn mutated_streams_never_panic() {
    let mut rng = Rng(10);
    let syms = geometric(&mut rng, 5000, 800);
    let mut enc = Vec::new();
    encode(&syms, &mut enc);
    mutate(&syms, &enc, 20_000, &mut rng);
    let syms: Vec<u16> = (0..1500).map(|_| rng.below(700) as u16).collect();
    let mut enc = Vec::new();
    encode(&syms, &mut enc);
    mutate(&syms, &enc, 20_000, &mut rng);
}
