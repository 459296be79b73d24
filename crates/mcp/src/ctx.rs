//! What every tool call shares: the workspace, the identity derived once, the local store, the
//! code graph and the call log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::agent_queue::{Sidecar, sidecar_path};
use crate::store::{Store, store_path};
use metabob_index::Index;
use metabob_net::attachment::{Attachment, ClientClaim, vessel_id};
use metabob_process::env::Env;

use super::calllog::CallLog;
use super::workspace::{Decided, Workspace, WorkspaceError};

/// The identity and attachment, derived once from the first decided workspace and kept for the
/// life of the process (anchor: session_identity).
pub struct Session {
    pub att: Attachment,
    pub vessel: Option<String>,
    /// The workspace the identity came from.
    pub from: PathBuf,
    /// The gap store's whole-store read, shared by every call of this attachment.
    pub gaps: crate::gaps::GapCache,
}

/// What a tool call runs with once the workspace is decided (anchor: Here): the decision and
/// the session derived from it, handed to every handler by the call path.
pub struct Here<'a> {
    pub decided: Decided,
    pub session: &'a Session,
}

impl Here<'_> {
    pub fn ws(&self) -> &Path {
        &self.decided.path
    }
}

pub struct Ctx {
    pub env: Env,
    pub workspace: Workspace,
    session: OnceLock<Session>,
    store: OnceLock<Result<Arc<Store>, String>>,
    sidecar: OnceLock<Result<Arc<Sidecar>, String>>,
    /// The code graph of the last indexed root; parsing runs on a blocking thread.
    pub index: Arc<Mutex<Option<Index>>>,
    /// `local_index_unavailable(…)` once a grammar failed to load; it will not load later.
    pub index_unavailable: OnceLock<String>,
    pub call_log: Option<CallLog>,
    session_id: String,
    /// The long-running server keeps the attachment alive in the background; `tool call`
    /// attaches on demand.
    long_running: bool,
}

impl Ctx {
    pub fn new(mut env: Env, long_running: bool) -> Ctx {
        // One session id for the claim on writes and the call log alike.
        env.set_default("SESSION_ID", metabob_process::random::uuid_v4());
        Ctx {
            session_id: env.get("SESSION_ID").unwrap_or_default().to_string(),
            workspace: Workspace::new(&env),
            call_log: CallLog::from_env(&env),
            env,
            session: OnceLock::new(),
            store: OnceLock::new(),
            sidecar: OnceLock::new(),
            index: Arc::new(Mutex::new(None)),
            index_unavailable: OnceLock::new(),
            long_running,
        }
    }

    /// The decided workspace and its session, deriving the identity on the first decision.
    pub fn here(&self) -> Result<Here<'_>, WorkspaceError> {
        let decided = self.workspace.decide()?;
        let session = self.session_for(&decided.path);
        Ok(Here { decided, session })
    }

    fn session_for(&self, workspace: &Path) -> &Session {
        self.session.get_or_init(|| {
            let mut env = self.env.clone();
            let cfg = metabob_net::config::load(&mut env);
            let net = metabob_net::NetClient::from_env(&env);
            let claim = ClientClaim::from_env(&env, workspace);
            let guard = metabob_process::guard::Guard::new(&env, Some(workspace));
            let att = Attachment::new(cfg, net, claim, guard);
            let vessel = vessel_id(&env, workspace);
            if self.long_running {
                att.spawn_background();
                // A prior session's undelivered answers go out once the identity is known.
                super::tools::agent::spawn_reconcile(&self.env, &att, vessel.as_deref());
            }
            Session {
                att,
                vessel,
                from: workspace.to_path_buf(),
                gaps: crate::gaps::GapCache::new(&env),
            }
        })
    }

    /// The session once a call derived it, without deciding the workspace (the resolver's
    /// `/health` and key check read it; they must not bind the identity early).
    pub fn session(&self) -> Option<&Session> {
        self.session.get()
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The local store, opened on first use; the error line when it cannot open.
    pub fn store(&self) -> Result<Arc<Store>, String> {
        self.store
            .get_or_init(|| {
                let path = store_path(&self.env).ok_or_else(|| NO_STORE.to_string())?;
                Store::open(&path)
                    .map(Arc::new)
                    .map_err(|e| metabob_wire::report::with_hint(&e))
            })
            .clone()
    }

    /// The local store for a question: `None` while no store file exists (nothing was ever
    /// recorded), so that a read neither creates one nor pays for opening SQLite.
    pub fn store_to_read(&self) -> Result<Option<Arc<Store>>, String> {
        if self.store.get().is_none() {
            let path = store_path(&self.env).ok_or_else(|| NO_STORE.to_string())?;
            if !path.exists() {
                return Ok(None);
            }
        }
        self.store().map(Some)
    }

    /// The agent-resolver queue, opened on first use; the error line when it cannot open.
    pub fn sidecar(&self) -> Result<Arc<Sidecar>, String> {
        self.sidecar
            .get_or_init(|| {
                let path = sidecar_path(&self.env).ok_or_else(|| {
                    "the agent queue is unavailable: no HOME and no METABOB_SIDECAR".to_string()
                })?;
                Sidecar::open(&path)
                    .map(Arc::new)
                    .map_err(|e| metabob_wire::report::with_hint(&e))
            })
            .clone()
    }

    /// Where the persisted code index of `workspace` lives: keyed by the workspace id. The
    /// version-2 JSON index was `<id>.json` beside it; reading the index migrates that file.
    pub fn index_cache_path(&self, workspace: &Path) -> Option<PathBuf> {
        self.cache_path("index", workspace, "bin")
    }

    /// Where the persisted co-change index of `workspace`'s history lives, beside its code
    /// index.
    pub fn cochange_cache_path(&self, workspace: &Path) -> Option<PathBuf> {
        self.cache_path("cochange", workspace, "bin")
    }

    fn cache_path(&self, kind: &str, workspace: &Path, ext: &str) -> Option<PathBuf> {
        let base = match (
            self.env.get("METABOB_CACHE_DIR"),
            self.env.get("XDG_CACHE_HOME"),
        ) {
            (Some(d), _) => PathBuf::from(d),
            (None, Some(x)) if !x.is_empty() => Path::new(x).join("metabob-mcp"),
            _ => self.env.home()?.join(".cache").join("metabob-mcp"),
        };
        Some(
            base.join(kind)
                .join(format!("{}.{ext}", workspace_id(workspace))),
        )
    }
}

/// A workspace's id: a hash of its path, so two checkouts never share a cache entry.
const NO_STORE: &str = "the local store is unavailable: no HOME and no METABOB_STORE";

pub fn workspace_id(workspace: &Path) -> String {
    metabob_wire::text::sha256_hex(workspace.display().to_string().as_bytes())[..16].to_string()
}
