//! The productions of the search: for a typed hole (a stream of `u(w)` words on the sample),
//! every operator whose type rule fits, with its parameters drawn from the tensor (field
//! layouts from the dtype, strides from the shape, contexts from the earlier siblings, zstd
//! level from the size). Each production has a *label*: the operator with its parameters
//! abstracted (`rans(back ch)` rather than `rans(back 384)`), which is what the prior counts.

use super::features::Features;
use crate::coder;
use crate::dsl::ops::blocks::Blocks;
use crate::dsl::ops::dict::Dict;
use crate::dsl::ops::entropy::{Huffman, LeafCtx, Rans};
use crate::dsl::ops::fields::Fields;
use crate::dsl::ops::gen::Const;
use crate::dsl::ops::lanes::{Lanes, LanesCtx};
use crate::dsl::ops::lz::Zstd;
use crate::dsl::ops::maps::Map;
use crate::dsl::ops::palette::Palette;
use crate::dsl::ops::planes::BytePlanes;
use crate::dsl::ops::raw::Raw;
use crate::dsl::ops::reference::RefOp;
use crate::dsl::ops::scan::{Scan, ScanKind};
use crate::dsl::ops::sparse::Sparse;
use crate::dsl::{Data, Node, Op, Stream};

/// What the productions of a tensor depend on (the same for all of its holes).
#[derive(Clone, Debug)]
pub struct TensorCtx {
    pub features: Features,
    /// (exponent, mantissa) bits when the root words are floats of that layout.
    pub float: Option<(u32, u32)>,
    /// Signed integers: `zigzag` applies at the root.
    pub signed: bool,
    /// Elements per output channel (the stride of `rans(back ch)` and `delta(ch)`).
    pub channel: Option<u64>,
    /// The last dimension, when it differs from the channel length (`rans(back row)`).
    pub row: Option<u64>,
    /// A period of several channels at which the words repeat their scales clearly better than
    /// one channel back (`features::channel_lag`): offered as a `back` context beside the
    /// channel's, under its label (it is the stride the channel's would have been).
    pub lag: Option<u64>,
    /// With a reference: the bits of the reference word that `rans(ref)` conditions on.
    pub ref_ctx: Option<(u8, u8)>,
    pub zstd_level: i32,
    /// zstd level of the `zstd` leaf on the parts of a `palette` (at most `zstd_level`).
    pub zstd_palette: i32,
    /// The root is a byte stream of quantization blocks of this layout (`blocks` applies).
    pub blocks: Option<Blocks>,
    /// Deepest hole that may still take a transform.
    pub max_depth: usize,
    /// Bytes charged per nanosecond of decode time per element (`dsl::cost`): 0 chooses by
    /// size alone.
    pub decode_weight: f64,
    /// zstd level of the LZ probe of [`estimate`].
    pub lz_probe: i32,
    /// `rans` leaves whose context is none or a word back are offered (`lanes` has the same).
    pub plain_rans: bool,
}

/// A hole as the grammar sees it.
pub struct HoleView<'a> {
    pub stream: &'a Stream,
    /// The streams of the earlier children of the same parent (for `rans(side j)`).
    pub siblings: &'a [Stream],
    pub depth: usize,
    /// The parent production's label ("" at the root).
    pub parent_label: &'a str,
    /// Word `i` of the stream comes from element `i` of the tensor (strides and the reference apply).
    pub aligned: bool,
    /// The fast LZ probe finds repeats (its estimate beats order 0 and raw by 10%).
    pub repeats: bool,
}

/// An operator with its parameters, ready to apply to a hole.
#[derive(Clone, Debug)]
pub struct Production {
    pub label: String,
    pub op: Op,
}

impl Production {
    fn new(t: &TensorCtx, op: Op) -> Production {
        Production { label: label_of(&op, t), op }
    }

    pub fn is_leaf(&self) -> bool {
        Node::leaf(self.op.clone()).is_leaf()
    }
}

