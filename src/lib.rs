//! metabob-mcp: a toolkit for container cells that take tasks from a shared findings ledger.
//!
//! The binary is a thin shell over this library; SPEC.md is the contract and names the code
//! it describes as `path@anchor`.

// Output goes through `out` (redaction, a closed pipe), never straight to the streams.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod attachment;
pub mod cell;
pub mod commands;
pub mod config;
pub mod env;
pub mod error;
pub mod gaps;
pub mod git;
pub mod guard;
pub mod index;
pub mod ledger;
pub mod ledger_server;
pub mod mcp;
pub mod net;
pub mod out;
pub mod shapes;
pub mod store;
pub mod trailers;
pub mod util;

/// `metabob-mcp/<version>`, the client name sent in every write's client claim.
pub const CLIENT: &str = concat!("metabob-mcp/", env!("CARGO_PKG_VERSION"));
