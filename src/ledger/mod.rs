//! The ledger's vocabulary on the client side.

pub mod repo_identity;
