//! Every tool (SPEC.md §Tool registry and the call path): its name, description, argument type and
//! handler in one table, and the one path every call takes (workspace gate, schema check,
//! outgoing guard, call log), whether it came over MCP or from `tool call`.

pub mod agent;
pub mod concepts;
pub mod findings;
pub mod gaps;
pub mod goals;
pub mod inspect;
pub mod local;

use std::time::Instant;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::calllog::{Entry, Via};
use super::ctx::{Ctx, Here};
use super::schema::{schema_of, validate};
use metabob_net::attachment::{Attachment, GateRefusal, ResolveError};
use metabob_process::guard::describe_args_for_log;
use metabob_wire::claims::ClaimWord;

/// How a call ended, for the call log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The outgoing guard, or a tool's own allowlist, refused the input; nothing was sent.
    Refused,
    /// The attachment's gate refused a tool that is substrate only.
    NotAttached,
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::NotAttached => "not_attached",
            Outcome::Error => "error",
        }
    }
}

/// What a call did beyond running, for the call log: whether a write was shared, and how a
/// claim came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallResult {
    /// Written locally and on the ledger.
    Ok,
    /// A verdict written, but the fix is pending.
    Pending,
    /// Kept locally; the ledger write did not happen.
    NotShared,
    /// No verdict applies (for example no fix is found in git).
    NotApplied,
    /// Nothing was written: the same finding is already open.
    Duplicate,
    Error,
    Claim(ClaimWord),
}

impl CallResult {
    pub fn as_str(self) -> &'static str {
        match self {
            CallResult::Ok => "ok",
            CallResult::Pending => "pending",
            CallResult::NotShared => "not_shared",
            CallResult::NotApplied => "not_applied",
            CallResult::Duplicate => "duplicate",
            CallResult::Error => "error",
            CallResult::Claim(w) => w.as_str(),
        }
    }
}

/// A tool's answer: one text block, an error flag, and what the call log records.
#[derive(Clone, Debug)]
pub struct Reply {
    pub text: String,
    pub is_error: bool,
    pub outcome: Outcome,
    /// What the answer did beyond running (claim outcomes, mark_complete's result).
    pub result: Option<CallResult>,
}

impl Reply {
    pub fn ok(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            is_error: false,
            outcome: Outcome::Ok,
            result: None,
        }
    }
    pub fn error(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            is_error: true,
            outcome: Outcome::Error,
            result: None,
        }
    }
    /// A library error as a tool's answer: `tool: <cause>; <hint>`, joined as the CLI joins them
    /// (`report::with_hint`), so a hint is written once, by the error's type.
    pub fn failed<E: metabob_wire::report::Hint + 'static>(tool: &str, e: &E) -> Reply {
        Reply::error(format!("{tool}: {}", metabob_wire::report::with_hint(e)))
    }
    pub fn with_result(mut self, result: CallResult) -> Reply {
        self.result = Some(result);
        self
    }
    fn outcome(mut self, outcome: Outcome) -> Reply {
        self.outcome = outcome;
        self
    }
}

pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub schema: fn() -> Map<String, Value>,
    /// Its strings go to the substrate, so its input passes the outgoing guard first.
    pub sends: bool,
}

macro_rules! registry {
    ($( $name:ident($args:ty, sends: $sends:literal) => $handler:path, $desc:literal; )*) => {
        /// Every tool this server serves (anchor: TOOLS).
        pub const TOOLS: &[ToolSpec] = &[$(ToolSpec {
            name: stringify!($name),
            description: $desc,
            schema: schema_of::<$args>,
            sends: $sends,
        }),*];

        async fn dispatch(ctx: &Ctx, here: &Here<'_>, name: &str, args: Value) -> Reply {
            match name {
                $(stringify!($name) => match parse::<$args>(args) {
                    Ok(a) => $handler(ctx, here, a).await,
                    Err(e) => Reply::error(format!("{name}: invalid arguments: {e}")),
                },)*
                other => Reply::error(unknown_tool(other)),
            }
        }
    };
}

