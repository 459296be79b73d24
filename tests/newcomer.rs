//! The mistakes a newcomer makes first: each is refused before anything is asked of the ledger,
//! with one line that names the cause and the fix.

use crate::support::{Output, TestEnv, closed_port};

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
    let key = &host.admin_key();

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

/// Every command and group, with its path from the top (`task pull`).
fn every_command() -> Vec<(String, clap::Command)> {
    fn walk(path: &str, cmd: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let path = format!("{path} {}", sub.get_name()).trim().to_string();
            out.push((path.clone(), sub.clone()));
            walk(&path, sub, out);
        }
    }
    let mut top = <metabob_mcp::commands::Cli as clap::CommandFactory>::command();
    top.build();
    let mut out = vec![(String::new(), top.clone())];
    walk("", &top, &mut out);
    out
}

#[test]
fn every_command_shows_examples_and_says_what_each_flag_does() {
    <metabob_mcp::commands::Cli as clap::CommandFactory>::command().debug_assert();
    let commands = every_command();
    assert!(commands.len() > 15, "{}", commands.len());
    for (path, mut cmd) in commands {
        let help = cmd.render_long_help().to_string();
        let examples = help.split_once("\nExamples:\n  ").map(|(_, e)| e);
        assert!(
            examples.is_some_and(|e| e.contains("metabob-mcp ")),
            "`{path} --help` shows no examples:\n{help}"
        );
        for arg in cmd.get_arguments() {
            let said = arg.get_help().or(arg.get_long_help());
            assert!(
                said.is_some_and(|h| !h.to_string().trim().is_empty()),
                "`{path} --help` leaves {:?} blank",
                arg.get_id()
            );
        }
        // The ledger flags are declared once, as globals: every command's help shows them (the
        // ones that do not act on them refuse them by name, tested below).
        assert!(
            cmd.get_arguments()
                .any(|a| a.get_id() == "api_key" && a.is_global_set()),
            "`{path} --help` lacks the global --api-key"
        );
    }
}

