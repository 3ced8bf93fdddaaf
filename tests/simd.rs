//! Every CPU level of the decoder kernels against the scalar kernels (odd lengths, every width),
//! mixed pairs (scalar encoders, each level's decoder), the `BREVIS_CPU` rule (it only lowers the
//! level), and whole archives decoded and written identically at every level and thread count.

use brevis::internals::coder::{pack, packed_len};
use brevis::internals::dsl::ops::fields::Fields;
use brevis::internals::dsl::{Data, Stream, Ty};
use brevis::internals::simd::{self, Isa};
use proptest::prelude::*;
use std::process::Command;

fn values(seed: u64, n: usize, bits: u32) -> Vec<u64> {
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    let m = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) & m
        })
        .collect()
}

fn packed(v: &[u64], bits: u32) -> Vec<u8> {
    let mut out = Vec::new();
    pack(v.iter().copied(), bits, &mut out);
    assert_eq!(out.len(), packed_len(v.len(), bits));
    out
}

/// Lengths around every vector and group boundary, and a long odd one.
const LENS: [usize; 14] = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 1001];

/// `unpack_u16` and `unpack_u8` at every level and width, from a stream of exactly the values'
/// bytes and from the start of a longer one.
#[test]
fn unpack_every_level_every_width() {
    for isa in simd::available() {
        for bits in 1..=16u32 {
            for (k, &n) in LENS.iter().enumerate() {
                let v = values(k as u64 * 31 + bits as u64, n, bits);
                let data = packed(&v, bits);
                let mut scalar16 = vec![0u16; n];
                simd::unpack_u16_at(Isa::Scalar, &data, bits, &mut scalar16);
                let mut got16 = vec![0xffffu16; n];
                simd::unpack_u16_at(isa, &data, bits, &mut got16);
                assert_eq!(got16, scalar16, "u16 isa {isa:?} bits {bits} n {n}");
                assert!(got16.iter().zip(&v).all(|(&a, &b)| a as u64 == b), "u16 round trip, bits {bits} n {n}");
                if bits <= 8 {
                    let mut got8 = vec![0xffu8; n];
                    simd::unpack_u8_at(isa, &data, bits, &mut got8);
                    assert!(got8.iter().zip(&v).all(|(&a, &b)| a as u64 == b), "u8 isa {isa:?} bits {bits} n {n}");
                }
                // From the start of a longer stream (its first values): the same words.
                let mut longer = data.clone();
                longer.extend((0..17u8).map(|i| i.wrapping_mul(151) ^ 0x5A));
                let mut from16 = vec![0xffffu16; n];
                simd::unpack_u16_at(isa, &longer, bits, &mut from16);
                assert_eq!(from16, scalar16, "u16 from a longer stream, isa {isa:?} bits {bits} n {n}");
                if bits <= 8 {
                    let mut from8 = vec![0xffu8; n];
                    simd::unpack_u8_at(isa, &longer, bits, &mut from8);
                    assert!(
                        from8.iter().zip(&v).all(|(&a, &b)| a as u64 == b),
                        "u8 longer, isa {isa:?} bits {bits} n {n}"
                    );
                }
            }
        }
    }
}

#[test]
fn unpack_wide_words() {
    for bits in [17u32, 23, 31, 32, 33, 47, 56, 57, 63, 64] {
        for (k, &n) in LENS.iter().enumerate() {
            let v = values(k as u64 + 1000 * bits as u64, n, bits);
            let data = packed(&v, bits);
            let mut got = vec![0u64; n];
            simd::unpack(&data, bits, &mut got);
            assert_eq!(got, v, "bits {bits} n {n}");
            if bits <= 32 {
                let mut got32 = vec![0u32; n];
                simd::unpack(&data, bits, &mut got32);
                assert!(got32.iter().zip(&v).all(|(&a, &b)| a as u64 == b), "u32 bits {bits} n {n}");
            }
        }
    }
}

