//! The DSL: typed streams, programs (trees of reversible operators), their wire form, the
//! encoder that runs a program forward over a chunk and the interpreter that runs it backward.
//!
//! A program is applied to each chunk of a tensor, whose words are the root stream (`u(w)` with
//! `w` the element width). Transforms map one stream to child streams; leaves code a stream into
//! the chunk payload (entropy coders, raw) or generate it (const, arange, copy). Children are
//! decoded in order, and a leaf may use an earlier sibling as context.
//! See docs/DSL.md for the grammar and every operator.

pub mod cost;
pub mod fused;
mod memo;
pub mod ops;
pub mod stream;

use crate::coder::bitio::{self, put_bytes, put_varint, ByteReader};
use crate::error::{Error, Result};
use ops::blocks::Blocks;
use ops::copy::Copy;
use ops::derive::Derive;
use ops::dict::Dict;
use ops::entropy::{Huffman, LeafCtx, Rans};
use ops::fields::Fields;
use ops::gen::{Arange, Const};
use ops::lanes::{Lanes, LanesCtx};
use ops::lz::Zstd;
use ops::maps::Map;
use ops::palette::Palette;
use ops::planes::{BitPlanes, BytePlanes};
use ops::raw::Raw;
use ops::reference::RefOp;
use ops::region::{Concat, Repeat, View};
use ops::scan::{Scan, ScanKind};
use ops::sparse::Sparse;
pub use stream::{Data, Stream, Ty};

/// Deepest program accepted from the wire.
pub const MAX_DEPTH: usize = 24;
/// Most nodes in one program accepted from the wire.
pub const MAX_NODES: usize = 8192;

/// The operator registry. Ids are permanent: see docs/DSL.md.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Raw(Raw),
    Rans(Rans),
    Huffman(Huffman),
    Lanes(Lanes),
    Zstd(Zstd),
    Const(Const),
    Arange(Arange),
    Copy(Copy),
    Fields(Fields),
    BytePlanes(BytePlanes),
    BitPlanes(BitPlanes),
    Scan(Scan),
    Map(Map),
    Dict(Dict),
    Sparse(Sparse),
    Palette(Palette),
    Concat(Concat),
    Repeat(Repeat),
    View(View),
    Ref(RefOp),
    Derive(Derive),
    Blocks(Blocks),
}

/// A program: an operator and the sub-programs of its output streams.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub children: Vec<Node>,
}

/// What a program may see besides its chunk payload.
pub struct Env<'a> {
    /// Index of the chunk's first element in its tensor.
    pub elem_offset: u64,
    /// Supplies the same chunk of an earlier tensor (for `copy`).
    pub copy: &'a dyn Fn(u32) -> Result<Stream>,
    /// The same chunk of the reference tensor, when the archive was made against one.
    pub reference: Option<&'a Stream>,
}

impl<'a> Env<'a> {
    /// An environment with no reference.
    pub fn new(elem_offset: u64, copy: &'a dyn Fn(u32) -> Result<Stream>) -> Env<'a> {
        Env { elem_offset, copy, reference: None }
    }
}

impl Node {
    pub fn leaf(op: Op) -> Node {
        Node { op, children: Vec::new() }
    }

    pub fn new(op: Op, children: Vec<Node>) -> Node {
        Node { op, children }
    }

    /// Whether running the program reads bytes from the chunk payload (generators and copies do not).
    pub fn reads_payload(&self) -> bool {
        matches!(
            self.op,
            Op::Raw(_)
                | Op::Rans(_)
                | Op::Huffman(_)
                | Op::Lanes(_)
                | Op::Zstd(_)
                | Op::Dict(_)
                | Op::Sparse(_)
                | Op::Palette(_)
        ) || self.children.iter().any(|c| c.reads_payload())
    }

    /// Whether the program reads the reference (an operator or a leaf context).
    pub fn uses_reference(&self) -> bool {
        matches!(self.op, Op::Ref(_) | Op::Derive(_) | Op::Rans(Rans { ctx: LeafCtx::Ref { .. }, .. }))
            || self.children.iter().any(|c| c.uses_reference())
    }

    pub fn is_leaf(&self) -> bool {
        matches!(
            self.op,
            Op::Raw(_)
                | Op::Rans(_)
                | Op::Huffman(_)
                | Op::Lanes(_)
                | Op::Zstd(_)
                | Op::Const(_)
                | Op::Arange(_)
                | Op::Copy(_)
                | Op::Ref(RefOp::Copy)
        )
    }

