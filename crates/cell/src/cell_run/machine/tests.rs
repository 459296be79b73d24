use super::*;
use proptest::prelude::*;

fn limits() -> Limits {
    Limits {
        fail_max: 3,
        push_tries: 3,
        conflict_retries: 2,
        retry_max_s: 60,
        idle_poll_s: 10,
        wait_when_empty: false,
        retry_conflicts: false,
    }
}

fn pulled(m: &mut Machine) {
    assert_eq!(m.step(Event::Pull(PullEnd::Pulled)), Action::RunHarness);
}

fn given_back(a: &Action) -> (GiveBack, Then) {
    match a {
        Action::GiveBack { how, then, .. } => (*how, *then),
        other => panic!("expected a give-back, got {other:?}"),
    }
}

#[test]
fn a_task_goes_harness_fence_integrate_push_verify_close_and_resets_the_failures() {
    let mut m = Machine::new(limits());
    pulled(&mut m);
    m.step(Event::Harness(HarnessEnd::NoCommit { why: "none".into() }));
    assert_eq!(m.fails_in_a_row(), 1);
    pulled(&mut m);
    assert_eq!(m.step(Event::Harness(HarnessEnd::Committed)), Action::Fence);
    assert_eq!(m.step(Event::Fence(FenceEnd::Held)), Action::Integrate);
    assert_eq!(m.step(Event::Integrate(IntegrateEnd::Clean)), Action::Push);
    assert_eq!(m.step(Event::Push(PushEnd::Landed)), Action::Verify);
    assert_eq!(m.step(Event::Verify(true)), Action::Close);
    assert_eq!(
        m.step(Event::Close(CloseEnd::Closed)),
        Action::Finish { closed: true }
    );
    assert_eq!(m.fails_in_a_row(), 0);
}

#[test]
fn fail_max_failures_in_a_row_stop_the_cell_after_giving_the_last_one_back() {
    let mut m = Machine::new(limits());
    for n in 1..=3 {
        pulled(&mut m);
        let a = m.step(Event::Harness(HarnessEnd::Failed {
            why: "exit 1".into(),
        }));
        let want = if n == 3 { Then::Exit(1) } else { Then::Pull };
        assert_eq!(given_back(&a), (GiveBack::Fail, want), "failure {n}");
    }
    assert_eq!(
        fail_max_line(3, 3),
        "3 tasks failed in a row (FAIL_MAX=3); stopping"
    );
}

#[test]
fn a_conflict_fails_the_task_here_and_never_ends_the_cell() {
    let mut m = Machine::new(limits());
    for _ in 0..10 {
        pulled(&mut m);
        m.step(Event::Harness(HarnessEnd::Committed));
        m.step(Event::Fence(FenceEnd::Held));
        let a = m.step(Event::Integrate(IntegrateEnd::Conflict {
            files: vec!["a.py".into()],
        }));
        assert_eq!(given_back(&a), (GiveBack::Fail, Then::Pull));
        let Action::GiveBack { reason, .. } = a else {
            unreachable!()
        };
        assert_eq!(reason, "the fix conflicts with the target in a.py");
    }
    assert_eq!(
        m.fails_in_a_row(),
        0,
        "conflicts are not the cell's failures"
    );
}

#[test]
fn under_conflicts_retry_the_claim_is_kept_for_the_retries_then_the_task_fails_here() {
    let mut m = Machine::new(limits());
    pulled(&mut m);
    m.set_retry_conflicts(true);
    for attempt in 1..=2 {
        m.step(Event::Harness(HarnessEnd::Committed));
        m.step(Event::Fence(FenceEnd::Held));
        let a = m.step(Event::Integrate(IntegrateEnd::Conflict { files: vec![] }));
        assert_eq!(a, Action::Redo { attempt, of: 2 });
    }
    m.step(Event::Harness(HarnessEnd::Committed));
    m.step(Event::Fence(FenceEnd::Held));
    let a = m.step(Event::Integrate(IntegrateEnd::Conflict { files: vec![] }));
    assert_eq!(given_back(&a), (GiveBack::Fail, Then::Pull));
}

#[test]
fn the_fence_pushes_only_while_the_claim_is_held() {
    let mut m = Machine::new(limits());
    pulled(&mut m);
    m.step(Event::Harness(HarnessEnd::Committed));
    let a = m.step(Event::Fence(FenceEnd::Lost {
        why: "held by cell-2".into(),
    }));
    assert_eq!(
        a,
        Action::Salvage {
            why: "held by cell-2".into(),
            then: Then::Pull
        }
    );
    pulled(&mut m);
    m.step(Event::Harness(HarnessEnd::Committed));
    let a = m.step(Event::Fence(FenceEnd::LedgerAway));
    assert!(
        matches!(
            a,
            Action::Salvage {
                then: Then::Exit(2),
                ..
            }
        ),
        "{a:?}"
    );
    pulled(&mut m);
    let a = m.step(Event::Harness(HarnessEnd::ClaimLost { why: "x".into() }));
    assert!(
        matches!(
            a,
            Action::Salvage {
                then: Then::Pull,
                ..
            }
        ),
        "{a:?}"
    );
}

