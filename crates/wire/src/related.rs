//! `findingsOnFiles` (SPEC.md §Related findings): the read that gives `task pull` the open
//! findings on a task's files without the recall window. The ledger answers it from its text
//! index, one bounded query per file, so its cost follows the files asked about, not the
//! ledger's history.

/// The shape's name (anchor: RELATED_SHAPE).
pub const RELATED_SHAPE: &str = "findingsOnFiles";

/// The most files one request names: a task names a handful; more is refused.
pub const MAX_RELATED_FILES: usize = 64;

/// The most findings one answer carries, the newest first: what context.md lists.
pub const MAX_RELATED: usize = 50;

/// The most findings the ledger looks at for one file, the newest that mention it, before it
/// stops: its bound on the work one request can cause, whatever the org wrote.
pub const MAX_SCANNED_PER_FILE: i64 = 200;