    fn id(&self) -> u8 {
        match &self.op {
            Op::Raw(_) => Raw::ID,
            Op::Rans(_) => Rans::ID,
            Op::Huffman(_) => Huffman::ID,
            Op::Lanes(_) => Lanes::ID,
            Op::Zstd(_) => Zstd::ID,
            Op::Const(_) => Const::ID,
            Op::Arange(_) => Arange::ID,
            Op::Copy(_) => Copy::ID,
            Op::Fields(_) => Fields::ID,
            Op::BytePlanes(_) => BytePlanes::ID,
            Op::BitPlanes(_) => BitPlanes::ID,
            Op::Scan(s) => s.id(),
            Op::Map(m) => m.id(),
            Op::Dict(_) => Dict::ID,
            Op::Sparse(_) => Sparse::ID,
            Op::Palette(_) => Palette::ID,
            Op::Concat(_) => Concat::ID,
            Op::Repeat(_) => Repeat::ID,
            Op::View(_) => View::ID,
            Op::Ref(r) => r.id(),
            Op::Derive(_) => Derive::ID,
            Op::Blocks(b) => b.id(),
        }
    }

    /// Static type rule: the types of the child streams for an input of type `ty`.
    /// (`dict`'s index type is only bounded here: its exact width comes from the chunk.)
    pub fn child_types(&self, ty: Ty) -> Result<Vec<Ty>> {
        match &self.op {
            Op::Fields(f) => f.child_types(ty),
            Op::BytePlanes(b) => b.child_types(ty),
            Op::BitPlanes(b) => b.child_types(ty),
            Op::Scan(_) | Op::Repeat(_) => Ok(vec![ty]),
            Op::Map(m) => {
                m.check(ty)?;
                Ok(vec![ty])
            }
            Op::Dict(d) => d.child_types(ty),
            Op::Sparse(s) => s.child_types(ty),
            Op::Palette(p) => p.child_types(ty),
            Op::Ref(r) => {
                r.check(ty)?;
                Ok(if *r == RefOp::Copy { Vec::new() } else { vec![ty] })
            }
            Op::Concat(c) => Ok(vec![ty; c.arity()]),
            Op::Derive(d) => d.child_types(ty),
            Op::Blocks(b) => b.child_types(ty),
            Op::View(v) => {
                v.child_len(ty, 0)?;
                Ok(vec![Ty::u(v.bits)])
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Serializes the program (pre-order: id, parameters, children).
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.id());
        match &self.op {
            Op::Rans(r) => r.write(out),
            Op::Lanes(l) => l.write(out),
            Op::Zstd(z) => out.push(z.level.clamp(0, 255) as u8),
            Op::Const(c) => put_varint(out, c.value),
            Op::Arange(a) => {
                put_varint(out, a.start);
                put_varint(out, a.step);
            }
            Op::Copy(c) => put_varint(out, c.tensor as u64),
            Op::Fields(f) => f.write(out),
            Op::Scan(s) => s.write(out),
            Op::Map(m) => m.write(out),
            Op::Concat(c) => c.write(out),
            Op::Repeat(r) => put_varint(out, r.period),
            Op::View(v) => put_varint(out, v.bits as u64),
            Op::Blocks(b) => b.write(out),
            Op::Sparse(s) => s.write(out),
            Op::Palette(p) => p.write(out),
            Op::Derive(d) => d.write(out),
            Op::Raw(_) | Op::Huffman(_) | Op::BytePlanes(_) | Op::BitPlanes(_) | Op::Dict(_) | Op::Ref(_) => {}
        }
        for c in &self.children {
            c.write(out);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write(&mut v);
        v
    }

    /// Parses and type-checks a program for a root stream of type `ty`.
    pub fn parse(bytes: &[u8], ty: Ty) -> Result<Node> {
        let mut r = ByteReader::new(bytes);
        let mut budget = MAX_NODES;
        let n = Self::read(&mut r, ty, 0, &mut budget, &[])?;
        if !r.is_empty() {
            return Err(Error::corrupt("program: trailing bytes"));
        }
        Ok(n)
    }

    /// Reads one node whose input is `ty`; `siblings` are the types of the streams decoded
    /// before it under the same parent (what a `side` context may refer to).
    fn read(r: &mut ByteReader, ty: Ty, depth: usize, budget: &mut usize, siblings: &[Ty]) -> Result<Node> {
        if depth > MAX_DEPTH || *budget == 0 {
            return Err(Error::corrupt("program too deep or too large"));
        }
        *budget -= 1;
        let id = r.u8()?;
        let op = match id {
            Raw::ID => Op::Raw(Raw),
            Rans::ID => Op::Rans(Rans::read(r)?),
            Huffman::ID => Op::Huffman(Huffman),
            Lanes::ID => Op::Lanes(Lanes::read(r)?),
            Zstd::ID => Op::Zstd(Zstd::read(r)?),
            Const::ID => Op::Const(Const { value: r.varint()? }),
            Arange::ID => Op::Arange(Arange { start: r.varint()?, step: r.varint()? }),
            Copy::ID => Op::Copy(Copy::read(r)?),
            Fields::ID => Op::Fields(Fields::read(r)?),
            BytePlanes::ID => Op::BytePlanes(BytePlanes),
            BitPlanes::ID => Op::BitPlanes(BitPlanes),
            Scan::DELTA_ID => Op::Scan(Scan::read(ScanKind::Delta, r)?),
            Scan::XOR_ID => Op::Scan(Scan::read(ScanKind::Xor, r)?),
            Map::XORCONST_ID | Map::ZIGZAG_ID | Map::ROTATE_ID => Op::Map(Map::read(id, r)?),
            Dict::ID => Op::Dict(Dict),
            Sparse::ID => Op::Sparse(Sparse::read(r)?),
            Palette::ID => Op::Palette(Palette::read(r)?),
            Concat::ID => Op::Concat(Concat::read(r)?),
            Repeat::ID => Op::Repeat(Repeat::read(r)?),
            View::ID => Op::View(View::read(r)?),
            Blocks::ID | Blocks::PACKED_ID => Op::Blocks(Blocks::read(id, r)?),
            RefOp::XOR_ID => Op::Ref(RefOp::Xor),
            RefOp::SUB_ID => Op::Ref(RefOp::Sub),
            RefOp::COPY_ID => Op::Ref(RefOp::Copy),
            Derive::ID => Op::Derive(Derive::read(r)?),
            _ => return Err(Error::Unsupported(format!("unknown operator id {id:#04x}"))),
        };
        let mut node = Node::leaf(op);
        match &node.op {
            Op::Rans(_) | Op::Huffman(_) | Op::Lanes(_) if ty.bits > 16 => {
                return Err(Error::corrupt("entropy leaf over a stream wider than 16 bits"))
            }
            Op::Copy(_) if depth > 0 => return Err(Error::corrupt("copy below the root")),
            Op::Derive(_) if depth > 0 => return Err(Error::corrupt("derive below the root")),
            Op::Rans(Rans { ctx: LeafCtx::Side(j), .. }) if siblings.get(*j as usize).is_none_or(|s| s.bits > 16) => {
                return Err(Error::corrupt("rans: side context is not an earlier sibling of at most 16 bits"))
            }
            _ => {}
        }
        let ctys = node.child_types(ty)?;
        for (i, &cty) in ctys.iter().enumerate() {
            node.children.push(Self::read(r, cty, depth + 1, budget, &ctys[..i])?);
        }
        Ok(node)
    }

    /// Runs the program forward over `x`, appending the chunk payload to `out`.
    /// Fails with `Error::Invalid` when the program does not apply to this data.
    pub fn encode(&self, x: &Stream, sib: &[Stream], out: &mut Vec<u8>) -> Result<()> {
        self.encode_with(x, sib, None, out)
    }

    /// Like `encode`, with the reference chunk (aligned with `x`) for programs that use one.
    pub fn encode_with(&self, x: &Stream, sib: &[Stream], reference: Option<&Stream>, out: &mut Vec<u8>) -> Result<()> {
        self.encode_at(x, sib, reference, 0, out)
    }

    /// Runs the program forward over a chunk whose first element is element `elem_offset` of
    /// its tensor. Every failure is `Error::Invalid`: the program does not apply to this data.
    pub fn encode_at(
        &self,
        x: &Stream,
        sib: &[Stream],
        reference: Option<&Stream>,
        elem_offset: u64,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.encode_node(x, sib, reference, elem_offset, How::Write, out).map_err(|e| match e {
            Error::Corrupt(m) => Error::Invalid(m),
            e => e,
        })
    }

    /// Runs `f` with the estimates of coding leaves kept on this thread (`estimated_len_with`
    /// estimates each leaf once per stream it codes): for comparing many programs on one sample.
    pub fn with_estimates_kept<R>(f: impl FnOnce() -> R) -> R {
        memo::with_memo(f)
    }

    /// The payload length `encode_with` would produce, with the coded symbols of the `rans` and
    /// `lanes` leaves estimated from their tables instead of coded (within a few bytes per
    /// leaf) and `huffman` leaves sized from their code lengths (exact): what the chooser
    /// compares candidates by. Fails where `encode_with` fails.
    pub fn estimated_len_with(&self, x: &Stream, sib: &[Stream], reference: Option<&Stream>) -> Result<usize> {
        self.estimated_len_at(x, sib, reference, 0)
    }

    /// [`Node::estimated_len_with`] over a chunk whose first element is element `elem_offset`
    /// of its tensor (as [`Node::encode_at`]).
    pub fn estimated_len_at(
        &self,
        x: &Stream,
        sib: &[Stream],
        reference: Option<&Stream>,
        elem_offset: u64,
    ) -> Result<usize> {
        let mut out = Vec::new();
        self.encode_node(x, sib, reference, elem_offset, How::Estimate, &mut out).map_err(|e| match e {
            Error::Corrupt(m) => Error::Invalid(m),
            e => e,
        })?;
        Ok(out.len())
    }

    fn encode_node(
        &self,
        x: &Stream,
        sib: &[Stream],
        reference: Option<&Stream>,
        elem_offset: u64,
        how: How,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if how == How::Estimate {
            if let Some(r) = self.kept_estimate(x, sib, reference, out) {
                return r;
            }
        }
        let not_applicable = || Error::invalid("program does not apply to this data");
        self.check_encodes(x.ty)?;
        // A transform's output: where a memo is kept, read from it when estimating, and kept
        // for the programs estimated after this one on the same stream.
        let kept = memo::parts_key(self, x, reference, elem_offset);
        if let Some(key) = kept.as_ref().filter(|_| how != How::Write) {
            if let Some((header, parts)) = memo::parts(key, &self.op) {
                out.extend_from_slice(&header);
                return self.encode_children(&parts, reference, elem_offset, how, out);
            }
        }
        let start = out.len();
        let kids = |parts: Vec<Stream>, out: &mut Vec<u8>| {
            let parts = std::rc::Rc::new(parts);
            if let Some(key) = kept {
                memo::keep_parts(key, &self.op, &out[start..], &parts);
            }
            self.encode_children(&parts, reference, elem_offset, how, out)
        };
        // Estimated payloads keep the layout (the length prefix), with zeros for the symbols.
        let estimated = |o: &mut Vec<u8>, len: usize| o.resize(o.len() + len, 0);
        let hint = x.len() * x.ty.container_bytes();
        match &self.op {
            Op::Raw(r) => leaf_payload(out, hint, |o| {
                r.encode(x, o);
                Ok(())
            }),
            Op::Rans(r) if how != How::Write => leaf_payload(out, hint, |o| {
                let _: () = estimated(o, r.estimated_len(x, sib, reference)?);
                Ok(())
            }),
            Op::Lanes(l) if how != How::Write => leaf_payload(out, hint, |o| {
                let _: () = estimated(o, l.estimated_len(x)?);
                Ok(())
            }),
            Op::Huffman(h) if how != How::Write => leaf_payload(out, hint, |o| {
                let _: () = estimated(o, h.encoded_len(x));
                Ok(())
            }),
            Op::Rans(r) => leaf_payload(out, hint, |o| r.encode(x, sib, reference, o)),
            Op::Huffman(h) => leaf_payload(out, hint, |o| {
                h.encode(x, o);
                Ok(())
            }),
            Op::Lanes(l) => leaf_payload(out, hint, |o| l.encode(x, o)),
            Op::Zstd(z) => leaf_payload(out, hint, |o| z.encode(x, o)),
            Op::Const(c) => {
                if x.iter().any(|v| v != c.value) {
                    return Err(not_applicable());
                }
                Ok(())
            }
            // Generators that depend on the position are checked by the chooser on the whole tensor.
            Op::Arange(a) => {
                if a.decode(x.ty, x.len(), elem_offset)? != *x {
                    return Err(not_applicable());
                }
                Ok(())
            }
            // The chooser proves copies by comparing bytes.
            Op::Copy(_) => Ok(()),
            Op::Ref(op) => {
                op.check(x.ty)?;
                let r = RefOp::reference(reference, x.ty, x.len())?;
                match op {
                    RefOp::Copy if r == x => Ok(()),
                    RefOp::Copy => Err(not_applicable()),
                    _ => kids(vec![op.forward(x, r)], out),
                }
            }
            Op::Fields(f) => kids(f.forward(x), out),
            Op::BytePlanes(b) => kids(b.forward(x), out),
            Op::BitPlanes(b) => kids(b.forward(x), out),
            Op::Scan(s) => kids(vec![s.forward(x)], out),
            Op::Map(m) => {
                m.check(x.ty)?;
                kids(vec![m.apply(x, false)], out)
            }
            Op::Dict(d) => {
                let parts = d.forward(x, out).ok_or_else(not_applicable)?;
                kids(parts, out)
            }
            Op::Sparse(s) => {
                s.child_types(x.ty)?;
                let parts = s.forward(x, out);
                kids(parts, out)
            }
            Op::Palette(p) => {
                p.child_types(x.ty)?;
                let parts = p.forward(x, out);
                kids(parts, out)
            }
            Op::Concat(c) => kids(c.forward(x)?, out),
            Op::Repeat(r) => kids(vec![r.forward(x).ok_or_else(not_applicable)?], out),
            Op::View(v) => kids(vec![v.forward(x)?], out),
            // The reference below is already the derived one (the caller predicts it).
            Op::Derive(d) => {
                d.child_types(x.ty)?;
                kids(vec![x.clone()], out)
            }
            Op::Blocks(b) => kids(b.forward(x, elem_offset)?, out),
        }
    }

    /// The type rule, checked as the parser does, and the parameters an encoder refuses.
    fn check_encodes(&self, ty: Ty) -> Result<()> {
        if self.child_types(ty)?.len() != self.children.len() {
            return Err(Error::invalid("program arity does not match the operator"));
        }
        match &self.op {
            Op::Rans(_) | Op::Huffman(_) | Op::Lanes(_) if ty.bits > 16 => {
                Err(Error::invalid("entropy leaf over words wider than 16 bits"))
            }
            Op::Rans(Rans { ctx: LeafCtx::Back(0), .. }) => Err(Error::invalid("zero context distance")),
            Op::Rans(Rans { ctx: LeafCtx::Pop(d), .. }) if *d == 0 || *d as usize > crate::coder::rans::MAX_POP => {
                Err(Error::invalid("rans: popcount window out of range"))
            }
            Op::Scan(s) if s.stride == 0 => Err(Error::invalid("zero stride")),
            Op::Repeat(r) if r.period == 0 => Err(Error::invalid("zero period")),
            _ => Ok(()),
        }
    }

    /// A coding leaf's estimate where the caller keeps them (`memo::with_memo`; what it
    /// appends depends on its stream, siblings and reference alone): appended from the memo, or
    /// made once (`How::EstimateOnce`) and kept. None where no memo is kept or `self` is not
    /// such a leaf.
    fn kept_estimate(&self, x: &Stream, sib: &[Stream], r: Option<&Stream>, out: &mut Vec<u8>) -> Option<Result<()>> {
        if !matches!(self.op, Op::Rans(_) | Op::Lanes(_) | Op::Huffman(_) | Op::Zstd(_)) {
            return None;
        }
        let key = memo::key(self, x, sib, r)?;
        if let Some(kept) = memo::get(&key) {
            let len = kept.ok_or_else(|| Error::invalid("program does not apply to this data"));
            return Some(len.map(|len| out.resize(out.len() + len, 0)));
        }
        let start = out.len();
        let made = self.encode_node(x, sib, r, 0, How::EstimateOnce, out);
        memo::put(key, made.as_ref().ok().map(|_| out.len() - start));
        Some(made)
    }

    fn encode_children(
        &self,
        parts: &[Stream],
        reference: Option<&Stream>,
        elem_offset: u64,
        how: How,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if parts.len() != self.children.len() {
            return Err(Error::invalid("program arity does not match the operator"));
        }
        for (j, (child, part)) in self.children.iter().zip(parts).enumerate() {
            child.encode_node(part, &parts[..j], reference, elem_offset, how, out)?;
        }
        Ok(())
    }

    /// The interpreter: rebuilds `n` words of type `ty` from the chunk payload.
    pub fn decode(&self, ty: Ty, n: usize, r: &mut ByteReader, sib: &[Stream], env: &Env) -> Result<Stream> {
        let s = match &self.op {
            Op::Raw(x) => x.decode(ty, n, r.bytes()?)?,
            Op::Rans(x) => x.decode(ty, n, r.bytes()?, sib, env.reference)?,
            Op::Huffman(x) => x.decode(ty, n, r.bytes()?)?,
            Op::Lanes(x) => x.decode(ty, n, r.bytes()?)?,
            Op::Zstd(x) => x.decode(ty, n, r.bytes()?)?,
            Op::Const(c) => c.decode(ty, n)?,
            Op::Arange(a) => a.decode(ty, n, env.elem_offset)?,
            Op::Ref(op) => {
                op.check(ty)?;
                let rs = RefOp::reference(env.reference, ty, n)?;
                match op {
                    RefOp::Copy => rs.clone(),
                    _ => op.inverse(&self.decode_children(&[ty], &[n], r, env)?.pop().unwrap(), rs),
                }
            }
            Op::Copy(c) => {
                let s = (env.copy)(c.tensor)?;
                if s.ty != ty || s.len() != n {
                    return Err(Error::corrupt("copy: source tensor does not match"));
                }
                s
            }
            Op::Fields(f) => {
                let parts = self.decode_children(&f.child_types(ty)?, &f.child_lens(n), r, env)?;
                f.inverse(ty, n, parts)?
            }
            Op::BytePlanes(b) => {
                let parts = self.decode_children(&b.child_types(ty)?, &vec![n; self.children.len()], r, env)?;
                b.inverse(ty, n, parts)?
            }
            Op::BitPlanes(b) => {
                let parts = self.decode_children(&b.child_types(ty)?, &vec![n; self.children.len()], r, env)?;
                b.inverse(ty, n, parts)?
            }
            Op::Scan(s) => s.inverse(self.decode_children(&[ty], &[n], r, env)?.pop().unwrap()),
            Op::Map(m) => {
                // Checked again here: under `dict`, the index width is only known now.
                m.check(ty)?;
                m.apply(&self.decode_children(&[ty], &[n], r, env)?.pop().unwrap(), true)
            }
            Op::Dict(d) => {
                let [(tt, tn), (it, inn)] = d.read_header(ty, n, r)?;
                let parts = self.decode_children(&[tt, it], &[tn, inn], r, env)?;
                d.inverse(ty, n, parts)?
            }
            Op::Sparse(s) => {
                let [(mt, mn), (vt, vn)] = s.read_header(ty, n, r)?;
                let parts = self.decode_children(&[mt, vt], &[mn, vn], r, env)?;
                s.inverse(ty, n, parts)?
            }
            Op::Palette(p) => {
                let [(ct, cn), (lt, ln), (gt, gn), (it, inn)] = p.read_header(ty, n, r)?;
                let parts = self.decode_children(&[ct, lt, gt, it], &[cn, ln, gn, inn], r, env)?;
                p.inverse(ty, n, parts)?
            }
            Op::Concat(c) => {
                let lens = c.child_lens(n)?;
                let parts = self.decode_children(&vec![ty; lens.len()], &lens, r, env)?;
                c.inverse(ty, n, parts)
            }
            Op::Repeat(rp) => {
                let p = self.decode_children(&[ty], &[rp.child_len(n)], r, env)?.pop().unwrap();
                rp.inverse(ty, n, p)?
            }
            Op::View(v) => {
                let m = v.child_len(ty, n)?;
                let y = self.decode_children(&[Ty::u(v.bits)], &[m], r, env)?.pop().unwrap();
                v.inverse(ty, y)?
            }
            Op::Blocks(b) => {
                let parts = self.decode_children(&b.child_types(ty)?, &b.child_lens(n, env.elem_offset), r, env)?;
                b.inverse(n, env.elem_offset, &parts)?
            }
            Op::Derive(d) => self.decode_children(&d.child_types(ty)?, &[n], r, env)?.pop().unwrap(),
        };
        if s.len() != n || s.ty != ty {
            return Err(Error::corrupt("operator produced a stream of the wrong shape"));
        }
        Ok(s)
    }

    /// Whether [`Node::decode_root_into`] decodes this program's `n` words of type `ty` into a
    /// buffer of `bytes` bytes (a `blocks` root: its words are bytes).
    pub fn decodes_into(&self, ty: Ty, n: usize, bytes: usize) -> bool {
        matches!(self.op, Op::Blocks(_)) && ty == Ty::u(8) && n == bytes
    }

    /// [`Node::decode`] of a root for which [`Node::decodes_into`] holds, its words written
    /// straight into `out` (no stream of them is made).
    pub fn decode_root_into(&self, ty: Ty, r: &mut ByteReader, env: &Env, out: &mut [u8]) -> Result<()> {
        let n = out.len();
        match &self.op {
            Op::Blocks(b) if self.decodes_into(ty, n, out.len()) => {
                if fused::blocks::applies(b, self) {
                    return fused::blocks::decode_into(b, self, ty, r, env, out);
                }
                let parts = self.decode_children(&b.child_types(ty)?, &b.child_lens(n, env.elem_offset), r, env)?;
                b.inverse_into(env.elem_offset, &parts, out)
            }
            _ => Err(Error::invalid("decode_root_into: not a program that decodes into a buffer")),
        }
    }

    fn decode_children(&self, tys: &[Ty], lens: &[usize], r: &mut ByteReader, env: &Env) -> Result<Vec<Stream>> {
        if tys.len() != self.children.len() || lens.len() != tys.len() {
            return Err(Error::corrupt("program arity does not match the operator"));
        }
        Node::decode_each(&self.children, tys, lens, r, env)
    }

    /// Decodes `children` in order, child `j` as `lens[j]` words of type `tys[j]`, each seeing
    /// the ones before it as its siblings (as many as the shortest of the three).
    pub(crate) fn decode_each(
        children: &[Node],
        tys: &[Ty],
        lens: &[usize],
        r: &mut ByteReader,
        env: &Env,
    ) -> Result<Vec<Stream>> {
        let mut parts: Vec<Stream> = Vec::with_capacity(children.len());
        for ((child, &ty), &n) in children.iter().zip(tys).zip(lens) {
            let s = child.decode(ty, n, r, &parts, env)?;
            parts.push(s);
        }
        Ok(parts)
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        1 + self.children.iter().map(|c| c.size()).sum::<usize>()
    }

    /// The program's shape: the text with parameters that vary per tensor (strides, constants) elided.
    pub fn shape(&self) -> String {
        let head = match &self.op {
            Op::Const(_) => "const".to_string(),
            Op::Arange(_) => "arange".to_string(),
            Op::Copy(_) => "copy".to_string(),
            Op::Scan(s) => format!("{}", s).split('(').next().unwrap().to_string(),
            Op::Concat(_) => "concat".to_string(),
            Op::Repeat(_) => "repeat".to_string(),
            Op::Rans(Rans { ctx: LeafCtx::Back(d), split }) if *d > 1 => {
                if *split { "rans(back, split)" } else { "rans(back)" }.to_string()
            }
            Op::Lanes(Lanes { ctx: LanesCtx::Interleaved(crate::coder::lanes::Ctx::Back(_)), .. }) => {
                "lanes(back)".to_string()
            }
            _ => self.head(),
        };
        if self.children.is_empty() {
            head
        } else {
            let kids: Vec<String> = self.children.iter().map(|c| c.shape()).collect();
            format!("{head}[{}]", kids.join(", "))
        }
    }

    fn head(&self) -> String {
        match &self.op {
            Op::Raw(_) => "raw".into(),
            Op::Rans(r) => r.to_string(),
            Op::Huffman(_) => "huffman".into(),
            Op::Lanes(l) => l.to_string(),
            Op::Zstd(z) => format!("zstd({})", z.level),
            Op::Const(c) => format!("const({:#x})", c.value),
            Op::Arange(a) => format!("arange({}, {})", a.start, a.step),
            Op::Copy(c) => format!("copy(#{})", c.tensor),
            Op::Fields(f) => f.to_string(),
            Op::BytePlanes(_) => "byteplanes".into(),
            Op::BitPlanes(_) => "bitplanes".into(),
            Op::Scan(s) => s.to_string(),
            Op::Map(m) => m.to_string(),
            Op::Dict(_) => "dict".into(),
            Op::Sparse(s) => format!("sparse({})", s.group),
            Op::Palette(p) => format!("palette({})", p.group),
            Op::Concat(c) => format!("concat({:?})", c.lens),
            Op::Repeat(r) => format!("repeat({})", r.period),
            Op::View(v) => format!("view(u{})", v.bits),
            Op::Ref(r) => r.to_string(),
            Op::Derive(d) => d.to_string(),
            Op::Blocks(b) => b.to_string(),
        }
    }
}

/// Whether the encoder writes the payload or estimates its length (`Node::estimated_len_with`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Write,
    Estimate,
    /// `Estimate`, past the memo (what the memo keeps).
    EstimateOnce,
}

fn leaf_payload(out: &mut Vec<u8>, hint: usize, f: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<()> {
    // The leaf is coded in place after room for its length prefix, sized from `hint` (the
    // stream's bytes, which a payload seldom differs from by a factor of 128); the payload is
    // moved only when its prefix turns out shorter or longer.
    let start = out.len();
    let room = bitio::varint_len(hint as u64);
    out.resize(start + room, 0);
    f(out)?;
    let len = out.len() - start - room;
    let need = bitio::varint_len(len as u64);
    if need != room {
        let payload = out.split_off(start + room);
        out.truncate(start);
        put_bytes(out, &payload);
        return Ok(());
    }
    bitio::write_varint(&mut out[start..start + room], len as u64);
    Ok(())
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.head())?;
        if !self.children.is_empty() {
            write!(f, "[")?;
            for (i, c) in self.children.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{c}")?;
            }
            write!(f, "]")?;
        }
        Ok(())
    }
}

