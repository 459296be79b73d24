//! metabob-process: the house rules every process of ours keeps, whichever command or server it
//! runs. The vocabulary it works on is `metabob-wire`'s; this crate holds what a running process
//! does with it.
//!
//! Owns: the environment snapshot taken once at start (`env`), the wall clock (`clock`), the
//! one writer of output and of log lines, redacted on the way out (`out` and its `outln!`,
//! `out!`, `errln!`, `err!` macros, `out::LogWriter`), credential redaction and the outgoing-text
//! guard (`guard`), randomness for ids, session ids and temp names (`random`), atomic, private
//! and bounded file access (`files`), and the versioned files this program keeps for itself
//! (`stored`).
//!
//! Must not depend on: the network (no sockets, no HTTP client), a store (no SQLite, no
//! PostgreSQL), git, tree-sitter or MCP, and of our crates only `metabob-wire`. Every layer
//! links it, client and server alike, so it may reach nothing a layer could not.

// Output goes through `out` (redaction, a closed pipe), never straight to the streams.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod clock;
pub mod env;
pub mod files;
pub mod guard;
pub mod out;
pub mod random;
pub mod stored;
