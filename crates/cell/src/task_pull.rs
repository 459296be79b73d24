//! `task pull`: the cell's entrypoint step (SPEC.md §task pull). Takes a task from the ledger,
//! claims it, clones the origin at the task's validated ref and writes the task directory.
//! Anything that fails after the claim withdraws it.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::CellError;
use super::policy::{CONVENTION_SHAPE, Convention};
use super::task_file::TaskFile;
use crate::ledger::claims;
use crate::ledger::recall::{self, LedgerView, Recalled};
use crate::ledger::related;
use metabob_net::attachment::{Attachment, ResolveError, vessel_id};
use metabob_process::clock::now_ms;
use metabob_process::env::Env;
use metabob_wire::claims::{
    ClaimAction, ClaimOutcome, ClaimWord, Held, MAX_TAKE_CANDIDATES, Passed, TakeAsk, lapses_at,
    rendezvous,
};
use metabob_wire::finding::Finding;
use metabob_wire::header::Header;
use metabob_wire::repo_identity::{Aliases, identity_of_origin, vessel_aliases};
use metabob_wire::repo_path::{NotRepoPath, partition_repo_paths};
use metabob_wire::row::{BadRow, RowMeta, read_rows};
use metabob_wire::text::rfc3339_ms;
use metabob_wire::verdict::{Standing, failed_by};

mod setup;

pub use setup::SetupError;
use setup::{Pull, SetUp};

/// How soon to look again when a claim did not settle either way.
const UNSETTLED_RETRY_MS: i64 = 5_000;
/// How soon to look again when the origin could not be reached: its outage is the fleet's,
/// and the task goes back to the board untouched.
const ORIGIN_RETRY_MS: i64 = 15_000;

#[derive(Clone, Debug)]
pub struct PullOptions {
    pub origin: String,
    pub task_dir: PathBuf,
    pub work_dir: PathBuf,
    pub minutes: i64,
    pub trust: Option<String>,
    /// Clone progress on stderr; the caller sets it when stderr is a terminal.
    pub progress: bool,
}

/// A task that failed to set up for a cause of its own, and was parked for it.
#[derive(Clone, Debug, Serialize)]
pub struct TaskFailure {
    pub task_id: String,
    pub reason: String,
    /// Whether the park was written; when it was not, the claim was withdrawn and the task is
    /// parked by the next cell that fails it.
    pub parked: bool,
}

/// What happened to one candidate: a claim's outcome, or withdrawn after the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateOutcome {
    Claim(ClaimWord),
    /// Claimed, then parked because the task cannot be set up (its ref is refused or missing).
    Parked,
    /// Claimed, then given back untouched because the origin could not be reached.
    Withdrawn,
    /// This cell failed it before: it is left to other cells (SPEC.md §Parked tasks).
    FailedHere,
}

impl CandidateOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateOutcome::Claim(w) => w.as_str(),
            CandidateOutcome::Parked => "parked",
            CandidateOutcome::Withdrawn => "withdrawn",
            CandidateOutcome::FailedHere => "failed_here",
        }
    }

    /// Whether the task may come free later: someone else holds it, our claim never settled,
    /// or the origin was away.
    fn may_come_free(self) -> bool {
        matches!(
            self,
            CandidateOutcome::Claim(ClaimWord::Held | ClaimWord::Lost | ClaimWord::Unsettled)
                | CandidateOutcome::Withdrawn
        )
    }
}

impl Serialize for CandidateOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What happened to one candidate.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub task_id: String,
    pub concept_id: String,
    pub summary: String,
    pub outcome: CandidateOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PullStatus {
    Pulled,
    NothingOpen,
    TryLater,
    /// The task taken failed for a cause of its own and was parked: pull again (exit 5).
    TaskFailed,
}

