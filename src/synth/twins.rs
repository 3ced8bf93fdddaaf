//! The finalists' *twins*: variants of each finalist that the search on the screen rarely keeps
//! itself but a whole chunk can favour, ranked with the finalists on the sample
//! (docs/SYNTHESIS.md, step 5).

use super::{search, SearchOptions};
use crate::dsl::build::*;
use crate::dsl::{Node, Op};

/// Tensors of at most this many words, sampled whole, also try the LZ twin: zstd at level 19
/// over more costs more compression time than the rare win is worth, and an LZ coder's size on
/// a sample of blocks says little about its size on the whole tensor.
pub const LZ_TWIN_MAX: usize = 1 << 14;

/// Adds the twins of `found`'s programs that `opts` prices (`whole`: the tensor's words, when
/// they are all in the sample the twins are ranked on).
pub(super) fn add(found: &mut Vec<search::Found>, opts: &SearchOptions, whole: Option<usize>) {
    // Where decode time is priced, each finalist's fast twin competes too: the screen is too
    // short for the tables of the fast leaf to pay, so the search rarely keeps it. And so does
    // each one's twin with a raw sign, which the screen's noise can hide: a sign plane's context
    // rarely saves what its decoding costs.
    if opts.decode_weight > 0.0 {
        add_twin(found, fast_twin);
        add_twin(found, raw_sign_twin);
    }
    // So do (where `rans` leaves are offered: not at `fast`) the twin with a zero mask's density
    // as its context, and the one with the previous word as the context of each leaf that has
    // none: their tables pay on a chunk but not on the screen.
    if opts.plain_rans {
        add_twin(found, mask_twin);
        add_twin(found, context_twin);
    }
    // So does the twin with each LZ leaf coded by `lanes`, which the sample can misjudge
    // (`Confirm::lz_winner` checks it over the tensor).
    add_twin(found, literal_twin);
    // So does the twin whose float split keeps WIDER_HEAD more mantissa bits in its head.
    add_twin(found, wider_head_twin);
    // The packed twin of a block split competes too: on the screen, the table of a byte
    // alphabet weighs more than it does on a whole chunk.
    add_twin(found, packed_twin);
    // On a small tensor, so does the twin whose float or byte split codes its head by LZ.
    if whole.is_some_and(|n| n <= LZ_TWIN_MAX) {
        add_twin(found, lz_twin);
    }
}

/// `p` (a `byteplanes` or `fields` root whose head is an entropy leaf) with its head coded by
/// `zstd(19)`: the high bytes of a small depthwise kernel repeat across its channels in runs
/// that an LZ coder copies at no table cost (MediaPipe's palm detector: 10,334 bytes for a
/// 5x5x256 fp16 kernel that the best entropy head took 10,717 for). None otherwise.
pub(super) fn lz_twin(p: &Node) -> Option<Node> {
    match &p.op {
        Op::BytePlanes(_) | Op::Fields(_) if p.children.first().is_some_and(coded) => {
            let mut children = p.children.clone();
            children[0] = zstd(19);
            Some(Node::new(p.op.clone(), children))
        }
        _ => None,
    }
}

/// Adds to `found` the `twin` of each of its programs that has one and is not there yet (to be
/// ranked by exact size on the sample).
fn add_twin(found: &mut Vec<search::Found>, twin: fn(&Node) -> Option<Node>) {
    let twins: Vec<search::Found> = found
        .iter()
        .filter_map(|f| twin(&f.program).map(|program| search::Found { program, exact: false, ..f.clone() }))
        .filter(|t| found.iter().all(|f| f.program != t.program))
        .collect();
    found.extend(twins);
}

