#!/usr/bin/env python3
"""The MCP server's local tier against its baselines, side by side in one run.

Usage: benches/mcp_bench.py RELEASE_BINARY [INDEX_BENCH_JSON]

  1. indexing the Python standard library: our whole indexing (Index::run: scan, parse,
     components, edges) against tree-sitter parsing the same files alone, both from
     `cargo run --release --example index_bench` (pass its JSON output, or it is run here);
     and `tool call init_workspace` end to end, cold (no persisted index);
  2. a warm restart: `tool call analyze_impact` answered from the persisted index, against the
     cold `init_workspace` above;
  3. `predict_cochanges` over a generated history of 600 commits against
     `git log --name-only -n 500` on it;
  4. MCP process start to the initialize answer, and a tools/list round trip.

Medians; every process is started fresh. Prints one JSON object.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

from bench_common import history, start_serve

BIN = os.path.abspath(sys.argv[1])


def timed(cmd, env, cwd=None):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    return time.perf_counter() - t


def median_ms(f, n):
    return round(statistics.median(f() for _ in range(n)) * 1000, 1)


def mcp_latency(env, cwd):
    """(start -> initialize answered, tools/list round trip), seconds."""
    p, start = start_serve(BIN, env, cwd)
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    rounds = []
    for i in range(20):
        t = time.perf_counter()
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/list"}) + "\n")
        p.stdin.flush()
        p.stdout.readline()
        rounds.append(time.perf_counter() - t)
    p.stdin.close()
    p.wait()
    return start, statistics.median(rounds)


def main():
    out = {}
    stdlib = sysconfig.get_paths()["stdlib"]
    if len(sys.argv) > 2:
        idx = json.load(open(sys.argv[2]))
    else:
        r = subprocess.run(["cargo", "run", "-q", "--release", "--example", "index_bench", "--", stdlib],
                           check=True, capture_output=True, text=True)
        idx = json.loads(r.stdout)
    out["index_stdlib"] = idx

    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as tmp:
        cache = os.path.join(tmp, "cache")
        env = {"HOME": tmp, "PATH": os.environ["PATH"], "METABOB_CACHE_DIR": cache,
               "METABOB_NO_SYSTEM_CA": "1", "RUST_LOG": "error"}

        def cold():
            shutil.rmtree(cache, ignore_errors=True)
            return timed([BIN, "tool", "call", "init_workspace", "--args",
                          json.dumps({"workspace_path": stdlib})], env)

        def warm():
            return timed([BIN, "tool", "call", "analyze_impact", "--args",
                          json.dumps({"changed_files": ["json/decoder.py"]})],
                         dict(env, WORKSPACE_PATH=stdlib))

        cold_ms = median_ms(cold, 3)
        cold()  # leave a persisted index for the warm runs
        warm_ms = median_ms(warm, 5)
        out["init_workspace_cold_ms"] = cold_ms
        out["warm_restart_analyze_impact_ms"] = warm_ms
        out["warm_over_cold"] = round(warm_ms / cold_ms, 3)

        repo = os.path.join(tmp, "history")
        names = history(repo, 600)
        ours = median_ms(lambda: timed([BIN, "tool", "call", "predict_cochanges", "--args",
                                        json.dumps({"changed_files": [names[0]]})],
                                       dict(env, WORKSPACE_PATH=repo)), 5)
        git = median_ms(lambda: timed(["git", "log", "--name-only", "-n", "500"], env, repo), 5)
        out["predict_cochanges_ms"] = ours
        out["git_log_name_only_500_ms"] = git
        out["cochange_over_git_log"] = round(ours / git, 2)

        samples = [mcp_latency(env, tmp) for _ in range(10)]
        out["mcp_start_to_initialize_ms"] = round(statistics.median(s[0] for s in samples) * 1000, 1)
        out["tools_list_round_trip_ms"] = round(statistics.median(s[1] for s in samples) * 1000, 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
