//! The lanes coder. First byte even: `k = data[0] >> 1` picks the context (0: `Prev`, else
//! `Back(32 k)`), the rest is `n` (u16 LE, below 8192) and a block to decode: an error or `n`
//! symbols, never a panic, and the same result at every SIMD level. First byte odd: the rest is
//! symbols (u16 LE, masked to `(data[0] >> 2) % 16` bits + 1) to encode with `Ctx::Prev` when bit 1
//! is set, `Ctx::None` otherwise, but when bits 6..8 are not zero with `Ctx::Back(32 (k + 1))` for
//! `k` the next byte: decoding must give them back, and `encoded_len` the size. Split blocks
//! (`lanes::SPLIT_MIN` symbols or more): with `Prev` and an odd `n` the block is also decoded as
//! a split block of `SPLIT_MIN + n` symbols; symbols to encode whose first is odd are also
//! repeated to `SPLIT_MIN` or more and encoded as a split block (`Ctx::None` or `Prev`), which
//! must decode at every level.
#![no_main]
use brevis::internals::coder::lanes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let isas = brevis::internals::simd::available();
    if mode & 1 == 0 {
        if rest.len() < 2 {
            return;
        }
        let ctx = match mode >> 1 {
            0 => lanes::Ctx::Prev,
            k => lanes::Ctx::Back(32 * k as u32),
        };
        let n = u16::from_le_bytes([rest[0], rest[1]]) as usize % 8192;
        let block = &rest[2..];
        // With `Prev` and an odd `n`, also as a split block (a few milliseconds each).
        let forms: &[(usize, bool)] = if ctx == lanes::Ctx::Prev && n % 2 == 1 {
            &[(n, false), (lanes::SPLIT_MIN + n, true)]
        } else {
            &[(n, false)]
        };
        for &(n, split) in forms {
            let mut first: Option<(Result<usize, String>, Vec<u16>)> = None;
            for &l in &isas {
                let mut out = vec![0u16; n];
                let r = lanes::decode_block(l, block, ctx, split, &mut out).map_err(|e| e.to_string());
                if let Ok(used) = r {
                    assert!(used <= block.len());
                }
                let got = (r.clone(), if r.is_ok() { out } else { Vec::new() });
                match &first {
                    None => first = Some(got),
                    Some(f) => assert!(f.0.is_ok() == got.0.is_ok() && f.1 == got.1, "isas disagree"),
                }
            }
        }
    } else {
        let (ctx, rest) = if mode >> 6 != 0 {
            let Some((&k, rest)) = rest.split_first() else { return };
            (lanes::Ctx::Back(32 * (k as u32 + 1)), rest)
        } else if mode & 2 != 0 {
            (lanes::Ctx::Prev, rest)
        } else {
            (lanes::Ctx::None, rest)
        };
        let bits = 1 + (mode >> 2) as u32 % 16;
        let mask = if bits == 16 { u16::MAX } else { (1u16 << bits) - 1 };
        let syms: Vec<u16> = rest.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) & mask).collect();
        let mut block = Vec::new();
        match lanes::encode(&syms, ctx, &mut block) {
            Err(_) => assert!(lanes::encoded_len(&syms, ctx).is_err()),
            Ok(()) => {
                assert_eq!(lanes::encoded_len(&syms, ctx).unwrap(), block.len());
                block.extend_from_slice(&[0xA5; 8]);
                for &l in &isas {
                    let mut out = vec![0u16; syms.len()];
                    assert_eq!(lanes::decode_ctx_at(l, &block, ctx, &mut out).unwrap(), block.len() - 8);
                    assert!(out == syms);
                }
            }
        }
        if !matches!(ctx, lanes::Ctx::None | lanes::Ctx::Prev) || syms.first().is_none_or(|s| s & 1 == 0) {
            return;
        }
        // The symbols repeated into a split block (where the first is odd: each such encoding
        // takes a millisecond or more, and the other cases keep their pace).
        let long: Vec<u16> = syms.iter().copied().cycle().take(lanes::SPLIT_MIN + syms.len()).collect();
        let isa = brevis::internals::simd::isa();
        let mut block = Vec::new();
        if lanes::encode_block(isa, &long, ctx, true, &mut block).is_ok() {
            assert_eq!(lanes::encoded_len_block(isa, &long, ctx, true).unwrap(), block.len());
            for &l in &isas {
                let mut out = vec![0u16; long.len()];
                assert_eq!(lanes::decode_block(l, &block, ctx, true, &mut out).unwrap(), block.len());
                assert!(out == long);
            }
        }
    }
});
