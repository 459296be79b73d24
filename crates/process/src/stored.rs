//! Files this program keeps for itself (the code index, the co-change index): read bounded,
//! versioned, and why one was not used as it was. One owner for what every such cache shares.

use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;

/// Why a stored file was not used: the causes every cache shares. The error behind
/// `Unreadable` and `Corrupt` is kept whole as the source, in an `Arc` so that the value stays
/// `Clone`; two are equal when they fail the same way (the same kind of read error, the same
/// kind of corruption), which is what a caller compares.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unusable {
    #[error("missing")]
    Missing,
    #[error("unreadable({0})")]
    Unreadable(#[source] Arc<std::io::Error>),
    #[error("version({found}, {expected})")]
    Version { found: u32, expected: u32 },
    #[error("corrupt({0})")]
    Corrupt(#[source] Arc<Corruption>),
}

impl Unusable {
    /// A file that could not be read for `e` (a missing one is [`Unusable::Missing`]).
    pub fn unreadable(e: std::io::Error) -> Unusable {
        Unusable::Unreadable(Arc::new(e))
    }

    pub fn corrupt(c: impl Into<Corruption>) -> Unusable {
        Unusable::Corrupt(Arc::new(c.into()))
    }
}

impl PartialEq for Unusable {
    fn eq(&self, other: &Unusable) -> bool {
        use Unusable::*;
        match (self, other) {
            (Missing, Missing) => true,
            (Unreadable(a), Unreadable(b)) => a.kind() == b.kind(),
            (
                Version { found, expected },
                Version {
                    found: f,
                    expected: e,
                },
            ) => (found, expected) == (f, e),
            (Corrupt(a), Corrupt(b)) => a.same_kind(b),
            _ => false,
        }
    }
}

impl Eq for Unusable {}

/// What was wrong inside a stored file that was read whole.
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    #[error(transparent)]
    Postcard(#[from] postcard::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// It decoded, but what it says does not hold together (an index out of range, say): our
    /// own check's words, fixed at the place it fails.
    #[error("{0}")]
    Shape(&'static str),
}

impl Corruption {
    fn same_kind(&self, other: &Corruption) -> bool {
        match (self, other) {
            (Corruption::Shape(a), Corruption::Shape(b)) => a == b,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl From<&'static str> for Corruption {
    fn from(words: &'static str) -> Corruption {
        Corruption::Shape(words)
    }
}

/// The bytes at `path`, at most `max` (a larger file was not written by us and is not read).
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>, Unusable> {
    crate::files::read_bounded_bytes(path, max).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unusable::Missing,
        _ => Unusable::unreadable(e),
    })
}

/// A postcard document whose first field is its `u32` version, decoded when that is
/// `expected`. The version is read first, so another version is named as such even when the
/// rest of it no longer decodes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], expected: u32) -> Result<T, Unusable> {
    let (found, _) = postcard::take_from_bytes::<u32>(bytes).map_err(Unusable::corrupt)?;
    if found != expected {
        return Err(Unusable::Version { found, expected });
    }
    postcard::from_bytes(bytes).map_err(Unusable::corrupt)
}

/// Writes `doc` whole and atomically (a reader sees the old file or the new), readable by this
/// user alone.
pub fn write<T: serde::Serialize>(path: &Path, doc: &T) -> std::io::Result<()> {
    let bytes = postcard::to_stdvec(doc).map_err(std::io::Error::other)?;
    crate::files::write_atomic(path, &bytes, Some(0o600))
}
