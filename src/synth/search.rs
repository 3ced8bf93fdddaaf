//! Bounded A* over partial programs.
//!
//! A *state* is a partial program: a tree of decided productions whose undecided streams are
//! typed *holes*. Holes are filled in pre-order, so a state is identified by its stack of open
//! holes. Each hole carries its stream on the sample (the transforms above it are run forward),
//! so that:
//! - `g` = the exact bytes, on the sample, of everything decided (closed leaves are coded for
//!   real, transforms add what they write themselves);
//! - `h` = the sum over open holes of an estimate (the best of raw, order-0 entropy with tables,
//!   a fast LZ probe, and the entropy a split could approach: `grammar::Estimate`);
//! - the priority is `g + W*h + tau*(-log2 P(derivation) + sum over open holes of the least
//!   surprise that can fill them)`, where P is the production prior and `tau` converts bits of
//!   surprise into bytes (a fixed share of the sample's raw size). The surprise still to come
//!   is counted like `h`, so a derivation is not penalized for being half done; `W` slightly
//!   above 1 makes the search complete programs early (weighted A*).
//!
//! The frontier holds (state, production) pairs, each with its own estimate for the hole, so the
//! prior and the estimates decide which productions are evaluated at all. Productions with
//! P < `PRUNE_BELOW` are pruned. One *expansion* is one evaluation of a production on a hole:
//! coding a leaf, or running a transform forward and estimating its children. Raw and const
//! leaves are free, and evaluations are memoized per (hole, production). The budget bounds
//! expansions. Holes are independent given their streams, so a state whose open holes equal
//! those of a state already reached at lower `g` is dominated and dropped, and an entry whose
//! estimate exceeds the best complete program by more than `SLACK` is pruned. When the budget
//! runs out, the most promising partial programs are completed with the cheapest leaf already
//! evaluated for each open hole (or raw). Everything is sequential and ordered by (priority,
//! depth, insertion number): the result depends only on the input and the options.

use super::grammar::{self, HoleView, Outcome, Production, TensorCtx};
use super::prior::{Context, Prior, PRUNE_BELOW};
use crate::dsl::{Node, Stream};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

/// Bytes charged per bit of prior surprise, as a share of the sample's raw size.
pub const TAU: f64 = 0.004;
/// Weight of h in the priority (weighted A*: above 1, states closer to completion come first).
pub const WEIGHT: f64 = 1.1;
/// States whose estimate exceeds the best complete program by this share are pruned.
pub const SLACK: f64 = 0.01;

/// Counters of one search (summed over tensors by the caller; never stored).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Productions evaluated (the budget's unit).
    pub expansions: u64,
    /// Frontier entries popped (evaluated or served from the memo).
    pub pops: u64,
    /// Productions never evaluated because the prior makes them too unlikely.
    pub pruned_prior: u64,
    /// States dropped: estimate too far above the best program, or dominated.
    pub pruned_bound: u64,
    pub pruned_dominated: u64,
    /// Complete programs reached.
    pub programs: u64,
    /// Searches that stopped on the budget (rather than an empty frontier).
    pub exhausted: u64,
    /// Searches that stopped on their patience (no better program for that many expansions).
    pub patient: u64,
}

/// A complete program found on the sample.
#[derive(Clone, Debug)]
pub struct Found {
    /// Encoded bytes on the sample: exact, or partly estimated when `!exact`.
    pub bytes: usize,
    pub exact: bool,
    pub program: Node,
    /// (hole width, parent context, label) of every production used, for learning a prior.
    pub derivation: Vec<(u32, String, String)>,
}

struct Hole {
    /// The parent's child streams (the root: just the root stream); this hole is `parts[idx]`.
    parts: Rc<Vec<Stream>>,
    idx: usize,
    depth: usize,
    /// "root", or the parent production's label and the child position ("fields(k1)#0").
    parent_ctx: String,
    parent_label: String,
    aligned: bool,
    est: grammar::Estimate,
    /// Realistic and optimistic estimates of the hole's best program.
    h: f64,
    ho: f64,
    prods: Rc<Vec<Production>>,
    /// -log2 P of each production.
    nlp: Vec<f64>,
    /// The least surprise that can fill this hole: min of `nlp` over the queued productions.
    hp: f64,
}

