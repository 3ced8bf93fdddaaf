//! The compression pipeline, one function per phase:
//!
//! 1. [`plan::plan`]: the tensors and long byte regions of the input, in file order;
//! 2. [`choose::duplicates`]: tensors identical to an earlier one become copies;
//! 3. [`choose::prior`]: the production prior (the built-in one by default);
//! 4. [`choose::programs`]: one program per tensor (imposed, copy, or searched);
//! 5. [`chunk_list`]: the chunks of every tensor, in index order;
//! 6. [`encode`]: chunks coded in index order by every worker and written in that order as
//!    they come; a tensor whose program (chosen on a sample) cannot code one of its chunks is
//!    rewritten as `raw`;
//! 7. [`residue`]: every byte outside the tensors;
//! 8. [`index`]: what the decoder needs, written with the footer by the container's writer.
//!
//! Passes over the input read it in windows (hashes, the generators' checks, the chooser's
//! samples, then the chunks), so memory stays bounded whatever the file size.

mod choose;
pub(crate) mod plan;

use crate::archive::Archive;
use crate::container::{self, ChunkEntry, Index, TensorEntry, Writer};
use crate::dsl::{self, Node};
use crate::error::{Error, Result};
use crate::hash::xxh3_64;
use crate::options::{DecodeOptions, Options};
use crate::reference::Reference;
use crate::source::{self, Source};
use crate::{hash, synth, work};
use choose::{chunk_elems, Chosen};
use plan::Job;
use std::io::{Seek, Write};

/// A caller-supplied program for tensor `i` (None: let the chooser decide).
pub type ProgramOverride<'a> = &'a (dyn Fn(usize, &synth::TensorView) -> Option<dsl::Node> + Sync);

/// One chunk to code: (tensor, byte start, byte end) within the tensor.
type Work = (usize, usize, usize);

/// One coded chunk: its payload, the checksum of its original bytes (None for programs that
/// read no payload), and the block sums of the whole file's checksum that its bytes hold (the
/// first block's number and the sums; [`crate::hash::Folder`]).
struct Coded {
    payload: Vec<u8>,
    checksum: Option<u64>,
    sums: (usize, Vec<hash::BlockSum>),
    /// Where the tensor has other programs to price (`Chosen::others`): the chunk's (size, size +
    /// decode price) with its program and with each of them (`u64::MAX` where one does not
    /// encode it; zero for the alternatives on a chunk where they are not priced).
    costs: Option<Vec<(u64, u64)>>,
    /// Whether the alternatives were priced on this chunk (`synth::priced`).
    priced: bool,
}

/// Compresses `input` into `out` (from position 0) and returns the archive's length; `out` may
/// hold stale bytes past it (a tensor recoded as `raw` is rewritten in place).
pub(crate) fn compress_source<W: Write + Seek + Send>(
    input: Source,
    opts: &Options,
    forced: Option<ProgramOverride>,
    refs: Option<&Reference>,
    out: &mut W,
) -> Result<u64> {
    // The search sizes a small tensor's finalists on the tensor itself, then the encoder codes
    // it with one of them: their zstd frames are kept for it (`coder::with_zstd_memo`).
    crate::coder::with_zstd_memo(|| compress_with(input, opts, forced, refs, out))
}

