//! Ref validation and trailer parsing, each held to the real git CLI as the oracle over a
//! generated corpus plus hand-written adversarial cases; and a task's ref cloned through the
//! binary as `git clone --branch` clones it.
//!
//! git is spawned once per input, spread over a few threads: a process per name is the only
//! way to ask `check-ref-format --branch`, and a commit per message is how git's own reading
//! of a commit's trailers is reached (one `git log` then reads them all back).

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use metabob_git::Repo;
use metabob_wire::refname::{MAX_REF_LEN, validate_ref};
use metabob_wire::trailers::{fixes_finding_ids, mentions_trailer_line, parse_trailers};

use crate::support::TestEnv;

/// A tiny deterministic PRNG, so a failing corpus is the same corpus on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// git, outside any repository (so `@{-N}` is never expanded), with the test's hermetic config.
fn git(env: &TestEnv) -> Command {
    hermetic(env, "git")
}

/// `program` with the test's environment, in its cwd, where no repository can be found.
fn hermetic(env: &TestEnv, program: &str) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .envs(env.vars.iter().map(|(k, v)| (k, v)))
        .env("GIT_CEILING_DIRECTORIES", env.root.path())
        .current_dir(env.cwd());
    c
}

/// Runs `ask` for every input on a few threads; answers come back in input order.
fn in_parallel<T: Sync, R: Send>(inputs: &[T], ask: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8);
    let chunk = inputs.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = inputs
            .chunks(chunk)
            .map(|part| s.spawn(|| part.iter().map(&ask).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("oracle thread"))
            .collect()
    })
}

// ---------------------------------------------------------------- refs

const REF_TOKENS: &[&str] = &[
    "a", "b", "z", "Q", "0", "9", "_", "x", "main", "task", "feature", ".", ".", "/", "/", "-",
    "-", "@", "@", "{", "}", "~", "^", ":", "?", "*", "[", "]", "\\", " ", "\t", "\u{7f}", "\u{1}",
    "\u{1f}", "\n", "lock", ".lock", "..", "@{", "@{-1}", "HEAD", "head", "é", "日本", "\u{80}",
    "//", "!", "#", "%", "'", "\"", "+", "=", ",", ";", "<", ">", "|", "$", "&",
];

fn random_ref(rng: &mut XorShift) -> String {
    let mut s = String::new();
    if rng.chance(4) {
        // Long runs cross our byte limit and probe git's lack of one.
        let tok = rng.pick(&["a", "é", "ab/", "x.", "日本"]);
        for _ in 0..(30 + rng.below(90)) {
            s.push_str(tok);
        }
        if rng.chance(50) {
            s.push_str(rng.pick(REF_TOKENS));
        }
        return s;
    }
    for _ in 0..(1 + rng.below(8)) {
        s.push_str(rng.pick(REF_TOKENS));
    }
    s
}

fn adversarial_refs() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        "@",
        "@@",
        "@{",
        "@{-1}",
        "@{-1}/x",
        "a@{u}",
        "@{upstream}",
        "{",
        "}",
        "@}",
        "a@b",
        "HEAD",
        "head",
        "HEAD/x",
        "a/HEAD",
        "-",
        "-x",
        "x-",
        "--",
        "a/-b",
        ".",
        "..",
        "...",
        "a.",
        "a..b",
        "a/.b",
        ".a",
        "a/.",
        "a/..",
        "a./b",
        "a.lock",
        "a.lock/b",
        "a/b.lock",
        ".lock",
        "lock",
        "a.lockx",
        "a.lock.b",
        "a.LOCK",
        "/",
        "/a",
        "a/",
        "a//b",
        "a/b/",
        "refs/heads/x",
        "refs/heads/",
        "a b",
        " a",
        "a ",
        "a\tb",
        "a\u{7f}",
        "a\u{1}b",
        "a~",
        "a^",
        "a:b",
        "a?",
        "a*",
        "a[b",
        "a]b",
        "a\\b",
        "é",
        "naïve/branch",
        "日本/語",
        "a\u{a0}b",
        "a\u{85}b",
        "\u{feff}x",
        "a\0b",
        "\0",
        "task/agf_12-x",
        "v1.2.3",
        "release/2024.01",
        "user@host",
        "a@",
        "@a",
        "x/@",
        "@/x",
        "a{b}",
        "a}b{",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for n in [MAX_REF_LEN - 1, MAX_REF_LEN, MAX_REF_LEN + 1, 255, 1000] {
        v.push("a".repeat(n));
        v.push(format!("{}/b", "a".repeat(n.saturating_sub(2))));
    }
    // Multi-byte characters straddling the byte limit.
    v.push("é".repeat(MAX_REF_LEN / 2));
    v.push(format!("{}a", "é".repeat(MAX_REF_LEN / 2)));
    v.push(format!("a{}", "日".repeat(33)));
    v
}

