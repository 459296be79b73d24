//! The findings tools (SPEC.md §Findings tools) on the ledger's vocabulary: the local store is
//! this machine's half, the ledger the shared half. A detached session still runs every local
//! half; the shared half names the attachment's cause instead of pretending to be empty.

use std::fmt::Write as _;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::local::{NO_SERVER_ANALYSIS, by_group, local_seeds, relative, seed_line};
use super::{CallResult, Reply, not_attached};
use crate::attachment::Attachment;
use crate::cell::fix_location::{FixRefused, Located, locate_fix};
use crate::git::Repo;
use crate::ledger::claims::{self, ClaimAction, ClaimOutcome, ClaimWord, Held};
use crate::ledger::finding::{Finding, FindingStatus, NewFinding, Severity};
use crate::ledger::recall::{self, LedgerView, Recalled, fetch_concept};
use crate::ledger::record::{FindingDraft, open_duplicate, same_summary};
use crate::ledger::repo_identity::{Aliases, repo_identity};
use crate::ledger::verdict::{self, NewVerdict, Pending, Standing, VerdictKind, VerdictOrigin};
use crate::mcp::ctx::{Ctx, Here, Session};
use crate::store::{NewSeeds, Retire, Seed};
use crate::util::rfc3339_ms;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ProblemsArgs {
    /// Max results (default 10).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// Keep these severities only.
    pub severity: Option<Vec<Severity>>,
    /// Keep these category slugs only (include "task" to list tasks as the findings).
    pub category: Option<Vec<String>>,
    /// Substring of the file path.
    pub file_path: Option<String>,
    /// Accepted; a discarded finding is deleted from the local store, so it changes nothing.
    pub include_discarded: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ContextArgs {
    /// Files whose git-history co-changes are listed.
    #[serde(default)]
    pub recently_changed_files: Vec<String>,
    /// Max open problems to include (default 10).
    #[schemars(range(min = 1, max = 50))]
    pub problem_limit: Option<usize>,
    /// Accepted for compatibility; not read.
    pub scope: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct RecordArgs {
    /// Files the finding is attributed to (workspace-relative or absolute).
    pub files: Vec<String>,
    /// One-line description.
    pub summary: String,
    /// Longer explanation or suggested fix.
    pub details: Option<String>,
    pub severity: Severity,
    /// Free-form slug: security, correctness, design-constraint, task, …
    pub category: String,
    /// Start line, in the first file.
    #[schemars(range(min = 1))]
    pub line_start: Option<u32>,
    #[schemars(range(min = 1))]
    pub line_end: Option<u32>,
    /// Finding status (default open); anything else stores the seed already resolved.
    pub status: Option<String>,
    /// Record even when the same finding is already open.
    pub force: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MarkAction {
    Endorse,
    Discard,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct MarkArgs {
    /// An agf_… finding id or the concept_… id recall shows.
    pub problem_id: String,
    /// endorse = fixed (default), discard = false positive.
    pub action: Option<MarkAction>,
    /// Endorse only: the commit (7-40 hex digits) that fixes it, when the fix touches none of
    /// its files or was committed before the finding was recorded.
    pub fix_commit: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClaimArg {
    Claim,
    Renew,
    Release,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClaimArgs {
    /// An agf_… finding id or the concept_… id recall shows.
    pub problem_id: String,
    /// claim before starting (default), renew while working, release on stopping unfixed.
    pub action: Option<ClaimArg>,
    /// How long the claim lasts from now (default 60, at most 240).
    #[schemars(range(min = 1, max = 240))]
    pub minutes: Option<i64>,
}

/// The recall for this workspace, or the line saying why it did not run.
async fn recall_here(att: &Attachment, ws: &Path) -> Result<LedgerView, String> {
    att.gate().await.map_err(|r| r.to_string())?;
    let aliases = Aliases::for_workspace(ws);
    recall::recall(att, &aliases)
        .await
        .map_err(|e| e.to_string())
}

/// Retires this machine's seeds of every finding the recall shows closed (anchor:
/// retire_closed_seeds): a fix leaves them stale, a retraction deletes them.
fn retire_closed(ctx: &Ctx, view: &LedgerView) {
    let Ok(store) = ctx.store() else { return };
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
    if let Some(h) = view.holder(f, crate::util::now_ms()) {
        let until = rfc3339_ms(claims::lapses_at(&h));
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

fn closed_line(repo: Option<&Repo>, r: &Recalled, v: &verdict::Verdict) -> String {
    let mark = match (&v.kind, &v.fix_commit) {
        (VerdictKind::Discarded, _) => "[RETRACTED]".to_string(),
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
    closed: Vec<(&'a Recalled, verdict::Verdict)>,
    closed_tasks: Vec<(&'a Recalled, verdict::Verdict)>,
    /// Local findings the ledger shows open too.
    both: usize,
    /// Open tasks from both halves, each counted once.
    task_count: usize,
}

impl<'a> Listing<'a> {
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

/// Open tasks from both halves, the next move first: yours, unclaimed, others', pending.
fn render_tasks(
    out: &mut String,
    view: &LedgerView,
    recalled: &[&Recalled],
    local: &[&Seed],
    all: &[Seed],
    me: Option<&str>,
) {
    let now = crate::util::now_ms();
    let rank = |r: &Recalled| {
        let pending = matches!(view.standing(&r.finding), Standing::Pending { .. });
        match view.holder(&r.finding, now) {
            _ if pending => 3,
            Some(Held { holder, .. }) if Some(holder.as_str()) == me => 0,
            None => 1,
            Some(_) => 2,
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
        "Tasks ({} open: {} yours, {} unclaimed, {} claimed by others, {} with a fix pending); claim one (claim_finding) before starting:",
        tasks.len(),
        count(0),
        count(1),
        count(2),
        count(3)
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
    if let crate::mcp::workspace::Roots::Answered(roots) = ctx.workspace.roots()
        && roots.len() > 1
    {
        let others: Vec<String> = roots[1..].iter().map(|r| r.display().to_string()).collect();
        let _ = writeln!(out, "Other roots: {}", others.join(", "));
    }
    if s.from != ws {
        let _ = writeln!(out, "Identity derived from: {}", s.from.display());
    }
    let _ = writeln!(out, "{}", super::local::graph_line(ctx, ws));
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
        let args = super::local::CochangeArgs {
            changed_files: a.recently_changed_files.clone(),
            limit: Some(8),
            confidence_threshold: Some(0.3),
        };
        let cochange = super::local::predict_cochanges(ctx, here, args).await;
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

pub async fn record_finding(ctx: &Ctx, here: &Here<'_>, a: RecordArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    let draft = FindingDraft {
        files: a.files.iter().map(|f| relative(ws, f)).collect(),
        summary: a.summary,
        details: a.details.unwrap_or_default(),
        severity: a.severity,
        category: a.category,
        line_start: a.line_start,
        line_end: a.line_end,
        status: a
            .status
            .as_deref()
            .map_or(FindingStatus::Open, FindingStatus::parse),
    };
    let draft = match draft.checked() {
        Ok(d) => d,
        Err(e) => return Reply::error(format!("record_finding: {e}; nothing was recorded")),
    };
    let store = match ctx.store() {
        Ok(st) => st,
        Err(e) => return Reply::error(format!("record_finding: {e}; nothing was recorded")),
    };
    let ws_key = ws.display().to_string();
    let mut recall_note = None;
    if !a.force.unwrap_or(false) && draft.status.is_open() {
        match find_duplicate(&store, s, ws, &draft).await {
            Ok(Some(reply)) => return reply,
            Ok(None) => {}
            Err(cause) => recall_note = Some(cause),
        }
    }
    let name = ws
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nf = draft.into_new(
        repo_identity(ws),
        name,
        s.vessel.clone(),
        s.att.claim().session.clone(),
    );
    let seeds = match store.insert(&NewSeeds {
        workspace: &ws_key,
        ids: &nf.finding_ids,
        files: &nf.files,
        summary: &nf.summary,
        details: &nf.details,
        severity: nf.severity,
        category: &nf.category,
        lines: (a.line_start, a.line_end),
        open: nf.status.is_open(),
    }) {
        Ok(v) => v,
        Err(e) => return Reply::error(format!("record_finding: {e}; nothing was recorded")),
    };
    let shared = match s.att.gate().await {
        Err(refusal) => Err(refusal.to_string()),
        Ok(_) => crate::ledger::write_concept(&s.att, nf.to_pointer())
            .await
            .map_err(|e| e.to_string()),
    };
    let link_failed = match &shared {
        Ok(concept) => store
            .set_concept(&seeds[0].group_id, concept)
            .err()
            .map(|e| format!("Linking the seeds to {concept} failed: {e}.")),
        Err(_) => None,
    };
    let notes = Notes {
        link_failed,
        recall: recall_note,
    };
    render_recorded(&nf, &shared, &notes)
}

/// What went wrong beside a recording that still happened.
struct Notes {
    link_failed: Option<String>,
    /// Why the duplicate check could not read the ledger.
    recall: Option<String>,
}

/// The same finding already open here or on the ledger: the reply that says so, or the line
/// saying why the ledger could not be asked.
async fn find_duplicate(
    store: &crate::store::Store,
    s: &Session,
    ws: &Path,
    d: &FindingDraft,
) -> Result<Option<Reply>, String> {
    let local = store
        .seeds(&ws.display().to_string(), false)
        .unwrap_or_default();
    if let Some(x) = local
        .iter()
        .find(|x| d.files.contains(&x.file) && same_summary(&x.summary, &d.summary))
    {
        let files = std::slice::from_ref(&x.file);
        return Ok(Some(already(&x.id, &x.summary, files, "the local store")));
    }
    s.att.gate().await.map_err(|r| r.to_string())?;
    let aliases = Aliases::for_workspace(ws);
    let Some(dup) = open_duplicate(&s.att, &aliases, &d.files, &d.summary)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let local_id = store
        .by_concept(&dup.concept_id)
        .ok()
        .and_then(|v| v.first().map(|x| x.id.clone()));
    let id = local_id.as_deref().unwrap_or(&dup.concept_id);
    Ok(Some(already(
        id,
        &dup.summary,
        &dup.files,
        "the shared ledger",
    )))
}

fn render_recorded(nf: &NewFinding, shared: &Result<String, String>, notes: &Notes) -> Reply {
    let ids = &nf.finding_ids;
    let mut out = format!(
        "Recorded {} [{}][{}] {} on {}.\n",
        ids.join(", "),
        nf.severity,
        nf.category,
        nf.summary,
        nf.files.join(", ")
    );
    if let Some(line) = &notes.link_failed {
        let _ = writeln!(out, "{line}");
    }
    let result = match shared {
        Ok(concept) => {
            let _ = writeln!(
                out,
                "Shared on the ledger as concept {concept}, so other agents on this codebase see it."
            );
            CallResult::Ok
        }
        Err(cause) => {
            let _ = writeln!(
                out,
                "Not shared: {cause}. It is in the local store only; other agents do not see it."
            );
            CallResult::NotShared
        }
    };
    if let Some(cause) = &notes.recall {
        let _ = writeln!(
            out,
            "The duplicate check could not read the ledger ({cause})."
        );
    }
    let _ = write!(
        out,
        "Close it with mark_complete {} once fixed (commit trailer: Fixes-Finding: {}).",
        ids[0], ids[0]
    );
    Reply::ok(out).with_result(result)
}

fn already(id: &str, summary: &str, files: &[String], whence: &str) -> Reply {
    Reply::ok(format!(
        "Already recorded (open): {id} — use mark_complete or add details there.\nsummary: {summary}\nfiles: {}\nfound in {whence}; nothing was written.",
        files.join(", ")
    ))
    .with_result(CallResult::Duplicate)
}

/// A finding named by id: its local seeds, and the ledger's view of it when attached.
struct Named {
    seeds: Vec<Seed>,
    recalled: Option<Finding>,
    /// Its files as this checkout names them.
    files: Vec<String>,
    view: Option<LedgerView>,
}

async fn resolve_named(ctx: &Ctx, att: &Attachment, ws: &Path, id: &str) -> Result<Named, String> {
    let store = ctx.store();
    let seeds = match &store {
        Ok(st) if id.starts_with("agf_") => match st.get(id).map_err(|e| e.to_string())? {
            Some(seed) => st.group(&seed.group_id).map_err(|e| e.to_string())?,
            None => Vec::new(),
        },
        Ok(st) => st.by_concept(id).map_err(|e| e.to_string())?,
        Err(_) => Vec::new(),
    };
    let concept = seeds
        .iter()
        .find_map(|x| x.concept_ref.clone())
        .or_else(|| id.starts_with("concept_").then(|| id.to_string()));
    let view = recall_here(att, ws).await.ok();
    let mut recalled = view.as_ref().and_then(|v| {
        v.by_id(id)
            .or_else(|| concept.as_deref().and_then(|c| v.by_id(c)))
            .map(|r| r.finding.clone())
    });
    if recalled.is_none()
        && view.is_some()
        && let Some(c) = &concept
        && let Ok(Some(raw)) = fetch_concept(att, c).await
    {
        recalled = Finding::from_concept(&raw);
    }
    let files = match (&recalled, &view) {
        (Some(f), Some(v)) => v
            .by_id(f.id())
            .map(|r| r.files.clone())
            .unwrap_or_else(|| f.files.clone()),
        (Some(f), None) => f.files.clone(),
        _ => seeds.iter().map(|x| x.file.clone()).collect(),
    };
    Ok(Named {
        seeds,
        recalled,
        files,
        view,
    })
}

/// A finding as the verdict names it, from its seeds when the ledger never saw it.
fn finding_of_seeds(seeds: &[Seed], ws: &Path) -> Finding {
    let first = &seeds[0];
    let name = ws.file_name().map(|n| n.to_string_lossy().into_owned());
    Finding {
        concept_id: first.concept_ref.clone().unwrap_or_default(),
        seq: 0,
        created_ms: seeds.iter().map(|x| x.created_ms).min().unwrap_or(0),
        summary: first.summary.clone(),
        severity: first.severity,
        category: first.category.clone(),
        repo: Some(repo_identity(ws)),
        repo_name: name.clone(),
        workspace: name,
        files: seeds.iter().map(|x| x.file.clone()).collect(),
        lines: None,
        status: first.status.clone(),
        finding_ids: seeds.iter().map(|x| x.id.clone()).collect(),
        recorded_by: None,
        session: None,
        details: first.details.clone(),
    }
}

pub async fn mark_complete(ctx: &Ctx, here: &Here<'_>, a: MarkArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    let id = a.problem_id.trim();
    let discard = matches!(a.action, Some(MarkAction::Discard));
    if let Err(refused) = check_mark_args(id, discard, a.fix_commit.as_deref()) {
        return refused;
    }
    let named = match resolve_named(ctx, &s.att, ws, id).await {
        Ok(n) => n,
        Err(e) => return Reply::error(format!("mark_complete: {e}")),
    };
    if named.seeds.is_empty() && named.recalled.is_none() {
        let why = match s.att.gate().await {
            Ok(_) => "neither the local store nor the ledger knows it".to_string(),
            Err(cause) => format!(
                "the local store does not hold it and the ledger could not be asked ({cause})"
            ),
        };
        return Reply::error(format!(
            "mark_complete: {id} not found: {why}; nothing was recorded"
        ));
    }
    let finding = named
        .recalled
        .clone()
        .unwrap_or_else(|| finding_of_seeds(&named.seeds, ws));
    let Judged { kind, lines, note } = if discard {
        Judged {
            kind: VerdictKind::Discarded,
            lines: Vec::new(),
            note: None,
        }
    } else {
        match judge_fix(ws, &named, &finding, id, a.fix_commit.as_deref()) {
            Ok(judged) => judged,
            Err(reply) => return reply,
        }
    };
    let mut out = claim_note(&named, &finding, s.vessel.as_deref(), kind.closes());
    let nv = NewVerdict {
        finding: &finding,
        kind,
        reviewed_by: s.vessel.clone(),
        session: s.att.claim().session.clone(),
        origin: if named.seeds.is_empty() {
            VerdictOrigin::Remote
        } else {
            VerdictOrigin::Local
        },
        lines,
    };
    let (shared, local_only) = share_verdict(s, &nv).await;
    let result = render_verdict(&mut out, &nv, &shared);
    if let Some(n) = note {
        let _ = writeln!(out, "{n}");
    }
    let retire = kind.closes() && (shared.is_ok() || local_only);
    out.push_str(&retire_named(ctx, &named.seeds, retire, discard));
    Reply::ok(out.trim_end().to_string()).with_result(result)
}

/// Refuses what mark_complete cannot act on before anything is read.
fn check_mark_args(id: &str, discard: bool, fix_commit: Option<&str>) -> Result<(), Reply> {
    if !id.starts_with("agf_") && !id.starts_with("concept_") {
        return Err(Reply::error(format!(
            "mark_complete: {id} is not a finding id (agf_…) or a concept id (concept_…); nothing was recorded: there are no backend detections for it to name"
        )));
    }
    let Some(c) = fix_commit else { return Ok(()) };
    if discard {
        return Err(Reply::error(
            "mark_complete: fix_commit goes with endorse, not discard; nothing was recorded",
        ));
    }
    if !(7..=40).contains(&c.len()) || !c.chars().all(|ch| ch.is_ascii_hexdigit()) {
        return Err(Reply::error(format!(
            "mark_complete: fix_commit {c:?} is not a commit id (7-40 hex digits); nothing was recorded"
        )));
    }
    Ok(())
}

/// The verdict to write, its fix-location lines, and a note for the reply.
struct Judged {
    kind: VerdictKind,
    lines: Vec<(&'static str, String)>,
    note: Option<String>,
}

/// An endorse's verdict from git: where the fix is, or the reply saying why none is written.
fn judge_fix(
    ws: &Path,
    named: &Named,
    finding: &Finding,
    id: &str,
    fix_commit: Option<&str>,
) -> Result<Judged, Reply> {
    let repo = Repo::discover(ws).map_err(|e| {
        Reply::error(format!(
            "mark_complete: git did not answer ({e}); nothing was recorded, try again"
        ))
    })?;
    let files = match &repo {
        Some(r) => r.workspace_paths(ws, &named.files),
        None => named.files.clone(),
    };
    let not_applied = |why: &dyn std::fmt::Display| {
        Reply::ok(format!(
            "No verdict written for {id}: {why}. Nothing was retired."
        ))
        .with_result(CallResult::NotApplied)
    };
    match locate_fix(repo.as_ref(), finding, &files, fix_commit) {
        Ok(Located::Verdict { kind, lines, note }) => Ok(Judged { kind, lines, note }),
        Ok(Located::NoVerdict(why)) => Err(not_applied(&why)),
        Err(e @ FixRefused::Git(_)) => Err(Reply::error(format!(
            "mark_complete: {e}; nothing was recorded"
        ))),
        Err(e) => Err(not_applied(&e)),
    }
}

/// The line about someone else's live claim, since a verdict affects it.
fn claim_note(named: &Named, finding: &Finding, me: Option<&str>, closes: bool) -> String {
    let Some(h) = named
        .view
        .as_ref()
        .and_then(|v| v.holder(finding, crate::util::now_ms()))
        .filter(|h| Some(h.holder.as_str()) != me)
    else {
        return String::new();
    };
    if closes {
        format!(
            "claim: claimed by {} until {}; this closes it anyway, which ends their claim.\n",
            h.holder,
            rfc3339_ms(claims::lapses_at(&h))
        )
    } else {
        format!(
            "claim: claimed by {}; the claim was not applied, since the fix is not closed yet.\n",
            h.holder
        )
    }
}

/// The shared half through the ledger's one verdict writer: the verdict's id, or why it was not
/// shared; and whether the finding only ever lived here (so local seeds retire regardless).
async fn share_verdict(s: &Session, nv: &NewVerdict<'_>) -> (Result<String, String>, bool) {
    let gate = s.att.gate().await;
    let never_shared = nv.finding.concept_id.is_empty();
    let local_only = gate.is_err() || never_shared;
    let shared = match gate {
        Err(refusal) => Err(refusal.to_string()),
        Ok(_) if never_shared => {
            Err("the finding was never shared (recorded while detached)".into())
        }
        Ok(_) => verdict::write(&s.att, nv, "mark-complete")
            .await
            .map_err(|e| e.to_string()),
    };
    (shared, local_only)
}

fn render_verdict(
    out: &mut String,
    nv: &NewVerdict<'_>,
    shared: &Result<String, String>,
) -> CallResult {
    let verdict_line = nv.kind.line();
    match shared {
        Ok(vid) => {
            let _ = writeln!(
                out,
                "verdict: {verdict_line} ({vid}, origin {}).",
                nv.origin.as_str()
            );
            for (k, v) in &nv.lines {
                let _ = writeln!(out, "{k}: {v}");
            }
            if nv.kind.closes() {
                CallResult::Ok
            } else {
                CallResult::Pending
            }
        }
        Err(cause) => {
            let _ = writeln!(out, "verdict: {verdict_line}, not shared: {cause}.");
            CallResult::NotShared
        }
    }
}

/// The local half: a fix leaves the seeds stale, a discard deletes them; pending retires none.
fn retire_named(ctx: &Ctx, seeds: &[Seed], retire: bool, discard: bool) -> String {
    if seeds.is_empty() {
        return "Nothing local was retired: this machine holds no seed of the finding.".into();
    }
    if !retire {
        return "Nothing local was retired.".into();
    }
    let how = if discard {
        Retire::Delete
    } else {
        Retire::Stale
    };
    match ctx
        .store()
        .and_then(|st| st.retire(seeds, how).map_err(|e| e.to_string()))
    {
        Ok(n) => format!(
            "{n} local seeds retired ({}).",
            if discard { "deleted" } else { "resolved" }
        ),
        Err(e) => format!("Retiring the local seeds failed: {e}."),
    }
}

pub async fn claim_finding(ctx: &Ctx, here: &Here<'_>, a: ClaimArgs) -> Reply {
    let (s, ws) = (here.session, here.ws());
    if let Err(cause) = s.att.gate().await {
        return not_attached("claim_finding", &cause);
    }
    let refused = CallResult::Claim(ClaimWord::Refused);
    let Some(me) = s.vessel.clone() else {
        return Reply::error("claim_finding: a claim must name its holder and this process has no vessel identity (set VESSEL_ID or METABOB_API_KEY); nothing was written").with_result(refused);
    };
    let named = match resolve_named(ctx, &s.att, ws, a.problem_id.trim()).await {
        Ok(n) => n,
        Err(e) => {
            return Reply::error(format!("claim_finding: {e}")).with_result(CallResult::Error);
        }
    };
    let Some(finding) = named.recalled else {
        let why = if named.seeds.is_empty() {
            "neither the local store nor the ledger knows it"
        } else {
            "it is in the local store only (recorded while detached), so there is nothing shared to claim"
        };
        return Reply::error(format!(
            "claim_finding: {} not found: {why}; nothing was written",
            a.problem_id
        ))
        .with_result(refused);
    };
    let action = match a.action.unwrap_or(ClaimArg::Claim) {
        ClaimArg::Claim => ClaimAction::Claim,
        ClaimArg::Renew => ClaimAction::Renew,
        ClaimArg::Release => ClaimAction::Release,
    };
    let minutes = a.minutes.unwrap_or(claims::DEFAULT_CLAIM_MINUTES);
    let session_id = s.att.claim().session.clone();
    let claimed = claims::claim_finding(&s.att, &finding, &me, &session_id, minutes, action, None);
    let outcome = match claimed.await {
        Ok(o) => o,
        Err(e) => {
            return Reply::error(format!("claim_finding: {e}")).with_result(CallResult::Error);
        }
    };
    let mut reply = Reply::ok(claim_text(&outcome, finding.id()));
    reply.is_error = matches!(outcome, ClaimOutcome::Refused { .. });
    reply.with_result(CallResult::Claim(outcome.word()))
}

fn claim_text(outcome: &ClaimOutcome, id: &str) -> String {
    let until = |h: &Held| rfc3339_ms(claims::lapses_at(h));
    match outcome {
        ClaimOutcome::Claimed { held } => format!(
            "Claimed {id} until {}: it is yours; renew while working, release if you stop without a fix.",
            until(held)
        ),
        ClaimOutcome::Renewed { held } => format!("Renewed: {id} is yours until {}.", until(held)),
        ClaimOutcome::Released => format!("Released {id}: others may take it."),
        ClaimOutcome::Held { by } => format!(
            "Not claimed: {} holds {id} until {}; pick another finding.",
            by.holder,
            until(by)
        ),
        ClaimOutcome::Lost { winner } => format!(
            "Not claimed: {} claimed {id} first (until {}); ours was withdrawn.",
            winner.holder,
            until(winner)
        ),
        ClaimOutcome::Unsettled => format!(
            "The claim on {id} is written but not settled (the read-back never showed it); run claim_finding again before starting."
        ),
        ClaimOutcome::Closed => format!("{id} is closed; there is nothing to claim."),
        ClaimOutcome::Refused { reason } => format!("Refused: {reason}; nothing was written."),
    }
}
