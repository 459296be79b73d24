//! Which directory the server works on (SPEC.md §Workspace): an `init_workspace` path, else
//! `WORKSPACE_PATH`, else the client's first `file:` root, else the launch directory unless it
//! is the plugin's own folder. One owner decides; tools ask.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use metabob_process::env::Env;

/// How long a tool call waits for the client's first roots answer.
pub const ROOTS_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    InitWorkspace,
    EnvVar,
    Root,
    LaunchDir,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::InitWorkspace => "init_workspace",
            Source::EnvVar => "WORKSPACE_PATH",
            Source::Root => "the client's first root",
            Source::LaunchDir => "the launch directory",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    pub path: PathBuf,
    pub source: Source,
}

/// The client's roots as far as this process knows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Roots {
    /// The client declared no roots capability, or there is no client (`tool call`).
    NotAsked,
    Pending,
    /// The `file:` roots, by real path, in the client's order.
    Answered(Vec<PathBuf>),
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(
        "workspace_undetermined: the server runs in the plugin's folder ({}) and no workspace is \
         named",
        launch.display()
    )]
    Undetermined { launch: PathBuf },
    /// `given` is the `workspace_path` as the caller wrote it.
    #[error("workspace_undetermined: {given} is the plugin's folder or inside it, not a project")]
    PluginPath { given: String },
    #[error("workspace_path {given} is not an existing directory; nothing was bound")]
    NotADirectory { given: String },
}

impl metabob_wire::report::Hint for WorkspaceError {
    fn hint(&self) -> Option<String> {
        let call = "call init_workspace with the project's absolute workspace_path";
        match self {
            WorkspaceError::Undetermined { .. } => Some(format!("{call} first")),
            WorkspaceError::PluginPath { .. } => Some(call.into()),
            WorkspaceError::NotADirectory { .. } => None,
        }
    }
}

pub struct Workspace {
    env_path: Option<PathBuf>,
    launch: PathBuf,
    plugin_root: Option<PathBuf>,
    explicit: Mutex<Option<PathBuf>>,
    roots: watch::Sender<Roots>,
}

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `file:` URIs to paths; other schemes are not workspaces.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    let mut bytes = Vec::with_capacity(path.len());
    let mut it = path.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hex: Vec<u8> = it.by_ref().take(2).collect();
            let v = std::str::from_utf8(&hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())?;
            bytes.push(v);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).ok().map(PathBuf::from)
}

