//! Synthesis: for each tensor, a bounded A* search over DSL programs, guided by a production
//! prior, keeps the program that is smallest by exact encoded size. See docs/SYNTHESIS.md.
//!
//! - `grammar`: the productions that fill a typed hole, and how each applies to a sample stream;
//! - `search`: A* over partial programs (g = exact bytes decided, h = estimate of open holes,
//!   priority + tau * -log2 P), bounded by a budget of expansions and a depth;
//! - `prior`: P(production | hole width, parent, dtype, rank, size, role), with backoff, as JSON;
//! - `features`: the tensor features the prior conditions on.
//!
//! `choose` runs the search on a small sample of the tensor (the *screen*), then compares its
//! best few programs by exact encoded size on the larger sample. `learn_prior` learns a prior
//! from the programs that a wider search picks on a stratified sample of the tensors.
//! Nothing the search does is stored in the archive, and the prior is never needed to decode.

mod confirm;
pub mod features;
pub mod grammar;
pub mod prior;
pub mod search;
mod twins;

pub use confirm::choose_whole;
use confirm::{alternatives, Confirm};
pub(crate) use confirm::{decide, encoded_cost, priced};
pub use prior::Prior;

use crate::dsl::build::*;
use crate::dsl::ops::gen::Arange;
use crate::dsl::{Node, Op, Stream, Ty};
use crate::error::Result;
use crate::source::{Bytes, WINDOW};
use crate::tensor::DType;
use features::Features;
use grammar::TensorCtx;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What the chooser knows about a tensor. Its bytes are read in windows (a sample, and
/// sequential passes for generators and data-dependent programs), never all at once, so a
/// tensor larger than memory can be chosen for.
#[derive(Clone, Copy)]
pub struct TensorView<'a> {
    /// The tensor's name (only generic words in it are used, to guess its role).
    pub name: &'a str,
    /// Its dtype.
    pub dtype: &'a DType,
    /// Its shape.
    pub shape: &'a [u64],
    /// Bits of its words (the root stream's).
    pub word_bits: u32,
    /// Its bytes.
    pub bytes: Bytes<'a>,
    /// The matching tensor of the reference (same byte length), if compressing against one.
    pub reference: Option<Bytes<'a>>,
}

/// What the chooser picked.
pub struct Choice {
    pub program: Node,
    /// For a program that reads the reference: the best standalone program's size, scaled from
    /// the sample to the whole tensor (informational, shown by `inspect`).
    pub standalone_estimate: u64,
    /// The search's best programs, best first (what a tensor of the same kind tries: `choose_among`).
    pub finalists: Vec<Node>,
    /// Programs that the level's checks compare with `program` over the whole tensor
    /// (`Confirm`): the compressor encodes each chunk with all of them, as it encodes the tensor
    /// anyway, and keeps the one that costs least over the tensor ([`decide`]).
    pub alternatives: Vec<Node>,
}

/// Expansions per tensor by default (see docs/SYNTHESIS.md for how it was chosen).
pub const DEFAULT_BUDGET: usize = 64;
/// Deepest program by default (levels of transforms above a leaf).
pub const DEFAULT_DEPTH: usize = 4;
/// Budget of the wider search that learns the prior.
pub const LEARN_BUDGET: usize = 256;
/// Share of each (dtype, role) stratum whose programs the prior is learned from.
pub const LEARN_SHARE: f64 = 0.04;
/// Tensors of each stratum the prior is learned from, at least (when the stratum has them).
pub const LEARN_MIN_PER_STRATUM: usize = 2;
/// Tensors smaller than this (elements) are not used to learn the prior.
pub const LEARN_MIN_ELEMS: usize = 256;

/// Which production prior guides the search.
#[derive(Clone, Debug, Default)]
pub enum PriorSource {
    /// The prior that ships with the library ([`builtin_prior`]).
    Builtin,
    /// Learned from a stratified sample of the input's tensors, backed off to the built-in
    /// prior (the default): the sample is searched under the built-in prior with the default
    /// budget, and the built-in counts are added to the sample's as pseudo-counts. At the `fast`
    /// level, which does not pay for learning, the built-in prior alone.
    #[default]
    LearnBackoff,
    /// Learned from a stratified sample of the input's tensors alone.
    Learn,
    /// Every production that applies is equally likely.
    Uniform,
    /// A prior learned elsewhere (`brevis prior learn`).
    Given(Arc<Prior>),
}

