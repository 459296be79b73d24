//! Reading the ledger: findings and verdicts through concept-db's window, with paging, offset
//! detection, truncation reported, and verdicts past the window joined through their links
//! (SPEC.md §Recall).

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use metabob_net::attachment::{Attachment, ResolveError};
use metabob_wire::claims::{self, Held};
use metabob_wire::depends::{OpenBlocker, open_blockers};
use metabob_wire::finding::{FINDING_SHAPE, Finding};
use metabob_wire::repo_identity::Aliases;
use metabob_wire::row::read_rows;
use metabob_wire::verdict::{Standing, VERDICT_SHAPE, Verdict, standing};

pub use metabob_wire::window::{MAX_PAGES, PAGE};
/// Linked verdicts are read for at most this many findings, this many at a time, this many each.
const LINKED_FINDINGS: usize = 50;
const LINKED_PARALLEL: usize = 8;
const LINKED_PER_FINDING: u64 = 200;

/// Set once a concept-db answered an offset with the first page again; from then on this
/// process reads one page, since paging would only repeat it.
static OFFSET_IGNORED: AtomicBool = AtomicBool::new(false);

/// The rows of one shape as far as the window reaches.
#[derive(Clone, Debug, Default)]
pub struct Window {
    pub rows: Vec<Value>,
    /// The last page read was full: older rows may exist past it.
    pub truncated: bool,
}

/// `conceptSearch` in list mode, 300 a page, up to four pages (anchor: read_window).
pub async fn read_window(att: &Attachment, shape: &str) -> Result<Window, ResolveError> {
    let mut window = Window::default();
    let pages = if OFFSET_IGNORED.load(Ordering::Relaxed) {
        1
    } else {
        MAX_PAGES
    };
    let mut offset = 0;
    for page in 0..pages {
        let answer = att
            .resolve(json!({
                "type": "conceptSearch", "shape": shape, "limit": PAGE, "offset": offset,
            }))
            .await?;
        let mut body = answer.ok("conceptSearch")?;
        // A page the ledger cut short by its bytes says where the next one starts.
        let next_offset = body.get("next_offset").and_then(Value::as_u64);
        let rows = match body.get_mut("concepts").map(Value::take) {
            Some(Value::Array(rows)) => rows,
            _ => Vec::new(),
        };
        if page > 0 && !rows.is_empty() && rows.first().map(id) == window.rows.first().map(id) {
            OFFSET_IGNORED.store(true, Ordering::Relaxed);
            tracing::warn!("concept-db ignores the search offset; reading one page from now on");
            window.truncated = true;
            return Ok(window);
        }
        let more = match next_offset {
            Some(next) if next > offset => {
                offset = next;
                true
            }
            _ => {
                offset += rows.len() as u64;
                rows.len() as u64 >= PAGE
            }
        };
        window.rows.extend(rows);
        window.truncated = more;
        if !more {
            break;
        }
    }
    Ok(window)
}

fn id(v: &Value) -> Option<&str> {
    v.get("id").and_then(Value::as_str)
}

/// A finding of this repository with its files as named here.
#[derive(Clone, Debug)]
pub struct Recalled {
    pub finding: Finding,
    /// The finding's files mapped into this checkout (aliases applied).
    pub files: Vec<String>,
}

/// What the ledger says about one repository.
#[derive(Clone, Debug, Default)]
pub struct LedgerView {
    pub findings: Vec<Recalled>,
    pub verdicts: Vec<Verdict>,
    pub findings_truncated: bool,
    pub verdicts_truncated: bool,
}

impl LedgerView {
    /// The verdicts and claim rows that concern `f`.
    pub fn verdicts_for<'a>(&'a self, f: &'a Finding) -> impl Iterator<Item = &'a Verdict> + 'a {
        self.verdicts.iter().filter(move |v| v.concerns(f))
    }

    pub fn standing(&self, f: &Finding) -> Standing {
        standing(self.verdicts_for(f))
    }

    pub fn holder(&self, f: &Finding, now_ms: i64) -> Option<Held> {
        claims::holder(self.verdicts_for(f), now_ms)
    }

    /// The blockers that hold `f` back, by the wire's ready rule; a blocker this view does not
    /// hold (another repository's, or past the window) holds it back as `unknown`.
    pub fn open_blockers(&self, f: &Finding) -> Vec<OpenBlocker> {
        open_blockers(f, self.verdicts_for(f), |id| {
            self.by_id(id)
                .map(|r| (r.finding.id().to_string(), self.standing(&r.finding)))
        })
    }

    pub fn by_id(&self, id: &str) -> Option<&Recalled> {
        self.findings
            .iter()
            .find(|r| r.finding.has_id(id) || r.finding.concept_id == id)
    }
}

