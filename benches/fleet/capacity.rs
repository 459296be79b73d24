//! `capacity`: how many cells one ledger core holds. A cell that holds a task costs the ledger
//! its renewals (a third of the claim apart) and, when the task ends, its close and next pull;
//! this mode measures what each of the two costs the ledger (and PostgreSQL) in CPU, with N
//! simulated cells holding claims on the real schedule, and derives the cells one core holds.
//!
//! A cell here is a few hundred bytes of state, not a process or a tokio task: one scheduler (a
//! heap of due events) drives all of them, at most `IN_FLIGHT` requests at once, each step with
//! the library's own calls (the pull's `Claimer` on the take path and its related-findings read,
//! `claim_finding(.., Renew, ..)`, the fixed verdict), as the `fleet` mode's cells make them.
//!
//! A run: record N + spare tasks and let every holder take one (setup, not measured); window A,
//! renewals only; window B, holders also close their task after a random length and pull the
//! next, renewals still running. The real schedule is 60-minute claims and 10-minute tasks;
//! `--claim-minutes M` compresses both by 60/M so that a small fleet sends enough operations in
//! a short window. The cost per operation is what is measured; the rate is the schedule's.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metabob_cell::ledger::claims::{claim_finding, ledger_takes};
use metabob_cell::ledger::recall::Recalled;
use metabob_cell::ledger::{related, verdict};
use metabob_cell::task_pull::{ClaimPath, Claimer};
use metabob_net::attachment::Attachment;
use metabob_process::clock::now_ms;
use metabob_process::random::random_u16;
use metabob_wire::claims::{CLAIM_SKEW_MS, ClaimAction, ClaimOutcome};
use metabob_wire::repo_identity::{Aliases, identity_of_origin, vessel_aliases};
use metabob_wire::verdict::{NewVerdict, VerdictKind, VerdictOrigin};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, timeout_at};

use super::{
    Bench, Errors, Ledgers, Opts, REQUEST_LIMIT, Res, Store, WARMUP, clock_ticks, cpu_sum, pg,
    quantile_ms, server_cpu, server_cpu_between, sim,
};

/// Requests in flight at once, as the `fleet` mode bounds its pulls: past it, a due step waits
/// its turn, and the wait shows as schedule lag.
const IN_FLIGHT: usize = 64;
/// Renewals a window should hold when `--claim-minutes` is not given: fewer and one slow request
/// or a neighbour's burst on the shared cores moves the per-renewal cost by whole percents.
const RENEWALS_AIMED: usize = 500;
/// The claim a cell really asks for; the compression is measured against it.
const REAL_CLAIM_MINUTES: i64 = 60;
/// How long a failed step waits before it is tried again.
const PAUSE: Duration = Duration::from_secs(1);
/// The longest one run's setup (recording and the first takes) may take unless `--run-deadline`
/// says otherwise: past it the run is reported as not set up rather than measured.
const SETUP_LIMIT: Duration = Duration::from_secs(900);
/// Takes in a row that found nothing free before the setup stops: the ledger has no more to
/// hand out to this fleet, and waiting for it would only spend the deadline.
const DRY_TAKES: usize = 256;
/// How long the requests still in flight at the end get to finish.
const DRAIN: Duration = Duration::from_secs(60);