/// Shorthands for building programs.
pub mod build {
    use super::*;

    pub fn raw() -> Node {
        Node::leaf(Op::Raw(Raw))
    }
    pub fn rans() -> Node {
        Node::leaf(Op::Rans(Rans::new(LeafCtx::None)))
    }
    pub fn rans_prev() -> Node {
        rans_back(1)
    }
    pub fn rans_back(stride: u64) -> Node {
        Node::leaf(Op::Rans(Rans::new(LeafCtx::Back(stride))))
    }
    pub fn rans_ref(shift: u8, bits: u8) -> Node {
        Node::leaf(Op::Rans(Rans::new(LeafCtx::Ref { shift, bits })))
    }
    pub fn xorref(kid: Node) -> Node {
        Node::new(Op::Ref(RefOp::Xor), vec![kid])
    }
    pub fn subref(kid: Node) -> Node {
        Node::new(Op::Ref(RefOp::Sub), vec![kid])
    }
    pub fn copyref() -> Node {
        Node::leaf(Op::Ref(RefOp::Copy))
    }
    pub fn rans_pop(window: u8) -> Node {
        Node::leaf(Op::Rans(Rans::new(LeafCtx::Pop(window))))
    }
    pub fn rans_side(j: u8) -> Node {
        Node::leaf(Op::Rans(Rans::new(LeafCtx::Side(j))))
    }
    pub fn lanes() -> Node {
        Node::leaf(Op::Lanes(Lanes::interleaved(crate::coder::lanes::Ctx::None)))
    }
    pub fn lanes_prev() -> Node {
        Node::leaf(Op::Lanes(Lanes::interleaved(crate::coder::lanes::Ctx::Prev)))
    }
    pub fn lanes_back(d: u32) -> Node {
        Node::leaf(Op::Lanes(Lanes::interleaved(crate::coder::lanes::Ctx::Back(d))))
    }
    pub fn lanes_adj() -> Node {
        Node::leaf(Op::Lanes(Lanes::adjacent()))
    }
    pub fn huffman() -> Node {
        Node::leaf(Op::Huffman(Huffman))
    }
    pub fn zstd(level: i32) -> Node {
        Node::leaf(Op::Zstd(Zstd { level }))
    }
    pub fn konst(value: u64) -> Node {
        Node::leaf(Op::Const(Const { value }))
    }
    pub fn arange(start: u64, step: u64) -> Node {
        Node::leaf(Op::Arange(Arange { start, step }))
    }
    pub fn copy(tensor: u32) -> Node {
        Node::leaf(Op::Copy(Copy { tensor }))
    }
    pub fn fields(exp: u32, mant: u32, k: u32, kids: [Node; 3]) -> Node {
        Node::new(Op::Fields(Fields::for_dtype_bits(exp, mant, k)), kids.into())
    }
    pub fn byteplanes(kids: Vec<Node>) -> Node {
        Node::new(Op::BytePlanes(BytePlanes), kids)
    }
    pub fn bitplanes(kids: Vec<Node>) -> Node {
        Node::new(Op::BitPlanes(BitPlanes), kids)
    }
    pub fn delta(stride: u64, kid: Node) -> Node {
        Node::new(Op::Scan(Scan { kind: ScanKind::Delta, stride }), vec![kid])
    }
    pub fn xor(stride: u64, kid: Node) -> Node {
        Node::new(Op::Scan(Scan { kind: ScanKind::Xor, stride }), vec![kid])
    }
    pub fn map(m: Map, kid: Node) -> Node {
        Node::new(Op::Map(m), vec![kid])
    }
    pub fn sparse(group: u8, mask: Node, values: Node) -> Node {
        Node::new(Op::Sparse(Sparse { group }), vec![mask, values])
    }
    pub fn palette(group: u16, count: Node, low: Node, gaps: Node, index: Node) -> Node {
        Node::new(Op::Palette(Palette { group }), vec![count, low, gaps, index])
    }
    pub fn dict(table: Node, index: Node) -> Node {
        Node::new(Op::Dict(Dict), vec![table, index])
    }
    pub fn concat(lens: Vec<u64>, kids: Vec<Node>) -> Node {
        Node::new(Op::Concat(Concat { lens }), kids)
    }
    pub fn repeat(period: u64, kid: Node) -> Node {
        Node::new(Op::Repeat(Repeat { period }), vec![kid])
    }
    pub fn view(bits: u32, kid: Node) -> Node {
        Node::new(Op::View(View { bits }), vec![kid])
    }
    /// `blocks(t)` over ggml type id `t` (panics for a type it does not split).
    pub fn blocks(ggml: u32, kids: Vec<Node>) -> Node {
        Node::new(Op::Blocks(Blocks::new(ggml).expect("a ggml type with a block layout")), kids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaf coded in place has the bytes of `put_bytes` of the same payload, whether its
    /// length prefix is the size the hint gave it, shorter or longer.
    #[test]
    fn leaf_payloads_are_length_prefixed_whatever_the_hint() {
        for (hint, len) in [(0, 0), (10, 100), (100, 100), (200, 100), (1 << 20, 5), (5, 1 << 20), (300, 200)] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut out = vec![9u8, 8];
            leaf_payload(&mut out, hint, |o| {
                o.extend_from_slice(&payload);
                Ok(())
            })
            .unwrap();
            let mut want = vec![9u8, 8];
            put_bytes(&mut want, &payload);
            assert!(out == want, "hint {hint}, payload {len}");
        }
    }
}
