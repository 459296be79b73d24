//! metabob-mcp: a toolkit for container cells that take tasks from a shared findings ledger.
//!
//! The binary is a thin shell over this library; SPEC.md is the contract and names the code
//! it describes as `path@anchor`.

pub mod attachment;
pub mod cell;
#[allow(clippy::print_stdout)] // the command surface is what prints results
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
pub mod shapes;
pub mod store;
pub mod trailers;
pub mod util;

/// `metabob-mcp/<version>`, the client name sent in every write's client claim.
pub const CLIENT: &str = concat!("metabob-mcp/", env!("CARGO_PKG_VERSION"));
