//! References: another checkpoint (a fine-tune's base, an earlier training step) whose tensors a
//! program may read. The archive records the reference file's size and hash and, per tensor,
//! the name and hash of the reference tensor, so decoding with a missing or different reference
//! fails with an error that names what is expected.

use crate::container::{FileRef, Index};
use crate::error::{Error, Result};
use crate::hash::xxh3_64_of;
use crate::source::{Bytes, Source, WINDOW};
use crate::tensor::safetensors::TensorSpan;
use crate::tensor::spans_of;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

/// A reference checkpoint: the original bytes of a safetensors or GGUF file (given directly, or
/// decoded from a Brevis archive) and its tensors by name. Its bytes are read in windows where
/// they are in a file: a reference of any size takes only its header's memory.
pub struct Reference<'a> {
    store: Store<'a>,
    by_name: HashMap<String, TensorSpan>,
    /// Its size and hash, hashed when first asked for (choosing a family's references, or
    /// compressing with no tensor that uses it, never needs it).
    identity: OnceLock<FileRef>,
}

/// Where a reference's bytes are.
enum Store<'a> {
    /// The caller's memory or file.
    Source(Source<'a>),
    /// Memory of the reference's own (an archive decoded in memory).
    Owned(Vec<u8>),
    /// A file of the reference's own (an archive decoded into a temporary file) and its length.
    File(std::fs::File, u64),
}

impl<'a> Reference<'a> {
    /// The reference of a safetensors or GGUF file's bytes (anything else has no tensors; a
    /// Brevis archive of one is decoded first, by `archive::load_reference`).
    pub fn new(bytes: Cow<'a, [u8]>) -> Result<Reference<'a>> {
        match bytes {
            Cow::Borrowed(b) => Reference::of(Store::Source(Source::Memory(b)), u64::MAX),
            Cow::Owned(v) => Reference::of(Store::Owned(v), u64::MAX),
        }
    }

    /// The reference of a safetensors or GGUF file read in windows; its header must fit in
    /// `memory_limit`.
    pub fn from_source(src: Source<'a>, memory_limit: u64) -> Result<Reference<'a>> {
        Reference::of(Store::Source(src), memory_limit)
    }

    /// The reference of a file of its own (a temporary file it is the only user of).
    pub fn from_owned_file(file: std::fs::File, memory_limit: u64) -> Result<Reference<'static>> {
        let len = file.metadata()?.len();
        Reference::of(Store::File(file, len), memory_limit)
    }

    fn of(store: Store<'_>, memory_limit: u64) -> Result<Reference<'_>> {
        let src = source(&store);
        let by_name = spans_of(src, memory_limit)?.spans.into_iter().map(|s| (s.name.clone(), s)).collect();
        Ok(Reference { store, by_name, identity: OnceLock::new() })
    }

    /// The same reference, reading this one's bytes.
    pub fn borrowed(&self) -> Reference<'_> {
        Reference {
            store: Store::Source(self.source()),
            by_name: self.by_name.clone(),
            identity: self.identity.clone(),
        }
    }

    /// The reference's original bytes.
    pub fn source(&self) -> Source<'_> {
        source(&self.store)
    }

    /// Its size and xxh3-64 (hashed in windows the first time).
    pub fn identity(&self) -> Result<FileRef> {
        if let Some(id) = self.identity.get() {
            return Ok(*id);
        }
        let src = self.source();
        let id = FileRef { size: src.len(), hash: xxh3_64_of(&src.all()?, WINDOW)? };
        Ok(*self.identity.get_or_init(|| id))
    }

    /// Where its first tensor starts: the length of its header (None without tensors).
    pub fn header_len(&self) -> Option<u64> {
        self.by_name.values().map(|s| s.start).min()
    }

    /// The bytes of reference tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<(&TensorSpan, Bytes<'_>)> {
        self.by_name.get(name).map(|s| (s, self.bytes_of(s)))
    }

    /// Every tensor, in no particular order.
    pub fn tensors(&self) -> impl Iterator<Item = (&TensorSpan, Bytes<'_>)> {
        self.by_name.values().map(|s| (s, self.bytes_of(s)))
    }

    fn bytes_of(&self, s: &TensorSpan) -> Bytes<'_> {
        // The spans were read from this source's header, which checks they are within it.
        self.source().range(s.start, s.end).expect("a tensor of the reference is within it")
    }

    /// Content index for matching tensors that were renamed: (byte length, xxh3-128) -> name.
    pub fn content_index(&self) -> Result<HashMap<(u64, u128), String>> {
        self.tensors().map(|(s, b)| Ok(((s.len(), b.xxh3_128(WINDOW)?), s.name.clone()))).collect()
    }

    /// Checks that this is the reference `index` was made against, tensor by tensor.
    pub fn check(&self, index: &Index) -> Result<()> {
        let Some(want) = index.reference else { return Ok(()) };
        let have = self.identity()?;
        if want != have {
            return Err(Error::invalid(format!(
                "wrong reference: this archive was made against a file of {} bytes with xxh3 {:016x}; the one given has {} bytes and xxh3 {:016x}",
                want.size, want.hash, have.size, have.hash
            )));
        }
        for t in &index.tensors {
            if let Some(r) = &t.reference {
                // A derived tensor's reference has its own length (`derive` checks it has enough elements).
                let derived = matches!(t.program.op, crate::dsl::Op::Derive(_));
                let same = match self.tensor(&r.name) {
                    Some((s, b)) => (derived || s.len() == t.nbytes) && xxh3_64_of(&b, WINDOW)? == r.hash,
                    None => false,
                };
                if !same {
                    return Err(Error::invalid(format!(
                        "reference tensor {:?} (for {:?}) is missing or differs",
                        r.name, t.name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The error for an archive that needs a reference when none was given.
pub fn missing(index: &Index) -> Option<Error> {
    index.reference.map(|r| {
        Error::invalid(format!(
            "this archive was made against a reference file ({} bytes, xxh3 {:016x}); give it (CLI: --ref FILE)",
            r.size, r.hash
        ))
    })
}

fn source<'s>(store: &'s Store<'_>) -> Source<'s> {
    match store {
        Store::Source(s) => *s,
        Store::Owned(v) => Source::Memory(v),
        Store::File(file, len) => Source::File { file, len: *len },
    }
}