/// Search statistics summed over tensors (never stored in the archive).
#[derive(Debug, Default)]
pub struct SearchStats {
    /// Tensors searched.
    pub tensors: AtomicU64,
    /// Productions evaluated (the budget's unit).
    pub expansions: AtomicU64,
    /// Partial programs taken from the A* queue.
    pub pops: AtomicU64,
    /// Productions skipped for their low prior probability.
    pub pruned_prior: AtomicU64,
    /// Partial programs dropped because their lower bound could not beat the best program.
    pub pruned_bound: AtomicU64,
    /// Partial programs dropped as dominated by another with the same streams.
    pub pruned_dominated: AtomicU64,
    /// Complete programs priced.
    pub programs: AtomicU64,
    /// Searches that spent their whole budget.
    pub exhausted: AtomicU64,
    /// Searches that stopped early on the level's patience.
    pub patient: AtomicU64,
    /// Re-encodings of finalists on the full sample.
    pub finalists: AtomicU64,
    /// Tensors that took the finalists of an earlier tensor of the same kind (no search).
    pub reused: AtomicU64,
    /// Thread time spent choosing programs, in nanoseconds.
    pub search_ns: AtomicU64,
    /// Tensors searched (wider) to learn the prior, and the wall time it took.
    pub learn_tensors: AtomicU64,
    /// The wall time of learning the prior, in nanoseconds.
    pub learn_ns: AtomicU64,
    /// Size of the prior used (context, production) pairs at the finest level.
    pub prior_entries: AtomicU64,
    /// Wall time of each phase of compression, in nanoseconds (`compress` fills them).
    pub phase_ns: [AtomicU64; PHASES.len()],
}

/// The phases of compression whose wall time [`SearchStats::phase_ns`] records.
pub const PHASES: [&str; 5] = ["reading (layout, duplicates)", "prior", "search", "encoding and writing", "index"];

impl SearchStats {
    fn add(&self, c: &search::Counters) {
        self.tensors.fetch_add(1, Relaxed);
        self.expansions.fetch_add(c.expansions, Relaxed);
        self.pops.fetch_add(c.pops, Relaxed);
        self.pruned_prior.fetch_add(c.pruned_prior, Relaxed);
        self.pruned_bound.fetch_add(c.pruned_bound, Relaxed);
        self.pruned_dominated.fetch_add(c.pruned_dominated, Relaxed);
        self.programs.fetch_add(c.programs, Relaxed);
        self.exhausted.fetch_add(c.exhausted, Relaxed);
        self.patient.fetch_add(c.patient, Relaxed);
    }

    /// A few lines for `brevis compress -v`.
    pub fn summary(&self) -> String {
        let g = |a: &AtomicU64| a.load(Relaxed);
        let t = g(&self.tensors).max(1);
        format!(
            "search: {} tensors searched ({} more took the programs of a tensor of their kind), {} expansions ({:.1}/tensor), {} frontier pops, {} complete programs, \
             {} stopped by the budget, {} with no better program for the level's patience\n\
             pruned: {} productions by the prior, {} states by the bound, {} dominated states; \
             {} finalists re-coded on the full sample\n\
             prior: {} tensors searched to learn it ({:.2} s), {} (context, production) pairs; \
             search time {:.2} s (all threads)",
            g(&self.tensors),
            g(&self.reused),
            g(&self.expansions),
            g(&self.expansions) as f64 / t as f64,
            g(&self.pops),
            g(&self.programs),
            g(&self.exhausted),
            g(&self.patient),
            g(&self.pruned_prior),
            g(&self.pruned_bound),
            g(&self.pruned_dominated),
            g(&self.finalists),
            g(&self.learn_tensors),
            g(&self.learn_ns) as f64 / 1e9,
            g(&self.prior_entries),
            g(&self.search_ns) as f64 / 1e9,
        ) + &self.phases()
    }

    /// The wall time of each phase of compression, one line.
    fn phases(&self) -> String {
        let t: Vec<f64> = self.phase_ns.iter().map(|a| a.load(Relaxed) as f64 / 1e9).collect();
        let total: f64 = t.iter().sum();
        let parts: Vec<String> = PHASES.iter().zip(&t).map(|(p, s)| format!("{p} {s:.2} s")).collect();
        format!("\ntime: {} ({total:.2} s in all)", parts.join(", "))
    }
}

