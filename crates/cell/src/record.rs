//! `finding record`: record a finding or a task from a shell or a coordinator script
//! (SPEC.md §Recording).

use std::path::PathBuf;

use serde::Serialize;

use super::CellError;
use crate::ledger::record::{Duplicate, open_duplicate};
use crate::ledger::repo_identity::repo_identity;
use metabob_net::attachment::vessel_id;
use metabob_process::env::Env;
use metabob_wire::record::FindingDraft;
use metabob_wire::repo_identity::{identity_of_origin, vessel_aliases};

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub draft: FindingDraft,
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
    AlreadyRecorded(Duplicate),
}

/// Records one finding (anchor: run_record) through the ledger's one recording path.
pub async fn run(opts: RecordOptions, mut env: Env) -> Result<RecordOutcome, CellError> {
    let draft = opts.draft.checked()?;
    let work = if opts.work_dir.is_absolute() {
        opts.work_dir.clone()
    } else {
        env.cwd().join(&opts.work_dir)
    };
    let att = super::attach_once(&mut env, &work).await?;
    // Every string this command sends passes the guard first; prose may come back rewritten.
    let input = serde_json::json!({
        "files": draft.files, "summary": draft.summary, "details": draft.details, "category": draft.category,
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
    let draft = FindingDraft {
        summary: text("summary").trim().to_string(),
        details: text("details"),
        ..draft
    };
    let (repository, aliases) = match &opts.origin {
        Some(o) => {
            let id = identity_of_origin(o);
            let aliases = vessel_aliases(&id);
            (id, aliases)
        }
        None => (
            repo_identity(&work),
            crate::ledger::repo_identity::aliases_for_workspace(&work),
        ),
    };
    if !opts.force {
        // An unreachable recall does not block the write.
        match open_duplicate(&att, &aliases, &draft.files, &draft.summary).await {
            Ok(Some(d)) => return Ok(RecordOutcome::AlreadyRecorded(d)),
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "the duplicate check could not read the ledger ({}); recording anyway",
                metabob_wire::report::line(&e)
            ),
        }
    }
    let name = repository
        .rsplit('/')
        .next()
        .unwrap_or(&repository)
        .to_string();
    let nf = draft.into_new(
        repository.clone(),
        name,
        vessel_id(&env, &work),
        att.claim().session.clone(),
        metabob_process::random::new_finding_id,
    );
    let concept_id = crate::ledger::write_concept(&att, nf.to_pointer()).await?;
    Ok(RecordOutcome::Recorded {
        concept_id,
        finding_ids: nf.finding_ids,
        repository,
    })
}
