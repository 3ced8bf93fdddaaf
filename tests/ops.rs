//! Property tests of every DSL operator: encode -> decode is the identity on random and
//! adversarial streams, the wire form of every program round-trips, and a program that does not
//! apply to its data fails instead of producing other data.
//!
//! Every check goes through the public entry points the container uses:
//! `Node::encode(&x, &[], &mut payload)`, then
//! `Node::decode(ty, n, &mut ByteReader::new(&payload), &[], &env)`, and
//! `Node::parse(&node.to_bytes(), ty)`.

use brevis::internals::coder::bitio::ByteReader;
use brevis::internals::dsl::build::*;
use brevis::internals::dsl::ops::blocks::{self, Blocks};
use brevis::internals::dsl::ops::maps::Map;
use brevis::internals::dsl::{Env, Node, Op, Stream, Ty};
use brevis::{Error, Result};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// SplitMix64: a tiny deterministic generator driven by proptest's seeds (so failures shrink to
/// a seed and a length, and replay exactly).
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

fn mask(bits: u32) -> u64 {
    Ty::u(bits).mask()
}

/// Shapes of test data. `Specials` only makes sense for float layouts but is valid for any width.
#[derive(Clone, Copy, Debug)]
enum Pattern {
    Random,
    AllEqual,
    AllDistinct,
    Max,
    AlternatingExtremes,
    /// Few small values, geometric-ish: what entropy coders and contexts are for.
    Small,
    /// Slowly varying (row-like), so that delta and `back` contexts matter.
    Smooth,
    /// Float special values (NaN payloads, infinities, signed zeros, subnormals) among randoms.
    Specials,
}

fn pattern() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        3 => Just(Pattern::Random),
        1 => Just(Pattern::AllEqual),
        1 => Just(Pattern::AllDistinct),
        1 => Just(Pattern::Max),
        1 => Just(Pattern::AlternatingExtremes),
        2 => Just(Pattern::Small),
        1 => Just(Pattern::Smooth),
        1 => Just(Pattern::Specials),
    ]
}

/// Stream lengths, biased towards the edge cases: 0, 1, 2, odd lengths.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        1 => Just(1usize),
        1 => Just(2usize),
        2 => (0usize..40).prop_map(|k| 2 * k + 1),
        3 => 0usize..400,
        1 => 400usize..1500,
    ]
}

/// Special bit patterns of a float with `e` exponent and `m` mantissa bits.
fn float_specials(e: u32, m: u32) -> Vec<u64> {
    let sign = 1u64 << (e + m);
    let exp_all = mask(e) << m;
    let quiet = if m >= 1 { 1u64 << (m - 1) } else { 0 };
    let mant_all = mask(m);
    let mut v = vec![
        0,                                        // +0
        sign,                                     // -0
        exp_all,                                  // +inf
        sign | exp_all,                           // -inf
        exp_all | quiet,                          // canonical quiet NaN
        sign | exp_all | quiet | 1.min(mant_all), // negative quiet NaN with a payload bit
        exp_all | mant_all,                       // all-ones NaN
        sign | exp_all | mant_all,
        1.min(mant_all), // smallest subnormal
        mant_all,        // largest subnormal
        sign | mant_all,
        1u64 << m,                          // smallest normal
        (exp_all - (1u64 << m)) | mant_all, // largest finite
        sign | ((exp_all - (1u64 << m)) | mant_all),
    ];
    if m >= 2 {
        // Signalling NaNs (quiet bit clear) with payloads.
        v.push(exp_all | 1);
        v.push(sign | exp_all | (quiet >> 1));
        v.push(exp_all | (mant_all >> 1));
    }
    v.into_iter().map(|x| x & mask(1 + e + m)).collect()
}

fn make(bits: u32, n: usize, pat: Pattern, seed: u64) -> Stream {
    let m = mask(bits);
    let mut rng = Rng(seed);
    let c = rng.next() & m;
    let specials = if bits >= 2 {
        // Any split of the word into a sign, e exponent and m mantissa bits.
        let e = 1 + (seed % (bits as u64 - 1).max(1)) as u32;
        let e = e.min(bits - 1);
        float_specials(e, bits - 1 - e)
    } else {
        vec![0, 1]
    };
    let mut prev = rng.next() & m;
    let mult = (rng.next() | 1) & m.max(1);
    Stream::from_fn(Ty::u(bits), n, |i| match pat {
        Pattern::Random => rng.next(),
        Pattern::AllEqual => c,
        Pattern::AllDistinct => (i as u64).wrapping_mul(mult) ^ c,
        Pattern::Max => m,
        Pattern::AlternatingExtremes => {
            if i % 2 == 0 {
                0
            } else {
                m
            }
        }
        Pattern::Small => (rng.next() as u32).trailing_zeros().min(9) as u64,
        Pattern::Smooth => {
            prev = prev.wrapping_add(rng.below(5)).wrapping_sub(2);
            prev
        }
        Pattern::Specials => {
            if rng.chance(1, 2) {
                specials[rng.below(specials.len() as u64) as usize]
            } else {
                rng.next()
            }
        }
    })
}