/// Search settings (never stored in the archive).
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// Elements per chunk.
    pub chunk_elems: usize,
    /// Elements of the sample on which the best programs are compared exactly.
    pub sample_elems: usize,
    /// Expansions (productions evaluated) per tensor.
    pub budget: usize,
    /// Expansions without a better complete program after which the search stops early (0:
    /// it runs to the budget).
    pub patience: usize,
    /// Deepest program (levels of transforms).
    pub depth: usize,
    pub prior: Arc<Prior>,
    pub stats: Option<Arc<SearchStats>>,
    /// Bytes charged per nanosecond of decode time per element (`dsl::cost`): 0 chooses by
    /// size alone; the compression level sets it.
    pub decode_weight: f64,
    /// Elements of the screen, the smaller sample on which the search runs.
    pub screen_elems: usize,
    /// Programs the search keeps for the comparison on the sample (each with its fast twin
    /// where decode time is priced); also how many of them a tensor of the same kind compares.
    pub finalists: usize,
    /// zstd level of the `zstd` leaf for a tensor over a megabyte (smaller ones get 19); the
    /// compression level sets it.
    pub zstd_large: i32,
    /// zstd level of the `zstd` leaf on the parts of a `palette`; the compression level sets it.
    pub zstd_palette: i32,
    /// zstd level of the search's LZ probe; the compression level sets it.
    pub lz_probe: i32,
    /// Whether `rans` leaves with no context or a word back are offered; the compression
    /// level sets it.
    pub plain_rans: bool,
    /// Whether a winner that decodes slower than a finalist ranked below it is checked against
    /// that finalist over the whole tensor (`Confirm::slow_winner`), and the finalists ranked just
    /// behind the winner against it over some of the tensor's chunks (`Confirm::close_finalists`);
    /// the compression level sets it.
    pub confirm_whole: bool,
}

impl SearchOptions {
    /// Default search settings for a tensor with `chunk_elems` elements per chunk.
    pub fn new(chunk_elems: usize) -> SearchOptions {
        SearchOptions {
            chunk_elems,
            sample_elems: 1 << 17,
            budget: DEFAULT_BUDGET,
            patience: 0,
            depth: DEFAULT_DEPTH,
            prior: Arc::new(Prior::uniform()),
            stats: None,
            decode_weight: 0.0,
            screen_elems: SCREEN_ELEMS,
            finalists: FINALISTS,
            zstd_large: 9,
            zstd_palette: 9,
            lz_probe: 5,
            plain_rans: true,
            confirm_whole: true,
        }
    }
}

/// The features of a tensor that the prior conditions on.
fn features_of(t: &TensorView) -> Features {
    let elems = t.bytes.len() / (t.word_bits as usize / 8).max(1);
    let has_ref = t.reference.is_some_and(|r| r.len() == t.bytes.len());
    Features::new(t.name, t.dtype, t.shape, elems, has_ref)
}

/// The productions' view of a tensor.
fn tensor_ctx(t: &TensorView, has_ref: bool, opts: &SearchOptions) -> TensorCtx {
    let w = t.word_bits;
    let elems = t.bytes.len() / (w as usize / 8).max(1);
    let float = t.dtype.float_layout().filter(|(e, m)| 1 + e + m == w);
    let channel = features::channel_len(t.shape);
    let row = match t.shape {
        [.., r] if t.shape.len() >= 2 && *r > 1 && Some(*r) != channel => Some(*r),
        _ => None,
    };
    let ref_ctx = has_ref.then(|| {
        if w <= 16 {
            match float {
                Some((e, m)) => (m as u8, e as u8),
                None => (w as u8 / 2, w as u8 / 2),
            }
        } else {
            match float {
                Some((e, m)) if e <= 16 => (m as u8, e as u8),
                _ => ((w - 8) as u8, 8),
            }
        }
    });
    TensorCtx {
        features: Features::new(t.name, t.dtype, t.shape, elems, has_ref),
        float,
        signed: t.dtype.is_signed_int() && t.dtype.bits() == Some(w),
        channel,
        row,
        lag: None,
        ref_ctx,
        zstd_level: if t.bytes.len() <= 1 << 20 { 19 } else { opts.zstd_large },
        zstd_palette: opts.zstd_palette,
        blocks: block_type(t),
        max_depth: opts.depth,
        decode_weight: opts.decode_weight,
        lz_probe: opts.lz_probe,
        plain_rans: opts.plain_rans,
    }
}

/// Picks the program for a tensor: a generator if one fits the whole tensor, else the search's
/// best program by exact encoded size on the sample. Reads the tensor in windows; an error
/// only when reading it fails (never for a tensor in memory).
pub fn choose(t: &TensorView, opts: &SearchOptions) -> Result<Choice> {
    Ok(choose_traced(t, opts)?.0)
}

/// Tensors smaller than this (elements) are searched on their own at the default and `max`
/// levels (`Level::reuse_min_elems`).
pub const REUSE_MIN_ELEMS: usize = 1 << 14;

/// The kind of a tensor whose programs the tensors of the same kind reuse (the same dtype, shape,
/// word width and role: the repeated layers of a network), or None when it is searched on its
/// own (fewer than `min_elems` elements, coded against a reference, or not whole words).
pub fn kind(t: &TensorView, min_elems: usize) -> Option<String> {
    let n = whole_elems(t)?;
    if n < min_elems || t.reference.is_some() {
        return None;
    }
    let f = features_of(t);
    Some(format!("{}|{:?}|{}|{:?}|{}", f.dtype, t.shape, t.word_bits, f.role, top_bits(t, n)))
}

