//! The findings tools (SPEC.md §Findings tools) on the ledger's vocabulary: the local store is
//! this machine's half, the ledger the shared half. A detached session still runs every local
//! half; the shared half names the attachment's cause instead of pretending to be empty.

use std::fmt::Write as _;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::local::{NO_SERVER_ANALYSIS, by_group, local_seeds, relative, seed_line};
use super::{Reply, not_attached};
use crate::attachment::Attachment;
use crate::cell::fix_location::{FixRefused, Located, locate_fix};
use crate::git::Repo;
use crate::ledger::claims::{self, ClaimAction, ClaimOutcome, Held};
use crate::ledger::finding::{Finding, NewFinding, Severity, lines_field, new_finding_id};
use crate::ledger::recall::{self, LedgerView, Recalled, fetch_concept};
use crate::ledger::record::{find_open_duplicate, same_summary};
use crate::ledger::repo_identity::{Aliases, repo_identity};
use crate::ledger::verdict::{self, NewVerdict, Pending, Standing, VerdictKind};
use crate::mcp::ctx::{Ctx, Session};
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

fn session(ctx: &Ctx) -> (&Session, std::path::PathBuf) {
    let ws = ctx
        .decide()
        .expect("the gate decided the workspace before the tool ran")
        .path;
    (
        ctx.session()
            .expect("a decided workspace derived the session"),
        ws,
    )
}