/// The reply: `--json` prints it as is.
#[derive(Clone, Debug, Serialize)]
pub struct PullReport {
    pub status: PullStatus,
    pub task: Option<TaskFile>,
    /// When a cell that found every task held should look again: the earliest claim end.
    pub retry_after: Option<String>,
    pub retry_after_seconds: Option<i64>,
    /// With `task_failed`: the task, and why it was parked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<TaskFailure>,
    pub candidates: Vec<Candidate>,
    /// The ledger's window was full: older tasks may exist past it and were not considered.
    /// Only the read-back path reads the window; on the take path this is always false.
    pub recall_truncated: bool,
    /// How the claim was decided: `take` when the ledger advertises the atomic take, else
    /// `read_back` (SPEC.md §Claim paths).
    pub claim_path: ClaimPath,
}

/// The two ways a pull claims (anchor: ClaimPath).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimPath {
    /// The ledger claims the first free candidate in the write that decides it.
    Take,
    /// One claim row per candidate, read back and weighed by the holder rule.
    ReadBack,
}

impl ClaimPath {
    /// The path the attached ledger offers: the take when it advertises one. Asked on every
    /// pull, even with nothing free, so that every report names it.
    pub async fn offered(att: &Attachment) -> ClaimPath {
        if claims::ledger_takes(att).await {
            ClaimPath::Take
        } else {
            ClaimPath::ReadBack
        }
    }

    /// What this path reads before it claims (anchor: ClaimPath::recall): the read-back path
    /// weighs every candidate itself, so it reads the recall window; the take asks the ledger
    /// for a task directly and reads nothing, so its cost does not grow with the ledger.
    pub async fn recall(
        self,
        att: &Attachment,
        aliases: &Aliases,
    ) -> Result<Option<LedgerView>, ResolveError> {
        match self {
            ClaimPath::Take => Ok(None),
            ClaimPath::ReadBack => recall::recall(att, aliases).await.map(Some),
        }
    }
}

/// The open tasks of a recall, sorted before any claim is tried (anchor: classify_tasks).
#[derive(Debug, Default)]
pub struct Classified<'a> {
    /// Tasks this cell already holds: renewed first, so a restarted cell resumes its own work.
    mine: Vec<&'a Recalled>,
    /// Tasks nobody holds, most severe first, then in this cell's own order (rendezvous).
    free: Vec<&'a Recalled>,
    /// Tasks another cell holds, with the claim that holds them.
    held: Vec<(&'a Recalled, Held)>,
}

impl<'a> Classified<'a> {
    pub fn open(&self) -> usize {
        self.mine.len() + self.free.len() + self.held.len()
    }

    /// The candidates to claim, in order.
    fn to_claim(&self) -> impl Iterator<Item = &'a Recalled> + '_ {
        self.mine.iter().chain(&self.free).copied()
    }
}

/// Open tasks: category task, recorded open, no verdict that closes it, holds a fix or parks
/// it, not failed by this cell, and ready unless this cell holds it; then who holds each at
/// `now`. Pure: nothing is sent.
pub fn classify<'a>(view: &'a LedgerView, me: &str, now: i64) -> Classified<'a> {
    let mut c = Classified::default();
    for r in view.findings.iter().filter(|r| {
        r.finding.is_task()
            && r.finding.status.is_open()
            && matches!(view.standing(&r.finding), Standing::Open)
            && !failed_by(view.verdicts_for(&r.finding))
                .iter()
                .any(|c| c == me)
    }) {
        match view.holder(&r.finding, now) {
            Some(h) if h.holder == me => c.mine.push(r),
            // A blocked task is not offered, nor waited for; one this cell holds already is
            // kept (SPEC.md §Dependencies).
            _ if !view.open_blockers(&r.finding).is_empty() => {}
            Some(h) => c.held.push((r, h)),
            None => c.free.push(r),
        }
    }
    // Within a severity every cell has its own order, so cells started together mostly try
    // different tasks first instead of all racing for the oldest.
    c.free.sort_by_cached_key(|r| {
        (
            r.finding.severity,
            std::cmp::Reverse(rendezvous(me, r.finding.id())),
        )
    });
    c
}

