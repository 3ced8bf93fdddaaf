//! Byte blocks whose coded values span all 256 values: decoded as direct ones from 0 (no map
//! look-up) where a byte value can stand for the escape, at every level, whole and damaged.

use super::*;

/// The decode tables of a block.
fn tables_of(block: &[u8]) -> Tables {
    let mut single = 0;
    let spec = read_spec(&mut SpecReader::new(block), &mut single).unwrap().expect("a block with a table");
    build_tables(&build_model(&spec).unwrap())
}

/// Bytes whose coded values span 0 to 255 (signed quants around 0, packed nibble pairs) decode
/// as their own indices, without the map, where a byte value can stand for the escape: with
/// escapes and one class, or classes and no escape; escapes and classes keep the map. Every
/// level gives the symbols, and the same errors on damaged blocks.
#[test]
fn full_byte_alphabets_skip_the_map() {
    let mut seed = 31;
    let mut normal = |n: usize, spread: u64| -> Vec<u16> {
        (0..n)
            .map(|_| {
                let s: i64 = (0..4).map(|_| (lcg(&mut seed) % (2 * spread + 1)) as i64 - spread as i64).sum();
                (s.clamp(-127, 127) as i8 as u8) as u16
            })
            .collect()
    };
    // Signed quants: 0 and 255 common, a long tail of values seen once (escaped).
    let mut quants = normal(200_000, 10);
    for (i, v) in (60..=200u16).enumerate() {
        quants[997 * i + 5] = v;
    }
    let b = round_trip(&quants, Ctx::None);
    let t = tables_of(&b);
    assert!(t.esc_idx < 256 && !t.mapped && t.base == 0, "escapes, one class: no map");
    // Every byte value, none rare: no escape.
    let flat: Vec<u16> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u16).collect();
    let t = tables_of(&round_trip(&flat, Ctx::None));
    assert!(t.esc_idx == 256 && !t.mapped, "no escape: no map");
    // Lanes in two regimes of signed quants (classes by the previous symbol), without and with
    // values seen once: classes and no escape skip the map, classes and escapes keep it.
    let wide = normal(LANES * 1000, 60);
    let narrow = normal(LANES * 1000, 3);
    let regimes: Vec<u16> = (0..LANES * 1000)
        .map(|i| {
            let v = if (i / LANES / 50).is_multiple_of(2) { wide[i] } else { narrow[i] };
            if (50..=205).contains(&v) {
                0
            } else {
                v
            }
        })
        .collect();
    let mut errors = std::collections::BTreeSet::new();
    for tails in [false, true] {
        let mut s = regimes.clone();
        if tails {
            for (i, v) in (60..=200u16).enumerate() {
                s[211 * i + 3] = v;
            }
        }
        let b = round_trip(&s, Ctx::Prev);
        let t = tables_of(&b);
        assert!(!t.idx_thresholds.is_empty(), "tails {tails}: classes");
        assert_eq!(t.mapped, tails && t.esc_idx < 256, "tails {tails}: classes keep the map only with escapes");
        damaged(&b, Ctx::Prev, s.len(), &mut seed, &mut errors);
    }
    for s in [&quants, &flat] {
        damaged(&round_trip(s, Ctx::None), Ctx::None, s.len(), &mut seed, &mut errors);
    }
}

/// 200 copies of `block` (of `n` symbols) with a bit of its second half (words, escape bits)
/// flipped, every fiftieth decoded one symbol short: every kernel gives the same result.
fn damaged(block: &[u8], ctx: Ctx, n: usize, seed: &mut u64, errors: &mut std::collections::BTreeSet<String>) {
    for k in 0..200 {
        let mut d = block.to_vec();
        let bit = 4 * d.len() + (lcg(seed) % (4 * d.len() as u64)) as usize;
        d[bit / 8] ^= 1 << (bit % 8);
        let m = if k % 50 == 0 { n - 1 } else { n };
        kernels_agree(&Kernel::all(), &d, ctx, false, m, errors, "full byte alphabet");
    }
}