struct State {
    /// The state this one was derived from, and the decision: (hole, production).
    from: Option<(usize, usize, usize)>,
    open: Vec<usize>,
    g: usize,
    /// Sums of the open holes' realistic and optimistic estimates.
    h: f64,
    ho: f64,
    /// Bits of surprise of the derivation so far.
    pen: f64,
    /// Least surprise still to come: the sum of `hp` over open holes.
    hp: f64,
    /// Productions decided so far.
    decided: u32,
}

struct Entry {
    key: f64,
    /// Productions decided in the state (ties go to the deeper state: depth-first).
    decided: u32,
    /// Optimistic estimate of the whole program's bytes after this production (for pruning).
    f: f64,
    seq: u64,
    state: usize,
    prod: usize,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // BinaryHeap is a max-heap: the smallest key (then the earliest entry) is the greatest.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key.total_cmp(&self.key).then(self.decided.cmp(&o.decided)).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Clone)]
enum Memo {
    Fail,
    Leaf(usize),
    Split(usize, Vec<usize>),
}

pub struct Search<'a> {
    t: &'a TensorCtx,
    prior: &'a Prior,
    reference: Option<Rc<Vec<Stream>>>,
    holes: Vec<Hole>,
    memo: HashMap<(usize, usize), Memo>,
    states: Vec<State>,
    heap: BinaryHeap<Entry>,
    seq: u64,
    seen: HashMap<Vec<usize>, usize>,
    complete: Vec<(usize, usize)>,
    /// Complete states whose size is partly estimated (completed when the budget ran out).
    estimated: Vec<usize>,
    best: Option<usize>,
    /// Expansions spent when `best` last improved.
    best_at: u64,
    tau: f64,
    weight: f64,
    pub counters: Counters,
}

