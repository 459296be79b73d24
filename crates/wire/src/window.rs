//! The recall window's size: how much of a repository's history one read pages through. The
//! client pages by it, and the ledger bounds a take's candidates by it.

/// Rows per page of a recall read.
pub const PAGE: u64 = 300;
/// Pages one recall reads at most.
pub const MAX_PAGES: u64 = 4;