fn compress_with<W: Write + Seek + Send>(
    input: Source,
    opts: &Options,
    forced: Option<ProgramOverride>,
    refs: Option<&Reference>,
    out: &mut W,
) -> Result<u64> {
    // The wall time of each phase goes to the statistics, when asked for (synth::PHASES).
    let mut clock = std::time::Instant::now();
    let mut lap = |phase: usize| {
        if let Some(st) = &opts.stats {
            st.phase_ns[phase].fetch_add(clock.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        clock = std::time::Instant::now();
    };
    let derived = plan::derivations(input, refs, opts.memory_limit)?;
    let jobs = plan::plan(input, refs, &derived, opts.memory_limit)?;
    let dup_of = choose::duplicates(&jobs)?;
    let residue = residue(input, &jobs)?;
    lap(0);
    // A long residue's frame is made on a thread of its own while the programs are chosen and
    // the chunks coded (container::writer::ResidueFrame).
    let (chosen, programs, chunks, folder, writer, early) = std::thread::scope(|scope| {
        let early = (residue.len() >= container::writer::RESIDUE_FRAME_MIN)
            .then(|| scope.spawn(|| container::writer::ResidueFrame::new(&residue, opts.level.meta_zstd())));
        let prior = choose::prior(&jobs, &dup_of, opts)?;
        lap(1);
        let mut chosen = choose::programs(&jobs, &dup_of, forced, prior, opts)?;
        // A program that reads a derived reference says which derivation it reads (and so do
        // the others that the encoder may keep instead).
        for (c, j) in chosen.iter_mut().zip(&jobs) {
            if let Some(kind) = j.derive {
                let derive = |p: &mut Node| {
                    if p.uses_reference() {
                        *p = Node::new(dsl::Op::Derive(dsl::ops::derive::Derive { kind }), vec![p.clone()]);
                    }
                };
                c.alternatives.iter_mut().chain(&mut c.cheaper).chain(std::iter::once(&mut c.program)).for_each(derive);
            }
        }
        lap(2);
        let work = chunk_list(&jobs, opts);
        let mut writer = Writer::start(out)?;
        let (programs, chunks, folder) = encode(input, &jobs, &chosen, &work, opts, &mut writer)?;
        lap(3);
        let early = early.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).transpose()?;
        Ok::<_, Error>((chosen, programs, chunks, folder, writer, early))
    })?;
    let original_hash = folder.finish(&input.all()?)?;
    let index = index(input, original_hash, &jobs, &chosen, programs, chunks, residue, refs, opts)?;
    let early = match refs {
        Some(r) if index.reference.is_some() => against_reference(&index, r, early, opts.level.meta_zstd())?,
        _ => early,
    };
    let len = writer.finish_with(&index, early.as_ref(), opts.level.meta_zstd())?;
    lap(4);
    Ok(len)
}

/// The residue's frame coded against the reference's header (residue model 3), where that makes
/// the meta smaller than with the residue alone (in its own frame `early`, or in the meta's:
/// there a short header shares its tensor names with the index). An archive that does not need
/// the reference for its tensors is not made to need it for its header, and a header that
/// describes the tensors (safetensors) stays readable without it.
fn against_reference(
    index: &Index,
    r: &Reference,
    early: Option<container::writer::ResidueFrame>,
    level: i32,
) -> Result<Option<container::writer::ResidueFrame>> {
    let Some(k) = r.header_len().filter(|&k| k > 0 && k <= container::residue_delta::MAX_PREFIX) else {
        return Ok(early);
    };
    if index.tensors.iter().any(|t| t.from_header) {
        return Ok(early);
    }
    let prefix = r.source().read(0, k as usize)?;
    let delta = container::writer::ResidueFrame::against(&index.residue, &prefix)?;
    let meta = |frame: Option<&container::writer::ResidueFrame>| {
        container::writer::meta_and_footer_with(index, frame, level).map(|m| m.len())
    };
    Ok(if meta(Some(&delta))? < meta(early.as_ref())? { Some(delta) } else { early })
}

/// [`compress_source`] into memory; imposed programs are then proven by decoding.
pub(crate) fn compress_in_memory(
    input: &[u8],
    opts: &Options,
    forced: Option<ProgramOverride>,
    refs: Option<&Reference>,
) -> Result<Vec<u8>> {
    // An archive is seldom larger than its input: that much address space is reserved (pages
    // are touched only as the chunks are written) and backed by huge pages where the kernel
    // allows (one first-touch fault per 2 MiB rather than per 4 KiB; `work::advise_huge_pages`).
    let mut buf = Vec::with_capacity(input.len() + (input.len() >> 6) + (64 << 10));
    work::advise_huge_pages(buf.spare_capacity_mut());
    let mut out = std::io::Cursor::new(buf);
    let len = compress_source(Source::Memory(input), opts, forced, refs, &mut out)?;
    let mut out = out.into_inner();
    out.truncate(len as usize);
    if forced.is_some() {
        // Imposed programs are not checked by the chooser (generators, copies): decode to prove them.
        let back = Archive::open(&out).and_then(|mut a| {
            if let Some(r) = refs {
                a.set_loaded_reference(r.borrowed())?;
            }
            a.decompress(&DecodeOptions::default())
        });
        if !matches!(&back, Ok(b) if b == input) {
            return Err(Error::invalid("an imposed program does not reproduce its tensor"));
        }
    }
    Ok(out)
}

/// Learns a production prior from the tensors of `input` (what [`compress_source`] does first
/// with `PriorSource::Learn`).
pub(crate) fn learn_prior(input: &[u8], opts: &Options) -> Result<synth::Prior> {
    let none = plan::Derived::default();
    let jobs = plan::plan(Source::Memory(input), None, &none, opts.memory_limit)?;
    let views: Vec<synth::TensorView> = jobs.iter().map(|j| j.view()).collect();
    synth::learn_prior(&views, &|i| synth::SearchOptions {
        chunk_elems: chunk_elems(opts, jobs[i].word_bits) as usize,
        sample_elems: opts.sample_elems,
        depth: opts.depth,
        decode_weight: opts.level.decode_weight(),
        ..synth::SearchOptions::new(0)
    })
}

/// The chunks of every job, in index order.
fn chunk_list(jobs: &[Job], opts: &Options) -> Vec<Work> {
    let mut work = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let step = chunk_step(opts, j.word_bits);
        let mut s = 0;
        while s < j.bytes.len() {
            let e = (s + step).min(j.bytes.len());
            work.push((i, s, e));
            s = e;
        }
    }
    work
}

