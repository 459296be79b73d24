//! The set-up step of `task pull`: a task this cell now holds becomes a work directory cloned
//! at the task's ref and a task directory holding task.json and context.md. A task that cannot
//! be set up has its claim withdrawn, and a cause of its own parks it.

use std::path::Path;

use metabob_git::GitError;
use metabob_wire::report::{self, Hint};

use super::{PullOptions, TaskFailure, withdraw};
use crate::CellError;
use crate::ledger::parking::{self};
use crate::ledger::recall::Recalled;
use crate::ledger::related::Related;
use crate::policy::{self, Convention, Policy, TrustList};
use crate::task_file::{TaskClaim, TaskFile, TaskPolicy};
use metabob_net::attachment::Attachment;
use metabob_process::clock::now_ms;
use metabob_process::env::Env;
use metabob_process::files::write_atomic;
use metabob_process::guard::redact_url_credentials;
use metabob_wire::claims::Held;
use metabob_wire::finding::Finding;
use metabob_wire::header::find_line;
use metabob_wire::parking::Parked;
use metabob_wire::refname::validate_ref;
use metabob_wire::repo_path::NotRepoPath;
use metabob_wire::report::with_hint;
use metabob_wire::text::rfc3339_ms;

/// One pull's set-up step: what it reads besides the task.
pub(super) struct Pull<'a> {
    pub(super) opts: &'a PullOptions,
    pub(super) env: &'a Env,
    pub(super) att: &'a Attachment,
    pub(super) me: &'a str,
    pub(super) session: &'a str,
    pub(super) repository: &'a str,
}

/// What setting up a held task came to.
pub(super) enum SetUp {
    Done(Box<TaskFile>),
    /// Its ref is refused, none of its files is a repository path, or the origin has no such
    /// ref or lacks its target: the task is parked.
    Parked(TaskFailure),
    /// The origin could not be reached: the claim was withdrawn, nothing is held against the
    /// task, and the pull says try later. `why` is the line the withdrawal was written with.
    OriginAway {
        why: String,
    },
}

/// Why a claimed task could not be set up; each cause has one owner of what follows
/// (anchor: SetupFailure).
enum SetupFailure {
    /// What the task itself names cannot be had: it is parked.
    Task(TaskFault),
    /// The origin or the network failed: the fleet's outage, waited out.
    Origin(SetupError),
    /// This cell failed (its disk, its directories): the pull fails, exit 1.
    Cell(SetupError),
}

