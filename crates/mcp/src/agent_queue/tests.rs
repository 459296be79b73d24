use super::*;

fn queue() -> (tempfile::TempDir, Sidecar) {
    let dir = tempfile::tempdir().expect("tempdir");
    let q = Sidecar::open(&dir.path().join("sidecar.db")).expect("open");
    (dir, q)
}

fn ask(id: Option<&str>, question: &str, timeout_ms: Option<u64>) -> Solicitation {
    Solicitation {
        id: id.map(str::to_string),
        question_markdown: question.to_string(),
        timeout_ms,
        dispatch_id: Some("d-1".into()),
    }
}

fn answered(text: &str) -> Resolution {
    Resolution {
        outcome: Outcome::Answered,
        answer: Some(text.to_string()),
    }
}

#[test]
fn a_task_goes_pending_claimed_resolved_and_its_answer_stored_then_delivered() {
    let (_d, q) = queue();
    let ack = q
        .enqueue_at("v", ask(Some("s1"), "Which?", None), 1_000)
        .expect("enqueue");
    assert_eq!(ack.solicitation_id, "s1");
    assert_eq!(
        q.task("v", "s1").expect("read").expect("held").state,
        TaskState::Pending
    );

    let pulled = q.pull_at("v", "sess-a", 10, 2_000).expect("pull");
    assert_eq!(pulled.tasks.len(), 1);
    let t = &pulled.tasks[0];
    assert_eq!(
        (t.state, t.claimed_by.as_deref()),
        (TaskState::Claimed, Some("sess-a"))
    );
    assert_eq!(t.deadline_ms, 1_000 + DEFAULT_TIMEOUT_MS as i64);
    assert_eq!(t.dispatch_id.as_deref(), Some("d-1"));
    // A claim is not exclusive: another session still sees it, and now holds the claim.
    let again = q.pull_at("v", "sess-b", 10, 3_000).expect("pull");
    assert_eq!(again.tasks[0].claimed_by.as_deref(), Some("sess-b"));

    let a = q
        .record_at("v", "s1", &answered("  A  "), 4_000)
        .expect("record");
    assert_eq!((a.answer.as_str(), a.delivery), ("A", Delivery::Stored));
    assert_eq!(
        q.task("v", "s1").expect("read").expect("held").state,
        TaskState::Resolved
    );
    assert!(
        q.pull_at("v", "sess-a", 10, 5_000)
            .expect("pull")
            .tasks
            .is_empty()
    );
    assert_eq!(
        q.undelivered("v", i64::MAX, 10).expect("read"),
        vec![a.clone()]
    );

    q.mark_undelivered("v", "s1", "no_producer(x)")
        .expect("mark");
    let kept = q.undelivered("v", i64::MAX, 10).expect("read");
    assert_eq!(kept[0].delivery, Delivery::Undelivered);
    assert_eq!(kept[0].last_error.as_deref(), Some("no_producer(x)"));

    q.mark_delivered("v", "s1", None).expect("mark");
    assert!(q.undelivered("v", i64::MAX, 10).expect("read").is_empty());
    // A delivered answer is never put back in the queue.
    q.mark_undelivered("v", "s1", "late").expect("mark");
    assert!(q.undelivered("v", i64::MAX, 10).expect("read").is_empty());
    match q.record_at("v", "s1", &answered("again"), 6_000) {
        Err(SidecarError::AlreadyResolved {
            outcome, delivery, ..
        }) => {
            assert_eq!((outcome, delivery), ("answered", "delivered"));
        }
        other => panic!("expected already resolved, got {other:?}"),
    }
}

#[test]
fn a_start_resends_only_what_was_recorded_before_it() {
    let (_d, q) = queue();
    for (id, at) in [("early", 10), ("late", 20)] {
        q.enqueue_at("v", ask(Some(id), "q", None), 1)
            .expect("enqueue");
        q.record_at("v", id, &answered("a"), at).expect("record");
    }
    let ids = |before| -> Vec<String> {
        let v = q.undelivered("v", before, 10).expect("read");
        v.into_iter().map(|a| a.task_id).collect()
    };
    assert_eq!(ids(20), ["early"]);
    assert_eq!(ids(21), ["early", "late"]);
}

