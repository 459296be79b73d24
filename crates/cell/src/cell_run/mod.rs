//! `cell run`: the container cell's loop (SPEC.md §The cell entrypoint). Pull a task, keep its
//! claim alive while the harness works, move the harness's commits (only those) onto the
//! task's target, fence, push, verify, close, and pull again. The decisions are the pure
//! [`machine::Machine`]'s; this module performs them, calling task pull, renew, release and
//! finding close in process and matching on their typed results.

pub mod config;
mod deliver;
mod endings;
mod git;
mod harness;
mod heartbeat;
mod log;
pub mod machine;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::CellError;
use crate::finding_close::{self, Outcome};
use crate::task_claim::{GiveBack as Claim, renew_or_release};
use crate::task_file::TaskFile;
use crate::task_pull::{self, PullOptions, PullStatus};
use config::CellConfig;
use git::Git;
use heartbeat::heartbeat;
use log::{Line, Log};
use machine::{
    Action, Backoff, Event, GiveBack, HarnessEnd, IntegrateEnd, Limits, Machine, PullEnd, Then,
    fail_max_line,
};
use metabob_process::env::Env;
use metabob_process::random::random_u16;
use metabob_wire::report::{self, Hint};

/// The task in hand.
struct Current {
    task: TaskFile,
    /// The commit below the harness's commits: the clone's base, then the target's tip each
    /// rebase moved them onto.
    base: String,
    heartbeat: tokio::task::JoinHandle<()>,
    lost: watch::Receiver<Option<String>>,
}

struct Cell {
    cfg: CellConfig,
    env: Env,
    log: Log,
    machine: Machine,
    git: Git,
    group: harness::Group,
    secrets: Vec<String>,
    current: Option<Current>,
}

/// Runs the loop until nothing is left to do (exit 0), the cell fails (1), the ledger is away
/// past LEDGER_WAIT or not attached (2), or a signal stops it (143 TERM, 130 INT).
pub async fn run(cfg: CellConfig, mut env: Env) -> u8 {
    // The harness and every git step see where the task is.
    env.set("TASK_DIR", cfg.task_dir.to_string_lossy());
    env.set("WORK_DIR", cfg.work_dir.to_string_lossy());
    env.set("ORIGIN", cfg.origin.clone());
    env.set("VESSEL_ID", cfg.vessel_id.clone());
    let log = Log::new(cfg.log_format, &cfg.vessel_id);
    for v in &cfg.retired {
        log.note(
            "start",
            format!("{v} no longer acts: a conflict counts like a failure of the task and never ends the cell"),
        );
    }
    let (mut term, mut int) = match signals() {
        Ok(s) => s,
        Err(e) => {
            log.note("start", format!("cannot listen for signals: {e}"));
            return 1;
        }
    };
    let limits = Limits {
        fail_max: cfg.fail_max,
        push_tries: cfg.push_tries,
        conflict_retries: cfg.conflict_retries,
        retry_max_s: cfg.retry_max_s,
        idle_poll_s: cfg.idle_poll_s,
        wait_when_empty: cfg.wait_when_empty,
        retry_conflicts: false,
    };
    let secrets = ["METABOB_API_KEY"]
        .iter()
        .filter_map(|k| env.get(k).map(str::to_owned))
        .collect();
    let mut cell = Cell {
        git: Git::new(&cfg.work_dir, &env),
        machine: Machine::new(limits),
        cfg,
        env,
        log,
        group: harness::Group::default(),
        secrets,
        current: None,
    };
    // A restarted cell pulls again and, holding its claim still, resumes the same task.
    cell.clear_dirs();
    let interrupted = {
        let work = cell.run_loop();
        tokio::pin!(work);
        tokio::select! {
            code = &mut work => return code,
            _ = term.recv() => 143,
            _ = int.recv() => 130,
        }
    };
    cell.interrupted(interrupted).await
}

fn signals() -> std::io::Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok((
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    ))
}

fn random() -> u64 {
    u64::from(random_u16())
}