/// Bytes per chunk of a tensor of `word_bits`-bit words.
fn chunk_step(opts: &Options, word_bits: u32) -> usize {
    chunk_elems(opts, word_bits) as usize * (word_bits / 8) as usize
}

/// Codes one chunk with `program` (of an input of `len` bytes).
fn encode_chunk(j: &Job, program: &Node, (_, s, e): Work, len: u64) -> Result<Coded> {
    if !program.reads_payload() {
        return Ok(Coded { payload: Vec::new(), checksum: None, sums: (0, Vec::new()), costs: None, priced: false });
    }
    // Room for the chunk's own size: payloads seldom exceed it, so they are not regrown.
    let mut payload = Vec::with_capacity(e - s + 64);
    let ty = dsl::Ty::u(j.word_bits);
    let at = (j.offset + s as u64) as usize;
    let blocks = hash::blocks_in(at, at + (e - s), len as usize);
    let mut sums = vec![[0u64; 8]; blocks.len()];
    // The programs of most 16-bit float tensors code straight from the bytes (dsl::fused).
    if !program.uses_reference() && dsl::fused::applies(program, ty) {
        let checksum = j.bytes.with_read(s, e, |b| {
            hash::piece_sums(b, at, len as usize, &mut sums);
            dsl::fused::encode_from(program, ty, b, &mut payload).map(|_| xxh3_64(b))
        })??;
        return Ok(Coded { payload, checksum: Some(checksum), sums: (blocks.start, sums), costs: None, priced: false });
    }
    let (stream, checksum) = j.bytes.with_read(s, e, |b| {
        hash::piece_sums(b, at, len as usize, &mut sums);
        Ok::<_, Error>((dsl::Stream::from_le_bytes(ty, b)?, xxh3_64(b)))
    })??;
    let reference = match (&j.reference, program.uses_reference()) {
        (Some((_, rb)), true) => Some(dsl::Stream::from_le_bytes(ty, &rb.read(s, e)?)?),
        _ => None,
    };
    program.encode_at(&stream, &[], reference.as_ref(), (s / (j.word_bits / 8) as usize) as u64, &mut payload)?;
    Ok(Coded { payload, checksum: Some(checksum), sums: (blocks.start, sums), costs: None, priced: false })
}

/// [`encode_chunk`] with `c`'s program, and where it has others to price (`Chosen::others`),
/// the chunk's costs with them (`Coded::costs`; decode priced at `decode_weight`, as
/// `synth::choose_whole` prices it): the cheaper level's program, which keeps the levels
/// monotone, is encoded; the alternatives are priced where the chunk is one of those `priced`
/// (`synth::priced`), by their estimates (`Node::estimated_len_at`, which never came out below
/// the encoded size on the dev corpus, and at most a few bytes per leaf above it), sharing the
/// estimates of the leaves they have in common.
fn encode_chunk_against(j: &Job, c: &Chosen, w: Work, len: u64, decode_weight: f64, priced: bool) -> Result<Coded> {
    // The alternatives mostly share the program's first transforms and many of their leaves:
    // with a memo kept, the program's transforms are kept as it is encoded, and each shared
    // part is estimated once (`dsl::memo`).
    match priced && !c.alternatives.is_empty() {
        false => encode_and_price(j, c, w, len, decode_weight, priced),
        true => Node::with_estimates_kept(|| encode_and_price(j, c, w, len, decode_weight, priced)),
    }
}

fn encode_and_price(j: &Job, c: &Chosen, w: Work, len: u64, decode_weight: f64, priced: bool) -> Result<Coded> {
    let mut coded = encode_chunk(j, &c.program, w, len)?;
    if c.others().is_empty() {
        return Ok(coded);
    }
    let ty = dsl::Ty::u(j.word_bits);
    let elems = (w.2 - w.1) / ty.container_bytes();
    let own = coded.payload.len() as u64;
    let mut costs = vec![(own, own + synth::price_of(&c.program, ty, elems, decode_weight) as u64)];
    j.bytes.with_read(w.1, w.2, |b| -> Result<()> {
        let x = dsl::Stream::from_le_bytes(ty, b)?;
        let offset = (w.1 / ty.container_bytes()) as u64;
        let reference = |p: &Node| match (&j.reference, p.uses_reference()) {
            (Some((_, rb)), true) => Ok(Some(dsl::Stream::from_le_bytes(ty, &rb.read(w.1, w.2)?)?)),
            _ => Ok::<_, Error>(None),
        };
        for p in &c.alternatives {
            if !priced {
                costs.push((0, 0));
                continue;
            }
            let price = synth::price_of(p, ty, elems, decode_weight) as u64;
            costs.push(match p.estimated_len_at(&x, &[], reference(p)?.as_ref(), offset) {
                Ok(n) => (n as u64, n as u64 + price),
                Err(_) => (u64::MAX, u64::MAX),
            });
        }
        if let Some(p) = &c.cheaper {
            costs.push(synth::encoded_cost(p, &x, reference(p)?.as_ref(), offset, decode_weight));
        }
        Ok(())
    })??;
    coded.costs = Some(costs);
    coded.priced = priced;
    Ok(coded)
}