/// `git check-ref-format --branch` on every name: Some(accepted), or None for a name holding a
/// NUL, which no process can be handed.
///
/// A Rust-side spawn per name measured about 39 s for 5,200 names here; a bash loop per
/// thread reading NUL-separated names costs one git exec per name and nothing more.
fn git_branch_verdicts(env: &TestEnv, names: &[String]) -> Vec<Option<bool>> {
    const LOOP: &str = "while IFS= read -r -d '' n; do \
        git check-ref-format --branch \"$n\" >/dev/null 2>&1; echo $?; done";
    let askable: Vec<&str> = names
        .iter()
        .filter(|n| !n.contains('\0'))
        .map(String::as_str)
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8);
    let chunks: Vec<&[&str]> = askable
        .chunks(askable.len().div_ceil(threads).max(1))
        .collect();
    let answers: Vec<bool> = in_parallel(&chunks, |chunk| {
        let mut child = hermetic(env, "bash")
            .args(["-c", LOOP])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn bash for the git loop");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let input: Vec<u8> = chunk
            .iter()
            .flat_map(|n| n.bytes().chain(std::iter::once(0)))
            .collect();
        // Written from another thread so a full stdout pipe can never stall the writer.
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().expect("bash git loop");
        writer
            .join()
            .expect("writer thread")
            .expect("write names to bash");
        let codes: Vec<bool> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|code| code == "0")
            .collect();
        assert_eq!(codes.len(), chunk.len(), "one exit status per name");
        codes
    })
    .into_iter()
    .flatten()
    .collect();
    let mut answers = answers.into_iter();
    names
        .iter()
        .map(|n| (!n.contains('\0')).then(|| answers.next().expect("an answer per askable name")))
        .collect()
}

#[test]
fn validate_ref_agrees_with_git_check_ref_format_branch() {
    let env = TestEnv::new();
    let mut seen = HashSet::new();
    let mut names: Vec<String> = adversarial_refs()
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    while names.len() < 5_200 {
        let n = random_ref(&mut rng);
        if seen.insert(n.clone()) {
            names.push(n);
        }
    }

    let started = Instant::now();
    let git_says = git_branch_verdicts(&env, &names);
    eprintln!(
        "git check-ref-format --branch: {} names in {:.1?}",
        names.len(),
        started.elapsed()
    );

    let mut mismatches = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for (name, git) in names.iter().zip(&git_says) {
        let ours = validate_ref(name);
        let want = git.is_some_and(|ok| ok) && !name.starts_with('-') && name.len() <= MAX_REF_LEN;
        if ours.is_ok() {
            accepted += 1;
        } else {
            refused += 1;
        }
        if ours.is_ok() != want {
            mismatches.push(format!(
                "{:?}: git {} (len {}), ours {:?}",
                name,
                match git {
                    Some(true) => "accepts",
                    Some(false) => "refuses",
                    None => "cannot be asked (NUL)",
                },
                name.len(),
                ours
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} names disagree with git:\n{}",
        mismatches.len(),
        names.len(),
        mismatches.join("\n")
    );
    // A corpus that only ever hits one side would prove nothing.
    assert!(
        accepted > 500 && refused > 500,
        "accepted {accepted}, refused {refused}"
    );
}

// ---------------------------------------------------------------- trailers

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

// ---------------------------------------------------------------- a task's ref, cloned

/// `finding record` of a task on `a.py` whose details name `ref: <name>`.
fn record_task_with_ref(env: &TestEnv, url: &str, name: &str) {
    let v = env.record_task_with(
        url,
        "a.py",
        &format!("work on {name}"),
        "HIGH",
        &format!("ref: {name}"),
    );
    assert_eq!(v["outcome"], "recorded", "{v}");
}

/// What a checkout is, as the git CLI reads it: HEAD's commit, what HEAD names (`HEAD` when
/// detached), and each local branch with its commit and upstream.
fn checkout_state(env: &TestEnv, dir: &std::path::Path) -> Vec<String> {
    vec![
        env.git(dir, &["rev-parse", "HEAD"]),
        env.git(dir, &["rev-parse", "--symbolic-full-name", "HEAD"]),
        env.git(
            dir,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname) %(upstream)",
                "refs/heads/",
            ],
        ),
    ]
}