impl Cell {
    async fn run_loop(&mut self) -> u8 {
        let mut action = Action::Pull;
        loop {
            let event = match action {
                Action::Pull => Event::Pull(self.pull().await),
                Action::Wait { secs, sweep } => {
                    if sweep {
                        self.sweep().await;
                    }
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    action = Action::Pull;
                    continue;
                }
                Action::RunHarness => Event::Harness(self.harness().await),
                Action::Fence => Event::Fence(self.fence().await),
                Action::Integrate => Event::Integrate(self.integrate().await),
                Action::Push => Event::Push(self.push().await),
                Action::PushAgain { tries } => {
                    let id = self.task_id();
                    self.log.line(Line {
                        step: "push",
                        task: Some(&id),
                        outcome: "race",
                        since: None,
                        reason: None,
                        message: format!("{id}: the push lost a race; fetching and rebasing again"),
                    });
                    tokio::time::sleep(machine::push_pause(tries, random())).await;
                    action = Action::Fence;
                    continue;
                }
                Action::Verify => Event::Verify(self.verify().await),
                Action::Close => Event::Close(self.close().await),
                Action::Redo { attempt, of } => match self.redo(attempt, of).await {
                    Ok(()) => {
                        action = Action::RunHarness;
                        continue;
                    }
                    Err(why) => Event::Integrate(IntegrateEnd::OriginAway { why }),
                },
                Action::GiveBack {
                    how,
                    reason,
                    salvage,
                    then,
                } => {
                    self.give_back(how, &reason, salvage).await;
                    match then {
                        Then::Pull => {
                            action = Action::Pull;
                            continue;
                        }
                        Then::Exit(code) => {
                            let fails = self.machine.fails_in_a_row();
                            self.log
                                .note("stop", fail_max_line(fails, self.cfg.fail_max));
                            return code;
                        }
                    }
                }
                Action::Salvage { why, then } => {
                    self.salvage(&why).await;
                    match then {
                        Then::Pull => {
                            action = Action::Pull;
                            continue;
                        }
                        Then::Exit(code) => return code,
                    }
                }
                Action::Finish { closed } => {
                    self.finish(closed).await;
                    action = Action::Pull;
                    continue;
                }
                Action::Exit(code) => return code,
            };
            action = self.machine.step(event);
        }
    }

    fn task_id(&self) -> String {
        self.current
            .as_ref()
            .map(|c| c.task.task_id.clone())
            .unwrap_or_default()
    }

    fn task_line(
        &self,
        step: &str,
        outcome: &str,
        since: Option<Instant>,
        reason: Option<&str>,
        message: String,
    ) {
        let id = self.task_id();
        self.log.line(Line {
            step,
            task: Some(&id).filter(|i| !i.is_empty()).map(|s| s.as_str()),
            outcome,
            since,
            reason,
            message,
        });
    }

