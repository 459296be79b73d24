//! Trailer parsing (crates/wire/src/trailers.rs) held to what `git log` reads as a commit's
//! trailers, and a squash merge's trailer read as a mention only.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use metabob_git::Repo;
use metabob_wire::trailers::{fixes_finding_ids, mentions_trailer_line, parse_trailers};

use crate::support::TestEnv;

use super::{XorShift, git, hermetic, in_parallel};

const WORDS: &[&str] = &[
    "fix",
    "the",
    "parser",
    "when",
    "input",
    "is",
    "empty",
    "naïve",
    "café",
    "日本語",
    "ok",
    "see",
    "also",
    "Note:",
    "TODO",
    "a",
    "value",
    "with",
    "colon:",
    "http://x.y/z",
];

const KEYS: &[&str] = &[
    "Fixes-Finding",
    "fixes-finding",
    "FIXES-FINDING",
    "Signed-off-by",
    "Reviewed-by",
    "Co-authored-by",
    "Acked-by",
    "Key",
    "X-1",
    "-",
    "A",
    "Bug",
    "Closes",
    "Bad Key",
    "Key ",
    "Key\t",
    "Clé",
    "日本",
    "key.dot",
    "key_under",
    " Indented",
];

const SEPARATORS: &[&str] = &[": ", ": ", ": ", ":", " : ", "\t: ", ":  ", "=", " ", ":\t"];

/// Between `min` and `min + spread - 1` words.
fn words(rng: &mut XorShift, min: usize, spread: usize) -> String {
    let n = min + rng.below(spread);
    (0..n)
        .map(|_| rng.pick(WORDS))
        .collect::<Vec<_>>()
        .join(" ")
}

fn trailer_line(rng: &mut XorShift) -> String {
    let key = rng.pick(KEYS);
    let sep = rng.pick(SEPARATORS);
    let value = match rng.below(6) {
        0 => format!("agf_{}", rng.below(50)),
        1 => format!("  agf_x-{}_y  ", rng.below(9)),
        2 => "A U Thor <author@example.com>".to_string(),
        3 => String::new(),
        4 => format!("agf_{} trailing", rng.below(5)),
        _ => words(rng, 1, 4),
    };
    format!("{key}{sep}{value}")
}

fn block_line(rng: &mut XorShift) -> String {
    match rng.below(20) {
        0..=8 => trailer_line(rng),
        9 => format!("Signed-off-by: Dev {} <d@e.f>", rng.below(9)),
        10 => format!("(cherry picked from commit {:040x})", rng.next()),
        11 | 12 => format!(
            "{}{}",
            rng.pick(&[" ", "  ", "\t", "   "]),
            words(rng, 1, 3)
        ),
        13 => format!("# {}", words(rng, 2, 1)),
        14 => words(rng, 2, 5),
        15 => rng.pick(&["   ", "\t", " "]).to_string(),
        16 => rng
            .pick(&[
                "---",
                "--- a",
                "---x",
                "-- ",
                "----",
                "Conflicts:",
                "\tsrc/a.rs",
                "# ------------------------ >8 ------------------------",
            ])
            .to_string(),
        17 => format!("Fixes-Finding: agf_{}", rng.below(6)),
        _ => trailer_line(rng),
    }
}

fn random_message(rng: &mut XorShift) -> String {
    let mut lines: Vec<String> = Vec::new();
    // Subjects sometimes look like trailers, or are missing, or start with blank lines.
    match rng.below(10) {
        0 => lines.push(trailer_line(rng)),
        1 => lines.push(String::new()),
        2 => lines.push(format!("# {}", words(rng, 2, 1))),
        _ => lines.push(words(rng, 2, 6)),
    }
    if rng.chance(15) {
        lines.push(words(rng, 3, 1));
    }
    for _ in 0..rng.below(3) {
        lines.push(String::new());
        for _ in 0..(1 + rng.below(4)) {
            lines.push(if rng.chance(15) {
                block_line(rng)
            } else {
                words(rng, 1, 8)
            });
        }
    }
    if !rng.chance(10) {
        lines.push(String::new());
        for _ in 0..(1 + rng.below(7)) {
            lines.push(block_line(rng));
        }
    }
    for _ in 0..rng.below(3) {
        lines.push(rng.pick(&["", "", "# trailing comment", " "]).to_string());
    }
    let eol = if rng.chance(15) { "\r\n" } else { "\n" };
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line);
        if rng.chance(5) {
            out.push_str(rng.pick(&[" ", "\t", "  "]));
        }
        if i + 1 < lines.len() || !rng.chance(10) {
            out.push_str(if rng.chance(3) { "\r\n" } else { eol });
        }
    }
    out
}

