//! Files this program keeps for itself (the code index, the co-change index): read bounded,
//! versioned, and why one was not used as it was. One owner for what every such cache shares.

use std::path::Path;

use serde::de::DeserializeOwned;

/// Why a stored file was not used: the causes every cache shares.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("missing")]
    Missing,
    #[error("unreadable({0})")]
    Unreadable(String),
    #[error("version({found}, {expected})")]
    Version { found: u32, expected: u32 },
    #[error("corrupt({0})")]
    Corrupt(String),
}

/// The bytes at `path`, at most `max` (a larger file was not written by us and is not read).
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>, Unusable> {
    crate::files::read_bounded_bytes(path, max).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unusable::Missing,
        _ => Unusable::Unreadable(e.to_string()),
    })
}

/// A postcard document whose first field is its `u32` version, decoded when that is
/// `expected`. The version is read first, so another version is named as such even when the
/// rest of it no longer decodes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], expected: u32) -> Result<T, Unusable> {
    let corrupt = |e: postcard::Error| Unusable::Corrupt(e.to_string());
    let (found, _) = postcard::take_from_bytes::<u32>(bytes).map_err(corrupt)?;
    if found != expected {
        return Err(Unusable::Version { found, expected });
    }
    postcard::from_bytes(bytes).map_err(corrupt)
}

/// Writes `doc` whole and atomically (a reader sees the old file or the new), readable by this
/// user alone.
pub fn write<T: serde::Serialize>(path: &Path, doc: &T) -> std::io::Result<()> {
    let bytes = postcard::to_stdvec(doc).map_err(std::io::Error::other)?;
    crate::files::write_atomic(path, &bytes, Some(0o600))
}