/// For a tensor under [`REUSE_MIN_ELEMS`] elements (read whole), whether the top bit of its
/// words (a float's sign) is always 0, always 1 or both: a norm's scales are positive and its
/// shifts are not, and their best programs differ in that field (`const` or not), so they are
/// not of one kind. Empty for a larger tensor or one that cannot be read.
fn top_bits(t: &TensorView, n: usize) -> &'static str {
    let wb = (t.word_bits / 8) as usize;
    if n >= REUSE_MIN_ELEMS || wb == 0 {
        return "";
    }
    let Ok(bytes) = t.bytes.read_all() else { return "" };
    let (mut zero, mut one) = (false, false);
    for w in bytes.chunks_exact(wb) {
        let top = w[wb - 1] >> 7;
        zero |= top == 0;
        one |= top == 1;
    }
    match (zero, one) {
        (true, false) => "+",
        (false, true) => "-",
        _ => "+-",
    }
}

/// Picks the program for a tensor among `candidates` (the finalists and twins of a tensor of
/// the same kind, as it ranked them) by exact encoded size on its own sample, without a search;
/// the same checks as `choose` (generators first, the winner must apply to the whole tensor).
/// The first `2 * finalists` candidates are compared: a later layer's data often favours the
/// earlier one's runner-up (on a pruned MiniLM, another context for the zero mask of most
/// `output.dense` weights). Falls back to `choose` when no candidate applies.
pub fn choose_among(t: &TensorView, opts: &SearchOptions, candidates: &[Node]) -> Result<Choice> {
    let ty = Ty::u(t.word_bits);
    let n = match whole_elems(t) {
        Some(n) if n > 0 && t.reference.is_none() && !candidates.is_empty() => n,
        _ => return choose(t, opts),
    };
    if let Some(g) = generator(&t.bytes, ty)? {
        return Ok(Choice { program: g, standalone_estimate: 0, finalists: Vec::new(), alternatives: Vec::new() });
    }
    let started = std::time::Instant::now();
    let want = opts.sample_elems.min(opts.chunk_elems).max(1);
    let sample = read_sample(&t.bytes, ty, &sample_positions(n, want, block_align(t)))?;
    let candidates = &candidates[..candidates.len().min(2 * opts.finalists.max(1))];
    let mut ranked = rank(candidates.iter().collect(), &sample, None, opts.decode_weight);
    ranked.sort();
    let programs: Vec<&Node> = candidates.iter().collect();
    let checked = Confirm { t, opts, programs: &programs, sample_elems: sample.len() }.run(&ranked);
    if let Some(st) = &opts.stats {
        st.reused.fetch_add(1, Relaxed);
        st.finalists.fetch_add(candidates.len() as u64, Relaxed);
    }
    for r in &ranked {
        if applies_whole(&candidates[r.1], &t.bytes, None, ty, opts.chunk_elems)? {
            if let Some(st) = &opts.stats {
                st.search_ns.fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
            }
            let finalists = ranked.iter().map(|r| candidates[r.1].clone()).collect();
            let alternatives = alternatives(&programs, &checked, &candidates[r.1]);
            return Ok(Choice { program: candidates[r.1].clone(), standalone_estimate: 0, finalists, alternatives });
        }
    }
    choose(t, opts)
}

/// The element count of a tensor whose byte length is a whole number of words (else None: such
/// a tensor is coded `raw`).
fn whole_elems(t: &TensorView) -> Option<usize> {
    let wb = (t.word_bits as usize / 8).max(1);
    t.bytes.len().is_multiple_of(wb).then_some(t.bytes.len() / wb)
}

/// `const` when every word of the tensor is the same, else `arange` when the words are an
/// arithmetic progression (as `Const::fits` and `Arange::fits` decide on the whole tensor),
/// checked over windows.
fn generator(bytes: &Bytes, ty: Ty) -> Result<Option<Node>> {
    let wb = ty.container_bytes();
    let n = bytes.len() / wb;
    let head = Stream::from_le_bytes(ty, &bytes.read(0, n.min(2) * wb)?)?;
    let (start, m) = (head.get(0), ty.mask());
    let (mut konst_ok, mut arange_ok) = (true, n >= 2);
    let a = Arange { start, step: if n >= 2 { head.get(1).wrapping_sub(start) & m } else { 0 } };
    // Most tensors are neither, and show it in their first words: the windows grow from 4 KiB
    // (a multiple of the word) to the read window, so those are not read at length here.
    let (mut pos, mut step, len) = (0, (4096 / wb).max(1) * wb, n * wb);
    let most = (WINDOW / wb).max(1) * wb;
    while pos < len && (konst_ok || arange_ok) {
        let end = (pos + step).min(len);
        let x = Stream::from_le_bytes(ty, &bytes.read(pos, end)?)?;
        let first = (pos / wb) as u64;
        konst_ok = konst_ok && x.iter().all(|v| v == start);
        arange_ok = arange_ok
            && x.iter().enumerate().all(|(i, v)| start.wrapping_add(a.step.wrapping_mul(first + i as u64)) & m == v);
        (pos, step) = (end, (2 * step).min(most));
    }
    Ok(if konst_ok {
        Some(konst(start))
    } else if arange_ok {
        Some(arange(a.start, a.step))
    } else {
        None
    })
}

