//! metabob-mcp-server: the MCP server (SPEC.md §The MCP server): its stdio and HTTP surfaces,
//! the workspace it works on, the tool registry and the call log, the loopback resolver, the
//! local findings store and the agent queue. Tools adapt; the cell, wire, index and git crates
//! decide.
//!
//! Must not depend on: the ledger server or PostgreSQL: it reaches a ledger only over HTTP
//! (tests/layers.rs holds this).

pub mod agent_queue;
pub mod calllog;
pub mod ctx;
pub mod framing;
pub mod gaps;
pub mod http;
pub mod instructions;
pub mod loopback;
pub mod schema;
pub mod server;
pub mod store;
pub mod tools;
pub mod workspace;

pub use ctx::Ctx;