impl Workspace {
    pub fn new(env: &Env) -> Workspace {
        Workspace {
            env_path: env
                .get("WORKSPACE_PATH")
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from),
            launch: real(env.cwd()),
            plugin_root: env
                .get("PLUGIN_ROOT")
                .filter(|v| !v.trim().is_empty())
                .map(|p| real(Path::new(p))),
            explicit: Mutex::new(None),
            roots: watch::channel(Roots::NotAsked).0,
        }
    }

    pub fn launch_dir(&self) -> &Path {
        &self.launch
    }

    fn in_plugin(&self, p: &Path) -> bool {
        self.plugin_root.as_ref().is_some_and(|r| p.starts_with(r))
    }

    /// Binds an `init_workspace` path for the rest of the session (anchor: bind_workspace).
    pub fn bind(&self, given: &str) -> Result<PathBuf, WorkspaceError> {
        let p = Path::new(given);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.launch.join(p)
        };
        if !p.is_dir() {
            return Err(WorkspaceError::NotADirectory {
                given: given.to_string(),
            });
        }
        if self.in_plugin(&real(&p)) {
            return Err(WorkspaceError::PluginPath {
                given: given.to_string(),
            });
        }
        *self.explicit.lock().expect("no panic holds the lock") = Some(p.clone());
        Ok(p)
    }

    pub fn set_roots(&self, roots: Roots) {
        self.roots.send_replace(roots);
    }

    pub fn roots(&self) -> Roots {
        self.roots.borrow().clone()
    }

    /// Waits for a pending roots answer, at most [`ROOTS_WAIT`].
    pub async fn settle_roots(&self) {
        let mut rx = self.roots.subscribe();
        let _ =
            tokio::time::timeout(ROOTS_WAIT, rx.wait_for(|r| !matches!(r, Roots::Pending))).await;
    }

    /// The workspace now (anchor: decide_workspace).
    pub fn decide(&self) -> Result<Decided, WorkspaceError> {
        let pick = |path: PathBuf, source| Ok(Decided { path, source });
        if let Some(p) = self
            .explicit
            .lock()
            .expect("no panic holds the lock")
            .clone()
        {
            return pick(p, Source::InitWorkspace);
        }
        if let Some(p) = &self.env_path {
            return pick(p.clone(), Source::EnvVar);
        }
        if let Roots::Answered(roots) = &*self.roots.borrow()
            && let Some(first) = roots.first()
        {
            return pick(first.clone(), Source::Root);
        }
        if self.in_plugin(&self.launch) {
            return Err(WorkspaceError::Undetermined {
                launch: self.launch.clone(),
            });
        }
        pick(self.launch.clone(), Source::LaunchDir)
    }

    /// Takes a client's `roots/list` answer: `file:` roots by real path.
    pub fn answer_roots(&self, uris: &[String]) {
        let roots = uris
            .iter()
            .filter_map(|u| file_uri_path(u))
            .map(|p| real(&p))
            .collect();
        self.set_roots(Roots::Answered(roots));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)], cwd: &Path) -> Env {
        Env::new(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            cwd,
        )
    }

    #[test]
    fn the_order_is_init_then_env_then_root_then_launch() {
        let d = tempfile::tempdir().expect("tempdir");
        let (a, b, c) = (d.path().join("a"), d.path().join("b"), d.path().join("c"));
        for p in [&a, &b, &c] {
            std::fs::create_dir(p).expect("mkdir");
        }
        let w = Workspace::new(&env(&[], &a));
        assert_eq!(w.decide().expect("decided").source, Source::LaunchDir);
        w.answer_roots(&[
            "https://example.com/x".into(),
            format!("file://{}", b.display()),
        ]);
        assert_eq!(w.decide().expect("decided").path, real(&b));
        w.bind(c.to_str().expect("utf-8")).expect("bound");
        assert_eq!(w.decide().expect("decided").source, Source::InitWorkspace);

        let w = Workspace::new(&env(&[("WORKSPACE_PATH", "/somewhere")], &a));
        w.answer_roots(&[format!("file://{}", b.display())]);
        assert_eq!(w.decide().expect("decided").source, Source::EnvVar);
    }

    #[test]
    fn the_plugin_folder_is_no_workspace() {
        let d = tempfile::tempdir().expect("tempdir");
        let plugin = d.path().join("plugin");
        std::fs::create_dir_all(plugin.join("sub")).expect("mkdir");
        let w = Workspace::new(&env(
            &[("PLUGIN_ROOT", plugin.to_str().expect("utf-8"))],
            &plugin.join("sub"),
        ));
        assert!(matches!(
            w.decide(),
            Err(WorkspaceError::Undetermined { .. })
        ));
        assert!(matches!(
            w.bind("."),
            Err(WorkspaceError::PluginPath { .. })
        ));
        assert!(matches!(
            w.bind("/no/such/dir"),
            Err(WorkspaceError::NotADirectory { .. })
        ));
        w.bind(d.path().to_str().expect("utf-8")).expect("bound");
        assert_eq!(w.decide().expect("decided").path, d.path());
    }

    #[test]
    fn file_uris_decode() {
        assert_eq!(
            file_uri_path("file:///a%20b/c"),
            Some(PathBuf::from("/a b/c"))
        );
        assert_eq!(file_uri_path("vscode://x"), None);
    }
}