/// The label of an operator: its parameters abstracted over the tensor's shape.
pub fn label_of(op: &Op, t: &TensorCtx) -> String {
    match op {
        Op::Raw(_) => "raw".into(),
        Op::Const(_) => "const".into(),
        Op::Rans(r) => match r.ctx {
            LeafCtx::None => "rans".into(),
            LeafCtx::Back(1) => "rans(prev)".into(),
            LeafCtx::Back(d) if Some(d) == t.channel || Some(d) == t.lag => "rans(back ch)".into(),
            LeafCtx::Back(d) if Some(d) == t.row => "rans(back row)".into(),
            LeafCtx::Back(_) => "rans(back)".into(),
            LeafCtx::Side(j) => format!("rans(side{j})"),
            LeafCtx::Ref { .. } => "rans(ref)".into(),
            LeafCtx::Pop(_) => "rans(pop)".into(),
        },
        Op::Huffman(_) => "huffman".into(),
        Op::Lanes(Lanes { ctx: LanesCtx::Interleaved(coder::lanes::Ctx::Back(d)), .. }) => match Some(*d as u64) {
            c if c == t.channel || c == t.lag => "lanes(back ch)".into(),
            r if r == t.row => "lanes(back row)".into(),
            _ => "lanes(back)".into(),
        },
        Op::Lanes(l) => l.to_string(),
        Op::Zstd(_) => "zstd".into(),
        Op::Fields(f) => format!("fields(k{})", f.k),
        Op::Scan(s) => {
            let name = if s.kind == ScanKind::Delta { "delta" } else { "xor" };
            match s.stride {
                1 => format!("{name}(1)"),
                d if Some(d) == t.channel => format!("{name}(ch)"),
                _ => name.into(),
            }
        }
        other => {
            let n = Node::leaf(other.clone());
            n.shape()
        }
    }
}

/// Field splits tried for a float layout: joint symbols of the exponent and up to 7 top
/// mantissa bits (the head stays at most 16 bits wide).
pub fn field_ks(e: u32, m: u32) -> std::ops::RangeInclusive<u32> {
    0..=m.min(16u32.saturating_sub(e)).min(7)
}

/// Words per mask word of the `sparse` the search offers: 8 holds two 2:4 groups (36 patterns,
/// as many bits a word as 2:4's own 6) and a byte of an unstructured mask.
pub const SPARSE_GROUP: u8 = 8;

/// Words per group of the `palette`s the search offers: a quantization block of the common ggml
/// types (Q4_0 to Q8_0) and of quantization-aware checkpoints, and a K-quant sub-block (Q6_K's
/// 16 quants share a scale).
pub const PALETTE_GROUPS: [u16; 2] = [16, 32];

/// Whether the groups of `g` words of `x` hold markedly fewer distinct words than groups of its
/// words taken across the stream: over up to 256 groups, the mean distinct count per group at
/// most 0.85 times that of as many groups whose word `k` comes from group `j + 97 k`. Words on a
/// grid of few values per block (a 4-bit model dequantized or requantized) measure 0.45-0.80
/// (SmolLM2's requantized Q8_0, Q6_K and Q5_0 quants); independent quants 0.95-1.0 (MiniLM's Q8_0
/// and Q5_1), even where their alphabet is small enough that any group holds few values.
fn few_per_group(x: &Stream, g: usize) -> bool {
    let groups = (x.len() / g).min(256);
    if groups < 16 {
        return false;
    }
    // Only the groups measured (the hole's stream can be a whole sample; this runs per group size).
    let words: Vec<u16> = (0..groups * g).map(|i| x.get(i) as u16).collect();
    let mut sorted = Vec::with_capacity(g);
    let mut distinct = |group: &mut dyn Iterator<Item = u16>| {
        sorted.clear();
        sorted.extend(group);
        sorted.sort_unstable();
        sorted.dedup();
        sorted.len()
    };
    let (mut within, mut across) = (0usize, 0usize);
    for j in 0..groups {
        within += distinct(&mut words[j * g..(j + 1) * g].iter().copied());
        across += distinct(&mut (0..g).map(|k| words[(j + 97 * k) % groups * g + k]));
    }
    20 * within <= 17 * across
}

