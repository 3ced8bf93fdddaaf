//! The C ABI lives here and only here (the only module with C types). The entry points,
//! error codes and the generated header are the subject of the C-ABI issue; the safe core
//! (`crate::compress`, `crate::Archive`) is what they wrap.