/// A task's ref is found as `git clone --branch` finds it, through the real binary: the
/// origin's branch of that name, else its tag, never a revision. Each name here means
/// something else to `git rev-parse` or to a partial-name lookup, and each ref points at a
/// commit of its own, so checking out the wrong one shows.
#[test]
fn task_pull_clones_a_ref_as_git_clone_branch_finds_it() {
    let env = TestEnv::new();
    let _ledger = env.ledger("main", &[]);
    let (bare, url) = env.origin("app", &[("a.py", "x = 1\n")]);
    let main = env.git(&bare, &["rev-parse", "refs/heads/main"]);
    let tree = format!("{main}^{{tree}}");
    let commit = |what: &str| env.git(&bare, &["commit-tree", &tree, "-p", &main, "-m", what]);
    // `@` alone is HEAD (main) to rev-parse.
    env.git(&bare, &["update-ref", "refs/heads/@", &commit("branch @")]);
    // git clone reads this name under refs/heads/; a full-name lookup would take the decoy.
    let nested = commit("branch refs/heads/side");
    env.git(
        &bare,
        &["update-ref", "refs/heads/refs/heads/side", &nested],
    );
    env.git(
        &bare,
        &["update-ref", "refs/heads/side", &commit("decoy side")],
    );
    // An annotated tag: checked out detached, at the commit it tags.
    env.git(&bare, &["tag", "-a", "-m", "v1", "v1", &commit("tag v1")]);
    // A branch and a tag of one name: the branch wins.
    env.git(
        &bare,
        &[
            "update-ref",
            "refs/heads/release",
            &commit("branch release"),
        ],
    );
    env.git(&bare, &["tag", "release", &commit("tag release")]);
    // Each name and the exact ref in the origin that it must check out.
    let cases = [
        ("@", "refs/heads/@"),
        ("refs/heads/side", "refs/heads/refs/heads/side"),
        ("v1", "refs/tags/v1^{commit}"),
        ("release", "refs/heads/release"),
    ];
    for (name, _) in cases {
        assert!(validate_ref(name).is_ok(), "{name:?} passes validation");
        record_task_with_ref(&env, &url, name);
    }

    let mut pulled = Vec::new();
    for cell in 0..cases.len() {
        let task = env.path(&format!("c{cell}/task")).display().to_string();
        let work = env.path(&format!("c{cell}/work"));
        let w = work.display().to_string();
        let out = env.run(&[
            "task",
            "pull",
            "--origin",
            &url,
            "--task-dir",
            &task,
            "--work-dir",
            &w,
            "--json",
        ]);
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("pull --json");
        assert_eq!(v["status"], "pulled", "{v}");
        let name = v["task"]["ref"]
            .as_str()
            .expect("the task has a ref")
            .to_string();
        let (_, exact) = cases
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("pulled an unknown ref {name:?}"));
        let want = env.git(&bare, &["rev-parse", "--verify", exact]);
        assert_eq!(v["task"]["base"], want.as_str(), "base of ref {name:?}");
        assert_eq!(
            env.git(&work, &["rev-parse", "HEAD"]),
            want,
            "HEAD for ref {name:?}"
        );
        assert_eq!(
            env.git(&work, &["status", "--porcelain"]),
            "",
            "clean work tree"
        );

        let oracle = env.path(&format!("oracle-{cell}"));
        let o = oracle.display().to_string();
        env.git(
            env.root.path(),
            &["clone", "-q", "--branch", &name, &url, &o],
        );
        assert_eq!(
            checkout_state(&env, &work),
            checkout_state(&env, &oracle),
            "task pull and git clone --branch {name:?} differ"
        );
        pulled.push(name);
    }
    pulled.sort();
    let mut all: Vec<String> = cases.iter().map(|(n, _)| n.to_string()).collect();
    all.sort();
    assert_eq!(pulled, all, "every task was pulled once");
}