/// The words of `bytes` (of type `ty`) at `positions` (element ranges), in order.
fn read_sample(bytes: &Bytes, ty: Ty, positions: &[std::ops::Range<usize>]) -> Result<Stream> {
    let wb = ty.container_bytes();
    let mut raw = Vec::with_capacity(positions.iter().map(|r| r.len() * wb).sum());
    for r in positions {
        raw.extend_from_slice(&bytes.read(r.start * wb, r.end * wb)?);
    }
    Stream::from_le_bytes(ty, &raw)
}

/// `choose`, also returning the winner's derivation (for learning a prior).
fn choose_traced(t: &TensorView, opts: &SearchOptions) -> Result<(Choice, Derivation)> {
    let started = std::time::Instant::now();
    let plain = |program| {
        Ok((Choice { program, standalone_estimate: 0, finalists: Vec::new(), alternatives: Vec::new() }, Vec::new()))
    };
    let ty = Ty::u(t.word_bits);
    let n = match whole_elems(t) {
        Some(n) if n > 0 => n,
        _ => return plain(raw()),
    };
    if let Some(g) = generator(&t.bytes, ty)? {
        return plain(g);
    }
    let reference = t.reference.filter(|r| r.len() == t.bytes.len());
    let want = opts.sample_elems.min(opts.chunk_elems).max(1);
    let positions = sample_positions(n, want, block_align(t));
    let sample = read_sample(&t.bytes, ty, &positions)?;
    if let Some(r) = &reference {
        if r.same_as(&t.bytes, WINDOW)? {
            // The reference holds this very tensor: copy it, and measure the best standalone
            // program so that `inspect` can say what the copy saves.
            let alone = TensorView { reference: None, ..*t };
            let program = choose(&alone, opts)?.program;
            let mut buf = Vec::new();
            let bytes = match program.encode(&sample, &[], &mut buf) {
                Ok(()) => buf.len(),
                Err(_) => t.bytes.len(),
            };
            let estimate = (bytes as f64 * n as f64 / sample.len() as f64) as u64;
            return Ok((
                Choice {
                    program: copyref(),
                    standalone_estimate: estimate,
                    finalists: Vec::new(),
                    alternatives: Vec::new(),
                },
                Vec::new(),
            ));
        }
    }
    let rsample = reference.as_ref().map(|r| read_sample(r, ty, &positions)).transpose()?;
    let (screen, rscreen) = screens(&sample, rsample.as_ref(), opts.screen_elems, block_align(t));
    let mut tctx = tensor_ctx(t, reference.is_some(), opts);
    // (Not in the bytes of quantization blocks: the channel counts elements, not bytes.)
    tctx.lag = tctx.channel.filter(|_| tctx.blocks.is_none()).and_then(|c| features::channel_lag(&screen, c));
    let mut s = search::Search::new(&tctx, &opts.prior, screen.clone(), rscreen);
    s.run(opts.budget, opts.patience);
    let found = s.results(opts.finalists.max(1), true);
    if let Some(st) = &opts.stats {
        st.add(&s.counters);
    }
    drop(s);

    let mut found = found;
    twins::add(&mut found, opts, (sample.len() == n).then_some(n));
    // The words as they are compete too: a search that a prior steers badly (a small tensor of
    // a kind the prior has not seen) can keep only finalists larger than the tensor.
    if !found.iter().any(|f| f.program == raw()) {
        found.push(search::Found { bytes: usize::MAX, exact: false, program: raw(), derivation: Vec::new() });
    }
    // Exact sizes on the full sample (already exact when the screen is the whole sample).
    let mut ranked: Vec<(usize, usize)> = if sample.len() > screen.len() || found.iter().any(|f| !f.exact) {
        if let Some(st) = &opts.stats {
            st.finalists.fetch_add(found.len() as u64, Relaxed);
        }
        rank(found.iter().map(|f| &f.program).collect(), &sample, rsample.as_ref(), opts.decode_weight)
    } else {
        found.iter().enumerate().map(|(i, f)| (f.bytes, i)).collect()
    };
    ranked.sort();
    let programs: Vec<&Node> = found.iter().map(|f| &f.program).collect();
    let checked = Confirm { t, opts, programs: &programs, sample_elems: sample.len() }.run(&ranked);
    let scale = |bytes: usize| (bytes as f64 * n as f64 / sample.len() as f64) as u64;
    let alone = ranked
        .iter()
        .find(|r| !found[r.1].program.uses_reference())
        .map(|r| scale(r.0))
        .unwrap_or(t.bytes.len() as u64);
    let mut winner = None;
    for r in &ranked {
        if applies_whole(&found[r.1].program, &t.bytes, reference.as_ref(), ty, opts.chunk_elems)? {
            winner = Some(r);
            break;
        }
    }
    if let Some(st) = &opts.stats {
        st.search_ns.fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
    }
    let finalists: Vec<Node> = ranked.iter().map(|r| found[r.1].program.clone()).collect();
    match winner {
        Some(&(_, i)) => {
            let f = &found[i];
            let standalone_estimate = if f.program.uses_reference() { alone } else { 0 };
            let alternatives = alternatives(&programs, &checked, &f.program);
            Ok((
                Choice { program: f.program.clone(), standalone_estimate, finalists, alternatives },
                f.derivation.clone(),
            ))
        }
        None => plain(raw()),
    }
}