/// The `fields` split of bf16/fp16 words (scalar encoder), merged back at every level.
#[test]
fn merge_fields_every_level() {
    for isa in simd::available() {
        for (exp, mant) in [(8u32, 7u32), (5, 10)] {
            for k in 0..=mant {
                let lo = mant - k;
                if lo > 8 {
                    continue;
                }
                for (j, &n) in LENS.iter().enumerate() {
                    let words: Vec<u64> = values(j as u64 + 77 * k as u64, n, 16);
                    let x = Stream::from_iter(Ty::u(16), words.iter().copied());
                    let parts = Fields { exp, mant, k }.forward(&x);
                    let (Data::U16(h), Data::U8(s), Data::U8(m)) = (&parts[0].data, &parts[1].data, &parts[2].data)
                    else {
                        // k = 0 with an 8-bit exponent leaves an 8-bit head: not this kernel's case.
                        continue;
                    };
                    let mut got = vec![0u16; n];
                    simd::merge_fields16_at(isa, h, s, m, lo, &mut got);
                    let mut want = vec![0u16; n];
                    simd::merge_fields16_at(Isa::Scalar, h, s, m, lo, &mut want);
                    assert_eq!(got, want, "isa {isa:?} e{exp} m{mant} k{k} n {n}");
                    assert!(got.iter().zip(&words).all(|(&a, &b)| a as u64 == b), "round trip e{exp} m{mant} k{k}");
                }
            }
        }
    }
}

/// The derivation kernel (casts and reference quantizers) at every level, from every float
/// storage, on values of every magnitude (zeros, subnormals, ties, infinities, NaN included).
#[test]
fn derive_every_level() {
    use brevis::internals::simd::derive::{Kind, Src};
    // Weights as checkpoints have them (a smooth spread of magnitudes, with a zero and a
    // constant sub-block), for the K-quants' scale searches.
    let smooth: Vec<u8> = (0..256 * 24)
        .map(|i| match i / 16 {
            3 => 0.0,
            5 => 0.25,
            _ => ((i as f32 * 0.7311).sin() * (1.0 + (i % 97) as f32 / 13.0)) / 40.0,
        })
        .flat_map(|x: f32| x.to_le_bytes())
        .collect();
    for kind in Kind::ALL {
        let (bb, be) = kind.block();
        let mut want = vec![0u8; smooth.len() / 4 / be * bb];
        simd::derive_at(Isa::Scalar, kind, Src::F32, &smooth, 0, &mut want);
        for isa in simd::available() {
            let mut got = vec![0u8; want.len()];
            simd::derive_at(isa, kind, Src::F32, &smooth, 0, &mut got);
            assert!(got == want, "{kind:?} of smooth weights at {isa:?}");
        }
    }
    let n = 32 * 97;
    for (src, bytes) in [(Src::F32, 4), (Src::F16, 2), (Src::Bf16, 2)] {
        // Random words, and blocks of scaled normal-looking values (with exact ties) among them.
        let mut r: Vec<u8> = values(bytes as u64, n, 8 * bytes)
            .iter()
            .flat_map(|v| v.to_le_bytes()[..bytes as usize].to_vec())
            .collect();
        for (i, w) in r.chunks_exact_mut(bytes as usize).enumerate().filter(|(i, _)| (i / 32) % 3 == 0) {
            let x = ((i * 37 % 64) as f32 - 32.0) / 8.0;
            match src {
                Src::F32 => w.copy_from_slice(&x.to_le_bytes()),
                Src::F16 => w.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
                Src::Bf16 => w.copy_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
            }
        }
        for kind in Kind::ALL {
            let (bb, be) = kind.block();
            let len = n / be * bb;
            let mut want = vec![0u8; len];
            simd::derive_at(Isa::Scalar, kind, src, &r, 0, &mut want);
            for isa in simd::available() {
                let mut got = vec![0u8; len];
                simd::derive_at(isa, kind, src, &r, 0, &mut got);
                assert!(got == want, "{kind:?} from {src:?} at {isa:?}");
            }
        }
    }
}

