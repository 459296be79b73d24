//! metabob-mcp: a toolkit for container cells that take tasks from a shared findings ledger.
//!
//! The binary's own library is the command line and nothing else: each command parses its
//! arguments, calls the crate that owns the behaviour and formats the answer
//! (docs/ARCHITECTURE.md). SPEC.md is the contract and names the code it describes as
//! `path@anchor`.

// Output goes through `out` (redaction, a closed pipe), never straight to the streams.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod commands;
pub mod error;