#[test]
fn queueing_an_id_again_is_idempotent_and_a_missing_id_is_generated() {
    let (_d, q) = queue();
    q.enqueue_at("v", ask(Some("s1"), "first", None), 1)
        .expect("enqueue");
    let ack = q
        .enqueue_at("v", ask(Some("s1"), "second", None), 2)
        .expect("again");
    assert_eq!(ack.solicitation_id, "s1");
    assert_eq!(
        q.task("v", "s1").expect("read").expect("held").question,
        "first"
    );

    let a = q
        .enqueue_at("v", ask(None, "q", None), 3)
        .expect("generated");
    let b = q
        .enqueue_at("v", ask(Some("  "), "q", None), 4)
        .expect("blank id");
    assert_ne!(a.solicitation_id, b.solicitation_id);
    let pulled = q.pull_at("v", "s", 100, 5).expect("pull");
    let ids: Vec<&str> = pulled.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["s1", a.solicitation_id.as_str(), b.solicitation_id.as_str()]
    );
}

#[test]
fn tasks_are_scoped_to_their_vessel() {
    let (_d, q) = queue();
    q.enqueue_at("v1", ask(Some("s1"), "q", None), 1)
        .expect("enqueue");
    assert!(q.pull_at("v2", "s", 10, 2).expect("pull").tasks.is_empty());
    assert!(matches!(
        q.record_at("v2", "s1", &answered("a"), 3),
        Err(SidecarError::UnknownTask { .. })
    ));
}

#[test]
fn a_task_past_its_deadline_expires_on_pull_and_cannot_be_answered() {
    let (_d, q) = queue();
    q.enqueue_at("v", ask(Some("s1"), "q", Some(100)), 1_000)
        .expect("enqueue");
    q.enqueue_at("v", ask(Some("s2"), "q", Some(100)), 1_000)
        .expect("enqueue");
    q.enqueue_at("v", ask(Some("s3"), "q", None), 1_000)
        .expect("enqueue");
    let pulled = q.pull_at("v", "s", 10, 1_100).expect("pull");
    assert_eq!(pulled.expired, 2);
    assert_eq!(pulled.tasks.len(), 1);
    assert!(matches!(
        q.record_at("v", "s1", &answered("a"), 1_200),
        Err(SidecarError::Expired { .. })
    ));
    // Without a pull in between, answering past the deadline expires the task too.
    q.enqueue_at("v", ask(Some("s4"), "q", Some(100)), 2_000)
        .expect("enqueue");
    assert!(matches!(
        q.record_at("v", "s4", &answered("a"), 2_100),
        Err(SidecarError::Expired { .. })
    ));
    assert_eq!(
        q.task("v", "s4").expect("read").expect("held").state,
        TaskState::Expired
    );
    assert!(q.answer("v", "s4").expect("read").is_none());
}

#[test]
fn a_pull_is_bounded_and_counts_what_it_left() {
    let (_d, q) = queue();
    for i in 0..5 {
        q.enqueue_at("v", ask(Some(&format!("s{i}")), "q", None), i)
            .expect("enqueue");
    }
    let pulled = q.pull_at("v", "s", 2, 10).expect("pull");
    assert_eq!((pulled.tasks.len(), pulled.more), (2, 3));
    assert_eq!(q.pull_at("v", "s", 0, 10).expect("pull").tasks.len(), 1);
}

#[test]
fn declining_needs_no_answer_but_answering_does() {
    let (_d, q) = queue();
    q.enqueue_at("v", ask(Some("s1"), "q", None), 1)
        .expect("enqueue");
    for blank in [None, Some("   ")] {
        let res = Resolution {
            outcome: Outcome::Answered,
            answer: blank.map(str::to_string),
        };
        assert!(matches!(
            q.record_at("v", "s1", &res, 2),
            Err(SidecarError::Invalid(_))
        ));
    }
    let declined = Resolution {
        outcome: Outcome::InsufficientContext,
        answer: None,
    };
    let a = q.record_at("v", "s1", &declined, 3).expect("record");
    assert_eq!(
        (a.outcome, a.answer.as_str()),
        (Outcome::InsufficientContext, "")
    );
}

