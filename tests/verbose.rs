//! `-v` on every command: a failure's one line, then the chain of causes under it, outermost
//! first (SPEC.md §Exit codes). Without `-v` the same failure prints the same line and nothing
//! more.

use std::collections::BTreeSet;

use crate::support::{Output, TestEnv, closed_port, normalize};

/// The leaf commands with no failure of their own to chain, each with why.
const NO_CHAIN: &[(&str, &str)] = &[
    (
        "tool list",
        "it reads nothing and asks no one; only stdout can fail it",
    ),
    (
        "attach",
        "it reports each hop on stdout; a failed hop is part of the report",
    ),
    (
        "doctor",
        "it reports each hop on stdout; a failed hop is part of the report",
    ),
];

/// Every leaf command's path (`task pull`, `ledger key create`, …), from the parser itself.
fn leaf_commands() -> BTreeSet<String> {
    fn walk(path: &str, cmd: &clap::Command, out: &mut BTreeSet<String>) {
        let subs: Vec<_> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            out.insert(path.to_string());
        }
        for sub in subs {
            walk(format!("{path} {}", sub.get_name()).trim(), sub, out);
        }
    }
    let mut top = <metabob_mcp::commands::Cli as clap::CommandFactory>::command();
    top.build();
    let mut out = BTreeSet::new();
    for sub in top.get_subcommands().filter(|s| s.get_name() != "help") {
        walk(sub.get_name(), sub, &mut out);
    }
    out
}

/// The error line and the lines under it, as the command printed them.
fn failure(out: &Output) -> (&str, Vec<&str>) {
    let mut lines = out.stderr.lines().skip_while(|l| !l.starts_with("error: "));
    let line = lines
        .next()
        .unwrap_or_else(|| panic!("no error line: {out:?}"));
    (line, lines.collect())
}

#[test]
fn every_command_prints_the_cause_chain_of_its_failure_with_v() {
    let mut env = TestEnv::new();
    let gone = format!("http://127.0.0.1:{}", closed_port());
    env.set("METABOB_LEDGER", gone.as_str());
    env.set(
        "METABOB_API_KEY",
        "mb_live_00000000000000000000000000000000",
    );
    let dir = |name: &str| {
        let p = env.path(name);
        std::fs::create_dir_all(&p).unwrap();
        p.display().to_string()
    };
    let (empty, work, task) = (dir("empty"), dir("work"), dir("task"));
    let a_file = env.path("a-file");
    std::fs::write(&a_file, "not a directory").unwrap();
    let a_file = a_file.display().to_string();
    let missing = env.path("missing").display().to_string();
    // A port something holds, so a server cannot bind it.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let held = holder.local_addr().unwrap().to_string();
    let origin = "https://git.example/app.git";
    let id = "agf_0123456789abcdef";

    // Every case names its own directories: a cell's default work directory is /work.
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "cell run",
            vec![
                "cell",
                "run",
                "--origin",
                origin,
                "--harness",
                "true",
                "--task-dir",
                &task,
                "--work-dir",
                &work,
                "--claim-minutes",
                "abc",
            ],
        ),
        (
            "finding close",
            vec![
                "finding",
                "close",
                "--commits",
                "HEAD~1..HEAD",
                "--work-dir",
                &empty,
            ],
        ),
        (
            "finding record",
            vec![
                "finding",
                "record",
                "--origin",
                origin,
                "--file",
                "a.py",
                "--severity",
                "LOW",
                "--category",
                "task",
                "--summary",
                "s",
            ],
        ),
        (
            "ledger serve",
            vec![
                "ledger",
                "serve",
                "--data",
                &empty,
                "--tls-cert",
                &missing,
                "--tls-key",
                &missing,
            ],
        ),
        (
            "ledger key create",
            vec!["ledger", "key", "create", "--data", &a_file],
        ),
        (
            "ledger key list",
            vec!["ledger", "key", "list", "--data", &a_file],
        ),
        (
            "ledger key revoke",
            vec![
                "ledger",
                "key",
                "revoke",
                "key_0123456789ab",
                "--data",
                &a_file,
            ],
        ),
        (
            "ledger backup",
            vec!["ledger", "backup", "--data", &a_file, "--to", &missing],
        ),
        (
            "ledger restore",
            vec!["ledger", "restore", "--data", &empty, "--from", &a_file],
        ),
        ("ledger health", vec!["ledger", "health", "--url", &gone]),
        ("serve", vec!["serve", "--http", &held, "--no-resolver"]),
        (
            "task pull",
            vec![
                "task",
                "pull",
                "--origin",
                origin,
                "--task-dir",
                &task,
                "--work-dir",
                &work,
            ],
        ),
        ("task renew", vec!["task", "renew", "--task-dir", &missing]),
        (
            "task release",
            vec!["task", "release", "--task-dir", &missing],
        ),
        ("task reopen", vec!["task", "reopen", id]),
        ("task list", vec!["task", "list"]),
        ("task show", vec!["task", "show", id]),
        ("task cancel", vec!["task", "cancel", id, "--reason", "r"]),
        (
            "task block",
            vec!["task", "block", id, "--by", "agf_fedcba9876543210"],
        ),
        (
            "task unblock",
            vec!["task", "unblock", id, "--from", "agf_fedcba9876543210"],
        ),
        (
            "tool call",
            vec!["tool", "call", "search_code", "--args", "{not json"],
        ),
    ];
    let covered: BTreeSet<String> = cases
        .iter()
        .map(|(c, _)| c.to_string())
        .chain(NO_CHAIN.iter().map(|(c, _)| c.to_string()))
        .collect();
    assert_eq!(
        covered,
        leaf_commands(),
        "every command has a case here, or a reason in NO_CHAIN"
    );

    let mut missing_chains = Vec::new();
    let mut screen = String::new();
    for (i, (command, args)) in cases.iter().enumerate() {
        // Before the command and after it, as every global flag may stand.
        let mut verbose: Vec<&str> = args.clone();
        if i % 2 == 0 {
            verbose.insert(0, "-v");
        } else {
            verbose.push("--verbose");
        }
        let out = env.run(&verbose);
        assert_ne!(out.code, 0, "{command}: {out:?}");
        let (line, chain) = failure(&out);
        if chain.first() != Some(&"caused by:") || chain.len() < 2 {
            missing_chains.push(format!("{command}: {out:?}"));
            continue;
        }
        for (n, link) in chain[1..].iter().enumerate() {
            assert!(
                link.starts_with(&format!("  {}: ", n + 1)),
                "{command}: {out:?}"
            );
        }
        screen.push_str(&format!(
            "$ metabob-mcp {}\n{line}\n{}\n[exit {}]\n\n",
            verbose.join(" "),
            chain.join("\n"),
            out.code
        ));
        let quiet = env.run(args);
        assert_eq!(quiet.code, out.code, "{command}: {quiet:?}");
        assert_eq!(
            failure(&quiet),
            (line, vec![]),
            "{command}: -v changed more than the chain"
        );
    }
    assert!(
        missing_chains.is_empty(),
        "no chain under -v:\n{}",
        missing_chains.join("\n")
    );
    drop(holder);
    // The whole screen: what an operator sees of each command's chain.
    insta::assert_snapshot!("chains", normalize(&screen, &env));
}
