//! The one error type of the library.

use std::fmt;

/// What went wrong. Every failure of the library is one of these; none panics.
#[derive(Debug)]
#[non_exhaustive]
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
    /// Reading the input or writing the output failed ([`Error::is_write_error`] tells which,
    /// for the archive writer's output).
    Io(std::io::Error),
}

/// The library's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn corrupt(msg: impl Into<String>) -> Self {
        Error::Corrupt(msg.into())
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    /// An I/O error of writing the output (a full disk, say), as opposed to reading the input:
    /// so that a caller can name the file that failed.
    pub(crate) fn write(e: std::io::Error) -> Self {
        Error::Io(std::io::Error::new(e.kind(), WriteError(e)))
    }

    /// Whether this is a failure to write the output (a full disk, say), as opposed to reading
    /// the input.
    pub fn is_write_error(&self) -> bool {
        matches!(self, Error::Io(io) if io.get_ref().is_some_and(|inner| inner.is::<WriteError>()))
    }
}

/// The inner error of an [`Error::Io`] made by [`Error::write`]. It displays as the error it
/// wraps.
#[derive(Debug)]
struct WriteError(std::io::Error);

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
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