/// The screen (a smaller sample of `sample`, on which the search runs) and the reference's
/// screen (the same positions of the reference's sample).
fn screens(sample: &Stream, rsample: Option<&Stream>, screen_elems: usize, align: usize) -> (Stream, Option<Stream>) {
    let screen_pos = sample_positions(sample.len(), screen_elems.max(1), align);
    let screen = pick(sample, &screen_pos);
    let rscreen = rsample.map(|r| pick(r, &screen_pos));
    (screen, rscreen)
}

/// Elements of the screening sample, on which the search runs.
pub const SCREEN_ELEMS: usize = 1 << 15;
/// Programs kept from the search for the exact comparison (plus the best standalone one).
pub const FINALISTS: usize = 2;

/// Exact encoded sizes on `sample` of the programs that apply, as (size, position).
/// One after the other on this thread, with the estimates of their leaves kept: the finalists
/// and their twins share most leaves (`Node::with_estimates_kept`).
fn rank(cands: Vec<&Node>, sample: &Stream, reference: Option<&Stream>, decode_weight: f64) -> Vec<(usize, usize)> {
    Node::with_estimates_kept(|| {
        cands
            .into_iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.estimated_len_with(sample, &[], reference).ok().map(|len| (len + price(c, sample, decode_weight), i))
            })
            .collect()
    })
}

/// What decoding `program` over `sample` costs, in bytes (see `SearchOptions::decode_weight`).
fn price(program: &Node, sample: &Stream, decode_weight: f64) -> usize {
    price_of(program, sample.ty, sample.len(), decode_weight)
}

/// What decoding `program` over `elems` words of type `ty` costs, in bytes.
pub(crate) fn price_of(program: &Node, ty: Ty, elems: usize, decode_weight: f64) -> usize {
    if decode_weight <= 0.0 {
        return 0;
    }
    (decode_weight * crate::dsl::cost::program_ns(program, ty) * elems as f64).round() as usize
}

/// Whether a program whose applicability depends on the data (a constant below the root, a
/// dictionary) applies to every chunk of the whole tensor, not just to the sample. Reads the
/// tensor (and its reference) one chunk at a time.
fn applies_whole(p: &Node, whole: &Bytes, reference: Option<&Bytes>, ty: Ty, chunk_elems: usize) -> Result<bool> {
    if !search::data_dependent(p, true) {
        return Ok(true);
    }
    let wb = ty.container_bytes();
    let step = chunk_elems.max(1) * wb;
    let mut s = 0;
    while s < whole.len() {
        let e = (s + step).min(whole.len());
        let x = Stream::from_le_bytes(ty, &whole.read(s, e)?)?;
        let rr = reference.map(|f| f.read(s, e).and_then(|b| Stream::from_le_bytes(ty, &b))).transpose()?;
        if !applies(p, &x, rr.as_ref(), (s / wb) as u64) {
            return Ok(false);
        }
        s = e;
    }
    Ok(true)
}

/// Runs the transforms of `p` forward over `x` and checks constants and dictionaries.
fn applies(p: &Node, x: &Stream, reference: Option<&Stream>, offset: u64) -> bool {
    let parts = match &p.op {
        Op::Const(c) => return x.iter().all(|v| v == c.value),
        _ if p.children.is_empty() => return true,
        Op::Dict(d) => match d.forward(x, &mut Vec::new()) {
            Some(parts) => parts,
            None => return false,
        },
        Op::Sparse(s) => s.forward(x, &mut Vec::new()),
        Op::Palette(pal) if pal.child_types(x.ty).is_ok() => pal.forward(x, &mut Vec::new()),
        Op::Fields(f) => f.forward(x),
        Op::BytePlanes(b) => b.forward(x),
        Op::BitPlanes(b) => b.forward(x),
        Op::Scan(s) => vec![s.forward(x)],
        Op::Map(m) => vec![m.apply(x, false)],
        Op::Ref(r) => match reference {
            Some(rs) => vec![r.forward(x, rs)],
            None => return false,
        },
        Op::Blocks(b) => match b.forward(x, offset) {
            Ok(parts) => parts,
            Err(_) => return false,
        },
        _ => {
            // Other transforms: let the encoder decide.
            let mut buf = Vec::new();
            return p.encode_with(x, &[], reference, &mut buf).is_ok();
        }
    };
    p.children.len() == parts.len() && p.children.iter().zip(&parts).all(|(c, s)| applies(c, s, reference, offset))
}