/// The recall for this workspace, or the line saying why it did not run.
async fn recall_here(att: &Attachment, ws: &Path) -> Result<LedgerView, String> {
    att.gate().await?;
    let aliases = Aliases::for_workspace(ws);
    recall::recall(att, |f| {
        aliases.map_finding(f.repo.as_deref().unwrap_or_default(), &f.files)
    })
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

/// Open findings, headline first (anchor: open_findings_headline).
fn render_problems(
    out: &mut String,
    p: &Problems,
    f: &Filters<'_>,
    limit: usize,
    me: Option<&str>,
    ws: &Path,
    full: bool,
) {
    let tasks_listed = f.tasks_are_the_list();
    let is_task = |cat: &str| cat.eq_ignore_ascii_case("task");
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
        .partition(|s| is_task(&s.category) && !tasks_listed);

    let mut open: Vec<&Recalled> = Vec::new();
    let mut open_tasks: Vec<&Recalled> = Vec::new();
    let mut closed: Vec<(&Recalled, verdict::Verdict)> = Vec::new();
    let mut closed_tasks: Vec<(&Recalled, verdict::Verdict)> = Vec::new();
    if let Ok(view) = &p.recall {
        for r in &view.findings {
            if !f.keeps(r.finding.severity, &r.finding.category, &r.files) {
                continue;
            }
            let task = r.finding.is_task() && !tasks_listed;
            match view.standing(&r.finding) {
                Standing::Closed { verdict } if task => closed_tasks.push((r, verdict)),
                Standing::Closed { verdict } => closed.push((r, verdict)),
                _ if task => open_tasks.push(r),
                _ => open.push(r),
            }
        }
    }
    let both = local_findings
        .iter()
        .filter(|g| open.iter().any(|r| overlaps(&[**g], &p.local_all, r)))
        .count();
    let task_count = open_tasks.len()
        + local_tasks
            .iter()
            .filter(|g| !open_tasks.iter().any(|r| overlaps(&[**g], &p.local_all, r)))
            .count();
    let local_line = match &p.store_error {
        Some(e) => format!("local store unavailable: {e}"),
        None => format!("{} in the local store", local_findings.len()),
    };
    let mut head = match &p.recall {
        Ok(_) => {
            let total = local_findings.len() + open.len() - both;
            let mut h = format!(
                "Open findings: {total} ({local_line}, {} recorded by agents on this codebase",
                open.len()
            );
            if both > 0 {
                let _ = write!(h, "; {both} in both");
            }
            h.push(')');
            h
        }
        Err(cause) => format!(
            "Open findings: {} ({local_line}; recall did not run: {cause})",
            local_findings.len()
        ),
    };
    if task_count > 0 {
        let _ = write!(head, "; {task_count} open tasks, listed apart");
        if !closed_tasks.is_empty() {
            let _ = write!(head, "; {} closed", closed_tasks.len());
        }
    }
    let _ = writeln!(out, "{head}");
    let sev_count = |s: Severity| local_findings.iter().filter(|x| x.severity == s).count();
    let _ = writeln!(
        out,
        "local store: {} open ({} critical, {} high)",
        local_findings.len(),
        sev_count(Severity::Critical),
        sev_count(Severity::High)
    );
    if local_findings.is_empty() {
        let _ = writeln!(
            out,
            "No agent-recorded findings in the local store{}.",
            f.file.map(|p| format!(" for {p}")).unwrap_or_default()
        );
    } else {
        for s in local_findings.iter().take(limit) {
            let _ = writeln!(out, "{}", seed_line(s));
        }
    }
    let _ = writeln!(out, "{NO_SERVER_ANALYSIS}");
    let Ok(view) = &p.recall else {
        return;
    };
    let shown = if full { 10 } else { 5 };
    let _ = writeln!(
        out,
        "Findings recorded by agents on this codebase ({} open{}):",
        open.len(),
        if view.findings_truncated {
            "; the read reached its limit, older findings may be missing"
        } else {
            ""
        }
    );
    for r in open.iter().take(shown) {
        let _ = writeln!(out, "{}", recalled_line(r, &tags(view, &r.finding, me)));
    }
    if view.verdicts_truncated {
        let _ = writeln!(
            out,
            "The verdict read reached its limit: each finding's linked verdicts were read too, but a verdict or claim written before verdicts were linked may be missed."
        );
    }
    if !full {
        return;
    }
    let repo = Repo::discover(ws).ok().flatten();
    if !closed.is_empty() {
        let _ = writeln!(out, "Closed findings ({}):", closed.len());
        for (r, v) in closed.iter().take(10) {
            let _ = writeln!(out, "{}", closed_line(repo.as_ref(), r, v));
        }
    }
    if task_count > 0 || !closed_tasks.is_empty() {
        render_tasks(out, view, &open_tasks, &local_tasks, &p.local_all, me);
        if !closed_tasks.is_empty() {
            let _ = writeln!(out, "Closed tasks ({}):", closed_tasks.len());
            for (r, v) in closed_tasks.iter().take(5) {
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

pub async fn get_problems(ctx: &Ctx, a: ProblemsArgs) -> Reply {
    let (s, ws) = session(ctx);
    let p = Problems::read(ctx, &s.att, &ws).await;
    let file = a.file_path.as_deref().map(|f| relative(&ws, f));
    let filters = Filters {
        severity: a.severity.as_deref(),
        category: a.category.as_deref(),
        file: file.as_deref(),
    };
    let mut out = String::new();
    render_problems(
        &mut out,
        &p,
        &filters,
        a.limit.unwrap_or(10),
        s.vessel.as_deref(),
        &ws,
        true,
    );
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

pub async fn get_analysis_context(ctx: &Ctx, a: ContextArgs) -> Reply {
    let (s, ws) = session(ctx);
    // The recall settles the attachment first, so the line below reports where it stands.
    let p = Problems::read(ctx, &s.att, &ws).await;
    let mut out = attachment_lines(s);
    out.push('\n');
    let decided = ctx.decide().expect("decided above");
    let _ = writeln!(
        out,
        "Workspace: {} (from {})",
        ws.display(),
        decided.source.describe()
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
    let _ = writeln!(out, "{}", super::local::graph_line(ctx, &ws));
    let filters = Filters {
        severity: None,
        category: None,
        file: None,
    };
    render_problems(
        &mut out,
        &p,
        &filters,
        a.problem_limit.unwrap_or(10),
        s.vessel.as_deref(),
        &ws,
        false,
    );
    if !a.recently_changed_files.is_empty() {
        let cochange = super::local::predict_cochanges(
            ctx,
            super::local::CochangeArgs {
                changed_files: a.recently_changed_files.clone(),
                limit: Some(8),
                confidence_threshold: Some(0.3),
            },
        )
        .await;
        let _ = writeln!(out, "{}", cochange.text);
    }
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
    out.push_str("Next: ");
    if serious + shared == 0 {
        out.push_str("no open critical or high local findings and no open shared findings; before editing a file, get_problems with its file_path.");
    } else {
        let _ = write!(
            out,
            "{serious} critical/high local and {shared} open shared findings: check get_problems for the files you edit, claim_finding what you take on, mark_complete what you fix."
        );
    }
    Reply::ok(out)
}

pub async fn record_finding(ctx: &Ctx, a: RecordArgs) -> Reply {
    let (s, ws) = session(ctx);
    if a.files.is_empty() || a.summary.trim().is_empty() || a.category.trim().is_empty() {
        return Reply::error(
            "record_finding: a finding needs at least one file, a summary and a category; nothing was recorded",
        );
    }
    let store = match ctx.store() {
        Ok(st) => st,
        Err(e) => return Reply::error(format!("record_finding: {e}; nothing was recorded")),
    };
    let files: Vec<String> = a.files.iter().map(|f| relative(&ws, f)).collect();
    let status = a.status.clone().unwrap_or_else(|| "open".into());
    let summary = a.summary.trim().to_string();
    let ws_key = ws.display().to_string();
    let mut recall_note = None;
    if !a.force.unwrap_or(false) && status == "open" {
        let local = store.seeds(&ws_key, false).unwrap_or_default();
        if let Some(d) = local
            .iter()
            .find(|x| files.contains(&x.file) && same_summary(&x.summary, &summary))
        {
            return already(
                &d.id,
                &d.summary,
                std::slice::from_ref(&d.file),
                "the local store",
            );
        }
        match recall_here(&s.att, &ws).await {
            Ok(view) => {
                if let Some(d) = find_open_duplicate(&view, &files, &summary) {
                    let local_id = store
                        .by_concept(&d.finding.concept_id)
                        .ok()
                        .and_then(|v| v.first().map(|x| x.id.clone()));
                    return already(
                        local_id.as_deref().unwrap_or(&d.finding.concept_id),
                        &d.finding.summary,
                        &d.files,
                        "the shared ledger",
                    );
                }
            }
            Err(cause) => recall_note = Some(cause),
        }
    }
    let ids: Vec<String> = files.iter().map(|_| new_finding_id()).collect();
    let details = a.details.clone().unwrap_or_default();
    let seeds = match store.insert(&NewSeeds {
        workspace: &ws_key,
        ids: &ids,
        files: &files,
        summary: &summary,
        details: &details,
        severity: a.severity,
        category: a.category.trim(),
        lines: (a.line_start, a.line_end),
        status: if status == "open" { "open" } else { "stale" },
    }) {
        Ok(v) => v,
        Err(e) => return Reply::error(format!("record_finding: {e}; nothing was recorded")),
    };
    let mut out = format!(
        "Recorded {} [{}][{}] {} on {}.\n",
        ids.join(", "),
        a.severity,
        a.category.trim(),
        summary,
        files.join(", ")
    );
    let name = ws
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lines = lines_field(&files[0], a.line_start, a.line_end);
    let shared = match s.att.gate().await {
        Err(cause) => Err(cause),
        Ok(_) => {
            let nf = NewFinding {
                finding_ids: ids.clone(),
                files: files.clone(),
                summary: summary.clone(),
                details,
                severity: a.severity,
                category: a.category.trim().to_string(),
                repo: repo_identity(&ws),
                repo_name: name.clone(),
                workspace: name,
                lines,
                status,
                recorded_by: s.vessel.clone(),
                session: s.att.claim().session.clone(),
            };
            crate::ledger::write_concept(&s.att, nf.to_pointer())
                .await
                .map_err(|e| e.to_string())
        }
    };
    let result = match shared {
        Ok(concept) => {
            if let Err(e) = store.set_concept(&seeds[0].group_id, &concept) {
                let _ = writeln!(out, "Linking the seeds to {concept} failed: {e}.");
            }
            let _ = writeln!(
                out,
                "Shared on the ledger as concept {concept}, so other agents on this codebase see it."
            );
            "ok"
        }
        Err(cause) => {
            let _ = writeln!(
                out,
                "Not shared: {cause}. It is in the local store only; other agents do not see it."
            );
            "not_shared"
        }
    };
    if let Some(cause) = recall_note {
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
    .with_result("duplicate")
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

pub async fn mark_complete(ctx: &Ctx, a: MarkArgs) -> Reply {
    let (s, ws) = session(ctx);
    let id = a.problem_id.trim();
    if !id.starts_with("agf_") && !id.starts_with("concept_") {
        return Reply::error(format!(
            "mark_complete: {id} is not a finding id (agf_…) or a concept id (concept_…); nothing was recorded: there are no backend detections for it to name"
        ));
    }
    let discard = matches!(a.action, Some(MarkAction::Discard));
    if let Some(c) = &a.fix_commit {
        if discard {
            return Reply::error(
                "mark_complete: fix_commit goes with endorse, not discard; nothing was recorded",
            );
        }
        if !(7..=40).contains(&c.len()) || !c.chars().all(|ch| ch.is_ascii_hexdigit()) {
            return Reply::error(format!(
                "mark_complete: fix_commit {c:?} is not a commit id (7-40 hex digits); nothing was recorded"
            ));
        }
    }
    let named = match resolve_named(ctx, &s.att, &ws, id).await {
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
        .unwrap_or_else(|| finding_of_seeds(&named.seeds, &ws));
    let origin = if named.seeds.is_empty() {
        "remote"
    } else {
        "local"
    };

    let (kind, lines, note) = if discard {
        (VerdictKind::Discarded, Vec::new(), None)
    } else {
        let repo = match Repo::discover(&ws) {
            Ok(r) => r,
            Err(e) => {
                return Reply::error(format!(
                    "mark_complete: git did not answer ({e}); nothing was recorded, try again"
                ));
            }
        };
        let files = match &repo {
            Some(r) => r.workspace_paths(&ws, &named.files),
            None => named.files.clone(),
        };
        match locate_fix(repo.as_ref(), &finding, &files, a.fix_commit.as_deref()) {
            Ok(Located::Verdict { kind, lines, note }) => (kind, lines, note),
            Ok(Located::NoVerdict(why)) => {
                return Reply::ok(format!(
                    "No verdict written for {id}: {why}. Nothing was retired."
                ))
                .with_result("not_applied");
            }
            Err(e @ FixRefused::Git(_)) => {
                return Reply::error(format!("mark_complete: {e}; nothing was recorded"));
            }
            Err(e) => {
                return Reply::ok(format!(
                    "No verdict written for {id}: {e}. Nothing was retired."
                ))
                .with_result("not_applied");
            }
        }
    };
    let closes = matches!(kind, VerdictKind::Fixed | VerdictKind::Discarded);
    let mut out = String::new();
    if let Some(v) = &named.view
        && let Some(h) = v.holder(&finding, crate::util::now_ms())
        && Some(h.holder.as_str()) != s.vessel.as_deref()
    {
        if closes {
            let _ = writeln!(
                out,
                "claim: claimed by {} until {}; this closes it anyway, which ends their claim.",
                h.holder,
                rfc3339_ms(claims::lapses_at(&h))
            );
        } else {
            let _ = writeln!(
                out,
                "claim: claimed by {}; the claim was not applied, since the fix is not closed yet.",
                h.holder
            );
        }
    }
    // The shared half: the verdict, its link and the relevance credit.
    let gate = s.att.gate().await;
    let local_only = gate.is_err() || finding.concept_id.is_empty();
    let shared: Result<String, String> = match gate {
        Err(cause) => Err(cause),
        Ok(_) if finding.concept_id.is_empty() => {
            Err("the finding was never shared (recorded while detached)".into())
        }
        Ok(_) => {
            let nv = NewVerdict {
                finding: &finding,
                kind,
                reviewed_by: s.vessel.clone(),
                session: s.att.claim().session.clone(),
                origin,
                lines: lines.clone(),
            };
            match crate::ledger::write_concept(&s.att, nv.to_pointer()).await {
                Err(e) => Err(e.to_string()),
                Ok(vid) => {
                    if let Err(e) = s
                        .att
                        .resolve(verdict::link_pointer(&vid, &finding.concept_id))
                        .await
                    {
                        tracing::debug!("linking verdict {vid} failed: {e}");
                    }
                    if closes {
                        let outcome = if discard { "failure" } else { "success" };
                        let usage = json!({"type": "conceptUsage_write", "usageData": {
                            "concept_id": finding.concept_id, "trace_id": format!("mark-complete:{vid}"), "outcome": outcome}});
                        if let Err(e) = s.att.resolve(usage).await {
                            tracing::warn!("recording the verdict's relevance failed: {e}");
                        }
                    }
                    Ok(vid)
                }
            }
        }
    };
    let verdict_line = kind.line();
    let result = match (&shared, closes) {
        (Ok(vid), _) => {
            let _ = writeln!(out, "verdict: {verdict_line} ({vid}, origin {origin}).");
            for (k, v) in &lines {
                let _ = writeln!(out, "{k}: {v}");
            }
            if closes { "ok" } else { "pending" }
        }
        (Err(cause), _) => {
            let _ = writeln!(out, "verdict: {verdict_line}, not shared: {cause}.");
            "not_shared"
        }
    };
    if let Some(n) = note {
        let _ = writeln!(out, "{n}");
    }
    // The local half: a fix leaves the seeds stale, a discard deletes them; pending retires none.
    if named.seeds.is_empty() {
        out.push_str("Nothing local was retired: this machine holds no seed of the finding.");
    } else if closes && (shared.is_ok() || local_only) {
        let how = if discard {
            Retire::Delete
        } else {
            Retire::Stale
        };
        match ctx.store().map(|st| st.retire(&named.seeds, how)) {
            Ok(Ok(n)) => {
                let _ = write!(
                    out,
                    "{n} local seeds retired ({}).",
                    if discard { "deleted" } else { "resolved" }
                );
            }
            Ok(Err(e)) => {
                let _ = write!(out, "Retiring the local seeds failed: {e}.");
            }
            Err(e) => {
                let _ = write!(out, "Retiring the local seeds failed: {e}.");
            }
        }
    } else {
        out.push_str("Nothing local was retired.");
    }
    Reply::ok(out.trim_end().to_string()).with_result(result)
}

pub async fn claim_finding(ctx: &Ctx, a: ClaimArgs) -> Reply {
    let (s, ws) = session(ctx);
    if let Err(cause) = s.att.gate().await {
        return not_attached("claim_finding", &cause);
    }
    let Some(me) = s.vessel.clone() else {
        return Reply::error("claim_finding: a claim must name its holder and this process has no vessel identity (set VESSEL_ID or METABOB_API_KEY); nothing was written").with_result("refused");
    };
    let named = match resolve_named(ctx, &s.att, &ws, a.problem_id.trim()).await {
        Ok(n) => n,
        Err(e) => return Reply::error(format!("claim_finding: {e}")).with_result("error"),
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
        .with_result("refused");
    };
    let action = match a.action.unwrap_or(ClaimArg::Claim) {
        ClaimArg::Claim => ClaimAction::Claim,
        ClaimArg::Renew => ClaimAction::Renew,
        ClaimArg::Release => ClaimAction::Release,
    };
    let minutes = a.minutes.unwrap_or(claims::DEFAULT_CLAIM_MINUTES);
    let session_id = s.att.claim().session.clone();
    let outcome = match claims::claim_finding(
        &s.att,
        &finding,
        &me,
        &session_id,
        minutes,
        action,
        None,
    )
    .await
    {
        Ok(o) => o,
        Err(e) => return Reply::error(format!("claim_finding: {e}")).with_result("error"),
    };
    let until = |h: &Held| rfc3339_ms(claims::lapses_at(h));
    let text = match &outcome {
        ClaimOutcome::Claimed { held } => format!(
            "Claimed {} until {}: it is yours; renew while working, release if you stop without a fix.",
            finding.id(),
            until(held)
        ),
        ClaimOutcome::Renewed { held } => {
            format!("Renewed: {} is yours until {}.", finding.id(), until(held))
        }
        ClaimOutcome::Released => format!("Released {}: others may take it.", finding.id()),
        ClaimOutcome::Held { by } => format!(
            "Not claimed: {} holds {} until {}; pick another finding.",
            by.holder,
            finding.id(),
            until(by)
        ),
        ClaimOutcome::Lost { winner } => format!(
            "Not claimed: {} claimed {} first (until {}); ours was withdrawn.",
            winner.holder,
            finding.id(),
            until(winner)
        ),
        ClaimOutcome::Unsettled => format!(
            "The claim on {} is written but not settled (the read-back never showed it); run claim_finding again before starting.",
            finding.id()
        ),
        ClaimOutcome::Closed => format!("{} is closed; there is nothing to claim.", finding.id()),
        ClaimOutcome::Refused { reason } => format!("Refused: {reason}; nothing was written."),
    };
    let mut reply = Reply::ok(text);
    if matches!(outcome, ClaimOutcome::Refused { .. } | ClaimOutcome::Closed) {
        reply.is_error = matches!(outcome, ClaimOutcome::Refused { .. });
    }
    reply.with_result(outcome.word())
}