#[test]
fn ledger_flags_on_a_command_they_do_not_act_on_are_refused_by_name() {
    let env = TestEnv::new();
    let store = env.path("ledger-data").display().to_string();
    for args in [
        &["--api-key", "k", "ledger", "key", "list", "--data", &store][..],
        &["--ledger", "http://127.0.0.1:1", "tool", "list"],
    ] {
        let out = env.run(args);
        assert_eq!(out.code, 1, "{out:?}");
        assert!(
            error_line(&out).contains(&format!("{} does not act on", args[0])),
            "{out:?}"
        );
        assert!(out.stdout.is_empty(), "{out:?}");
    }
    // After the command they are refused the same way: declared once, they parse everywhere.
    for args in [
        &["ledger", "key", "list", "--data", &store, "--api-key", "k"][..],
        &["tool", "list", "--endpoint", "http://127.0.0.1:1"],
    ] {
        let out = env.run(args);
        assert_eq!(out.code, 1, "{out:?}");
        let flag = args
            .iter()
            .find(|a| a.starts_with("--") && **a != "--data")
            .unwrap();
        assert_eq!(
            error_line(&out),
            format!(
                "error: {flag} does not act on {}; drop it",
                if args[0] == "ledger" {
                    "`ledger …`, which works on its store (--data or --store)"
                } else {
                    "`tool list`, which asks nothing of a ledger"
                }
            ),
            "{out:?}"
        );
    }
    // Given on both sides, the one after the command wins: the bad one before it is not used.
    let host = TestEnv::new();
    let ledger = host.ledger("main", &[]);
    let out = env.run(&[
        "--ledger",
        &format!("http://127.0.0.1:{}", closed_port()),
        "attach",
        "--check",
        "--ledger",
        &ledger.url,
        "--api-key",
        &host.admin_key(),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn a_line_range_is_checked_before_the_ledger_is_asked() {
    let env = TestEnv::new();
    let record = |extra: &[&str]| {
        let mut args = vec![
            "finding",
            "record",
            "--origin",
            "https://git.example/app.git",
            "--file",
            "a.py",
            "--severity",
            "LOW",
            "--category",
            "smell",
            "--summary",
            "s",
        ];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let out = record(&["--line-start", "9", "--line-end", "3"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        error_line(&out).contains("--line-end 3 is before --line-start 9"),
        "{out:?}"
    );
    let out = record(&["--line-end", "3"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("--line-start"), "{out:?}");
    let out = record(&["--line-start", "0"]);
    assert_eq!(out.code, 1, "{out:?}");
}

/// `scripts/fleet.sh status` with `docker` (and, when `standalone`, `docker-compose`) standing in
/// for Docker's tools: each logs how it was called. `plugin` says whether `docker compose
/// version` answers. Nothing else is on PATH, so the machine's own compose cannot answer.
fn fleet_status_with(env: &TestEnv, plugin: bool, standalone: bool) -> (Output, String) {
    use std::os::unix::fs::PermissionsExt;
    let bin = env.path(&format!("shims-{plugin}-{standalone}"));
    std::fs::create_dir_all(&bin).unwrap();
    let log = bin.join("calls.log");
    let shim = |name: &str, body: &str| {
        let path = bin.join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let version = if plugin { "exit 0" } else { "exit 1" };
    // A fleet is up: its ledger container answers `ps`.
    let ps = "case \"$*\" in *' ps -q ledger') echo ledger-container ;; esac\n";
    shim(
        "docker",
        &format!("[ \"$1 $2\" = 'compose version' ] && {version}\n{ps}exit 0\n"),
    );
    if standalone {
        shim("docker-compose", &format!("{ps}exit 0\n"));
    }
    for tool in ["dirname", "cat"] {
        let real = which(tool);
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let state = env.path(&format!("fleet-state-{plugin}-{standalone}"));
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("key"), "mb_live_k\n").unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(which("bash"))
        .arg(repo.join("scripts/fleet.sh"))
        .arg("status")
        .env_clear()
        .env("PATH", &bin)
        .env("FLEET_STATE", &state)
        .env("FLEET_PROJECT", "shimmed")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        Output::from(out),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

fn which(tool: &str) -> std::path::PathBuf {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[test]
fn fleet_sh_uses_the_compose_plugin_first_and_the_standalone_compose_otherwise() {
    let env = TestEnv::new();
    let fleet = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet");
    // TLS is on by default: the TLS file is named after the base one.
    let run = format!(
        "-p shimmed -f {} -f {} run --rm -T --no-deps -e METABOB_API_KEY=mb_live_k --entrypoint metabob-mcp cell task list",
        fleet.join("compose.yaml").display(),
        fleet.join("compose.tls.yaml").display()
    );
    let (out, calls) = fleet_status_with(&env, true, true);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        calls.lines().any(|l| l == format!("docker compose {run}")),
        "{calls}"
    );
    assert!(!calls.contains("docker-compose"), "{calls}");

    let (out, calls) = fleet_status_with(&env, false, true);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        calls.lines().any(|l| l == format!("docker-compose {run}")),
        "{calls}"
    );

    let (out, calls) = fleet_status_with(&env, false, false);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("neither `docker compose` nor docker-compose is installed"),
        "{out:?}"
    );
    assert!(!calls.contains(" run "), "{calls}");
}

#[test]
fn ledger_serve_help_names_every_limit_flag_and_variable_with_its_default() {
    let env = TestEnv::new();
    let out = env.run(&["ledger", "serve", "--help"]);
    assert_eq!(out.code, 0, "{out:?}");
    for (var, default) in [
        (
            metabob_ledger::REQUEST_BUDGET_VAR,
            metabob_ledger::DEFAULT_REQUEST_BUDGET_MS.to_string(),
        ),
        (
            metabob_ledger::IDLE_TIMEOUT_VAR,
            metabob_ledger::DEFAULT_IDLE_TIMEOUT_MS.to_string(),
        ),
        (
            metabob_ledger::READERS_VAR,
            metabob_ledger::DEFAULT_READERS.to_string(),
        ),
        (
            metabob_ledger::DRAIN_VAR,
            metabob_ledger::DEFAULT_DRAIN_MS.to_string(),
        ),
    ] {
        assert!(
            out.stdout.contains(&format!("{var}={default} ")),
            "{var}: {}",
            out.stdout
        );
    }
    for (flag, var, default) in [
        (
            "--request-budget-ms <MS>",
            metabob_ledger::REQUEST_BUDGET_VAR,
            metabob_ledger::DEFAULT_REQUEST_BUDGET_MS.to_string(),
        ),
        (
            "--idle-timeout-ms <MS>",
            metabob_ledger::IDLE_TIMEOUT_VAR,
            metabob_ledger::DEFAULT_IDLE_TIMEOUT_MS.to_string(),
        ),
        (
            "--readers <N>",
            metabob_ledger::READERS_VAR,
            metabob_ledger::DEFAULT_READERS.to_string(),
        ),
    ] {
        let line = out.stdout.lines().find(|l| l.contains(flag));
        let want = format!("[default: {default}; env: {var}]");
        assert!(
            line.is_some_and(|l| l.contains(&want)),
            "{flag}: {}",
            out.stdout
        );
    }
}
