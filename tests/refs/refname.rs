//! Ref validation (crates/wire/src/refname.rs) held to `git check-ref-format --branch`.

use std::collections::HashSet;
use std::io::Write;
use std::process::Stdio;
use std::time::Instant;

use metabob_wire::refname::{MAX_REF_LEN, validate_ref};

use crate::support::TestEnv;

use super::{XorShift, hermetic, in_parallel};

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
