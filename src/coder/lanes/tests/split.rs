//! Split blocks (`SPLIT_MIN` symbols or more, two streams): round trips at every level and
//! damaged blocks, with the sources and checks of the lanes tests.

use super::*;

/// Split blocks: the two streams take the segments in turn; every level encodes the same bytes
/// and decodes the symbols, whole or a segment at a time (and as an unsplit block where the
/// block is shorter than `SPLIT_MIN`), with every kind of table (direct, mapped, escapes,
/// context classes); damaged or cut, every kernel gives the same result, the same error
/// included, and the escapes of each stream are checked.
#[test]
fn split_blocks_round_trip_and_agree_when_damaged() {
    assert_eq!(stream_lens(5 * SEGMENT + 7), [3 * SEGMENT, 2 * SEGMENT + 7]);
    assert_eq!(stream_lens(4 * SEGMENT + 7), [2 * SEGMENT + 7, 2 * SEGMENT]);
    let kernels = Kernel::all();
    let mut seed = 23;
    let mut errors = std::collections::BTreeSet::new();
    for n in [SPLIT_MIN - 1, SPLIT_MIN, SPLIT_MIN + SEGMENT + 17, SPLIT_MIN + 3 * SEGMENT - 5] {
        let rare: Vec<u16> = (0..n)
            .map(|_| match lcg(&mut seed) % 100 {
                0..=44 => 3,
                45..=89 => 60_000,
                _ => (lcg(&mut seed) % 3000) as u16 * 20,
            })
            .collect();
        // Rows of 64 with noise: a context pair that the block's order never has comes at a
        // segment's first step of a stream (`split_plan` gives every pair a slot).
        let rows: Vec<u16> = (0..n).map(|i| ((i % 64) * 7 % 61 + (lcg(&mut seed) % 3) as usize) as u16).collect();
        let sources = [
            (geometric(n, &mut seed, 40), Ctx::None),
            (bf16_heads(n, &mut seed, 0.02), Ctx::Prev),
            (lane_regimes(n, &mut seed), Ctx::Prev),
            (rare, Ctx::None),
            (rows, Ctx::Prev),
        ];
        for (k, (syms, ctx)) in sources.iter().enumerate() {
            let mut block = Vec::new();
            encode_block(Isa::Scalar, syms, *ctx, true, &mut block).unwrap();
            for &l in &crate::simd::available() {
                let mut again = Vec::new();
                encode_block(l, syms, *ctx, true, &mut again).unwrap();
                assert!(again == block, "{l:?} encodes other bytes (n {n}, source {k})");
            }
            assert_eq!(encoded_len_block(Isa::Scalar, syms, *ctx, true).unwrap(), block.len(), "n {n} source {k}");
            let est = estimated_len_block(syms, *ctx, true).unwrap() as i64;
            let len = block.len() as i64;
            // A stream's first step of a segment takes its context from its previous segment, two
            // back in the block: `prev` loses a little where the lanes' regimes persist.
            let slack = if *ctx == Ctx::Prev { len / 100 } else { len / 500 };
            assert!((est - len).abs() <= 256 + slack, "estimated {est}, coded {len}, n {n}, source {k}");
            let plain = round_trip(syms, *ctx);
            assert_eq!(block == plain, n < SPLIT_MIN, "n {n} source {k}: split only from SPLIT_MIN");
            if n >= SPLIT_MIN {
                // One table: the second stream's states and counts, a few bytes of flush.
                let more = len - plain.len() as i64;
                assert!(more <= 4 * LANES as i64 + 16 + slack, "n {n} source {k}: {len} against {}", plain.len());
            }
            if k == 2 && n >= SPLIT_MIN {
                assert!(block_classes(&block).unwrap() > 1, "the regimes take classes");
            }
            for &kern in &kernels {
                let mut dec = vec![0xAAAAu16; n];
                assert_eq!(decode_ctx_kernel(kern, &block, *ctx, true, &mut dec).unwrap(), block.len(), "{kern:?}");
                assert!(dec == *syms, "{kern:?} n {n} source {k}");
            }
            let mut got = Vec::new();
            let used = decode_with(&block, *ctx, true, n, |start, s| {
                assert_eq!(start, got.len());
                got.extend_from_slice(s);
                Ok(())
            })
            .unwrap();
            assert!(used == block.len() && got == *syms, "decode_with, n {n} source {k}");
            if n < SPLIT_MIN {
                continue;
            }
            let mut cases: Vec<(Vec<u8>, usize)> =
                (1..=8).map(|c| (block[..block.len() - 37 * c].to_vec(), n)).collect();
            for _ in 0..40 {
                let mut b = block.clone();
                let bit = (lcg(&mut seed) % (8 * b.len() as u64)) as usize;
                b[bit / 8] ^= 1 << (bit % 8);
                cases.push((b, n));
            }
            for m in [n - 1, n + 1, n + SEGMENT] {
                cases.push((block.clone(), m));
            }
            for keep in [[1, 3], [3, 1], [2, 3]] {
                cases.extend(forge_escapes(&block, &stream_lens(n), &keep).map(|b| (b, n)));
            }
            for (b, m) in &cases {
                kernels_agree(&kernels, b, *ctx, true, *m, &mut errors, &format!("n {n}, source {k}"));
            }
        }
    }
    for e in ["more escapes than stored", "data ends early", "initial state"] {
        assert!(errors.iter().any(|m| m.contains(e)), "{e}: {errors:?}");
    }
    // `Back` contexts are never split.
    assert!(encode_block(Isa::Scalar, &[1, 2, 3], Ctx::Back(64), true, &mut Vec::new()).is_err());
    assert!(decode_block(Isa::Scalar, &[0], Ctx::Back(64), true, &mut [0u16; 3]).is_err());
}
