//! Closing merged reviews: every finding of a repository that stands pending on a fix commit is
//! judged again against its target, from a clone of the origin alone, so a review merged since
//! `finding close` said "pending" closes without anyone holding a checkout
//! (SPEC.md §Closing merged reviews).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{JudgeAndWrite, Outcome, PendingWrites, TargetHistory};
use crate::CellError;
use crate::ledger::recall::{self, LedgerView, Recalled};
use metabob_git::{GitError, Repo};
use metabob_net::NetClient;
use metabob_net::attachment::vessel_id;
use metabob_process::env::Env;
use metabob_process::guard::redact_url_credentials;
use metabob_wire::repo_identity::{identity_of_origin, normalize_remote_url, vessel_aliases};
use metabob_wire::text::one_line;
use metabob_wire::verdict::Standing;

/// A target named by a ledger row is shown at most this long.
const SHOWN_TARGET_CHARS: usize = 100;

#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// The repository whose pending fixes are judged, as git clones it.
    pub origin: String,
    /// A directory kept between sweeps: cloned into when empty or missing, fetched when it
    /// already holds a clone of the origin. `None`: a fresh clone in a temporary directory,
    /// removed when the sweep ends.
    pub cache_dir: Option<PathBuf>,
}

/// What one sweep found and did.
#[derive(Clone, Debug, Serialize)]
pub struct SweepReport {
    /// The origin with any credentials in it masked.
    pub origin: String,
    /// The repository identity the ledger files the origin's findings under.
    pub repository: String,
    /// The origin's default branch as the clone recorded it: the target of a fix whose pending
    /// verdict names none. `None` when nothing was pending (then nothing was cloned) or the
    /// clone recorded no remote HEAD.
    pub default_branch: Option<String>,
    /// The ledger's window was full: older pending findings past it were not seen.
    pub recall_truncated: bool,
    pub tasks: Vec<SweepEntry>,
}

/// One pending finding of the repository and what the sweep made of it.
#[derive(Clone, Debug, Serialize)]
pub struct SweepEntry {
    pub task_id: String,
    /// The branch the fix must reach: the pending verdict's `fix_target`, else the default.
    pub target: String,
    /// The fix commit the pending verdict names.
    pub fix_commit: String,
    /// The pending verdict judged again.
    pub pending_verdict: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// A finding standing pending on a fix commit, as the ledger says.
struct Waiting<'v> {
    recalled: &'v Recalled,
    id: String,
    fix: String,
    target: Option<String>,
    verdict: String,
}