/// The entropy leaves that apply to a hole of at most 16-bit words, with their contexts.
fn entropy_leaves(t: &TensorCtx, hole: &HoleView, push: &mut impl FnMut(Op)) {
    let n = hole.stream.len();
    let rans = |ctx| Op::Rans(Rans::new(ctx));
    // (Where they are not offered, `lanes` codes the same contexts.)
    if t.plain_rans {
        push(rans(LeafCtx::None));
        push(rans(LeafCtx::Back(1)));
    }
    if hole.aligned && t.plain_rans {
        if let Some(c) = t.channel.filter(|&c| (c as usize) < n) {
            push(rans(LeafCtx::Back(c)));
        }
        if let Some(r) = t.row.filter(|&r| (r as usize) < n) {
            push(rans(LeafCtx::Back(r)));
        }
        if let Some(l) = t.lag.filter(|&l| (l as usize) < n) {
            push(rans(LeafCtx::Back(l)));
        }
    }
    for (j, s) in hole.siblings.iter().enumerate() {
        if (1..=16).contains(&s.ty.bits) && s.len() == n && j < 254 {
            push(rans(LeafCtx::Side(j as u8)));
        }
    }
    if let (Some((shift, bits)), true) = (t.ref_ctx, hole.aligned) {
        push(rans(LeafCtx::Ref { shift, bits }));
    }
    push(Op::Huffman(Huffman));
    // The decode-speed leaf, where decode time is priced (it is rarely the smallest, and
    // offering it at the size-only level takes budget from the others).
    if t.decode_weight > 0.0 {
        push(Op::Lanes(Lanes::interleaved(coder::lanes::Ctx::None)));
        if n > coder::lanes::LANES {
            push(Op::Lanes(Lanes::interleaved(coder::lanes::Ctx::Prev)));
            // The adjacent word, each lane owning a contiguous run.
            push(Op::Lanes(Lanes::adjacent()));
        }
        // The word one channel or one row back, when it is of the same lane.
        if hole.aligned {
            let lanes = coder::lanes::LANES as u64;
            let mut backs: Vec<u64> = [t.channel, t.row, t.lag].into_iter().flatten().collect();
            backs.sort_unstable();
            backs.dedup();
            for d in backs {
                if d > lanes && d % lanes == 0 && (d as usize) < n && d <= coder::lanes::MAX_BACK as u64 {
                    push(Op::Lanes(Lanes::interleaved(coder::lanes::Ctx::Back(d as u32))));
                }
            }
        }
    }
}

/// Every production that applies to `hole`, in a fixed order: leaves, then transforms.
pub fn productions(t: &TensorCtx, hole: &HoleView) -> Vec<Production> {
    let x = hole.stream;
    let w = x.ty.bits;
    let n = x.len();
    let root = hole.depth == 0;
    let mut v = Vec::new();
    let mut push = |op: Op| v.push(Production::new(t, op));
    push(Op::Raw(Raw));
    if !root && n > 0 {
        // A constant part of a tensor (the root's constants are found on the whole tensor).
        if let Some(c) = Const::fits(x) {
            push(Op::Const(c));
        }
    }
    if (1..=16).contains(&w) {
        entropy_leaves(t, hole, &mut push);
    }
    if root || (w >= 8 && hole.repeats) {
        let level =
            if hole.parent_label.starts_with("palette") { t.zstd_level.min(t.zstd_palette) } else { t.zstd_level };
        push(Op::Zstd(Zstd { level }));
    }
    if hole.depth >= t.max_depth || w == 0 {
        return v;
    }
    let under = hole.parent_label;
    // The values of `sparse` are words of the tensor's own type.
    let values = under.starts_with("sparse") && hole.siblings.len() == 1;
    if root || values {
        if let Some((e, m)) = t.float.filter(|&(e, m)| 1 + e + m == w) {
            for k in field_ks(e, m) {
                push(Op::Fields(Fields::for_dtype_bits(e, m, k)));
            }
        }
    }
    if root {
        if let Some(b) = &t.blocks {
            push(Op::Blocks(b.clone()));
        }
        // Pruned weights: a mask of the zero words, and the others.
        if w >= 8 && t.blocks.is_none() && n >= 64 && 4 * x.iter().filter(|&v| v == 0).count() >= n {
            push(Op::Sparse(Sparse { group: SPARSE_GROUP }));
        }
    }
    // The scale fields of quantization blocks: fp16 (and Q8_K's f32) words.
    if under.starts_with("blocks") && !hole.siblings.is_empty() {
        let layout = match w {
            16 => Some((5, 10)),
            32 => Some((8, 23)),
            _ => None,
        };
        if let Some((e, m)) = layout {
            for k in field_ks(e, m) {
                push(Op::Fields(Fields::for_dtype_bits(e, m, k)));
            }
        }
    }
    if w > 8 {
        push(Op::BytePlanes(BytePlanes));
    }
    // Parts of a float or of a word's bytes are bit fields, not numbers: scans and
    // dictionaries apply to numeric streams (and dict also to a float's low mantissa bits).
    let bitfield = under.starts_with("fields") || under == "byteplanes";
    // Words on a grid of few values per block: a palette per group (not of its own parts, nor
    // of the bytes of quantization blocks, whose groups would straddle the blocks).
    let nested = ["palette", "dict", "sparse", "delta", "xor", "zigzag"].iter().any(|p| under.starts_with(p));
    let block_bytes = root && t.blocks.is_some();
    if (5..=16).contains(&w) && !bitfield && !nested && !block_bytes {
        for group in PALETTE_GROUPS {
            if few_per_group(x, group as usize) {
                push(Op::Palette(Palette { group }));
            }
        }
    }
    let low_mantissa = under.starts_with("fields") && hole.siblings.len() == 2;
    let under_scan = under.starts_with("delta") || under.starts_with("xor");
    if w >= 8 && !under.starts_with("dict") && ((!bitfield && w >= 16) || low_mantissa) {
        push(Op::Dict(Dict));
    }
    if w >= 8 && !bitfield && !under_scan && under != "zigzag" {
        push(Op::Scan(Scan { kind: ScanKind::Delta, stride: 1 }));
        push(Op::Scan(Scan { kind: ScanKind::Xor, stride: 1 }));
        if let (Some(c), true) = (t.channel, hole.aligned) {
            push(Op::Scan(Scan { kind: ScanKind::Delta, stride: c }));
        }
    }
    if w >= 2 && (under_scan || (root && t.signed)) {
        push(Op::Map(Map::ZigZag));
    }
    if root && t.ref_ctx.is_some() {
        push(Op::Ref(RefOp::Sub));
        push(Op::Ref(RefOp::Xor));
    }
    v
}

