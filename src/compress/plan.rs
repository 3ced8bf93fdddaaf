//! The plan: what to compress, in file order. Tensors come from the safetensors header or the
//! GGUF tensor infos; byte regions between them that are too long for the residue (and the whole
//! file when it is neither) become byte-stream jobs.

use crate::dsl::ops::derive::{self, Kind};
use crate::error::Result;
use crate::reference::Reference;
use crate::source::{self, Bytes, Source};
use crate::synth::TensorView;
use crate::tensor::{self, safetensors, DType};
use std::collections::HashMap;

/// Gaps between tensors and trailing data up to this size stay in the residue (kept in the
/// index's zstd frame); longer ones are coded as byte streams.
const RESIDUE_MAX: u64 = 64 << 10;
/// A GGUF header (everything before the data section: key/values, tokenizer, tensor infos,
/// padding) up to this size stays in the residue, as a safetensors header does: the index's
/// zstd frame codes it whole (its string tables repeat across the 1 MiB chunks of a byte
/// stream), and a loader gets it from the index without decoding a chunk. Larger ones are byte
/// streams (the index must stay below `container::MAX_META_BYTES`).
const GGUF_HEADER_RESIDUE_MAX: u64 = 16 << 20;

/// One entry of the plan: a tensor, or a byte region coded as a stream.
///
/// Why not a [`TensorView`]: the view is what the search may know of a tensor (borrowed, `Copy`,
/// no placement); a job also owns its description (gaps have no header entry to borrow from)
/// and carries what only the archive writer needs: its offset in the file, the name of its
/// reference tensor and whether the header described it.
pub(crate) struct Job<'a> {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub word_bits: u32,
    pub offset: u64,
    pub bytes: Bytes<'a>,
    /// The matching tensor of the reference: its name and the bytes the program reads (the
    /// reference tensor's own, or under `derive` the tensor derived from it).
    pub reference: Option<(String, Bytes<'a>)>,
    /// The derivation of the reference this tensor is predicted by (`derive`).
    pub derive: Option<Kind>,
    /// Described by the safetensors header kept in the residue (not a GGUF tensor, which the
    /// index describes itself, nor a byte region between tensors).
    pub from_header: bool,
}

impl<'a> Job<'a> {
    /// What the search sees of this job.
    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            name: &self.name,
            dtype: &self.dtype,
            shape: &self.shape,
            word_bits: self.word_bits,
            bytes: self.bytes,
            reference: self.reference.as_ref().map(|r| r.1),
        }
    }

    fn region(input: Source<'a>, a: u64, b: u64) -> Result<Job<'a>> {
        Ok(Job {
            name: String::new(),
            dtype: DType::Other(String::new()),
            shape: vec![b - a],
            word_bits: 8,
            offset: a,
            bytes: input.range(a, b)?,
            reference: None,
            derive: None,
            from_header: false,
        })
    }
}

/// The tensors of `input` and the long byte regions between them, in file order.
pub(crate) fn plan<'a>(
    input: Source<'a>,
    refs: Option<&'a Reference>,
    derived: &'a Derived<'a>,
    memory_limit: u64,
) -> Result<Vec<Job<'a>>> {
    let Layout { spans, header_end, from_header } = layout_of(input, memory_limit)?;
    let content = refs.map(|r| r.content_index()).transpose()?;
    let mut jobs: Vec<Job> = Vec::with_capacity(spans.len() + 1);
    // Bytes outside tensors go to the residue, except long gaps and trailing data (or a whole
    // file that is not safetensors), which are coded as byte streams.
    let gap = |jobs: &mut Vec<Job<'a>>, a: u64, b: u64| -> Result<()> {
        if b - a > RESIDUE_MAX || (spans.is_empty() && b > a) {
            jobs.push(Job::region(input, a, b)?);
        }
        Ok(())
    };
    // A safetensors length prefix and JSON header always stay in the residue: the index
    // describes the header's tensors by reference to it. So does a GGUF header of at most
    // `GGUF_HEADER_RESIDUE_MAX` bytes (a larger one is a region like the gaps).
    let mut pos = if spans.is_empty() { 0 } else { header_end };
    for s in &spans {
        gap(&mut jobs, pos, s.start)?;
        let bytes = input.range(s.start, s.end)?;
        let (reference, derive) = match (refs, &content, derived.0.get(&s.name)) {
            (Some(_), _, Some(d)) => (Some((d.name.clone(), Source::Computed(d).all()?)), Some(d.kind)),
            (Some(r), Some(content), None) => (matching(r, content, s, bytes)?, None),
            _ => (None, None),
        };
        jobs.push(Job {
            word_bits: s.word_bits(),
            bytes,
            offset: s.start,
            name: s.name.clone(),
            dtype: s.dtype.clone(),
            shape: s.shape.clone(),
            reference,
            derive,
            from_header,
        });
        pos = s.end;
    }
    gap(&mut jobs, pos, input.len())?;
    Ok(jobs)
}