/// `merge_planes16` at every level, its high plane as bytes and as 16-bit symbols.
#[test]
fn merge_planes_every_level() {
    for isa in simd::available() {
        for bits in 9..=16u32 {
            let shift = bits - 8;
            for (j, &n) in LENS.iter().enumerate() {
                let words = values(j as u64 + 5 * bits as u64, n, bits);
                let hi: Vec<u8> = words.iter().map(|&w| (w >> shift) as u8).collect();
                let lo: Vec<u8> = words.iter().map(|&w| (w & ((1 << shift) - 1)) as u8).collect();
                let mut got = vec![0u16; n];
                simd::merge_planes16_at(isa, &hi, &lo, shift, &mut got);
                assert!(got.iter().zip(&words).all(|(&a, &b)| a as u64 == b), "isa {isa:?} bits {bits} n {n}");
                // The high plane as 16-bit symbols (what an entropy leaf decodes).
                let hi16: Vec<u16> = hi.iter().map(|&h| h as u16).collect();
                let mut got16 = vec![0u16; n];
                simd::merge_planes16_at(isa, &hi16, &lo, shift, &mut got16);
                assert!(got16 == got, "isa {isa:?} bits {bits} n {n}, 16-bit high plane");
            }
        }
    }
}

/// The coded order of `lanes(adj)` at every level, from bytes and from 16-bit words: run `j` of
/// `r = n / 32` words in lane `j`, then the last words as they are; lengths around the blocks of
/// 16 steps of the AVX2 kernel.
#[test]
fn to_runs_every_level() {
    for isa in simd::available() {
        for n in [0, 1, 31, 32, 33, 32 * 15 + 5, 32 * 16, 32 * 16 + 31, 32 * 17, 32 * 48 + 3, 100_003] {
            let words: Vec<u16> = values(n as u64, n, 16).into_iter().map(|v| v as u16).collect();
            let r = n / 32;
            let mut want: Vec<u16> = words.clone();
            for (i, &v) in words.iter().enumerate().take(32 * r) {
                want[32 * (i % r) + i / r] = v;
            }
            let mut got = vec![0u16; n];
            simd::to_runs_at(isa, &words, &mut got);
            assert!(got == want, "isa {isa:?} n {n}, 16-bit words");
            let bytes: Vec<u8> = words.iter().map(|&v| v as u8).collect();
            let want: Vec<u16> = want.iter().map(|&v| v & 0xFF).collect();
            simd::to_runs_at(isa, &bytes, &mut got);
            assert!(got == want, "isa {isa:?} n {n}, bytes");
        }
    }
}

/// `from_runs` at every level is the definition's inverse of `to_runs`: word `32 t + j` of the
/// coded order goes back to place `r j + t`, the last `n - 32 r` words stay.
#[test]
fn from_runs_every_level() {
    for isa in simd::available() {
        for n in [0, 1, 31, 32, 33, 32 * 15 + 5, 32 * 16, 32 * 16 + 31, 32 * 17, 32 * 48 + 3, 100_003] {
            let coded: Vec<u16> = values(n as u64 + 7, n, 16).into_iter().map(|v| v as u16).collect();
            let r = n / 32;
            let mut want = coded.clone();
            for (i, w) in want.iter_mut().enumerate().take(32 * r) {
                *w = coded[32 * (i % r) + i / r];
            }
            let mut got = vec![0u16; n];
            simd::from_runs_at(isa, &coded, &mut got);
            assert!(got == want, "isa {isa:?} n {n}");
            let mut back = vec![0u16; n];
            simd::to_runs_at(isa, &got, &mut back);
            assert!(back == coded, "isa {isa:?} n {n}: not the inverse of to_runs");
        }
    }
}

