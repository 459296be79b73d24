//! metabob-cell: what a cell does. The integration policy and trust list, task pull, finding
//! close and record, renew/release/reopen, the fix location, and the client's reads and writes
//! of ledger rows (`ledger`).
//!
//! Must not depend on: the ledger server, the MCP server, rmcp or PostgreSQL: it reaches a
//! ledger only through metabob-net's attachment (tests/layers.rs holds this).

pub mod cell_run;
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
    /// The attachment's named cause.
    #[error("{0}")]
    NotAttached(metabob_net::attachment::Cause),
    #[error("{0}")]
    Failed(String),
    #[error("git: {0}")]
    Git(#[from] metabob_git::GitError),
    #[error("the ledger: {0}")]
    Ledger(#[from] metabob_net::attachment::ResolveError),
    /// The outgoing guard refused the input: nothing was sent.
    #[error(transparent)]
    Outgoing(#[from] metabob_process::guard::GuardRefusal),
}

impl CellError {
    /// Whether the ledger is away for now, which waiting may clear (anchor: is_outage): it did
    /// not answer, or answered that it is unavailable. A final cause (no configuration, a
    /// rejected key, a refusing proxy, an answer too large to read) is not an outage.
    pub fn is_outage(&self) -> bool {
        use metabob_net::NetCause;
        use metabob_net::attachment::{Cause, ResolveError};
        let passing = |c: &Cause| {
            c.is_transient() && !matches!(c.net(), Some(NetCause::ResponseTooLarge { .. }))
        };
        match self {
            CellError::NotAttached(cause) => passing(cause),
            CellError::Ledger(ResolveError::Refused(gate)) => passing(&gate.cause),
            CellError::Ledger(ResolveError::Anchor { net, .. }) => {
                !matches!(net, NetCause::ResponseTooLarge { .. })
            }
            CellError::Ledger(e) => e.is_unavailable(),
            _ => false,
        }
    }

    /// Whether the command failed because it is not attached, or no longer (exit 2).
    pub fn is_not_attached(&self) -> bool {
        match self {
            CellError::NotAttached(_) => true,
            CellError::Ledger(e) => e.is_detachment() || e.is_unavailable(),
            _ => false,
        }
    }
}

/// Settles configuration and runs one attachment attempt, as every one-shot command does.
pub async fn attach_once(
    env: &mut metabob_process::env::Env,
    workspace: &std::path::Path,
) -> Result<metabob_net::attachment::Attachment, CellError> {
    let cfg = metabob_net::config::load(env);
    let net = metabob_net::NetClient::from_env(env);
    let claim = metabob_net::attachment::ClientClaim::from_env(env, workspace);
    let guard = metabob_process::guard::Guard::new(env, Some(workspace));
    let att = metabob_net::attachment::Attachment::new(cfg, net, claim, guard);
    match att.attempt().await.cause {
        Some(cause) => Err(CellError::NotAttached(cause)),
        None => Ok(att),
    }
}
