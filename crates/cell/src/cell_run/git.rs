//! The git steps of the loop that gix has no equivalent for (rebase, push) and the few around
//! them, on the git CLI: each bounded in time, its stderr kept (bounded, credentials redacted)
//! for the log and for the reason a task is given back with.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use metabob_process::env::Env;
use metabob_process::guard::redact_url_credentials;
use metabob_wire::text::one_line;

/// One git step never takes longer: a fetch or push of a fix is seconds, a hung server is not.
const STEP_TIMEOUT: Duration = Duration::from_secs(300);
/// What of a step's stderr is kept.
const STDERR_KEPT: usize = 600;

/// Why a git step did not do its work.
#[derive(Debug, thiserror::Error)]
pub enum GitStepError {
    /// The process could not be started, or waited for.
    #[error("git {step} could not start")]
    Spawn {
        step: String,
        #[source]
        source: std::io::Error,
    },
    #[error("git {step} ran past {}s and was stopped", STEP_TIMEOUT.as_secs())]
    Timeout { step: String },
    /// git's own stderr (bounded, credentials masked), which arrives as text.
    #[error("git {step} failed: {stderr}")]
    Failed { step: String, stderr: String },
}

// Nothing to advise: git's stderr says what it says, and the caller words the outage.
impl metabob_wire::report::Hint for GitStepError {}

#[derive(Debug)]
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// The work tree's git, with the cell's environment.
#[derive(Clone, Debug)]
pub struct Git {
    dir: PathBuf,
    env: Vec<(String, String)>,
    /// The bundle GIT_SSL_CAINFO names, kept for as long as any step may run.
    _ca_bundle: Option<std::sync::Arc<tempfile::NamedTempFile>>,
}

/// How a rebase of the harness's commits came out.
#[derive(Debug, PartialEq, Eq)]
pub enum Rebased {
    Clean,
    Conflict { files: Vec<String> },
}

/// How a push came out, from `git push --porcelain`'s per-ref status.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    Landed,
    /// `[rejected]`: the branch moved since the fetch.
    Race,
    /// `[remote rejected]` or `[remote failure]` (a hook, a protected branch), or a transport
    /// that refused the credentials: lasting; `why` is the server's words.
    Refused {
        why: String,
    },
    /// No answer about the ref at all: the server or the network is away; `why` is git's
    /// stderr.
    Away {
        why: String,
    },
}

