//! The one integration-test binary. Each module drives the real binary against real parts.

mod attach;
mod cell;
mod container;
mod git;
mod guard;
mod ledger;
mod mcp;
mod net;
mod refs;
mod spec;
mod support;