/// `from_runs_steps` at every level moves word `32 t + j` of the block to place
/// `r j + t0 + t`, and into bytes the same words, each narrowed to its low byte; it writes
/// nothing else.
#[test]
fn from_runs_steps_every_level() {
    for isa in simd::available() {
        for n in [32usize, 33, 32 * 15 + 5, 32 * 16, 32 * 17 + 31, 32 * 48 + 3, 32 * 64, 32 * 100 + 7] {
            let r = n / 32;
            let coded: Vec<u16> = values(n as u64 + 11, 32 * r, 16).into_iter().map(|v| v as u16).collect();
            for (t0, steps) in [(0, r), (r / 3, r - r / 3)] {
                let block = &coded[32 * t0..32 * (t0 + steps)];
                let mut words = vec![0xA5A5u16; n];
                simd::from_runs_steps_at(isa, block, &mut words, t0);
                let mut want = vec![0xA5A5u16; n];
                for (i, &w) in block.iter().enumerate() {
                    want[r * (i % 32) + t0 + i / 32] = w;
                }
                assert!(words == want, "isa {isa:?} n {n} t0 {t0}");
                let mut bytes = vec![0xA5u8; n];
                simd::from_runs_steps_at(isa, block, &mut bytes, t0);
                assert!(bytes.iter().zip(&words).all(|(&b, &w)| b == w as u8), "isa {isa:?} n {n} t0 {t0}");
            }
        }
    }
}

proptest! {
    #[test]
    fn unpack_matches_scalar(bits in 1u32..=16, n in 0usize..300, seed in any::<u64>()) {
        let v = values(seed, n, bits);
        let data = packed(&v, bits);
        for isa in simd::available() {
            let mut got = vec![0u16; n];
            simd::unpack_u16_at(isa, &data, bits, &mut got);
            prop_assert!(got.iter().zip(&v).all(|(&a, &b)| a as u64 == b));
        }
    }
}

/// `nibble_blocks` at every level writes what the definition says (low nibbles of values `j`
/// and `16 + j` into byte `qs + j`, bit 4 of value `j` into bit `j` of the `u32` at `qh`), masks
/// out-of-range values the same way, and leaves the other bytes of each block alone.
#[test]
fn nibble_blocks_every_level() {
    for (b, qs, qh) in [(18, 2, None), (20, 4, None), (22, 6, Some(2)), (24, 8, Some(4))] {
        for k in [0usize, 1, 2, 7, 100] {
            let vals: Vec<u8> = values(k as u64 + b as u64, 32 * k, 8).into_iter().map(|v| v as u8).collect();
            let mut want = vec![0xA5u8; b * k];
            for (blk, vs) in want.chunks_exact_mut(b).zip(vals.chunks_exact(32)) {
                for j in 0..16 {
                    blk[qs + j] = (vs[j] & 15) | (vs[16 + j] & 15) << 4;
                }
                if let Some(q) = qh {
                    let h: u32 = (0..32).map(|j| (((vs[j] >> 4) & 1) as u32) << j).sum();
                    blk[q..q + 4].copy_from_slice(&h.to_le_bytes());
                }
            }
            for isa in simd::available() {
                let mut got = vec![0xA5u8; b * k];
                simd::nibble_blocks_at(isa, &vals, &mut got, b, qs, qh);
                assert!(got == want, "isa {isa:?} block {b} k {k}");
            }
        }
    }
}

/// A palette's words by its definition: group `j`'s distinct words are `low[j]` and the running
/// sums of its gaps; None where the parts do not match.
fn palette_reference(count: &[u8], low: &[u16], gaps: &[u16], index: &[u8], g: usize, mask: u16) -> Option<Vec<u16>> {
    let (mut out, mut at) = (Vec::new(), 0);
    for ((&c, &lo), ids) in count.iter().zip(low).zip(index.chunks(g)) {
        let k = c as usize + 1;
        let mut words = vec![lo];
        for &d in gaps.get(at..at + k - 1)? {
            words.push(words.last().unwrap().wrapping_add(d) & mask);
        }
        at += k - 1;
        if k > ids.len() {
            return None;
        }
        for &i in ids {
            out.push(*words.get(i as usize)?);
        }
    }
    (at == gaps.len()).then_some(out)
}

