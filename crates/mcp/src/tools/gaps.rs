//! path_activity (SPEC.md §path_activity): what the substrate has in flight on the paths an agent
//! is about to edit, from the gap store's cached whole-store read; and the gap lines other tools
//! add from that cache without ever reading the store themselves.

use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Reply, attached, resolve_failed};
use crate::ctx::{Ctx, Here};
use crate::gaps::{
    Gap, Layout, PathReport, Relation, Snapshot, State, Status, names_vessel, on_file,
};
use metabob_net::attachment::ResolveError;
use metabob_process::clock::now_ms;
use metabob_wire::text::rfc3339_ms;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ActivityArgs {
    /// Files or directories, workspace-relative or in the gap store's repos/<vessel>/<path> form.
    #[schemars(length(min = 1, max = 50))]
    pub paths: Vec<String>,
    /// Most gaps listed per path besides those being landed, which are always listed (default 10).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
    /// Also list closed gaps that named the paths.
    pub include_closed: Option<bool>,
}

/// anchor: path_activity
pub async fn path_activity(_ctx: &Ctx, here: &Here<'_>, a: ActivityArgs) -> Reply {
    let att = match attached(here, "path_activity").await {
        Ok(att) => att,
        Err(reply) => return reply,
    };
    let cache = &here.session.gaps;
    let open = match cache.get(att, Status::Open).await {
        Ok(s) => s,
        Err(ResolveError::NoProducer { .. }) => return Reply::ok(NO_GAP_STORE),
        Err(e) => return resolve_failed("path_activity", e),
    };
    let closed = match a.include_closed.unwrap_or(false) {
        false => None,
        true => match cache.get(att, Status::Closed).await {
            Ok(s) => Some(s),
            Err(e) => return resolve_failed("path_activity", e),
        },
    };
    let layout = Layout::for_workspace(here.ws());
    let limit = a.limit.unwrap_or(10);
    let mut out = read_line(&open);
    let mut seen = Seen::default();
    if let Layout::Unmapped { .. } = layout {
        out.push_str("This checkout is neither the super-repo (repos/ at its root) nor a vessel with an origin remote, so only paths given as repos/<vessel>/<path> are checked.\n");
    }
    for given in &a.paths {
        let mapped = layout.map(here.ws(), given);
        let Some(store) = mapped.store else {
            let _ = writeln!(
                out,
                "\n{given}: not checked: it has no name in the gap store."
            );
            continue;
        };
        if let Layout::Vessel { name, .. } = &layout
            && Layout::vessel_of(&store) == Some(name.as_str())
            && !names_vessel(&open.gaps, name)
        {
            let _ = writeln!(
                out,
                "\n{given}: not checked: no open gap names repos/{name}/, so this substrate may not mount {name}, and no gaps there would not mean nothing is in flight."
            );
            continue;
        }
        let report = PathReport::build(&open.gaps, &store, limit, now_ms());
        render_path(&mut out, given, &store, &report, &mut seen);
        if let Some(closed) = &closed {
            render_closed(&mut out, &closed.gaps, &store, limit);
        }
    }
    render_advice(&mut out, &seen);
    Reply::ok(out.trim_end().to_string())
}

const NO_GAP_STORE: &str = "path_activity: this substrate serves no gap store (no_producer(substrateGap)), so nothing is in flight to check: go ahead with the change, and record what you change (record_finding for what you leave, mark_complete for what you fix).";

/// Which states the reply showed, for the closing advice.
#[derive(Default)]
struct Seen {
    landing: bool,
    held: bool,
    queued: bool,
    /// Paths with no gap and none that could concern them: nothing in flight.
    clear: Vec<String>,
    /// Paths with no gap naming them, but gaps with no edit site that could.
    unplaced: Vec<String>,
}

fn open_gaps(n: usize) -> String {
    match n {
        1 => "1 open gap".into(),
        n => format!("{n} open gaps"),
    }
}

