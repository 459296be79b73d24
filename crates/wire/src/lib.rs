//! metabob-wire: the ledger's vocabulary, shared by the cell's client side and the embedded
//! ledger, and the house rules every layer keeps.
//!
//! Owns: findings, verdicts and the one holder rule (`claims::holder`), row bounds
//! (`row::RowTexts`), header blocks, shapes, commit trailers, ref validation (`refname`), the
//! board's typed model, repository identity from a URL, and the process-wide rules under them:
//! the environment snapshot (`env`), the one writer of output (`out`), credential redaction and
//! the outgoing-text guard (`guard`).
//!
//! Must not depend on: the network (no sockets, no HTTP client), a store (no SQLite, no
//! PostgreSQL), git, tree-sitter or MCP. Everything here is a pure reading of text and values,
//! plus bounded file reads; that is what lets both the client and the server link it.

// Output goes through `out` (redaction, a closed pipe), never straight to the streams.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod board;
pub mod claims;
pub mod depends;
pub mod env;
pub mod finding;
pub mod guard;
pub mod header;
pub mod out;
pub mod parking;
pub mod record;
pub mod refname;
pub mod related;
pub mod repo_identity;
pub mod repo_path;
pub mod report;
pub mod row;
pub mod shapes;
pub mod stored;
pub mod task_action;
pub mod trailers;
pub mod util;
pub mod verdict;
pub mod window;

/// `metabob-mcp/<version>`, the client name sent in every write's client claim.
pub const CLIENT: &str = concat!("metabob-mcp/", env!("CARGO_PKG_VERSION"));