/// `palette` over bytes and 16-bit words at every level rebuild what the definition says for groups of
/// 16 and 32 (the shuffled ones) and others, at every count and with short last groups, and
/// refuse the same damaged parts: an index at its group's count, a count past its group, gaps
/// left over or missing.
#[test]
fn palette_every_level() {
    for g in [2usize, 16, 17, 32, 64] {
        for n in [0usize, 1, 15, 16, 17, 31, 32, 33, 64 * 7 + 5, 4096 + 3] {
            for bits in [4u32, 5, 8, 9, 12, 16] {
                let mask = ((1u32 << bits) - 1) as u16;
                let groups = n.div_ceil(g);
                let seed = (g * 131 + n * 7 + bits as usize) as u64;
                let r = values(seed, groups * 3 + n, 16);
                let (mut count, mut low, mut gaps, mut index) = (vec![], vec![], vec![], vec![]);
                for j in 0..groups {
                    let len = g.min(n - g * j);
                    // Every count from one word to the whole group.
                    let k = 1 + (r[3 * j] as usize % len.min(mask as usize + 1));
                    count.push((k - 1) as u8);
                    low.push(r[3 * j + 1] as u16 & mask);
                    // Small steps, and some that wrap around the words' width.
                    gaps.extend((0..k - 1).map(|i| 1 + ((r[3 * j + 2] >> (i % 13)) as u16 % 3) * (mask / 5).max(1)));
                    index.extend((0..len).map(|i| (r[3 * groups + g * j + i] as usize % k) as u8));
                }
                let check = |count: &[u8], gaps: &[u16], index: &[u8], what: &str| {
                    let want = palette_reference(count, &low, gaps, index, g, mask);
                    for isa in simd::available() {
                        let (ok, got) = if bits <= 8 {
                            let (low8, gaps8): (Vec<u8>, Vec<u8>) =
                                (low.iter().map(|&v| v as u8).collect(), gaps.iter().map(|&v| v as u8).collect());
                            let p = simd::PaletteParts { count, low: &low8, gaps: &gaps8, index, g, mask: mask as u8 };
                            let mut got = vec![0u8; index.len()];
                            let ok = simd::palette_at(isa, &p, &mut got);
                            (ok, got.into_iter().map(u16::from).collect::<Vec<_>>())
                        } else {
                            let p = simd::PaletteParts { count, low: &low, gaps, index, g, mask };
                            let mut got = vec![0u16; index.len()];
                            (simd::palette_at(isa, &p, &mut got), got)
                        };
                        assert_eq!(ok, want.is_some(), "{what}: isa {isa:?} g {g} n {n} bits {bits}");
                        if let Some(w) = &want {
                            assert!(&got == w, "{what}: isa {isa:?} g {g} n {n} bits {bits}");
                        }
                    }
                    want.is_some()
                };
                assert!(check(&count, &gaps, &index, "valid"));
                if n == 0 {
                    continue;
                }
                for j in [0, groups / 2, groups - 1] {
                    let mut bad = index.clone();
                    bad[g * j + 3.min(g.min(n - g * j) - 1)] = count[j] + 1;
                    assert!(!check(&count, &gaps, &bad, "index at its count"));
                    let mut wide = count.clone();
                    wide[j] = 255;
                    assert!(!check(&wide, &gaps, &index, "count past its group"));
                }
                let mut more = gaps.clone();
                more.push(1);
                assert!(!check(&count, &more, &index, "a gap left over"));
                if !gaps.is_empty() {
                    assert!(!check(&count, &gaps[1..], &index, "a gap missing"));
                }
            }
        }
    }
}

