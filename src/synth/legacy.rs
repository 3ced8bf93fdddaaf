//! The chooser of the first release, kept as a reference point: a fixed list of candidate
//! programs per tensor. The search must be able to derive every one of them (tests/synthesis.rs
//! checks it), so that its results are never worse than this list's on the same sample.

use super::TensorView;
use crate::dsl::build::*;
use crate::dsl::ops::maps::Map;
use crate::dsl::Node;

/// Elements per output channel: the product of the dimensions after the first, when the
/// tensor has more than one channel. Scales differ most between channels, so the word one
/// channel back is the best context for an exponent.
pub fn channel_len(shape: &[u64]) -> Option<u64> {
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
pub fn reference_candidates(t: &TensorView) -> Vec<Node> {
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
