//! One program per tensor: imposed by the caller, a copy of an identical earlier tensor, or
//! chosen by the search under a production prior.

use super::plan::Job;
use super::ProgramOverride;
use crate::dsl::{self, Node};
use crate::error::Result;
use crate::source;
use crate::synth::{self, Prior, SearchOptions};
use crate::Options;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// The program of one tensor.
pub(crate) struct Chosen {
    pub program: Node,
    /// Imposed or a copy: not checked by the chooser, so a chunk it cannot code is an error
    /// rather than a fall back to `raw`.
    pub fixed: bool,
    /// See [`synth::Choice::standalone_estimate`].
    pub standalone_estimate: u64,
}

/// For each job, the first earlier job with identical bytes and the same word width (it
/// becomes a `copy` of it).
pub(crate) fn duplicates(jobs: &[Job]) -> Result<Vec<Option<usize>>> {
    let mut seen: HashMap<(u128, u32), usize> = HashMap::new();
    let mut dup_of: Vec<Option<usize>> = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        if j.bytes.is_empty() {
            dup_of.push(None);
            continue;
        }
        let key = (j.bytes.xxh3_128(source::WINDOW)?, j.word_bits);
        match seen.get(&key) {
            Some(&k) if jobs[k].bytes.same_as(&j.bytes, source::WINDOW)? => dup_of.push(Some(k)),
            _ => {
                seen.insert(key, i);
                dup_of.push(None);
            }
        }
    }
    Ok(dup_of)
}

/// Elements per chunk of a tensor of `word_bits`-bit words.
pub(crate) fn chunk_elems(opts: &Options, word_bits: u32) -> u64 {
    (opts.chunk_bytes / (word_bits / 8) as usize).max(1) as u64
}

/// The search settings for one job.
pub(crate) fn search_options(opts: &Options, j: &Job, prior: Arc<Prior>) -> SearchOptions {
    let level = opts.level;
    SearchOptions {
        chunk_elems: chunk_elems(opts, j.word_bits) as usize,
        sample_elems: level.sample_elems(opts.sample_elems),
        budget: opts.budget,
        depth: opts.depth,
        prior,
        stats: opts.stats.clone(),
        decode_weight: level.decode_weight(),
        screen_elems: level.screen_elems(),
        finalists: level.finalists(),
    }
}

/// The production prior of [`Options::prior`], learned (by default) from a sample of the
/// tensors that are not duplicates.
pub(crate) fn prior(jobs: &[Job], dup_of: &[Option<usize>], opts: &Options) -> Result<Arc<Prior>> {
    let unique: Vec<&Job> = jobs.iter().zip(dup_of).filter(|(_, d)| d.is_none()).map(|(j, _)| j).collect();
    let uniform = Arc::new(Prior::uniform());
    let views: Vec<synth::TensorView> = unique.iter().map(|j| j.view()).collect();
    synth::resolve_prior(&opts.prior, &views, &|i| search_options(opts, unique[i], uniform.clone()))
}

/// One program per job. Tensors of the same kind (repeated layers) take the finalists of the
/// first of them rather than searching again: the first of each kind is chosen in a first pass,
/// the others in a second, so the result does not depend on the thread count.
pub(crate) fn programs(
    jobs: &[Job],
    dup_of: &[Option<usize>],
    forced: Option<ProgramOverride>,
    prior: Arc<Prior>,
    opts: &Options,
) -> Result<Vec<Chosen>> {
    let imposed: Vec<Option<Node>> =
        jobs.iter().enumerate().map(|(i, j)| forced.and_then(|f| f(i, &j.view()))).collect();
    let leader = leaders(jobs, dup_of, &imposed, opts);
    let choose_one = |i: usize, finalists: Option<&[Node]>| -> Result<(Chosen, Vec<Node>)> {
        let fixed = |program| Ok((Chosen { program, fixed: true, standalone_estimate: 0 }, Vec::new()));
        if let Some(p) = &imposed[i] {
            return fixed(p.clone());
        }
        if let Some(k) = dup_of[i] {
            return fixed(dsl::build::copy(k as u32));
        }
        let (view, so) = (jobs[i].view(), search_options(opts, &jobs[i], prior.clone()));
        let c = match finalists {
            Some(f) => synth::choose_among(&view, &so, f)?,
            None => synth::choose(&view, &so)?,
        };
        Ok((Chosen { program: c.program, fixed: false, standalone_estimate: c.standalone_estimate }, c.finalists))
    };
    let mut slots: Vec<Option<(Chosen, Vec<Node>)>> = (0..jobs.len()).map(|_| None).collect();
    let firsts: Vec<usize> = (0..jobs.len()).filter(|&i| leader[i].is_none()).collect();
    let done = firsts.par_iter().map(|&i| choose_one(i, None)).collect::<Result<Vec<_>>>()?;
    for (&i, c) in firsts.iter().zip(done) {
        slots[i] = Some(c);
    }
    let rest: Vec<usize> = (0..jobs.len()).filter(|&i| leader[i].is_some()).collect();
    let done = rest
        .par_iter()
        .map(|&i| choose_one(i, Some(&slots[leader[i].unwrap()].as_ref().expect("chosen in the first pass").1)))
        .collect::<Result<Vec<_>>>()?;
    for (&i, c) in rest.iter().zip(done) {
        slots[i] = Some(c);
    }
    Ok(slots.into_iter().map(|c| c.expect("every tensor chosen").0).collect())
}

/// For each job that reuses programs, the first job of its kind (None: it is searched).
fn leaders(jobs: &[Job], dup_of: &[Option<usize>], imposed: &[Option<Node>], opts: &Options) -> Vec<Option<usize>> {
    let kinds: Vec<Option<String>> = (0..jobs.len())
        .map(|i| {
            let searched = opts.reuse && dup_of[i].is_none() && imposed[i].is_none();
            searched.then(|| synth::kind(&jobs[i].view())).flatten()
        })
        .collect();
    let mut first_of_kind: HashMap<&str, usize> = HashMap::new();
    kinds
        .iter()
        .enumerate()
        .map(|(i, k)| k.as_deref().map(|k| *first_of_kind.entry(k).or_insert(i)).filter(|&l| l != i))
        .collect()
}