/// Codes every chunk and writes them in index order. Returns each tensor's final program and
/// chunk entries, and the whole file's checksum as far as the chunks summed it (the rest of it
/// is read by [`hash::Folder::finish`]).
///
/// Workers take the chunks in index order and code them; whichever finishes the next chunk to
/// be written writes it and any that follow it, while the others go on coding: no worker waits
/// for a whole batch. At most `2 * batch` chunks are taken and not yet written (their payloads,
/// about a chunk each; `work::batch`), and `min(threads, batch)` are coded at once.
fn encode<W: Write + Seek + Send>(
    input: Source,
    jobs: &[Job],
    chosen: &[Chosen],
    work: &[Work],
    opts: &Options,
    writer: &mut Writer<W>,
) -> Result<(Vec<Node>, Vec<Vec<ChunkEntry>>, hash::Folder)> {
    let (all, len) = (input.all()?, input.len());
    let per = work::CHUNK_WORKING_SET;
    let threads = rayon::current_num_threads();
    let batch = work::batch(opts.chunk_bytes as u64, opts.memory_limit / (per + 1) * per, threads);
    let pipe = Pipe::new(2 * batch);
    let weight = opts.level.decode_weight();
    let out = std::sync::Mutex::new(Output {
        folder: hash::Folder::new(len as usize),
        programs: chosen.iter().map(|c| c.program.clone()).collect(),
        chunks: vec![Vec::new(); jobs.len()],
        tensor_start: vec![writer.offset(); jobs.len()],
        costs: chosen.iter().map(|c| vec![(0, 0); 1 + c.others().len()]).collect(),
        own_priced: vec![(0, 0); jobs.len()],
        len,
        weight,
        writer,
    });
    // Tensors sent to `raw` (a chunk their program could not code): chunks taken after that are
    // coded as `raw`, and those coded before with the old program are coded again.
    let to_raw: Vec<std::sync::atomic::AtomicBool> = jobs.iter().map(|_| Default::default()).collect();
    let raw = dsl::build::raw();
    let priced = |(i, s, _): Work| {
        let (j, step) = (&jobs[i], chunk_step(opts, jobs[i].word_bits).max(1));
        synth::priced(j.bytes.len().div_ceil(step), s / step)
    };
    let code = |w: Work, as_raw: bool| match as_raw {
        true => encode_chunk(&jobs[w.0], &raw, w, len),
        false => encode_chunk_against(&jobs[w.0], &chosen[w.0], w, len, weight, priced(w)),
    };
    // Writes the chunks that are ready, from the next one to be written on.
    let write_ready = |out: &mut Output<W>| -> Result<()> {
        while let Some((k, as_raw, coded)) = pipe.next_ready() {
            let (w, i) = (work[k], work[k].0);
            if w.1 == 0 {
                out.tensor_start[i] = out.writer.offset();
            }
            let now_raw = to_raw[i].load(std::sync::atomic::Ordering::Acquire);
            match coded {
                // Coded before its tensor was sent to `raw`.
                _ if as_raw != now_raw => out.put(jobs, &all, w, code(w, true)?)?,
                Ok(c) => {
                    out.put(jobs, &all, w, c)?;
                    if w.2 == jobs[i].bytes.len() && !now_raw {
                        out.settle(jobs, &all, &chosen[i], &work[..=k])?;
                    }
                }
                // A chunk that the program chosen on a sample cannot code sends its whole
                // tensor to `raw`: rewrite the tensor from its start.
                Err(Error::Invalid(_)) if !chosen[i].fixed && !as_raw => {
                    to_raw[i].store(true, std::sync::atomic::Ordering::Release);
                    out.programs[i] = raw.clone();
                    out.writer.rewind_to(out.tensor_start[i])?;
                    out.chunks[i].clear();
                    for &x in work[..=k].iter().filter(|x| x.0 == i) {
                        out.put(jobs, &all, x, code(x, true)?)?;
                    }
                }
                Err(Error::Invalid(_)) if chosen[i].fixed => {
                    return Err(Error::invalid(format!("the program given for tensor {i} does not apply")))
                }
                Err(e) => return Err(e),
            }
            if let Some(p) = &opts.progress {
                p.fetch_add((w.2 - w.1) as u64, std::sync::atomic::Ordering::Relaxed);
            }
            pipe.written();
        }
        Ok(())
    };
    let work_on = || {
        while let Some(k) = pipe.take(work.len()) {
            let as_raw = to_raw[work[k].0].load(std::sync::atomic::Ordering::Acquire);
            pipe.put(k, as_raw, code(work[k], as_raw));
            // The chunks are written by one worker at a time; one that finds another writing
            // goes back to coding (the writer sees its chunk, or it is checked again below).
            while let Ok(mut out) = out.try_lock() {
                if let Err(e) = write_ready(&mut out) {
                    return pipe.fail(e);
                }
                drop(out);
                if !pipe.next_is_ready() {
                    break;
                }
            }
        }
    };
    // A worker that panics fails the pipe first, so that none waits for its chunk.
    let worker = || {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work_on)) {
            pipe.fail(Error::invalid("a worker panicked"));
            std::panic::resume_unwind(p);
        }
    };
    rayon::scope(|s| {
        for _ in 0..threads.min(batch) {
            s.spawn(|_| worker());
        }
    });
    pipe.finish()?;
    let out = out.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok((out.programs, out.chunks, out.folder))
}