/// Up to `want` positions: all of them when the stream is short enough, else four evenly spaced
/// blocks (contiguous, so that contexts such as the previous word stay meaningful). With
/// `align > 1` (a stream of quantization blocks of `align` bytes, `n` a multiple of it) the
/// parts start and end on block boundaries.
fn sample_positions(n: usize, want: usize, align: usize) -> Vec<std::ops::Range<usize>> {
    let align = align.max(1);
    if n <= want || n < 4 * align {
        return std::iter::once(0..n).collect();
    }
    let blocks = 4usize;
    let per = (want / blocks / align).max(1) * align;
    (0..blocks).map(|b| (n - per) * b / (blocks - 1) / align * align).map(|start| start..start + per).collect()
}

/// The ggml block layout the root stream is made of: the dtype is a quantized GGUF type that
/// `blocks` splits and the tensor is a whole number of its blocks (else None: it is bytes).
fn block_type(t: &TensorView) -> Option<crate::dsl::ops::blocks::Blocks> {
    let DType::Other(name) = t.dtype else { return None };
    let b = crate::tensor::gguf::ggml_type_named(name).and_then(|g| crate::dsl::ops::blocks::Blocks::new(g.id))?;
    (t.word_bits == 8 && !t.bytes.is_empty() && t.bytes.len().is_multiple_of(b.block_bytes())).then_some(b)
}