fn no_copy(_: u32) -> Result<Stream> {
    Err(Error::Invalid("ops tests have no earlier tensor".into()))
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

/// Decodes `payload` with `node` into `n` words of `ty` at element offset `off`, and requires the
/// whole payload to be consumed.
fn decode(node: &Node, ty: Ty, n: usize, payload: &[u8], off: u64) -> Result<Stream> {
    decode_ref(node, ty, n, payload, off, None)
}

/// `decode` with the chunk of the reference tensor.
fn decode_ref(node: &Node, ty: Ty, n: usize, payload: &[u8], off: u64, reference: Option<&Stream>) -> Result<Stream> {
    let mut env = Env::new(off, &no_copy);
    env.reference = reference;
    let mut r = ByteReader::new(payload);
    let s = node.decode(ty, n, &mut r, &[], &env)?;
    if !r.is_empty() {
        return Err(Error::Corrupt(format!("{} payload bytes left over", r.remaining())));
    }
    Ok(s)
}

/// The wire form must give back the same program.
fn check_wire(node: &Node, ty: Ty) -> std::result::Result<(), TestCaseError> {
    let wire = node.to_bytes();
    let back = Node::parse(&wire, ty).map_err(|e| fail(format!("parse({node}) over {ty}: {e}")))?;
    prop_assert_eq!(&back, node, "wire form of {} does not round-trip", node);
    Ok(())
}

/// encode -> decode identity (bit-exact, same type and container), plus the wire form, plus:
/// a payload cut short by one byte must be an error.
fn check(node: &Node, x: &Stream, off: u64) -> std::result::Result<(), TestCaseError> {
    check_wire(node, x.ty)?;
    check_codec(node, x, off)
}

/// encode -> decode identity without the wire check (for programs the parser is not meant to
/// accept, such as `fields` layouts with a head wider than 16 bits).
fn check_codec(node: &Node, x: &Stream, off: u64) -> std::result::Result<(), TestCaseError> {
    check_codec_ref(node, x, off, None)
}

/// encode -> decode identity against a reference chunk, plus the wire form.
fn check_ref(node: &Node, x: &Stream, reference: &Stream) -> std::result::Result<(), TestCaseError> {
    check_wire(node, x.ty)?;
    check_codec_ref(node, x, 0, Some(reference))
}

fn check_codec_ref(
    node: &Node,
    x: &Stream,
    off: u64,
    reference: Option<&Stream>,
) -> std::result::Result<(), TestCaseError> {
    let mut payload = Vec::new();
    node.encode_at(x, &[], reference, off, &mut payload)
        .map_err(|e| fail(format!("encode {node} over {}x{}: {e}", x.ty, x.len())))?;
    let decode =
        |node: &Node, ty: Ty, n: usize, payload: &[u8], off: u64| decode_ref(node, ty, n, payload, off, reference);
    let y = decode(node, x.ty, x.len(), &payload, off)
        .map_err(|e| fail(format!("decode {node} over {}x{}: {e}", x.ty, x.len())))?;
    prop_assert_eq!(y.ty, x.ty);
    prop_assert_eq!(y.len(), x.len());
    let (xv, yv): (Vec<u64>, Vec<u64>) = (x.iter().collect(), y.iter().collect());
    if xv != yv {
        let i = xv.iter().zip(&yv).position(|(a, b)| a != b).unwrap();
        return Err(fail(format!(
            "{node} over {}x{}: word {i} decodes to {:#x}, was {:#x}",
            x.ty,
            x.len(),
            yv[i],
            xv[i]
        )));
    }
    prop_assert_eq!(&y, x, "same words but a different container for {}", node);
    if !payload.is_empty() {
        let cut = decode(node, x.ty, x.len(), &payload[..payload.len() - 1], off);
        prop_assert!(cut.is_err(), "{} decoded from a payload cut short by one byte", node);
    }
    Ok(())
}

/// Leaves that code any stream of `bits` bits (entropy leaves only up to 16 bits).
fn leaf_for(bits: u32, choice: u64) -> Node {
    let mut v = vec![raw(), zstd(3)];
    if bits <= 16 {
        v.push(rans());
        v.push(rans_prev());
        v.push(huffman());
        v.push(rans_back(3));
        v.extend([lanes(), lanes_prev(), lanes_back(64), lanes_adj()]);
    }
    v[(choice % v.len() as u64) as usize].clone()
}

const CASES: u32 = 256;

/// `cases` per property, or `PROPTEST_CASES` (for a longer run).
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

// ---------------------------------------------------------------------------------------------
// Leaves
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(CASES))]

    #[test]
    fn raw_any_width(bits in 0u32..=64, n in length(), pat in pattern(), seed: u64) {
        check(&raw(), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn rans_no_context(bits in 1u32..=16, n in length(), pat in pattern(), seed: u64) {
        check(&rans(), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn rans_back_contexts(
        bits in 1u32..=16,
        n in length(),
        pat in pattern(),
        seed: u64,
        stride_kind in 0u8..6,
    ) {
        let stride = match stride_kind {
            0 => 1,
            1 => 2,
            2 => 7,
            3 => n.max(1) as u64,           // exactly the length: no word has context
            4 => n as u64 + 1,              // beyond the length
            _ => u32::MAX as u64,           // largest the wire accepts
        };
        check(&rans_back(stride), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn rans_side_contexts_under_byteplanes(
        bits in 9u32..=64,
        n in length(),
        pat in pattern(),
        seed: u64,
        sides: u64,
    ) {
        // Every plane after the first uses some earlier plane as context.
        let planes = bits.div_ceil(8) as usize;
        let kids: Vec<Node> = (0..planes)
            .map(|j| if j == 0 { rans() } else { rans_side(((sides >> (j * 3)) % j as u64) as u8) })
            .collect();
        check(&byteplanes(kids), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn huffman_any_width(bits in 1u32..=16, n in length(), pat in pattern(), seed: u64) {
        check(&huffman(), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn lanes_every_context_any_width(bits in 1u32..=16, n in length(), pat in pattern(), seed: u64, k in 0usize..4) {
        let node = [lanes(), lanes_prev(), lanes_back(96), lanes_adj()][k].clone();
        check(&node, &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn zstd_any_width(bits in 0u32..=64, n in length(), pat in pattern(), seed: u64, level in 1i32..=9) {
        check(&zstd(level), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn const_of_constant_data(bits in 0u32..=64, n in length(), seed: u64, top: bool) {
        let v = if top { mask(bits) } else { Rng(seed).next() & mask(bits) };
        let x = Stream::from_fn(Ty::u(bits), n, |_| v);
        check(&konst(v), &x, 0)?;
    }

    #[test]
    fn const_of_other_data_is_invalid(bits in 1u32..=64, n in 1usize..500, seed: u64, at in any::<prop::sample::Index>()) {
        // Constant data with one word changed (at any position, including the first and last).
        let mut rng = Rng(seed);
        let v = rng.next() & mask(bits);
        let i = at.index(n);
        let other = (v ^ (1 + rng.below(mask(bits)))) & mask(bits);
        prop_assume!(other != v);
        let x = Stream::from_fn(Ty::u(bits), n, |j| if j == i { other } else { v });
        let mut out = Vec::new();
        let r = konst(v).encode(&x, &[], &mut out);
        prop_assert!(matches!(r, Err(Error::Invalid(_))), "const({:#x}) over non-constant data: {:?}", v, r);
    }

    /// `arange` at a chunk's element offset: the chunk holds words `off..off+n` of the tensor.
    #[test]
    fn arange_at_element_offsets(
        bits in 1u32..=64,
        n in length(),
        start: u64,
        step: u64,
        off in prop_oneof![Just(0u64), 0u64..10_000, 0u64..(1u64 << 40)],
        small_step: bool,
    ) {
        let m = mask(bits);
        let (start, step) = (start & m, if small_step { step % 5 } else { step } & m);
        let x = Stream::from_fn(Ty::u(bits), n, |i| start.wrapping_add(step.wrapping_mul(off + i as u64)));
        check(&arange(start, step), &x, off)?;
    }

    /// A tensor cut into chunks of any sizes: each chunk decodes from its own offset.
    #[test]
    fn arange_over_chunks(
        bits in prop_oneof![Just(8u32), Just(16), Just(32), Just(64), 1u32..=64],
        total in 0usize..3000,
        start: u64,
        step: u64,
        chunk in 1usize..700,
    ) {
        let m = mask(bits);
        let (start, step) = (start & m, step & m);
        let whole = Stream::from_fn(Ty::u(bits), total, |i| start.wrapping_add(step.wrapping_mul(i as u64)));
        let node = arange(start, step);
        let mut off = 0usize;
        while off < total {
            let len = chunk.min(total - off);
            let part = Stream::from_fn(Ty::u(bits), len, |i| whole.get(off + i));
            check(&node, &part, off as u64)?;
            off += len;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Transforms
// ---------------------------------------------------------------------------------------------

/// (exponent bits, mantissa bits) of bf16, fp16, fp32, f64, fp8 e4m3 and fp8 e5m2.
const FLOAT_LAYOUTS: [(u32, u32); 6] = [(8, 7), (5, 10), (8, 23), (11, 52), (4, 3), (5, 2)];

fn float_stream(e: u32, m: u32, n: usize, pat: Pattern, seed: u64) -> Stream {
    let w = 1 + e + m;
    match pat {
        // Realistic weights: exponents in a narrow band, random mantissas and signs.
        Pattern::Smooth | Pattern::Small => {
            let mut rng = Rng(seed);
            let bias = mask(e.saturating_sub(1));
            Stream::from_fn(Ty::u(w), n, |_| {
                let ex = bias.saturating_sub(rng.below(6)) & mask(e);
                (rng.next() & 1) << (w - 1) | ex << m | (rng.next() & mask(m))
            })
        }
        Pattern::Specials => {
            let sp = float_specials(e, m);
            let mut rng = Rng(seed);
            Stream::from_fn(Ty::u(w), n, |_| {
                if rng.chance(2, 3) {
                    sp[rng.below(sp.len() as u64) as usize]
                } else {
                    rng.next()
                }
            })
        }
        p => make(w, n, p, seed),
    }
}

proptest! {
    #![proptest_config(config(CASES))]

    /// Every float layout and every split point `k` of the mantissa.
    #[test]
    fn fields_every_layout_and_k(
        layout in 0usize..FLOAT_LAYOUTS.len(),
        k_pick: u32,
        n in length(),
        pat in pattern(),
        seed: u64,
        kid_pick: u64,
    ) {
        let (e, m) = FLOAT_LAYOUTS[layout];
        let k = k_pick % (m + 1);
        let head_bits = e + k;
        let low_bits = m - k;
        let head = leaf_for(head_bits, kid_pick);
        let sign = if kid_pick & 8 != 0 && head_bits <= 16 { rans_side(0) } else { leaf_for(1, kid_pick >> 4) };
        let low = if low_bits > 8 && kid_pick & 64 != 0 {
            byteplanes(vec![raw(); low_bits.div_ceil(8) as usize])
        } else {
            leaf_for(low_bits, kid_pick >> 8)
        };
        let node = fields(e, m, k, [head, sign, low]);
        let x = float_stream(e, m, n, pat, seed);
        if head_bits <= 16 {
            check(&node, &x, 0)?;
        } else {
            // The wire form bounds the head at 16 bits (one entropy symbol); the operator itself
            // is still a bijection.
            prop_assert!(Node::parse(&node.to_bytes(), x.ty).is_err());
            check_codec(&node, &x, 0)?;
        }
    }

    #[test]
    fn byteplanes_widths_1_to_64(bits in 1u32..=64, n in length(), pat in pattern(), seed: u64, kid_pick: u64) {
        let planes = bits.div_ceil(8);
        let kids: Vec<Node> = (0..planes)
            .map(|j| {
                let w = if j + 1 < planes { 8 } else { bits - 8 * (planes - 1) };
                leaf_for(w, kid_pick.rotate_left(j * 5))
            })
            .collect();
        check(&byteplanes(kids), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn bitplanes_widths_1_to_64(bits in 1u32..=64, n in length(), pat in pattern(), seed: u64, kid_pick: u64) {
        let kids: Vec<Node> = (0..bits)
            .map(|j| match (kid_pick.rotate_left(j) & 3, j) {
                (0, _) => raw(),
                (1, _) => rans(),
                (2, j) if j > 0 => rans_side((j - 1) as u8),
                _ => huffman(),
            })
            .collect();
        check(&bitplanes(kids), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn delta_and_xor_with_strides(
        bits in 1u32..=64,
        n in length(),
        pat in pattern(),
        seed: u64,
        stride_kind in 0u8..7,
        is_xor: bool,
        kid_pick: u64,
    ) {
        let stride = match stride_kind {
            0 => 1u64,
            1 => 2,
            2 => 3 + seed % 50,
            3 => n.max(1) as u64,
            4 => n as u64 + 1,                     // stride > length: every word is kept
            5 => n as u64 + 1000,
            _ => u64::MAX,
        };
        let kid = leaf_for(bits, kid_pick);
        let node = if is_xor { xor(stride, kid) } else { delta(stride, kid) };
        check(&node, &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn xorconst_zigzag_rotate(bits in 1u32..=64, n in length(), pat in pattern(), seed: u64, c: u64, which in 0u8..3, kid_pick: u64) {
        let m = match which {
            0 => Map::XorConst(c & mask(bits)),
            1 => Map::ZigZag,
            _ => Map::Rotate((c % bits as u64) as u32),
        };
        check(&map(m, leaf_for(bits, kid_pick)), &make(bits, n, pat, seed), 0)?;
    }

    /// zigzag really is the signed-to-unsigned interleaving: small magnitudes map to small codes.
    #[test]
    fn zigzag_maps_small_signed_values_to_small_codes(bits in 1u32..=64, v in -100i64..100) {
        let m = mask(bits);
        let half = 1i128 << (bits - 1);
        let v = (v as i128).clamp(-half, half - 1) as i64;
        let x = Stream::from_fn(Ty::u(bits), 1, |_| v as u64 & m);
        let mut out = Vec::new();
        map(Map::ZigZag, raw()).encode(&x, &[], &mut out)?;
        // raw payload: varint length, then the word packed at `bits` bits.
        let y = Node::parse(&raw().to_bytes(), Ty::u(bits))?;
        let z = decode(&y, Ty::u(bits), 1, &out, 0)?;
        let want = if v >= 0 { 2 * v as u64 } else { 2 * (-v - 1) as u64 + 1 };
        prop_assert_eq!(z.get(0), want);
    }

    #[test]
    fn dict_any_width(
        bits in 1u32..=64,
        n in length(),
        distinct in prop_oneof![Just(1u64), Just(2), 3u64..20, 20u64..2000],
        seed: u64,
        table_pick in 0u8..3,
        index_pick in 0u8..4,
    ) {
        let mut rng = Rng(seed);
        let vals: Vec<u64> = (0..distinct).map(|_| rng.next() & mask(bits)).collect();
        let x = Stream::from_fn(Ty::u(bits), n, |_| vals[rng.below(distinct) as usize]);
        let table = match table_pick {
            0 => raw(),
            1 => delta(1, raw()),
            _ => zstd(3),
        };
        let index = match index_pick {
            0 => raw(),
            1 => rans(),
            2 => rans_prev(),
            _ => huffman(),
        };
        check(&dict(table, index), &x, 0)?;
    }

    #[test]
    fn sparse_any_width_and_group(
        bits in 1u32..=64,
        n in length(),
        zeros in 0u64..=4,
        group in 1u8..=16,
        seed: u64,
        pick in 0u8..5,
    ) {
        // A share zeros/4 of the words are zero (all of them at 4, none at 0).
        let mut rng = Rng(seed);
        let x = Stream::from_fn(Ty::u(bits), n, |_| if rng.below(4) < zeros { 0 } else { rng.next() & mask(bits) });
        let (m, v) = match pick {
            0 => (raw(), raw()),
            1 => (rans(), zstd(3)),
            2 => (huffman(), delta(1, raw())),
            3 => (rans_pop(1 + (seed % 64) as u8), raw()),
            _ => (rans_prev(), raw()),
        };
        check(&sparse(group, m, v), &x, 0)?;
    }

    #[test]
    fn palette_any_width_and_group(
        bits in 1u32..=16,
        n in length(),
        levels in 1u64..=40,
        group in 2u16..=256,
        seed: u64,
        pick in 0u8..4,
    ) {
        // Each stretch of 64 words takes `levels` values of a grid: few distinct words per group
        // or (many levels, small groups) as many as the group has.
        let mut rng = Rng(seed);
        let x = Stream::from_fn(Ty::u(bits), n, |i| ((i / 64) as u64 * 977 + rng.below(levels) * 13) & mask(bits));
        let (c, l, g, ix) = match pick {
            0 => (raw(), raw(), raw(), raw()),
            1 => (rans(), zstd(3), lanes_adj(), lanes()),
            2 => (huffman(), delta(1, raw()), rans_prev(), huffman()),
            _ => (lanes_prev(), raw(), zstd(1), rans_prev()),
        };
        check(&palette(group, c, l, g, ix), &x, 0)?;
    }

    #[test]
    fn concat_parts(bits in 1u32..=64, n in length(), pat in pattern(), seed: u64, cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6), kid_pick: u64) {
        // Cut points in ascending order (repeated cuts give empty parts).
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(n + 1)).collect();
        points.sort_unstable();
        let mut lens = Vec::new();
        let mut prev = 0;
        for p in points {
            lens.push((p - prev) as u64);
            prev = p;
        }
        let kids: Vec<Node> = (0..=lens.len()).map(|j| leaf_for(bits, kid_pick.rotate_left(j as u32 * 7))).collect();
        check(&concat(lens, kids), &make(bits, n, pat, seed), 0)?;
    }

    #[test]
    fn repeat_of_periodic_data(bits in 0u32..=64, n in length(), period in prop_oneof![Just(1u64), 1u64..10, 1u64..2000, Just(u64::MAX)], seed: u64, kid_pick: u64) {
        let p = period as usize;
        let base = make(bits, p.min(n).max(1), Pattern::Random, seed);
        let x = Stream::from_fn(Ty::u(bits), n, |i| base.get(i % p.min(n).max(1)));
        check(&repeat(period, leaf_for(bits, kid_pick)), &x, 0)?;
    }

    #[test]
    fn repeat_with_a_wrong_period_is_invalid(bits in 1u32..=64, n in 3usize..1000, period in 1usize..50, seed: u64, at in any::<prop::sample::Index>()) {
        prop_assume!(period < n);
        let mut x: Vec<u64> = make(bits, period, Pattern::Random, seed).iter().collect();
        let mut rng = Rng(seed ^ 1);
        while x.len() < n {
            x.push(x[x.len() - period]);
        }
        // Break the period at one position after the first period.
        let i = period + at.index(n - period);
        x[i] = (x[i] ^ (1 + rng.below(mask(bits)))) & mask(bits);
        prop_assume!(x[i] != x[i - period]);
        let s = Stream::from_iter(Ty::u(bits), x.into_iter());
        let mut out = Vec::new();
        let r = repeat(period as u64, raw()).encode(&s, &[], &mut out);
        prop_assert!(matches!(r, Err(Error::Invalid(_))), "repeat({}) over aperiodic data: {:?}", period, r);
    }

    #[test]
    fn blocks_at_any_offset(t in 0usize..blocks::TYPES.len(), packed: bool, n in 0usize..2000, off in 0u64..1000, pat in pattern(), seed: u64, kid_pick: u64) {
        let id = blocks::TYPES[t];
        let op = if packed { Blocks::packed(id) } else { Blocks::new(id) };
        prop_assume!(op.is_some());
        let op = op.unwrap();
        let tys = op.child_types(Ty::u(8)).unwrap();
        let kids = tys.iter().enumerate().map(|(j, c)| leaf_for(c.bits, kid_pick.rotate_left(j as u32 * 5))).collect();
        check(&Node::new(Op::Blocks(op), kids), &make(8, n, pat, seed), off)?;
    }

    #[test]
    fn view_between_byte_widths(from in 0usize..4, to in 0usize..4, words in 0usize..300, pat in pattern(), seed: u64, kid_pick: u64) {
        let widths = [8u32, 16, 32, 64];
        let (wf, wt) = (widths[from], widths[to]);
        // A length whose bit count divides both widths.
        let n = words * (64 / wf) as usize;
        let kid = leaf_for(wt, kid_pick);
        check(&view(wt, kid), &make(wf, n, pat, seed), 0)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Reference operators: the same chunk of a reference tensor is given to both sides.
// ---------------------------------------------------------------------------------------------

/// The order-preserving integer view of a `w`-bit float (docs/DSL.md): `v | sign` for a clear
/// sign bit, `!v` for a set one.
fn key(v: u64, w: u32) -> u64 {
    let sign = 1u64 << (w - 1);
    if v & sign != 0 {
        !v & mask(w)
    } else {
        v | sign
    }
}

fn unkey(k: u64, w: u32) -> u64 {
    let sign = 1u64 << (w - 1);
    if k & sign != 0 {
        k & !sign
    } else {
        !k & mask(w)
    }
}

/// Data near a reference: equal, a few ulps away (in key order), flipped low bits, or unrelated.
fn near(r: &Stream, how: u8, seed: u64) -> Stream {
    let w = r.ty.bits;
    let mut rng = Rng(seed);
    Stream::from_fn(r.ty, r.len(), |i| {
        let v = r.get(i);
        match how {
            0 => v,
            1 => unkey(key(v, w).wrapping_add(rng.below(7)).wrapping_sub(3) & mask(w), w),
            2 => v ^ (rng.next() & 3),
            _ => rng.next(),
        }
    })
}

proptest! {
    #![proptest_config(config(CASES))]

    #[test]
    fn xorref_and_subref_any_width(
        bits in 1u32..=64,
        n in length(),
        pat in pattern(),
        seed: u64,
        how in 0u8..4,
        sub: bool,
        kid_pick: u64,
    ) {
        let r = make(bits, n, pat, seed);
        let x = near(&r, how, seed ^ 5);
        let kid = leaf_for(bits, kid_pick);
        let node = if sub { subref(kid) } else { xorref(kid) };
        check_ref(&node, &x, &r)?;
        // Under a transform that keeps the type and length.
        check_ref(&delta(1, if sub { subref(raw()) } else { xorref(raw()) }), &x, &r)?;
    }

    /// subref codes the signed distance in key order, zigzagged: the next value is 2, the
    /// previous one 1, the same one 0.
    #[test]
    fn subref_codes_distances_in_key_order(bits in 2u32..=64, n in length(), pat in pattern(), seed: u64) {
        let r = make(bits, n, pat, seed);
        for (step, want) in [(0u64, 0u64), (1, 2), (mask(bits), 1)] {
            let x = Stream::from_fn(r.ty, n, |i| unkey(key(r.get(i), bits).wrapping_add(step) & mask(bits), bits));
            let mut payload = Vec::new();
            subref(raw()).encode_with(&x, &[], Some(&r), &mut payload)?;
            let y = decode(&raw(), r.ty, n, &payload, 0)?;
            prop_assert!(y.iter().all(|v| v == want), "step {step}: {:?}", y.iter().take(4).collect::<Vec<_>>());
        }
    }

    #[test]
    fn copyref_of_equal_data(bits in 1u32..=64, n in length(), pat in pattern(), seed: u64) {
        let r = make(bits, n, pat, seed);
        check_ref(&copyref(), &r, &r)?;
        if n > 0 {
            let mut x: Vec<u64> = r.iter().collect();
            let i = (seed % n as u64) as usize;
            x[i] ^= 1;
            let x = Stream::from_iter(r.ty, x.into_iter());
            let mut out = Vec::new();
            let res = copyref().encode_with(&x, &[], Some(&r), &mut out);
            prop_assert!(matches!(res, Err(Error::Invalid(_))), "{:?}", res);
        }
    }

    /// `rans(ref shift:bits)`: the context is a bit field of the reference word.
    #[test]
    fn rans_with_reference_contexts(
        bits in 1u32..=16,
        ref_bits in prop_oneof![Just(16u32), Just(32), 1u32..=64],
        n in prop_oneof![length(), 4096usize..6000],
        shift_pick: u8,
        cbits in 1u8..=16,
        seed: u64,
    ) {
        let r = make(ref_bits, n, Pattern::Random, seed);
        let shift = shift_pick % 64;
        // x depends on the context field, with noise.
        let mut rng = Rng(seed ^ 3);
        let x = Stream::from_fn(Ty::u(bits), n, |i| ((r.get(i) >> shift) % 7) * 3 + rng.below(3));
        check_ref(&rans_ref(shift, cbits), &x, &r)?;
    }
}

#[test]
fn rans_reference_contexts_under_fields() {
    // bf16 weights next to their base: the base's exponent as context for the new exponent.
    let r = make(16, 10_000, Pattern::Specials, 1);
    for how in 0..4 {
        let x = near(&r, how, 2);
        for k in [0, 2, 7] {
            let node = fields(8, 7, k, [rans_ref(7, 8), rans_ref(15, 1), rans_ref(0, (7 - k).max(1) as u8)]);
            check_ref(&node, &x, &r).unwrap();
        }
    }
}

#[test]
fn reference_operators_need_a_matching_reference() {
    let x = make(16, 100, Pattern::Random, 1);
    let short = make(16, 99, Pattern::Random, 2);
    let wide = make(32, 100, Pattern::Random, 3);
    for node in [xorref(raw()), subref(raw()), copyref(), rans_ref(0, 8)] {
        // Without a reference: the caller must supply one (Invalid), at encode and at decode.
        let mut out = Vec::new();
        let r = node.encode(&x, &[], &mut out);
        assert!(matches!(r, Err(Error::Invalid(_))), "{node}: {r:?}");
        let mut payload = Vec::new();
        node.encode_with(&x, &[], Some(&x), &mut payload).unwrap();
        let r = decode(&node, x.ty, x.len(), &payload, 0);
        assert!(matches!(r, Err(Error::Invalid(_))), "{node}: {r:?}");
        // A reference of another length is refused, never misaligned.
        let r = node.encode_with(&x, &[], Some(&short), &mut Vec::new());
        assert!(r.is_err(), "{node}");
        let r = decode_ref(&node, x.ty, x.len(), &payload, 0, Some(&short));
        assert!(r.is_err(), "{node}");
    }
    // The element-wise operators also need the same word type.
    for node in [xorref(raw()), subref(raw()), copyref()] {
        assert!(node.encode_with(&x, &[], Some(&wide), &mut Vec::new()).is_err(), "{node}");
    }
}

// ---------------------------------------------------------------------------------------------
// Longer streams: entropy coders pick context thresholds only from 4096 symbols on.
// ---------------------------------------------------------------------------------------------

#[test]
fn rans_contexts_on_long_correlated_streams() {
    for &n in &[4096usize, 4097, 20_001] {
        for seed in 0..3u64 {
            let mut rng = Rng(seed);
            // Each word depends on the previous one and on the word 64 back.
            let mut v: Vec<u64> = Vec::with_capacity(n);
            for i in 0..n {
                let a = if i >= 1 { v[i - 1] } else { 0 };
                let b = if i >= 64 { v[i - 64] } else { 0 };
                v.push(((a + b) / 2 + rng.below(3)) % 1000 + (rng.chance(1, 50) as u64) * 60_000);
            }
            let x = Stream::from_iter(Ty::u(16), v.iter().copied());
            for node in [rans(), rans_prev(), rans_back(64), huffman(), rans_back(n as u64)] {
                check(&node, &x, 0).unwrap();
            }
            // Side context: the high byte of a u16 explains the low byte.
            let y = Stream::from_fn(Ty::u(16), n, |i| (v[i] & 0xff) << 8 | ((v[i] & 0xff) ^ (rng.below(4))));
            check(&byteplanes(vec![rans(), rans_side(0)]), &y, 0).unwrap();
            check(&bitplanes((0..16).map(|j| if j == 0 { rans() } else { rans_side(j - 1) }).collect()), &y, 0)
                .unwrap();
            // Exponent of bf16 as context for the sign and mantissa.
            check(&fields(8, 7, 0, [rans_prev(), rans_side(0), rans_side(0)]), &y, 0).unwrap();
        }
    }
}

#[test]
fn entropy_leaves_on_full_16_bit_alphabets() {
    // Every 16-bit value once, in order and shuffled; and the extremes alternating.
    let all = Stream::from_fn(Ty::u(16), 1 << 16, |i| i as u64);
    let mut rng = Rng(9);
    let mut shuffled: Vec<u64> = (0..1u64 << 16).collect();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let shuffled = Stream::from_iter(Ty::u(16), shuffled.into_iter());
    let alt = Stream::from_fn(Ty::u(16), 10_001, |i| if i % 2 == 0 { 0 } else { 0xffff });
    for x in [&all, &shuffled, &alt] {
        for node in [rans(), rans_prev(), huffman(), dict(raw(), rans()), dict(delta(1, raw()), huffman())] {
            check(&node, x, 0).unwrap();
        }
    }
}

#[test]
fn dict_with_more_than_65536_distinct_words_is_invalid() {
    let x = Stream::from_fn(Ty::u(32), 65_537, |i| i as u64 * 7);
    let mut out = Vec::new();
    let r = dict(raw(), rans()).encode(&x, &[], &mut out);
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    // Exactly 65536 distinct words still fit (16-bit indices).
    let x = Stream::from_fn(Ty::u(32), 65_536, |i| (i as u64).wrapping_mul(0x9E37_79B9) & 0xffff_ffff);
    check(&dict(raw(), rans()), &x, 0).unwrap();
}

#[test]
fn arity_that_does_not_match_the_operator_is_invalid() {
    let x = make(16, 100, Pattern::Random, 1);
    let bad = [
        byteplanes(vec![raw()]), // u16 has two byte planes
        byteplanes(vec![raw(), raw(), raw()]),
        bitplanes(vec![raw(); 15]),    // and 16 bit planes
        concat(vec![10], vec![raw()]), // two parts
    ];
    for node in bad {
        let mut out = Vec::new();
        let r = node.encode(&x, &[], &mut out);
        assert!(matches!(r, Err(Error::Invalid(_))), "{node}: {r:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Random programs: whatever the tree, encode either fails or decode gives the input back.
// ---------------------------------------------------------------------------------------------

/// A random well-typed program for streams of type `ty`. `sibs` are the types of the earlier
/// siblings of equal length (what a `side` context may use). `idx` marks a dict index subtree,
/// whose exact width is only known per chunk: only width-agnostic operators go there.
fn random_program(ty: Ty, rng: &mut Rng, depth: u32, sibs: &[Ty], idx: bool) -> Node {
    let w = ty.bits;
    let leaf = |rng: &mut Rng| -> Node {
        let mut v = vec![raw(), zstd(1 + rng.below(5) as i32)];
        if w <= 16 {
            v.extend([rans(), rans_prev(), rans_back(1 + rng.below(40)), rans_pop(1 + rng.below(64) as u8), huffman()]);
            if !idx {
                v.push(rans_ref(rng.below(64) as u8, 1 + rng.below(16) as u8));
            }
            let ok: Vec<u8> = sibs.iter().enumerate().filter(|(_, t)| t.bits <= 16).map(|(j, _)| j as u8).collect();
            if !ok.is_empty() && !idx {
                v.push(rans_side(ok[rng.below(ok.len() as u64) as usize]));
            }
        }
        v.swap_remove(rng.below(v.len() as u64) as usize)
    };
    if depth == 0 || rng.chance(1, 3) {
        return leaf(rng);
    }
    let d = depth - 1;
    loop {
        match rng.below(15) {
            14 if !idx && w == 8 => {
                let t = blocks::TYPES[rng.below(blocks::TYPES.len() as u64) as usize];
                let op = Blocks::packed(t).filter(|_| rng.chance(1, 2)).unwrap_or_else(|| Blocks::new(t).unwrap());
                let tys = op.child_types(ty).unwrap();
                let kids = tys.iter().map(|&c| random_program(c, rng, d, &[], false)).collect();
                return Node::new(Op::Blocks(op), kids);
            }
            12 if !idx && w >= 1 => {
                let kid = random_program(ty, rng, d, &[], false);
                return if rng.chance(1, 2) { xorref(kid) } else { subref(kid) };
            }
            13 if !idx && w >= 1 => return copyref(),
            0 if !idx => {
                // fields over any split of the word whose head fits the wire bound.
                if w < 2 {
                    continue;
                }
                let e = rng.below((w - 1).min(16) as u64 + 1) as u32;
                let m = w - 1 - e;
                if e > 16 {
                    continue;
                }
                let k = rng.below((m.min(16 - e)) as u64 + 1) as u32;
                let tys = [Ty::u(e + k), Ty::u(1), Ty::u(m - k)];
                let kids = [
                    random_program(tys[0], rng, d, &[], false),
                    random_program(tys[1], rng, d, &tys[..1], false),
                    random_program(tys[2], rng, d, &tys[..2], false),
                ];
                return fields(e, m, k, kids);
            }
            1 if !idx && w >= 1 => {
                let p = w.div_ceil(8);
                let tys: Vec<Ty> = (0..p).map(|j| Ty::u(if j + 1 < p { 8 } else { w - 8 * (p - 1) })).collect();
                let kids = (0..p as usize).map(|j| random_program(tys[j], rng, d, &tys[..j], false)).collect();
                return byteplanes(kids);
            }
            2 if !idx && w <= 16 => {
                let tys = vec![Ty::u(1); w as usize];
                let kids = (0..w as usize).map(|j| random_program(tys[j], rng, d.min(1), &tys[..j], false)).collect();
                return bitplanes(kids);
            }
            3 => {
                let s = [1, 2, 3, 17, 1000][rng.below(5) as usize];
                let kid = random_program(ty, rng, d, &[], idx);
                return if rng.chance(1, 2) { delta(s, kid) } else { xor(s, kid) };
            }
            4 if w >= 1 => {
                let m = match (rng.below(3), idx) {
                    (0, false) => Map::XorConst(rng.next() & ty.mask()),
                    (1, false) => Map::Rotate(rng.below(w as u64) as u32),
                    _ => Map::ZigZag,
                };
                return map(m, random_program(ty, rng, d, &[], idx));
            }
            5 if !idx => {
                let table = random_program(ty, rng, d, &[], false);
                let index = random_program(Ty::u(16), rng, d, &[], true);
                return dict(table, index);
            }
            6 if !idx => {
                let parts = 1 + rng.below(3) as usize;
                let lens: Vec<u64> = (0..parts - 1).map(|_| rng.below(40)).collect();
                let kids = (0..parts).map(|_| random_program(ty, rng, d, &[], false)).collect();
                return concat(lens, kids);
            }
            7 if !idx => {
                let p = [1, 2, 5, 64, 100_000][rng.below(5) as usize];
                return repeat(p, random_program(ty, rng, d, &[], false));
            }
            8 if !idx && matches!(w, 8 | 16 | 32 | 64) => {
                let b = [8u32, 16, 32, 64][rng.below(4) as usize];
                return view(b, random_program(Ty::u(b), rng, d, &[], false));
            }
            9 if !idx => return konst(rng.next() & ty.mask()),
            10 | 11 => return leaf(rng),
            _ => continue,
        }
    }
}

/// Data a random program has a fair chance to apply to (constant, periodic, few values...).
fn friendly_data(bits: u32, n: usize, rng: &mut Rng) -> Stream {
    match rng.below(4) {
        0 => {
            let v = rng.next() & mask(bits);
            Stream::from_fn(Ty::u(bits), n, |_| v)
        }
        1 => {
            let p = [1usize, 2, 5, 64][rng.below(4) as usize];
            let base = make(bits, p, Pattern::Random, rng.next());
            Stream::from_fn(Ty::u(bits), n, |i| base.get(i % p))
        }
        _ => {
            let pats = [Pattern::Random, Pattern::Small, Pattern::Smooth, Pattern::Specials, Pattern::AllDistinct];
            make(bits, n, pats[rng.below(pats.len() as u64) as usize], rng.next())
        }
    }
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn random_programs_round_trip_or_refuse(
        bits in prop_oneof![Just(8u32), Just(16), Just(32), Just(64), 0u32..=64],
        n in prop_oneof![Just(0usize), Just(1), 0usize..300, (0usize..40).prop_map(|k| 8 * k)],
        seed: u64,
    ) {
        let mut rng = Rng(seed);
        let ty = Ty::u(bits);
        let node = random_program(ty, &mut rng, 4, &[], false);
        check_wire(&node, ty)?;
        let x = friendly_data(bits, n, &mut rng);
        // A reference of the root's type: the data itself, data near it, or other data.
        let reference = match rng.below(3) {
            0 => x.clone(),
            1 => Stream::from_fn(ty, n, |i| x.get(i) ^ (rng.chance(1, 4) as u64)),
            _ => friendly_data(bits, n, &mut rng),
        };
        let mut payload = Vec::new();
        match node.encode_with(&x, &[], Some(&reference), &mut payload) {
            Ok(()) => {
                let y = decode_ref(&node, ty, n, &payload, 0, Some(&reference))
                    .map_err(|e| fail(format!("{node} encoded {ty}x{n} but does not decode: {e}")))?;
                prop_assert_eq!(&y, &x, "{} over {}x{}", node, ty, n);
            }
            // The documented refusals: Invalid (does not apply), or a length/parameter check.
            Err(Error::Invalid(_)) | Err(Error::Corrupt(_)) => {}
            Err(e) => return Err(fail(format!("{node}: unexpected error kind {e:?}"))),
        }
    }

    /// Decoding garbage with any well-formed program never panics: it is an error or some stream
    /// of exactly the right type and length.
    #[test]
    fn decoding_garbage_never_panics(
        bits in prop_oneof![Just(8u32), Just(16), Just(32), Just(64), 0u32..=64],
        n in 0usize..300,
        seed: u64,
        garbage in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut rng = Rng(seed);
        let ty = Ty::u(bits);
        let node = random_program(ty, &mut rng, 4, &[], false);
        // Half the time: a valid payload for other data, damaged at one byte.
        let payload = if rng.chance(1, 2) {
            let x = friendly_data(bits, n, &mut rng);
            let mut p = Vec::new();
            if node.encode(&x, &[], &mut p).is_ok() && !p.is_empty() {
                let i = rng.below(p.len() as u64) as usize;
                p[i] ^= 1 << rng.below(8);
            }
            p
        } else {
            garbage
        };
        let off = rng.next() >> 24;
        let reference = friendly_data(bits, n, &mut rng);
        let r = std::panic::catch_unwind(|| decode_ref(&node, ty, n, &payload, off, Some(&reference)));
        match r {
            Err(_) => return Err(fail(format!("decode of {node} over {ty}x{n} panicked on {payload:?}"))),
            Ok(Ok(s)) => {
                prop_assert_eq!(s.ty, ty);
                prop_assert_eq!(s.len(), n);
                prop_assert!(s.iter().all(|v| v & !ty.mask() == 0));
            }
            Ok(Err(_)) => {}
        }
    }

    /// Random bytes as a program: the parser refuses them or gives a program whose wire form is
    /// the same bytes, and decoding with it never panics.
    #[test]
    fn parsing_random_programs_never_panics(
        bits in prop_oneof![Just(8u32), Just(16), Just(32), Just(64)],
        wire in prop::collection::vec(any::<u8>(), 0..24),
        ops in prop::collection::vec(prop_oneof![Just(0x01u8), Just(0x02), Just(0x03), Just(0x05), Just(0x06), Just(0x10), Just(0x11), Just(0x12), Just(0x13), Just(0x14), Just(0x15), Just(0x16), Just(0x17), Just(0x18), Just(0x19), Just(0x1A), Just(0x1B)], 0..6),
        payload in prop::collection::vec(any::<u8>(), 0..64),
        n in 0usize..100,
    ) {
        // Interleave real operator ids with random parameter bytes, so parses get deep.
        let mut bytes = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            bytes.push(*op);
            bytes.extend(wire.iter().skip(i * 2).take(2));
        }
        bytes.extend(&wire);
        let ty = Ty::u(bits);
        let parsed = std::panic::catch_unwind(|| Node::parse(&bytes, ty));
        let Ok(parsed) = parsed else { return Err(fail(format!("parse panicked on {bytes:?}"))) };
        if let Ok(node) = parsed {
            // (Varints may be over-long on the wire, so compare programs, not bytes.)
            let again = Node::parse(&node.to_bytes(), ty).map_err(|e| fail(format!("{node} does not re-parse: {e}")))?;
            prop_assert_eq!(&again, &node);
            let r = std::panic::catch_unwind(|| decode(&node, ty, n, &payload, 0));
            prop_assert!(r.is_ok(), "decode of parsed {} panicked", node);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Programs that do not apply must fail, never produce other data.
// ---------------------------------------------------------------------------------------------

/// Encodes `x` with `node`; if that succeeds, decoding must give `x` back (or fail). Returns the
/// encode result.
fn never_wrong_data(node: &Node, x: &Stream) -> Result<()> {
    let mut payload = Vec::new();
    let r = node.encode(x, &[], &mut payload);
    if r.is_ok() {
        let back = std::panic::catch_unwind(|| decode(node, x.ty, x.len(), &payload, 0));
        match back {
            Err(_) => panic!("{node} over {}x{}: encode succeeded and decode panicked", x.ty, x.len()),
            Ok(Ok(y)) => {
                assert!(y == *x, "{node} over {}x{}: encode succeeded and decode gives other data", x.ty, x.len())
            }
            Ok(Err(_)) => {}
        }
    }
    r
}

#[test]
fn inapplicable_programs_fail_with_invalid() {
    let x16 = make(16, 100, Pattern::Random, 4);
    let wide = Stream::from_fn(Ty::u(64), 70_000, |i| i as u64);
    let constant = Stream::from_fn(Ty::u(16), 100, |_| 7);
    let cases: Vec<(Node, &Stream)> = vec![
        (konst(7), &x16),
        (konst(8), &constant),
        (repeat(3, raw()), &x16),
        (repeat(99, raw()), &x16),
        (byteplanes(vec![raw()]), &x16),
        (dict(raw(), rans()), &wide),
    ];
    for (node, x) in cases {
        let r = never_wrong_data(&node, x);
        assert!(matches!(r, Err(Error::Invalid(_))), "{node} over {}x{}: {r:?}", x.ty, x.len());
    }
}

/// The weaker guarantee for every kind of misuse through the public API: encode fails, or the
/// payload decodes to exactly the input (or fails to decode); never other data, never a panic.
#[test]
fn misused_programs_never_give_other_data() {
    let x16 = make(16, 5000, Pattern::Small, 5);
    let x32 = make(32, 64, Pattern::Random, 6);
    let x8 = make(8, 63, Pattern::Random, 7);
    let cases: Vec<(Node, &Stream)> = vec![
        (concat(vec![40, 40], vec![raw(), raw(), raw()]), &x32), // parts longer than the stream
        (view(64, raw()), &x8),                                  // 63 bytes are not whole u64s
        (view(16, raw()), &x8),
        (map(Map::XorConst(1 << 40), raw()), &x32), // constant wider than the word
        (map(Map::Rotate(32), raw()), &x32),        // rotation by the full width
        (byteplanes(vec![rans(), rans_side(1)]), &x16), // side context is not earlier
        (byteplanes(vec![rans(), rans_side(7)]), &x16),
        (fields(8, 7, 2, [raw(), raw(), raw()]), &x32), // bf16 layout over u32 words
        (repeat(0, raw()), &x16),                       // zero period
    ];
    for (node, x) in cases {
        let _ = never_wrong_data(&node, x);
    }
}

/// Regression: `rans`/`huffman` accepted streams wider than 16 bits in `Node::encode`; the words
/// were silently truncated to 16 bits, and decode returned the truncated words (in release
/// builds; a debug assertion fired otherwise). The parser refused such programs, so archives were
/// safe, but the contract of `encode` ("fails with Error::Invalid when the program does not
/// apply") was broken. Checked: `encode` refuses such streams with `Error::Invalid`.
#[test]
fn entropy_leaves_refuse_streams_wider_than_16_bits() {
    let x = Stream::from_fn(Ty::u(32), 100, |i| 0x1_0000 + i as u64);
    for node in [rans(), huffman(), rans_prev()] {
        let r = never_wrong_data(&node, &x);
        assert!(matches!(r, Err(Error::Invalid(_))), "{node}: {r:?}");
    }
}

/// Regression: `arange` never checked its data in `Node::encode` (the chooser checks whole
/// tensors), so any stream "encoded" to nothing and decoded to the progression. Checked: data
/// that is not the progression is refused with `Error::Invalid`.
#[test]
fn arange_refuses_other_data() {
    let x = Stream::from_fn(Ty::u(64), 10, |i| (i * i) as u64);
    let r = never_wrong_data(&arange(0, 1), &x);
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
}

/// Regression: `delta(0)` / `xor(0)` / `rans(back 0)` could be built and encoded (the wire reader
/// refuses them); `delta(0)` turned every word into 0, and decode then indexed out of bounds
/// (panic); `rans(back 0)` used each symbol as its own context. Checked: `encode` refuses zero
/// strides with `Error::Invalid`.
#[test]
fn zero_strides_are_refused() {
    let x = make(16, 5000, Pattern::Small, 8);
    for node in [delta(0, raw()), xor(0, raw()), rans_back(0)] {
        let r = never_wrong_data(&node, &x);
        assert!(matches!(r, Err(Error::Invalid(_))), "{node}: {r:?}");
    }
}

/// The strict form of `misused_programs_never_give_other_data`: `Node::encode` documents
/// `Error::Invalid` for a program that does not apply.
#[test]
fn misused_programs_fail_with_invalid() {
    let x16 = make(16, 5000, Pattern::Small, 5);
    let x32 = make(32, 64, Pattern::Random, 6);
    let x8 = make(8, 63, Pattern::Random, 7);
    let cases: Vec<(Node, &Stream)> = vec![
        (concat(vec![40, 40], vec![raw(), raw(), raw()]), &x32),
        (view(64, raw()), &x8),
        (map(Map::XorConst(1 << 40), raw()), &x32),
        (map(Map::Rotate(32), raw()), &x32),
        (byteplanes(vec![rans(), rans_side(1)]), &x16),
        (fields(8, 7, 2, [raw(), raw(), raw()]), &x32),
        (repeat(0, raw()), &x16),
    ];
    let mut bad = Vec::new();
    for (node, x) in cases {
        let r = never_wrong_data(&node, x);
        if !matches!(r, Err(Error::Invalid(_))) {
            bad.push(format!("{node} over {}x{}: {r:?}", x.ty, x.len()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Wire form details
// ---------------------------------------------------------------------------------------------

#[test]
fn wire_form_of_every_operator_and_extreme_parameters() {
    let ty64 = Ty::u(64);
    let programs = [
        raw(),
        zstd(0),
        zstd(22),
        konst(0),
        konst(u64::MAX),
        arange(u64::MAX, u64::MAX),
        arange(0, 0),
        copy(0),
        copy(u32::MAX),
        delta(1, raw()),
        delta(u64::MAX, raw()),
        xor(u64::MAX, zstd(1)),
        map(Map::XorConst(u64::MAX), raw()),
        map(Map::ZigZag, raw()),
        map(Map::Rotate(63), raw()),
        fields(11, 52, 5, [rans_prev(), rans_side(0), raw()]),
        fields(11, 52, 0, [huffman(), raw(), byteplanes(vec![raw(); 7])]),
        byteplanes((0..8).map(|j| if j == 0 { rans() } else { rans_side(j - 1) }).collect()),
        bitplanes((0..64).map(|j| if j == 0 { rans() } else { rans_side(j - 1) }).collect()),
        dict(delta(1, raw()), rans_back(u32::MAX as u64)),
        concat(vec![], vec![raw()]),
        concat(vec![0, u64::MAX, 3], vec![raw(), raw(), raw(), raw()]),
        repeat(u64::MAX, raw()),
        view(8, byteplanes(vec![raw()])),
        view(16, rans()),
        view(32, raw()),
        sparse(1, raw(), raw()),
        sparse(16, rans_prev(), fields(11, 52, 3, [huffman(), raw(), raw()])),
        sparse(8, rans_pop(1), raw()),
        sparse(16, rans_pop(64), raw()),
    ];
    for p in &programs {
        check_wire(p, ty64).unwrap();
    }
    // sparse's group is 1 to 16.
    for g in [0u8, 17, 255] {
        assert!(Node::parse(&sparse(g, raw(), raw()).to_bytes(), Ty::u(16)).is_err(), "sparse({g})");
    }
    // palette: words of at most 16 bits, groups of 2 to 256.
    for p in [palette(2, raw(), raw(), raw(), raw()), palette(256, rans_prev(), lanes(), delta(1, raw()), lanes_adj())]
    {
        check_wire(&p, Ty::u(16)).unwrap();
        check_wire(&p, Ty::u(5)).unwrap();
        assert!(Node::parse(&p.to_bytes(), Ty::u(17)).is_err());
    }
    for g in [0u16, 1, 257, u16::MAX] {
        let p = palette(g, raw(), raw(), raw(), raw());
        assert!(Node::parse(&p.to_bytes(), Ty::u(8)).is_err(), "palette({g})");
    }
    // A program for another root type is refused where its types do not fit.
    assert!(Node::parse(&fields(8, 7, 2, [raw(), raw(), raw()]).to_bytes(), Ty::u(32)).is_err());
    assert!(Node::parse(&rans().to_bytes(), Ty::u(32)).is_err());
    assert!(Node::parse(&huffman().to_bytes(), Ty::u(17)).is_err());
    assert!(Node::parse(&byteplanes(vec![rans(), rans_side(0)]).to_bytes(), Ty::u(16)).is_ok());
    // Zero strides, periods and distances are refused on the wire, and so are popcount windows
    // of 0 or over 64 words.
    for p in [delta(0, raw()), xor(0, raw()), repeat(0, raw()), rans_back(0), rans_pop(0), rans_pop(65)] {
        assert!(Node::parse(&p.to_bytes(), Ty::u(16)).is_err(), "{p}");
    }
    // Unknown context kinds are Unsupported.
    for kind in [6u8, 0xFF] {
        assert!(matches!(Node::parse(&[0x02, kind], Ty::u(8)), Err(Error::Unsupported(_))), "kind {kind}");
    }
    // copy is only allowed at the root.
    assert!(Node::parse(&copy(0).to_bytes(), Ty::u(16)).is_ok());
    assert!(Node::parse(&delta(1, copy(0)).to_bytes(), Ty::u(16)).is_err());
    // Trailing bytes and truncations are refused.
    let mut wire = fields(8, 7, 2, [rans(), raw(), raw()]).to_bytes();
    for cut in 0..wire.len() {
        assert!(Node::parse(&wire[..cut], Ty::u(16)).is_err(), "cut at {cut}");
    }
    wire.push(0x01);
    assert!(Node::parse(&wire, Ty::u(16)).is_err());
    // Unknown operator ids are Unsupported (a newer writer), not Corrupt.
    for id in [0x00u8, 0x09, 0x0F, 0x1E, 0x7F, 0xFF] {
        assert!(matches!(Node::parse(&[id], Ty::u(8)), Err(Error::Unsupported(_))), "id {id:#x}");
    }
}

#[test]
fn wire_depth_and_size_limits() {
    // Depth: a chain of delta nodes.
    let mut deep = raw();
    for _ in 0..(brevis::internals::dsl::MAX_DEPTH + 1) {
        deep = delta(1, deep);
    }
    assert!(Node::parse(&deep.to_bytes(), Ty::u(8)).is_err());
    let mut ok = raw();
    for _ in 0..brevis::internals::dsl::MAX_DEPTH {
        ok = delta(1, ok);
    }
    check_wire(&ok, Ty::u(8)).unwrap();
    // A deep chain still round-trips through the codec.
    check(&ok, &make(8, 100, Pattern::Random, 1), 0).unwrap();
    // Size: a wide concat above the node budget.
    let wide = concat(vec![1; 4095], vec![raw(); 4096]);
    check_wire(&wide, Ty::u(8)).unwrap();
    let x = make(8, 5000, Pattern::Random, 2);
    check(&wide, &x, 0).unwrap();
    let too_many = byteplanes(vec![wide.clone(); 8]);
    assert!(Node::parse(&too_many.to_bytes(), Ty::u(64)).is_err());
    // A huge concat part count is refused before allocating.
    let mut w = vec![0x19u8];
    w.extend([0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(Node::parse(&w, Ty::u(8)).is_err());
}