fn read_line(s: &Snapshot) -> String {
    let age = super::local::shared::age(s.read_ms);
    let count = if s.truncated {
        "the read reached its limit and may be truncated".to_string()
    } else {
        open_gaps(s.gaps.len())
    };
    format!("Gap store: {count} (read {age}; the read is shared and cached for 5 minutes).\n")
}

fn render_path(out: &mut String, given: &str, store: &str, r: &PathReport<'_>, seen: &mut Seen) {
    let name = if given.trim_end_matches('/') == store {
        store.to_string()
    } else {
        format!("{given} ({store})")
    };
    if r.open == 0 {
        if r.unplaced.is_empty() {
            let _ = writeln!(out, "\n{name}: no open gap names this path.");
            seen.clear.push(given.to_string());
        } else {
            let by: Vec<String> = r.unplaced.iter().map(|(c, n)| format!("{c} {n}")).collect();
            let _ = writeln!(
                out,
                "\n{name}: no open gap names this path, but {} open gaps with no edit site could concern it ({}).",
                r.unplaced.values().sum::<usize>(),
                by.join(", ")
            );
            seen.unplaced.push(given.to_string());
        }
        return;
    }
    let _ = writeln!(
        out,
        "\n{name}: {}: {} being landed now, {} held, {} queued.",
        open_gaps(r.open),
        r.landing,
        r.held,
        r.queued
    );
    let now = now_ms();
    for (gap, state, relation) in &r.listed {
        let _ = writeln!(out, "  - {}", gap_line(gap, state, *relation, now));
    }
    if r.rest > 0 {
        let _ = writeln!(out, "  … {} more (raise limit to list them).", r.rest);
    }
    seen.landing |= r.landing > 0;
    seen.held |= r.held > 0;
    seen.queued |= r.queued > 0;
}

fn gap_line(gap: &Gap, state: &State<'_>, relation: Relation, now: i64) -> String {
    let how = match relation {
        Relation::EditSite => "edit site",
        Relation::InDirectory => "edit site in this directory",
        Relation::Mentions => "mentions this path",
    };
    let head = format!("{} [{}, route {}; {how}]", gap.id, gap.category, gap.route);
    match state {
        State::Landing(l) => format!(
            "{head} being landed: lease held by {} (the holder's own claim){}, until {}. An edit made before the lease ends is lost or conflicts when the change lands; whether to wait is your user's decision.",
            l.holder,
            l.attempt
                .map(|n| format!(", attempt {n}"))
                .unwrap_or_default(),
            l.until_ms
                .map_or_else(|| "no end recorded".into(), |u| when(u, now)),
        ),
        State::Held(h) => format!(
            "{head} held: {}; {}{}",
            h.reason,
            h.review_by.as_ref().map_or_else(
                || "no review date recorded".to_string(),
                |d| format!("review by {d}")
            ),
            h.lift
                .as_ref()
                .map(|l| format!("; lift: {l}"))
                .unwrap_or_default(),
        ),
        State::Queued(None) => format!("{head} queued for the system."),
        State::Queued(Some(l)) => match l.until_ms {
            Some(u) => format!(
                "{head} queued for the system: the landing lease of {} lapsed at {}.",
                l.holder,
                when(u, now)
            ),
            None => format!(
                "{head} queued for the system: a lease of {} records no end and is possibly stale.",
                l.holder
            ),
        },
    }
}

/// A time with its date and how far it is from now.
fn when(ms: i64, now: i64) -> String {
    let secs = (ms - now) / 1000;
    let span = |s: i64| match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    };
    let rel = if secs >= 0 {
        format!("in {}", span(secs))
    } else {
        format!("{} ago", span(-secs))
    };
    format!("{} ({rel})", rfc3339_ms(ms))
}

fn render_closed(out: &mut String, closed: &[Gap], store: &str, limit: usize) {
    let mut hits: Vec<&Gap> = closed
        .iter()
        .filter(|g| g.relation(store).is_some())
        .collect();
    hits.sort_by_key(|g| -g.updated_ms);
    if hits.is_empty() {
        return;
    }
    let _ = writeln!(out, "  Closed gaps naming it: {}", hits.len());
    for g in hits.iter().take(limit) {
        let _ = writeln!(out, "  - {} [{}, route {}]", g.id, g.category, g.route);
    }
}