impl<'a> Search<'a> {
    pub fn new(t: &'a TensorCtx, prior: &'a Prior, root: Stream, reference: Option<Stream>) -> Search<'a> {
        let tau = TAU * crate::coder::packed_len(root.len(), root.ty.bits).max(1) as f64;
        let mut s = Search {
            t,
            prior,
            reference: reference.map(|r| Rc::new(vec![r])),
            holes: Vec::new(),
            memo: HashMap::new(),
            states: Vec::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            seen: HashMap::new(),
            complete: Vec::new(),
            estimated: Vec::new(),
            best: None,
            best_at: 0,
            tau,
            weight: WEIGHT,
            counters: Counters::default(),
        };
        let h = s.new_hole(Rc::new(vec![root]), 0, 0, "root".into(), String::new(), true);
        // Where the LZ probe finds repeats, the root's zstd leaf is evaluated at once: it is a
        // whole program, and its exact size bounds everything else.
        if s.holes[h].est.repeats() {
            if let Some(z) = s.holes[h].prods.iter().position(|p| matches!(p.op, crate::dsl::Op::Zstd(_))) {
                s.evaluate(h, z, usize::MAX);
                if let Some(Memo::Leaf(b)) = s.memo.get(&(h, z)) {
                    let b = *b as f64;
                    let hd = &mut s.holes[h];
                    hd.h = hd.h.min(b);
                    hd.ho = hd.ho.min(b);
                }
            }
        }
        let (hv, ho, hp) = (s.holes[h].h, s.holes[h].ho, s.holes[h].hp);
        s.states.push(State { from: None, open: vec![h], g: 0, h: hv, ho, pen: 0.0, hp, decided: 0 });
        s.push_state(0);
        s
    }

    /// A new hole: its estimate, its productions and their probabilities under the prior.
    fn new_hole(
        &mut self,
        parts: Rc<Vec<Stream>>,
        idx: usize,
        depth: usize,
        parent_ctx: String,
        parent_label: String,
        aligned: bool,
    ) -> usize {
        let x = &parts[idx];
        let est = grammar::estimate(x, self.t.lz_probe);
        let repeats = est.repeats();
        let view =
            HoleView { stream: x, siblings: &parts[..idx], depth, parent_label: &parent_label, aligned, repeats };
        let prods = Rc::new(grammar::productions(self.t, &view));
        let labels: Vec<String> = prods.iter().map(|p| p.label.clone()).collect();
        let ctx = Context { bits: x.ty.bits, parent: &parent_ctx, features: &self.t.features };
        let nlp: Vec<f64> = self.prior.probabilities(&ctx, &labels).into_iter().map(|p| -p.log2()).collect();
        let hp = prods
            .iter()
            .zip(&nlp)
            .filter(|(p, _)| !grammar::pointless(p, &parent_label))
            .map(|(_, &n)| n)
            .fold(f64::INFINITY, f64::min);
        let hp = if hp.is_finite() { hp } else { 0.0 };
        // The data's evidence stands in for the prior: a production offered on it is as likely as
        // the likeliest one.
        let nlp = prods.iter().zip(nlp).map(|(p, n)| if grammar::evidenced(p) { n.min(hp) } else { n }).collect();
        let (mut h, mut ho) = (est.raw, est.raw);
        for p in prods.iter().filter(|p| !grammar::pointless(p, &parent_label)) {
            let (r, o) = est.for_production(p, x.ty);
            h = h.min(r);
            ho = ho.min(o);
        }
        self.holes.push(Hole { parts, idx, depth, parent_ctx, parent_label, aligned, est, h, ho, prods, nlp, hp });
        self.holes.len() - 1
    }

    /// The realistic and optimistic estimates of production `p` on `hole` from its evaluated
    /// split: what it writes itself plus its parts' estimates.
    fn split_estimate(&self, hole: usize, p: usize) -> Option<(f64, f64)> {
        let Some(Memo::Split(header, kids)) = self.memo.get(&(hole, p)) else { return None };
        let (h, ho) = kids.iter().map(|&k| &self.holes[k]).fold((0.0, 0.0), |(h, ho), k| (h + k.h, ho + k.ho));
        Some((*header as f64 + h, *header as f64 + ho))
    }

    fn view(&self, hole: usize) -> HoleView<'_> {
        let hd = &self.holes[hole];
        HoleView {
            stream: &hd.parts[hd.idx],
            siblings: &hd.parts[..hd.idx],
            depth: hd.depth,
            parent_label: &hd.parent_label,
            aligned: hd.aligned,
            repeats: hd.est.repeats(),
        }
    }

    /// Queues the productions of the state's next hole. An entry's priority is the state's with
    /// this hole's estimate and least surprise replaced by the production's own.
    fn push_state(&mut self, s: usize) {
        let hole = *self.states[s].open.last().unwrap();
        // Productions offered on evidence are evaluated as soon as their hole comes up: what they
        // exploit shows in their parts' estimates, not in the hole's order-0 statistics.
        for i in 0..self.holes[hole].prods.len() {
            if grammar::evidenced(&self.holes[hole].prods[i]) {
                self.evaluate(hole, i, usize::MAX);
            }
        }
        let st = &self.states[s];
        let hd = &self.holes[hole];
        let rest = st.h - hd.h;
        let rest_o = st.g as f64 + st.ho - hd.ho;
        let rest_hp = st.pen + st.hp - hd.hp;
        let limit = -PRUNE_BELOW.log2();
        for (i, p) in hd.prods.iter().enumerate() {
            if grammar::pointless(p, &hd.parent_label) {
                continue;
            }
            let nlp = hd.nlp[i];
            if nlp > limit {
                self.counters.pruned_prior += 1;
                continue;
            }
            let (real, opt) = match self.memo.get(&(hole, i)) {
                Some(Memo::Leaf(b)) => (*b as f64, *b as f64),
                Some(Memo::Split(..)) if grammar::evidenced(p) => self.split_estimate(hole, i).unwrap(),
                _ => hd.est.for_production(p, hd.parts[hd.idx].ty),
            };
            let f = rest_o + opt;
            let key = st.g as f64 + self.weight * (rest + real) + self.tau * (rest_hp + nlp);
            self.heap.push(Entry { key, decided: st.decided, f, seq: self.seq, state: s, prod: i });
            self.seq += 1;
        }
    }

    /// Evaluates production `p` on `hole` (memoized); returns false when the budget forbids it.
    fn evaluate(&mut self, hole: usize, p: usize, budget: usize) -> bool {
        if self.memo.contains_key(&(hole, p)) {
            return true;
        }
        let prod = self.holes[hole].prods[p].clone();
        if !grammar::is_free(&prod) {
            if self.counters.expansions as usize >= budget {
                return false;
            }
            self.counters.expansions += 1;
        }
        let reference = self.reference.clone();
        let out = grammar::apply(&prod, &self.view(hole), reference.as_ref().map(|r| &r[0]));
        let memo = match out {
            Outcome::Fail => Memo::Fail,
            Outcome::Leaf(b) => Memo::Leaf(b + self.decode_price(hole, &prod)),
            Outcome::Split(header, parts) => {
                let header = header + self.decode_price(hole, &prod);
                let parts = Rc::new(parts);
                let hd = &self.holes[hole];
                let (depth, aligned) = (hd.depth + 1, hd.aligned);
                // A dict's table and sparse's values are not element-aligned.
                let is_dict = matches!(prod.op, crate::dsl::Op::Dict(_) | crate::dsl::Op::Sparse(_));
                let is_palette = matches!(prod.op, crate::dsl::Op::Palette(_));
                let kids = (0..parts.len())
                    .map(|i| {
                        let ctx = format!("{}#{i}", prod.label);
                        // A dict's table is not element-aligned (its index is), nor are
                        // sparse's mask and values.
                        // A palette's index is, its other parts are not.
                        let al = aligned
                            && !(is_dict && (i == 0 || matches!(prod.op, crate::dsl::Op::Sparse(_))))
                            && !(is_palette && i < 3);
                        self.new_hole(parts.clone(), i, depth, ctx, prod.label.clone(), al)
                    })
                    .collect();
                Memo::Split(header, kids)
            }
        };
        self.memo.insert((hole, p), memo);
        true
    }

    /// What decoding `prod`'s own operator over `hole` costs, in bytes: the tensor's decode
    /// weight times the operator's nanoseconds per element (`dsl::cost`) times the elements.
    fn decode_price(&self, hole: usize, prod: &Production) -> usize {
        if self.t.decode_weight <= 0.0 {
            return 0;
        }
        let hd = &self.holes[hole];
        let x = &hd.parts[hd.idx];
        (self.t.decode_weight * crate::dsl::cost::op_ns(&prod.op, x.ty) * x.len() as f64).round() as usize
    }

    /// Runs the search until the budget is spent or the frontier is empty, or (with a
    /// `patience` above 0) once `patience` expansions have passed without a better complete
    /// program than the best one found. A split of quantization blocks runs to the budget: its
    /// fields' context leaves, which make most of its gain, come late in the search (SmolLM2
    /// Q4_1 lost 0.9 points to a patience of 24, and 0.2 to 48).
    pub fn run(&mut self, budget: usize, patience: usize) {
        let patience = if self.t.blocks.is_some() { 0 } else { patience };
        let max_pops = 64 * budget as u64 + 4096;
        while let Some(e) = self.heap.pop() {
            self.counters.pops += 1;
            if self.counters.pops > max_pops {
                self.counters.exhausted += 1;
                break;
            }
            if patience > 0 && self.best.is_some() && self.counters.expansions >= self.best_at + patience as u64 {
                self.counters.patient += 1;
                break;
            }
            let st = &self.states[e.state];
            if let Some(b) = self.best {
                if e.f > b as f64 * (1.0 + SLACK) {
                    self.counters.pruned_bound += 1;
                    continue;
                }
            }
            let hole = *st.open.last().unwrap();
            if !self.evaluate(hole, e.prod, budget) {
                self.heap.push(e);
                self.counters.exhausted += 1;
                break;
            }
            let st = &self.states[e.state];
            let mut open = st.open.clone();
            open.pop();
            let hd = &self.holes[hole];
            let (mut g, mut h, mut ho, mut hp) = (st.g, st.h - hd.h, st.ho - hd.ho, st.hp - hd.hp);
            let pen = st.pen + hd.nlp[e.prod];
            let decided = st.decided + 1;
            match &self.memo[&(hole, e.prod)] {
                Memo::Fail => continue,
                Memo::Leaf(b) => g += b,
                Memo::Split(header, kids) => {
                    g += header;
                    for &k in kids.iter().rev() {
                        open.push(k);
                        h += self.holes[k].h;
                        ho += self.holes[k].ho;
                        hp += self.holes[k].hp;
                    }
                }
            }
            let from = Some((e.state, hole, e.prod));
            if open.is_empty() {
                self.states.push(State { from, open, g, h: 0.0, ho: 0.0, pen, hp: 0.0, decided });
                self.complete.push((g, self.states.len() - 1));
                self.counters.programs += 1;
                if self.best.is_none_or(|b| g < b) {
                    self.best = Some(g);
                    self.best_at = self.counters.expansions;
                }
                continue;
            }
            match self.seen.get(&open) {
                Some(&g0) if g0 <= g => {
                    self.counters.pruned_dominated += 1;
                    continue;
                }
                _ => {}
            }
            self.seen.insert(open.clone(), g);
            self.states.push(State { from, open, g, h: h.max(0.0), ho: ho.max(0.0), pen, hp: hp.max(0.0), decided });
            self.push_state(self.states.len() - 1);
        }
    }

    /// The decisions of a state: hole -> production.
    fn decisions(&self, mut s: usize) -> HashMap<usize, usize> {
        let mut d = HashMap::new();
        while let Some((prev, hole, p)) = self.states[s].from {
            d.insert(hole, p);
            s = prev;
        }
        d
    }

    fn build(&self, hole: usize, d: &HashMap<usize, usize>, deriv: &mut Vec<(u32, String, String)>) -> Node {
        let p = d[&hole];
        let hd = &self.holes[hole];
        let prod = &hd.prods[p];
        deriv.push((hd.parts[hd.idx].ty.bits, hd.parent_ctx.clone(), prod.label.clone()));
        match self.memo.get(&(hole, p)) {
            Some(Memo::Split(_, kids)) => {
                Node::new(prod.op.clone(), kids.iter().map(|&k| self.build(k, d, deriv)).collect())
            }
            _ => Node::leaf(prod.op.clone()),
        }
    }

    /// The evidenced split evaluated on `hole` whose bytes plus its parts' cheapest leaves look
    /// smallest: (that total, what the split writes itself, production, its parts' holes).
    fn cheapest_evidenced_split(&mut self, hole: usize) -> Option<(usize, usize, usize, Vec<usize>)> {
        let mut best: Option<(usize, usize, usize, Vec<usize>)> = None;
        for i in 0..self.holes[hole].prods.len() {
            if !grammar::evidenced(&self.holes[hole].prods[i]) {
                continue;
            }
            let Some(Memo::Split(header, kids)) = self.memo.get(&(hole, i)).cloned() else { continue };
            let total = header + kids.iter().map(|&k| self.cheapest_leaf(k).0).sum::<usize>();
            if best.as_ref().is_none_or(|b| total < b.0) {
                best = Some((total, header, i, kids.to_vec()));
            }
        }
        best
    }

    /// The leaf that looks cheapest for a hole: exact where it was evaluated, else its
    /// realistic estimate (raw and const are always exact). Returns (bytes, production, exact).
    fn cheapest_leaf(&mut self, hole: usize) -> (usize, usize, bool) {
        let hd = &self.holes[hole];
        let ty = hd.parts[hd.idx].ty;
        let limit = -PRUNE_BELOW.log2();
        let mut best: Option<(f64, usize, bool)> = None;
        for (i, p) in hd.prods.iter().enumerate() {
            // (Raw under a scan is never queued, but it always completes a hole.)
            if !p.is_leaf() || (grammar::pointless(p, &hd.parent_label) && !matches!(p.op, crate::dsl::Op::Raw(_))) {
                continue;
            }
            let (v, exact) = match self.memo.get(&(hole, i)) {
                Some(Memo::Leaf(b)) => (*b as f64, true),
                Some(_) => continue,
                None if grammar::is_free(p) => {
                    // Raw and const: exact without coding (evaluated below if chosen).
                    (hd.est.for_production(p, ty).0, true)
                }
                None if hd.nlp[i] > limit => continue,
                None => (hd.est.for_production(p, ty).0, false),
            };
            if best.is_none_or(|(bv, _, _)| v < bv) {
                best = Some((v, i, exact));
            }
        }
        let (_, p, exact) = best.expect("raw always applies");
        if grammar::is_free(&self.holes[hole].prods[p]) {
            self.evaluate(hole, p, usize::MAX);
        }
        match self.memo.get(&(hole, p)) {
            Some(Memo::Leaf(b)) => (*b, p, true),
            _ => (best.unwrap().0.round() as usize, p, exact),
        }
    }

    /// Completes the most promising partial states left on the frontier, each open hole with
    /// the leaf that looks cheapest (exact where evaluated, else estimated): this costs no
    /// expansion, and the final comparison measures such programs exactly.
    fn complete_frontier(&mut self, count: usize) {
        let mut taken: Vec<usize> = Vec::new();
        let mut entries: Vec<Entry> = std::mem::take(&mut self.heap).into_vec();
        entries.sort_by(|a, b| b.cmp(a));
        for e in entries {
            if taken.len() >= count {
                break;
            }
            if taken.contains(&e.state) {
                continue;
            }
            taken.push(e.state);
        }
        for s in taken {
            let mut open = self.states[s].open.clone();
            let (mut g, mut cur, mut exact) = (self.states[s].g, s, true);
            while let Some(hole) = open.pop() {
                let (mut b, mut p, mut ex) = self.cheapest_leaf(hole);
                // An evaluated evidenced split, its parts completed by their cheapest leaves, where
                // that looks cheaper: the budget may run out before the search reaches its hole
                // (the quants of a block split, the last of its fields).
                if let Some((total, header, sp, kids)) = self.cheapest_evidenced_split(hole) {
                    if total < b {
                        (b, p, ex) = (header, sp, false);
                        open.extend(kids.iter().rev());
                    }
                }
                g += b;
                exact &= ex;
                self.states.push(State {
                    from: Some((cur, hole, p)),
                    open: open.clone(),
                    g,
                    h: 0.0,
                    ho: 0.0,
                    pen: 0.0,
                    hp: 0.0,
                    decided: 0,
                });
                cur = self.states.len() - 1;
            }
            if !exact {
                self.estimated.push(cur);
            }
            self.complete.push((g, cur));
        }
    }

    /// The best complete programs, smallest first: `k` of them with distinct root operators
    /// when `diverse`, else simply the `k` smallest; plus, if
    /// not among them, the best that does not read the reference and the best whose
    /// applicability does not depend on the data (no dict or constant below the root).
    pub fn results(&mut self, k: usize, diverse: bool) -> Vec<Found> {
        self.complete_frontier(3);
        let mut c = self.complete.clone();
        c.sort();
        // Partly estimated completions come after the exact programs (the best one of them is
        // added at the end), so that an optimistic estimate never displaces a measured program.
        let (estimated, mut c): (Vec<_>, Vec<_>) = c.into_iter().partition(|x| self.estimated.contains(&x.1));
        let first_estimated = estimated.first().copied();
        let mut out: Vec<Found> = Vec::new();
        let mut skeletons: Vec<String> = Vec::new();
        let (mut standalone, mut steady) = (false, false);
        c.extend(estimated);
        for (g, s) in c {
            if self.estimated.contains(&s) && Some((g, s)) != first_estimated {
                continue;
            }
            let d = self.decisions(s);
            let mut deriv = Vec::new();
            let program = self.build(0, &d, &mut deriv);
            if out.iter().any(|f| f.program == program) {
                continue;
            }
            let alone = !program.uses_reference();
            let stable = !data_dependent(&program, true);
            let sk = skeleton(&program, 1);
            let fresh = !diverse || !skeletons.contains(&sk);
            let first_guess = Some((g, s)) == first_estimated;
            if (out.len() < k && fresh) || (alone && !standalone) || (stable && !steady) || first_guess {
                standalone |= alone;
                steady |= stable;
                skeletons.push(sk);
                out.push(Found { bytes: g, exact: !self.estimated.contains(&s), program, derivation: deriv });
            }
            if out.len() >= k && standalone && steady && first_estimated.is_none() {
                break;
            }
        }
        out
    }
}