/// Runs the pull (anchor: run_task_pull).
pub async fn run(opts: PullOptions, mut env: Env) -> Result<PullReport, CellError> {
    metabob_git::check_origin(&opts.origin)?;
    for (dir, flag) in [
        (&opts.task_dir, "--task-dir"),
        (&opts.work_dir, "--work-dir"),
    ] {
        ensure_empty(dir, flag)?;
    }
    let work_abs = absolute(&env, &opts.work_dir);
    let att = super::attach_once(&mut env, &work_abs).await?;
    let Some(me) = vessel_id(&env, &work_abs) else {
        return Err(CellError::NoVesselIdentity);
    };
    let session = att.claim().session.clone();
    let repository = identity_of_origin(&opts.origin);
    let aliases = vessel_aliases(&repository);
    let path = ClaimPath::offered(&att).await;
    let view = path.recall(&att, &aliases).await?;
    let tasks = view.as_ref().map(|v| classify(v, &me, now_ms()));
    let truncated = view.as_ref().is_some_and(|v| v.findings_truncated);
    let conventions = read_conventions(&att, &repository).await?;
    let mut claimer = Claimer::start(
        &att,
        tasks.as_ref(),
        path,
        (&repository, &aliases),
        &me,
        &session,
        opts.minutes,
    );
    let pull = Pull {
        opts: &opts,
        env: &env,
        att: &att,
        me: &me,
        session: &session,
        repository: &repository,
    };
    if let Some((r, held)) = claimer.next().await? {
        let (r, refused) = repository_paths(r);
        // A briefing without its related findings is still a task to do: the read's failure is
        // written into context.md, never as zero findings.
        let related = match &view {
            Some(view) => Ok(related::in_view(view, &r)),
            None => related::on_files(&att, &aliases, &r)
                .await
                .map_err(|e| metabob_wire::report::with_hint(&e)),
        };
        // One task a pull: a task that fails ends the pull with its own status, so the
        // entrypoint sees every failure and can tell a poison queue from a broken cell.
        let failed = match pull
            .set_up(&r, &held, &conventions, &related, &refused)
            .await?
        {
            SetUp::Done(task) => {
                let mut report = claimer.report(truncated);
                report.status = PullStatus::Pulled;
                report.task = Some(*task);
                return Ok(report);
            }
            SetUp::Parked(failure) => {
                claimer.set_outcome(CandidateOutcome::Parked, failure.reason.clone());
                Some(failure)
            }
            SetUp::OriginAway { why } => {
                claimer.set_outcome(CandidateOutcome::Withdrawn, why);
                claimer.retry_in(ORIGIN_RETRY_MS);
                None
            }
        };
        let mut report = claimer.report(truncated);
        if failed.is_some() {
            report.status = PullStatus::TaskFailed;
            report.failed = failed;
        }
        return Ok(report);
    }
    Ok(claimer.report(truncated))
}

/// The task with only the files that are repository paths (anchor: task-files), and the
/// refusals of the others: a row written before the rule, or by a hostile key straight into the
/// store, may name `../../etc/passwd`, which must never reach task.json. Each refused path is
/// named in one warning; the rest of the task is kept.
fn repository_paths(mut r: Recalled) -> (Recalled, Vec<NotRepoPath>) {
    let (kept, refused) = partition_repo_paths(&r.files);
    if !refused.is_empty() {
        tracing::warn!(
            "task {}: skipped {} file(s) that are not repository paths: {}; kept {}",
            r.finding.id(),
            refused.len(),
            refused_list(&refused),
            if kept.is_empty() {
                "none".to_string()
            } else {
                kept.join(", ")
            }
        );
    }
    r.files = kept;
    (r, refused)
}