registry! {
    init_workspace(local::InitArgs, sends: false) => local::init_workspace,
        "Index the workspace into the local code graph (tree-sitter; nothing leaves the machine). Binds the workspace for the session.";
    search_codebase(local::SearchArgs, sends: false) => local::search_codebase,
        "Search code components (local graph) and local findings by keyword.";
    predict_cochanges(local::CochangeArgs, sends: false) => local::predict_cochanges,
        "Files that changed together with the given files in recent git history, with confidence.";
    analyze_impact(local::ImpactArgs, sends: false) => local::analyze_impact,
        "Components affected by changing the given files, through calls and imports in the local code graph.";
    assign_git_changes(local::AssignArgs, sends: false) => local::assign_git_changes,
        "Map changed files to the code components they touch, with their git co-changes.";
    get_metrics(local::NoArgs, sends: false) => local::get_metrics,
        "This workspace's local analysis state: findings by severity and category, graph size.";
    annotate_component(local::AnnotateArgs, sends: false) => local::annotate_component,
        "Structured why/how notes for a finding in the local store.";
    get_problems(findings::ProblemsArgs, sends: false) => findings::get_problems,
        "Open findings on this codebase: the local store and what agents recorded on the shared ledger, tasks listed apart. Check before editing files others work on.";
    get_analysis_context(findings::ContextArgs, sends: false) => findings::get_analysis_context,
        "Where this session writes and as whom, the index state, open problems, co-changes and recalled findings in one snapshot.";
    record_finding(findings::RecordArgs, sends: true) => findings::record_finding,
        "Record a problem you noticed and did not fix, so other agents see it (local store + shared ledger).";
    mark_complete(findings::MarkArgs, sends: true) => findings::mark_complete,
        "Close a finding: endorse (fixed; the fix location is read from git) or discard (false positive).";
    claim_finding(findings::ClaimArgs, sends: true) => findings::claim_finding,
        "Claim a finding before working on it, renew while working, release when stopping without a fix.";
    path_activity(gaps::ActivityArgs, sends: false) => gaps::path_activity,
        "Before editing shared files: what the substrate has in flight on them (gaps being landed, held, queued). Paths are matched locally and never sent.";
    concept_search(concepts::SearchArgs, sends: true) => concepts::concept_search,
        "Search the shared concept graph by words, shape, source type or relevance, or read one concept by id with its full body.";
    concept_neighbors(concepts::NeighborsArgs, sends: true) => concepts::concept_neighbors,
        "Concepts linked to one concept, with each edge's type, direction, weight and the neighbour's summary and body.";
    concept_usage_stats(concepts::UsageStatsArgs, sends: true) => concepts::concept_usage_stats,
        "How often a concept was used and how often it helped or misled, with its recent usage rows.";
    concept_sequence(concepts::SequenceArgs, sends: true) => concepts::concept_sequence,
        "Concepts observed to follow (or precede) a concept, strongest link first.";
    concept_link(concepts::LinkArgs, sends: true) => concepts::concept_link,
        "Record a typed edge between two concepts; repeating it strengthens the existing edge.";
    concept_create(concepts::CreateArgs, sends: true) => concepts::concept_create,
        "Store a new concept (body, shape, source type) in the shared graph, stamped with this session as its author.";
    concept_record_usage(concepts::RecordUsageArgs, sends: true) => concepts::concept_record_usage,
        "Report that a concept helped (success), misled (failure) or was only loaded (neutral); this moves its relevance.";
    registry_query(inspect::RegistryArgs, sends: true) => inspect::registry_query,
        "The shapes the substrate advertises (mode shapes, optionally filtered), or which vessels serve one shape (mode vessels).";
    execution_trace(inspect::TraceArgs, sends: true) => inspect::execution_trace,
        "Recent execution traces newest first, or one trace by execution id: status, template, reach tags, failure mode and per-task sequence.";
    resolve_impulse(inspect::ImpulseArgs, sends: true) => inspect::resolve_impulse,
        "Escape hatch: resolve one allowlisted plain read (memoryNote, traceAggregateReport, llmSpendSummary, …) or memoryNote_write, sent once. Anything else is refused before sending; prefer a dedicated tool.";
    run_goal_async(goals::DispatchArgs, sends: true) => goals::run_goal_async,
        "Dispatch a goal (in words, or a template) and return its dispatchId at once; the default for non-trivial goals.";
    run_goal(goals::DispatchArgs, sends: true) => goals::run_goal,
        "Dispatch a short goal and wait for it, polling its record: reached, status, execution and duration.";
    goal_status(goals::StatusArgs, sends: true) => goals::goal_status,
        "Where a dispatched goal stands: reached first, then status, who dispatched, the live walk log or the finished trace.";
    goal_reasoning(goals::StatusArgs, sends: true) => goals::goal_reasoning,
        "Why a finished dispatch went as it did: its numbered walk log, its per-task trace and the reach verdict.";
    provide_feedback(goals::FeedbackArgs, sends: true) => goals::provide_feedback,
        "Label a finished dispatch reached, not_reached or partial with your evidence, once, for the oracle corpus.";
    pull_assigned_work(agent::PullArgs, sends: false) => agent::pull_assigned_work,
        "List the decisions queued on this machine for you to answer (oldest first), claiming each; the substrate dispatches nothing to a client-only session, so the queue is usually empty.";
    submit_resolution(agent::SubmitArgs, sends: true) => agent::submit_resolution,
        "Answer a task from pull_assigned_work (answered, declined or insufficient_context): recorded locally first, then delivered to goal-host once.";
}

/// The tools that send nothing and so skip the outgoing guard (anchor: GUARD_EXEMPT); every
/// other tool's input is guarded.
pub const GUARD_EXEMPT: &[&str] = &[
    "init_workspace",
    "search_codebase",
    "predict_cochanges",
    "analyze_impact",
    "assign_git_changes",
    "get_metrics",
    "annotate_component",
    "get_problems",
    "get_analysis_context",
    "path_activity",
    "pull_assigned_work",
];

/// The tool's argument struct from arguments the schema check passed. What the schema cannot say
/// (a number past the field's integer type, say) still fails here, and the error names the field
/// as the schema check's do.
fn parse<T: DeserializeOwned>(args: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let cause = e.into_inner();
        if path == "." {
            format!("arguments: {cause}")
        } else {
            format!("{path}: {cause}")
        }
    })
}