    /// Calls `call` until it succeeds, fails for good, or the outage has lasted `limit`:
    /// pauses with backoff and jitter while `passing` says the failure can clear by itself.
    /// The error that ended it comes back with how long was waited.
    async fn wait_out<T, E, F, Fut>(
        &self,
        who: (&str, &str, Duration),
        passing: impl Fn(&E) -> bool,
        mut call: F,
    ) -> Result<T, (E, Duration)>
    where
        E: Hint + 'static,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let (name, var, limit) = who;
        let mut backoff = Backoff::new(limit);
        let mut away = false;
        loop {
            let e = match call().await {
                Err(e) if passing(&e) => e,
                Err(e) => return Err((e, backoff.waited())),
                Ok(v) => {
                    // Said once, so an operator reading the log sees where the outage ended.
                    if away {
                        let waited = backoff.waited().as_secs();
                        self.log
                            .note(name, format!("the {name} answers again after {waited}s"));
                    }
                    return Ok(v);
                }
            };
            away = true;
            if backoff.first() {
                let secs = limit.as_secs();
                let line = format!(
                    "the {name} does not answer; waiting up to {secs}s ({})",
                    report::with_hint(&e)
                );
                self.log.note(name, line);
            }
            match backoff.next(random()) {
                Some(pause) => tokio::time::sleep(pause).await,
                None => {
                    let (waited, secs) = (backoff.waited().as_secs(), limit.as_secs());
                    let line = format!(
                        "the {name} did not answer for {waited}s ({var}={secs}); giving up"
                    );
                    self.log.note(name, line);
                    return Err((e, backoff.waited()));
                }
            }
        }
    }

    /// A ledger call, with an outage waited out up to LEDGER_WAIT (anchor: ledger_call): only a
    /// failure that can clear by itself is waited on.
    async fn ledger<T, F, Fut>(&self, mut call: F) -> Result<T, CellError>
    where
        F: FnMut(Env) -> Fut,
        Fut: std::future::Future<Output = Result<T, CellError>>,
    {
        let who = ("ledger", "LEDGER_WAIT", self.cfg.ledger_wait);
        self.wait_out(who, CellError::is_outage, || call(self.env.clone()))
            .await
            .map_err(|(e, _)| e)
    }

    /// A git step against the origin, waited out up to ORIGIN_WAIT: a git server that is down
    /// or restarting is the fleet's outage (anchor: origin_call).
    async fn origin<T, F, Fut>(&self, what: &str, call: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, git::GitStepError>>,
    {
        let who = ("origin", "ORIGIN_WAIT", self.cfg.origin_wait);
        self.wait_out(who, |_| true, call)
            .await
            .map_err(|(e, waited)| {
                format!(
                    "{what}: the origin did not answer for {}s: {}",
                    waited.as_secs(),
                    report::line(&e)
                )
            })
    }

    async fn pull(&mut self) -> PullEnd {
        let since = Instant::now();
        let opts = PullOptions {
            origin: self.cfg.origin.clone(),
            task_dir: self.cfg.task_dir.clone(),
            work_dir: self.cfg.work_dir.clone(),
            minutes: self.cfg.claim_minutes,
            trust: None,
            progress: false,
        };
        let report = match self.ledger(|env| task_pull::run(opts.clone(), env)).await {
            Ok(r) => r,
            Err(e) => {
                let why = report::with_hint(&e);
                self.log.line(Line {
                    step: "pull",
                    task: None,
                    outcome: "failed",
                    since: Some(since),
                    reason: Some(&why),
                    message: format!("task pull failed: {why}"),
                });
                self.clear_dirs();
                return if e.is_outage() {
                    PullEnd::LedgerAway
                } else if e.is_not_attached() {
                    PullEnd::Failed { exit: 2 }
                } else {
                    PullEnd::Failed { exit: 1 }
                };
            }
        };
        match report.status {
            PullStatus::Pulled => {
                let Some(task) = report.task else {
                    self.log
                        .note("pull", "task pull answered pulled with no task".into());
                    return PullEnd::Failed { exit: 1 };
                };
                let p = &task.policy;
                self.log.line(Line {
                    step: "pull",
                    task: Some(&task.task_id),
                    outcome: "pulled",
                    since: Some(since),
                    reason: None,
                    message: format!(
                        "pulled {} (push to {}, target {}, conflicts: {})",
                        task.task_id, p.push_branch, p.target, p.conflicts.value
                    ),
                });
                self.machine
                    .set_retry_conflicts(p.conflicts.value == crate::policy::Conflicts::Retry);
                let (tx, lost) = watch::channel(None);
                let heartbeat = tokio::spawn(heartbeat(
                    self.cfg.task_dir.clone(),
                    self.cfg.claim_minutes,
                    self.cfg.renew_every,
                    self.env.clone(),
                    tx,
                    self.log.clone(),
                ));
                self.current = Some(Current {
                    base: task.base.clone(),
                    task,
                    heartbeat,
                    lost,
                });
                PullEnd::Pulled
            }
            PullStatus::NothingOpen => {
                let message = if self.cfg.wait_when_empty {
                    format!("nothing open; looking again in {}s", self.cfg.idle_poll_s)
                } else {
                    "nothing open; done".into()
                };
                self.log.line(Line {
                    step: "pull",
                    task: None,
                    outcome: "nothing_open",
                    since: Some(since),
                    reason: None,
                    message,
                });
                PullEnd::NothingOpen
            }
            PullStatus::TryLater => {
                let after_s = report.retry_after_seconds.unwrap_or(5).max(1) as u64;
                let shown = self.machine.limits().try_later_wait(after_s);
                self.log.line(Line {
                    step: "pull",
                    task: None,
                    outcome: "try_later",
                    since: Some(since),
                    reason: None,
                    message: format!("open tasks are held by others; trying again in {shown}s"),
                });
                PullEnd::TryLater { after_s }
            }
            PullStatus::TaskFailed => {
                let (id, why) = report
                    .failed
                    .map(|f| (f.task_id, f.reason))
                    .unwrap_or_default();
                self.log.line(Line {
                    step: "pull",
                    task: Some(&id),
                    outcome: "parked",
                    since: Some(since),
                    reason: Some(&why),
                    message: format!("parked {id}: {why}; pulling the next task"),
                });
                self.clear_dirs();
                PullEnd::Parked
            }
        }
    }

    async fn harness(&mut self) -> HarnessEnd {
        let since = Instant::now();
        let Some(cur) = self.current.as_ref() else {
            return HarnessEnd::Failed {
                why: "no task in hand".into(),
            };
        };
        let run = harness::Run {
            command: &self.cfg.harness,
            dir: &self.cfg.work_dir,
            env: self.git.env(),
            timeout: self.cfg.harness_timeout,
            group: &self.group,
            lost: cur.lost.clone(),
            secrets: &self.secrets,
        };
        let (stop, tail) = harness::run(run).await;
        let with_tail = |why: String| {
            if tail.is_empty() {
                why
            } else {
                format!("{why}; its last lines: {tail}")
            }
        };
        let end = match stop {
            harness::Stop::Exited(Some(0)) => {
                let base = cur.base.clone();
                match self.git.rev_list(&format!("{base}..HEAD")).await {
                    Ok(c) if !c.is_empty() => HarnessEnd::Committed,
                    Ok(_) => HarnessEnd::NoCommit {
                        why: with_tail("the harness made no commit".into()),
                    },
                    Err(e) => HarnessEnd::Failed {
                        why: format!(
                            "the work tree cannot be read after the harness: {}",
                            report::line(&e)
                        ),
                    },
                }
            }
            harness::Stop::Exited(code) => HarnessEnd::Failed {
                why: with_tail(match code {
                    Some(c) => format!("the harness failed (exit {c})"),
                    None => "the harness was killed by a signal".into(),
                }),
            },
            harness::Stop::TimedOut => HarnessEnd::TimedOut {
                why: with_tail(format!(
                    "the harness ran past HARNESS_TIMEOUT={}s and was stopped",
                    self.cfg.harness_timeout.as_secs()
                )),
            },
            harness::Stop::ClaimLost { why } => HarnessEnd::ClaimLost { why },
            harness::Stop::CouldNotStart(e) => HarnessEnd::Failed {
                why: format!("the harness could not start: {e}"),
            },
        };
        let outcome = match &end {
            HarnessEnd::Committed => "committed",
            HarnessEnd::NoCommit { .. } => "no_commit",
            HarnessEnd::Failed { .. } => "failed",
            HarnessEnd::TimedOut { .. } => "timed_out",
            HarnessEnd::ClaimLost { .. } => "claim_lost",
        };
        let id = self.task_id();
        self.task_line(
            "harness",
            outcome,
            Some(since),
            None,
            format!("{id}: the harness ended: {outcome}"),
        );
        end
    }

    /// `conflicts: retry`: the work tree at the fresh target, which becomes the base.
    async fn redo(&mut self, attempt: u32, of: u32) -> Result<(), String> {
        let Some(cur) = self.current.as_ref() else {
            return Err("no task in hand".into());
        };
        let target = cur.task.policy.target.clone();
        let id = cur.task.task_id.clone();
        self.task_line(
            "redo",
            "retry",
            None,
            None,
            format!("{id}: keeping the claim; running the harness again on the fresh origin/{target} ({attempt} of {of})"),
        );
        self.origin("fetching origin", || self.git.fetch()).await?;
        let rev = format!("refs/remotes/origin/{target}");
        self.git
            .reset_to(&rev)
            .await
            .map_err(|e| report::line(&e))?;
        let base = self
            .git
            .resolve("HEAD")
            .await
            .ok_or_else(|| format!("{rev} does not resolve"))?;
        if let Some(cur) = self.current.as_mut() {
            cur.base = base;
        }
        Ok(())
    }

    /// An idle standing cell closes the reviews merged since its last look.
    async fn sweep(&mut self) {
        let since = Instant::now();
        // Kept between polls, so each sweep fetches rather than clones.
        let cache_dir = self.env.home().map(|h| {
            h.join(".cache/metabob")
                .join(format!("sweep-{}", self.cfg.vessel_id.replace('/', "_")))
        });
        let opts = finding_close::sweep::SweepOptions {
            origin: self.cfg.origin.clone(),
            cache_dir,
        };
        match finding_close::sweep::sweep_pending(opts, self.env.clone()).await {
            Ok(report) => {
                for t in &report.tasks {
                    if let Outcome::Closed { commit, .. } = &t.outcome {
                        self.log.line(Line {
                            step: "sweep",
                            task: Some(&t.task_id),
                            outcome: "closed",
                            since: Some(since),
                            reason: None,
                            message: format!(
                                "{}: the review is merged into {} ({commit}); closed",
                                t.task_id, t.target
                            ),
                        });
                    }
                }
            }
            Err(e) => self.log.note(
                "sweep",
                format!(
                    "the sweep of merged reviews failed: {}",
                    report::with_hint(&e)
                ),
            ),
        }
    }
}
