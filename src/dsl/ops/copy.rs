//! `copy(tensor)` (id 0x07): the chunk is the same chunk of an earlier tensor of the same byte
//! size (duplicate weights, tied embeddings). Only allowed at the root of a program.

use super::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    pub tensor: u32,
}

impl Copy {
    pub const ID: u8 = 0x07;

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        Ok(Copy { tensor: r.len(u32::MAX as u64)? as u32 })
    }
}
