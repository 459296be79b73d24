//! `finding record`: record a finding or a task from a shell or a coordinator script
//! (SPEC.md §finding record).

use std::path::PathBuf;

use serde::Serialize;

use super::CellError;
use crate::attachment::vessel_id;
use crate::env::Env;
use crate::ledger::finding::{NewFinding, Severity, lines_field, new_finding_id};
use crate::ledger::recall;
use crate::ledger::record::find_open_duplicate;
use crate::ledger::repo_identity::{Aliases, identity_of_origin, repo_identity, vessel_aliases};

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub files: Vec<String>,
    pub summary: String,
    pub details: String,
    pub severity: Severity,
    pub category: String,
    pub line_start: Option<u32>,
    pub line_end: Option<u32>,
    pub force: bool,
    /// Record for this origin's repository instead of the working directory's checkout.
    pub origin: Option<String>,
    pub work_dir: PathBuf,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RecordOutcome {
    Recorded {
        concept_id: String,
        finding_ids: Vec<String>,
        repository: String,
    },
    /// Nothing was written: the same finding is already open.
    AlreadyRecorded {
        id: String,
        concept_id: String,
        summary: String,
        files: Vec<String>,
    },
}

/// Records one finding (anchor: run_record): one `agf_` id per file, one concept for all.
pub async fn run(opts: RecordOptions, mut env: Env) -> Result<RecordOutcome, CellError> {
    if opts.files.is_empty() || opts.summary.trim().is_empty() || opts.category.trim().is_empty() {
        return Err(CellError::Failed(
            "a finding needs at least one file, a summary and a category".into(),
        ));
    }
    let work = if opts.work_dir.is_absolute() {
        opts.work_dir.clone()
    } else {
        env.cwd().join(&opts.work_dir)
    };
    let att = super::attach_once(&mut env, &work).await?;
    // Every string this command sends passes the guard first; prose may come back rewritten.
    let input = serde_json::json!({
        "files": opts.files, "summary": opts.summary, "details": opts.details, "category": opts.category,
    });
    let guarded = att.guard().check_input("finding record", &input)?;
    for note in &guarded.notes {
        tracing::warn!("{note}");
    }
    let text = |k: &str| {
        guarded
            .value
            .get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (summary, details) = (text("summary"), text("details"));
    let (repository, by_origin) = match &opts.origin {
        Some(o) => (identity_of_origin(o), true),
        None => (repo_identity(&work), false),
    };
    let name = repository
        .rsplit('/')
        .next()
        .unwrap_or(&repository)
        .to_string();

    if !opts.force {
        // An unreachable recall does not block the write.
        let recalled = if by_origin {
            let aliases = vessel_aliases(&repository);
            recall::recall(&att, |f| {
                aliases.map_finding(f.repo.as_deref().unwrap_or_default(), &f.files)
            })
            .await
        } else {
            let aliases = Aliases::for_workspace(&work);
            recall::recall(&att, |f| {
                aliases.map_finding(f.repo.as_deref().unwrap_or_default(), &f.files)
            })
            .await
        };
        match recalled {
            Ok(view) => {
                if let Some(d) = find_open_duplicate(&view, &opts.files, &summary) {
                    return Ok(RecordOutcome::AlreadyRecorded {
                        id: d.finding.id().to_string(),
                        concept_id: d.finding.concept_id.clone(),
                        summary: d.finding.summary.clone(),
                        files: d.files.clone(),
                    });
                }
            }
            Err(e) => tracing::warn!(
                "the duplicate check could not read the ledger ({e}); recording anyway"
            ),
        }
    }

    let finding_ids: Vec<String> = opts.files.iter().map(|_| new_finding_id()).collect();
    let lines = lines_field(&opts.files[0], opts.line_start, opts.line_end);
    let nf = NewFinding {
        finding_ids: finding_ids.clone(),
        files: opts.files.clone(),
        summary: summary.trim().to_string(),
        details,
        severity: opts.severity,
        category: opts.category.trim().to_string(),
        repo: repository.clone(),
        repo_name: name.clone(),
        workspace: name,
        lines,
        status: "open".into(),
        recorded_by: vessel_id(&env, &work),
        session: att.claim().session.clone(),
    };
    let concept_id = crate::ledger::write_concept(&att, nf.to_pointer()).await?;
    Ok(RecordOutcome::Recorded {
        concept_id,
        finding_ids,
        repository,
    })
}