/// What [`encode`] writes to, and what it keeps of what it wrote.
struct Output<'a, 'w, W: Write + Seek> {
    writer: &'a mut Writer<'w, W>,
    folder: hash::Folder,
    programs: Vec<Node>,
    chunks: Vec<Vec<ChunkEntry>>,
    tensor_start: Vec<u64>,
    /// Each tensor's costs so far with its program and the others it prices (`Coded::costs`).
    costs: Vec<Vec<(u64, u64)>>,
    /// Each tensor's costs so far with its program on the chunks where the alternatives are
    /// priced (`Coded::priced`).
    own_priced: Vec<(u64, u64)>,
    /// The input's length.
    len: u64,
    /// Bytes charged per nanosecond of decode time per element (`Level::decode_weight`).
    weight: f64,
}

impl<W: Write + Seek> Output<'_, '_, W> {
    /// At the last chunk of tensor `i` (`c`: what was chosen for it; `work`: the chunks up to this
    /// one), the decisions of `synth::choose_whole` from the costs priced while coding it: where
    /// an alternative costs less than the program on the priced chunks, the tensor is written
    /// again with it (with the program once more where it does not code a chunk); then, where
    /// the cheaper level's program costs less than the one written (`synth::decide`), with that.
    fn settle(&mut self, jobs: &[Job], all: &source::Bytes, c: &Chosen, work: &[Work]) -> Result<()> {
        if c.others().is_empty() {
            return Ok(());
        }
        let i = work.last().map_or(0, |w| w.0);
        let (costs, alts) = (self.costs[i].clone(), c.alternatives.len());
        let mine: Vec<&Node> = std::iter::once(&c.program).chain(&c.alternatives).collect();
        let mut priced = vec![self.own_priced[i]];
        priced.extend_from_slice(&costs[1..=alts]);
        let wire = |p: &Node| p.to_bytes().len() as u64;
        let best = synth::decide(&priced, |k| wire(mine[k]), false);
        let (mut program, mut cost) = (&c.program, costs[0]);
        if best > 0 {
            match self.rewrite(jobs, all, i, mine[best], work) {
                Ok(x) => (program, cost) = (mine[best], x),
                Err(Error::Invalid(_)) => _ = self.rewrite(jobs, all, i, &c.program, work)?,
                Err(e) => return Err(e),
            }
        }
        if let Some(cheaper) = &c.cheaper {
            if synth::decide(&[cost, costs[alts + 1]], |_| wire(program), true) == 1 {
                self.rewrite(jobs, all, i, cheaper, work)?;
                program = cheaper;
            }
        }
        self.programs[i] = program.clone();
        Ok(())
    }

    /// Writes tensor `i` (its chunks among `work`) again with `p`; returns its (size, size +
    /// decode price). The writer waits for this tensor, and the other workers soon wait for the
    /// writer: its chunks are coded again side by side, a few per thread at a time.
    fn rewrite(&mut self, jobs: &[Job], all: &source::Bytes, i: usize, p: &Node, work: &[Work]) -> Result<(u64, u64)> {
        self.writer.rewind_to(self.tensor_start[i])?;
        self.chunks[i].clear();
        let again: Vec<Work> = work.iter().filter(|x| x.0 == i).copied().collect();
        let threads = rayon::current_num_threads().max(1);
        let ty = dsl::Ty::u(jobs[i].word_bits);
        let mut cost = (0u64, 0u64);
        for group in again.chunks(4 * threads) {
            for (&x, c) in group.iter().zip(encode_side_by_side(&jobs[i], p, group, self.len, threads)) {
                let c = c?;
                let (n, elems) = (c.payload.len() as u64, (x.2 - x.1) / ty.container_bytes());
                cost = (cost.0 + n, cost.1 + n + synth::price_of(p, ty, elems, self.weight) as u64);
                self.put(jobs, all, x, c)?;
            }
        }
        Ok(cost)
    }

