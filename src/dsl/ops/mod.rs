//! The operators of the DSL, one file each: type rule, encoder (forward), interpreter kernel
//! (inverse), wire form with a permanent id, and cost. `super::Op` is the registry.

pub mod blocks;
pub mod copy;
pub mod derive;
pub mod dict;
pub mod entropy;
pub mod fields;
pub mod gen;
pub mod lanes;
pub mod lz;
pub mod maps;
pub mod palette;
pub mod planes;
pub mod raw;
pub mod reference;
pub mod region;
pub mod scan;
pub mod sparse;

pub(crate) mod prelude {
    pub use crate::coder::bitio::{put_varint, ByteReader};
    pub use crate::dsl::stream::{Data, Stream, Ty};
    pub use crate::error::{Error, Result};
}
