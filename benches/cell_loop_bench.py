#!/usr/bin/env python3
"""The cell loop's own overhead per task, side by side in one run: `metabob-mcp cell run` (through
the image's entrypoint, which execs it) against the shell loop it replaced (the
entrypoint/cell-entrypoint of BASELINE, 551 lines of sh that ran a metabob-mcp process per step),
both on the same release binary.

Each run records TASKS tasks on a small bare origin (file://), then one cell works through them
with a harness that does nothing but commit one line with the trailer, and ends at "nothing open".
A task's cost is the run's wall time over TASKS: pull, harness, fence, fetch, rebase, push,
verify, close. Runs of the two loops alternate so that the machine's drift hits both alike.

Usage: cargo build --release && python3 benches/cell_loop_bench.py [--tasks 10] [--runs 5]
       [--baseline 2a3201d]
Prints a Markdown table. Nothing is asserted."""

import argparse, os, shutil, statistics, subprocess, sys, tempfile, time

from bench_common import Ledger, cell_env, origin, sh

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "metabob-mcp")

# Reads the id without a JSON parser's start-up, the same for both loops.
HARNESS = (
    "id=$(sed -n 's/^  \"task_id\": \"\\(.*\\)\",$/\\1/p' \"$TASK_DIR/task.json\"); "
    "echo \"# $id\" >> a.py; git commit -qam \"Fix $id\" -m \"Fixes-Finding: $id\""
)


def one_run(script, tasks):
    with Ledger(BIN, "mb-loop-") as ledger:
        home = ledger.home
        env = cell_env(ledger)
        url = origin(env, home)
        for n in range(tasks):
            sh(env, BIN, "finding", "record", "--origin", url, "--file", "a.py", "--summary",
               f"task {n}", "--severity", "HIGH", "--category", "task", "--force")
        cell = dict(env, ORIGIN=url, HARNESS=HARNESS, VESSEL_ID="bench-cell", METABOB_BIN=BIN,
                    TASK_DIR=os.path.join(home, "task"), WORK_DIR=os.path.join(home, "work"))
        t = time.perf_counter()
        p = subprocess.run(["sh", script], env=cell, cwd=home, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t
        closed = p.stderr.count("outcome closed")
        if p.returncode != 0 or closed != tasks:
            sys.exit(f"{script}: exit {p.returncode}, {closed} of {tasks} closed:\n{p.stderr[-3000:]}")
        return dt / tasks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline", default="2a3201d")
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="mb-loop-scripts-")
    old = os.path.join(scratch, "cell-entrypoint.sh-loop")
    with open(old, "w") as f:
        f.write(subprocess.run(["git", "-C", ROOT, "show", f"{a.baseline}:entrypoint/cell-entrypoint"],
                               check=True, text=True, stdout=subprocess.PIPE).stdout)
    new = os.path.join(ROOT, "entrypoint", "cell-entrypoint")
    samples = {"cell run": [], "sh loop": []}
    for _ in range(a.runs):
        samples["cell run"].append(one_run(new, a.tasks))
        samples["sh loop"].append(one_run(old, a.tasks))
    shutil.rmtree(scratch, ignore_errors=True)
    med = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    print(f"| loop | ms per task (median of {a.runs} runs of {a.tasks} tasks) | min | max | / sh loop |")
    print("|---|---|---|---|---|")
    for k, v in samples.items():
        ms = [x * 1000 for x in v]
        print(f"| {k} | {med[k]:.0f} | {min(ms):.0f} | {max(ms):.0f} | {med[k] / med['sh loop']:.2f}x |")


if __name__ == "__main__":
    main()