fn render_advice(out: &mut String, seen: &Seen) {
    out.push_str("\nWhat to do:\n");
    if seen.landing {
        out.push_str("- A gap is being landed: wait for its lease to end, then run path_activity again before editing.\n");
    }
    if seen.queued {
        out.push_str("- Queued gaps: prefer letting the system land them, or dispatch one as a goal, over editing the same code by hand.\n");
    }
    if seen.held {
        out.push_str("- Held gaps are not open work: leave them to their ruling.\n");
    }
    if !seen.unplaced.is_empty() {
        let _ = writeln!(
            out,
            "- {}: a gap with no edit site may concern it; read those before you call it free.",
            seen.unplaced.join(", ")
        );
    }
    if !seen.clear.is_empty() {
        let _ = writeln!(
            out,
            "- {}: nothing in flight; make the change and record it (record_finding for what you leave, mark_complete for what you fix).",
            seen.clear.join(", ")
        );
    }
}

/// The cached open gaps, when this session is attached and its checkout maps to the store; `Err`
/// is the one line to show when the store has not been read yet. `None`: add nothing.
fn cached(here: &Here<'_>) -> Option<Result<(Layout, std::sync::Arc<Snapshot>), String>> {
    let attached = here.session.att.settled().is_some_and(|s| s.attached());
    let layout = Layout::for_workspace(here.ws());
    if !attached || matches!(layout, Layout::Unmapped { .. }) {
        return None;
    }
    Some(match here.session.gaps.peek() {
        Some(s) => Ok((layout, s)),
        None => {
            Err("Open gaps on these files: not loaded (path_activity reads and shows them).".into())
        }
    })
}

/// One line per changed file: its open gaps, how many are being landed and how many are held
/// (anchor: gap_summary_lines). From the cache only: never starts the store read.
pub fn gap_summary_lines(here: &Here<'_>, files: &[String]) -> String {
    let (layout, snap) = match cached(here) {
        None => return String::new(),
        Some(Err(line)) => return format!("{line}\n"),
        Some(Ok(c)) => c,
    };
    let now = now_ms();
    let mut out = String::new();
    for file in files {
        let Some(store) = layout.map(here.ws(), file).store else {
            continue;
        };
        let (gaps, landing, held) = on_file(&snap.gaps, &store, now);
        let _ = writeln!(
            out,
            "Gaps on {file}: {} open, {landing} being landed, {held} held (path_activity lists them).",
            gaps.len()
        );
    }
    out
}

/// Per file, up to three open gaps whose edit site it is, so a finding that repeats one can be
/// discarded (anchor: open_gaps_on_files_lines). From the cache only.
pub fn open_gaps_on_files_lines(here: &Here<'_>, files: &[String]) -> String {
    let Some(Ok((layout, snap))) = cached(here) else {
        return String::new();
    };
    let mut out = String::new();
    for file in files {
        let Some(store) = layout.map(here.ws(), file).store else {
            continue;
        };
        let (gaps, _, _) = on_file(&snap.gaps, &store, now_ms());
        for g in gaps.iter().take(3) {
            if out.is_empty() {
                out.push_str("The system's own open gaps on these files (if one is the same issue as a finding, mark_complete discard the finding):\n");
            }
            let _ = writeln!(
                out,
                "- {file}: {} [{}]{}",
                g.id,
                g.category,
                first_line(&g.text)
            );
        }
    }
    out
}

/// The first line of a gap's goal or summary, after a space; nothing when it has none.
fn first_line(text: &str) -> String {
    match text.lines().next().map(str::trim) {
        Some(line) if !line.is_empty() => {
            format!(" {}", line.chars().take(160).collect::<String>())
        }
        _ => String::new(),
    }
}
