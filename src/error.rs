//! The one error type of the library.

use std::fmt;

/// What went wrong. Every failure of the library is one of these; none panics.
#[derive(Debug)]
pub enum Error {
    /// The archive is damaged, truncated or forged.
    Corrupt(String),
    /// The archive is well formed but was written by a newer or unknown format version.
    Unsupported(String),
    /// A checksum did not match: `what` names the tensor/chunk or region hit.
    Checksum(String),
    /// The caller's request cannot be met (buffer too small, bad option, unknown tensor).
    Invalid(String),
    /// A size limit was exceeded (memory limit, forged length).
    Limit(String),
    Io(std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn corrupt(msg: impl Into<String>) -> Self {
        Error::Corrupt(msg.into())
    }
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt(m) => write!(f, "corrupt archive: {m}"),
            Error::Unsupported(m) => write!(f, "unsupported archive: {m}"),
            Error::Checksum(m) => write!(f, "checksum mismatch: {m}"),
            Error::Invalid(m) => write!(f, "invalid request: {m}"),
            Error::Limit(m) => write!(f, "limit exceeded: {m}"),
            Error::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