/// `"/etc/passwd" (it is absolute), …`: the first five, the rest counted.
pub(crate) fn refused_list(refused: &[NotRepoPath]) -> String {
    const NAMED: usize = 5;
    let mut named: Vec<String> = refused
        .iter()
        .take(NAMED)
        .map(|e| format!("{} ({})", e.shown(), e.rule))
        .collect();
    if refused.len() > NAMED {
        named.push(format!("and {} more", refused.len() - NAMED));
    }
    named.join(", ")
}

/// The claim step of a pull (anchor: Claimer): takes the candidates of a classified recall in
/// order on the ledger's [claim path](ClaimPath) and hands out, one at a time, a task this
/// cell now holds, noting what happened to every candidate. `task pull` sets up what it hands
/// out; the fleet bench runs it alone.
pub struct Claimer<'a> {
    att: &'a Attachment,
    repository: &'a str,
    aliases: &'a Aliases,
    me: &'a str,
    session: &'a str,
    minutes: i64,
    path: ClaimPath,
    /// The candidates in order, and how many of them have been tried.
    order: Vec<&'a Recalled>,
    tried: usize,
    /// The take has nothing more to offer.
    exhausted: bool,
    /// Open tasks seen: those classified, and those a take named as held by others.
    open_seen: usize,
    /// Tasks handed out so far: a later take never hands them out again.
    handed: Vec<String>,
    candidates: Vec<Candidate>,
    retry_at: Option<i64>,
}