/// Sweeps the origin's pending fixes (anchor: sweep_pending): recalls the repository's findings,
/// and for each that stands pending on a fix commit judges the fix against its target in a clone
/// of the origin, closing it through the one verdict writer when the fix has landed. Nothing
/// else is written: a fix still waiting already has its pending verdict. With nothing pending
/// no clone is made.
pub async fn sweep_pending(opts: SweepOptions, mut env: Env) -> Result<SweepReport, CellError> {
    metabob_git::check_origin(&opts.origin)?;
    let repository = identity_of_origin(&opts.origin);
    let workspace = env.cwd().to_path_buf();
    let att = crate::attach_once(&mut env, &workspace).await?;
    let view = recall::recall(&att, &vessel_aliases(&repository)).await?;
    let mut report = SweepReport {
        origin: redact_url_credentials(&opts.origin),
        repository,
        default_branch: None,
        recall_truncated: view.findings_truncated,
        tasks: Vec::new(),
    };
    let waiting = waiting(&view);
    if waiting.is_empty() {
        return Ok(report);
    }

    let net = NetClient::from_env(&env);
    // The scratch directory lives until the sweep is done with the clone inside it.
    let (dir, _scratch) = clone_or_fetch(&opts, &report.repository, &env, net).await?;
    let me = vessel_id(&env, &workspace);
    let session = att.claim().session.clone();
    let mut step = JudgeAndWrite::new(&att, &view, me, session, PendingWrites::Keep);
    let mut judged = Vec::new();
    {
        // Judged in one stretch with no await in it: the repository handle stays on one thread.
        let repo = Repo::open(&dir).map_err(|_| CellError::CloneUnopenable {
            origin: report.origin.clone(),
            dir: dir.clone(),
        })?;
        report.default_branch = repo.remote_default_branch("origin");
        let fallback = super::default_branch(&repo);
        let mut by_target: BTreeMap<String, Vec<Waiting<'_>>> = BTreeMap::new();
        for w in waiting {
            let target = w.target.clone().unwrap_or_else(|| fallback.clone());
            by_target.entry(target).or_default().push(w);
        }
        for (target, group) in by_target {
            // Each target's history is read once, for every fix that must reach it.
            let name = format!("origin/{target}");
            let mut history = match target_tip(&repo, &target)? {
                Ok(tip) => Ok(TargetHistory::new(&repo, &name, &tip)?),
                Err(why) => Err(why),
            };
            for w in group {
                match &mut history {
                    Err(why) => step.report(Outcome::Refused { why: why.clone() }),
                    Ok(history) => match resolve_fix(&repo, &w.fix)? {
                        Some(full) => {
                            step.judge(&repo, history, &target, w.recalled, &w.id, &[full])?
                        }
                        None => step.report(Outcome::Missing {
                            commit: w.fix.clone(),
                        }),
                    },
                }
                judged.push((w.id, target.clone(), w.fix, w.verdict));
            }
        }
    }
    let outcomes = step.finish().await?;
    report.tasks = judged
        .into_iter()
        .zip(outcomes)
        .map(
            |((task_id, target, fix_commit, pending_verdict), outcome)| SweepEntry {
                task_id,
                target,
                fix_commit,
                pending_verdict,
                outcome,
            },
        )
        .collect();
    Ok(report)
}

/// The findings of the view that stand pending on a fix commit, each once. The rows are the
/// ledger's, so nothing in them is trusted past what `Verdict::read` bounded: the commit is a
/// hex name of sha length, the target is checked as a branch name before git sees it.
fn waiting(view: &LedgerView) -> Vec<Waiting<'_>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for r in &view.findings {
        let Some(id) = r.finding.finding_ids.first() else {
            continue;
        };
        let Standing::Pending { verdict } = view.standing(&r.finding) else {
            continue;
        };
        let Some(fix) = verdict.fix_commit.clone() else {
            continue;
        };
        if !seen.insert(id.clone()) {
            continue;
        }
        out.push(Waiting {
            recalled: r,
            id: id.clone(),
            fix,
            target: verdict
                .fix_target
                .as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
            verdict: verdict.concept_id.clone(),
        });
    }
    out
}

/// The tip of `origin/<target>`, or why the fixes bound for it cannot be judged.
fn target_tip(repo: &Repo, target: &str) -> Result<Result<String, String>, CellError> {
    let shown = one_line(target, SHOWN_TARGET_CHARS);
    if let Err(e) = metabob_wire::refname::validate_ref(target) {
        return Ok(Err(format!(
            "the pending verdict's target {shown:?} is no branch name ({}); nothing was written",
            metabob_wire::report::with_hint(&e)
        )));
    }
    // The full ref name, so the target is looked up as a branch and never read as a revision.
    Ok(
        match repo.resolve(&format!("refs/remotes/origin/{target}"))? {
            Some(tip) => Ok(tip),
            None => Err(format!(
                "the origin has no branch {shown} (the fix's target); nothing was written"
            )),
        },
    )
}

/// The full sha of the fix a verdict names, when the clone has that commit. A name that
/// resolves to a commit it is not a prefix of (a branch or tag spelled in hex) is not the fix.
fn resolve_fix(repo: &Repo, fix: &str) -> Result<Option<String>, GitError> {
    let wanted = fix.to_ascii_lowercase();
    Ok(repo
        .resolve(&wanted)?
        .filter(|full| full.starts_with(&wanted)))
}

