//! Where a fix lives, as verdict lines (SPEC.md §Fix location). One owner for the rules an
//! endorse applies to a named fix commit; `finding close` checks every commit it closes with it.

use metabob_git::status::PathState;
use metabob_git::{GitError, Repo};
use metabob_wire::claims::CLAIM_SKEW_MS;
use metabob_wire::finding::Finding;
use metabob_wire::verdict::{Pending, VerdictKind};

/// A fix commit's checks passed; `lines` go on the verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixLocation {
    pub commit: String,
    pub lines: Vec<(&'static str, String)>,
    /// The commit is older than the finding but touches its files: the finding was recorded
    /// after its fix was committed.
    pub predates_finding: bool,
}

/// Why a named commit is not this finding's fix; nothing is written.
#[derive(Debug, thiserror::Error)]
pub enum FixRefused {
    #[error("commit {commit} does not resolve in this checkout")]
    Unknown { commit: String },
    #[error("commit {commit} is not in {against}'s history")]
    NotIn { commit: String, against: String },
    #[error(
        "commit {commit} is older than the finding and touches none of its files, so it cannot \
         be its fix"
    )]
    Predates { commit: String },
    #[error("git did not answer")]
    Git(#[from] GitError),
}

impl metabob_wire::report::Hint for FixRefused {
    fn hint(&self) -> Option<String> {
        match self {
            FixRefused::Git(e) => Some(e.hint().unwrap_or_else(|| "try again".into())),
            FixRefused::Unknown { .. } | FixRefused::NotIn { .. } | FixRefused::Predates { .. } => {
                None
            }
        }
    }
}

/// The history a fix is checked against: a ref's, asked of git, or one already read.
pub trait History {
    /// The ref's name, for messages.
    fn name(&self) -> &str;
    fn contains(&self, repo: &Repo, sha: &str) -> Result<bool, GitError>;
}

/// A ref such as `origin/main` or `HEAD`, whose ancestry git answers per question.
pub struct RefHistory<'a>(pub &'a str);

impl History for RefHistory<'_> {
    fn name(&self) -> &str {
        self.0
    }
    fn contains(&self, repo: &Repo, sha: &str) -> Result<bool, GitError> {
        match repo.resolve(self.0)? {
            Some(tip) => repo.is_ancestor(sha, &tip),
            None => Ok(false),
        }
    }
}

/// Checks `sha` as the fix of `finding`, against `against`'s history
/// (anchor: check_fix_commit). A fix postdates the finding, less the claim skew for clocks; an
/// older commit counts only when it touches the finding's files.
pub fn check_fix_commit(
    repo: &Repo,
    finding: &Finding,
    files: &[String],
    sha: &str,
    against: &dyn History,
) -> Result<FixLocation, FixRefused> {
    let full = repo.resolve(sha)?.ok_or_else(|| FixRefused::Unknown {
        commit: sha.to_string(),
    })?;
    if !against.contains(repo, &full)? {
        return Err(FixRefused::NotIn {
            commit: full,
            against: against.name().to_string(),
        });
    }
    let commit = repo.commit(&full)?;
    let touched = repo.changed_files(&full)?;
    let touches = touched.iter().any(|t| files.iter().any(|f| f == t));
    let mut lines = vec![
        ("fix", format!("commit {full}")),
        ("fix_claimed", "yes".to_string()),
    ];
    if !touches {
        lines.push(("fix_touches_finding_files", "no".into()));
    }
    let finding_s = (finding.created_ms - CLAIM_SKEW_MS) / 1000;
    let predates = finding.created_ms > 0 && commit.committer_time < finding_s;
    if predates {
        if !touches {
            return Err(FixRefused::Predates { commit: full });
        }
        lines.push(("fix_predates_finding", "yes".into()));
    }
    Ok(FixLocation {
        commit: full,
        lines,
        predates_finding: predates,
    })
}

/// What an endorse writes, read from the checkout's git state (anchor: locate_fix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// Write this verdict; `note` is a line for the reply.
    Verdict {
        kind: VerdictKind,
        lines: Vec<(&'static str, String)>,
        note: Option<String>,
    },
    /// No verdict is written; `why` is the reply's line: why, and what to do.
    NoVerdict { why: String },
}

