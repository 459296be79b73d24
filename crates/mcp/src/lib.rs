//! The MCP server (SPEC.md §The MCP server): its stdio surface, the workspace it works on, the tool
//! registry and the call log. Tools adapt; the ledger, index, git and store modules decide.

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
