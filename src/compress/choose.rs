//! One program per tensor: imposed by the caller, a copy of an identical earlier tensor, or
//! chosen by the search under a production prior.

use super::plan::Job;
use super::ProgramOverride;
use crate::dsl::{self, Node};
use crate::error::Result;
use crate::options::Options;
use crate::source;
use crate::synth::{self, Prior, SearchOptions};
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
    /// Programs that the level's checks compare with `program` over the whole tensor
    /// (`synth::Choice::alternatives`).
    pub alternatives: Vec<Node>,
    /// The cheaper level's program, where it differs (`programs`).
    ///
    /// The encoder codes every chunk of the tensor with `program` and these, and writes the
    /// tensor again with the one that `synth::decide` keeps where that is not `program`
    /// (`compress::encode`).
    pub cheaper: Option<Node>,
}

impl Chosen {
    /// The programs besides `program` that the encoder prices: the alternatives, then the
    /// cheaper level's.
    pub fn others(&self) -> Vec<&Node> {
        self.alternatives.iter().chain(&self.cheaper).collect()
    }
}

/// For each job, the first earlier job with identical bytes and the same word width (it
/// becomes a `copy` of it). Jobs are grouped by length, word width and a hash of three samples
/// of their bytes; only jobs that share a group are compared, byte for byte. So a file without
/// duplicates is not read whole here (the encoding reads it), and one with them costs one
/// comparison per duplicate.
pub(crate) fn duplicates(jobs: &[Job]) -> Result<Vec<Option<usize>>> {
    /// Bytes of each sample: the start, the middle and the end of a job.
    const SAMPLE: usize = 4 << 10;
    /// Distinct jobs of one group that a job is compared with (a bound on the work a crafted
    /// file can cause; past it, a job is taken as distinct, which costs size, never correctness).
    const MAX_COMPARED: usize = 8;
    let keys = jobs
        .par_iter()
        .map(|j| {
            if j.bytes.is_empty() {
                return Ok(None);
            }
            let n = j.bytes.len();
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            for a in [0, n / 2, n.saturating_sub(SAMPLE)] {
                h.update(&j.bytes.read(a.min(n), (a + SAMPLE).min(n))?);
            }
            Ok(Some((n, j.word_bits, h.digest())))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut groups: HashMap<(usize, u32, u64), Vec<usize>> = HashMap::new();
    let mut dup_of: Vec<Option<usize>> = Vec::with_capacity(jobs.len());
    for (i, key) in keys.into_iter().enumerate() {
        let Some(key) = key else {
            dup_of.push(None);
            continue;
        };
        let seen = groups.entry(key).or_default();
        let mut found = None;
        for &k in seen.iter().take(MAX_COMPARED) {
            if jobs[k].bytes.same_as(&jobs[i].bytes, source::WINDOW)? {
                found = Some(k);
                break;
            }
        }
        if found.is_none() {
            seen.push(i);
        }
        dup_of.push(found);
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
    let elems = j.bytes.len() / (j.word_bits / 8).max(1) as usize;
    SearchOptions {
        chunk_elems: chunk_elems(opts, j.word_bits) as usize,
        sample_elems: level.sample_elems(opts.sample_elems),
        budget: level.budget(opts.budget, elems),
        patience: level.patience(),
        depth: opts.depth,
        prior,
        stats: opts.stats.clone(),
        decode_weight: level.decode_weight(),
        screen_elems: level.screen_elems(),
        finalists: level.finalists(),
        zstd_large: level.zstd_large(),
        zstd_palette: level.zstd_palette(),
        lz_probe: level.lz_probe(),
        plain_rans: level.plain_rans(),
        confirm_whole: level.confirm_whole(),
    }
}

/// The production prior of [`Options::prior`] (learned from a sample of the tensors that are not
/// duplicates where asked). The built-in prior was learned from standalone checkpoints, so it
/// knows nothing of the productions that read a reference (and, as a backoff, would prune them):
/// against one, the prior is learned from the input alone.
pub(crate) fn prior(jobs: &[Job], dup_of: &[Option<usize>], opts: &Options) -> Result<Arc<Prior>> {
    let unique: Vec<&Job> = jobs.iter().zip(dup_of).filter(|(_, d)| d.is_none()).map(|(j, _)| j).collect();
    let uniform = Arc::new(Prior::uniform());
    let views: Vec<synth::TensorView> = unique.iter().map(|j| j.view()).collect();
    let source = match &opts.prior {
        synth::PriorSource::Builtin | synth::PriorSource::LearnBackoff
            if views.iter().any(|v| v.reference.is_some()) =>
        {
            &synth::PriorSource::Learn
        }
        synth::PriorSource::LearnBackoff if opts.level == crate::Level::Fast => &synth::PriorSource::Builtin,
        s => s,
    };
    synth::resolve_prior(source, &views, &|i| search_options(opts, unique[i], uniform.clone()))
}

/// One program per job. Tensors of the same kind (repeated layers) take the finalists of the
/// first of them rather than searching again: the first of each kind is chosen in a first pass,
/// the others in a second, so the result does not depend on the thread count.
///
/// Each program is then compared with the one the next cheaper level (`Level::cheaper`) picks
/// for the same tensor, chosen the same way, and the cheaper level's is kept where it is no
/// larger over the whole tensor and costs less with this level's decode price (`synth::decide`):
/// `max` never comes out larger than `default`, nor `default` than `fast` beyond its decode price.
/// The comparison with the level below the one asked for is left to the encoder, which codes the
/// whole tensor anyway (`Chosen::cheaper`): it costs one encoding of the cheaper level's
/// program rather than two of both before the encoding.
pub(crate) fn programs(
    jobs: &[Job],
    dup_of: &[Option<usize>],
    forced: Option<ProgramOverride>,
    prior: Arc<Prior>,
    opts: &Options,
) -> Result<Vec<Chosen>> {
    let mine = programs_at(jobs, dup_of, forced, prior.clone(), opts)?;
    let Some(cheaper) = opts.level.cheaper() else { return Ok(mine) };
    // Its statistics are not counted: they describe this level's search.
    let lower = Options { level: cheaper, stats: None, ..opts.clone() };
    let theirs = programs(jobs, dup_of, forced, prior.clone(), &lower)?;
    // The cheaper level's own comparison is made here, before this level's.
    let theirs = theirs.into_par_iter().enumerate().map(|(i, t)| settle(jobs, i, t, &prior, &lower));
    mine.into_par_iter()
        .zip(theirs)
        .map(|(m, t)| {
            let t = t?;
            if m.fixed || t.fixed || m.program == t.program {
                return Ok(m);
            }
            Ok(Chosen { cheaper: Some(t.program), ..m })
        })
        .collect()
}

/// `c` with its alternatives and the cheaper level's program settled by encoding them all over
/// the whole tensor (`synth::choose_whole`) rather than by the encoder.
fn settle(jobs: &[Job], i: usize, c: Chosen, prior: &Arc<Prior>, opts: &Options) -> Result<Chosen> {
    let others = c.others();
    if others.is_empty() {
        return Ok(c);
    }
    let so = search_options(opts, &jobs[i], prior.clone());
    let all: Vec<&Node> = std::iter::once(&c.program).chain(others).collect();
    let k = synth::choose_whole(&jobs[i].view(), &so, &all, c.cheaper.is_some())?;
    let program = all[k].clone();
    Ok(Chosen { program, alternatives: Vec::new(), cheaper: None, ..c })
}

/// [`programs`] at the level of `opts` alone.
fn programs_at(
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
        let fixed = |program| {
            Ok((Chosen { program, fixed: true, standalone_estimate: 0, alternatives: vec![], cheaper: None }, vec![]))
        };
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
        let chosen = Chosen {
            program: c.program,
            fixed: false,
            standalone_estimate: c.standalone_estimate,
            alternatives: c.alternatives,
            cheaper: None,
        };
        Ok((chosen, c.finalists))
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
            searched.then(|| synth::kind(&jobs[i].view(), opts.level.reuse_min_elems())).flatten()
        })
        .collect();
    let mut first_of_kind: HashMap<&str, usize> = HashMap::new();
    kinds
        .iter()
        .enumerate()
        .map(|(i, k)| k.as_deref().map(|k| *first_of_kind.entry(k).or_insert(i)).filter(|&l| l != i))
        .collect()
}
