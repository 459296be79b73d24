//! `finding close`: close the findings a range of commits names in `Fixes-Finding:` trailers,
//! once the fix is merged into the target (SPEC.md §finding close). Pending, reverted and
//! unpushed fixes are reported, never closed. `sweep` closes the pending ones whose review has
//! been merged since, from the origin alone (SPEC.md §Closing merged reviews).

pub mod sweep;

pub use sweep::{SweepEntry, SweepOptions, SweepReport, sweep_pending};

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::Serialize;

use super::CellError;
use super::fix_location::{History, check_fix_commit};
use super::task_file::TaskFile;
use crate::ledger::recall::{self, LedgerView, Recalled};
use crate::ledger::verdict::{self};
use metabob_git::{GitError, Repo};
use metabob_net::attachment::{Attachment, vessel_id};
use metabob_process::env::Env;
use metabob_wire::finding::Finding;
use metabob_wire::report;
use metabob_wire::trailers::{FIXES_FINDING, fixes_finding_ids, trailer_line_values};
use metabob_wire::verdict::{NewVerdict, Pending, Standing, VerdictKind, VerdictOrigin};

/// A commits file is one id a line (41 bytes for sha-1): this holds about 400,000 commits, far
/// past any push, and stops an endless input such as `/dev/zero`.
const MAX_COMMITS_FILE_BYTES: u64 = 16 << 20;

/// Verdict writes in flight at once.
const WRITES_IN_FLIGHT: usize = 8;

#[derive(Clone, Debug)]
pub enum Commits {
    /// A file of commit ids, one per line (what `git rev-list` prints).
    File(PathBuf),
    /// A range such as `origin/main..HEAD`.
    Range(String),
}

#[derive(Clone, Debug)]
pub struct CloseOptions {
    pub commits: Commits,
    pub target: Option<String>,
    pub work_dir: PathBuf,
    pub task: Option<PathBuf>,
}

/// How the fix reached the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// The commit itself is in the target's history.
    Commit,
    /// A target commit carries the same `Fixes-Finding:` line (a squash merge).
    Trailer,
    /// A target commit makes the same change without the line (a cherry-pick that dropped it).
    PatchId,
    /// A revert of the revert put it back.
    Reapplied,
}

metabob_wire::display_as_wire_name!(Via);

/// What `finding close` did for one finding.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Closed {
        commit: String,
        via: Via,
        verdict: String,
    },
    Pending {
        commit: String,
        branches: Vec<String>,
        verdict: Option<String>,
    },
    Reverted {
        commit: String,
        reverted_by: String,
    },
    Unpushed {
        commit: String,
    },
    /// The fix commit a pending verdict names is on no branch of the origin any more: its
    /// review branch was deleted unmerged. Nothing is written; the finding stays pending.
    Missing {
        commit: String,
    },
    NotOpen {
        why: String,
    },
    Refused {
        why: String,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct FindingReport {
    pub finding_id: String,
    pub commits: Vec<String>,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Serialize)]
pub struct CloseReport {
    pub target: String,
    pub commits: usize,
    pub findings: Vec<FindingReport>,
}

