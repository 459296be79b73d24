//! The MCP server: an in-process rmcp client over a duplex pipe for every tool, against the
//! embedded ledger and detached; and the real binary on stdio.

// Roots are deprecated by SEP-2577, and still what MCP clients send.
#![allow(deprecated)]

mod detached;
mod secrets;
mod shared;
mod stdio;
mod workspace;

use std::path::Path;

use crate::support::TestEnv;

pub use stdio::{malformed_lines, stdio_answers, too_long_line};

/// A checkout with history: `a.py` and `b.py` change together, `c.py` alone.
pub fn project(env: &TestEnv, dir: &Path) {
    std::fs::create_dir_all(dir).expect("project dir");
    env.git(dir, &["init", "-q", "-b", "main"]);
    let write = |p: &str, s: &str| std::fs::write(dir.join(p), s).expect("write");
    write(
        "a.py",
        "from b import helper\n\ndef run():\n    return helper()\n",
    );
    write("b.py", "def helper():\n    return 1\n");
    write("c.py", "def other():\n    return 3\n");
    write(
        "test_a.py",
        "from a import run\n\ndef test_run():\n    assert run() == 1\n",
    );
    env.git(dir, &["add", "-A"]);
    env.git(dir, &["commit", "-q", "-m", "start"]);
    for i in 0..3 {
        write(
            "a.py",
            &format!("from b import helper\n\ndef run():\n    return helper() + {i}\n"),
        );
        write("b.py", &format!("def helper():\n    return {i}\n"));
        env.git(dir, &["commit", "-qam", &format!("a and b {i}")]);
    }
    write("c.py", "def other():\n    return 4\n");
    env.git(dir, &["commit", "-qam", "c alone"]);
}