/// A clone of the origin to judge in, by its directory: the cache directory's, fetched, or a
/// new one (with the scratch directory that holds it). Blocking network work runs off the
/// async workers, as the clone's must.
async fn clone_or_fetch(
    opts: &SweepOptions,
    repository: &str,
    env: &Env,
    net: NetClient,
) -> Result<(PathBuf, Option<tempfile::TempDir>), CellError> {
    let shown = redact_url_credentials(&opts.origin);
    let failed = move |e: GitError| match e {
        // Its own line names the URL (masked).
        e @ GitError::Clone { .. } => CellError::Unwritten(e),
        source => CellError::CloneFailed {
            origin: shown,
            source,
        },
    };
    let stopped = |what| move |source| CellError::Stopped { what, source };
    let (dest, scratch) = match &opts.cache_dir {
        Some(dir) if has_entries(dir) => {
            check_cached_clone(dir, repository)?;
            let at = dir.clone();
            tokio::task::spawn_blocking(move || Repo::open(&at)?.fetch("origin", &net))
                .await
                .map_err(stopped("the fetch"))?
                .map_err(CellError::Unwritten)?;
            return Ok((dir.clone(), None));
        }
        Some(dir) => (dir.clone(), None),
        None => {
            let base = env
                .get("TMPDIR")
                .filter(|t| !t.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir);
            let scratch = tempfile::Builder::new()
                .prefix("metabob-sweep-")
                .tempdir_in(&base)
                .map_err(|source| CellError::Scratch {
                    base: base.clone(),
                    source,
                })?;
            (scratch.path().join("origin"), Some(scratch))
        }
    };
    let (origin, at) = (opts.origin.clone(), dest.clone());
    tokio::task::spawn_blocking(move || {
        metabob_git::clone_at(&origin, &at, None, false, &net).map(|_| ())
    })
    .await
    .map_err(stopped("the clone"))?
    .map_err(failed)?;
    Ok((dest, scratch))
}

fn has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

/// What a sweep's cache directory holds instead of a clone of the origin.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheMismatch {
    #[error("is neither empty nor a clone")]
    NotAClone,
    #[error("holds a clone of {found}, not {wanted}")]
    OtherRepository { found: String, wanted: String },
    #[error("holds a clone with no origin")]
    NoOrigin,
}

