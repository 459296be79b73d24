//! get_problems and get_analysis_context: both halves weighed once, open findings first.

use std::fmt::Write as _;
use std::path::Path;

use super::{ContextArgs, ProblemsArgs, recall_here};
use crate::ctx::{Ctx, Here, Session};
use crate::store::{Retire, Seed};
use crate::tools::Reply;
use crate::tools::local::shared::{NO_SERVER_ANALYSIS, by_group, local_seeds, relative, seed_line};
use metabob_cell::ledger::recall::{LedgerView, Recalled};
use metabob_git::Repo;
use metabob_net::attachment::Attachment;
use metabob_wire::claims::{Held, lapses_at};
use metabob_wire::depends::blocked_line;
use metabob_wire::finding::{Finding, Severity};
use metabob_wire::text::rfc3339_ms;
use metabob_wire::verdict::{Pending, Standing, Verdict, VerdictKind};

/// Retires this machine's seeds of every finding the recall shows closed (anchor:
/// retire_closed_seeds): a fix leaves them stale, a retraction deletes them.
fn retire_closed(ctx: &Ctx, view: &LedgerView) {
    // No store yet: no seed to retire.
    let Ok(Some(store)) = ctx.store_to_read() else {
        return;
    };
    for r in &view.findings {
        let Standing::Closed { verdict } = view.standing(&r.finding) else {
            continue;
        };
        let how = if verdict.kind == VerdictKind::Discarded {
            Retire::Delete
        } else {
            Retire::Stale
        };
        let mut seeds = store.by_concept(&r.finding.concept_id).unwrap_or_default();
        for id in &r.finding.finding_ids {
            seeds.extend(store.get(id).ok().flatten());
        }
        if !seeds.is_empty()
            && let Err(e) = store.retire(&seeds, how)
        {
            tracing::warn!("retiring the seeds of a closed finding failed: {e}");
        }
    }
}

fn overlaps(seed_groups: &[&Seed], all: &[Seed], r: &Recalled) -> bool {
    seed_groups.iter().any(|g| {
        g.concept_ref.as_deref() == Some(r.finding.concept_id.as_str())
            || all
                .iter()
                .any(|s| s.group_id == g.group_id && r.finding.has_id(&s.id))
    })
}

/// The tag a recalled open finding carries: a live claim, a pending fix.
fn tags(view: &LedgerView, f: &Finding, me: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(h) = view.holder(f, metabob_process::clock::now_ms()) {
        let until = rfc3339_ms(lapses_at(&h));
        if Some(h.holder.as_str()) == me {
            let _ = write!(out, " [claimed by this checkout until {until}]");
        } else {
            let _ = write!(
                out,
                " [claimed by {} until {until}: someone is working on it]",
                h.holder
            );
        }
    }
    let waits = view.open_blockers(f);
    if !waits.is_empty() {
        let _ = write!(
            out,
            " [{}: do not start on it until each is fixed]",
            blocked_line(&waits)
        );
    }
    if let Standing::Pending { verdict: v } = view.standing(f) {
        let by = v.reviewed_by.as_deref().unwrap_or("an unnamed checkout");
        let branch = v.fix_branch.as_deref().unwrap_or("an unnamed branch");
        let mine = me.is_some() && v.reviewed_by.as_deref() == me;
        let _ = match v.kind {
            VerdictKind::Pending(Pending::AwaitingMerge) => write!(
                out,
                " [fix pending: pushed by {by}, awaiting merge into {}]",
                v.fix_target.as_deref().unwrap_or("the target")
            ),
            VerdictKind::Pending(Pending::Unpushed) if mine => write!(
                out,
                " [fix pending: committed in this checkout on {branch} but not pushed; push it, then mark_complete endorse again]"
            ),
            VerdictKind::Pending(Pending::Unpushed) => write!(
                out,
                " [fix pending: committed in another checkout ({by}) on {branch} but not pushed; not available here]"
            ),
            _ if mine => write!(
                out,
                " [fix pending: uncommitted in this checkout on {branch}; commit it, then mark_complete endorse again]"
            ),
            _ => write!(
                out,
                " [fix pending: uncommitted in another checkout ({by}) on {branch}; not in this one]"
            ),
        };
    }
    out
}

