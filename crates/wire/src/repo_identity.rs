//! Repository identity: the key the ledger files findings under, and the super-repo/vessel
//! aliases that let one repository read findings recorded under another's identity.
//!
//! This module is the one owner of both decisions; recall, the duplicate check, task pull and
//! finding close ask it and never compare `repo:` headers themselves.

/// Normalizes a remote URL into an identity: scheme, credentials, port, query and fragment,
/// a trailing `.git` and trailing slashes are dropped; the scp form `git@host:org/repo` reads
/// as `host/org/repo`; the result is lowercased. So `git@github.com:Org/Repo.git` and
/// `https://user:tok@github.com:443/org/repo/` are both `github.com/org/repo`.
///
/// Local remotes (`/srv/x.git`, `file:///srv/x.git`) have no host: the path is kept without
/// its leading `/` and `.git`, giving `srv/x`, so a file:// URL and the plain path of the same
/// repository share an identity.
pub fn normalize_remote_url(url: &str) -> String {
    let url = url.trim();
    // Query and fragment never name the repository.
    let url = url.split(['?', '#']).next().unwrap_or(url);
    let (host, path) = if let Some((_, rest)) = url.split_once("://") {
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        (strip_port(strip_credentials(authority)), path)
    } else if let Some((host, path)) = scp_parts(url) {
        (strip_credentials(host), path)
    } else {
        ("", url)
    };
    let mut path = path.trim_matches('/');
    loop {
        let before = path;
        path = path.trim_end_matches('/');
        path = path.strip_suffix(".git").unwrap_or(path);
        if path == before {
            break;
        }
    }
    let path = path.trim_start_matches('/');
    let joined = match (host.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => host.to_string(),
        (false, false) => format!("{host}/{path}"),
    };
    joined.to_lowercase()
}