pub async fn capacity(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    let seconds = opts.seconds_or(60.0);
    let window = Duration::from_secs_f64(seconds);
    let ticks = clock_ticks();
    println!(
        "| store | cells | holding | setup s (record + take) | claim min (schedule x) | window s \
         | renewals | renewals/s | ledger CPU ms/renewal | PG CPU ms/renewal | tasks settled \
         | ledger CPU ms/task | PG CPU ms/task | lag p99 ms (A, B) | doubles | lost claims | errors |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    // Cells outside, stores inside: the stores of one size run back to back, so a disturbance
    // on the shared machine lands on neighbours that are compared.
    for n in opts.cells_or(&[1000, 10_000, 50_000]) {
        for &store in &opts.stores {
            let label = format!("{} with {n} cells", store.name());
            let latest_start = deadline.checked_sub(2 * window + WARMUP + DRAIN);
            if latest_start.is_none_or(|t| Instant::now() >= t) {
                notes.push(format!("- {label}: not run, the deadline would pass"));
                continue;
            }
            let plan = Plan::new(n, opts, window);
            eprintln!(
                "fleet: capacity, {} store, {n} cells, {} tasks, {}-minute claims, {seconds} s windows",
                store.name(),
                n + plan.spare,
                plan.claim_minutes
            );
            let setup_by = latest_start
                .map_or(deadline, |t| t)
                .min(Instant::now() + opts.run_deadline.unwrap_or(SETUP_LIMIT));
            let r = run(bench, store, &plan, setup_by, ticks).await?;
            println!("{}", r.row(&store.name(), &plan));
            notes.extend(r.errors.notes(&label));
            notes.extend(r.notes.iter().map(|n| format!("- {label}: {n}")));
            rows.push((store, plan, r));
        }
    }
    if !notes.is_empty() {
        println!();
        for n in &notes {
            println!("{n}");
        }
    }
    cell_hours(&rows, opts.task_minutes);
    let doubles: usize = rows.iter().map(|(_, _, r)| r.doubles).sum();
    if doubles > 0 {
        return Err(format!("{doubles} tasks were handed to two holders"));
    }
    Ok(())
}

/// One run's schedule.
#[derive(Clone, Copy)]
struct Plan {
    cells: usize,
    spare: usize,
    window: Duration,
    claim_minutes: i64,
    /// A third of the claim, as the cell's heartbeat renews.
    period: Duration,
    /// A task's mean length, compressed as the claim is.
    task_mean: Duration,
}

impl Plan {
    fn new(cells: usize, opts: &Opts, window: Duration) -> Plan {
        // Unless told, the longest claim (up to the real 60 minutes) that still gives a window
        // RENEWALS_AIMED renewals: N * W / (20 s * M) >= aimed.
        let claim_minutes = opts.claim_minutes.unwrap_or_else(|| {
            let m = cells as f64 * window.as_secs_f64() / (20.0 * RENEWALS_AIMED as f64);
            (m.floor() as i64).clamp(1, REAL_CLAIM_MINUTES)
        });
        let period = Duration::from_secs(claim_minutes as u64 * 20);
        // task minutes at 60-minute claims, times M/60: seconds = task minutes * M.
        let task_mean = Duration::from_secs_f64(opts.task_minutes * claim_minutes as f64);
        // Enough spare tasks that window B's settles do not run out: a quarter more than the
        // mean, plus one per request in flight.
        let settles = cells as f64 * window.as_secs_f64() / task_mean.as_secs_f64();
        let spare = (settles * 1.25).ceil() as usize + IN_FLIGHT;
        Plan {
            cells,
            spare,
            window,
            claim_minutes,
            period,
            task_mean,
        }
    }

    /// How much faster than the real 60-minute schedule this one runs.
    fn scale(&self) -> f64 {
        REAL_CLAIM_MINUTES as f64 / self.claim_minutes as f64
    }
}

/// What one window counted. A step counts in the window its answer arrived in, the window
/// the CPU is read over.
#[derive(Default)]
struct Window {
    renewals: u64,
    /// Closed and the next task taken.
    settled: u64,
    /// The ledger replicas' user + sys CPU seconds over the window.
    ledger_cpu: f64,
    pg_cpu: Option<f64>,
    /// How late each step of the window started against its schedule.
    lag: Vec<Duration>,
}

/// One run's figures.
#[derive(Default)]
struct RunFigures {
    holding: usize,
    record: Duration,
    take: Duration,
    /// The setup did not finish within its bound, so nothing was measured.
    not_set_up: bool,
    measured: bool,
    a: Window,
    b: Window,
    doubles: usize,
    /// Renewals or closes sent after the claim had lapsed, and renewals the ledger did not
    /// answer with "renewed".
    lost_claims: usize,
    errors: Errors,
    /// Pulls the ledger handed no task.
    found_nothing: usize,
    notes: Vec<String>,
}

impl RunFigures {
    fn row(&self, store: &str, plan: &Plan) -> String {
        let secs = plan.window.as_secs_f64();
        let per = |cpu: f64, n: u64| {
            if n == 0 {
                "-".to_string()
            } else {
                format!("{:.3}", 1000.0 * cpu / n as f64)
            }
        };
        let lag = |w: &Window| {
            let mut l = w.lag.clone();
            l.sort_unstable();
            quantile_ms(&l, 0.99).map_or("-".into(), |v| format!("{v:.0}"))
        };
        let head = format!(
            "| {store} | {} | {} | {:.1} + {:.1}{} | {} ({:.0}x) |",
            plan.cells,
            self.holding,
            self.record.as_secs_f64(),
            self.take.as_secs_f64(),
            if self.not_set_up {
                ", not set up within the bound"
            } else {
                ""
            },
            plan.claim_minutes,
            plan.scale()
        );
        let tail = format!(
            " {} | {} | {} |",
            self.doubles,
            self.lost_claims,
            self.errors.total()
        );
        if !self.measured {
            return format!("{head} - | - | - | - | - | - | - | - | - |{tail}");
        }
        let settled_cpu = self.settled_cpu();
        format!(
            "{head} {secs:.0} + {secs:.0} | {} + {} | {:.1} | {} | {} | {} | {} | {} | {}, {} |{tail}",
            self.a.renewals,
            self.b.renewals,
            self.a.renewals as f64 / secs,
            per(self.a.ledger_cpu, self.a.renewals),
            self.a
                .pg_cpu
                .map_or("-".into(), |c| per(c, self.a.renewals)),
            self.b.settled,
            settled_cpu.map_or("-".into(), |(l, _)| per(l, self.b.settled)),
            settled_cpu
                .and_then(|(_, p)| p)
                .map_or("-".into(), |p| per(p, self.b.settled)),
            lag(&self.a),
            lag(&self.b),
        )
    }

    /// Window B's CPU less its renewals' share at window A's cost per renewal: what the settles
    /// cost (ledger, PostgreSQL).
    fn settled_cpu(&self) -> Option<(f64, Option<f64>)> {
        if self.a.renewals == 0 {
            return None;
        }
        let share = self.b.renewals as f64 / self.a.renewals as f64;
        let ledger = self.b.ledger_cpu - self.a.ledger_cpu * share;
        let pg = self.a.pg_cpu.zip(self.b.pg_cpu).map(|(a, b)| b - a * share);
        Some((ledger, pg))
    }

    /// Ledger and PostgreSQL CPU milliseconds per renewal and per settled task.
    fn costs(&self) -> Option<Costs> {
        let (ledger, pg) = self.settled_cpu()?;
        if self.b.settled == 0 {
            return None;
        }
        let (r, t) = (self.a.renewals as f64, self.b.settled as f64);
        Some(Costs {
            ledger_renewal: 1000.0 * self.a.ledger_cpu / r,
            ledger_task: 1000.0 * ledger / t,
            pg: self
                .a
                .pg_cpu
                .zip(pg)
                .map(|(a, b)| (1000.0 * a / r, 1000.0 * b / t)),
        })
    }
}

struct Costs {
    ledger_renewal: f64,
    ledger_task: f64,
    /// Per renewal, per task.
    pg: Option<(f64, f64)>,
}

/// The derived table: CPU seconds per cell-hour on the real schedule and the cells one core
/// holds, with the arithmetic spelled out under it.
fn cell_hours(rows: &[(Store, Plan, RunFigures)], task_minutes: f64) {
    // A task of exponential length (mean T) held under a claim renewed every P = 20 minutes is
    // renewed once at each multiple of P it outlives: sum over k >= 1 of e^(-kP/T), which is
    // 1 / (e^(P/T) - 1). A cell settles 60/T tasks an hour.
    let period = REAL_CLAIM_MINUTES as f64 / 3.0;
    let tasks_h = 60.0 / task_minutes;
    let renewals_h = tasks_h / ((period / task_minutes).exp() - 1.0);
    println!();
    println!(
        "At {REAL_CLAIM_MINUTES}-minute claims (a renewal every {period:.0} min) and tasks of \
         exponential length, mean {task_minutes} min: a cell-hour is {tasks_h:.2} tasks settled \
         and {renewals_h:.3} renewals ({tasks_h:.2} / (e^({period:.0}/{task_minutes}) - 1)); \
         CPU s per cell-hour = ({renewals_h:.3} x ms/renewal + {tasks_h:.2} x ms/task) / 1000; \
         cells one core holds = 3600 / (CPU s per cell-hour). The bound in brackets takes \
         {:.0} renewals an hour (every held task renewed all hour long).",
        REAL_CLAIM_MINUTES as f64 / period
    );
    println!();
    println!(
        "| store | cells | ledger CPU s / cell-hour | cells per ledger core | PG CPU s / cell-hour | cells per PG core |"
    );
    println!("|---|---|---|---|---|---|");
    let all_h = REAL_CLAIM_MINUTES as f64 / period;
    let hour = |per_renewal: f64, per_task: f64, renewals: f64| {
        (renewals * per_renewal + tasks_h * per_task) / 1000.0
    };
    let cells = |s: f64| {
        if s > 0.0 {
            format!("{:.0}", 3600.0 / s)
        } else {
            "-".into()
        }
    };
    for (store, plan, r) in rows {
        let Some(c) = r.costs() else {
            println!("| {} | {} | - | - | - | - |", store.name(), plan.cells);
            continue;
        };
        let ledger = hour(c.ledger_renewal, c.ledger_task, renewals_h);
        let ledger_all = hour(c.ledger_renewal, c.ledger_task, all_h);
        let (pg_s, pg_cells) = c.pg.map_or(("-".into(), "-".into()), |(pr, pt)| {
            let s = hour(pr, pt, renewals_h);
            let s_all = hour(pr, pt, all_h);
            (
                format!("{s:.4} ({s_all:.4})"),
                format!("{} ({})", cells(s), cells(s_all)),
            )
        });
        println!(
            "| {} | {} | {ledger:.4} ({ledger_all:.4}) | {} ({}) | {pg_s} | {pg_cells} |",
            store.name(),
            plan.cells,
            cells(ledger),
            cells(ledger_all),
        );
    }
}

/// What every step shares: the attachments (one per replica, holders alternate), the
/// repository and the claim's length.
struct Ctx {
    atts: Vec<Attachment>,
    repository: String,
    aliases: Aliases,
    minutes: i64,
}

fn names(i: usize) -> (String, String) {
    (format!("cap-cell-{i:05}"), format!("cap-session-{i:05}"))
}

/// A pull's outcome: the task taken, and a failed related-findings read (which a pull only
/// logs).
struct Pulled {
    got: Result<Option<Recalled>, String>,
    until_ms: i64,
    related: Option<String>,
}

enum Op {
    Renew(Recalled),
    /// Closes the task held, if any, then pulls the next.
    Settle(Option<Recalled>),
}

enum Done {
    Renewed(Result<ClaimOutcome, String>),
    Settled {
        closed: Option<Result<(), String>>,
        /// Boxed: a task's finding is large, and every renewal's answer would carry its room.
        pulled: Option<Box<Pulled>>,
    },
}

impl Ctx {
    fn att(&self, i: usize) -> &Attachment {
        &self.atts[i % self.atts.len()]
    }

    async fn run(&self, i: usize, op: Op) -> Done {
        let (me, session) = names(i);
        let att = self.att(i);
        match op {
            Op::Renew(task) => Done::Renewed(
                claim_finding(
                    att,
                    &task.finding,
                    &me,
                    &session,
                    self.minutes,
                    ClaimAction::Renew,
                    None,
                )
                .await
                .map_err(|e| format!("renew: {e}")),
            ),
            Op::Settle(task) => {
                let closed = match &task {
                    Some(t) => {
                        let fix = NewVerdict {
                            finding: &t.finding,
                            kind: VerdictKind::Fixed,
                            reviewed_by: Some(me.clone()),
                            session: session.clone(),
                            origin: VerdictOrigin::Remote,
                            lines: vec![("fix", format!("commit {:040x}", now_ms()))],
                        };
                        Some(
                            verdict::write(att, &fix, "fleet-bench")
                                .await
                                .map(drop)
                                .map_err(|e| format!("close: {e}")),
                        )
                    }
                    None => None,
                };
                if matches!(closed, Some(Err(_))) {
                    return Done::Settled {
                        closed,
                        pulled: None,
                    };
                }
                // A holder's first pull (the setup's) skips the related findings: it is not
                // measured, and with 50,000 tasks on the simulation's 97 files that read is most
                // of a setup's time. A pull after a close reads them, as `task pull` does.
                let pulled = self.pull(att, &me, &session, task.is_some()).await;
                Done::Settled {
                    closed,
                    pulled: Some(Box::new(pulled)),
                }
            }
        }
    }

    /// What `task pull` asks the ledger on the take path, as the `fleet` mode's cells do: the
    /// path offered, one take by repository, and with `related` the related findings on the
    /// task's files.
    async fn pull(&self, att: &Attachment, me: &str, session: &str, related: bool) -> Pulled {
        let path = ClaimPath::offered(att).await;
        let mut claimer = Claimer::start(
            att,
            None,
            path,
            (&self.repository, &self.aliases),
            me,
            session,
            self.minutes,
        );
        let (got, until_ms) = match claimer.next().await {
            Ok(Some((task, held))) => (Ok(Some(task)), held.until_ms),
            Ok(None) => (Ok(None), 0),
            Err(e) => (Err(format!("take: {e}")), 0),
        };
        let related = match &got {
            Ok(Some(task)) if related => related::on_files(att, &self.aliases, task)
                .await
                .err()
                .map(|e| format!("related findings: {e}")),
            _ => None,
        };
        Pulled {
            got,
            until_ms,
            related,
        }
    }
}

#[derive(Default)]
struct Holder {
    task: Option<Recalled>,
    /// The ledger's end of the claim last answered.
    until_ms: i64,
    next_renew: Option<Instant>,
    close_at: Option<Instant>,
    busy: bool,
    /// Holds nothing and asks for nothing more.
    gone: bool,
    /// Has taken a task: its first take is setup, later ones are settles.
    ever_held: bool,
    /// Closed its task and has yet to take the next: the settle is counted when it does.
    closed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Setup,
    /// The setup's last takes are still in flight: window A starts after them.
    Settling,
    Warm(Instant),
    A(Instant),
    B(Instant),
    Done,
}

/// The scheduler's state: the holders, the heap of due steps, and the figures.
struct Sched {
    plan: Plan,
    holders: Vec<Holder>,
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Holders yet to take their first task.
    pending: VecDeque<usize>,
    /// Holders neither holding a task nor gone.
    unsettled: usize,
    /// Holders that took their first task.
    first_takes: usize,
    pulls_in_flight: usize,
    dry_streak: usize,
    /// Task id → the holder it was handed to.
    handed: HashMap<String, usize>,
    phase: Phase,
    figures: RunFigures,
    /// Ledger CPU (user + sys) and PostgreSQL server CPU at the last window boundary.
    cpu_mark: (f64, Option<HashMap<String, f64>>),
}

impl Sched {
    fn push(&mut self, i: usize) {
        let h = &self.holders[i];
        if h.gone {
            return;
        }
        let renew = h.task.as_ref().and(h.next_renew);
        if let Some(t) = [renew, h.close_at].into_iter().flatten().min() {
            self.heap.push(Reverse((t, i)));
        }
    }

    /// The window a moment falls in.
    fn window(&mut self, t: Instant) -> Option<&mut Window> {
        match self.phase {
            Phase::A(end) if t <= end => Some(&mut self.figures.a),
            Phase::B(end) if t <= end => Some(&mut self.figures.b),
            _ => None,
        }
    }

    /// The step holder `i` is due for at `now`, if any, marked in flight.
    fn due(&mut self, i: usize, now: Instant) -> Option<Op> {
        let h = &self.holders[i];
        if h.busy || h.gone {
            return None;
        }
        let (op, due) = match (h.close_at, &h.task, h.next_renew) {
            (Some(c), task, _) if c <= now => (Op::Settle(task.clone()), c),
            (_, Some(task), Some(r)) if r <= now => (Op::Renew(task.clone()), r),
            // An entry left from before the holder's last step: its own entry is later.
            _ => return None,
        };
        // Past its end and the skew every reader allows, the claim is anyone's: the schedule
        // fell that far behind.
        let lapsed = h.task.is_some() && now_ms() > h.until_ms + CLAIM_SKEW_MS;
        if lapsed {
            self.figures.lost_claims += 1;
        }
        if let Op::Settle(_) = op {
            self.pulls_in_flight += 1;
        }
        self.holders[i].busy = true;
        if let Some(w) = self.window(now) {
            w.lag.push(now - due);
        }
        Some(op)
    }

    /// A step's answer.
    fn done(&mut self, i: usize, done: Done, now: Instant) {
        self.holders[i].busy = false;
        match done {
            Done::Renewed(answer) => {
                match answer {
                    Ok(ClaimOutcome::Renewed { held }) => {
                        self.holders[i].until_ms = held.until_ms;
                        if let Some(w) = self.window(now) {
                            w.renewals += 1;
                        }
                    }
                    Ok(other) => {
                        self.figures.lost_claims += 1;
                        self.figures
                            .errors
                            .add(format!("renewal answered {}", other.word().as_str()));
                        self.drop_holder(i);
                        return;
                    }
                    // As the heartbeat: a failed renewal only logs, the claim has two more
                    // renewals' time.
                    Err(e) => self.figures.errors.add(e),
                }
                let h = &mut self.holders[i];
                h.next_renew = h.next_renew.map(|t| t + self.plan.period);
            }
            Done::Settled { closed, pulled } => {
                self.pulls_in_flight -= 1;
                match closed {
                    Some(Err(e)) => {
                        self.figures.errors.add(e);
                        self.holders[i].close_at = Some(now + PAUSE);
                        self.push(i);
                        return;
                    }
                    Some(Ok(())) => {
                        let h = &mut self.holders[i];
                        h.task = None;
                        h.next_renew = None;
                        h.close_at = None;
                        h.closed = true;
                    }
                    None => {}
                }
                let Some(p) = pulled else { return };
                if let Some(e) = p.related {
                    self.figures.errors.add(e);
                }
                match p.got {
                    Ok(Some(task)) => self.took(i, task, p.until_ms, now),
                    // A take that found nothing free is a cell told to try later: with two
                    // replicas the one free task may have been another take's at that moment.
                    // The setup stops on a run of them (the ledger has no more to hand out).
                    Ok(None) => {
                        if self.phase == Phase::Setup {
                            self.dry_streak += 1;
                        }
                        self.figures.found_nothing += 1;
                        if !self.retry_pull(i, now) {
                            return;
                        }
                    }
                    Err(e) => {
                        self.figures.errors.add(e);
                        if !self.retry_pull(i, now) {
                            return;
                        }
                    }
                }
            }
        }
        self.push(i);
    }

    fn took(&mut self, i: usize, task: Recalled, until_ms: i64, now: Instant) {
        let id = task.finding.id().to_string();
        match self.handed.get(&id) {
            Some(&j) if j != i => {
                self.figures.doubles += 1;
                self.figures
                    .notes
                    .push(format!("task {id} handed to holder {j} and to holder {i}"));
            }
            _ => {
                self.handed.insert(id, i);
            }
        }
        let first = !self.holders[i].ever_held;
        if first {
            self.unsettled -= 1;
            self.first_takes += 1;
            self.dry_streak = 0;
        }
        if self.holders[i].closed
            && let Some(w) = self.window(now)
        {
            w.settled += 1;
        }
        let settling = matches!(self.phase, Phase::B(_));
        let h = &mut self.holders[i];
        h.ever_held = true;
        h.closed = false;
        h.task = Some(task);
        h.until_ms = until_ms;
        // A first task's renewals start at a uniformly random phase, so the fleet's renewals are
        // spread as a long-running fleet's are; a later one's a full period after its take, as
        // the heartbeat's.
        h.next_renew = Some(if first {
            now + self.plan.period.mul_f64(unit())
        } else {
            now + self.plan.period
        });
        h.close_at = settling.then(|| now + self.plan.task_mean.mul_f64(-unit().ln()));
    }

    /// Pulls again after a pause while pulls are part of the phase (the setup, window B); else
    /// lets the holder go. Whether it pulls again.
    fn retry_pull(&mut self, i: usize, now: Instant) -> bool {
        if self.phase == Phase::Setup || matches!(self.phase, Phase::B(_)) {
            self.holders[i].close_at = Some(now + PAUSE);
            true
        } else {
            self.drop_holder(i);
            false
        }
    }

    fn drop_holder(&mut self, i: usize) {
        let h = &mut self.holders[i];
        if !h.ever_held && !h.gone {
            self.unsettled -= 1;
        }
        h.task = None;
        h.gone = true;
    }
}

/// A uniform draw in (0, 1).
fn unit() -> f64 {
    let r = (u64::from(random_u16()) << 16) | u64::from(random_u16());
    (r as f64 + 0.5) / 4_294_967_296.0
}

/// The ledger's CPU (summed over replicas) and each PostgreSQL server process's, now.
fn read_cpu(
    pids: &[String],
    cluster: Option<&pg::Cluster>,
    ticks: f64,
) -> Res<(f64, Option<HashMap<String, f64>>)> {
    let (u, s) = cpu_sum(pids, ticks)?;
    Ok((u + s, cluster.map(|c| server_cpu(c, ticks))))
}

/// The ledger's CPU seconds between two readings of [`read_cpu`], and the PostgreSQL server's.
fn cpu_since(
    before: &(f64, Option<HashMap<String, f64>>),
    after: &(f64, Option<HashMap<String, f64>>),
) -> (f64, Option<f64>) {
    let pg = before
        .1
        .as_ref()
        .zip(after.1.as_ref())
        .map(|(b, a)| server_cpu_between(b, a));
    (after.0 - before.0, pg)
}

/// One store and fleet size: a fresh ledger, the setup, the two windows.
async fn run(
    bench: &Bench,
    store: Store,
    plan: &Plan,
    setup_by: Instant,
    ticks: f64,
) -> Res<RunFigures> {
    let h = bench.fresh(&format!("capacity-{}-{}", store.name(), plan.cells))?;
    let ledgers = Ledgers::start(bench, &h, store, &[]).await?;
    let endpoints = if ledgers.replicas.len() > 1 {
        ledgers.urls()
    } else {
        Vec::new()
    };
    let atts = sim::attach(&h, &endpoints).await?;
    if !ledger_takes(&atts[0]).await {
        return Err("capacity: the ledger does not offer the take".into());
    }
    let pids = ledgers.pids()?;
    let cluster = match store {
        Store::Sqlite => None,
        Store::Pg { .. } => Some(bench.cluster()?),
    };
    let repository = identity_of_origin(sim::ORIGIN);
    let mut figures = RunFigures::default();

    let began = Instant::now();
    let tasks = plan.cells + plan.spare;
    let recorded = timeout_at(
        setup_by.into(),
        sim::record(&atts, &repository, tasks, &Vec::new()),
    )
    .await;
    figures.record = began.elapsed();
    eprintln!(
        "fleet: capacity: {tasks} tasks recorded in {:.1} s",
        figures.record.as_secs_f64()
    );
    match recorded {
        Ok(r) => drop(r?),
        Err(_) => {
            figures.not_set_up = true;
            figures
                .notes
                .push("the recording did not finish within the setup bound".into());
            return Ok(figures);
        }
    }

    let ctx = Arc::new(Ctx {
        atts,
        aliases: vessel_aliases(&repository),
        repository,
        minutes: plan.claim_minutes,
    });
    let mut s = Sched {
        plan: *plan,
        holders: (0..plan.cells).map(|_| Holder::default()).collect(),
        heap: BinaryHeap::new(),
        pending: (0..plan.cells).collect(),
        unsettled: plan.cells,
        first_takes: 0,
        pulls_in_flight: 0,
        dry_streak: 0,
        handed: HashMap::new(),
        phase: Phase::Setup,
        figures,
        cpu_mark: (0.0, None),
    };
    let taking = Instant::now();
    let mut running: JoinSet<(usize, Done)> = JoinSet::new();
    let mut last_progress = Instant::now();
    loop {
        let now = Instant::now();
        match s.phase {
            Phase::Setup => {
                if now.duration_since(last_progress) >= Duration::from_secs(30) {
                    last_progress = now;
                    eprintln!(
                        "fleet: capacity: {} of {} holding after {:.0} s of takes",
                        s.first_takes,
                        plan.cells,
                        now.duration_since(taking).as_secs_f64()
                    );
                }
                let dry = s.dry_streak >= DRY_TAKES;
                if s.unsettled == 0 || dry || now >= setup_by {
                    s.figures.take = now.duration_since(taking);
                    if dry {
                        s.figures.notes.push(format!(
                            "{DRY_TAKES} takes in a row found nothing free with {} of {} \
                             holders holding and {} tasks recorded: the setup stopped there",
                            s.first_takes, plan.cells, tasks
                        ));
                    } else if s.unsettled > 0 {
                        s.figures.not_set_up = true;
                        s.figures.notes.push(format!(
                            "setup stopped at its bound: {} of {} holding after {:.0} s of takes",
                            s.first_takes,
                            plan.cells,
                            s.figures.take.as_secs_f64()
                        ));
                    }
                    s.pending.clear();
                    for i in 0..plan.cells {
                        if s.holders[i].task.is_none() && !s.holders[i].busy {
                            s.drop_holder(i);
                        }
                    }
                    s.figures.holding = s.holders.iter().filter(|h| h.task.is_some()).count();
                    eprintln!(
                        "fleet: capacity: {} of {} holding, takes took {:.1} s",
                        s.figures.holding,
                        plan.cells,
                        s.figures.take.as_secs_f64()
                    );
                    s.phase = if s.figures.not_set_up || s.figures.holding == 0 {
                        Phase::Done
                    } else {
                        Phase::Settling
                    };
                    continue;
                }
            }
            // A step that panicked never says it is done: an empty set is the backstop.
            Phase::Settling if s.pulls_in_flight == 0 || running.is_empty() => {
                // The last takes may have landed on holders the setup already let go.
                s.figures.holding = s.holders.iter().filter(|h| h.task.is_some()).count();
                s.phase = Phase::Warm(now + WARMUP);
                continue;
            }
            Phase::Warm(start) if now >= start => {
                s.cpu_mark = read_cpu(&pids, cluster, ticks)?;
                s.phase = Phase::A(now + plan.window);
                eprintln!("fleet: capacity: window A (renewals)");
                continue;
            }
            Phase::A(end) if now >= end => {
                let mark = read_cpu(&pids, cluster, ticks)?;
                (s.figures.a.ledger_cpu, s.figures.a.pg_cpu) = cpu_since(&s.cpu_mark, &mark);
                s.cpu_mark = mark;
                s.phase = Phase::B(now + plan.window);
                eprintln!("fleet: capacity: window B (settling and renewals)");
                for i in 0..plan.cells {
                    if s.holders[i].task.is_some() && !s.holders[i].gone {
                        // Exponential lengths are memoryless: what is left of a task already
                        // under way is as long as a fresh one, so the settles start in step.
                        s.holders[i].close_at = Some(now + plan.task_mean.mul_f64(-unit().ln()));
                        s.push(i);
                    }
                }
                continue;
            }
            Phase::B(end) if now >= end => {
                let mark = read_cpu(&pids, cluster, ticks)?;
                (s.figures.b.ledger_cpu, s.figures.b.pg_cpu) = cpu_since(&s.cpu_mark, &mark);
                s.figures.measured = true;
                s.phase = Phase::Done;
                continue;
            }
            Phase::Done => break,
            _ => {}
        }

        while running.len() < IN_FLIGHT {
            if let Some(&Reverse((due, i))) = s.heap.peek()
                && due <= now
            {
                s.heap.pop();
                if let Some(op) = s.due(i, now) {
                    spawn(&mut running, &ctx, i, op);
                }
                continue;
            }
            if s.phase == Phase::Setup
                && let Some(i) = s.pending.pop_front()
            {
                s.pulls_in_flight += 1;
                s.holders[i].busy = true;
                spawn(&mut running, &ctx, i, Op::Settle(None));
                continue;
            }
            break;
        }

        let boundary = match s.phase {
            Phase::Setup => Some(setup_by),
            Phase::Warm(t) | Phase::A(t) | Phase::B(t) => Some(t),
            Phase::Settling | Phase::Done => None,
        };
        let next_due = (running.len() < IN_FLIGHT)
            .then(|| s.heap.peek().map(|Reverse((t, _))| *t))
            .flatten();
        let wake = [boundary, next_due]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(1))
            // Setup progress is printed at least this often.
            .min(now + Duration::from_secs(5));
        tokio::select! {
            Some(joined) = running.join_next(), if !running.is_empty() => match joined {
                Ok((i, done)) => s.done(i, done, Instant::now()),
                Err(e) => s.figures.errors.add(format!("step failed: {e}")),
            },
            () = sleep_until(wake.into()) => {}
        }
    }
    // What is still in flight finishes outside the windows: it counts for no window, but its
    // answers are still checked for a task handed out twice.
    let drained = Instant::now() + DRAIN.max(REQUEST_LIMIT);
    while let Ok(Some(joined)) = timeout_at(drained.into(), running.join_next()).await {
        if let Ok((i, done)) = joined {
            s.done(i, done, Instant::now());
        }
    }
    running.abort_all();
    drop(ledgers);
    if s.figures.found_nothing > 0 {
        let n = s.figures.found_nothing;
        s.figures.notes.push(format!(
            "{n} pulls were handed no task; those holders stopped"
        ));
    }
    Ok(s.figures)
}

fn spawn(running: &mut JoinSet<(usize, Done)>, ctx: &Arc<Ctx>, i: usize, op: Op) {
    let ctx = ctx.clone();
    running.spawn(async move { (i, ctx.run(i, op).await) });
}