/// `six_bit_blocks` (Q6_K's quants), `crumb_blocks` (Q2_K's and Q3_K's) and `k_nibble_blocks`
/// (Q4_K's and Q5_K's) at every level write what ggml's layouts say, ignore the bits above a
/// value's width the same way, and leave the other bytes of each block alone.
#[test]
fn k_quant_blocks_every_level() {
    // Blocks of `b` bytes filled with 0xA5: `define` writes one block's quants as ggml lays them
    // out, `run` the kernel at a level over all of them.
    fn check(what: &str, vals: &[u8], b: usize, define: impl Fn(&mut [u8], &[u8]), run: impl Fn(Isa, &mut [u8])) {
        let k = vals.len() / 256;
        let mut want = vec![0xA5u8; b * k];
        for (blk, vs) in want.chunks_exact_mut(b).zip(vals.chunks_exact(256)) {
            define(blk, vs);
        }
        for isa in simd::available() {
            let mut got = vec![0xA5u8; b * k];
            run(isa, &mut got);
            assert!(got == want, "{what}, isa {isa:?}, block {b}, {k} blocks");
        }
    }
    for k in [0usize, 1, 2, 7, 40] {
        let vals: Vec<u8> = values(k as u64 + 3, 256 * k, 8).into_iter().map(|v| v as u8).collect();
        // Q6_K: ql at 0, qh at 128, 210-byte blocks.
        let six = |blk: &mut [u8], vs: &[u8]| {
            blk[..192].fill(0);
            for (e, &v) in vs.iter().enumerate() {
                let (n, g, l) = (e / 128, (e / 32) % 4, e % 32);
                blk[64 * n + 32 * (g & 1) + l] |= (v & 15) << (4 * (g >> 1));
                blk[128 + 32 * n + l] |= (v >> 4 & 3) << (2 * g);
            }
        };
        check("six bits", &vals, 210, six, |isa, got| simd::six_bit_blocks_at(isa, &vals, got, 210, 0, 128));
        // Q2_K (qs at 16, 84-byte blocks) and Q3_K (hmask at 0, qs at 32, 110-byte blocks).
        for (b, qs, hm) in [(84, 16, None), (110, 32, Some(0))] {
            let crumbs = |blk: &mut [u8], vs: &[u8]| {
                blk[qs..qs + 64].fill(0);
                if let Some(h) = hm {
                    blk[h..h + 32].fill(0);
                }
                for (e, &v) in vs.iter().enumerate() {
                    let (n, j, l) = (e / 128, (e / 32) % 4, e % 32);
                    blk[qs + 32 * n + l] |= (v & 3) << (2 * j);
                    if let Some(h) = hm {
                        blk[h + l] |= (v >> 2 & 1) << (e / 32);
                    }
                }
            };
            check("crumbs", &vals, b, crumbs, |isa, got| simd::crumb_blocks_at(isa, &vals, got, b, qs, hm));
        }
        // Q4_K (qs at 16, 144-byte blocks) and Q5_K (qh at 16, qs at 48, 176-byte blocks).
        for (b, qs, qh) in [(144, 16, None), (176, 48, Some(16))] {
            let nibbles = |blk: &mut [u8], vs: &[u8]| {
                blk[qs..qs + 128].fill(0);
                if let Some(q) = qh {
                    blk[q..q + 32].fill(0);
                }
                for (e, &v) in vs.iter().enumerate() {
                    let (g, h, l) = (e / 64, (e / 32) % 2, e % 32);
                    blk[qs + 32 * g + l] |= (v & 15) << (4 * h);
                    if let Some(q) = qh {
                        blk[q + l] |= (v >> 4 & 1) << (2 * g + h);
                    }
                }
            };
            check("nibbles", &vals, b, nibbles, |isa, got| simd::k_nibble_blocks_at(isa, &vals, got, b, qs, qh));
        }
    }
}