fn recalled_line(r: &Recalled, tag: &str) -> String {
    format!(
        "- {} (concept {}) [{}][{}] {} ({}){tag}",
        r.finding.id(),
        r.finding.concept_id,
        r.finding.severity,
        r.finding.category,
        r.finding.summary,
        r.files.join(", ")
    )
}

fn closed_line(repo: Option<&Repo>, r: &Recalled, v: &Verdict) -> String {
    let mark = match (&v.kind, &v.fix_commit) {
        (VerdictKind::Discarded, _) => "[RETRACTED]".to_string(),
        (VerdictKind::Cancelled, _) => "[CANCELLED]".to_string(),
        (_, Some(sha)) => {
            let in_head = repo.is_some_and(|repo| {
                repo.head().ok().flatten().is_some_and(|h| {
                    repo.resolve(sha)
                        .ok()
                        .flatten()
                        .is_some_and(|s| repo.is_ancestor(&s, &h).unwrap_or(false))
                })
            });
            let short = &sha[..sha.len().min(12)];
            if in_head {
                format!("[FIXED in {short}]")
            } else {
                format!(
                    "[FIXED in {short}] — the fix is not in this checkout's HEAD (fixed on {}, not pushed when endorsed)",
                    v.fix_branch.as_deref().unwrap_or("another branch")
                )
            }
        }
        _ => "[FIXED]".to_string(),
    };
    format!(
        "- {} [{}] {} {mark}",
        r.finding.id(),
        r.finding.category,
        r.finding.summary
    )
}

struct Filters<'a> {
    severity: Option<&'a [Severity]>,
    category: Option<&'a [String]>,
    file: Option<&'a str>,
}

impl Filters<'_> {
    fn keeps(&self, sev: Severity, cat: &str, files: &[String]) -> bool {
        self.severity.is_none_or(|s| s.contains(&sev))
            && self
                .category
                .is_none_or(|c| c.iter().any(|x| x.eq_ignore_ascii_case(cat)))
            && self
                .file
                .is_none_or(|f| files.iter().any(|x| x.contains(f)))
    }
    fn tasks_are_the_list(&self) -> bool {
        self.category
            .is_some_and(|c| c.iter().any(|x| x.eq_ignore_ascii_case("task")))
    }
}

/// Both halves, weighed once for get_problems and get_analysis_context.
struct Problems {
    local_all: Vec<Seed>,
    recall: Result<LedgerView, String>,
    store_error: Option<String>,
}

