//! The one integration-test binary. Each module drives the real binary against real parts.

mod attach;
mod git;
mod ledger;
mod net;
mod spec;
mod support;