#[test]
fn environment_only_lowers_the_level() {
    use brevis::internals::simd::lowered;
    assert_eq!(lowered(Isa::Avx2, Some("scalar")), Isa::Scalar);
    assert_eq!(lowered(Isa::Avx2, Some("AVX2")), Isa::Avx2);
    assert_eq!(lowered(Isa::Scalar, Some("avx2")), Isa::Scalar);
    assert_eq!(lowered(Isa::Avx2, Some("bogus")), Isa::Avx2);
    assert_eq!(lowered(Isa::Avx2, None), Isa::Avx2);
    assert_eq!(lowered(Isa::Avx512, Some("avx2")), Isa::Avx2);
    assert_eq!(lowered(Isa::Avx512, Some("scalar")), Isa::Scalar);
    assert_eq!(lowered(Isa::Avx512, Some("AVX512")), Isa::Avx512);
    assert_eq!(lowered(Isa::Avx2, Some("avx512")), Isa::Avx2);
    assert_eq!(lowered(Isa::Avx512, None), Isa::Avx512);
    assert_eq!(Isa::Avx512.name(), "avx512");
    assert!(simd::isa() <= simd::detected());
    assert_eq!(simd::available().first(), Some(&Isa::Scalar));
}

/// Runs the CLI with `args` at the CPU level `cpu` (`BREVIS_CPU`), which must succeed; its
/// standard output.
fn run(cpu: &str, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_brevis")).env("BREVIS_CPU", cpu).args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The real fixture through the CLI: the archive is the same at every CPU level and thread
/// count, and decodes to the original at every level and thread count.
#[test]
fn archives_identical_across_levels_and_threads() {
    let dir = tempfile::tempdir().unwrap();
    let input = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/silero_vad_16k.safetensors");
    let original = std::fs::read(&input).unwrap();
    let mut archives = Vec::new();
    for (cpu, t) in [("scalar", "1"), ("avx2", "2"), ("avx512", "1"), ("", "0")] {
        let out = dir.path().join(format!("a-{cpu}-{t}.brv"));
        run(cpu, &["compress", "-q", "-T", t, input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        archives.push(std::fs::read(&out).unwrap());
    }
    assert!(archives.windows(2).all(|w| w[0] == w[1]), "archives differ across CPU isas or thread counts");
    let a = dir.path().join("a-scalar-1.brv");
    for (cpu, t) in [("scalar", "1"), ("scalar", "2"), ("avx2", "1"), ("avx2", "0"), ("avx512", "1"), ("", "0")] {
        let out = dir.path().join(format!("d-{cpu}-{t}"));
        run(cpu, &["decompress", "-q", "-T", t, a.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(std::fs::read(&out).unwrap() == original, "decoded bytes differ at {cpu} -T {t}");
    }
}

/// The GGUF fixtures through the CLI: decoded to the original at every CPU level and thread
/// count, with quantized blocks whose last field the fused blocks writer takes (a `lanes` leaf,
/// or a palette of `lanes` indices: `dsl::fused::blocks`) among their programs.
#[test]
fn gguf_blocks_decode_alike_at_every_level() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut fused = 0;
    for name in ["silero_family.gguf", "smollm2_kquants.gguf"] {
        let input = fixtures.join(name);
        let original = std::fs::read(&input).unwrap();
        let a = dir.path().join(format!("{name}.brv"));
        run("", &["compress", "-q", input.to_str().unwrap(), "-o", a.to_str().unwrap()]);
        let a = a.to_str().unwrap();
        fused += run("", &["inspect", a])
            .lines()
            .filter(|l| {
                l.contains("blocks(")
                    && (l.ends_with("lanes]") || l.ends_with("lanes(prev)]") || l.ends_with("lanes]]"))
            })
            .count();
        for (cpu, t) in [("scalar", "1"), ("avx2", "2"), ("avx512", "1"), ("", "0")] {
            let out = dir.path().join(format!("{name}-{cpu}-{t}"));
            run(cpu, &["decompress", "-q", "-T", t, a, "-o", out.to_str().unwrap()]);
            assert!(std::fs::read(&out).unwrap() == original, "{name}: decoded bytes differ at {cpu} -T {t}");
        }
    }
    assert!(fused >= 3, "the fixtures' programs no longer take the fused blocks writer ({fused} tensors)");
}
