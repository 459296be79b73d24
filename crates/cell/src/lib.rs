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

use std::path::PathBuf;

use metabob_git::GitError;
use metabob_net::attachment::ResolveError;
use metabob_process::guard::GuardRefusal;
use metabob_wire::report::Hint;

/// A failure of a cell command, each with its exit code: 2 for the attachment, 1 otherwise.
/// `Display` says what failed and keeps its cause as the `source`; what to do is the [`Hint`].
/// What became of the work ("nothing was written", "the claim … was withdrawn") ends the
/// hint, after the cause's own advice, so a person reads it last, as the line always said it.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    /// The attachment's named cause.
    #[error("{0}")]
    NotAttached(metabob_net::attachment::Cause),
    #[error("git: {0}")]
    Git(#[from] GitError),
    /// The work directory is in no checkout: git's own line, which needs no `git:` before it.
    #[error(transparent)]
    NotACheckout(GitError),
    #[error("the ledger: {0}")]
    Ledger(#[from] ResolveError),
    /// The key itself refused a take (it is read-only): no task can be taken with it. The
    /// ledger's line as it is, since it names the key's scopes.
    #[error(transparent)]
    KeyRefused(ResolveError),
    /// The outgoing guard refused the input: nothing was sent.
    #[error(transparent)]
    Outgoing(#[from] GuardRefusal),
    /// The origin has no form git clones from; nothing was asked of the ledger.
    #[error(transparent)]
    Origin(#[from] metabob_git::BadOrigin),
    /// The finding to record is incomplete or names a file that is no repository path.
    #[error(transparent)]
    Draft(#[from] metabob_wire::record::DraftRefused),
    #[error("no vessel identity")]
    NoVesselIdentity,
    #[error("{} ({flag}) is not empty", .dir.display())]
    NotEmpty { dir: PathBuf, flag: &'static str },
    #[error("{} cannot be read", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} cannot be read ({source})", .path.display())]
    TaskFileUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} was not written by task pull ({source})", .path.display())]
    TaskFileForeign {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("commit {commit} (from {}) is not in this checkout", .file.display())]
    CommitMissing { commit: String, file: PathBuf },
    #[error("origin has no branch {target}; nothing was written")]
    NoTargetBranch { target: String },
    /// A git step that comes before any write failed (the fetch of `finding close`, the
    /// sweep's clone or fetch): nothing was written.
    #[error(transparent)]
    Unwritten(GitError),
    /// The sweep's clone failed before git named the clone itself (the remote's HEAD, say):
    /// nothing was written.
    #[error("cloning {origin} failed")]
    CloneFailed {
        /// Credentials masked.
        origin: String,
        #[source]
        source: GitError,
    },
    #[error(
        "the clone of {origin} in {} does not open as a repository; nothing was written",
        .dir.display()
    )]
    CloneUnopenable { origin: String, dir: PathBuf },
    #[error("cannot make a scratch directory under {} for the clone", .base.display())]
    Scratch {
        base: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the sweep's cache {} {mismatch}", .dir.display())]
    Cache {
        dir: PathBuf,
        mismatch: finding_close::sweep::CacheMismatch,
    },
    /// A step run on a task of its own ended without an answer (it panicked, or the runtime
    /// is shutting down).
    #[error("{what} stopped")]
    Stopped {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("the ledger has no task {concept_id}")]
    NoSuchTask { concept_id: String },
    #[error("no task {id} in the ledger's newest findings")]
    NotInWindow { id: String },
    #[error("the ledger handed out a task of another repository; its claim was withdrawn")]
    ForeignTask,
    /// The ledger refused a claim; only the key itself can (it is read-only). Its own words.
    #[error("{reason}")]
    ClaimRefused { reason: String },
    /// Setting up a task this cell holds failed for a cause of this cell's own; its claim was
    /// withdrawn.
    #[error("{source}")]
    SetUp {
        task: String,
        #[source]
        source: task_pull::SetupError,
    },
}

/// The advice, then what became of the work.
fn and_then(hint: Option<String>, became: String) -> Option<String> {
    Some(match hint {
        Some(hint) => metabob_wire::report::join(hint, Some(&became)),
        None => became,
    })
}

impl Hint for CellError {
    fn hint(&self) -> Option<String> {
        let unwritten = || "nothing was written".to_string();
        match self {
            CellError::Git(e) | CellError::NotACheckout(e) => e.hint(),
            CellError::Unwritten(e) | CellError::CloneFailed { source: e, .. } => {
                and_then(e.hint(), unwritten())
            }
            CellError::Ledger(e) | CellError::KeyRefused(e) => e.hint(),
            CellError::NotAttached(cause) => cause.hint(),
            CellError::Outgoing(e) => e.hint(),
            CellError::Origin(e) => e.hint(),
            CellError::SetUp { task, source } => {
                and_then(source.hint(), format!("the claim on {task} was withdrawn"))
            }
            CellError::NoVesselIdentity => Some("set VESSEL_ID or an API key".into()),
            CellError::NotEmpty { flag, .. } => Some(format!(
                "a cell starts from empty task and work directories: pass {flag} with an empty \
                 or missing directory"
            )),
            CellError::TaskFileUnreadable { .. } => Some("run `task pull` first".into()),
            CellError::TaskFileForeign { .. } => Some("pull a task again".into()),
            CellError::Scratch { .. } => Some("set TMPDIR to a writable directory".into()),
            CellError::Cache { .. } => Some(
                "give an empty directory, or the one an earlier sweep of this origin cloned into"
                    .into(),
            ),
            CellError::NotInWindow { .. } => Some("pass its concept id instead".into()),
            // A refused draft and the rest say all they have in their line.
            CellError::Draft(_)
            | CellError::Unreadable { .. }
            | CellError::CommitMissing { .. }
            | CellError::NoTargetBranch { .. }
            | CellError::CloneUnopenable { .. }
            | CellError::Stopped { .. }
            | CellError::NoSuchTask { .. }
            | CellError::ForeignTask
            | CellError::ClaimRefused { .. } => None,
        }
    }
}

impl CellError {
    /// Whether the ledger is away for now, which waiting may clear (anchor: is_outage): it did
    /// not answer, or answered that it is unavailable. A final cause (no configuration, a
    /// rejected key, a refusing proxy, an answer too large to read) is not an outage.
    pub fn is_outage(&self) -> bool {
        use metabob_net::NetCause;
        use metabob_net::attachment::Cause;
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
