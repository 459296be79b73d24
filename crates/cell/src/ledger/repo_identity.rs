//! The client's half of `repo_identity`: what it does over the attachment. The vocabulary it speaks is
//! `metabob_wire::repo_identity`'s, which callers import from there: one path per item.

use metabob_wire::repo_identity::{Aliases, VesselDir, normalize_remote_url};
use std::path::{Path, PathBuf};

use metabob_git::Repo;

/// The identity of the repository a workspace is in: origin's normalized URL, plus `/` and the
/// lowercased subpath when the workspace sits below the work tree's root; without an origin
/// (not a repository, no origin remote) the workspace's basename.
pub fn repo_identity(workspace: &Path) -> String {
    let workspace = canonical(workspace);
    if let Ok(Some(repo)) = Repo::discover(&workspace)
        && let Some(url) = repo.remote_url("origin")
    {
        let mut id = normalize_remote_url(&url);
        if let Some(root) = repo.workdir().map(|w| canonical(&w))
            && let Ok(sub) = workspace.strip_prefix(&root)
        {
            let sub: Vec<String> = sub
                .components()
                .map(|c| c.as_os_str().to_string_lossy().to_lowercase())
                .collect();
            if !sub.is_empty() {
                id.push('/');
                id.push_str(&sub.join("/"));
            }
        }
        return id;
    }
    basename(&workspace)
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn basename(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// Which findings belong to the repository a workspace is in, from its checkout's layout.
pub fn aliases_for_workspace(workspace: &Path) -> Aliases {
    let identity = repo_identity(workspace);
    let workspace = canonical(workspace);
    let root = match Repo::discover(&workspace) {
        Ok(Some(repo)) => repo.workdir().map(|w| canonical(&w)),
        _ => None,
    }
    .unwrap_or_else(|| workspace.clone());
    let repos = root.join("repos");
    let vessels = repos.is_dir().then(|| vessel_dirs(&repos));
    Aliases::for_checkout(&identity, &basename(&workspace), vessels)
}

fn vessel_dirs(repos: &Path) -> Vec<VesselDir> {
    let Ok(entries) = std::fs::read_dir(repos) else {
        return Vec::new();
    };
    let mut out: Vec<VesselDir> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let path = e.path();
            // Only its own checkout (repos/<name>/.git) counts, not the super-repo around it.
            let identity = if path.join(".git").exists() {
                Repo::open(&path)
                    .ok()
                    .and_then(|r| r.remote_url("origin"))
                    .map(|u| normalize_remote_url(&u))
            } else {
                None
            };
            VesselDir {
                name: e.file_name().to_string_lossy().to_lowercase(),
                identity,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