fn strip_credentials(authority: &str) -> &str {
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

fn strip_port(host: &str) -> &str {
    // [::1]:8080 keeps the bracketed address; host:22 drops the digits.
    if let Some(end) = host.rfind(']') {
        return &host[..=end];
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

/// `[user@]host:path` with the colon before any slash, as git reads scp-like addresses; a
/// one-letter "host" is a Windows drive (`C:\repo`), not scp.
fn scp_parts(url: &str) -> Option<(&str, &str)> {
    let colon = url.find(':')?;
    if url[..colon].contains('/') {
        return None;
    }
    let host = &url[..colon];
    if strip_credentials(host).len() <= 1 {
        return None;
    }
    Some((host, &url[colon + 1..]))
}

/// Task pull's case: the identity of an origin with no checkout yet.
pub fn identity_of_origin(origin_url: &str) -> String {
    normalize_remote_url(origin_url)
}

/// The last segment of an identity (`github.com/org/vessel-a` → `vessel-a`): a vessel's name.
pub fn last_segment(identity: &str) -> &str {
    identity
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(identity)
}

/// A vessel checked out under a super-repo's `repos/<name>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VesselDir {
    /// The directory name under `repos/`, lowercased.
    pub name: String,
    /// The vessel's own identity when `repos/<name>/` is its own checkout with an origin; its
    /// findings must then carry exactly this identity.
    pub identity: Option<String>,
}

/// Which findings belong to this repository, and what their files are called here.
///
/// A super-repo names a vessel's file `repos/<vessel>/<path>` under its own identity; the
/// vessel's checkout names it `<path>` under the vessel's identity. Both sides read both.
#[derive(Clone, Debug)]
pub struct Aliases {
    identity: String,
    basename: Option<String>,
    /// Set in a vessel checkout (and for task pull): findings of other repositories with files
    /// under `repos/<name>/` are read with that prefix removed.
    vessel_name: Option<String>,
    /// Set in a super-repo (a `repos/` directory at the root): findings of these vessels are
    /// read with `repos/<name>/` added.
    vessels: Vec<VesselDir>,
}

impl Aliases {
    /// From a checkout's layout (read by the cell, which has git): the workspace's `identity`
    /// and `basename`; `vessels` when a `repos/` directory at the work tree's root makes it the
    /// super-repo, else it is a vessel named by its identity's last segment.
    pub fn for_checkout(
        identity: &str,
        basename: &str,
        vessels: Option<Vec<VesselDir>>,
    ) -> Aliases {
        let identity = identity.to_lowercase();
        let mut aliases = Aliases {
            basename: Some(basename.to_lowercase()),
            vessel_name: None,
            vessels: Vec::new(),
            identity,
        };
        match vessels {
            Some(vessels) => aliases.vessels = vessels,
            None => aliases.vessel_name = Some(last_segment(&aliases.identity).to_string()),
        }
        aliases
    }

    /// The vessels under a super-repo's `repos/`, given explicitly (for callers that know the
    /// layout without a checkout on disk).
    pub fn super_repo(identity: &str, vessels: Vec<VesselDir>) -> Aliases {
        Aliases {
            identity: identity.to_lowercase(),
            basename: None,
            vessel_name: None,
            vessels,
        }
    }

    /// This repository's identity, lowercased.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether a finding with `repo:` header `repo` and `files` belongs here, and if so its
    /// files as this checkout names them. `None` when it belongs to another repository.
    pub fn map_finding(&self, repo: &str, files: &[String]) -> Option<Vec<String>> {
        let repo = repo.trim().to_lowercase();
        if repo == self.identity || self.basename.as_deref() == Some(repo.as_str()) {
            return Some(files.to_vec());
        }
        if let Some(name) = &self.vessel_name {
            let prefix = format!("{VESSELS}{name}/");
            let mapped: Vec<String> = files
                .iter()
                .filter_map(|f| strip_prefix_ci(f, &prefix).map(str::to_string))
                .collect();
            if !mapped.is_empty() {
                return Some(mapped);
            }
        }
        for vessel in &self.vessels {
            let matches = match &vessel.identity {
                Some(id) => *id == repo,
                None => last_segment(&repo) == vessel.name,
            };
            if matches {
                return Some(
                    files
                        .iter()
                        .map(|f| format!("repos/{}/{}", vessel.name, f.trim_start_matches("./")))
                        .collect(),
                );
            }
        }
        None
    }

    /// `map_finding(..).is_some()`.
    pub fn belongs(&self, repo: &str, files: &[String]) -> bool {
        self.map_finding(repo, files).is_some()
    }

    /// The [`finding_keys`] of every finding that belongs to a repository with these aliases;
    /// `None` for a checkout's aliases, whose basename and vessel list no key can express.
    pub fn index_keys(&self) -> Option<Vec<String>> {
        if self.basename.is_some() || !self.vessels.is_empty() {
            return None;
        }
        let mut keys = vec![format!("r:{}", self.identity)];
        keys.extend(self.vessel_name.as_ref().map(|n| format!("v:{n}")));
        Some(keys)
    }
}

/// The keys an index files a finding of `repo:` header `repo` and `files` under, so that a
/// repository's findings are found by an indexed lookup of [`Aliases::index_keys`] instead of a
/// test of every row: its own identity, and the name of each vessel a file sits under
/// (`repos/<name>/<path>`). A finding [`Aliases::belongs`] to [`vessel_aliases`] exactly when
/// the two share a key; one owner of the rule, so the index and the test never disagree.
pub fn finding_keys(repo: &str, files: &[String]) -> Vec<String> {
    let mut keys = vec![format!("r:{}", repo.trim().to_lowercase())];
    for f in files {
        let f = f.strip_prefix("./").unwrap_or(f);
        let under = f
            .get(..VESSELS.len())
            .filter(|head| head.eq_ignore_ascii_case(VESSELS))
            .map(|_| &f[VESSELS.len()..]);
        // As `strip_prefix_ci` reads it: the name compared without ASCII case, a path after it.
        if let Some((name, path)) = under.and_then(|rest| rest.split_once('/'))
            && !path.is_empty()
        {
            let key = format!("v:{}", name.to_ascii_lowercase());
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// The directory a super-repo keeps its vessels under.
const VESSELS: &str = "repos/";

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let s = s.strip_prefix("./").unwrap_or(s);
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
        .filter(|rest| !rest.is_empty())
}

/// Task pull's aliases, from the origin's identity alone (no checkout yet): the origin's own
/// findings, plus those any super-repo recorded under `repos/<name>/`, name being the
/// identity's last segment, with that prefix removed.
pub fn vessel_aliases(identity: &str) -> Aliases {
    let identity = identity.to_lowercase();
    Aliases {
        vessel_name: Some(last_segment(&identity).to_string()),
        basename: None,
        vessels: Vec::new(),
        identity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The index's keys answer what the row test answers, for every repository and file a
        /// row can name: same and other identities, vessels in any case, `./` and empty paths.
        #[test]
        fn a_finding_shares_a_key_with_a_repository_exactly_when_it_belongs_there(
            identity in "(ex\\.test/o/)?(app|App|ÄPP|x)",
            repo in "( |)(ex\\.test/o/)?(app|APP|äpp|y)( |)",
            files in proptest::collection::vec("(\\./)?(repos|REPOS|src)/(app|aPp|ÄPP|äpp|)/?(a\\.py|)", 0..4),
        ) {
            let aliases = vessel_aliases(&identity);
            let wanted = aliases.index_keys().unwrap();
            let shares = finding_keys(&repo, &files).iter().any(|k| wanted.contains(k));
            proptest::prop_assert_eq!(shares, aliases.belongs(&repo, &files));
        }
    }

    #[test]
    fn a_checkouts_aliases_have_no_index_keys() {
        assert_eq!(
            Aliases::for_checkout("ex.test/o/app", "app", None).index_keys(),
            None
        );
        assert_eq!(
            vessel_aliases("Ex.test/o/App").index_keys().unwrap(),
            ["r:ex.test/o/app", "v:app"]
        );
    }

    #[test]
    fn windows_drive_is_not_scp() {
        assert_eq!(normalize_remote_url("C:/Repos/X.git"), "c:/repos/x");
    }
}
