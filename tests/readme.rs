//! README.md read through as a newcomer would: every shell block marked `<!-- runnable -->` (an
//! HTML comment on the line right above its ```sh fence, invisible on GitHub) runs as written
//! with `sh -eu`, each on a fresh hermetic machine in an empty directory with the built binary
//! first on PATH, and must exit 0 within a bound.

use std::time::{Duration, Instant};

use crate::support::{Output, TestEnv, layout, wait_until};

const MARKER: &str = "<!-- runnable -->";

/// Blocks start `ledger serve` as a newcomer types it, on its default address.
const LEDGER_PORT: u16 = 18100;

/// Long enough for a loaded CI machine; each block takes seconds.
const BOUND: Duration = Duration::from_secs(120);

/// The section whose block is the newcomer's first hour; losing its marker must fail the test.
const MAIN_JOB: &str = "## The main job on one machine";

struct Block {
    /// The README line of the block's first command.
    line: usize,
    heading: String,
    script: String,
}

impl Block {
    /// The script with README's line numbers, as a failure shows it.
    fn numbered(&self) -> String {
        self.script
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{:4} | {l}\n", self.line + i))
            .collect()
    }
}

/// Every marked block, in order. A marker that is not exactly `MARKER` right above a ```sh fence
/// is a mistake in README, not a block to skip.
fn runnable_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut heading = String::new();
    // Inside an unmarked block a `#` line is a shell comment, not a heading.
    let mut in_fence = false;
    let mut lines = readme.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((n, line)) = lines.next() {
        if line.starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence {
            continue;
        }
        if line.starts_with('#') {
            heading = line.to_string();
        }
        if !line.trim_start().starts_with("<!-- runnable") {
            continue;
        }
        assert_eq!(line, MARKER, "README.md:{n}: the marker is {MARKER:?}");
        let fence = lines.next();
        assert!(
            fence.is_some_and(|(_, f)| f == "```sh"),
            "README.md:{n}: {MARKER} must sit right above a ```sh fence, not {fence:?}"
        );
        let mut script = String::new();
        loop {
            let (_, l) = lines
                .next()
                .unwrap_or_else(|| panic!("README.md:{n}: the marked block never closes"));
            if l == "```" {
                break;
            }
            script.push_str(l);
            script.push('\n');
        }
        blocks.push(Block {
            line: n + 2,
            heading: heading.clone(),
            script,
        });
    }
    blocks
}

/// Held while a block runs, so that test runs of other checkouts on this host never start a
/// second ledger on the port. An abstract socket is released by the kernel when its holder
/// dies, however it dies, so a crashed run leaves no stale lock.
#[cfg(target_os = "linux")]
fn port_lock() -> std::os::unix::net::UnixListener {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("metabob-mcp-readme-{LEDGER_PORT}");
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let start = Instant::now();
    loop {
        match UnixListener::bind_addr(&addr) {
            Ok(lock) => return lock,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && start.elapsed() < BOUND * 3 => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("the README lock @{name}: {e}"),
        }
    }
}

/// Without abstract sockets, runs on one host are not serialised; the port check still names
/// a collision.
#[cfg(not(target_os = "linux"))]
fn port_lock() {}

/// A ledger a block left behind is gone once its group is killed, but the kernel may take a
/// moment; anything else on the port is someone's own ledger, which the block would attach to
/// instead of its own.
fn wait_for_free_port() {
    let free = wait_until(Duration::from_secs(10), || {
        std::net::TcpListener::bind(("127.0.0.1", LEDGER_PORT)).is_ok()
    });
    assert!(
        free,
        "127.0.0.1:{LEDGER_PORT} is taken by another process (a ledger of your own?); \
         README's blocks run `ledger serve` on it"
    );
}

/// Runs `block` in a process group of its own, killed whole afterwards whatever the outcome, so
/// a ledger it started in the background never outlives it (nor hangs the suite past `BOUND`).
fn run(block: &Block) -> (Output, Duration, bool) {
    let mut env = TestEnv::new();
    let bin = env.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(crate::support::bin(), bin.join("metabob-mcp")).unwrap();
    let path = env
        .vars
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    env.set("PATH", format!("{}:{path}", bin.display()));
    let script = env.path("block.sh");
    std::fs::write(&script, &block.script).unwrap();
    let mut sh = env.program("sh");
    sh.arg("-eu").arg(&script);
    env.run_in_own_group(sh, "block", BOUND)
}

#[test]
fn every_runnable_block_of_the_readme_runs_as_written() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let blocks = runnable_blocks(&readme);
    assert!(
        !blocks.is_empty(),
        "README.md marks no block {MARKER}: nothing would be checked"
    );
    assert!(
        blocks.iter().any(|b| b.heading == MAIN_JOB),
        "the block under {MAIN_JOB:?} lost its {MARKER} marker"
    );

    let mut failures = Vec::new();
    for block in &blocks {
        let _lock = port_lock();
        wait_for_free_port();
        let (out, took, ended) = run(block);
        if !ended || out.code != 0 {
            let why = if ended {
                format!("exited {}", out.code)
            } else {
                format!("ran past {BOUND:?} and was killed")
            };
            failures.push(format!(
                "README.md:{} ({}) {why} after {took:.1?}:\n{}{}",
                block.line,
                block.heading,
                block.numbered(),
                layout(&out)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_marker_takes_the_sh_block_right_below_it_and_nothing_else() {
    let readme = "# A\n\n```sh\n# not a heading\n```\n\n## B\n<!-- runnable -->\n```sh\n\
                  echo one\n# a comment\n```\n```sh\nnot marked\n```\n";
    let blocks = runnable_blocks(readme);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].script, "echo one\n# a comment\n");
    assert_eq!(blocks[0].heading, "## B");
    assert_eq!(blocks[0].line, 10);
}

#[test]
#[should_panic(expected = "must sit right above a ```sh fence")]
fn a_marker_away_from_its_fence_is_refused() {
    runnable_blocks("<!-- runnable -->\n\n```sh\necho\n```\n");
}