/// Productions offered only where the data shows what they exploit (`palette` where groups hold
/// few distinct words): the search evaluates them as soon as their hole comes up and takes them
/// as likely as the likeliest production, so that a prior learned on files without that
/// structure does not hide it where it appears.
pub fn evidenced(p: &Production) -> bool {
    matches!(p.op, Op::Palette(_))
}

/// Productions the search never queues although they apply: `raw` right under a word-wise
/// bijection (a scan or a map) costs exactly what `raw` costs one level up. (They stay in the
/// list so that a partial program can always be completed with raw.)
pub fn pointless(p: &Production, parent_label: &str) -> bool {
    matches!(p.op, Op::Raw(_))
        && (parent_label.starts_with("delta") || parent_label.starts_with("xor(") || parent_label == "zigzag")
}

/// What applying a production to a hole gives.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The production does not apply to this data.
    Fail,
    /// A leaf: its exact encoded bytes on the sample (length prefix included).
    Leaf(usize),
    /// A transform: bytes it writes itself (dict's table size) and its child streams.
    Split(usize, Vec<Stream>),
}

/// Whether evaluating the production costs nothing (its size is known without coding).
pub fn is_free(p: &Production) -> bool {
    matches!(p.op, Op::Raw(_) | Op::Const(_))
}

/// Applies a production to a hole on the sample; `reference` is the aligned reference sample.
pub fn apply(p: &Production, hole: &HoleView, reference: Option<&Stream>) -> Outcome {
    let x = hole.stream;
    match &p.op {
        Op::Raw(_) => {
            let c = Raw::cost(x.ty, x.len());
            Outcome::Leaf(crate::coder::bitio::varint_len(c as u64) + c)
        }
        Op::Const(c) => {
            if x.iter().all(|v| v == c.value) {
                Outcome::Leaf(0)
            } else {
                Outcome::Fail
            }
        }
        Op::Fields(f) => match f.child_types(x.ty) {
            Ok(_) => Outcome::Split(0, f.forward(x)),
            Err(_) => Outcome::Fail,
        },
        Op::BytePlanes(b) => match b.child_types(x.ty) {
            Ok(_) => Outcome::Split(0, b.forward(x)),
            Err(_) => Outcome::Fail,
        },
        Op::BitPlanes(b) => Outcome::Split(0, b.forward(x)),
        Op::Scan(s) => Outcome::Split(0, vec![s.forward(x)]),
        Op::Map(m) => match m.check(x.ty) {
            Ok(()) => Outcome::Split(0, vec![m.apply(x, false)]),
            Err(_) => Outcome::Fail,
        },
        Op::Blocks(b) => match b.forward(x, 0) {
            Ok(parts) => Outcome::Split(0, parts),
            Err(_) => Outcome::Fail,
        },
        Op::Sparse(s) => split_with_header(s.child_types(x.ty).is_ok(), |h| s.forward(x, h)),
        Op::Palette(pal) => split_with_header(pal.child_types(x.ty).is_ok(), |h| pal.forward(x, h)),
        Op::Dict(d) => {
            let mut header = Vec::new();
            match d.forward(x, &mut header) {
                Some(parts) => Outcome::Split(header.len(), parts),
                None => Outcome::Fail,
            }
        }
        Op::Ref(op @ (RefOp::Sub | RefOp::Xor)) => match reference {
            Some(r) if r.len() == x.len() && r.ty == x.ty && op.check(x.ty).is_ok() => {
                Outcome::Split(0, vec![op.forward(x, r)])
            }
            _ => Outcome::Fail,
        },
        op => {
            let leaf = Node::leaf(op.clone());
            if !leaf.is_leaf() {
                return Outcome::Fail;
            }
            let r = if hole.aligned { reference } else { None };
            match leaf.estimated_len_with(x, hole.siblings, r) {
                Ok(len) => Outcome::Leaf(len),
                Err(_) => Outcome::Fail,
            }
        }
    }
}

