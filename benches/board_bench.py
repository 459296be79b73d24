#!/usr/bin/env python3
"""Measures the board's read (`taskBoard`, what `task list` prints and `/board` shows every 3 s)
with --tasks tasks and --verdicts verdict and claim rows in one org, against the `conceptSearch`
list reads it is built from (the same pages of tasks and of verdict rows, read by a client).

Usage: python3 benches/board_bench.py [--bin PATH] [--tasks 1000] [--verdicts 10000] [--n 20]
The binary defaults to the release build at /work/target-release/release/metabob-mcp, else
target/release. Rows are written through the ledger's own concept_create_write (real rows, real
index). Prints a Markdown table for docs/benchmarks.md. Nothing here is asserted."""

import argparse, os, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import Client, Ledger, row

CANDIDATES = ["/work/target-release/release/metabob-mcp",
              os.path.join(HERE, "..", "target", "release", "metabob-mcp")]
PAGE = 1000  # conceptSearch's largest page


def header(fields):
    return "".join(f"{k}: {v}\n" for k, v in fields) + "\n"


def seed(c, tasks, verdicts):
    """`tasks` tasks of one repository; then `verdicts` rows spread over them: claims by ten
    cells, and every fifth task fixed with a commit."""
    repo = "example.com/fleet/app"
    ids = []
    for i in range(tasks):
        fid = f"agf_{i:016x}"
        _, v = c.ok({"type": "concept_create_write", "conceptData": {
            "shape": "code_finding", "source_type": "metabob_annotation",
            "summary": f"[MEDIUM][task] t{i}: bench task {i}",
            "content": header([("finding_ids", fid), ("repo", repo), ("files", "a.py"),
                               ("severity", "MEDIUM"), ("category", "task"),
                               ("status", "open"), ("recorded_by", "bench")])}})
        ids.append((fid, v.get("id") or v.get("concept_id") or ""))
    for j in range(verdicts):
        fid, concept = ids[j % tasks]
        fixed = j >= verdicts - tasks // 5 and (j % tasks) % 5 == 0
        fields = [("reviewed_by", f"cell-{j % 10}"), ("session", "bench"),
                  ("verdict", "fixed" if fixed else "claimed"), ("finding_ids", fid),
                  ("finding_concept", concept), ("repo", repo), ("files", "a.py"),
                  ("origin", "cell")]
        fields += [("fix", "commit " + f"{j:040x}")] if fixed else [("claim_minutes", "60")]
        c.ok({"type": "concept_create_write", "conceptData": {
            "shape": "finding_verdict", "source_type": "metabob_annotation",
            "summary": ("[verdict:fixed] " if fixed else "[claim] ") + f"bench task",
            "content": header(fields)}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=next((b for b in CANDIDATES if os.path.exists(b)), None))
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--verdicts", type=int, default=10000)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    with Ledger(args.bin, "mb-board-bench-") as ledger:
        c = Client(ledger.host, ledger.port, ledger.key, timeout=300)
        t = time.perf_counter()
        seed(c, args.tasks, args.verdicts)
        seeded = time.perf_counter() - t

        def search_pages(shape, rows):
            total = 0.0
            for off in range(0, rows, PAGE):
                dt, _ = c.ok({"type": "conceptSearch", "shape": shape,
                              "limit": PAGE, "offset": off})
                total += dt
            return total

        board, searches, answer = [], [], None
        for _ in range(args.n):
            dt, answer = c.ok({"type": "taskBoard"})
            board.append(dt)
            searches.append(search_pages("code_finding", args.tasks)
                            + search_pages("finding_verdict", args.verdicts))
        groups = {g: sum(len(r[g]) for r in answer["repositories"])
                  for g in ["open", "claimed", "pending", "closed", "withdrawn"]}
        print(f"binary: {os.path.realpath(args.bin)}")
        print(f"seeded {args.tasks} tasks and {args.verdicts} verdict rows in {seeded:.1f} s; "
              f"board groups {groups}, {len(answer['cells'])} cells, "
              f"truncated={answer['truncated']} verdicts_truncated={answer['verdicts_truncated']}")
        print("| read | n | median ms | p90 ms | min ms |")
        print("|---|---|---|---|---|")
        print(row(f"taskBoard ({args.tasks} tasks, {args.verdicts} verdict rows)", board, 1))
        print(row(f"the conceptSearch pages it reads ({-(-args.tasks // PAGE)} + "
                  f"{-(-args.verdicts // PAGE)} pages of {PAGE}), one client", searches, 1))


if __name__ == "__main__":
    main()