#[test]
fn hostile_solicitations_are_refused_before_anything_is_stored() {
    let (_d, q) = queue();
    let huge = "x".repeat(QUESTION_MAX_BYTES + 1);
    let long_id = "i".repeat(ID_MAX_BYTES + 1);
    let bad = [
        ask(None, "", None),
        ask(None, " \n\t", None),
        ask(None, &huge, None),
        ask(None, "a\0b", None),
        ask(None, "q", Some(0)),
        ask(None, "q", Some(TIMEOUT_MAX_MS + 1)),
        ask(None, "q", Some(u64::MAX)),
        ask(Some(&long_id), "q", None),
        ask(Some("two words"), "q", None),
        ask(Some("line\u{7}"), "q", None),
        Solicitation {
            dispatch_id: Some("d\n2".into()),
            ..ask(None, "q", None)
        },
    ];
    for s in bad {
        assert!(
            matches!(
                q.enqueue_at("v", s.clone(), 1),
                Err(SidecarError::Invalid(_))
            ),
            "{s:?} was accepted"
        );
    }
    assert!(q.pull_at("v", "s", 100, 2).expect("pull").tasks.is_empty());
    // Exactly at the bound is accepted.
    let max = "y".repeat(QUESTION_MAX_BYTES);
    q.enqueue_at("v", ask(Some("max"), &max, Some(TIMEOUT_MAX_MS)), 1)
        .expect("at bound");
    let oversized = Resolution {
        outcome: Outcome::Answered,
        answer: Some("z".repeat(ANSWER_MAX_BYTES + 1)),
    };
    assert!(matches!(
        q.record_at("v", "max", &oversized, 2),
        Err(SidecarError::Invalid(_))
    ));
}

#[test]
fn a_full_queue_refuses_more_and_an_unknown_id_is_cut_in_its_message() {
    let (_d, q) = queue();
    for i in 0..QUEUE_MAX {
        q.enqueue_at("v", ask(Some(&format!("s{i}")), "q", None), 1)
            .expect("enqueue");
    }
    assert!(matches!(
        q.enqueue_at("v", ask(None, "q", None), 1),
        Err(SidecarError::Full)
    ));
    // An id already held is still idempotent when full, and another vessel is unaffected.
    q.enqueue_at("v", ask(Some("s0"), "q", None), 1)
        .expect("held id");
    q.enqueue_at("w", ask(None, "q", None), 1)
        .expect("other vessel");
    let e = q.record_at("v", &"k".repeat(10_000), &answered("a"), 2);
    match e {
        Err(SidecarError::UnknownTask { id }) => assert_eq!(id.len(), ID_MAX_BYTES),
        other => panic!("expected unknown task, got {other:?}"),
    }
}

#[test]
fn tampered_rows_are_read_bounded_and_never_offered_or_resent() {
    let (_d, q) = queue();
    q.with(|c| {
        c.execute_batch(
            "INSERT INTO tasks (vessel, id, question, created_ms, deadline_ms, state) VALUES \
             ('v', 'big', 'é' || hex(zeroblob(70000)), 1, 9223372036854775807, 'pending'), \
             ('v', 'odd', 'q', 2, 9223372036854775807, 'haunted'); \
             INSERT INTO answers (vessel, task_id, outcome, answer, recorded_ms, delivery) \
             VALUES ('v', 'x', 'shrugged', 'a', 1, 'stored'), \
                    ('v', 'y', 'answered', 'a', 2, 'lost');",
        )?;
        Ok(())
    })
    .expect("tamper");
    let pulled = q.pull_at("v", "s", 100, 10).expect("pull");
    assert_eq!(pulled.tasks.len(), 1);
    assert!(pulled.tasks[0].question.len() <= QUESTION_MAX_BYTES);
    assert!(q.undelivered("v", i64::MAX, 100).expect("read").is_empty());
    assert_eq!(
        q.task("v", "odd").expect("read").expect("held").state,
        TaskState::Expired
    );
}

#[test]
fn opening_drops_finished_rows_past_retention_but_keeps_undelivered_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sidecar.db");
    let q = Sidecar::open(&path).expect("open");
    for id in ["old-done", "old-kept"] {
        q.enqueue_at("v", ask(Some(id), "q", None), 1)
            .expect("enqueue");
        q.record_at("v", id, &answered("a"), 2).expect("record");
    }
    q.mark_delivered("v", "old-done", None).expect("mark");
    drop(q);
    let q = Sidecar::open(&path).expect("reopen");
    assert!(q.task("v", "old-done").expect("read").is_none());
    assert!(q.answer("v", "old-done").expect("read").is_none());
    assert!(q.task("v", "old-kept").expect("read").is_some());
    assert_eq!(q.undelivered("v", i64::MAX, 10).expect("read").len(), 1);
}