/// Whether a program's applicability depends on the data beyond its type (a dictionary may
/// overflow, a constant may stop being constant): the sample cannot vouch for the whole tensor.
pub fn data_dependent(n: &Node, root: bool) -> bool {
    matches!(n.op, crate::dsl::Op::Dict(_) | crate::dsl::Op::Repeat(_))
        || (!root && matches!(n.op, crate::dsl::Op::Const(_)))
        || n.children.iter().any(|c| data_dependent(c, false))
}

/// The operators of a program's top `levels` levels, leaves collapsed to `.`.
fn skeleton(n: &Node, levels: usize) -> String {
    if n.children.is_empty() {
        return if levels == 2 { n.shape() } else { ".".into() };
    }
    let head = Node::leaf(n.op.clone()).shape();
    if levels <= 1 {
        return head;
    }
    let kids: Vec<String> = n.children.iter().map(|c| skeleton(c, levels - 1)).collect();
    format!("{head}[{}]", kids.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::features::{Features, Role};
    use crate::synth::grammar::TensorCtx;

    fn ctx(float: Option<(u32, u32)>) -> TensorCtx {
        TensorCtx {
            features: Features { dtype: "BF16".into(), rank: 2, size: 2, role: Role::Other },
            float,
            signed: false,
            channel: Some(64),
            row: None,
            lag: None,
            ref_ctx: None,
            zstd_level: 3,
            zstd_palette: 3,
            blocks: None,
            max_depth: 3,
            decode_weight: 0.0,
            lz_probe: 5,
            plain_rans: true,
        }
    }

    /// Without plain `rans` leaves (as at `fast`), a byte plane is offered `lanes` with the same
    /// contexts instead, and `rans` only with a sibling's context.
    #[test]
    fn without_plain_rans_only_sibling_contexts_remain() {
        let t = TensorCtx { decode_weight: 0.02, plain_rans: false, ..ctx(None) };
        let x = Stream::from_fn(crate::dsl::Ty::u(8), 4096, |i| (i * 7 % 251) as u64);
        let sib = [x.clone()];
        let hole = HoleView {
            stream: &x,
            siblings: &sib,
            depth: 1,
            parent_label: "byteplanes",
            aligned: true,
            repeats: false,
        };
        let labels: Vec<String> = grammar::productions(&t, &hole).into_iter().map(|p| p.label).collect();
        let rans: Vec<&String> = labels.iter().filter(|l| l.starts_with("rans")).collect();
        assert!(rans.len() == 1 && rans[0].starts_with("rans(side"), "{labels:?}");
        for lanes in ["lanes", "lanes(prev)", "lanes(adj)", "lanes(back ch)"] {
            assert!(labels.iter().any(|l| l == lanes), "{lanes} in {labels:?}");
        }
        let with = TensorCtx { plain_rans: true, ..t };
        let labels: Vec<String> = grammar::productions(&with, &hole).into_iter().map(|p| p.label).collect();
        assert_eq!(labels.iter().filter(|l| l.starts_with("rans")).count(), 4, "{labels:?}");
    }

    /// A xorshift64 generator from the seed `x` (not 0).
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Words on a grid of a few values per group of 32 (a dequantized 4-bit model): the palette
    /// is offered on that evidence and evaluated at once, so that the search finds it with a
    /// budget of one expansion as with two hundred. Groups' values drawn across the stream offer
    /// no palette.
    #[test]
    fn grids_take_a_palette_even_when_the_budget_runs_out() {
        let mut next = xorshift(7);
        let (mut base, mut step) = (0, 0);
        let words: Vec<u64> = (0..8192)
            .map(|i| {
                if i % 32 == 0 {
                    (base, step) = (next() % 200, 1 + next() % 9);
                }
                base + step * (next() % 12)
            })
            .collect();
        let grid = Stream::from_iter(crate::dsl::Ty::u(8), words.iter().copied());
        let t = ctx(None);
        let prior = Prior::uniform();
        for budget in [1, 200] {
            let mut search = Search::new(&t, &prior, grid.clone(), None);
            search.run(budget, 0);
            let found = search.results(4, false);
            assert!(found[0].program.to_string().starts_with("palette(32)"), "budget {budget}: {}", found[0].program);
        }
        // The same words, their groups mixed: as many distinct words per group as across.
        let mixed = Stream::from_fn(crate::dsl::Ty::u(8), words.len(), |i| words[i * 97 % words.len()]);
        let hole =
            HoleView { stream: &mixed, siblings: &[], depth: 0, parent_label: "", aligned: true, repeats: false };
        let labels: Vec<String> = grammar::productions(&t, &hole).into_iter().map(|p| p.label).collect();
        assert!(!labels.iter().any(|l| l.starts_with("palette")), "{labels:?}");
    }

    /// Every complete program's bytes are what `estimated_len_with` gives for it, and close to
    /// what the encoder writes.
    #[test]
    fn program_sizes_are_the_estimated_lengths() {
        let mut next = xorshift(1);
        let words: Vec<u64> =
            (0..5000).map(|i| 0x3c00 + (next() % 300) + if i % 7 == 0 { 0x8000 } else { 0 }).collect();
        let s = Stream::from_iter(crate::dsl::Ty::u(16), words.into_iter());
        let t = ctx(Some((8, 7)));
        let prior = Prior::uniform();
        let mut search = Search::new(&t, &prior, s.clone(), None);
        search.run(200, 0);
        let found = search.results(16, false);
        assert!(found.len() > 3);
        for f in found.iter().filter(|f| f.exact) {
            let mut buf = Vec::new();
            f.program.encode(&s, &[], &mut buf).unwrap();
            assert_eq!(f.program.estimated_len_with(&s, &[], None).unwrap(), f.bytes, "{}", f.program);
            assert!(buf.len().abs_diff(f.bytes) <= 256 + buf.len() / 500, "{}: {} coded", f.program, buf.len());
        }
        assert!(search.counters.expansions <= 200);
    }

    /// With a patience, the search stops once that many expansions pass without a better
    /// complete program, and its best program is the one a full search had found by then.
    #[test]
    fn patience_stops_the_search_after_its_last_improvement() {
        let words: Vec<u64> = (0..5000u64).map(|i| 0x3c00 + (i * 2654435761 % 97) + (i % 3) * 0x100).collect();
        let s = Stream::from_iter(crate::dsl::Ty::u(16), words.into_iter());
        let t = ctx(Some((8, 7)));
        let prior = Prior::uniform();
        let mut full = Search::new(&t, &prior, s.clone(), None);
        full.run(200, 0);
        assert_eq!(full.counters.patient, 0);
        let mut patient = Search::new(&t, &prior, s, None);
        patient.run(200, 4);
        assert_eq!(patient.counters.patient, 1, "the search ran to its budget");
        assert!(patient.counters.expansions < full.counters.expansions);
        assert!(patient.counters.expansions <= patient.best_at + 4);
        assert!(patient.best.unwrap() >= full.best.unwrap());
    }
}
