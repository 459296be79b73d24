//! The cell loop's decisions, as a pure state machine (SPEC.md §The loop): what a step's result
//! means for the task and for the cell. The driver (`super::run`) performs each [`Action`] and
//! feeds its result back as an [`Event`]; nothing here touches a process, a clock or the
//! network, so every rule is tested by the table below and a model of the exit rules.

use std::time::Duration;

/// The limits the machine applies (from [`super::config::CellConfig`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub fail_max: u32,
    pub push_tries: u32,
    pub conflict_retries: u32,
    pub retry_max_s: u64,
    pub idle_poll_s: u64,
    pub wait_when_empty: bool,
    /// Under `conflicts: retry` (the task's policy), set per task.
    pub retry_conflicts: bool,
}

impl Limits {
    /// How long a cell waits after "held by others, try again in `after_s`": the ledger's
    /// hint (the earliest claim end), at most RETRY_MAX, and under ON_EMPTY=wait at most
    /// IDLE_POLL as well, so a task recorded meanwhile reaches a standing cell within a poll.
    pub fn try_later_wait(&self, after_s: u64) -> u64 {
        let mut most = self.retry_max_s.max(1);
        if self.wait_when_empty {
            most = most.min(self.idle_poll_s.max(1));
        }
        after_s.clamp(1, most)
    }
}

