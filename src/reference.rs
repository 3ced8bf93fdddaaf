//! References: another checkpoint (a fine-tune's base, an earlier training step) whose tensors a
//! program may read. The archive records the reference file's size and hash and, per tensor,
//! the name and hash of the reference tensor, so decoding with a missing or different reference
//! fails with an error that names what is expected.

use crate::container::{FileRef, Index};
use crate::error::{Error, Result};
use crate::tensor::layout;
use crate::tensor::safetensors::TensorSpan;
use std::borrow::Cow;
use std::collections::HashMap;
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

/// A reference checkpoint: the original bytes of a safetensors or GGUF file (given directly, or
/// decoded from a Brevis archive) and its tensors by name.
pub struct Reference<'a> {
    bytes: Cow<'a, [u8]>,
    by_name: HashMap<String, TensorSpan>,
    identity: FileRef,
}

impl<'a> Reference<'a> {
    /// The reference of a safetensors or GGUF file's bytes (anything else has no tensors; a
    /// Brevis archive of one is decoded first, by `archive::load_reference`).
    pub fn new(bytes: Cow<'a, [u8]>) -> Reference<'a> {
        let by_name = layout(&bytes).unwrap_or_default().into_iter().map(|s| (s.name.clone(), s)).collect();
        let identity = FileRef { size: bytes.len() as u64, hash: xxh3_64(&bytes) };
        Reference { bytes, by_name, identity }
    }

    /// The reference's original bytes.
    pub fn original(&self) -> &[u8] {
        &self.bytes
    }

    pub fn identity(&self) -> FileRef {
        self.identity
    }

    /// The bytes of reference tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<(&TensorSpan, &[u8])> {
        self.by_name.get(name).map(|s| (s, &self.bytes[s.start as usize..s.end as usize]))
    }

    /// Every tensor, in no particular order.
    pub fn tensors(&self) -> impl Iterator<Item = (&TensorSpan, &[u8])> {
        self.by_name.values().map(|s| (s, &self.bytes[s.start as usize..s.end as usize]))
    }

    /// Content index for matching tensors that were renamed: (byte length, xxh3-128) -> name.
    pub fn content_index(&self) -> HashMap<(u64, u128), String> {
        self.by_name
            .values()
            .map(|s| ((s.len(), xxh3_128(&self.bytes[s.start as usize..s.end as usize])), s.name.clone()))
            .collect()
    }

    /// Checks that this is the reference `index` was made against, tensor by tensor.
    pub fn check(&self, index: &Index) -> Result<()> {
        let Some(want) = index.reference else { return Ok(()) };
        if want != self.identity {
            return Err(Error::invalid(format!(
                "wrong reference: this archive was made against a file of {} bytes with xxh3 {:016x}; the one given has {} bytes and xxh3 {:016x}",
                want.size, want.hash, self.identity.size, self.identity.hash
            )));
        }
        for t in &index.tensors {
            if let Some(r) = &t.reference {
                // A derived tensor's reference has its own length (`derive` checks it has enough elements).
                let derived = matches!(t.program.op, crate::dsl::Op::Derive(_));
                match self.tensor(&r.name) {
                    Some((s, b)) if (derived || s.len() == t.nbytes) && xxh3_64(b) == r.hash => {}
                    _ => {
                        return Err(Error::invalid(format!(
                            "reference tensor {:?} (for {:?}) is missing or differs",
                            r.name, t.name
                        )))
                    }
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