pub fn spec(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|t| t.name == name)
}

/// The line for a tool name that is not served (anchor: unknown_tool), with the closest served
/// name when one is near enough to be a typo, as clap does for commands.
pub fn unknown_tool(name: &str) -> String {
    let shown = metabob_wire::text::one_line(name, 60);
    let near = TOOLS
        .iter()
        .map(|t| (edit_distance(name, t.name), t.name))
        .filter(|(d, t)| *d <= 3.max(t.len() / 4))
        .min();
    match near {
        Some((_, t)) => format!(
            "no tool named {shown}; did you mean {t}? (`metabob-mcp tool list` names them all)"
        ),
        None => format!("no tool named {shown}; `metabob-mcp tool list` names them"),
    }
}

/// Levenshtein distance over bytes; names are short ASCII, and a long input is cut first.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (&a.as_bytes()[..a.len().min(64)], b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Runs one tool call (anchor: call_tool): the one path for every entry point. A call whose
/// `cancelled` future completes first is abandoned: `None`, and the call log says so.
pub async fn call(
    ctx: &Ctx,
    name: &str,
    args: Value,
    via: Via,
    cancelled: impl std::future::Future<Output = ()>,
) -> Option<Reply> {
    let started = Instant::now();
    let args = if args.is_null() {
        Value::Object(Map::new())
    } else {
        args
    };
    let described = describe_args_for_log(&args);
    tracing::info!("tool call {name} {described}");
    let reply = tokio::select! {
        // Every answer reaches an agent's context or a shell: no credential in it, whatever
        // the tool read (a configured URL, a row, an error).
        r = gated(ctx, name, args) => Some(Reply {
            text: metabob_process::guard::redact_url_credentials(&r.text),
            ..r
        }),
        _ = cancelled => {
            tracing::info!("tool call {name} cancelled by the client");
            None
        }
    };
    if let Some(log) = &ctx.call_log {
        log.log(&Entry {
            session: ctx.session_id(),
            tool: name,
            via,
            args: &described,
            outcome: reply.as_ref().map_or("cancelled", |r| r.outcome.as_str()),
            result: reply
                .as_ref()
                .and_then(|r| r.result)
                .map(CallResult::as_str),
            ms: started.elapsed().as_millis(),
        });
    }
    reply
}

async fn gated(ctx: &Ctx, name: &str, args: Value) -> Reply {
    let Some(spec) = spec(name) else {
        return Reply::error(unknown_tool(name));
    };
    if let Err(e) = validate(&Value::Object((spec.schema)()), &args, "") {
        return Reply::error(format!("{name}: invalid arguments: {e}"));
    }
    ctx.workspace.settle_roots().await;
    // init_workspace with a path binds the workspace before it is decided.
    if name == "init_workspace"
        && let Some(path) = args.get("workspace_path").and_then(Value::as_str)
        && let Err(e) = ctx.workspace.bind(path)
    {
        return Reply::failed("init_workspace", &e);
    }
    let here = match ctx.here() {
        Ok(h) => h,
        Err(e) => return Reply::error(metabob_wire::report::with_hint(&e)),
    };
    if !spec.sends {
        return dispatch(ctx, &here, name, args).await;
    }
    match here.session.att.guard().check_input(name, &args) {
        Err(refusal) => Reply::error(refusal.to_string()).outcome(Outcome::Refused),
        Ok(guarded) => {
            let mut reply = dispatch(ctx, &here, name, guarded.value).await;
            for note in guarded.notes {
                reply.text.push('\n');
                reply.text.push_str(&note);
            }
            reply
        }
    }
}

/// The attachment of a substrate-only tool once its gate lets it run; the gate's refusal as the
/// tool's reply otherwise (SPEC.md §Tool registry and the call path).
pub async fn attached<'a>(here: &'a Here<'_>, tool: &str) -> Result<&'a Attachment, Reply> {
    let att = &here.session.att;
    match att.gate().await {
        Ok(_) => Ok(att),
        Err(refusal) => Err(not_attached(tool, &refusal)),
    }
}

/// A failed resolve as a tool's one line: a detachment partway reads as the gate's refusal.
pub fn resolve_failed(tool: &str, e: ResolveError) -> Reply {
    match e {
        ResolveError::Refused(refusal) => not_attached(tool, &refusal),
        e => Reply::failed(tool, &e),
    }
}

/// The reply of a substrate-only tool whose gate refused.
pub fn not_attached(tool: &str, refusal: &GateRefusal) -> Reply {
    Reply::error(format!(
        "{tool}: not attached: {refusal}; nothing was sent (diagnose with `metabob-mcp attach --check`)"
    ))
    .outcome(Outcome::NotAttached)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_exempt_tools_skip_the_outgoing_guard() {
        for t in super::TOOLS {
            assert_eq!(
                !t.sends,
                super::GUARD_EXEMPT.contains(&t.name),
                "{}: its sends flag disagrees with GUARD_EXEMPT",
                t.name
            );
        }
    }
}