fn verdict(kind: VerdictKind, lines: Vec<(&'static str, String)>, note: Option<String>) -> Located {
    Located::Verdict { kind, lines, note }
}

/// How far back an endorse looks for a commit touching the finding's files.
const LOCATE_DEPTH: usize = 5_000;

/// The fix location of an endorse in `repo` (`None`: not a git checkout). `files` are the
/// finding's files as this repository names them. The order of the rules is the contract:
/// uncommitted changes in the finding's files, a named commit, the newest commit since the
/// finding touching its files, other uncommitted tracked changes, then no verdict.
pub fn locate_fix(
    repo: Option<&Repo>,
    finding: &Finding,
    files: &[String],
    fix_commit: Option<&str>,
) -> Result<Located, FixRefused> {
    let Some(repo) = repo else {
        return Ok(verdict(
            VerdictKind::Fixed,
            vec![("fix", "unknown (not a git checkout)".into())],
            Some("This is not a git checkout: the finding closes without a commit.".into()),
        ));
    };
    let branch = repo.head_branch().unwrap_or_else(|| "HEAD".into());
    let states = repo.path_states(files)?;
    if states
        .iter()
        .any(|s| matches!(s, PathState::Changed | PathState::Untracked))
    {
        return Ok(uncommitted(&branch, None));
    }
    if let Some(sha) = fix_commit {
        let loc = check_fix_commit(repo, finding, files, sha, &RefHistory("HEAD"))?;
        let note = loc.predates_finding.then(|| {
            format!("Commit {} predates the finding but touches its files: the finding was recorded after its fix was committed.", loc.commit)
        });
        let mut lines = loc.lines;
        lines.push(("fix_branch", branch));
        return Ok(with_push_state(repo, &loc.commit, lines, note)?);
    }
    let since_s = (finding.created_ms - CLAIM_SKEW_MS) / 1000;
    let mut newest_since: Option<(String, Vec<String>)> = None;
    let mut in_history = false;
    if let Some(head) = repo.head()? {
        for commit in repo.history(&head)?.take(LOCATE_DEPTH) {
            let commit = commit?;
            let postdates = finding.created_ms > 0 && commit.committer_time >= since_s;
            let touched = repo.changed_files(&commit.sha)?;
            let touches = touched.iter().any(|t| files.contains(t));
            in_history |= touches;
            if postdates && touches {
                let lines = vec![
                    ("fix", format!("commit {}", commit.sha)),
                    ("fix_branch", branch),
                ];
                return Ok(with_push_state(repo, &commit.sha, lines, None)?);
            }
            if postdates && newest_since.is_none() {
                newest_since = Some((commit.sha.clone(), touched));
            }
            if !postdates && in_history {
                break;
            }
        }
    }
    let known = in_history
        || states.iter().any(|s| {
            matches!(
                s,
                PathState::Clean | PathState::Changed | PathState::Untracked
            )
        });
    if !known {
        if !states.is_empty() && states.iter().all(|s| *s == PathState::Ignored) {
            return Ok(verdict(
                VerdictKind::Fixed,
                vec![("fix", "local (ignored files; no commit holds it)".into())],
                Some("The fix is local to this checkout (ignored files): no other checkout can check it.".into()),
            ));
        }
        return Ok(Located::NoVerdict {
            why: format!(
                "none of the finding's files ({}) is known in this checkout (not on disk, not tracked, not in its history), so the fix is not here; endorse where the fix is, or discard it",
                files.join(", ")
            ),
        });
    }
    let others = repo.changed_tracked(20)?;
    if !others.is_empty() {
        return Ok(uncommitted(&branch, Some(others)));
    }
    let why = match newest_since {
        Some((sha, touched)) => format!(
            "no commit since the finding touches its files; the newest commit since it, {sha} (touching {}), is not taken as the fix; if it is, call mark_complete again with fix_commit: \"{sha}\"",
            touched.join(", ")
        ),
        None => "nothing in this checkout postdates the finding, so nothing here can be its fix; endorse where the fix is, or discard it".into(),
    };
    Ok(Located::NoVerdict { why })
}

fn uncommitted(branch: &str, outside: Option<Vec<String>>) -> Located {
    let mut lines = vec![
        ("fix", "uncommitted".to_string()),
        ("fix_branch", branch.to_string()),
        ("fix_base", "HEAD".to_string()),
    ];
    if let Some(files) = &outside {
        lines.push(("fix_files", files.join(", ")));
    }
    verdict(
        VerdictKind::Pending(Pending::Uncommitted),
        lines,
        Some(match outside {
            None => "The fix is not committed: commit it, then endorse again.".into(),
            Some(_) => "Files outside the finding's have uncommitted changes (the fix may be among them): commit it, then endorse again.".into(),
        }),
    )
}

/// A fix commit no remote branch holds is pending (unpushed); one only on task branches awaits
/// its merge; a checkout with no origin closes (no other checkout could fetch it anyway).
fn with_push_state(
    repo: &Repo,
    sha: &str,
    mut lines: Vec<(&'static str, String)>,
    note: Option<String>,
) -> Result<Located, GitError> {
    if repo.remote_url("origin").is_none() {
        return Ok(verdict(VerdictKind::Fixed, lines, note));
    }
    let branches = repo.remote_branches_containing(sha, "origin")?;
    if branches.is_empty() {
        lines.push(("fix_pushed", "no".into()));
        return Ok(verdict(
            VerdictKind::Pending(Pending::Unpushed),
            lines,
            Some("The fix commit is on no remote branch: push it, then endorse again.".into()),
        ));
    }
    if branches.iter().all(|b| b.starts_with("task/")) {
        let target = repo
            .remote_default_branch("origin")
            .unwrap_or_else(|| "main".into());
        lines.push(("fix_target", target.clone()));
        return Ok(verdict(
            VerdictKind::Pending(Pending::AwaitingMerge),
            lines,
            Some(format!(
                "The fix is only on task branches ({}): it awaits its merge into {target}. Fetch and endorse again once merged, or run `metabob-mcp finding close`.",
                branches.join(", ")
            )),
        ));
    }
    Ok(verdict(VerdictKind::Fixed, lines, note))
}