/// Whether a cache directory holds a clone of this repository.
fn check_cached_clone(dir: &Path, repository: &str) -> Result<(), CellError> {
    let not_ours = |mismatch| CellError::Cache {
        dir: dir.to_path_buf(),
        mismatch,
    };
    let repo = Repo::open(dir).map_err(|_| not_ours(CacheMismatch::NotAClone))?;
    match repo.remote_url("origin").map(|u| normalize_remote_url(&u)) {
        Some(id) if id == repository => Ok(()),
        Some(found) => Err(not_ours(CacheMismatch::OtherRepository {
            found,
            wanted: repository.to_string(),
        })),
        None => Err(not_ours(CacheMismatch::NoOrigin)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A standing cell may run the sweep on a task of its own.
    #[test]
    fn the_sweep_is_a_send_future() {
        fn send<T: Send>(_: &T) {}
        let opts = SweepOptions {
            origin: "file:///nowhere.git".into(),
            cache_dir: None,
        };
        let fut = sweep_pending(opts, Env::new(Vec::new(), "/"));
        send(&fut);
    }

    #[test]
    fn a_hex_name_that_is_no_prefix_of_its_commit_is_not_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| git(dir.path(), args);
        git(&["init", "-q", "-b", "main"]);
        git(&["commit", "-q", "--allow-empty", "-m", "one"]);
        let sha = git(&["rev-parse", "HEAD"]);
        // A branch spelled like a sha prefix, pointing at a commit that prefix is not of.
        let fake = if sha.starts_with("abcdef1") {
            "1234567"
        } else {
            "abcdef1"
        };
        git(&["branch", fake]);
        let repo = Repo::open(dir.path()).unwrap();
        assert_eq!(resolve_fix(&repo, &sha[..12]).unwrap(), Some(sha.clone()));
        assert_eq!(resolve_fix(&repo, &sha.to_uppercase()).unwrap(), Some(sha));
        assert_eq!(resolve_fix(&repo, fake).unwrap(), None);
        assert_eq!(resolve_fix(&repo, &"0".repeat(40)).unwrap(), None);
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A bare origin with one commit on main, by the git CLI; returns its file:// URL.
    fn bare_origin(root: &Path, name: &str) -> String {
        let seed = root.join(format!("seed-{name}"));
        std::fs::create_dir_all(&seed).unwrap();
        git(&seed, &["init", "-q", "-b", "main"]);
        git(&seed, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let bare = root.join(format!("{name}.git"));
        git(
            root,
            &[
                "clone",
                "-q",
                "--bare",
                seed.to_str().unwrap(),
                bare.to_str().unwrap(),
            ],
        );
        format!("file://{}", bare.display())
    }

    /// The cache directory is cloned into once and fetched after, so a branch pushed between
    /// two sweeps is seen; a cache of another origin is refused, never reused or emptied.
    #[tokio::test]
    async fn a_cache_directory_is_cloned_once_then_fetched_and_never_taken_for_another_origin() {
        let root = tempfile::tempdir().unwrap();
        let url = bare_origin(root.path(), "app");
        let cache = root.path().join("cache/sweep");
        let env = Env::new(Vec::new(), root.path());
        let opts = SweepOptions {
            origin: url.clone(),
            cache_dir: Some(cache.clone()),
        };
        let id = identity_of_origin(&url);
        let net = || NetClient::from_env(&env);
        let (dir, scratch) = clone_or_fetch(&opts, &id, &env, net()).await.unwrap();
        assert_eq!((dir.as_path(), scratch.is_none()), (cache.as_path(), true));
        assert_eq!(
            Repo::open(&dir)
                .unwrap()
                .remote_default_branch("origin")
                .as_deref(),
            Some("main")
        );

        let bare = root.path().join("app.git");
        git(&bare, &["branch", "task/t1", "main"]);
        let (dir, _) = clone_or_fetch(&opts, &id, &env, net()).await.unwrap();
        let repo = Repo::open(&dir).unwrap();
        assert!(
            repo.resolve("refs/remotes/origin/task/t1")
                .unwrap()
                .is_some()
        );

        let other = bare_origin(root.path(), "other");
        let opts = SweepOptions {
            origin: other.clone(),
            cache_dir: Some(cache.clone()),
        };
        let err = clone_or_fetch(&opts, &identity_of_origin(&other), &env, net())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds a clone of"), "{err}");
        assert!(
            cache.join(".git").is_dir(),
            "the other origin's cache is left as it was"
        );

        // Without a cache, the clone is made in a scratch directory that goes with the sweep.
        let opts = SweepOptions {
            origin: url,
            cache_dir: None,
        };
        let env = Env::new(
            vec![("TMPDIR".to_string(), root.path().display().to_string())],
            root.path(),
        );
        let (dir, scratch) = clone_or_fetch(&opts, &id, &env, net()).await.unwrap();
        assert!(
            dir.starts_with(root.path()) && dir.join(".git").is_dir(),
            "{}",
            dir.display()
        );
        drop(scratch);
        assert!(!dir.exists(), "the scratch clone is removed");
    }

    #[test]
    fn a_target_that_is_no_branch_name_is_refused_before_git_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let repo = {
            std::process::Command::new("git")
                .args(["init", "-q", "--bare"])
                .arg(dir.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .status()
                .unwrap();
            Repo::open(dir.path()).unwrap()
        };
        for hostile in ["main~1", "../x", "a..b", "-x", "main@{1}", "a b"] {
            let why = target_tip(&repo, hostile).unwrap().unwrap_err();
            assert!(why.contains("no branch name"), "{hostile}: {why}");
        }
        let why = target_tip(&repo, "release").unwrap().unwrap_err();
        assert!(why.contains("has no branch release"), "{why}");
    }
}
