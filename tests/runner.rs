//! The one integration-test binary. Each module drives the real binary against real parts.

// The house lints deny these outside tests; here a failed step is the test failing.
#![allow(clippy::unwrap_used, clippy::panic)]

mod agent_queue;
mod alerts;
mod attach;
mod board;
mod cell;
mod concepts;
mod container;
mod depends;
mod depends_model;
mod entrypoint;
mod gaps;
mod git;
mod git_https;
mod goals;
mod goals_ledger;
mod guard;
mod harness;
mod hostile;
mod inspect;
mod k8s;
mod layers;
mod ledger;
mod loopback;
mod mcp;
mod modules;
mod net;
mod newcomer;
mod output;
mod parking;
mod quickstart;
mod readme;
mod recipes;
mod refs;
mod repo_paths;
mod soak;
mod spec;
mod support;
mod take;
mod verbose;