impl<'a> Claimer<'a> {
    /// A claimer on `path` over the classified tasks, if a recall was read (on the take path
    /// none is: the ledger chooses); notes the tasks others hold.
    pub fn start(
        att: &'a Attachment,
        tasks: Option<&Classified<'a>>,
        path: ClaimPath,
        (repository, aliases): (&'a str, &'a Aliases),
        me: &'a str,
        session: &'a str,
        minutes: i64,
    ) -> Claimer<'a> {
        let mut c = Claimer {
            att,
            repository,
            aliases,
            me,
            session,
            minutes,
            path,
            order: tasks.map(|t| t.to_claim().collect()).unwrap_or_default(),
            tried: 0,
            exhausted: false,
            open_seen: tasks.map_or(0, Classified::open),
            handed: Vec::new(),
            candidates: Vec::new(),
            retry_at: None,
        };
        for (r, h) in tasks.iter().flat_map(|t| &t.held) {
            c.note(
                &r.finding,
                CandidateOutcome::Claim(ClaimWord::Held),
                Some(h),
            );
        }
        c
    }

    pub fn path(&self) -> ClaimPath {
        self.path
    }

    /// What happened to each candidate so far.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The next task this cell holds, and the claim that holds it; `None` once no candidate is
    /// left. A lost race moves on to the next candidate at once.
    pub async fn next(&mut self) -> Result<Option<(Recalled, Held)>, CellError> {
        match self.path {
            ClaimPath::Take => self.by_take().await,
            ClaimPath::ReadBack => self.by_read_back().await,
        }
    }

    /// The atomic take: the ledger claims the first candidate nobody else holds, or with the
    /// last candidates (or none), the first of the repository's other open tasks, and names the
    /// candidates it passed over and, when it took nothing, the tasks others hold.
    async fn by_take(&mut self) -> Result<Option<(Recalled, Held)>, CellError> {
        while !self.exhausted {
            let left = self.order.len() - self.tried;
            let n = left.min(MAX_TAKE_CANDIDATES);
            let last = n == left;
            let ask: Vec<&'a Recalled> = self.order[self.tried..self.tried + n].to_vec();
            let findings: Vec<&Finding> = ask.iter().map(|r| &r.finding).collect();
            let request = TakeAsk {
                candidates: &findings,
                repository: last.then_some(self.repository),
                skip: &self.handed,
            };
            let take = claims::take(self.att, &request, self.me, self.session, self.minutes)
                .await
                .map_err(|e| match e {
                    // Only the key itself can refuse a take: no task can be taken with it.
                    e @ ResolveError::KeyReadOnly { .. } => CellError::KeyRefused(e),
                    e => e.into(),
                })?;
            let by_id = |id: &str| ask.iter().position(|r| r.finding.concept_id == id);
            for (id, why) in &take.passed {
                if let Some(i) = by_id(id) {
                    let (outcome, held) = match why {
                        Passed::Held(h) => (CandidateOutcome::Claim(ClaimWord::Held), Some(h)),
                        Passed::Closed | Passed::Busy => {
                            (CandidateOutcome::Claim(ClaimWord::Closed), None)
                        }
                        Passed::FailedHere => (CandidateOutcome::FailedHere, None),
                    };
                    self.note(&ask[i].finding, outcome, held);
                }
            }
            self.open_seen += take.waiting.len();
            for w in &take.waiting {
                let waits = CandidateOutcome::Claim(ClaimWord::Held);
                self.note_task(&w.task_id, &w.concept_id, &w.summary, waits, Some(&w.held));
            }
            let Some(taken) = take.taken else {
                self.tried += n;
                self.exhausted = last;
                continue;
            };
            let word = CandidateOutcome::Claim(if taken.renewed {
                ClaimWord::Renewed
            } else {
                ClaimWord::Claimed
            });
            let held = taken.held;
            let recalled = match by_id(&taken.task.concept_id) {
                Some(at) => {
                    self.tried += at + 1;
                    ask[at].clone()
                }
                // One of the repository's tasks this cell's recall did not reach; every
                // candidate before it was passed over.
                None => {
                    self.tried += n;
                    let files = self.aliases.map_finding(
                        taken.task.repo.as_deref().unwrap_or_default(),
                        &taken.task.files,
                    );
                    let Some(files) = files else {
                        let why = "the ledger handed out a task of another repository";
                        withdraw(self.att, &taken.task, self.me, self.session, why).await;
                        return Err(CellError::ForeignTask);
                    };
                    Recalled {
                        files,
                        finding: taken.task,
                    }
                }
            };
            self.handed.push(recalled.finding.concept_id.clone());
            self.note(&recalled.finding, word, Some(&held));
            return Ok(Some((recalled, held)));
        }
        Ok(None)
    }

    /// The read-back path: one claim per candidate, in order, until one holds.
    async fn by_read_back(&mut self) -> Result<Option<(Recalled, Held)>, CellError> {
        while let Some(&r) = self.order.get(self.tried) {
            self.tried += 1;
            let f = &r.finding;
            let outcome = claims::claim_finding(
                self.att,
                f,
                self.me,
                self.session,
                self.minutes,
                ClaimAction::Claim,
                None,
            )
            .await?;
            let word = CandidateOutcome::Claim(outcome.word());
            match outcome {
                ClaimOutcome::Claimed { held } | ClaimOutcome::Renewed { held } => {
                    self.note(f, word, Some(&held));
                    return Ok(Some((r.clone(), held)));
                }
                ClaimOutcome::Held { by: h } | ClaimOutcome::Lost { winner: h } => {
                    self.note(f, word, Some(&h))
                }
                // A claim can only be refused for the key itself (read-only): no task can be
                // taken.
                ClaimOutcome::Refused { reason } => {
                    return Err(CellError::ClaimRefused { reason });
                }
                ClaimOutcome::Unsettled | ClaimOutcome::Closed | ClaimOutcome::Released => {
                    self.note(f, word, None)
                }
            }
        }
        Ok(None)
    }

    /// Lists a candidate; a task someone holds is worth looking at again when their claim ends.
    fn note(&mut self, f: &Finding, outcome: CandidateOutcome, held: Option<&Held>) {
        self.note_task(f.id(), &f.concept_id, &f.summary, outcome, held);
    }

    fn note_task(
        &mut self,
        task_id: &str,
        concept_id: &str,
        summary: &str,
        outcome: CandidateOutcome,
        held: Option<&Held>,
    ) {
        if outcome.may_come_free() {
            let at = held.map_or(now_ms() + UNSETTLED_RETRY_MS, lapses_at);
            self.retry_at = Some(self.retry_at.map_or(at, |t| t.min(at)));
        }
        self.candidates.push(Candidate {
            task_id: task_id.to_string(),
            concept_id: concept_id.to_string(),
            summary: summary.to_string(),
            outcome,
            detail: held.map(held_line),
        });
    }

    /// The task handed out last could not be set up: what became of it, and why.
    fn set_outcome(&mut self, outcome: CandidateOutcome, why: String) {
        if let Some(last) = self.candidates.last_mut() {
            last.outcome = outcome;
            last.detail = Some(why);
        }
    }

    /// Look again no later than `ms` from now.
    fn retry_in(&mut self, ms: i64) {
        let at = now_ms() + ms;
        self.retry_at = Some(self.retry_at.map_or(at, |t| t.min(at)));
    }

    /// The report so far. Nothing pulled: tasks others hold, whose claim did not settle, or
    /// given back while the origin was away can still come free (try later); a parked task or
    /// one closed meanwhile cannot.
    pub fn report(self, recall_truncated: bool) -> PullReport {
        let mut report = PullReport {
            status: PullStatus::NothingOpen,
            task: None,
            retry_after: None,
            retry_after_seconds: None,
            failed: None,
            candidates: self.candidates,
            recall_truncated,
            claim_path: self.path,
        };
        // A task given back while the origin was away may be one the take found itself, which
        // no count of open tasks holds.
        let origin_away = report
            .candidates
            .iter()
            .any(|c| c.outcome == CandidateOutcome::Withdrawn);
        if (self.open_seen > 0 || origin_away)
            && report.candidates.iter().any(|c| c.outcome.may_come_free())
        {
            let at = self.retry_at.unwrap_or(now_ms() + UNSETTLED_RETRY_MS);
            report.status = PullStatus::TryLater;
            report.retry_after = Some(rfc3339_ms(at));
            report.retry_after_seconds = Some(((at - now_ms()).max(0) + 999) / 1000);
        }
        report
    }
}

