//! The decode cost model: nanoseconds per element that each operator's decoder takes on one
//! core, what the search weighs against bytes (`bytes + decode_weight x ns x elements`, the
//! weight set by the compression level). Figures are medians of the criterion benches on the
//! reference machine (a 2-core Zen 3 VM; `cargo bench --bench coders`, `--bench lanes`,
//! `--bench kernels`), rounded; only their ratios matter to the search.

use super::{Node, Op, Ty};
use crate::coder::lanes;
use crate::dsl::ops::entropy::LeafCtx;
use crate::dsl::ops::lanes::LanesCtx;

/// Nanoseconds per element of `op`'s own decoder on a stream of type `ty` (its children's
/// decoders not included).
pub fn op_ns(op: &Op, ty: Ty) -> f64 {
    let bytes = ty.container_bytes() as f64;
    match op {
        // Bit unpacking (SIMD for 8/16-bit words).
        Op::Raw(_) => 0.1 + 0.05 * bytes,
        Op::Const(_) | Op::Arange(_) => 0.05 * bytes,
        // The copied tensor's chunk, and its checksum.
        Op::Copy(_) => 0.3 * bytes,
        // Four states over one word stream: one table, or a table looked up per symbol (in
        // four runs, the form the search writes, the states do not wait for each other; the
        // serial form of older archives is slower still on blocks with many large tables). A
        // popcount context measured 1.35 times `rans` without one on a pruned MiniLM's mask.
        Op::Rans(r) => match r.ctx {
            LeafCtx::None => 3.5,
            _ => 5.0,
        },
        // One symbol per table look-up of the code's longest length.
        Op::Huffman(_) => 3.4,
        // 32 lanes with a table in L1. A split block (2^18 symbols or more, `none` and `prev`)
        // decodes in about 0.35 ns per symbol at the AVX-512 level, but the price is not
        // lowered: the search sizes programs on samples shorter than that.
        Op::Lanes(l) => match l.ctx {
            LanesCtx::Interleaved(lanes::Ctx::None) => 0.6,
            LanesCtx::Interleaved(lanes::Ctx::Prev | lanes::Ctx::Back(_)) => 0.7,
            // Plus writing the runs back in place.
            LanesCtx::Adjacent => 0.9,
        },
        Op::Zstd(_) => 0.6 * bytes,
        // Merges of child streams (SIMD for 16-bit words), word-wise maps and scans.
        Op::Fields(_) | Op::BytePlanes(_) => 0.25 * bytes,
        Op::BitPlanes(_) => 0.1 * ty.bits as f64,
        Op::Map(_) => 0.2 * bytes,
        Op::Scan(_) => 0.6 * bytes,
        Op::Dict(_) => 1.0,
        // A test per word, and a move per value.
        Op::Sparse(_) => 0.8,
        // A group's words rebuilt from the gaps, then a look-up per word.
        Op::Palette(_) => 0.6,
        Op::Concat(_) | Op::Repeat(_) | Op::View(_) => 0.1 * bytes,
        Op::Ref(_) => 0.4 * bytes,
        // The prediction: a conversion per word, or a block quantized per 32 values.
        Op::Derive(_) => 1.0,
        // One shift-and-mask per piece of each field value, per input byte; packed quants
        // are copied as whole bytes.
        Op::Blocks(b) if b.packed => 0.3,
        Op::Blocks(_) => 1.5,
    }
}

/// Nanoseconds per element of a whole program on a root stream of type `ty`.
pub fn program_ns(p: &Node, ty: Ty) -> f64 {
    let kids: f64 = match p.child_types(ty) {
        // The fields of `blocks` hold fewer or more elements than its input.
        Ok(tys) => match &p.op {
            Op::Blocks(b) => {
                p.children.iter().zip(tys).zip(b.child_ratios()).map(|((c, t), r)| r * program_ns(c, t)).sum()
            }
            // A mask word per group; the values, taken as half of the words.
            Op::Sparse(s) => p
                .children
                .iter()
                .zip(tys)
                .zip([1.0 / s.group as f64, 0.5])
                .map(|((c, t), r)| r * program_ns(c, t))
                .sum(),
            // A count and a low word per group; the gaps, taken as half of the words; an index
            // per word.
            Op::Palette(g) => {
                let per_group = 1.0 / g.group as f64;
                p.children
                    .iter()
                    .zip(tys)
                    .zip([per_group, per_group, 0.5, 1.0])
                    .map(|((c, t), r)| r * program_ns(c, t))
                    .sum()
            }
            _ => p.children.iter().zip(tys).map(|(c, t)| program_ns(c, t)).sum(),
        },
        Err(_) => 0.0,
    };
    op_ns(&p.op, ty) + kids
}
