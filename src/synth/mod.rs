//! The chooser: for each tensor, enumerate candidate programs from the DSL's productions for its
//! type, run each on a sample of the tensor, and keep the smallest by exact encoded size.
//!
//! Candidates are built from the same productions a search enumerates (transform, then a leaf
//! per output stream), so the bounded search of the synthesis issue can replace `candidates`
//! without touching the operators.

use crate::dsl::build::*;
use crate::dsl::ops::gen::{Arange, Const};
use crate::dsl::ops::maps::Map;
use crate::dsl::{Node, Stream, Ty};
use crate::tensor::DType;

/// What the chooser knows about a tensor.
pub struct TensorView<'a> {
    pub dtype: &'a DType,
    pub shape: &'a [u64],
    pub word_bits: u32,
    pub bytes: &'a [u8],
}

/// Search settings (never stored in the archive).
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// Elements per chunk.
    pub chunk_elems: usize,
    /// Elements of the sample on which candidates are compared.
    pub sample_elems: usize,
}

/// Elements per output channel: the product of the dimensions after the first, when the
/// tensor has more than one channel. Scales differ most between channels, so the word one
/// channel back is the best context for an exponent.
fn channel_len(shape: &[u64]) -> Option<u64> {
    match shape {
        [c, rest @ ..] if *c > 1 && !rest.is_empty() => {
            let l: u64 = rest.iter().product();
            (l > 1).then_some(l)
        }
        _ => None,
    }
}

/// Contexts worth trying for a symbol stream: none, the previous word, the word one channel back.
fn heads(shape: &[u64]) -> Vec<Node> {
    let mut v = vec![rans(), rans_prev()];
    if let Some(c) = channel_len(shape) {
        v.push(rans_back(c));
    }
    v
}

/// Leaves for the low mantissa bits: raw, or coded (they may be structured: constant,
/// rounded, few values); wide ones as byte planes.
fn low_leaves(lo: u32) -> Vec<Node> {
    match lo {
        0 => vec![raw()],
        1..=16 => vec![raw(), rans()],
        _ => {
            let planes = lo.div_ceil(8) as usize;
            vec![raw(), byteplanes(vec![rans(); planes])]
        }
    }
}

/// Programs for a float dtype with `e` exponent and `m` mantissa bits.
fn float_candidates(e: u32, m: u32, w: u32, shape: &[u64]) -> Vec<Node> {
    let ks: Vec<u32> = match w {
        8 => (0..=m).collect(),
        16 if e == 8 => vec![1, 2],
        16 => vec![2, 3],
        _ => vec![2],
    };
    let mut out = Vec::new();
    for k in ks {
        for head in heads(shape) {
            for lo in low_leaves(m - k) {
                out.push(fields(e, m, k, [head.clone(), raw(), lo]));
            }
        }
    }
    out
}

/// Byte planes of a `w`-bit word, most significant first; `ctx` gives each lower plane the
/// plane above as context.
fn planes_program(w: u32, first: Node, ctx: bool) -> Node {
    let p = w.div_ceil(8) as usize;
    byteplanes(
        (0..p)
            .map(|j| {
                if j == 0 {
                    first.clone()
                } else if ctx {
                    rans_side(j as u8 - 1)
                } else {
                    rans()
                }
            })
            .collect(),
    )
}

/// All candidate programs for a tensor (generators are handled by `choose`).
pub fn candidates(t: &TensorView) -> Vec<Node> {
    let w = t.word_bits;
    let mut out = vec![raw()];
    if w <= 16 {
        out.push(rans());
        out.push(rans_prev());
    }
    if let Some((e, m)) = t.dtype.float_layout() {
        if 1 + e + m == w {
            out.extend(float_candidates(e, m, w, t.shape));
        }
    }
    if w >= 16 {
        out.push(planes_program(w, rans(), false));
        out.push(planes_program(w, rans(), true));
        out.push(dict(raw(), rans()));
        out.push(dict(raw(), rans_prev()));
        if t.dtype.float_layout().is_none() {
            // Integers: differences, zigzag, then planes.
            out.push(delta(1, map(Map::ZigZag, planes_program(w, rans(), false))));
        }
    }
    let level = if t.bytes.len() <= 1 << 20 { 19 } else { 9 };
    out.push(zstd(level));
    out
}

/// Picks the program for a tensor: a generator if one fits the whole tensor, else the smallest
/// candidate. Candidates are first ranked on a small sample; the best few are then compared by
/// exact encoded size on the full sample (the whole tensor when it fits in one chunk).
pub fn choose(t: &TensorView, opts: &SearchOptions) -> Node {
    let ty = Ty::u(t.word_bits);
    let whole = match Stream::from_le_bytes(ty, t.bytes) {
        Ok(s) => s,
        Err(_) => return raw(),
    };
    if whole.is_empty() {
        return raw();
    }
    if let Some(c) = Const::fits(&whole) {
        return konst(c.value);
    }
    if let Some(a) = Arange::fits(&whole) {
        return arange(a.start, a.step);
    }
    let sample = sample_of(&whole, opts.sample_elems.min(opts.chunk_elems));
    let mut ranked = rank(candidates(t), &sample_of(&sample, SCREEN_ELEMS));
    if sample.len() > SCREEN_ELEMS {
        ranked.truncate(FINALISTS);
        ranked = rank(ranked.into_iter().map(|r| r.1).collect(), &sample);
    }
    ranked.into_iter().next().map(|b| b.1).unwrap_or_else(raw)
}

/// Elements of the screening sample.
const SCREEN_ELEMS: usize = 1 << 15;
/// Candidates kept from screening for the exact comparison.
const FINALISTS: usize = 3;

/// Exact encoded sizes on `sample`, smallest first (ties keep the candidate order, so the
/// result does not depend on the thread count). Inapplicable candidates are dropped.
fn rank(cands: Vec<Node>, sample: &Stream) -> Vec<(usize, Node)> {
    use rayon::prelude::*;
    let mut sized: Vec<(usize, usize, Node)> = cands
        .into_par_iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let mut buf = Vec::new();
            c.encode(sample, &[], &mut buf).ok().map(|_| (buf.len(), i, c))
        })
        .collect();
    sized.sort_by_key(|s| (s.0, s.1));
    sized.into_iter().map(|s| (s.0, s.2)).collect()
}

/// Up to `want` elements: the whole stream when it is short enough, else four evenly spaced blocks.
fn sample_of(x: &Stream, want: usize) -> Stream {
    let n = x.len();
    if n <= want {
        return x.clone();
    }
    let blocks = 4usize;
    let per = want / blocks;
    let mut s = Stream::with_capacity(x.ty, per * blocks);
    for b in 0..blocks {
        let start = (n - per) * b / (blocks - 1);
        for i in start..start + per {
            s.push(x.get(i));
        }
    }
    s
}