impl Git {
    /// `env` is what every git step and the harness see: the cell's variables, with a
    /// committer identity when the machine has none (a rebase writes commits) and no prompt
    /// for credentials (nobody is there to answer).
    pub fn new(dir: &Path, env: &Env) -> Git {
        let mut vars: Vec<(String, String)> = env
            .vars()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let mut default = |k: &str, v: &str| {
            if env.get(k).is_none() {
                vars.push((k.to_owned(), v.to_owned()));
            }
        };
        let name = env
            .get("GIT_AUTHOR_NAME")
            .unwrap_or("metabob cell")
            .to_owned();
        let email = env
            .get("GIT_AUTHOR_EMAIL")
            .unwrap_or("cell@metabob.invalid")
            .to_owned();
        default("GIT_AUTHOR_NAME", &name);
        default("GIT_AUTHOR_EMAIL", &email);
        default("GIT_COMMITTER_NAME", &name);
        default("GIT_COMMITTER_EMAIL", &email);
        vars.push(("GIT_TERMINAL_PROMPT".into(), "0".into()));
        // The clone trusts METABOB_EXTRA_CA_CERTS; git's fetches and pushes must too.
        let ca_bundle = match env.get("GIT_SSL_CAINFO") {
            Some(_) => None,
            None => metabob_net::git_ca_bundle(env).and_then(|pem| {
                let written = tempfile::Builder::new()
                    .prefix("metabob-git-ca-")
                    .suffix(".pem")
                    .tempfile()
                    .and_then(|mut f| std::io::Write::write_all(&mut f, pem.as_bytes()).map(|_| f));
                match written {
                    Ok(f) => Some(std::sync::Arc::new(f)),
                    Err(e) => {
                        tracing::warn!(
                            "the CA bundle for git could not be written ({e}); git trusts only the OS store"
                        );
                        None
                    }
                }
            }),
        };
        if let Some(f) = &ca_bundle {
            vars.push(("GIT_SSL_CAINFO".into(), f.path().display().to_string()));
        }
        Git {
            dir: dir.to_owned(),
            env: vars,
            _ca_bundle: ca_bundle,
        }
    }

    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    async fn run(&self, args: &[&str]) -> Result<Ran, GitStepError> {
        let step = args.first().copied().unwrap_or("").to_string();
        let child = tokio::process::Command::new("git")
            .arg("-C")
            .arg(&self.dir)
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| GitStepError::Spawn {
                step: step.clone(),
                source,
            })?;
        let out = tokio::time::timeout(STEP_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| GitStepError::Timeout { step: step.clone() })?
            .map_err(|source| GitStepError::Spawn { step, source })?;
        Ok(Ran {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: redact_url_credentials(&one_line(
                &String::from_utf8_lossy(&out.stderr),
                STDERR_KEPT,
            )),
        })
    }

    async fn ok(&self, args: &[&str]) -> Result<String, GitStepError> {
        let ran = self.run(args).await?;
        if ran.ok {
            Ok(ran.stdout)
        } else {
            Err(GitStepError::Failed {
                step: args.first().copied().unwrap_or("").to_string(),
                stderr: ran.stderr,
            })
        }
    }

    pub async fn fetch(&self) -> Result<(), GitStepError> {
        self.ok(&["fetch", "-q", "origin"]).await.map(drop)
    }

    /// The commit `rev` names, if any.
    pub async fn resolve(&self, rev: &str) -> Option<String> {
        let spec = format!("{rev}^{{commit}}");
        let out = self
            .ok(&["rev-parse", "-q", "--verify", &spec])
            .await
            .ok()?;
        Some(out.trim().to_owned()).filter(|s| !s.is_empty())
    }

    /// Commits in `range`, newest first.
    pub async fn rev_list(&self, range: &str) -> Result<Vec<String>, GitStepError> {
        let out = self.ok(&["rev-list", range]).await?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// Drops what the harness left uncommitted: only commits are the fix, and a dirty tree
    /// would stop the rebase.
    pub async fn clean(&self) -> Result<(), GitStepError> {
        self.ok(&["reset", "-q", "--hard"]).await?;
        self.ok(&["clean", "-q", "-f", "-d", "-x"]).await.map(drop)
    }

    /// Moves the commits `base..HEAD`, and only those, onto `onto`. A conflict names the files
    /// and leaves the tree as it was.
    pub async fn rebase_onto(&self, onto: &str, base: &str) -> Result<Rebased, GitStepError> {
        let ran = self.run(&["rebase", "-q", "--onto", onto, base]).await?;
        if ran.ok {
            return Ok(Rebased::Clean);
        }
        let files = self
            .ok(&["diff", "--name-only", "--diff-filter=U"])
            .await
            .map(|o| o.lines().map(str::to_owned).take(20).collect::<Vec<_>>())
            .unwrap_or_default();
        let aborted = self.run(&["rebase", "--abort"]).await;
        if files.is_empty() && !matches!(aborted, Ok(Ran { ok: true, .. })) {
            // Not a conflict: the rebase never started (no identity, a broken tree).
            return Err(GitStepError::Failed {
                step: "rebase".into(),
                stderr: ran.stderr,
            });
        }
        Ok(Rebased::Conflict { files })
    }

    /// Pushes HEAD to `branch`; `force` only for a task branch, which belongs to the task's
    /// claim holder alone (an earlier attempt's push there is stale by definition).
    pub async fn push(&self, branch: &str, force: bool) -> Result<Pushed, GitStepError> {
        let spec = format!("{}HEAD:refs/heads/{branch}", if force { "+" } else { "" });
        let ran = self.run(&["push", "--porcelain", "origin", &spec]).await?;
        Ok(classify_push(ran.ok, &ran.stdout, &ran.stderr))
    }

    /// Whether the origin's `branch` holds `head`: as its tip, or below a tip another cell
    /// pushed on top in the meantime.
    pub async fn holds(&self, branch: &str, head: &str) -> Result<bool, GitStepError> {
        let refname = format!("refs/heads/{branch}");
        let out = self.ok(&["ls-remote", "origin", &refname]).await?;
        let tip = out.split_whitespace().next().unwrap_or("");
        if tip == head {
            return Ok(true);
        }
        if tip.is_empty() {
            return Ok(false);
        }
        self.ok(&["fetch", "-q", "origin", &refname]).await?;
        let ran = self
            .run(&["merge-base", "--is-ancestor", head, "FETCH_HEAD"])
            .await?;
        Ok(ran.ok)
    }

    /// Puts the work tree at `rev`, detached and clean: a fresh start for the harness.
    pub async fn reset_to(&self, rev: &str) -> Result<(), GitStepError> {
        self.ok(&["checkout", "-q", "-f", "--detach", rev]).await?;
        self.ok(&["clean", "-q", "-f", "-d", "-x"]).await.map(drop)
    }

    /// Keeps `base..HEAD` as branch `name` in a bundle file.
    pub async fn bundle(&self, name: &str, base: &str, file: &Path) -> Result<(), GitStepError> {
        self.ok(&["branch", "-f", name, "HEAD"]).await?;
        let range = format!("{base}..{name}");
        let file = file.to_string_lossy();
        self.ok(&["bundle", "create", "-q", &file, &range])
            .await
            .map(drop)
    }
}