fn adversarial_messages() -> Vec<String> {
    [
        "",
        "\n",
        "subject only",
        "Fixes-Finding: agf_1",
        "Fixes-Finding: agf_1\n",
        "Fixes-Finding: agf_1\nKey: v\n",
        "s\n\nFixes-Finding: agf_1",
        "s\n\nFixes-Finding: agf_1\n",
        "\nFixes-Finding: agf_1\n",
        "\n\nFixes-Finding: agf_1\n",
        "s\n\n\n\nFixes-Finding: agf_1\n\n\n",
        "s\n\nbody\n\nFixes-Finding: agf_1\nFixes-Finding: agf_2\n",
        "s\n\nFixes-Finding: agf_1\n\nbody after\n",
        "s\n\nprose\nFixes-Finding: agf_1\n",
        "s\n\nprose\nFixes-Finding: agf_1\nSigned-off-by: A <a@b>\n",
        "s\n\np\np\np\np\np\np\nFixes-Finding: agf_1\nSigned-off-by: A <a@b>\n",
        "s\n\np\np\np\np\np\nFixes-Finding: agf_1\nSigned-off-by: A <a@b>\n",
        "s\n\np\np\np\nSigned-off-by: A <a@b>\n",
        "s\n\np\np\np\np\nSigned-off-by: A <a@b>\n",
        "s\n\n(cherry picked from commit 0123456789abcdef0123456789abcdef01234567)\n",
        "s\n\nprose\n(cherry picked from commit 0123)\nFixes-Finding: agf_3\n",
        "s\n\nSigned-off-by:A\nprose\n",
        "s\n\nSigned-off-by: A\nprose\n",
        "s\n\nKey: one\n  two\n   three\n",
        "s\n\nKey: one\n\ttwo\nOther: x\n  y\n",
        "s\n\n  indented: first\nKey: v\n",
        "s\n\nprose\n  cont\nSigned-off-by: A\n",
        "s\n\nKey: v\n  cont\nprose\nSigned-off-by: A\nSigned-off-by: B\n",
        "s\n\nKey: v\n---\nOther: w\n",
        "s\n\nKey: v\n--- \nOther: w\n",
        "s\n\nKey: v\n---x\nOther: w\n",
        "---\n\nKey: v\n",
        "s\n\nKey: v\n---",
        "s\n\nKey: v\n# comment\nOther: w\n",
        "s\n\nKey: v\n# comment\n\n# more\n",
        "s\n\n# only comments\n# here\n",
        "# c\n\nKey: v\n",
        "# c\ns\n\nKey: v\n",
        "s\n\nKey: v\n# ------------------------ >8 ------------------------\nOther: w\n",
        "# ------------------------ >8 ------------------------\nKey: v\n",
        "s\n\nKey: v\n\n# ------------------------ >8 ------------------------\n",
        "s\n\nKey: v\nConflicts:\n\ta.rs\n\tb.rs\n",
        "s\n\nKey: v\n\nConflicts:\n\ta.rs\n",
        "s\r\n\r\nFixes-Finding: agf_1\r\nKey: v\r\n",
        "s\r\n\r\nKey: one\r\n  two\r\n",
        "s\r\n\r\nKey: v\r\n\r\n",
        "s\n\nKey: v   \n",
        "s\n\nKey:\n",
        "s\n\nKey:   \n",
        "s\n\n:no key\n",
        "s\n\n-: dash\n",
        "s\n\nKey : spaced\nKey\t:\ttabbed\n",
        "s\n\nBad Key: v\n",
        "s\n\nClé: v\n",
        "s\n\nKey=v\n",
        "s\n\nKey: v\n   \n",
        "s\n\nKey: v\n\t\n",
        "s\n\nKey: a: b: c\n",
        "s\n\nfixes-finding: agf_lower\nFIXES-FINDING: agf_upper\n",
        "s\n\nFixes-Finding:  agf_1  \nFixes-Finding: agf_1\n",
        "Squash (#7)\n\n* one\n\n  Fixes-Finding: agf_7\n\n* two\n\nFixes-Finding: agf_8\n",
        "s\n\nKey: v\u{a0}\n",
        "s\n\nKey: 日本語\n  続き\n",
        "s\n\nKey: v\x0b\n",
        "s\n\nKey: v\x0c\n",
        "s\n\nKey: v\0Other: w\n",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What `git log` reads from one commit's message: the `Fixes-Finding` values as
/// `%(trailers:key=Fixes-Finding,valueonly,unfold)` prints them, and every trailer as
/// `%(trailers:only,unfold)` prints it.
#[derive(Debug, Clone)]
struct GitReads {
    fixes: Vec<String>,
    all: Vec<(String, String)>,
}

/// Commits every message verbatim into a scratch bare repository and reads each back with
/// `git log`; answers come in input order, with the commits' ids.
///
/// `git commit-tree -F` stores a message byte for byte (no cleanup, no newline added). git's
/// own commands refuse a message holding NUL, but a remote can still serve one, so those few
/// are written as raw commit objects with `hash-object --literally`.
fn git_log_trailers(env: &TestEnv, messages: &[String]) -> (PathBuf, Vec<(String, GitReads)>) {
    let repo = env.path("trailer-oracle.git");
    let msgs = env.path("trailer-messages");
    std::fs::create_dir_all(&msgs).expect("messages dir");
    env.git(
        env.root.path(),
        &["init", "-q", "--bare", &repo.display().to_string()],
    );
    let tree = env.git(&repo, &["mktree"]);
    const STAMP: &str = "T <t@example.invalid> 1700000000 +0000";
    let files: Vec<String> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (name, bytes) = if m.contains('\0') {
                let object = format!("tree {tree}\nauthor {STAMP}\ncommitter {STAMP}\n\n{m}");
                (format!("{i}.obj"), object.into_bytes())
            } else {
                (format!("{i}.msg"), m.clone().into_bytes())
            };
            let path = msgs.join(name);
            std::fs::write(&path, bytes).expect("write message file");
            path.display().to_string()
        })
        .collect();

    // One bash per thread, one git exec per message (see `git_branch_verdicts`). git's stdin
    // is closed: commit-tree reads the message from stdin when the file is empty.
    const LOOP: &str = "while IFS= read -r -d '' f; do \
        case \"$f\" in \
          *.obj) git hash-object -t commit -w --literally \"$f\" ;; \
          *) git commit-tree -F \"$f\" \"$TREE\" ;; \
        esac </dev/null || { echo \"committing $f failed\" >&2; exit 1; }; done";
    let chunks: Vec<&[String]> = files.chunks(files.len().div_ceil(4).max(1)).collect();
    let shas: Vec<String> = in_parallel(&chunks, |chunk| {
        let mut child = hermetic(env, "bash")
            .args(["-c", LOOP])
            .env("GIT_DIR", &repo)
            .env("TREE", &tree)
            .env("GIT_AUTHOR_DATE", "@1700000000 +0000")
            .env("GIT_COMMITTER_DATE", "@1700000000 +0000")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn bash for the commit loop");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let input: Vec<u8> = chunk
            .iter()
            .flat_map(|f| f.bytes().chain(std::iter::once(0)))
            .collect();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().expect("bash commit loop");
        writer
            .join()
            .expect("writer thread")
            .expect("write file names to bash");
        assert!(out.status.success(), "committing a message failed");
        let shas: Vec<String> = String::from_utf8(out.stdout)
            .expect("ids are ASCII")
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(shas.len(), chunk.len(), "one commit per message");
        shas
    })
    .into_iter()
    .flatten()
    .collect();

    // One log over every commit; fields and records end in NUL, which no value can hold.
    let mut child = git(env)
        .args([
            "log",
            "--no-walk=unsorted",
            "--stdin",
            "-z",
            "--format=%H%x00%(trailers:key=Fixes-Finding,valueonly,unfold)%x00%(trailers:only,unfold)",
        ])
        .env("GIT_DIR", &repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn git log");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = shas.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("git log");
    writer
        .join()
        .expect("writer thread")
        .expect("write ids to git log");
    assert!(
        out.status.success(),
        "git log failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("git echoes UTF-8 messages as UTF-8");
    let fields: Vec<&str> = text.split('\0').collect();
    let mut by_sha = std::collections::HashMap::new();
    for record in fields.chunks_exact(3) {
        let fixes = record[1]
            .split_terminator('\n')
            .map(str::to_string)
            .collect();
        let all = record[2]
            .split_terminator('\n')
            .map(|line| {
                let (k, v) = line
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("unexpected git output line {line:?}"));
                (k.to_string(), v.to_string())
            })
            .collect();
        by_sha.insert(record[0].to_string(), GitReads { fixes, all });
    }
    let answers = shas
        .into_iter()
        .map(|sha| {
            let reads = by_sha
                .get(&sha)
                .unwrap_or_else(|| panic!("git log printed nothing for {sha}"))
                .clone();
            (sha, reads)
        })
        .collect();
    (repo, answers)
}

/// Messages whose `---` line git's log reading does not treat as the start of a patch, so a
/// parse that stops there (as `git interpret-trailers` does) reads a different block.
fn divider_messages() -> Vec<String> {
    [
        "s\n\nFixes-Finding: agf_1\n---\nmore text\n",
        "s\n\nFixes-Finding: agf_1\n---\n",
        "s\n\nFixes-Finding: agf_1\n---",
        "s\n\nFixes-Finding: agf_1\n--- a/x.rs\n+++ b/x.rs\n",
        "s\n\nFixes-Finding: agf_1\n\n---\nnotes below the line\n",
        "s\n\nFixes-Finding: agf_1\n\n---\nFixes-Finding: agf_2\n",
        "s\n\nFixes-Finding: agf_1\nSigned-off-by: A <a@b>\n---\nFixes-Finding: agf_2\n",
        "s\n\nbody\n---\nmore body\n\nFixes-Finding: agf_3\n",
        "s\n\n---\n\nFixes-Finding: agf_4\n",
        "---\n\nFixes-Finding: agf_5\n",
        "s\n\nFixes-Finding: agf_6\n---\t\nReviewed-by: B <b@c>\n",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn parse_trailers_agrees_with_git_log_trailers() {
    let env = TestEnv::new();
    let mut messages = adversarial_messages();
    messages.extend(divider_messages());
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    while messages.len() < 600 {
        messages.push(random_message(&mut rng));
    }

    let started = Instant::now();
    let (repo, git_says) = git_log_trailers(&env, &messages);
    eprintln!(
        "git commit-tree + git log %(trailers): {} messages in {:.1?}",
        messages.len(),
        started.elapsed()
    );
    // finding close reads messages through gix, so that read is held to git too.
    let read_back = Repo::open(&repo).expect("open the oracle repository");

    let mut mismatches = Vec::new();
    let mut with_trailers = 0;
    for (message, (sha, want)) in messages.iter().zip(&git_says) {
        if !want.all.is_empty() {
            with_trailers += 1;
        }
        let stored = read_back.commit(sha).expect("gix reads the commit").message;
        for (how, text) in [("as given", message.as_str()), ("read by gix", &stored)] {
            let ours: Vec<(String, String)> = parse_trailers(text)
                .into_iter()
                .map(|t| (t.key, t.value))
                .collect();
            if ours != want.all {
                mismatches.push(format!(
                    "message {message:?} ({how})\n  git:  {:?}\n  ours: {ours:?}",
                    want.all
                ));
                continue;
            }
            let fixes: Vec<&str> = ours
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("Fixes-Finding"))
                .map(|(_, v)| v.as_str())
                .collect();
            if fixes != want.fixes {
                mismatches.push(format!(
                    "message {message:?} ({how})\n  git Fixes-Finding: {:?}\n  ours: {fixes:?}",
                    want.fixes
                ));
                continue;
            }
            // The ids follow from git's own values, by the documented filter.
            let mut ids: Vec<String> = Vec::new();
            for v in &want.fixes {
                let v = v.trim();
                let shaped = v.strip_prefix("agf_").is_some_and(|r| {
                    !r.is_empty()
                        && r.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                });
                if shaped && !ids.iter().any(|i| i == v) {
                    ids.push(v.to_string());
                }
            }
            if fixes_finding_ids(text) != ids {
                mismatches.push(format!(
                    "message {message:?} ({how})\n  ids from git: {ids:?}\n  ours: {:?}",
                    fixes_finding_ids(text)
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} disagreements with git over {} messages:\n{}",
        mismatches.len(),
        messages.len(),
        mismatches.join("\n")
    );
    assert!(
        with_trailers > messages.len() / 5 && with_trailers < messages.len() * 4 / 5,
        "only {with_trailers} of {} messages have trailers; the corpus is lopsided",
        messages.len()
    );
}

/// A real `git merge --squash` commit: the source's trailer lands in the body, where the
/// trailer parse does not see it but a mention does.
#[test]
fn a_squash_merge_keeps_the_fix_as_a_mention_only() {
    let env = TestEnv::new();
    let repo = env.path("squash");
    std::fs::create_dir_all(&repo).expect("repo dir");
    let run = |args: &[&str]| {
        let out = git(&env)
            .current_dir(&repo)
            .args(args)
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 git output")
    };
    run(&["init", "-q", "-b", "main"]);
    run(&["commit", "-q", "--allow-empty", "-m", "base"]);
    run(&["checkout", "-q", "-b", "topic"]);
    std::fs::write(repo.join("f"), "x\n").expect("write f");
    run(&["add", "f"]);
    run(&[
        "commit",
        "-q",
        "-m",
        "Fix the thing\n\nFixes-Finding: agf_squashed\n",
    ]);
    run(&["checkout", "-q", "main"]);
    run(&["merge", "-q", "--squash", "topic"]);
    run(&["commit", "-q", "--no-edit"]);
    let message = run(&["log", "-1", "--format=%B"]);
    assert!(
        fixes_finding_ids(&message).is_empty(),
        "the squash message's own trailer block is not expected to hold the id: {message:?}"
    );
    assert!(
        mentions_trailer_line(&message, "fixes-finding", "agf_squashed"),
        "{message:?}"
    );
    assert!(!mentions_trailer_line(
        &message,
        "Fixes-Finding",
        "agf_other"
    ));
}