/// A cause of the task's own: what it names cannot be had.
#[derive(Debug, thiserror::Error)]
enum TaskFault {
    #[error("the origin has no branch or tag {name:?} (the task's ref)")]
    NoRef { name: String },
    #[error(transparent)]
    Unplaced(#[from] policy::Unplaced),
}

impl Hint for TaskFault {
    fn hint(&self) -> Option<String> {
        match self {
            TaskFault::NoRef { .. } => None,
            TaskFault::Unplaced(e) => e.hint(),
        }
    }
}

/// What failed while setting up a task this cell holds, other than the task itself: the clone
/// or this cell's own disk.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("the clone stopped")]
    Stopped(#[source] tokio::task::JoinError),
    #[error("cloning {origin} failed")]
    Clone {
        /// Credentials masked.
        origin: String,
        #[source]
        source: GitError,
    },
    #[error(transparent)]
    Write(#[from] crate::task_file::WriteError),
}

impl Hint for SetupError {
    fn hint(&self) -> Option<String> {
        match self {
            SetupError::Clone { source, .. } => source.hint(),
            SetupError::Stopped(_) | SetupError::Write(_) => None,
        }
    }
}

impl Pull<'_> {
    /// Sets up a task this cell holds. A task that cannot be set up has its claim withdrawn
    /// and what the pull wrote cleared; a cause of the task's own parks it.
    pub(super) async fn set_up(
        &self,
        r: &Recalled,
        held: &Held,
        conventions: &[Convention],
        related: &Result<Related, String>,
        refused: &[NotRepoPath],
    ) -> Result<SetUp, CellError> {
        let f = &r.finding;
        // Past the claim: every failure withdraws it, so one bad task never blocks the fleet
        // for the claim's length. A task none of whose files is a repository path names no
        // work a harness may do: its own cause, as certain as a refused ref.
        if r.files.is_empty() && !refused.is_empty() {
            let why = format!(
                "no file of the task is a repository path: {}",
                super::refused_list(refused)
            );
            return Ok(self.park(f, why).await);
        }
        let trust = TrustList::new(
            self.opts.trust.as_deref(),
            self.env,
            f.recorded_by.as_deref(),
        );
        let policy = policy::decide(&f.details, conventions, &trust);
        let reference = find_line(&f.details, "ref").map(str::to_owned);
        if let Some(reference) = &reference
            && let Err(refused) = validate_ref(reference)
        {
            let why = format!("ref {reference:?} refused: {}", with_hint(&refused));
            return Ok(self.park(f, why).await);
        }
        let setup = Setup {
            net: self.att.net(),
            repository: self.repository,
            policy: &policy,
            trust,
            held,
            me: self.me,
            session: self.session,
            reference,
        };
        let failure = match setup.run(self.opts, r, related).await {
            Ok(task) => return Ok(SetUp::Done(Box::new(task))),
            Err(failure) => failure,
        };
        clear(&self.opts.work_dir);
        clear(&self.opts.task_dir);
        // The reasons go to the ledger: the clone's own error may quote the origin whole,
        // password and all.
        match failure {
            SetupFailure::Task(fault) => {
                let why = redact_url_credentials(&report::with_hint(&fault));
                Ok(self.park(f, why).await)
            }
            SetupFailure::Origin(e) => {
                let why = redact_url_credentials(&report::with_hint(&e));
                tracing::warn!("{why}; the claim on {} goes back, try later", f.id());
                withdraw(self.att, f, self.me, self.session, &why).await;
                Ok(SetUp::OriginAway { why })
            }
            SetupFailure::Cell(e) => {
                let why = redact_url_credentials(&report::with_hint(&e));
                withdraw(self.att, f, self.me, self.session, &why).await;
                Err(CellError::SetUp {
                    task: f.id().to_string(),
                    source: e,
                })
            }
        }
    }

    /// Parks a task whose own cause failed it, at once: the cause is certain, so no other cell
    /// needs to try. The park ends this cell's claim too (a parked task is held by nobody); a
    /// park that cannot be written falls back to a withdrawal.
    async fn park(&self, f: &Finding, reason: String) -> SetUp {
        let parked = Parked {
            reason: reason.clone(),
            tried_by: vec![self.me.to_string()],
        };
        let written = match parking::park(self.att, f, self.me, self.session, &parked).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "parking {} failed ({}); withdrawing the claim",
                    f.id(),
                    report::line(&e)
                );
                false
            }
        };
        withdraw(self.att, f, self.me, self.session, &reason).await;
        SetUp::Parked(TaskFailure {
            task_id: f.id().to_string(),
            reason,
            parked: written,
        })
    }
}

/// Removes what a failed pull left in a directory that was empty when it started.
fn clear(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

/// What setting up a claimed task needs besides the pull's options.
struct Setup<'a> {
    net: &'a metabob_net::NetClient,
    repository: &'a str,
    policy: &'a Policy,
    trust: TrustList,
    held: &'a Held,
    me: &'a str,
    session: &'a str,
    reference: Option<String>,
}