impl Problems {
    async fn read(ctx: &Ctx, att: &Attachment, ws: &Path) -> Problems {
        // The recall runs first, so what it shows closed is retired before the local read.
        let recall = recall_here(att, ws).await;
        if let Ok(view) = &recall {
            retire_closed(ctx, view);
        }
        let (local_all, store_error) = match local_seeds(ctx, ws) {
            Ok(s) => (s, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        Problems {
            local_all,
            recall,
            store_error,
        }
    }
}

/// Both halves sorted for rendering: local and recalled, findings and tasks, open and closed.
struct Listing<'a> {
    local_findings: Vec<&'a Seed>,
    local_tasks: Vec<&'a Seed>,
    open: Vec<&'a Recalled>,
    open_tasks: Vec<&'a Recalled>,
    closed: Vec<(&'a Recalled, Verdict)>,
    closed_tasks: Vec<(&'a Recalled, Verdict)>,
    /// Local findings the ledger shows open too.
    both: usize,
    /// Open tasks from both halves, each counted once.
    task_count: usize,
}

impl<'a> Listing<'a> {
    /// The files of the open findings shown, each once.
    fn open_files(&self, limit: usize) -> Vec<String> {
        let local = self
            .local_findings
            .iter()
            .take(limit)
            .map(|s| s.file.clone());
        let shared = self
            .open
            .iter()
            .take(limit)
            .flat_map(|r| r.files.iter().cloned());
        let mut files: Vec<String> = Vec::new();
        for f in local.chain(shared) {
            if !files.contains(&f) {
                files.push(f);
            }
        }
        files
    }

    fn of(p: &'a Problems, f: &Filters<'_>) -> Listing<'a> {
        let tasks_listed = f.tasks_are_the_list();
        let local: Vec<&Seed> = by_group(&p.local_all)
            .into_iter()
            .filter(|s| {
                let files: Vec<String> = p
                    .local_all
                    .iter()
                    .filter(|x| x.group_id == s.group_id)
                    .map(|x| x.file.clone())
                    .collect();
                f.keeps(s.severity, &s.category, &files)
            })
            .collect();
        let (local_tasks, local_findings): (Vec<&Seed>, Vec<&Seed>) = local
            .iter()
            .partition(|s| s.category.eq_ignore_ascii_case("task") && !tasks_listed);
        let mut l = Listing {
            local_findings,
            local_tasks,
            open: Vec::new(),
            open_tasks: Vec::new(),
            closed: Vec::new(),
            closed_tasks: Vec::new(),
            both: 0,
            task_count: 0,
        };
        if let Ok(view) = &p.recall {
            for r in &view.findings {
                if !f.keeps(r.finding.severity, &r.finding.category, &r.files) {
                    continue;
                }
                let task = r.finding.is_task() && !tasks_listed;
                match view.standing(&r.finding) {
                    Standing::Closed { verdict } if task => l.closed_tasks.push((r, verdict)),
                    Standing::Closed { verdict } => l.closed.push((r, verdict)),
                    _ if task => l.open_tasks.push(r),
                    _ => l.open.push(r),
                }
            }
        }
        let shared = |g: &Seed, recalled: &[&Recalled]| {
            recalled.iter().any(|r| overlaps(&[g], &p.local_all, r))
        };
        l.both = l
            .local_findings
            .iter()
            .filter(|g| shared(g, &l.open))
            .count();
        l.task_count = l.open_tasks.len()
            + l.local_tasks
                .iter()
                .filter(|g| !shared(g, &l.open_tasks))
                .count();
        l
    }

    /// `Open findings: N (…)`, with the tasks counted apart (anchor: open_findings_headline).
    fn headline(&self, p: &Problems) -> String {
        let local_line = match &p.store_error {
            Some(e) => format!("local store unavailable: {e}"),
            None => format!("{} in the local store", self.local_findings.len()),
        };
        let mut head = match &p.recall {
            Ok(_) => {
                let total = self.local_findings.len() + self.open.len() - self.both;
                let mut h = format!(
                    "Open findings: {total} ({local_line}, {} recorded by agents on this codebase",
                    self.open.len()
                );
                if self.both > 0 {
                    let _ = write!(h, "; {} in both", self.both);
                }
                h.push(')');
                h
            }
            Err(cause) => format!(
                "Open findings: {} ({local_line}; recall did not run: {cause})",
                self.local_findings.len()
            ),
        };
        if self.task_count > 0 {
            let _ = write!(head, "; {} open tasks, listed apart", self.task_count);
            if !self.closed_tasks.is_empty() {
                let _ = write!(head, "; {} closed", self.closed_tasks.len());
            }
        }
        head
    }
}

/// Open findings, headline first; `full` adds the closed ones and the task list.
fn render_problems(out: &mut String, p: &Problems, f: &Filters<'_>, shown: Shown<'_>) {
    let l = Listing::of(p, f);
    let _ = writeln!(out, "{}", l.headline(p));
    render_local(out, &l, f, shown.limit);
    let _ = writeln!(out, "{NO_SERVER_ANALYSIS}");
    let Ok(view) = &p.recall else {
        return;
    };
    render_shared(out, view, &l, shown);
    if shown.full {
        render_closed(out, view, &l, p, shown);
    }
}

/// How much render_problems shows, and for whom.
#[derive(Clone, Copy)]
struct Shown<'a> {
    limit: usize,
    me: Option<&'a str>,
    ws: &'a Path,
    full: bool,
}

fn render_local(out: &mut String, l: &Listing<'_>, f: &Filters<'_>, limit: usize) {
    let sev_count = |s: Severity| l.local_findings.iter().filter(|x| x.severity == s).count();
    let _ = writeln!(
        out,
        "local store: {} open ({} critical, {} high)",
        l.local_findings.len(),
        sev_count(Severity::Critical),
        sev_count(Severity::High)
    );
    if l.local_findings.is_empty() {
        let _ = writeln!(
            out,
            "No agent-recorded findings in the local store{}.",
            f.file.map(|p| format!(" for {p}")).unwrap_or_default()
        );
    } else {
        for s in l.local_findings.iter().take(limit) {
            let _ = writeln!(out, "{}", seed_line(s));
        }
    }
}

fn render_shared(out: &mut String, view: &LedgerView, l: &Listing<'_>, shown: Shown<'_>) {
    let _ = writeln!(
        out,
        "Findings recorded by agents on this codebase ({} open{}):",
        l.open.len(),
        if view.findings_truncated {
            "; the read reached its limit, older findings may be missing"
        } else {
            ""
        }
    );
    for r in l.open.iter().take(if shown.full { 10 } else { 5 }) {
        let _ = writeln!(
            out,
            "{}",
            recalled_line(r, &tags(view, &r.finding, shown.me))
        );
    }
    if view.verdicts_truncated {
        let _ = writeln!(
            out,
            "The verdict read reached its limit: each finding's linked verdicts were read too, but a verdict or claim written before verdicts were linked may be missed."
        );
    }
}

fn render_closed(
    out: &mut String,
    view: &LedgerView,
    l: &Listing<'_>,
    p: &Problems,
    shown: Shown<'_>,
) {
    let repo = Repo::discover(shown.ws).ok().flatten();
    if !l.closed.is_empty() {
        let _ = writeln!(out, "Closed findings ({}):", l.closed.len());
        for (r, v) in l.closed.iter().take(10) {
            let _ = writeln!(out, "{}", closed_line(repo.as_ref(), r, v));
        }
    }
    if l.task_count > 0 || !l.closed_tasks.is_empty() {
        render_tasks(
            out,
            view,
            &l.open_tasks,
            &l.local_tasks,
            &p.local_all,
            shown.me,
        );
        if !l.closed_tasks.is_empty() {
            let _ = writeln!(out, "Closed tasks ({}):", l.closed_tasks.len());
            for (r, v) in l.closed_tasks.iter().take(5) {
                let _ = writeln!(out, "{}", closed_line(repo.as_ref(), r, v));
            }
        }
    }
}

/// Open tasks from both halves, the next move first: yours, unclaimed, blocked, others',
/// pending.
fn render_tasks(
    out: &mut String,
    view: &LedgerView,
    recalled: &[&Recalled],
    local: &[&Seed],
    all: &[Seed],
    me: Option<&str>,
) {
    let now = metabob_process::clock::now_ms();
    let rank = |r: &Recalled| {
        let pending = matches!(view.standing(&r.finding), Standing::Pending { .. });
        match view.holder(&r.finding, now) {
            _ if pending => 4,
            Some(Held { holder, .. }) if Some(holder.as_str()) == me => 0,
            None if !view.open_blockers(&r.finding).is_empty() => 2,
            None => 1,
            Some(_) => 3,
        }
    };
    let mut tasks: Vec<(u8, String)> = recalled
        .iter()
        .map(|r| (rank(r), recalled_line(r, &tags(view, &r.finding, me))))
        .collect();
    for s in local {
        if !recalled.iter().any(|r| overlaps(&[*s], all, r)) {
            tasks.push((1, seed_line(s)));
        }
    }
    tasks.sort_by_key(|(r, _)| *r);
    let count = |k: u8| tasks.iter().filter(|(r, _)| *r == k).count();
    let _ = writeln!(
        out,
        "Tasks ({} open: {} yours, {} unclaimed, {} blocked, {} claimed by others, {} with a fix pending); claim one (claim_finding) before starting:",
        tasks.len(),
        count(0),
        count(1),
        count(2),
        count(3),
        count(4)
    );
    for (_, line) in tasks {
        let _ = writeln!(out, "{line}");
    }
}

pub async fn get_problems(ctx: &Ctx, here: &Here<'_>, a: ProblemsArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    let p = Problems::read(ctx, &s.att, ws).await;
    let file = a.file_path.as_deref().map(|f| relative(ws, f));
    let filters = Filters {
        severity: a.severity.as_deref(),
        category: a.category.as_deref(),
        file: file.as_deref(),
    };
    let shown = Shown {
        limit: a.limit.unwrap_or(10),
        me: s.vessel.as_deref(),
        ws,
        full: true,
    };
    let mut out = String::new();
    render_problems(&mut out, &p, &filters, shown);
    let files = Listing::of(&p, &filters).open_files(shown.limit);
    out.push_str(&crate::tools::gaps::open_gaps_on_files_lines(here, &files));
    out.push_str(
        "These are agent-recorded findings only; none here is not proof the code is clean.",
    );
    Reply::ok(out)
}

/// `Attachment: …` then `as: …`, the first lines of get_analysis_context (anchor:
/// attachment_line).
fn attachment_lines(s: &Session) -> String {
    let state = match s.att.settled() {
        None => "Attachment: attaching (first attempt in progress)".to_string(),
        Some(st) => match &st.cause {
            None => format!(
                "Attachment: attached to org {} via discovery {}",
                st.auth.org_id.as_deref().unwrap_or("(unnamed)"),
                st.anchor.discovery.as_deref().unwrap_or("(unknown)")
            ),
            Some(c) => format!("Attachment: not attached: {}", s.att.refusal_line(c)),
        },
    };
    format!(
        "{state}\nas: {} (session {})",
        s.vessel.as_deref().unwrap_or("no vessel identity"),
        s.att.claim().session
    )
}

pub async fn get_analysis_context(ctx: &Ctx, here: &Here<'_>, a: ContextArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    // The recall settles the attachment first, so the line below reports where it stands.
    let p = Problems::read(ctx, &s.att, ws).await;
    let mut out = attachment_lines(s);
    out.push('\n');
    let _ = writeln!(
        out,
        "Workspace: {} (from {})",
        ws.display(),
        here.decided.source.describe()
    );
    if let crate::workspace::Roots::Answered(roots) = ctx.workspace.roots()
        && roots.len() > 1
    {
        let others: Vec<String> = roots[1..].iter().map(|r| r.display().to_string()).collect();
        let _ = writeln!(out, "Other roots: {}", others.join(", "));
    }
    if s.from != ws {
        let _ = writeln!(out, "Identity derived from: {}", s.from.display());
    }
    let _ = writeln!(out, "{}", crate::tools::local::shared::graph_line(ctx, ws));
    let filters = Filters {
        severity: None,
        category: None,
        file: None,
    };
    let shown = Shown {
        limit: a.problem_limit.unwrap_or(10),
        me: s.vessel.as_deref(),
        ws,
        full: false,
    };
    render_problems(&mut out, &p, &filters, shown);
    if !a.recently_changed_files.is_empty() {
        let args = crate::tools::local::CochangeArgs {
            changed_files: a.recently_changed_files.clone(),
            limit: Some(8),
            confidence_threshold: Some(0.3),
        };
        let cochange = crate::tools::local::predict_cochanges(ctx, here, args).await;
        let _ = writeln!(out, "{}", cochange.text);
    }
    out.push_str(&next_step(&p));
    Reply::ok(out)
}

/// get_analysis_context's last line: what to do next, from the serious and shared counts.
fn next_step(p: &Problems) -> String {
    let serious = p
        .local_all
        .iter()
        .filter(|x| matches!(x.severity, Severity::Critical | Severity::High))
        .count();
    let shared = p.recall.as_ref().map_or(0, |v| {
        v.findings
            .iter()
            .filter(|r| !r.finding.is_task() && !v.standing(&r.finding).is_closed())
            .count()
    });
    if serious + shared == 0 {
        "Next: no open critical or high local findings and no open shared findings; before editing a file, get_problems with its file_path.".into()
    } else {
        format!(
            "Next: {serious} critical/high local and {shared} open shared findings: check get_problems for the files you edit, claim_finding what you take on, mark_complete what you fix."
        )
    }
}