/// Runs the close (anchor: run_finding_close).
pub async fn run(opts: CloseOptions, mut env: Env) -> Result<CloseReport, CellError> {
    let work = if opts.work_dir.is_absolute() {
        opts.work_dir.clone()
    } else {
        env.cwd().join(&opts.work_dir)
    };
    let repo = Repo::discover(&work)?
        .ok_or_else(|| CellError::NotACheckout(GitError::NotARepository(work.clone())))?;
    let workdir = repo.workdir().unwrap_or(work.clone());
    let task = opts.task.as_deref().map(TaskFile::read).transpose()?;

    let commits = match &opts.commits {
        Commits::Range(r) => repo.rev_list(r)?,
        Commits::File(f) => {
            let text = metabob_process::files::read_bounded(f, MAX_COMMITS_FILE_BYTES).map_err(
                |source| CellError::Unreadable {
                    path: f.clone(),
                    source,
                },
            )?;
            let mut out = Vec::new();
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                out.push(
                    repo.resolve(line)?
                        .ok_or_else(|| CellError::CommitMissing {
                            commit: line.to_string(),
                            file: f.clone(),
                        })?,
                );
            }
            out
        }
    };
    // Which findings the commits claim to fix; only ids and shas ever leave the machine.
    let mut named: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for sha in &commits {
        for id in fixes_finding_ids(&repo.commit(sha)?.message) {
            named.entry(id).or_default().push(sha.clone());
        }
    }

    // A stale view of the origin could misjudge what is merged: fetch first, write nothing if
    // that fails.
    repo.fetch("origin", &metabob_net::NetClient::from_env(&env))
        .map_err(CellError::Unwritten)?;
    // Read after the fetch, so the default is the origin's default branch as the clone knows it.
    let target = opts
        .target
        .clone()
        .or_else(|| task.as_ref().map(|t| t.policy.target.clone()))
        .unwrap_or_else(|| default_branch(&repo));
    let target_ref = format!("origin/{target}");
    let tip = repo
        .resolve(&target_ref)?
        .ok_or_else(|| CellError::NoTargetBranch {
            target: target.clone(),
        })?;

    let mut report = CloseReport {
        target: target.clone(),
        commits: commits.len(),
        findings: Vec::new(),
    };
    if named.is_empty() {
        return Ok(report);
    }

    let att = super::attach_once(&mut env, &workdir).await?;
    let me = task
        .as_ref()
        .map(|t| t.vessel_id.clone())
        .or_else(|| vessel_id(&env, &workdir));
    let session = task
        .map(|t| t.session)
        .unwrap_or_else(|| att.claim().session.clone());

    let aliases = crate::ledger::repo_identity::aliases_for_workspace(&workdir);
    let view = recall::recall(&att, &aliases).await?;
    let mut step = JudgeAndWrite::new(&att, &view, me, session, PendingWrites::Record);
    {
        let mut history = TargetHistory::new(&repo, &target_ref, &tip)?;
        for (id, shas) in &named {
            match view.findings.iter().find(|r| r.finding.has_id(id)) {
                None => step.report(Outcome::NotOpen {
                    why: "no open finding of this repository has this id; nothing was written"
                        .into(),
                }),
                Some(r) => step.judge(&repo, &mut history, &target, r, id, shas)?,
            }
        }
    }
    let outcomes = step.finish().await?;
    report.findings = named
        .into_iter()
        .zip(outcomes)
        .map(|((finding_id, commits), outcome)| FindingReport {
            finding_id,
            commits,
            outcome,
        })
        .collect();
    Ok(report)
}

/// The branch `origin`'s HEAD names after a fetch or clone, else `main` when the clone recorded
/// none (anchor: default_branch).
pub fn default_branch(repo: &Repo) -> String {
    repo.remote_default_branch("origin")
        .unwrap_or_else(|| "main".into())
}

/// Whether a judgement that the fix waits on a branch writes a pending verdict. `finding close`
/// records where the fix waits; the sweep only reads, since the pending verdict it starts from
/// already says so and a standing cell sweeps on every idle poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PendingWrites {
    Record,
    Keep,
}