fn held_line(h: &Held) -> String {
    format!("{} until {}", h.holder, rfc3339_ms(h.until_ms))
}

/// Ends this cell's claim on `f`, recording `why`; the callers say what became of the task.
async fn withdraw(att: &Attachment, f: &Finding, me: &str, session: &str, why: &str) {
    if let Err(e) =
        claims::claim_finding(att, f, me, session, 0, ClaimAction::Release, Some(why)).await
    {
        tracing::warn!(
            "the withdrawal was not written ({}); the claim lapses by itself",
            metabob_wire::report::line(&e)
        );
    }
}

fn absolute(env: &Env, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        env.cwd().join(p)
    }
}

/// A task never reuses a directory: each must be empty or missing.
fn ensure_empty(dir: &Path, flag: &'static str) -> Result<(), CellError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(CellError::NotEmpty {
                dir: dir.to_path_buf(),
                flag,
            }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CellError::Unreadable {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// This repository's `project_convention` concepts.
async fn read_conventions(
    att: &Attachment,
    repository: &str,
) -> Result<Vec<Convention>, ResolveError> {
    let window = recall::read_window(att, CONVENTION_SHAPE).await?;
    let ours = |c: &Value| -> Result<Option<Convention>, BadRow> {
        let Some(row) = RowMeta::read(c)? else {
            return Ok(None);
        };
        let h = Header::parse(&row.content);
        row.check_header(&h)?;
        let repo = h.get("repo").map(str::to_ascii_lowercase);
        if repo.as_deref() != Some(repository.to_ascii_lowercase().as_str()) {
            return Ok(None);
        }
        Ok(Some(Convention {
            concept_id: row.concept_id,
            seq: row.seq,
            content: row.content,
        }))
    };
    Ok(read_rows(&window.rows, "project convention", ours))
}

#[cfg(test)]
mod tests;
