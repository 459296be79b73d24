#!/usr/bin/env python3
"""How soon a standing fleet's idle cells take new work, side by side in one run: this build's
`metabob-mcp cell run` against BASELINE_BIN (a build of 579b0bd^, where a cell told "held by
others" slept up to RETRY_MAX, 60 s, even under ON_EMPTY=wait).

Each run starts one ledger and three cells with ON_EMPTY=wait and the default IDLE_POLL (10 s)
and RETRY_MAX (60 s) on a small file:// origin. The first task is recorded and one cell takes it
(its harness sleeps, so it stays busy); the other two pull, are told "held by others" and wait.
Then two more tasks are recorded at once, and the clock runs until all three tasks are claimed:
the moment the idle cells look again. Runs of the two binaries alternate.

Usage: cargo build --release && python3 benches/standing_bench.py --baseline-bin PATH [--runs 3]
       [--bin PATH]
Prints a Markdown table. Nothing is asserted."""

import argparse, json, os, shutil, statistics, subprocess, sys, time

from bench_common import Client, Ledger, cell_env, origin, sh

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release",
                   "metabob-mcp")
# Busy for longer than any run: the cell that took the first task never frees up to take more.
HARNESS = "sleep 300"


def claimed(client):
    """How many tasks are claimed on the board now."""
    _, board = client.ok({"type": "taskBoard"})
    return sum(len(r.get("claimed", [])) for r in board.get("repositories", []))


def wait_until(what, f, timeout):
    deadline = time.monotonic() + timeout
    while not f():
        if time.monotonic() > deadline:
            sys.exit(f"not within {timeout}s: {what}")
        time.sleep(0.05)


def one_run(binary):
    with Ledger(binary, "mb-standing-") as ledger:
        home = ledger.home
        env = cell_env(ledger)
        url = origin(env, home)
        client = Client(ledger.host, ledger.port, ledger.key)

        def record(n):
            sh(env, binary, "finding", "record", "--origin", url, "--file", "a.py", "--summary",
               f"task {n}", "--severity", "HIGH", "--category", "task", "--force")

        record(0)
        cells = []
        try:
            for c in range(3):
                d = os.path.join(home, f"cell{c}")
                cell = dict(env, ORIGIN=url, HARNESS=HARNESS, VESSEL_ID=f"cell-{c}",
                            ON_EMPTY="wait", TASK_DIR=os.path.join(d, "task"),
                            WORK_DIR=os.path.join(d, "work"))
                os.makedirs(d)
                cells.append(subprocess.Popen([binary, "cell", "run"], env=cell, cwd=d,
                                              stdout=subprocess.DEVNULL,
                                              stderr=open(os.path.join(d, "log"), "w")))
            wait_until("the first task claimed", lambda: claimed(client) == 1, 60)

            # The other two have pulled and been told to try later once each log says so.
            def told_to_wait():
                n = 0
                for c in range(3):
                    with open(os.path.join(home, f"cell{c}", "log")) as f:
                        n += "held" in f.read()
                return n >= 2
            wait_until("two cells told the task is held", told_to_wait, 60)
            t = time.monotonic()
            record(1)
            record(2)
            wait_until("all three tasks claimed", lambda: claimed(client) == 3, 180)
            return time.monotonic() - t
        finally:
            for p in cells:
                p.kill()
                p.wait()
            shutil.rmtree(home, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=BIN, help="this build's binary (default: the release build)")
    ap.add_argument("--baseline-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    samples = {"this build": [], "579b0bd^": []}
    for _ in range(a.runs):
        samples["this build"].append(one_run(a.bin))
        samples["579b0bd^"].append(one_run(a.baseline_bin))
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"| cells | s until all three claimed (median of {a.runs}) | min | max | / 579b0bd^ |")
    print("|---|---|---|---|---|")
    for k, v in samples.items():
        print(f"| {k} | {med[k]:.1f} | {min(v):.1f} | {max(v):.1f} | {med[k] / med['579b0bd^']:.2f}x |")
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