/// `p` with its entropy leaves replaced by the `lanes` leaf of the same context (order 0 for
/// `rans` and `huffman`, `adj` for `rans(prev)`, `back d` for `rans(back d)` when `d` is of the
/// same lane); None when nothing changes.
pub(super) fn fast_twin(p: &Node) -> Option<Node> {
    use crate::coder::lanes::{Ctx, LANES, MAX_BACK};
    use crate::dsl::ops::entropy::{LeafCtx, Rans};
    let leaf = match &p.op {
        Op::Huffman(_) | Op::Rans(Rans { ctx: LeafCtx::None, .. }) => Some(lanes()),
        Op::Rans(Rans { ctx: LeafCtx::Back(1) | LeafCtx::Pop(_), .. }) => Some(lanes_adj()),
        Op::Rans(Rans { ctx: LeafCtx::Back(d), .. }) if d % LANES as u64 == 0 && *d <= MAX_BACK as u64 => {
            Some(Node::leaf(Op::Lanes(crate::dsl::ops::lanes::Lanes::interleaved(Ctx::Back(*d as u32)))))
        }
        _ => None,
    };
    leaf.or_else(|| with_children(p, p.children.iter().map(fast_twin).collect()))
}

/// `p` with each `zstd` leaf coded by `lanes` (order 0, as LZ codes the literals of a stream
/// with few repeats, and faster to decode); None when it has none.
pub(super) fn literal_twin(p: &Node) -> Option<Node> {
    match &p.op {
        Op::Zstd(_) => Some(lanes()),
        _ => with_children(p, p.children.iter().map(literal_twin).collect()),
    }
}

/// Mask words (bytes of `sparse(8)`'s mask) whose set bits are the context of the mask twin's
/// `rans(pop)`: 128 mask bits before each word, in its quarter of the chunk. On the masks of a
/// pruned MiniLM (80% zeros, chunks of 2^19 elements) windows of 8, 16 and 32 bytes saved 9.2,
/// 9.5 and 9.1 KB of the word embeddings' 1027 KB against `rans` without a context.
pub const POP_WINDOW: u8 = 16;

/// `p` with the mask of each `sparse` coded by `rans(pop)`, the density of the mask's bits
/// before each word as its context; None when nothing changes.
fn mask_twin(p: &Node) -> Option<Node> {
    let pop = rans_pop(POP_WINDOW);
    let kids: Vec<Option<Node>> = p
        .children
        .iter()
        .enumerate()
        .map(|(i, c)| match &p.op {
            Op::Sparse(_) if i == 0 => (*c != pop).then(|| pop.clone()),
            _ => mask_twin(c),
        })
        .collect();
    with_children(p, kids)
}

/// `p` with each entropy leaf that has no context coded by `rans(prev, split)`: on the screen,
/// streams of one word per group or block (a `palette`'s counts and smallest words) are too
/// short for a context's tables to pay (a `rans` block takes contexts from 4096 words on), on a
/// chunk they are not. A search guided by a prior learned from the input's own sample, which
/// favours the leaves that won there, otherwise loses them: SmolLM2-135M-Instruct's BF16 GGUF
/// (a dequantized Q4_1 model) was 2.7% larger with that prior than with the built-in one, and
/// is within 0.07% with this twin. None when nothing changes.
fn context_twin(p: &Node) -> Option<Node> {
    use crate::coder::lanes::Ctx;
    use crate::dsl::ops::entropy::{LeafCtx, Rans};
    use crate::dsl::ops::lanes::{Lanes, LanesCtx};
    let leaf = match &p.op {
        Op::Huffman(_)
        | Op::Rans(Rans { ctx: LeafCtx::None, .. })
        | Op::Lanes(Lanes { ctx: LanesCtx::Interleaved(Ctx::None), .. }) => Some(rans_prev()),
        _ => None,
    };
    leaf.or_else(|| with_children(p, p.children.iter().map(context_twin).collect()))
}

/// `p` with the children that `kids` replaces (where it is not None); None when it replaces
/// none.
fn with_children(p: &Node, kids: Vec<Option<Node>>) -> Option<Node> {
    if kids.iter().all(|k| k.is_none()) {
        return None;
    }
    let children = kids.into_iter().zip(&p.children).map(|(k, c)| k.unwrap_or_else(|| c.clone())).collect();
    Some(Node::new(p.op.clone(), children))
}

/// Whether `c` is an entropy-coded leaf.
fn coded(c: &Node) -> bool {
    matches!(c.op, Op::Lanes(_) | Op::Huffman(_) | Op::Rans(_))
}