/// Granule of the tensor's samples: its block size for a tensor of quantization blocks, else 1.
fn block_align(t: &TensorView) -> usize {
    block_type(t).map_or(1, |b| b.block_bytes())
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

/// The tensors a prior is learned from: in each (dtype, role) stratum, `LEARN_SHARE` of the
/// tensors of at least `LEARN_MIN_ELEMS` elements (at least `LEARN_MIN_PER_STRATUM`), evenly
/// spaced in file order.
pub fn learning_sample(tensors: &[TensorView]) -> Vec<usize> {
    let mut strata: std::collections::BTreeMap<(String, features::Role), Vec<usize>> = Default::default();
    for (i, t) in tensors.iter().enumerate() {
        let elems = t.bytes.len() / (t.word_bits as usize / 8).max(1);
        if elems < LEARN_MIN_ELEMS {
            continue;
        }
        strata.entry((features_of(t).dtype, features::role_of(t.name))).or_default().push(i);
    }
    let mut picked = Vec::new();
    for members in strata.values() {
        let k = ((members.len() as f64 * LEARN_SHARE).round() as usize).max(LEARN_MIN_PER_STRATUM).min(members.len());
        for j in 0..k {
            picked.push(members[(2 * j + 1) * members.len() / (2 * k)]);
        }
    }
    picked.sort_unstable();
    picked
}

/// Learns a prior: a wider search (budget `LEARN_BUDGET`, spent whole; uniform prior) on the tensors of
/// `learning_sample`, counting every production of each winning program in its context.
/// `opts(i)` gives the search options of tensor `i`. Deterministic whatever the thread count.
pub fn learn_prior(tensors: &[TensorView], opts: &(dyn Fn(usize) -> SearchOptions + Sync)) -> Result<Prior> {
    learn_prior_with(tensors, opts, Arc::new(Prior::uniform()), LEARN_BUDGET)
}

/// [`learn_prior`] with the search on the sample guided by `guide` and spending `budget`
/// expansions per tensor.
fn learn_prior_with(
    tensors: &[TensorView],
    opts: &(dyn Fn(usize) -> SearchOptions + Sync),
    guide: Arc<Prior>,
    budget: usize,
) -> Result<Prior> {
    use rayon::prelude::*;
    let started = std::time::Instant::now();
    let picked = learning_sample(tensors);
    let derivations: Vec<(usize, Vec<(f64, Derivation)>)> = picked
        .par_iter()
        .map(|&i| {
            let o = SearchOptions { budget, patience: 0, prior: guide.clone(), stats: None, ..opts(i) };
            Ok((i, learn_one(&tensors[i], &o)?))
        })
        .collect::<Result<_>>()?;
    let mut prior = Prior::uniform();
    for (i, programs) in &derivations {
        let t = &tensors[*i];
        let f = features_of(t);
        for (weight, d) in programs {
            for (bits, parent, label) in d {
                prior.observe(&prior::Context { bits: *bits, parent, features: &f }, label, *weight);
            }
        }
        if !programs.is_empty() {
            prior.tensors += 1;
        }
    }
    if let Some(st) = picked.first().and_then(|&i| opts(i).stats) {
        st.learn_tensors.fetch_add(picked.len() as u64, Relaxed);
        st.learn_ns.fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
        st.prior_entries.store(prior.len() as u64, Relaxed);
    }
    Ok(prior)
}

/// (hole width, parent context, label) of each production of a program.
type Derivation = Vec<(u32, String, String)>;

/// Programs within a few percent of the best count for learning, with weight
/// `exp(-(size - best) / (LEARN_TEMPERATURE * best))` (the weights of a tensor sum to 1).
pub const LEARN_TEMPERATURE: f64 = 0.01;
/// Programs per tensor that may count for learning.
const LEARN_PROGRAMS: usize = 16;

/// The wider search on one tensor: its best programs on the screen, with learning weights.
fn learn_one(t: &TensorView, opts: &SearchOptions) -> Result<Vec<(f64, Derivation)>> {
    let ty = Ty::u(t.word_bits);
    let n = match whole_elems(t) {
        Some(n) if n > 0 => n,
        _ => return Ok(Vec::new()),
    };
    if generator(&t.bytes, ty)?.is_some() {
        return Ok(Vec::new());
    }
    let reference = t.reference.filter(|r| r.len() == t.bytes.len());
    if let Some(r) = &reference {
        if r.same_as(&t.bytes, WINDOW)? {
            return Ok(Vec::new());
        }
    }
    let want = opts.sample_elems.min(opts.chunk_elems).max(1);
    let positions = sample_positions(n, want, block_align(t));
    let sample = read_sample(&t.bytes, ty, &positions)?;
    let rsample = reference.as_ref().map(|r| read_sample(r, ty, &positions)).transpose()?;
    let (screen, rscreen) = screens(&sample, rsample.as_ref(), opts.screen_elems, block_align(t));
    let tctx = tensor_ctx(t, reference.is_some(), opts);
    let mut s = search::Search::new(&tctx, &opts.prior, screen.clone(), rscreen);
    s.run(opts.budget, opts.patience);
    let found = s.results(LEARN_PROGRAMS, false);
    drop(s);
    // The weights come from exact sizes on the full sample: the screen favours small tables.
    let sized: Vec<(usize, usize)> = if sample.len() > screen.len() || found.iter().any(|f| !f.exact) {
        rank(found.iter().map(|f| &f.program).collect(), &sample, rsample.as_ref(), opts.decode_weight)
    } else {
        found.iter().enumerate().map(|(i, f)| (f.bytes, i)).collect()
    };
    let Some(best) = sized.iter().map(|s| s.0).min() else { return Ok(Vec::new()) };
    let w: Vec<(f64, usize)> = sized
        .iter()
        .map(|&(b, i)| ((-((b - best) as f64) / (LEARN_TEMPERATURE * best.max(1) as f64)).exp(), i))
        .collect();
    let total: f64 = w.iter().map(|x| x.0).sum();
    Ok(w.into_iter()
        .filter(|(w, _)| *w / total > 1e-3)
        .map(|(w, i)| (w / total, found[i].derivation.clone()))
        .collect())
}

/// The prior that ships with the library: learned once, by `scripts/learn_prior.sh`
/// (`brevis prior learn` over the development corpus of real checkpoints), so that compressing
/// does not pay for learning one. It only steers the search: every program is still chosen by
/// its size on the tensor's own sample.
pub fn builtin_prior() -> Arc<Prior> {
    static BUILTIN: std::sync::OnceLock<Arc<Prior>> = std::sync::OnceLock::new();
    BUILTIN
        .get_or_init(|| {
            Arc::new(Prior::from_json(include_str!("builtin_prior.json")).expect("the built-in prior parses"))
        })
        .clone()
}

/// The prior that `source` stands for on these tensors (learning it if asked to).
pub fn resolve_prior(
    source: &PriorSource,
    tensors: &[TensorView],
    opts: &(dyn Fn(usize) -> SearchOptions + Sync),
) -> Result<Arc<Prior>> {
    Ok(match source {
        PriorSource::Builtin => builtin_prior(),
        PriorSource::Learn => Arc::new(learn_prior(tensors, opts)?),
        PriorSource::LearnBackoff => {
            let builtin = builtin_prior();
            let mut learned = learn_prior_with(tensors, opts, builtin.clone(), DEFAULT_BUDGET)?;
            learned.merge(&builtin);
            learned.blend = Some(builtin);
            Arc::new(learned)
        }
        PriorSource::Uniform => Arc::new(Prior::uniform()),
        PriorSource::Given(p) => p.clone(),
    })
}

#[cfg(test)]
mod tests;
