//! Scans every commit message reachable from a tip for `Fixes-Finding: <id>` lines, the way
//! finding close decides "a commit on the target carries the same Fixes-Finding line anywhere
//! in its message". Used by benches/finding_close_scan.sh against `git log --format=%B`.
//!
//! usage: scan_history <repo> <tip> <id>...

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::ExitCode;

use metabob_mcp::git::Repo;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [repo, tip, ids @ ..] = args.as_slice() else {
        eprintln!("usage: scan_history <repo> <tip> <id>...");
        return ExitCode::from(2);
    };
    let wanted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    let repo = match Repo::open(Path::new(repo)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let history = match repo.history(tip) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    let mut commits = 0usize;
    for commit in history {
        let commit = match commit {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        commits += 1;
        for line in commit.message.lines() {
            if let Some(id) = line.trim().strip_prefix("Fixes-Finding:")
                && wanted.contains(id.trim())
            {
                found
                    .entry(id.trim().to_string())
                    .or_insert(commit.sha.clone());
            }
        }
    }
    println!(
        "scanned {commits} commits; found {} of {} ids",
        found.len(),
        wanted.len()
    );
    ExitCode::SUCCESS
}