/// `p` with the entropy-coded sign part of each `fields` raw; None when nothing changes.
pub(super) fn raw_sign_twin(p: &Node) -> Option<Node> {
    let kids: Vec<Option<Node>> = p
        .children
        .iter()
        .enumerate()
        .map(|(i, c)| match &p.op {
            Op::Fields(_) if i == 1 && coded(c) => Some(raw()),
            _ => raw_sign_twin(c),
        })
        .collect();
    with_children(p, kids)
}

/// `blocks(t, packed)` in place of a `blocks(t)` root (the search itself only splits blocks
/// whole): the fields the two layouts share keep their programs, and each byte field of packed
/// quants gets the quants' leaf: a context of the row above with its distance scaled to bytes
/// (`lanes(back 384)` over 4-bit quants is `lanes(back 192)` over their bytes), else without a
/// context (a byte holds two neighbouring quants already, and a byte alphabet's context tables
/// are costly to plan); a quants program that is not a leaf becomes `lanes`.
fn packed_twin(p: &Node) -> Option<Node> {
    use crate::coder::lanes::{Ctx, LANES, MAX_BACK};
    use crate::dsl::ops::blocks::Blocks;
    use crate::dsl::ops::entropy::{LeafCtx, Rans};
    use crate::dsl::ops::lanes::{Lanes, LanesCtx};
    let Op::Blocks(b) = &p.op else { return None };
    let packed = Blocks::packed(b.ggml).filter(|_| !b.packed)?;
    let quants = p.children.last()?;
    let per_block = *b.field_counts().last()?;
    let leaf = |count: usize| -> Node {
        // Distance `d` in quants is `d * count / per_block` in this field's values.
        let scaled =
            |d: u64| (d * count as u64).is_multiple_of(per_block as u64).then(|| d * count as u64 / per_block as u64);
        match &quants.op {
            Op::Lanes(Lanes { ctx: LanesCtx::Interleaved(Ctx::Back(d)), .. }) => {
                match scaled(*d as u64).filter(|&e| e > LANES as u64 && e % LANES as u64 == 0 && e <= MAX_BACK as u64) {
                    Some(e) => Node::leaf(Op::Lanes(Lanes::interleaved(Ctx::Back(e as u32)))),
                    None => lanes(),
                }
            }
            Op::Rans(Rans { ctx: LeafCtx::Back(d), .. }) if *d > 1 => match scaled(*d).filter(|&e| e > 1) {
                Some(e) => rans_back(e),
                None => rans(),
            },
            Op::Rans(_) => rans(),
            Op::Huffman(_) | Op::Raw(_) | Op::Zstd(_) => Node::leaf(quants.op.clone()),
            _ => lanes(),
        }
    };
    let counts = packed.field_counts();
    let children = packed.shared_fields(b).into_iter().enumerate().map(|(j, same)| match same {
        Some(k) => p.children[k].clone(),
        None => leaf(counts[j - 1]),
    });
    Some(Node::new(Op::Blocks(packed), children.collect()))
}

/// Mantissa bits that the wider-head twin moves from a float split's low part into its head.
pub const WIDER_HEAD: u32 = 2;

/// `p` with each `fields` split whose head is an entropy leaf keeping `WIDER_HEAD` more
/// mantissa bits in its head (as many as `grammar::field_ks` allows): on the screen the larger
/// table of a wider head outweighs what it saves, on a chunk it does not (the nonzero weights of
/// an 80%-pruned MiniLM's word embeddings: 2.5 KB smaller with 5 mantissa bits in the head than
/// with the screen's 3). None when nothing changes.
pub(super) fn wider_head_twin(p: &Node) -> Option<Node> {
    if let Op::Fields(f) = &p.op {
        let most = *super::grammar::field_ks(f.exp, f.mant).end();
        let k = (f.k + WIDER_HEAD).min(most);
        if k == f.k || !p.children.first().is_some_and(coded) {
            return None;
        }
        let wider = crate::dsl::ops::fields::Fields::for_dtype_bits(f.exp, f.mant, k);
        return Some(Node::new(Op::Fields(wider), p.children.clone()));
    }
    with_children(p, p.children.iter().map(wider_head_twin).collect())
}