    /// Writes chunk `w`'s payload, folds its block sums and adds its costs to its tensor's.
    fn put(&mut self, jobs: &[Job], all: &source::Bytes, w: Work, c: Coded) -> Result<()> {
        if let Some(costs) = c.costs {
            if c.priced {
                let o = &mut self.own_priced[w.0];
                *o = (o.0.saturating_add(costs[0].0), o.1.saturating_add(costs[0].1));
            }
            let t = &mut self.costs[w.0];
            for (t, c) in t.iter_mut().zip(costs) {
                *t = (t.0.saturating_add(c.0), t.1.saturating_add(c.1));
            }
        }
        let elems = ((w.2 - w.1) / (jobs[w.0].word_bits / 8) as usize) as u64;
        self.chunks[w.0].push(self.writer.put(&c.payload, elems, c.checksum)?);
        self.folder.fold(c.sums.0, &c.sums.1, all)
    }
}

/// [`encode_chunk`] of each of `group` with `program`, on up to `threads` threads (this one and
/// scoped helpers, each taking the next chunk), in `group`'s order.
fn encode_side_by_side(j: &Job, program: &Node, group: &[Work], len: u64, threads: usize) -> Vec<Result<Coded>> {
    if threads < 2 || group.len() < 2 {
        return group.iter().map(|&w| encode_chunk(j, program, w, len)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::OnceLock<Result<Coded>>> = group.iter().map(|_| Default::default()).collect();
    let take = || loop {
        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(&w) = group.get(k) else { break };
        let _ = slots[k].set(encode_chunk(j, program, w, len));
    };
    std::thread::scope(|s| {
        for _ in 1..threads.min(group.len()) {
            s.spawn(take);
        }
        take();
    });
    slots.into_iter().map(|s| s.into_inner().unwrap_or_else(|| Err(Error::invalid("a chunk was not coded")))).collect()
}

/// The chunks of [`encode`] between the workers that code them and the one that writes them:
/// a ring of `window` slots (chunk `k` in slot `k % window`), the number of chunks taken and
/// written, and the first error.
struct Pipe {
    state: std::sync::Mutex<PipeState>,
    /// Signalled when a chunk is written or the pipe fails (for workers waiting for a slot).
    room: std::sync::Condvar,
}

/// A coded chunk waiting to be written: coded as `raw` or not, and the result.
type Slot = Option<(bool, Result<Coded>)>;

struct PipeState {
    slots: Vec<Slot>,
    taken: usize,
    written: usize,
    error: Option<Error>,
}

impl Pipe {
    fn new(window: usize) -> Pipe {
        let slots = (0..window.max(1)).map(|_| None).collect();
        Pipe {
            state: std::sync::Mutex::new(PipeState { slots, taken: 0, written: 0, error: None }),
            room: std::sync::Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next chunk to code (of `n`), once its slot is free; None when all are taken or the
    /// pipe failed.
    fn take(&self, n: usize) -> Option<usize> {
        let mut s = self.lock();
        while s.error.is_none() && s.taken < n && s.taken >= s.written + s.slots.len() {
            s = self.room.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if s.error.is_some() || s.taken >= n {
            return None;
        }
        s.taken += 1;
        Some(s.taken - 1)
    }

    fn put(&self, k: usize, as_raw: bool, coded: Result<Coded>) {
        let mut s = self.lock();
        let w = s.slots.len();
        s.slots[k % w] = Some((as_raw, coded));
    }

    fn next_is_ready(&self) -> bool {
        let s = self.lock();
        s.slots[s.written % s.slots.len()].is_some()
    }

    /// The next chunk to write, when it is coded (and the pipe has not failed): its number and
    /// slot.
    fn next_ready(&self) -> Option<(usize, bool, Result<Coded>)> {
        let mut s = self.lock();
        if s.error.is_some() {
            return None;
        }
        let (k, w) = (s.written, s.slots.len());
        s.slots[k % w].take().map(|(as_raw, c)| (k, as_raw, c))
    }

    /// The chunk given by the last `next_ready` is written: its slot is free.
    fn written(&self) {
        self.lock().written += 1;
        self.room.notify_all();
    }

    fn fail(&self, e: Error) {
        self.lock().error.get_or_insert(e);
        self.room.notify_all();
    }

    /// The first error, if any.
    fn finish(&self) -> Result<()> {
        self.lock().error.take().map_or(Ok(()), Err)
    }
}

/// Every byte outside the jobs, in file order.
fn residue(input: Source, jobs: &[Job]) -> Result<Vec<u8>> {
    let mut residue = Vec::new();
    let mut pos = 0u64;
    for j in jobs {
        residue.extend_from_slice(&input.read(pos, (j.offset - pos) as usize)?);
        pos = j.offset + j.bytes.len() as u64;
    }
    residue.extend_from_slice(&input.read(pos, (input.len() - pos) as usize)?);
    Ok(residue)
}

/// The archive's index.
#[allow(clippy::too_many_arguments)]
fn index(
    input: Source,
    original_hash: u64,
    jobs: &[Job],
    chosen: &[Chosen],
    programs: Vec<Node>,
    chunks: Vec<Vec<ChunkEntry>>,
    residue: Vec<u8>,
    refs: Option<&Reference>,
    opts: &Options,
) -> Result<Index> {
    let mut tensors = Vec::with_capacity(jobs.len());
    for (((j, c), program), chunks) in jobs.iter().zip(chosen).zip(programs).zip(chunks) {
        let reference = match (&j.reference, program.uses_reference()) {
            (Some((name, rb)), true) => Some(container::TensorRef {
                name: name.clone(),
                // A derived reference is identified by the reference tensor it is derived from.
                hash: match (j.derive, refs.and_then(|r| r.tensor(name))) {
                    (Some(_), Some((_, raw))) => hash::xxh3_64_of(&raw, source::WINDOW)?,
                    _ => hash::xxh3_64_of(rb, source::WINDOW)?,
                },
                standalone_estimate: c.standalone_estimate,
            }),
            _ => None,
        };
        tensors.push(TensorEntry {
            name: j.name.clone(),
            dtype: j.dtype.name().to_string(),
            shape: j.shape.clone(),
            word_bits: j.word_bits,
            offset: j.offset,
            nbytes: j.bytes.len() as u64,
            program,
            chunk_elems: chunk_elems(opts, j.word_bits),
            chunks,
            reference,
            from_header: j.from_header,
        });
    }
    let uses_ref = tensors.iter().any(|t| t.reference.is_some());
    Ok(Index {
        version: container::VERSION,
        original_size: input.len(),
        original_hash,
        reference: refs.filter(|_| uses_ref).map(|r| r.identity()).transpose()?,
        chunk_bytes: opts.chunk_bytes as u64,
        residue,
        residue_delta: None,
        tensors,
        file_meta: opts.file_meta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of two U16 tensors: `a` of `chunks` chunks of `per` values with few
    /// distinct values, but for chunk `bad`, which holds `per` distinct ones; then `b`.
    fn file(chunks: usize, per: usize, bad: usize) -> Vec<u8> {
        let a: Vec<u16> =
            (0..chunks * per).map(|i| if i / per == bad { i as u16 } else { (i * 7 % 13) as u16 }).collect();
        let b: Vec<u16> = (0..per).map(|i| (i % 5) as u16).collect();
        let (na, nb) = (2 * a.len(), 2 * b.len());
        let mut json = format!(
            r#"{{"a":{{"dtype":"U16","shape":[{}],"data_offsets":[0,{na}]}},"b":{{"dtype":"U16","shape":[{}],"data_offsets":[{na},{}]}}}}"#,
            a.len(),
            b.len(),
            na + nb
        );
        while json.len() % 8 != 0 {
            json.push(' ');
        }
        let mut f = (json.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(json.as_bytes());
        f.extend(a.iter().chain(&b).flat_map(|v| v.to_le_bytes()));
        f
    }

    /// A chunk that the chosen program cannot code (here `lanes` over more than 4095 distinct
    /// symbols) sends its whole tensor to `raw`, wherever it falls: the chunks of the tensor
    /// written before it are rewritten, those coded meanwhile with the old program are coded
    /// again, and the archive decodes. The archive is the same on one thread and on two, and with
    /// a memory limit that lets one chunk be coded at a time (two taken before they are written).
    #[test]
    fn a_chunk_the_program_cannot_code_sends_its_tensor_to_raw() {
        let (chunks, per) = (40, 5000);
        for bad in [0, 3, 17, 39] {
            let input = file(chunks, per, bad);
            let archive = |threads: usize, memory_limit: u64| {
                let opts = Options { chunk_bytes: 2 * per, memory_limit, ..Default::default() };
                let src = Source::Memory(&input);
                let none = plan::Derived::default();
                let jobs = plan::plan(src, None, &none, opts.memory_limit).unwrap();
                assert_eq!(jobs.len(), 2);
                let chosen: Vec<Chosen> = jobs
                    .iter()
                    .map(|_| Chosen {
                        program: dsl::build::lanes(),
                        fixed: false,
                        standalone_estimate: 0,
                        alternatives: Vec::new(),
                        cheaper: None,
                    })
                    .collect();
                let work = chunk_list(&jobs, &opts);
                let mut out = std::io::Cursor::new(Vec::new());
                let mut writer = Writer::start(&mut out).unwrap();
                let pool = work::pool(threads).unwrap();
                let (programs, entries, folder) =
                    pool.install(|| encode(src, &jobs, &chosen, &work, &opts, &mut writer)).unwrap();
                assert_eq!(programs[0], dsl::build::raw(), "bad chunk {bad}");
                assert_eq!(programs[1], dsl::build::lanes());
                assert_eq!(entries[0].len(), chunks);
                let hash = folder.finish(&src.all().unwrap()).unwrap();
                let residue = residue(src, &jobs).unwrap();
                let index = index(src, hash, &jobs, &chosen, programs, entries, residue, None, &opts).unwrap();
                let len = writer.finish_with(&index, None, opts.level.meta_zstd()).unwrap() as usize;
                let mut archive = out.into_inner();
                archive.truncate(len);
                archive
            };
            let two = archive(2, Options::default().memory_limit);
            assert_eq!(crate::api::decompress(&two).unwrap(), input, "bad chunk {bad}");
            assert!(archive(1, Options::default().memory_limit) == two, "bad chunk {bad}, one thread");
            // One chunk coded at a time (`work::batch` of 1).
            assert!(archive(2, 7 * 2 * per as u64) == two, "bad chunk {bad}, small memory limit");
        }
    }

    /// A tensor's other program (the cheaper level's, or an alternative of the level's checks)
    /// replaces its program where it costs less over the whole tensor, as `synth::choose_whole`
    /// decides, whichever comes first: the tensor is written again with it, and the archive
    /// decodes. One that does not code a chunk never wins, also where that chunk is not one of
    /// those the alternatives are priced on (`synth::priced`: chunk 5 of 12).
    #[test]
    fn the_alternative_that_costs_less_over_the_tensor_is_kept() {
        let per = 5000;
        let opts = Options { chunk_bytes: 2 * per, ..Default::default() };
        let none = plan::Derived::default();
        let (raw, lanes) = (dsl::build::raw(), dsl::build::lanes());
        // Too many distinct words for `lanes` in tensor `a` of the second and the fourth: it
        // cannot be kept there.
        assert!(!synth::priced(12, 5));
        let inputs = [file(6, per, usize::MAX), file(6, per, 2), file(12, per, usize::MAX), file(12, per, 5)];
        let plans: Vec<Vec<Job>> =
            inputs.iter().map(|f| plan::plan(Source::Memory(f), None, &none, opts.memory_limit).unwrap()).collect();
        let [(input, jobs), (wide, wide_jobs), (long, long_jobs), (long_wide, long_wide_jobs)] =
            [0, 1, 2, 3].map(|k| (&inputs[k], &plans[k]));
        let none: Option<&Node> = None;
        for (input, jobs, program, alternative, cheaper, kept) in [
            (input, jobs, &raw, none, Some(&lanes), &lanes),
            (input, jobs, &lanes, none, Some(&raw), &lanes),
            (wide, wide_jobs, &raw, none, Some(&lanes), &raw),
            (input, jobs, &raw, Some(&lanes), None, &lanes),
            (input, jobs, &raw, Some(&lanes), Some(&raw), &lanes),
            (long, long_jobs, &raw, Some(&lanes), Some(&raw), &lanes),
            (long_wide, long_wide_jobs, &raw, Some(&lanes), None, &raw),
            (long_wide, long_wide_jobs, &raw, Some(&lanes), Some(&raw), &raw),
        ] {
            let src = Source::Memory(input);
            let chosen: Vec<Chosen> = jobs
                .iter()
                .map(|_| Chosen {
                    program: program.clone(),
                    fixed: false,
                    standalone_estimate: 0,
                    alternatives: alternative.into_iter().cloned().collect(),
                    cheaper: cheaper.cloned(),
                })
                .collect();
            let work = chunk_list(jobs, &opts);
            let mut out = std::io::Cursor::new(Vec::new());
            let mut writer = Writer::start(&mut out).unwrap();
            let (programs, entries, folder) = encode(src, jobs, &chosen, &work, &opts, &mut writer).unwrap();
            assert_eq!(&programs[0], kept);
            let so = synth::SearchOptions {
                decode_weight: opts.level.decode_weight(),
                ..synth::SearchOptions::new(choose::chunk_elems(&opts, 16) as usize)
            };
            let all: Vec<&Node> = std::iter::once(program).chain(alternative).chain(cheaper).collect();
            let whole = all[synth::choose_whole(&jobs[0].view(), &so, &all, cheaper.is_some()).unwrap()];
            assert_eq!(&programs[0], whole);
            assert_eq!(programs[1], lanes, "tensor b: lanes codes it in fewer bytes");
            let hash = folder.finish(&src.all().unwrap()).unwrap();
            let residue = residue(src, jobs).unwrap();
            let index = index(src, hash, jobs, &chosen, programs, entries, residue, None, &opts).unwrap();
            let len = writer.finish_with(&index, None, opts.level.meta_zstd()).unwrap() as usize;
            let mut archive = out.into_inner();
            archive.truncate(len);
            assert_eq!(&crate::api::decompress(&archive).unwrap(), input);
        }
    }
}