#[test]
fn lost_push_races_go_round_the_fence_again_up_to_push_tries() {
    let mut m = Machine::new(limits());
    pulled(&mut m);
    m.step(Event::Harness(HarnessEnd::Committed));
    m.step(Event::Fence(FenceEnd::Held));
    m.step(Event::Integrate(IntegrateEnd::Clean));
    assert_eq!(
        m.step(Event::Push(PushEnd::Race)),
        Action::PushAgain { tries: 1 }
    );
    assert_eq!(
        m.step(Event::Push(PushEnd::Race)),
        Action::PushAgain { tries: 2 }
    );
    let a = m.step(Event::Push(PushEnd::Race));
    assert_eq!(given_back(&a), (GiveBack::Release, Then::Pull));
}

#[test]
fn a_lasting_refusal_or_a_missing_target_parks_the_task_and_keeps_the_commits() {
    let mut m = Machine::new(limits());
    pulled(&mut m);
    m.step(Event::Harness(HarnessEnd::Committed));
    m.step(Event::Fence(FenceEnd::Held));
    m.step(Event::Integrate(IntegrateEnd::Clean));
    let a = m.step(Event::Push(PushEnd::Refused {
        why: "pre-receive hook declined".into(),
    }));
    let Action::GiveBack {
        how,
        reason,
        salvage,
        then,
    } = a
    else {
        panic!("{a:?}")
    };
    assert_eq!((how, salvage, then), (GiveBack::Park, true, Then::Pull));
    assert!(reason.contains("pre-receive hook declined"), "{reason}");
    pulled(&mut m);
    m.step(Event::Harness(HarnessEnd::Committed));
    m.step(Event::Fence(FenceEnd::Held));
    let a = m.step(Event::Integrate(IntegrateEnd::NoTarget {
        branch: "release".into(),
    }));
    assert_eq!(given_back(&a), (GiveBack::Park, Then::Pull));
    assert_eq!(m.fails_in_a_row(), 0);
}

#[test]
fn pulls_wait_within_their_bounds_and_an_empty_board_ends_or_sweeps() {
    let mut m = Machine::new(limits());
    assert_eq!(
        m.step(Event::Pull(PullEnd::TryLater { after_s: 0 })),
        Action::Wait {
            secs: 1,
            sweep: false
        }
    );
    assert_eq!(
        m.step(Event::Pull(PullEnd::TryLater { after_s: 3600 })),
        Action::Wait {
            secs: 60,
            sweep: false
        }
    );
    assert_eq!(m.step(Event::Pull(PullEnd::Parked)), Action::Pull);
    assert_eq!(m.step(Event::Pull(PullEnd::NothingOpen)), Action::Exit(0));
    assert_eq!(m.step(Event::Pull(PullEnd::LedgerAway)), Action::Exit(2));
    assert_eq!(
        m.step(Event::Pull(PullEnd::Failed { exit: 1 })),
        Action::Exit(1)
    );
    let mut standing = Machine::new(Limits {
        wait_when_empty: true,
        ..limits()
    });
    assert_eq!(
        standing.step(Event::Pull(PullEnd::NothingOpen)),
        Action::Wait {
            secs: 10,
            sweep: true
        }
    );
    // A standing cell told "held by others" looks again within one idle poll, so a task
    // recorded meanwhile does not wait out RETRY_MAX; a sooner hint is taken as it is.
    assert_eq!(
        standing.step(Event::Pull(PullEnd::TryLater { after_s: 3600 })),
        Action::Wait {
            secs: 10,
            sweep: false
        }
    );
    assert_eq!(
        standing.step(Event::Pull(PullEnd::TryLater { after_s: 4 })),
        Action::Wait {
            secs: 4,
            sweep: false
        }
    );
}

#[test]
fn a_pending_review_finishes_the_task_and_an_unclosed_fix_gives_it_back() {
    let mut m = Machine::new(limits());
    pulled(&mut m);
    assert_eq!(
        m.step(Event::Close(CloseEnd::Pending)),
        Action::Finish { closed: false }
    );
    pulled(&mut m);
    let a = m.step(Event::Close(CloseEnd::NotClosed {
        outcome: "reverted".into(),
    }));
    assert_eq!(given_back(&a), (GiveBack::Release, Then::Pull));
    pulled(&mut m);
    assert_eq!(m.step(Event::Close(CloseEnd::LedgerAway)), Action::Exit(2));
}

#[test]
fn backoff_doubles_to_sixteen_seconds_with_jitter_until_the_limit() {
    let mut b = Backoff::new(Duration::from_secs(40));
    assert!(b.first());
    let pauses: Vec<u64> = std::iter::from_fn(|| b.next(0))
        .map(|d| d.as_secs())
        .collect();
    assert_eq!(pauses, vec![1, 2, 4, 8, 16, 16]);
    assert_eq!(b.waited(), Duration::from_secs(47));
    let mut b = Backoff::new(Duration::from_secs(5));
    assert_eq!(b.next(999), Some(Duration::from_millis(1999)));
    assert_eq!(b.next(1), Some(Duration::from_millis(2001)));
    assert_eq!(b.next(3999), Some(Duration::from_millis(7999)));
    assert_eq!(b.next(0), None);
    assert_eq!(push_pause(1, 0), Duration::from_millis(50));
    assert_eq!(push_pause(3, 399), Duration::from_millis(1347));
}

