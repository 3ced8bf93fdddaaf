//! `zstd(level)` (id 0x04): the LZ leaf, for streams with long repeats (STFT bases, tiled
//! tables). Codes the little-endian bytes of the stream's containers. `level` records what the
//! encoder used; the decoder does not need it.

use super::prelude::*;
use crate::coder;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Zstd {
    pub level: i32,
}

impl Zstd {
    pub const ID: u8 = 0x04;

    pub fn read(r: &mut ByteReader) -> Result<Self> {
        Ok(Zstd { level: r.u8()? as i32 })
    }

    pub fn encode(&self, x: &Stream, out: &mut Vec<u8>) -> Result<()> {
        coder::zstd_encode(&x.to_le_bytes(), self.level, out)
    }

    pub fn decode(&self, ty: Ty, n: usize, input: &[u8]) -> Result<Stream> {
        let nbytes = n.checked_mul(ty.container_bytes()).ok_or_else(|| Error::corrupt("zstd: size overflow"))?;
        let bytes = coder::zstd_decode(input, nbytes)?;
        Stream::from_le_bytes(ty, &bytes)
    }
}
