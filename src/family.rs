//! Model families: the files of one model (a master and its casts and quantizations, a base and
//! its fine-tunes) coded each against the one that predicts it best, so that a variant costs what
//! its master does not already hold.
//!
//! [`references`] chooses, for each file of a family, the file it is coded against: files are
//! taken from the highest precision down (most bits per element, then the most tensor bytes), and
//! each may only use a file taken before it, so references form no cycles and the first file is
//! coded alone. Among those, the one whose tensors predict most of the file's tensor bytes
//! (`compress::plan::coverage`: same tensors, same content, or a derivation) is its reference,
//! when it predicts at least a quarter of them.

use crate::compress::plan;
use crate::error::Result;
use crate::reference::Reference;
use crate::source::Source;
use crate::tensor::spans_of;

/// A file's tensor bytes and its bits per element (0 for a file without tensors).
fn precision(file: Source, memory_limit: u64) -> Result<(u64, f64)> {
    let spans = spans_of(file, memory_limit)?.spans;
    let bytes: u64 = spans.iter().map(|s| s.len()).sum();
    let elems: u64 = spans.iter().map(|s| s.shape.iter().product::<u64>()).sum();
    Ok((bytes, if elems == 0 { 0.0 } else { bytes as f64 * 8.0 / elems as f64 }))
}

/// For each of `files`, the index of the file to code it against, or None (coded alone). Files
/// are read in windows (headers, the matching's samples, hashes of tensors), so memory stays
/// bounded whatever their sizes.
pub fn references(files: &[Source], memory_limit: u64) -> Result<Vec<Option<usize>>> {
    let prec: Vec<(u64, f64)> = files.iter().map(|&f| precision(f, memory_limit)).collect::<Result<_>>()?;
    let mut order: Vec<usize> = (0..files.len()).filter(|&i| prec[i].0 > 0).collect();
    order.sort_by(|&a, &b| prec[b].1.total_cmp(&prec[a].1).then(prec[b].0.cmp(&prec[a].0)).then(a.cmp(&b)));
    // Each file's reference and matching index, made when it is first a candidate, then reused.
    let mut refs: Vec<Option<Reference>> = (0..files.len()).map(|_| None).collect();
    for &j in order.iter().rev().skip(1) {
        refs[j] = Some(Reference::from_source(files[j], memory_limit)?);
    }
    let mut index: Vec<Option<plan::RefIndex>> = (0..files.len()).map(|_| None).collect();
    let mut chosen = vec![None; files.len()];
    for (p, &i) in order.iter().enumerate() {
        let mut best: Option<(u64, usize)> = None;
        for &j in &order[..p] {
            if index[j].is_none() {
                index[j] = Some(plan::RefIndex::new(refs[j].as_ref().expect("made above"))?);
            }
            let ix = index[j].as_ref().expect("made above");
            let covered = plan::coverage(files[i], ix, memory_limit)?;
            if 4 * covered >= prec[i].0 && best.is_none_or(|(c, _)| covered > c) {
                best = Some((covered, j));
            }
        }
        chosen[i] = best.map(|(_, j)| j);
    }
    Ok(chosen)
}