impl Setup<'_> {
    /// Clones the work directory and writes task.json and context.md; the error line says
    /// which step failed.
    async fn run(
        self,
        opts: &PullOptions,
        r: &Recalled,
        related: &Result<Related, String>,
    ) -> Result<TaskFile, SetupFailure> {
        let (origin, work, progress) = (opts.origin.clone(), opts.work_dir.clone(), opts.progress);
        let net = self.net.clone();
        let branch = self.reference.clone();
        let (policy, task_id) = (self.policy.clone(), r.finding.id().to_string());
        // The clone knows the origin's default branch and its branches, so where the fix goes
        // is decided against it; a target the origin lacks is the task's cause.
        let (base, placed) = tokio::task::spawn_blocking(move || {
            metabob_git::clone_at(&origin, &work, branch.as_deref(), progress, &net).map(
                |(repo, sha)| {
                    let head = repo.remote_default_branch("origin");
                    let placed = policy.place(&task_id, head.as_deref(), |b| {
                        repo.has_remote_branch("origin", b)
                    });
                    (sha, placed)
                },
            )
        })
        .await
        .map_err(|e| SetupFailure::Cell(SetupError::Stopped(e)))?
        .map_err(|e| {
            let cloning = |source| SetupError::Clone {
                origin: redact_url_credentials(&opts.origin),
                source,
            };
            match e {
                // Only what the task names can fail it: its ref here, its target below. A remote
                // or network that did not answer is waited out; a lasting refusal (trust,
                // credentials) is this cell's.
                GitError::RefNotFound { name } => SetupFailure::Task(TaskFault::NoRef { name }),
                e @ GitError::Clone { lasting: false, .. } => SetupFailure::Origin(cloning(e)),
                e => SetupFailure::Cell(cloning(e)),
            }
        })?;
        let placed = placed.map_err(|e| SetupFailure::Task(e.into()))?;

        let f = &r.finding;
        let policy = self.policy;
        let task = TaskFile {
            base,
            category: f.category.clone(),
            claim: TaskClaim {
                holder: self.held.holder.clone(),
                minutes: opts.minutes,
                until: rfc3339_ms(self.held.until_ms),
            },
            concept_id: f.concept_id.clone(),
            details: f.details.clone(),
            files: r.files.clone(),
            finding_ids: f.finding_ids.clone(),
            // The clone's remote keeps what it needs to push; the file never holds a password.
            origin: redact_url_credentials(&opts.origin),
            policy: TaskPolicy {
                conflicts: policy.conflicts.clone(),
                integrate: policy.integrate.clone(),
                push_branch: placed.push_branch,
                push_to: policy.push_to.clone(),
                push_why: placed.why,
                refused: policy.refused.clone(),
                target: placed.target.value,
                target_source: placed.target.source,
            },
            pulled_at: rfc3339_ms(now_ms()),
            recorder: f.recorded_by.clone(),
            reference: self.reference,
            repository: self.repository.to_string(),
            session: self.session.to_string(),
            severity: f.severity,
            summary: f.summary.clone(),
            task_id: f.id().to_string(),
            trust: self.trust,
            vessel_id: self.me.to_string(),
        };
        task.write(&opts.task_dir.join("task.json"))
            .map_err(|e| SetupFailure::Cell(e.into()))?;
        let context = context_md(r, related, &task);
        let path = opts.task_dir.join("context.md");
        write_atomic(&path, context.as_bytes(), Some(0o600)).map_err(|source| {
            SetupFailure::Cell(crate::task_file::WriteError::Io { path, source }.into())
        })?;
        Ok(task)
    }
}

/// The harness's briefing: details, policy, open non-task findings on the task's files, and the
/// task as recorded.
fn context_md(r: &Recalled, related: &Result<Related, String>, task: &TaskFile) -> String {
    use std::fmt::Write as _;
    let f = &r.finding;
    let mut s = String::new();
    let _ = writeln!(s, "# Task {}: {}\n", f.id(), f.summary);
    let _ = writeln!(
        s,
        "Severity {}; files: {}\n",
        f.severity,
        r.files.join(", ")
    );
    let _ = writeln!(
        s,
        "## Details\n\n{}\n",
        if f.details.trim().is_empty() {
            "(none)"
        } else {
            f.details.trim()
        }
    );
    let _ = writeln!(s, "## Integration policy\n");
    let p = &task.policy;
    let _ = writeln!(
        s,
        "- push to `{}` — {}\n- integrate: {} ({})\n- conflicts: {} ({})\n- the fix closes once merged \
         into `{}` ({}); commit it with a `Fixes-Finding: {}` trailer\n",
        p.push_branch,
        p.push_why,
        p.integrate.value,
        p.integrate.source,
        p.conflicts.value,
        p.conflicts.source,
        p.target,
        p.target_source,
        f.id()
    );
    let empty = Related::default();
    let related = match related {
        Ok(related) => {
            let more = if related.truncated { " or more" } else { "" };
            let n = related.findings.len();
            let _ = writeln!(s, "## Open findings on these files ({n}{more})\n");
            related
        }
        Err(why) => {
            let _ = writeln!(s, "## Open findings on these files (not read: {why})\n");
            &empty
        }
    };
    for o in &related.findings {
        let _ = writeln!(
            s,
            "- [{}][{}] {} — {} ({})",
            o.finding.severity,
            o.finding.category,
            o.finding.summary,
            o.files.join(", "),
            o.finding.id()
        );
    }
    let _ = writeln!(
        s,
        "\n## The task as recorded\n\n```json\n{}\n```",
        serde_json::to_string_pretty(task).unwrap_or_default()
    );
    s
}