/// The split of a transform that writes a header of its own into the chunk (its bytes count),
/// where its type rule fits (`fits`).
fn split_with_header(fits: bool, forward: impl FnOnce(&mut Vec<u8>) -> Vec<Stream>) -> Outcome {
    if !fits {
        return Outcome::Fail;
    }
    let mut header = Vec::new();
    let parts = forward(&mut header);
    Outcome::Split(header.len(), parts)
}

/// Bytes a transform is assumed to add per child stream before it is evaluated.
pub const STREAM_OVERHEAD: f64 = 8.0;

/// Cheap estimates of how small a stream can be coded, in bytes (A*'s h for open holes).
#[derive(Clone, Copy, Debug)]
pub struct Estimate {
    /// Exact size of the raw leaf.
    pub raw: f64,
    /// Order-0 entropy plus the tables and fixed part of an entropy coder (streams wider than
    /// 16 bits: as byte planes); may exceed raw.
    pub order0: f64,
    /// Order-0 entropy alone: what a split of the stream into parts may approach.
    pub entropy: f64,
    /// A fast zstd of the little-endian bytes (what the `zstd` leaf sees); may exceed raw.
    pub lz: f64,
}

/// Share of the order-0 size a context (previous word, word above, a sibling) is assumed to save.
pub const CTX_GAIN: f64 = 0.03;

impl Estimate {
    /// Whether an LZ coder should find repeats here: its estimate beats the others by 10%.
    pub fn repeats(&self) -> bool {
        self.lz < 0.9 * self.order0.min(self.raw)
    }

    /// Two estimates for one production before it is evaluated: a realistic one, which orders
    /// the search, and an optimistic one, which prunes it. Raw and const are exact; zstd gets
    /// the LZ probe; entropy leaves get order 0 with tables (realistic) or without (optimistic),
    /// less `CTX_GAIN` with a context. A transform gets the hole's best leaf estimate
    /// (realistic) or the best of raw, the LZ probe and the entropy less `CTX_GAIN`
    /// (optimistic: a split cannot beat the entropy of what it splits, but for a context), plus
    /// `STREAM_OVERHEAD` per child stream in both; a prediction (scan, reference) has no
    /// optimistic bound but its overhead.
    pub fn for_production(&self, p: &Production, ty: crate::dsl::Ty) -> (f64, f64) {
        let ctx = 1.0 - CTX_GAIN;
        match &p.op {
            Op::Raw(_) => (self.raw, self.raw),
            Op::Const(_) => (0.0, 0.0),
            Op::Zstd(_) => (self.lz, self.lz),
            Op::Rans(Rans { ctx: LeafCtx::None, .. })
            | Op::Huffman(_)
            | Op::Lanes(Lanes { ctx: LanesCtx::Interleaved(coder::lanes::Ctx::None), .. }) => {
                (self.order0, self.entropy)
            }
            Op::Rans(_) => (self.order0 * ctx, self.entropy * ctx),
            // Predictions (differences with the previous word, the word above, the reference)
            // and a palette per group (each word an index among a few) can remove almost
            // everything: no optimistic bound short of their overhead.
            Op::Scan(_) | Op::Ref(_) => {
                let leaf = self.raw.min(self.lz).min(if ty.bits <= 16 { self.order0 * ctx } else { f64::INFINITY });
                (leaf + STREAM_OVERHEAD, STREAM_OVERHEAD)
            }
            Op::Palette(_) => {
                let leaf = self.raw.min(self.lz).min(self.order0 * ctx);
                (leaf + 4.0 * STREAM_OVERHEAD, 4.0 * STREAM_OVERHEAD)
            }
            op => {
                let arity = Node::leaf(op.clone()).child_types(ty).map_or(1, |c| c.len());
                let extra = STREAM_OVERHEAD * arity as f64;
                let leaf = self.raw.min(self.lz).min(if ty.bits <= 16 { self.order0 * ctx } else { f64::INFINITY });
                (leaf + extra, self.raw.min(self.lz).min(self.entropy * ctx) + extra)
            }
        }
    }
}