/// Reads `git push --porcelain`: a `!` line is a refused ref, `[rejected]` a lost race and
/// `[remote rejected]`/`[remote failure]` the server's lasting no. With no ref line the
/// transport failed: a refusal of the credentials is lasting, anything else is the server or
/// the network being away.
fn classify_push(ok: bool, stdout: &str, stderr: &str) -> Pushed {
    if ok {
        return Pushed::Landed;
    }
    let remote_words = || {
        let said: Vec<&str> = stderr
            .split("remote: ")
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        said.join("; ")
    };
    for line in stdout.lines() {
        let mut cols = line.split('\t');
        if cols.next() != Some("!") {
            continue;
        }
        let summary = cols.nth(1).unwrap_or("");
        // The server's ref moved between its check and its update: another push won, as with
        // `[rejected]`; git daemon and hosted servers word it as a failed ref lock.
        let lost_lock = summary.starts_with("[remote rejected]")
            && (summary.contains("failed to update ref")
                || summary.contains("cannot lock ref")
                || stderr.contains("cannot lock ref"));
        if summary.starts_with("[rejected]") || lost_lock {
            return Pushed::Race;
        }
        let words = remote_words();
        let why = if words.is_empty() {
            summary.to_owned()
        } else {
            format!("{summary}: {words}")
        };
        return Pushed::Refused { why };
    }
    let lower = stderr.to_ascii_lowercase();
    let refused = [
        "permission denied",
        "permission to",
        "authentication failed",
        "error: 403",
        "returned error: 401",
        "not allowed",
        "read-only",
    ];
    let why = stderr.to_owned();
    if refused.iter().any(|w| lower.contains(w)) {
        Pushed::Refused { why }
    } else {
        Pushed::Away { why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_is_read_from_its_porcelain_status() {
        assert_eq!(classify_push(true, "", ""), Pushed::Landed);
        let race = "To /srv/app.git\n!\tHEAD:refs/heads/main\t[rejected] (fetch first)\nDone\n";
        assert_eq!(classify_push(false, race, "hint: ..."), Pushed::Race);
        let hook = "To /srv/app.git\n!\tHEAD:refs/heads/main\t[remote rejected] (pre-receive hook declined)\nDone\n";
        assert_eq!(
            classify_push(
                false,
                hook,
                "remote: main is protected remote: ask a maintainer"
            ),
            Pushed::Refused {
                why: "[remote rejected] (pre-receive hook declined): main is protected; ask a \
                      maintainer"
                    .into()
            }
        );
        assert!(matches!(
            classify_push(
                false,
                "",
                "fatal: unable to access: The requested URL returned error: 403"
            ),
            Pushed::Refused { .. }
        ));
        assert!(matches!(
            classify_push(
                false,
                "",
                "fatal: unable to connect to git: Connection refused"
            ),
            Pushed::Away { .. }
        ));
    }
}
