//! The one integration-test binary. Each module drives the real binary against real parts.

mod net;
mod support;
mod spec;
mod attach;
