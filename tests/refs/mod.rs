//! Ref validation and trailer parsing, each held to the real git CLI as the oracle over a
//! generated corpus plus hand-written adversarial cases; and a task's ref cloned through the
//! binary as `git clone --branch` clones it.
//!
//! git is spawned once per input, spread over a few threads: a process per name is the only
//! way to ask `check-ref-format --branch`, and a commit per message is how git's own reading
//! of a commit's trailers is reached (one `git log` then reads them all back).

mod refname;
mod task_ref;
mod trailers;

use std::process::Command;

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
