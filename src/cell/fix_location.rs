//! Where a fix lives, as verdict lines (SPEC.md §Fix location). One owner for the rules an
//! endorse applies to a named fix commit; `finding close` checks every commit it closes with it.

use crate::git::{GitError, Repo};
use crate::ledger::claims::CLAIM_SKEW_MS;
use crate::ledger::finding::Finding;

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
    #[error("commit {0} does not resolve in this checkout")]
    Unknown(String),
    #[error("commit {commit} is not in {against}'s history")]
    NotIn { commit: String, against: String },
    #[error(
        "commit {0} is older than the finding and touches none of its files, so it cannot be \
         its fix"
    )]
    Predates(String),
    #[error("git did not answer ({0}); try again")]
    Git(#[from] GitError),
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
    let full = repo
        .resolve(sha)?
        .ok_or_else(|| FixRefused::Unknown(sha.to_string()))?;
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
            return Err(FixRefused::Predates(full));
        }
        lines.push(("fix_predates_finding", "yes".into()));
    }
    Ok(FixLocation {
        commit: full,
        lines,
        predates_finding: predates,
    })
}
