//! Where a workspace's paths sit in the gap store (SPEC.md §path_activity): the store names files
//! `repos/<vessel>/<path>`, relative to the super-repo. Paths are mapped here, on this machine, and
//! never sent.

use std::path::{Path, PathBuf};

use metabob_git::Repo;
use metabob_wire::repo_identity::{last_segment, normalize_remote_url};

/// How this checkout relates to the gap store's names (anchor: path_mapper).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A `repos/` directory at the top of the tree: paths map relative to the root.
    SuperRepo { root: PathBuf },
    /// A vessel's own checkout, named by its origin's last path segment.
    Vessel { root: PathBuf, name: String },
    /// Neither: only paths already in `repos/…` form can be checked.
    Unmapped { root: PathBuf },
}

/// A path the agent gave and what the store calls it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub given: String,
    /// `None` when this checkout's paths do not map and the path was not in `repos/…` form.
    pub store: Option<String>,
}

impl Layout {
    pub fn for_workspace(workspace: &Path) -> Layout {
        let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        let repo = Repo::discover(&ws).ok().flatten();
        let root = repo
            .as_ref()
            .and_then(Repo::workdir)
            .map(|w| std::fs::canonicalize(&w).unwrap_or(w))
            .unwrap_or_else(|| ws.clone());
        if root.join("repos").is_dir() {
            return Layout::SuperRepo { root };
        }
        match repo.and_then(|r| r.remote_url("origin")) {
            Some(url) => Layout::Vessel {
                name: last_segment(&normalize_remote_url(&url)).to_string(),
                root,
            },
            None => Layout::Unmapped { root },
        }
    }

    fn root(&self) -> &Path {
        match self {
            Layout::SuperRepo { root }
            | Layout::Vessel { root, .. }
            | Layout::Unmapped { root } => root,
        }
    }

    /// The store's name for `given`, relative to `workspace` (or absolute), or already in the
    /// store's `repos/<vessel>/<path>` form.
    pub fn map(&self, workspace: &Path, given: &str) -> Mapped {
        let cleaned = given.trim().replace('\\', "/");
        let cleaned = cleaned.trim_start_matches("./").trim_end_matches('/');
        let store = if cleaned.starts_with("repos/") {
            Some(cleaned.to_string())
        } else {
            let abs = workspace.join(cleaned);
            let abs = std::fs::canonicalize(&abs).unwrap_or(abs);
            let rel = abs
                .strip_prefix(self.root())
                .ok()
                .map(|r| r.to_string_lossy().replace('\\', "/"))
                .filter(|r| !r.is_empty() && !r.starts_with(".."));
            match (self, rel) {
                (Layout::SuperRepo { .. }, Some(rel)) => Some(rel),
                (Layout::Vessel { name, .. }, Some(rel)) => Some(format!("repos/{name}/{rel}")),
                _ => None,
            }
        };
        Mapped {
            given: given.to_string(),
            store,
        }
    }

    /// The vessel a store path belongs to: `repos/<vessel>/…`.
    pub fn vessel_of(store_path: &str) -> Option<&str> {
        store_path
            .strip_prefix("repos/")?
            .split('/')
            .next()
            .filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_layout_maps_as_the_store_names() {
        let root = PathBuf::from("/w");
        let vessel = Layout::Vessel {
            root: root.clone(),
            name: "app".into(),
        };
        assert_eq!(
            vessel.map(&root, "./src/a.py").store.as_deref(),
            Some("repos/app/src/a.py")
        );
        assert_eq!(
            vessel.map(&root, "/w/src/").store.as_deref(),
            Some("repos/app/src")
        );
        assert_eq!(vessel.map(&root, "/elsewhere/a.py").store, None);
        let sup = Layout::SuperRepo { root: root.clone() };
        assert_eq!(
            sup.map(&root.join("repos"), "app/a.py").store.as_deref(),
            Some("repos/app/a.py")
        );
        assert_eq!(
            sup.map(&root, "docs/x.md").store.as_deref(),
            Some("docs/x.md")
        );
        let none = Layout::Unmapped { root: root.clone() };
        assert_eq!(none.map(&root, "src/a.py").store, None);
        assert_eq!(
            none.map(&root, "repos/app/a.py").store.as_deref(),
            Some("repos/app/a.py")
        );
        assert_eq!(Layout::vessel_of("repos/app/a.py"), Some("app"));
        assert_eq!(Layout::vessel_of("docs/x"), None);
    }
}