/// Recalls this repository's findings and their verdicts (anchor: recall). `aliases` decides
/// whether a finding is this repository's and maps its files as this checkout names them.
pub async fn recall(att: &Attachment, aliases: &Aliases) -> Result<LedgerView, ResolveError> {
    let findings = read_window(att, FINDING_SHAPE).await?;
    let verdicts = read_window(att, VERDICT_SHAPE).await?;
    let mut view = LedgerView {
        findings: read_rows(&findings.rows, "finding", Finding::read)
            .into_iter()
            .filter_map(|finding| {
                aliases
                    .map_finding(finding.repo.as_deref().unwrap_or_default(), &finding.files)
                    .map(|files| Recalled { finding, files })
            })
            .collect(),
        verdicts: read_rows(&verdicts.rows, "verdict", Verdict::read),
        findings_truncated: findings.truncated,
        verdicts_truncated: verdicts.truncated,
    };
    if view.verdicts_truncated {
        let concepts: Vec<String> = view
            .findings
            .iter()
            .take(LINKED_FINDINGS)
            .map(|r| r.finding.concept_id.clone())
            .collect();
        for chunk in concepts.chunks(LINKED_PARALLEL) {
            let reads = chunk.iter().map(|c| linked_verdicts(att, c));
            for linked in futures_join_all(reads).await {
                merge(&mut view.verdicts, linked?);
            }
        }
    }
    Ok(view)
}

/// Runs futures concurrently and keeps their order, without a futures dependency.
async fn futures_join_all<F>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("a recall read task does not panic"));
    }
    out
}

/// The verdicts linked to one finding: `conceptGraph` incoming `derived_from` edges.
pub fn linked_verdicts(
    att: &Attachment,
    finding_concept: &str,
) -> impl std::future::Future<Output = Result<Vec<Verdict>, ResolveError>> + Send + 'static {
    let att = att.clone();
    let concept = finding_concept.to_string();
    async move {
        let answer = att
            .resolve(json!({
                "type": "conceptGraph", "concept_id": concept, "direction": "incoming",
                "edge_types": ["derived_from"], "limit": LINKED_PER_FINDING,
            }))
            .await?;
        // concept-db's 404 for an unknown concept means no neighbours.
        if answer.status == 404 {
            return Ok(Vec::new());
        }
        let body = answer.ok("conceptGraph")?;
        Ok(body
            .get("edges")
            .and_then(Value::as_array)
            .map(|edges| {
                let rows: Vec<Value> = edges
                    .iter()
                    .filter_map(|e| e.get("neighbor").cloned())
                    .collect();
                read_rows(&rows, "linked verdict", Verdict::read)
            })
            .unwrap_or_default())
    }
}

/// Adds rows not already present (by concept id).
pub fn merge(into: &mut Vec<Verdict>, more: Vec<Verdict>) {
    for v in more {
        if !into.iter().any(|x| x.concept_id == v.concept_id) {
            into.push(v);
        }
    }
}

/// One finding's verdicts and claim rows, fresh: the verdict window plus the rows linked to it.
pub async fn verdicts_of(
    att: &Attachment,
    finding: &Finding,
) -> Result<Vec<Verdict>, ResolveError> {
    let window = read_window(att, VERDICT_SHAPE).await?;
    let mut rows: Vec<Verdict> = read_rows(&window.rows, "verdict", Verdict::read);
    rows.retain(|v| v.concerns(finding));
    merge(&mut rows, linked_verdicts(att, &finding.concept_id).await?);
    Ok(rows.into_iter().filter(|v| v.concerns(finding)).collect())
}

/// One concept by id: the root of `conceptGraph` (anchor: fetch_concept). `None` when the
/// ledger does not know it.
pub async fn fetch_concept(
    att: &Attachment,
    concept_id: &str,
) -> Result<Option<Value>, ResolveError> {
    let answer = att
        .resolve(json!({ "type": "conceptGraph", "concept_id": concept_id, "limit": 1 }))
        .await?;
    if answer.status == 404 {
        return Ok(None);
    }
    Ok(answer.ok("conceptGraph")?.get("root").cloned())
}
