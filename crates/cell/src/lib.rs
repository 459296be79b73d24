//! metabob-cell: what a cell does. The integration policy and trust list, task pull, finding
//! close and record, renew/release/reopen, the fix location, and the client's reads and writes
//! of ledger rows (`ledger`).
//!
//! Must not depend on: the ledger server, the MCP server, rmcp or PostgreSQL: it reaches a
//! ledger only through metabob-net's attachment (tests/layers.rs holds this).

pub mod finding_close;
pub mod fix_location;
pub mod ledger;
pub mod policy;
pub mod record;
pub mod task_claim;
pub mod task_file;
pub mod task_pull;

/// A failure of a cell command, each with its exit code: 2 for the attachment, 1 otherwise.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// The attachment's cause line.
    #[error("{0}")]
    NotAttached(String),
    #[error("{0}")]
    Failed(String),
    #[error("git: {0}")]
    Git(#[from] metabob_git::GitError),
    #[error("the ledger: {0}")]
    Ledger(#[from] metabob_net::attachment::ResolveError),
    /// The outgoing guard refused the input: nothing was sent.
    #[error(transparent)]
    Outgoing(#[from] metabob_wire::guard::GuardRefusal),
}

/// Settles configuration and runs one attachment attempt, as every one-shot command does.
pub async fn attach_once(
    env: &mut metabob_wire::env::Env,
    workspace: &std::path::Path,
) -> Result<metabob_net::attachment::Attachment, CellError> {
    let cfg = metabob_net::config::load(env);
    let net = metabob_net::NetClient::from_env(env);
    let claim = metabob_net::attachment::ClientClaim::from_env(env, workspace);
    let guard = metabob_wire::guard::Guard::new(env, Some(workspace));
    let att = metabob_net::attachment::Attachment::new(cfg, net, claim, guard);
    match att.attempt().await.cause {
        Some(cause) => Err(CellError::NotAttached(cause.to_string())),
        None => Ok(att),
    }
}