/// What one task comes to, as the model of the exit rules sees it.
#[derive(Clone, Debug)]
enum Fate {
    Closed,
    Pending,
    HarnessFailed,
    NoCommit,
    TimedOut,
    Conflict,
    PushRefused,
    NoTarget,
    ClaimLost,
    RaceLost,
    ParkedAtPull,
    HeldByOthers,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        Just(Fate::Closed),
        Just(Fate::Pending),
        Just(Fate::HarnessFailed),
        Just(Fate::NoCommit),
        Just(Fate::TimedOut),
        Just(Fate::Conflict),
        Just(Fate::PushRefused),
        Just(Fate::NoTarget),
        Just(Fate::ClaimLost),
        Just(Fate::RaceLost),
        Just(Fate::ParkedAtPull),
        Just(Fate::HeldByOthers),
    ]
}

/// Drives the machine through one task's fate; `Some(code)` when the cell exits.
fn drive(m: &mut Machine, f: &Fate) -> Option<u8> {
    let pull = match f {
        Fate::ParkedAtPull => PullEnd::Parked,
        Fate::HeldByOthers => PullEnd::TryLater { after_s: 5 },
        _ => PullEnd::Pulled,
    };
    let mut events: Vec<Event> = vec![Event::Pull(pull)];
    let to_push = |events: &mut Vec<Event>| {
        events.push(Event::Harness(HarnessEnd::Committed));
        events.push(Event::Fence(FenceEnd::Held));
        events.push(Event::Integrate(IntegrateEnd::Clean));
    };
    match f {
        Fate::Closed | Fate::Pending => {
            to_push(&mut events);
            events.push(Event::Push(PushEnd::Landed));
            events.push(Event::Verify(true));
            let end = if matches!(f, Fate::Closed) {
                CloseEnd::Closed
            } else {
                CloseEnd::Pending
            };
            events.push(Event::Close(end));
        }
        Fate::HarnessFailed => events.push(Event::Harness(HarnessEnd::Failed { why: "1".into() })),
        Fate::NoCommit => events.push(Event::Harness(HarnessEnd::NoCommit { why: "none".into() })),
        Fate::TimedOut => events.push(Event::Harness(HarnessEnd::TimedOut { why: "t".into() })),
        Fate::ClaimLost => events.push(Event::Harness(HarnessEnd::ClaimLost { why: "l".into() })),
        Fate::Conflict => {
            events.push(Event::Harness(HarnessEnd::Committed));
            events.push(Event::Fence(FenceEnd::Held));
            events.push(Event::Integrate(IntegrateEnd::Conflict { files: vec![] }));
        }
        Fate::NoTarget => {
            events.push(Event::Harness(HarnessEnd::Committed));
            events.push(Event::Fence(FenceEnd::Held));
            events.push(Event::Integrate(IntegrateEnd::NoTarget {
                branch: "x".into(),
            }));
        }
        Fate::PushRefused => {
            to_push(&mut events);
            events.push(Event::Push(PushEnd::Refused { why: "hook".into() }));
        }
        Fate::RaceLost => {
            to_push(&mut events);
            for _ in 0..m.limits.push_tries {
                events.push(Event::Push(PushEnd::Race));
            }
        }
        Fate::ParkedAtPull | Fate::HeldByOthers => {}
    }
    for e in events {
        match m.step(e) {
            Action::Exit(code) => return Some(code),
            Action::GiveBack {
                then: Then::Exit(code),
                ..
            }
            | Action::Salvage {
                then: Then::Exit(code),
                ..
            } => return Some(code),
            _ => {}
        }
    }
    None
}

proptest! {
    /// The exit rules against a model: only the harness's own failures count, FAIL_MAX of them
    /// in a row (with nothing finished between them) end the cell with 1, and nothing that is
    /// the task's, the target's or another cell's ever ends it; an empty board ends it with 0.
    #[test]
    fn the_cell_exits_exactly_when_the_model_says(
        fates in proptest::collection::vec(fate(), 0..40),
        fail_max in 1u32..5,
        push_tries in 1u32..4,
    ) {
        let mut m = Machine::new(Limits { fail_max, push_tries, ..limits() });
        let mut model_fails = 0u32;
        let mut model_exit = None;
        for f in &fates {
            match f {
                Fate::Closed | Fate::Pending => model_fails = 0,
                Fate::HarnessFailed | Fate::NoCommit | Fate::TimedOut => model_fails += 1,
                _ => {}
            }
            if model_fails >= fail_max {
                model_exit = Some(1);
            }
            let got = drive(&mut m, f);
            prop_assert_eq!(got, model_exit, "after {:?}", f);
            if got.is_some() {
                return Ok(());
            }
        }
        prop_assert_eq!(m.step(Event::Pull(PullEnd::NothingOpen)), Action::Exit(0));
    }
}