/// The tensor of the reference that `s` may be coded against: the same name and layout, else
/// identical content under another name.
fn matching<'a>(
    r: &'a Reference,
    content: &std::collections::HashMap<(u64, u128), String>,
    s: &safetensors::TensorSpan,
    bytes: Bytes<'a>,
) -> Result<Option<(String, Bytes<'a>)>> {
    let by_name = r
        .tensor(&s.name)
        .filter(|(rs, _)| rs.len() == s.len() && rs.word_bits() == s.word_bits())
        .map(|(_, b)| (s.name.clone(), b));
    if by_name.is_some() {
        return Ok(by_name);
    }
    Ok(content
        .get(&(s.len(), bytes.xxh3_128(source::WINDOW)?))
        .and_then(|name| r.tensor(name).map(|(_, b)| (name.clone(), b))))
}

/// Tensors of the input predicted by a derivation of a reference tensor, by name.
#[derive(Default)]
pub(crate) struct Derived<'r>(HashMap<String, DerivedTensor<'r>>);

/// The prediction of a tensor by `kind` of a reference tensor, as long as the tensor: computed
/// range by range as it is read (a chunk, the search's samples), from the reference's bytes.
#[derive(Debug)]
pub(crate) struct DerivedTensor<'r> {
    /// The reference tensor: its name, dtype and bytes.
    name: String,
    dtype: DType,
    reference: Bytes<'r>,
    kind: Kind,
    /// The tensor's elements and bytes.
    elems: u64,
    len: u64,
}

impl source::Computed for DerivedTensor<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn compute(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        derive::predict(self.kind, &self.dtype, self.reference, self.elems, start as usize, len)
    }
}

/// Bytes of each input tensor compared with a candidate derivation's prediction.
const DERIVE_SAMPLE: usize = 16 << 10;

/// The float tensors of a reference that derivations may read, by element count.
struct Floats<'r> {
    r: &'r Reference<'r>,
    by_elems: HashMap<u64, Vec<(&'r safetensors::TensorSpan, Bytes<'r>)>>,
}

impl<'r> Floats<'r> {
    fn new(r: &'r Reference<'r>) -> Floats<'r> {
        let mut by_elems: HashMap<u64, Vec<_>> = HashMap::new();
        for (rs, rb) in r.tensors() {
            if let Some(bits) = rs.dtype.bits().filter(|_| matches!(rs.dtype.name(), "F32" | "F16" | "BF16")) {
                by_elems.entry(rs.len() * 8 / bits as u64).or_default().push((rs, rb));
            }
        }
        Floats { r, by_elems }
    }

    /// The derivation of a reference tensor that best predicts tensor `s` of `input`: the
    /// reference tensor of the same name, else those with as many elements; each derivation that
    /// turns the candidate's dtype into the tensor's, tried on the tensor's first
    /// [`DERIVE_SAMPLE`] bytes; the one that predicts most of them, if it predicts at least half.
    fn best(
        &self,
        input: Source,
        s: &safetensors::TensorSpan,
    ) -> Result<Option<(Kind, &'r safetensors::TensorSpan, Bytes<'r>)>> {
        let mut best: Option<(usize, Kind, &safetensors::TensorSpan, Bytes)> = None;
        let named = self.r.tensor(&s.name);
        let n = (s.len() as usize).min(DERIVE_SAMPLE);
        let mut sample = None;
        for kind in Kind::ALL {
            let Some(elems) = kind.elems_of(s.len()).filter(|&e| e > 0) else { continue };
            let cands = self.by_elems.get(&elems).map(Vec::as_slice).unwrap_or_default();
            let cands: Vec<_> = match named {
                Some((rs, rb)) if cands.iter().any(|c| c.0.name == rs.name) => vec![(rs, rb)],
                _ => cands.to_vec(),
            };
            for (rs, rb) in cands {
                if !Kind::candidates(&rs.dtype, &s.dtype).contains(&kind) {
                    continue;
                }
                if sample.is_none() {
                    sample = Some(input.read(s.start, n)?);
                }
                let p = derive::predict(kind, &rs.dtype, rb, elems, 0, n)?;
                let hits = p.iter().zip(sample.iter().flat_map(|b| b.iter())).filter(|(a, b)| a == b).count();
                if 2 * hits >= n && best.is_none_or(|b| hits > b.0) {
                    best = Some((hits, kind, rs, rb));
                }
            }
        }
        Ok(best.map(|(_, kind, rs, rb)| (kind, rs, rb)))
    }
}