/// The one judge-and-write step of `finding close` and the sweep (anchor: JudgeAndWrite): each
/// finding is judged against its target's history in turn (git only), and the verdicts the
/// judgements call for are sent together: they are independent, and the ledger's round trips
/// would otherwise add up one after another. Every write goes through the one verdict writer.
struct JudgeAndWrite<'a> {
    att: &'a Attachment,
    view: &'a LedgerView,
    me: Option<String>,
    session: String,
    pending: PendingWrites,
    outcomes: Vec<Outcome>,
    writes: tokio::task::JoinSet<(usize, Result<String, CellError>)>,
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl<'a> JudgeAndWrite<'a> {
    fn new(
        att: &'a Attachment,
        view: &'a LedgerView,
        me: Option<String>,
        session: String,
        pending: PendingWrites,
    ) -> JudgeAndWrite<'a> {
        JudgeAndWrite {
            att,
            view,
            me,
            session,
            pending,
            outcomes: Vec::new(),
            writes: tokio::task::JoinSet::new(),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(WRITES_IN_FLIGHT)),
        }
    }

    /// An outcome decided without judging (an unknown id, a fix the clone lacks).
    fn report(&mut self, outcome: Outcome) {
        self.outcomes.push(outcome);
    }

    /// Judges `r` against `history` (the target's) and starts the write its verdict needs.
    fn judge(
        &mut self,
        repo: &Repo,
        history: &mut TargetHistory<'_>,
        target: &str,
        r: &Recalled,
        id: &str,
        shas: &[String],
    ) -> Result<(), CellError> {
        let ctx = Ctx {
            view: self.view,
            target,
            pending: self.pending,
        };
        let outcome = match plan(&ctx, repo, history, &r.finding, &r.files, id, shas)? {
            Plan::Report(outcome) => outcome,
            Plan::Write {
                kind,
                lines,
                outcome,
            } => {
                let index = self.outcomes.len();
                let (att, finding) = (self.att.clone(), r.finding.clone());
                let (me, session) = (self.me.clone(), self.session.clone());
                let permits = self.permits.clone();
                self.writes.spawn(async move {
                    let _permit = permits.acquire_owned().await;
                    let id = write_verdict(&att, &finding, kind, lines, me, session).await;
                    (index, id)
                });
                outcome
            }
        };
        self.outcomes.push(outcome);
        Ok(())
    }

    /// Waits for every write and returns the outcomes in the order they were judged, each
    /// with the id of the verdict written for it.
    async fn finish(mut self) -> Result<Vec<Outcome>, CellError> {
        while let Some(done) = self.writes.join_next().await {
            let (index, written) = done.map_err(|source| CellError::Stopped {
                what: "a verdict write",
                source,
            })?;
            let written = written?;
            match self.outcomes.get_mut(index) {
                Some(Outcome::Closed { verdict, .. }) => *verdict = written,
                Some(Outcome::Pending { verdict, .. }) => *verdict = Some(written),
                _ => {}
            }
        }
        Ok(self.outcomes)
    }
}

struct Ctx<'a> {
    view: &'a LedgerView,
    target: &'a str,
    pending: PendingWrites,
}

/// What to do for one finding: report it, or write a verdict and then report it.
enum Plan {
    Report(Outcome),
    Write {
        kind: VerdictKind,
        lines: Vec<(&'static str, String)>,
        outcome: Outcome,
    },
}

/// Judges one finding against the target (git only; nothing is sent here).
#[allow(clippy::too_many_arguments)]
fn plan(
    ctx: &Ctx<'_>,
    repo: &Repo,
    history: &mut TargetHistory<'_>,
    finding: &Finding,
    files: &[String],
    id: &str,
    shas: &[String],
) -> Result<Plan, CellError> {
    let standing = ctx.view.standing(finding);
    if standing.is_closed() {
        return Ok(Plan::Report(Outcome::NotOpen {
            why: "the finding is already closed; nothing was written".into(),
        }));
    }
    Ok(
        match history.judge(repo, id, shas, finding.created_ms / 1000)? {
            Landing::Merged { commit, via } => {
                match check_fix_commit(repo, finding, files, &commit, &*history) {
                    Err(e) => Plan::Report(Outcome::Refused {
                        why: format!("{}; nothing was written", report::with_hint(&e)),
                    }),
                    Ok(location) => {
                        let mut lines = location.lines;
                        lines.push((
                            "fix_via",
                            serde_json::to_value(via)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default(),
                        ));
                        lines.push(("fix_target", ctx.target.to_string()));
                        Plan::Write {
                            kind: VerdictKind::Fixed,
                            lines,
                            outcome: Outcome::Closed {
                                commit,
                                via,
                                verdict: String::new(),
                            },
                        }
                    }
                }
            }
            Landing::Reverted {
                commit,
                reverted_by,
            } => Plan::Report(Outcome::Reverted {
                commit,
                reverted_by,
            }),
            Landing::NotMerged => {
                let commit = shas[0].clone();
                let mut branches = Vec::new();
                for sha in shas {
                    branches.extend(repo.remote_branches_containing(sha, "origin")?);
                }
                branches.sort();
                branches.dedup();
                if branches.is_empty() {
                    return Ok(Plan::Report(Outcome::Unpushed { commit }));
                }
                if ctx.pending == PendingWrites::Keep {
                    return Ok(Plan::Report(Outcome::Pending {
                        commit,
                        branches,
                        verdict: None,
                    }));
                }
                // One pending verdict per fix and target is enough.
                if let Standing::Pending { verdict: v } = &standing
                    && v.fix_commit.as_deref() == Some(commit.as_str())
                    && v.fix_target.as_deref() == Some(ctx.target)
                {
                    return Ok(Plan::Report(Outcome::Pending {
                        commit,
                        branches,
                        verdict: None,
                    }));
                }
                let lines = vec![
                    ("fix", format!("commit {commit}")),
                    ("fix_branch", branches.join(", ")),
                    ("fix_target", ctx.target.to_string()),
                ];
                Plan::Write {
                    kind: VerdictKind::Pending(Pending::AwaitingMerge),
                    lines,
                    outcome: Outcome::Pending {
                        commit,
                        branches,
                        verdict: None,
                    },
                }
            }
        },
    )
}

/// Writes one verdict through the ledger's one verdict writer.
async fn write_verdict(
    att: &Attachment,
    finding: &Finding,
    kind: VerdictKind,
    lines: Vec<(&'static str, String)>,
    reviewed_by: Option<String>,
    session: String,
) -> Result<String, CellError> {
    let nv = NewVerdict {
        finding,
        kind,
        reviewed_by,
        session,
        origin: VerdictOrigin::Remote,
        lines,
    };
    Ok(verdict::write(att, &nv, "finding-close").await?)
}

/// What the target's history says about one finding's fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Landing {
    Merged { commit: String, via: Via },
    Reverted { commit: String, reverted_by: String },
    NotMerged,
}

struct Entry {
    sha: String,
    committer_time: i64,
}

/// A commit that names a finding was written after the finding: this much earlier is allowed
/// for committers' clocks.
const CLOCK_ALLOWANCE_S: i64 = 24 * 3600;

/// The target's history, read newest first only as far back as a question needs
/// (anchor: TargetHistory). Only what the judgement uses is kept: each commit's sha and time,
/// the ids its lines name, and what it reverts.
pub struct TargetHistory<'r> {
    name: String,
    tip: String,
    walk: Box<dyn Iterator<Item = Result<metabob_git::Scanned, GitError>> + 'r>,
    exhausted: bool,
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    /// Finding id → the commits carrying a `Fixes-Finding: <id>` line anywhere in the message.
    carriers: HashMap<String, Vec<usize>>,
    /// Reverted sha → the commits that revert it.
    reverts: HashMap<String, Vec<usize>>,
}

