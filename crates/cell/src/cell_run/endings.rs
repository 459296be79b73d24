//! How a task leaves the cell's hands: given back (failed, parked or released), its commits
//! salvaged as a bundle, or finished once pushed and closed.

use super::*;

impl Cell {
    pub(super) fn stop_heartbeat(&mut self) {
        if let Some(cur) = &self.current {
            cur.heartbeat.abort();
        }
    }

    /// Ends the claim as `how` says, the reason recorded on the row.
    pub(super) async fn give_back(&mut self, how: GiveBack, reason: &str, salvage: bool) {
        self.stop_heartbeat();
        let id = self.task_id();
        self.task_line(
            "give_back",
            how_word(how),
            None,
            Some(reason),
            format!("giving up {id}: {reason}"),
        );
        if salvage {
            self.keep_commits().await;
        }
        let reason = metabob_wire::text::one_line(reason, 1_500);
        let claim = match how {
            GiveBack::Release => Claim::Release {
                reason: Some(reason),
            },
            GiveBack::Fail => Claim::Fail {
                reason: Some(reason),
                park_after: self.cfg.park_after,
            },
            GiveBack::Park => Claim::Park { reason },
        };
        let task_dir = self.cfg.task_dir.clone();
        match self
            .ledger(|env| renew_or_release(&task_dir, claim.clone(), env))
            .await
        {
            Ok((_, Some(parked))) => self.task_line(
                "give_back",
                "parked",
                None,
                Some(&parked.reason),
                format!("{id}: parked: {}", parked.reason),
            ),
            Ok(_) => self.task_line(
                "give_back",
                "released",
                None,
                None,
                format!("{id}: the claim is released; pulling the next task"),
            ),
            Err(e) => {
                let why = report::with_hint(&e);
                self.task_line(
                    "give_back",
                    "failed",
                    None,
                    Some(&why),
                    format!("{id}: task release failed ({why}); the claim lapses on its own"),
                )
            }
        }
        self.end_task();
    }

    /// The claim went to another cell, or cannot be confirmed: nothing is pushed or closed,
    /// and the harness's commits are kept (anchor: salvage).
    pub(super) async fn salvage(&mut self, why: &str) {
        self.stop_heartbeat();
        let id = self.task_id();
        self.task_line(
            "salvage",
            "claim_lost",
            None,
            Some(why),
            format!("{id}: the claim is no longer this cell's ({why}); not pushing, not closing"),
        );
        self.keep_commits().await;
        self.end_task();
    }

    /// Keeps `base..HEAD` as branch `salvage/<task>` in a bundle under SALVAGE_DIR.
    pub(super) async fn keep_commits(&mut self) {
        let Some(cur) = self.current.as_ref() else {
            return;
        };
        let (id, base) = (cur.task.task_id.clone(), cur.base.clone());
        if !self
            .git
            .rev_list(&format!("{base}..HEAD"))
            .await
            .is_ok_and(|c| !c.is_empty())
        {
            return;
        }
        let stamp = metabob_process::clock::now_ms() / 1000;
        let file = self.cfg.salvage_dir.join(format!("{id}-{stamp}.bundle"));
        let branch = format!("salvage/{id}");
        let kept = match std::fs::create_dir_all(&self.cfg.salvage_dir) {
            Ok(()) => self
                .git
                .bundle(&branch, &base, &file)
                .await
                .map_err(|e| report::line(&e)),
            Err(e) => Err(e.to_string()),
        };
        let message = match kept {
            Ok(()) => format!(
                "{id}: kept the commits as branch {branch} in {}",
                file.display()
            ),
            Err(e) => format!(
                "{id}: could not keep the commits in {}: {e}",
                self.cfg.salvage_dir.display()
            ),
        };
        self.task_line("salvage", "kept", None, None, message);
    }

    /// Done with the task: closed, or pending review (the claim goes back; the pending verdict
    /// keeps other cells off it).
    pub(super) async fn finish(&mut self, closed: bool) {
        self.stop_heartbeat();
        if !closed {
            let branch = self
                .current
                .as_ref()
                .map(|c| c.task.policy.push_branch.clone())
                .unwrap_or_default();
            let task_dir = self.cfg.task_dir.clone();
            let reason = format!("the fix waits for review on {branch}");
            let given = Claim::Release {
                reason: Some(reason),
            };
            if let Err(e) = self
                .ledger(|env| renew_or_release(&task_dir, given.clone(), env))
                .await
            {
                let id = self.task_id();
                self.task_line(
                    "finish",
                    "release_failed",
                    None,
                    None,
                    format!(
                        "{id}: task release failed ({}); the claim lapses on its own",
                        report::with_hint(&e)
                    ),
                );
            }
        }
        self.end_task();
    }

    pub(super) fn end_task(&mut self) {
        self.current = None;
        self.clear_dirs();
    }

    /// TERM or INT: the harness's group stops, the claim goes back, and the cell exits.
    pub(super) async fn interrupted(&mut self, code: u8) -> u8 {
        self.log
            .note("signal", "interrupted; releasing the claim".into());
        self.group.stop().await;
        self.stop_heartbeat();
        if self.cfg.task_dir.join("task.json").is_file() {
            let task_dir = self.cfg.task_dir.clone();
            let given = Claim::Release {
                reason: Some("cell interrupted (signal)".into()),
            };
            // One attempt: whoever stops the cell does not wait for an outage to pass.
            if let Err(e) = renew_or_release(&task_dir, given, self.env.clone()).await {
                self.log.note(
                    "signal",
                    format!(
                        "task release failed ({}); the claim lapses on its own",
                        report::with_hint(&e)
                    ),
                );
            }
        }
        code
    }

    /// Empties both directories without removing them: they may be volumes or mount points.
    pub(super) fn clear_dirs(&self) {
        for dir in [&self.cfg.task_dir, &self.cfg.work_dir] {
            clear_dir(dir);
        }
    }
}

fn clear_dir(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p: PathBuf = e.path();
        // A symlink is removed as a link, never followed.
        let _ = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&p),
            _ => std::fs::remove_file(&p),
        };
    }
}

fn how_word(how: GiveBack) -> &'static str {
    match how {
        GiveBack::Release => "release",
        GiveBack::Fail => "fail",
        GiveBack::Park => "park",
    }
}
