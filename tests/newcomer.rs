//! The mistakes a newcomer makes first: each is refused before anything is asked of the ledger,
//! with one line that names the cause and the fix.

use crate::support::{TestEnv, closed_port};

fn error_line(out: &crate::support::Output) -> &str {
    out.stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default()
}

#[test]
fn an_origin_that_is_no_url_or_path_is_named_before_the_ledger_is_asked() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    for origin in ["not-a-url", "", "ftp://host/r.git", "https://"] {
        let out = env.task_pull(origin, "c1", &[]);
        assert_eq!(out.code, 1, "{origin:?}: {out:?}");
        let line = error_line(&out);
        assert!(
            line.contains("--origin") && line.contains("clone URL"),
            "{origin:?}: {out:?}"
        );
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    // Each accepted form gets past the check (and finds nothing open for it).
    let local = env.path("repos/app.git");
    std::fs::create_dir_all(&local).unwrap();
    for origin in [
        "https://git.example/org/app.git",
        "git@git.example:org/app.git",
        &local.display().to_string(),
    ] {
        let out = env.task_pull(origin, "c2", &[]);
        assert_eq!(out.code, 3, "{origin}: {out:?}");
    }
}

#[test]
fn a_mistyped_tool_name_gets_the_nearest_one() {
    let env = TestEnv::new();
    let out = env.run(&["tool", "call", "get_problem"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        error_line(&out).contains("did you mean get_problems?"),
        "{out:?}"
    );
    let out = env.run(&["tool", "call", "zzzzzzzzzzzz"]);
    assert!(!error_line(&out).contains("did you mean"), "{out:?}");
    assert!(error_line(&out).contains("tool list"), "{out:?}");
}

#[test]
fn finding_close_outside_a_checkout_or_without_the_remote_says_what_is_missing() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let notgit = env.path("notgit");
    std::fs::create_dir_all(&notgit).unwrap();
    let dir = notgit.display().to_string();
    let out = env.run(&["finding", "close", "--work-dir", &dir, "--commits", "HEAD"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(error_line(&out).contains("--work-dir"), "{out:?}");

    // A repository with no origin remote: the range has its form, origin/main is what is missing.
    env.git(&notgit, &["init", "-q"]);
    env.git(&notgit, &["commit", "-q", "--allow-empty", "-m", "first"]);
    let out = env.run(&[
        "finding",
        "close",
        "--work-dir",
        &dir,
        "--commits",
        "origin/main..HEAD",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    let line = error_line(&out);
    assert!(
        line.contains("origin/main is not a commit in this repository")
            && !line.contains("expected A..B"),
        "{out:?}"
    );
}

#[test]
fn no_ledger_running_says_how_to_start_one() {
    let mut env = TestEnv::new();
    env.set(
        "DISCOVERY_ENDPOINT",
        format!("http://127.0.0.1:{}", closed_port()),
    );
    env.set(
        "METABOB_API_KEY",
        "mb_live_00000000000000000000000000000000",
    );
    let out = env.run(&["task", "list"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        error_line(&out).contains("metabob-mcp ledger serve"),
        "{out:?}"
    );
}

#[test]
fn renew_and_release_take_only_their_own_flags() {
    let env = TestEnv::new();
    for args in [
        &["task", "renew", "--reason", "foo"][..],
        &["task", "release", "--minutes", "5"],
    ] {
        let out = env.run(args);
        assert_eq!(out.code, 1, "{out:?}");
        assert!(out.stderr.contains("unexpected argument"), "{out:?}");
    }
}

#[test]
fn the_ledger_flag_takes_the_address_ledger_serve_prints() {
    let host = TestEnv::new();
    let ledger = host.ledger("main", &[]);
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(host.home().join(".substrate/config.json")).unwrap(),
    )
    .unwrap();
    let key = config["metabob"]["apiKey"].as_str().expect("the admin key");

    // A host with no config: the flag, then its environment twin.
    let fresh = TestEnv::new();
    let out = fresh.run(&[
        "--ledger",
        &ledger.url,
        "--api-key",
        key,
        "attach",
        "--check",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let mut twin = TestEnv::new();
    twin.set("METABOB_LEDGER", ledger.url.as_str());
    twin.set("METABOB_API_KEY", key);
    let out = twin.run(&["attach", "--check"]);
    assert_eq!(out.code, 0, "{out:?}");

    // Without it, the line says which flag takes the ledger's address.
    let out = fresh.run(&["--api-key", key, "attach", "--check"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("--ledger URL"), "{out:?}");
}