/// For each tensor of `input` that a derivation of a reference tensor predicts (a cast or a
/// quantization of it, `derive`), the best such prediction ([`Floats::best`]).
pub(crate) fn derivations<'r>(input: Source, refs: Option<&'r Reference>, memory_limit: u64) -> Result<Derived<'r>> {
    use rayon::prelude::*;
    let Some(r) = refs else { return Ok(Derived::default()) };
    let spans = layout_of(input, memory_limit)?.spans;
    let floats = Floats::new(r);
    let found: Vec<Option<(String, DerivedTensor)>> = spans
        .par_iter()
        .map(|s| -> Result<_> {
            let Some((kind, rs, rb)) = floats.best(input, s)? else { return Ok(None) };
            let elems = kind.elems_of(s.len()).unwrap_or(0);
            let (name, dtype) = (rs.name.clone(), rs.dtype.clone());
            Ok(Some((s.name.clone(), DerivedTensor { name, dtype, reference: rb, kind, elems, len: s.len() })))
        })
        .collect::<Result<_>>()?;
    Ok(Derived(found.into_iter().flatten().collect()))
}

/// What matching against a reference needs of it, made once for every file matched against it
/// ([`coverage`]).
pub(crate) struct RefIndex<'r> {
    floats: Floats<'r>,
    content: HashMap<(u64, u128), String>,
}

impl<'r> RefIndex<'r> {
    pub fn new(r: &'r Reference<'r>) -> Result<RefIndex<'r>> {
        Ok(RefIndex { floats: Floats::new(r), content: r.content_index()? })
    }
}

/// The bytes of `input`'s tensors that a reference predicts: a tensor of the same name and
/// layout or of the same content (matched as [`plan`] matches), or a derivation of one.
pub(crate) fn coverage(input: Source, index: &RefIndex, memory_limit: u64) -> Result<u64> {
    use rayon::prelude::*;
    let spans = layout_of(input, memory_limit)?.spans;
    let r = index.floats.r;
    spans
        .par_iter()
        .map(|s| -> Result<u64> {
            let bytes = input.range(s.start, s.end)?;
            let hit = matching(r, &index.content, s, bytes)?.is_some() || index.floats.best(input, s)?.is_some();
            Ok(if hit { s.len() } else { 0 })
        })
        .sum()
}

/// The tensors of the input and how the index describes them.
struct Layout {
    /// Sorted by offset, not overlapping; empty when the input is neither format.
    spans: Vec<safetensors::TensorSpan>,
    /// The bytes before this always stay in the residue.
    header_end: u64,
    /// The index describes the tensors by reference to the header in the residue.
    from_header: bool,
}

/// The tensors of a GGUF file or a safetensors file (empty when it is neither, or not a
/// consistent one), read from its header only.
fn layout_of(input: Source, memory_limit: u64) -> Result<Layout> {
    let tensor::Spans { spans, data_start, gguf } = tensor::spans_of(input, memory_limit)?;
    if gguf {
        let header_end = if data_start <= GGUF_HEADER_RESIDUE_MAX { data_start } else { 0 };
        return Ok(Layout { spans, header_end, from_header: false });
    }
    Ok(Layout { spans, header_end: data_start, from_header: true })
}
