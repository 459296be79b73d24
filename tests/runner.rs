//! The one integration-test binary. Each module drives the real binary against real parts.

mod ledger;
mod net;
mod support;
mod spec;
mod attach;