/// The estimate of stream `x`, with the LZ probe at zstd level `lz_probe`.
pub fn estimate(x: &Stream, lz_probe: i32) -> Estimate {
    let n = x.len();
    let raw = coder::packed_len(n, x.ty.bits) as f64 + 1.0;
    if n == 0 || x.ty.bits == 0 {
        return Estimate { raw, order0: raw, entropy: raw, lz: raw };
    }
    let (order0, entropy) = if x.ty.bits <= 16 {
        match &x.data {
            Data::U8(d) => entropy_with_tables(x.ty.bits, d.iter().map(|&v| v as u64)),
            Data::U16(d) => entropy_with_tables(x.ty.bits, d.iter().map(|&v| v as u64)),
            _ => entropy_with_tables(x.ty.bits, x.iter()),
        }
    } else {
        let planes = x.ty.bits.div_ceil(8);
        (0..planes)
            .map(|j| {
                let sh = 8 * j;
                entropy_with_tables(8, x.iter().map(move |v| (v >> sh) & 0xFF))
            })
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let bytes = n * x.ty.container_bytes();
    let lz = match x.ty.bits >= 8 && bytes >= LZ_PROBE_MIN {
        true => lz_estimate(&x.to_le_bytes(), raw, lz_probe),
        false => raw,
    };
    Estimate { raw, order0, entropy, lz }
}

/// What a fast zstd (level `level`, matches from 4 bytes so that repeated 32-bit words count)
/// makes of the little-endian bytes, less `LZ_OPTIMISM` of that (the leaf uses a stronger
/// level); never below what it saves on the raw size times the same share.
fn lz_estimate(b: &[u8], raw: f64, level: i32) -> f64 {
    thread_local! {
        // One context per thread (and its level): creating one costs more than probing a screen.
        static PROBE: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { std::cell::RefCell::new(None) };
    }
    let fast = || -> std::io::Result<usize> {
        PROBE.with_borrow_mut(|c| {
            if c.as_ref().is_none_or(|(l, _)| *l != level) {
                let mut z = zstd::bulk::Compressor::new(level)?;
                z.set_parameter(zstd::zstd_safe::CParameter::MinMatch(4))?;
                *c = Some((level, z));
            }
            Ok(c.as_mut().expect("set above").1.compress(b)?.len())
        })
    };
    match fast() {
        Ok(n) => {
            let n = n as f64;
            n - LZ_OPTIMISM * n.min((raw - n).max(0.0))
        }
        Err(_) => raw,
    }
}

/// Bytes of a stream below which the LZ probe is not run (the estimate takes it as raw): a
/// zstd frame of a stream that short is not smaller than its entropy-coded estimate (on the dev
/// corpus and the GGUF files, the same archives but 13 bytes), and on a checkpoint of a thousand
/// biases of 32 floats the probes took a fifth of the compression.
pub(crate) const LZ_PROBE_MIN: usize = 256;

/// Share of the fast level's output that a strong level is assumed to save.
const LZ_OPTIMISM: f64 = 0.15;

/// (Order-0 entropy plus about 6 bits of table per used symbol and the coder's fixed part,
/// order-0 entropy alone), in bytes, of values below 2^bits.
fn entropy_with_tables(bits: u32, vals: impl Iterator<Item = u64>) -> (f64, f64) {
    // Counted in the coders' per-thread table, read back in ascending symbol order.
    let v: Vec<u16> = vals.map(|v| v as u16).collect();
    let nf = v.len() as f64;
    let (mut bitsum, mut used) = (0.0, 0usize);
    coder::with_seen(&v, 1 << bits, |_, c| {
        used += 1;
        bitsum += c as f64 * (nf / c as f64).log2();
    });
    ((bitsum + 6.0 * used as f64) / 8.0 + 20.0, bitsum / 8.0)
}