impl History for TargetHistory<'_> {
    fn name(&self) -> &str {
        &self.name
    }
    fn contains(&self, repo: &Repo, sha: &str) -> Result<bool, GitError> {
        if self.index.contains_key(sha) {
            return Ok(true);
        }
        if self.exhausted {
            return Ok(false);
        }
        repo.is_ancestor(sha, &self.tip)
    }
}

impl<'r> TargetHistory<'r> {
    pub fn new(repo: &'r Repo, name: &str, tip: &str) -> Result<TargetHistory<'r>, GitError> {
        Ok(TargetHistory {
            name: name.to_string(),
            tip: tip.to_string(),
            walk: Box::new(repo.scan_history(tip, may_name_a_fix)?),
            exhausted: false,
            entries: Vec::new(),
            index: HashMap::new(),
            carriers: HashMap::new(),
            reverts: HashMap::new(),
        })
    }

    /// Reads on until a commit older than `time` (unix seconds) has been read, or the end.
    fn scan_back_to(&mut self, time: i64) -> Result<(), GitError> {
        while !self.exhausted && self.entries.last().is_none_or(|e| e.committer_time >= time) {
            let Some(c) = self.walk.next() else {
                self.exhausted = true;
                break;
            };
            let c = c?;
            let i = self.entries.len();
            if let Some(message) = &c.message {
                for id in trailer_line_values(message, FIXES_FINDING) {
                    self.carriers.entry(id.to_string()).or_default().push(i);
                }
                for reverted in reverted_shas(message) {
                    self.reverts.entry(reverted).or_default().push(i);
                }
            }
            self.index.insert(c.sha.clone(), i);
            self.entries.push(Entry {
                sha: c.sha,
                committer_time: c.committer_time,
            });
        }
        Ok(())
    }

    /// Weighs landings and reverts in history order (anchor: judge): the last event wins, so a
    /// fix reverted and then re-applied is merged, not reverted. `recorded` is when the finding
    /// was recorded (unix seconds): no commit before it can carry its id, so the history is
    /// read back to it, and further only to reach an older fix commit.
    pub fn judge(
        &mut self,
        repo: &Repo,
        id: &str,
        fixes: &[String],
        recorded: i64,
    ) -> Result<Landing, GitError> {
        self.scan_back_to(recorded - CLOCK_ALLOWANCE_S)?;
        let mut landings: Vec<(usize, Via)> = Vec::new();
        for fix in fixes {
            if !self.index.contains_key(fix) && self.contains(repo, fix)? {
                // A fix older than what was read (committed before the finding was recorded).
                self.scan_back_to(repo.commit(fix)?.committer_time)?;
            }
            if let Some(i) = self.index.get(fix) {
                landings.push((*i, Via::Commit));
            }
        }
        for &i in self.carriers.get(id).into_iter().flatten() {
            if !landings.iter().any(|(j, _)| *j == i) {
                landings.push((i, Via::Trailer));
            }
        }
        let state = self.replay(&landings);
        if matches!(state, Landing::Merged { .. }) {
            return Ok(state);
        }
        // A cherry-pick that dropped the line: the same change, after the fix was written.
        for fix in fixes {
            let Some(pid) = repo.patch_id(fix)? else {
                continue;
            };
            let since = repo.commit(fix)?.committer_time - 120;
            self.scan_back_to(since)?;
            for i in 0..self.entries.len() {
                if self.entries[i].committer_time < since || landings.iter().any(|(j, _)| *j == i) {
                    continue;
                }
                if repo.patch_id(&self.entries[i].sha)?.as_deref() == Some(pid.as_str()) {
                    landings.push((i, Via::PatchId));
                }
            }
        }
        Ok(self.replay(&landings))
    }

    /// Replays landings, reverts and reverts of reverts, oldest first.
    fn replay(&self, landings: &[(usize, Via)]) -> Landing {
        #[derive(Clone, Copy)]
        enum Ev {
            Land(usize, Via),
            Revert(usize, usize),
            Reapply(usize),
        }
        let mut events: Vec<(usize, Ev)> = landings
            .iter()
            .map(|(i, v)| (*i, Ev::Land(*i, *v)))
            .collect();
        for (i, _) in landings {
            for r in self
                .reverts
                .get(&self.entries[*i].sha)
                .into_iter()
                .flatten()
            {
                events.push((*r, Ev::Revert(*r, *i)));
                for rr in self
                    .reverts
                    .get(&self.entries[*r].sha)
                    .into_iter()
                    .flatten()
                {
                    events.push((*rr, Ev::Reapply(*rr)));
                }
            }
        }
        // Larger index = older.
        events.sort_by_key(|e| std::cmp::Reverse(e.0));
        let mut state = Landing::NotMerged;
        for (_, ev) in events {
            state = match ev {
                Ev::Land(i, via) => Landing::Merged {
                    commit: self.entries[i].sha.clone(),
                    via,
                },
                Ev::Revert(r, i) => Landing::Reverted {
                    commit: self.entries[i].sha.clone(),
                    reverted_by: self.entries[r].sha.clone(),
                },
                Ev::Reapply(rr) => Landing::Merged {
                    commit: self.entries[rr].sha.clone(),
                    via: Via::Reapplied,
                },
            };
        }
        state
    }
}

/// Whether a raw message may hold a `Fixes-Finding` line (its key matches in any case) or a
/// revert's line; only such messages are decoded and read line by line.
fn may_name_a_fix(raw: &[u8]) -> bool {
    let key = FIXES_FINDING.as_bytes();
    raw.windows(REVERTS.len()).any(|w| w == REVERTS.as_bytes())
        || raw.windows(key.len()).any(|w| w.eq_ignore_ascii_case(key))
}

const REVERTS: &str = "This reverts commit ";

/// The shas a message says it reverts (`This reverts commit <sha>`, as `git revert` writes).
fn reverted_shas(message: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = message;
    while let Some(i) = rest.find(REVERTS) {
        rest = &rest[i + REVERTS.len()..];
        let sha: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        if sha.len() == 40 || sha.len() == 64 {
            out.push(sha.to_ascii_lowercase());
        }
    }
    out
}
