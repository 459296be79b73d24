//! metabob-wire: the ledger's vocabulary, the words client and server both speak: what a row
//! of the ledger says and how it is read, written and bounded. Anything that reads or writes a
//! ledger row, or a reader that only wants to understand one, links this crate alone.
//!
//! Owns: findings and their ids' form (`finding`), recording a finding (`record`), verdicts,
//! claims and the one holder rule (`claims::holder`), row bounds (`row::RowTexts`) and the
//! per-field caps (`fields`), header blocks, shapes, commit trailers, ref validation
//! (`refname`), the board's typed model, dependencies and parking, task actions, repository
//! identity from a URL, error rendering (`report`), and the pure text helpers they share
//! (`text`: RFC 3339 times, durations, hex, one safe line, wire names).
//!
//! Must not depend on: the network (no sockets, no HTTP client), a store (no SQLite, no
//! PostgreSQL), git, tree-sitter, MCP, or any crate of ours. Nor does it hold a process rule:
//! no logging setup, no randomness, no clock, no files of its own (those are
//! `metabob-process`'s). Everything here is a pure reading of text and values, which is what
//! lets the client, the server and any other reader link it.

// Nothing here prints: output is the process's, through `metabob_process::out`.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod board;
pub mod claims;
pub mod depends;
pub mod fields;
pub mod finding;
pub mod header;
pub mod parking;
pub mod record;
pub mod refname;
pub mod related;
pub mod repo_identity;
pub mod repo_path;
pub mod report;
pub mod row;
pub mod shapes;
pub mod task_action;
pub mod text;
pub mod trailers;
pub mod verdict;
pub mod window;

/// `metabob-mcp/<version>`, the client name sent in every write's client claim.
pub const CLIENT: &str = concat!("metabob-mcp/", env!("CARGO_PKG_VERSION"));