/// How `task pull` came out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PullEnd {
    Pulled,
    NothingOpen,
    /// Open tasks are held by others, or the origin is away: look again then.
    TryLater {
        after_s: u64,
    },
    /// The task failed for a cause of its own and was parked by the pull.
    Parked,
    /// The ledger stayed away past LEDGER_WAIT.
    LedgerAway,
    /// Not attached for a lasting cause, or this cell failed: the exit code.
    Failed {
        exit: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HarnessEnd {
    /// Exited 0 with commits on top of the base.
    Committed,
    /// Exited 0 with no commit; the reason carries its last lines.
    NoCommit {
        why: String,
    },
    Failed {
        why: String,
    },
    TimedOut {
        why: String,
    },
    /// A renewal said the claim is another cell's (or the task closed): the harness was stopped.
    ClaimLost {
        why: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceEnd {
    Held,
    Lost { why: String },
    LedgerAway,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntegrateEnd {
    Clean,
    Conflict {
        files: Vec<String>,
    },
    /// The origin lacks the target branch: the task's cause (a push never creates it).
    NoTarget {
        branch: String,
    },
    OriginAway {
        why: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushEnd {
    Landed,
    /// Another push moved the branch first.
    Race,
    /// The server refused for a lasting reason: a hook, a protected branch, a permission.
    Refused {
        why: String,
    },
    OriginAway {
        why: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseEnd {
    Closed,
    /// Under review: the verdict is pending until the task branch is merged.
    Pending,
    /// Reverted, unpushed, refused, not open: nothing closed.
    NotClosed {
        outcome: String,
    },
    LedgerAway,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Pull(PullEnd),
    Harness(HarnessEnd),
    Fence(FenceEnd),
    Integrate(IntegrateEnd),
    Push(PushEnd),
    /// Whether the origin's branch shows the pushed commit (as its tip or below it).
    Verify(bool),
    Close(CloseEnd),
}

/// How a claim ends when the task is given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveBack {
    /// A plain release: nothing is held against the task.
    Release,
    /// `task failed`: counts toward parking it, and this cell is not offered it again.
    Fail,
    /// Parked at once with the reason: the cause is certain and lasting.
    Park,
}

/// What comes after a task is given back or finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    Pull,
    Exit(u8),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Pull,
    /// Sleep, then pull. `sweep`: an idle standing cell closes merged reviews first.
    Wait {
        secs: u64,
        sweep: bool,
    },
    RunHarness,
    Fence,
    Integrate,
    Push,
    /// Push lost a race: pause (tries so far), then fence and integrate again.
    PushAgain {
        tries: u32,
    },
    Verify,
    Close,
    /// `conflicts: retry`: reset the work tree to the fresh target and run the harness again.
    Redo {
        attempt: u32,
        of: u32,
    },
    /// End the claim as `how`, with the reason; keep the commits as a bundle when `salvage`.
    GiveBack {
        how: GiveBack,
        reason: String,
        salvage: bool,
        then: Then,
    },
    /// The claim is gone (another cell's, or the ledger cannot confirm it): push nothing, keep
    /// the commits as a bundle, end nothing.
    Salvage {
        why: String,
        then: Then,
    },
    /// The task is done with (closed or pending review): the claim ends with the verdict.
    Finish {
        closed: bool,
    },
    Exit(u8),
}

/// The loop's state between steps.
#[derive(Clone, Debug)]
pub struct Machine {
    pub limits: Limits,
    /// Tasks this cell failed since it last finished one: FAIL_MAX of them stop a broken cell.
    fails_in_a_row: u32,
    task: Option<TaskState>,
}

#[derive(Clone, Debug, Default)]
struct TaskState {
    redone: u32,
    push_tries: u32,
}

/// Why FAIL_MAX stopped the cell, in the log's words.
pub fn fail_max_line(fails: u32, max: u32) -> String {
    format!("{fails} tasks failed in a row (FAIL_MAX={max}); stopping")
}

impl Machine {
    pub fn new(limits: Limits) -> Machine {
        Machine {
            limits,
            fails_in_a_row: 0,
            task: None,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn fails_in_a_row(&self) -> u32 {
        self.fails_in_a_row
    }

    /// A new task's policy: whether a conflict keeps the claim for another run.
    pub fn set_retry_conflicts(&mut self, retry: bool) {
        self.limits.retry_conflicts = retry;
    }

    /// The next action after `event`.
    pub fn step(&mut self, event: Event) -> Action {
        match event {
            Event::Pull(end) => self.after_pull(end),
            Event::Harness(end) => match end {
                HarnessEnd::Committed => Action::Fence,
                HarnessEnd::NoCommit { why }
                | HarnessEnd::Failed { why }
                | HarnessEnd::TimedOut { why } => self.fail(why, false),
                HarnessEnd::ClaimLost { why } => self.salvage(why, Then::Pull),
            },
            Event::Fence(end) => match end {
                FenceEnd::Held => Action::Integrate,
                FenceEnd::Lost { why } => self.salvage(why, Then::Pull),
                FenceEnd::LedgerAway => self.salvage(
                    "the ledger did not answer the renewal before the push".into(),
                    Then::Exit(2),
                ),
            },
            Event::Integrate(end) => match end {
                IntegrateEnd::Clean => Action::Push,
                IntegrateEnd::Conflict { files } => self.conflict(files),
                IntegrateEnd::NoTarget { branch } => self.give_back(
                    GiveBack::Park,
                    format!(
                        "the origin has no branch {branch} (the target); a push never creates it"
                    ),
                    true,
                ),
                IntegrateEnd::OriginAway { why } => self.give_back(GiveBack::Release, why, true),
            },
            Event::Push(end) => match end {
                PushEnd::Landed => Action::Verify,
                PushEnd::Race => {
                    let task = self.task.get_or_insert_with(TaskState::default);
                    task.push_tries += 1;
                    if task.push_tries < self.limits.push_tries {
                        Action::PushAgain {
                            tries: task.push_tries,
                        }
                    } else {
                        let n = task.push_tries;
                        self.give_back(
                            GiveBack::Release,
                            format!("the push lost to other pushes {n} times (PUSH_TRIES={n})"),
                            true,
                        )
                    }
                }
                PushEnd::Refused { why } => self.give_back(
                    GiveBack::Park,
                    format!("the origin refused the push: {why}"),
                    true,
                ),
                PushEnd::OriginAway { why } => self.give_back(GiveBack::Release, why, true),
            },
            Event::Verify(true) => Action::Close,
            Event::Verify(false) => self.give_back(
                GiveBack::Release,
                "the push did not verify: the origin's branch does not hold the pushed commit"
                    .into(),
                true,
            ),
            Event::Close(end) => match end {
                CloseEnd::Closed | CloseEnd::Pending => {
                    self.fails_in_a_row = 0;
                    self.task = None;
                    Action::Finish {
                        closed: end == CloseEnd::Closed,
                    }
                }
                CloseEnd::NotClosed { outcome } => self.give_back(
                    GiveBack::Release,
                    format!("the fix is {outcome} (finding close), not closed"),
                    false,
                ),
                // The fix is on the origin: a later sweep or cell closes it.
                CloseEnd::LedgerAway => {
                    self.task = None;
                    Action::Exit(2)
                }
            },
        }
    }

    fn after_pull(&mut self, end: PullEnd) -> Action {
        match end {
            PullEnd::Pulled => {
                self.task = Some(TaskState::default());
                Action::RunHarness
            }
            PullEnd::NothingOpen if self.limits.wait_when_empty => Action::Wait {
                secs: self.limits.idle_poll_s,
                sweep: true,
            },
            PullEnd::NothingOpen => Action::Exit(0),
            PullEnd::TryLater { after_s } => Action::Wait {
                secs: self.limits.try_later_wait(after_s),
                sweep: false,
            },
            PullEnd::Parked => Action::Pull,
            PullEnd::LedgerAway => Action::Exit(2),
            PullEnd::Failed { exit } => Action::Exit(exit),
        }
    }

    /// A conflict with the target: under `conflicts: retry` the claim is kept for a bounded
    /// number of fresh runs; then, or at once, the task goes back as failed here. A conflict is
    /// the task's and the target's, never the cell's: it does not count toward FAIL_MAX.
    fn conflict(&mut self, files: Vec<String>) -> Action {
        let task = self.task.get_or_insert_with(TaskState::default);
        if self.limits.retry_conflicts && task.redone < self.limits.conflict_retries {
            task.redone += 1;
            task.push_tries = 0;
            return Action::Redo {
                attempt: task.redone,
                of: self.limits.conflict_retries,
            };
        }
        let files = if files.is_empty() {
            String::new()
        } else {
            format!(" in {}", files.join(", "))
        };
        self.give_back(
            GiveBack::Fail,
            format!("the fix conflicts with the target{files}"),
            false,
        )
    }

    /// The harness's failure: counted toward parking the task, and toward FAIL_MAX.
    fn fail(&mut self, reason: String, salvage: bool) -> Action {
        self.fails_in_a_row += 1;
        let then = if self.fails_in_a_row >= self.limits.fail_max {
            Then::Exit(1)
        } else {
            Then::Pull
        };
        self.task = None;
        Action::GiveBack {
            how: GiveBack::Fail,
            reason,
            salvage,
            then,
        }
    }

    /// A give-back that is not the cell's failure: the cell goes on.
    fn give_back(&mut self, how: GiveBack, reason: String, salvage: bool) -> Action {
        self.task = None;
        Action::GiveBack {
            how,
            reason,
            salvage,
            then: Then::Pull,
        }
    }

    fn salvage(&mut self, why: String, then: Then) -> Action {
        self.task = None;
        Action::Salvage { why, then }
    }
}

/// Waits out an outage (of the ledger or the origin): pauses of 1, 2, 4, 8, then 16 s, each
/// plus up to as much again at random, until `limit` seconds of pauses have passed.
#[derive(Clone, Debug)]
pub struct Backoff {
    limit: Duration,
    waited: Duration,
    pause: Duration,
}

const MAX_PAUSE: Duration = Duration::from_secs(16);

impl Backoff {
    pub fn new(limit: Duration) -> Backoff {
        Backoff {
            limit,
            waited: Duration::ZERO,
            pause: Duration::from_secs(1),
        }
    }

    /// Whether this is the first pause (the driver logs the outage once).
    pub fn first(&self) -> bool {
        self.waited.is_zero()
    }

    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The next pause, or `None` once the limit is spent. `random` is any value from the
    /// caller's random source: the jitter is `random` modulo the pause, in milliseconds.
    pub fn next(&mut self, random: u64) -> Option<Duration> {
        if self.waited >= self.limit {
            return None;
        }
        let span = self.pause.as_millis() as u64;
        let pause = self.pause + Duration::from_millis(random % span.max(1));
        self.waited += pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        Some(pause)
    }
}

/// The pause before push attempt `tries + 1`: 50-450 ms times the tries so far, so that cells
/// that finished together do not keep colliding in step.
pub fn push_pause(tries: u32, random: u64) -> Duration {
    Duration::from_millis((random % 400 + 50) * u64::from(tries.max(1)))
}

#[cfg(test)]
mod tests;
