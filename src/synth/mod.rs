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
    /// The matching tensor of the reference (same byte length), if compressing against one.
    pub reference: Option<&'a [u8]>,
}

/// What the chooser picked.
pub struct Choice {
    pub program: Node,
    /// For a program that reads the reference: the best standalone program's size, scaled from
    /// the sample to the whole tensor (informational, shown by `inspect`).
    pub standalone_estimate: u64,
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

/// Programs that read the reference, for a tensor with a match in it.
fn reference_candidates(t: &TensorView) -> Vec<Node> {
    let w = t.word_bits;
    let mut out = vec![copyref()];
    if w <= 16 {
        // How far a weight moves depends on its magnitude: condition on the reference's exponent.
        let (shift, bits) = match t.dtype.float_layout() {
            Some((e, m)) if 1 + e + m == w => (m as u8, e as u8),
            _ => (w as u8 / 2, w as u8 / 2),
        };
        out.push(subref(rans_ref(shift, bits)));
        out.push(subref(rans()));
        out.push(xorref(rans_ref(shift, bits)));
        out.push(xorref(rans()));
    } else {
        let (shift, bits) = match t.dtype.float_layout() {
            Some((e, m)) if 1 + e + m == w && e <= 16 => (m as u8, e as u8),
            _ => ((w - 8) as u8, 8),
        };
        let planes = |head: Node| {
            let p = w.div_ceil(8) as usize;
            byteplanes((0..p).map(|j| if j == 0 { head.clone() } else { rans_side(j as u8 - 1) }).collect())
        };
        out.push(subref(planes(rans_ref(shift, bits))));
        out.push(xorref(planes(rans_ref(shift, bits))));
    }
    out
}

/// Picks the program for a tensor: a generator if one fits the whole tensor, else the smallest
/// candidate. Candidates are first ranked on a small sample; the best few are then compared by
/// exact encoded size on the full sample (the whole tensor when it fits in one chunk).
pub fn choose(t: &TensorView, opts: &SearchOptions) -> Choice {
    let plain = |program| Choice { program, standalone_estimate: 0 };
    let ty = Ty::u(t.word_bits);
    let whole = match Stream::from_le_bytes(ty, t.bytes) {
        Ok(s) => s,
        Err(_) => return plain(raw()),
    };
    if whole.is_empty() {
        return plain(raw());
    }
    if let Some(c) = Const::fits(&whole) {
        return plain(konst(c.value));
    }
    if let Some(a) = Arange::fits(&whole) {
        return plain(arange(a.start, a.step));
    }
    let reference = t.reference.and_then(|b| Stream::from_le_bytes(ty, b).ok()).filter(|r| r.len() == whole.len());
    let want = opts.sample_elems.min(opts.chunk_elems);
    let positions = sample_positions(whole.len(), want);
    let sample = pick(&whole, &positions);
    let rsample = reference.as_ref().map(|r| pick(r, &positions));
    let screen_pos = sample_positions(sample.len(), SCREEN_ELEMS);
    let screen = pick(&sample, &screen_pos);
    let rscreen = rsample.as_ref().map(|r| pick(r, &screen_pos));

    let mut cands = candidates(t);
    if reference.is_some() {
        cands.extend(reference_candidates(t));
    }
    let mut ranked = rank(cands, &screen, rscreen.as_ref());
    if sample.len() > screen.len() {
        ranked.truncate(FINALISTS);
        // Keep the best standalone program among the finalists, to measure what the reference saves.
        if let Some(alone) = rank(candidates(t), &screen, None).into_iter().next() {
            if !ranked.iter().any(|r| r.1 == alone.1) {
                ranked.push(alone);
            }
        }
        ranked = rank(ranked.into_iter().map(|r| r.1).collect(), &sample, rsample.as_ref());
    }
    let scale = |bytes: usize| (bytes as f64 * whole.len() as f64 / sample.len() as f64) as u64;
    let alone = ranked.iter().find(|r| !r.1.uses_reference()).map(|r| scale(r.0)).unwrap_or(t.bytes.len() as u64);
    match ranked.into_iter().next() {
        Some((_, program)) => Choice { standalone_estimate: if program.uses_reference() { alone } else { 0 }, program },
        None => plain(raw()),
    }
}

/// Elements of the screening sample.
const SCREEN_ELEMS: usize = 1 << 15;
/// Candidates kept from screening for the exact comparison.
const FINALISTS: usize = 3;

/// Exact encoded sizes on `sample`, smallest first (ties keep the candidate order, so the
/// result does not depend on the thread count). Inapplicable candidates are dropped.
fn rank(cands: Vec<Node>, sample: &Stream, reference: Option<&Stream>) -> Vec<(usize, Node)> {
    use rayon::prelude::*;
    let mut sized: Vec<(usize, usize, Node)> = cands
        .into_par_iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let mut buf = Vec::new();
            c.encode_with(sample, &[], reference, &mut buf).ok().map(|_| (buf.len(), i, c))
        })
        .collect();
    sized.sort_by_key(|s| (s.0, s.1));
    sized.into_iter().map(|s| (s.0, s.2)).collect()
}

/// Up to `want` positions: all of them when the stream is short enough, else four evenly spaced
/// blocks (contiguous, so that contexts such as the previous word stay meaningful).
fn sample_positions(n: usize, want: usize) -> Vec<std::ops::Range<usize>> {
    if n <= want {
        return vec![0..n];
    }
    let blocks = 4usize;
    let per = want / blocks;
    (0..blocks).map(|b| (n - per) * b / (blocks - 1)).map(|start| start..start + per).collect()
}

fn pick(x: &Stream, positions: &[std::ops::Range<usize>]) -> Stream {
    let mut s = Stream::with_capacity(x.ty, positions.iter().map(|r| r.len()).sum());
    for r in positions {
        for i in r.clone() {
            s.push(x.get(i));
        }
    }
    s
}
