#!/usr/bin/env python3
"""The cell's own reads against their git floors, and against a baseline build, in one run.

Usage: benches/cell_reads_bench.py OURS_BINARY [--baseline BASELINE_BINARY] [--runs 11]

  1. `tool call predict_cochanges` over a generated 5,000-commit history, a fresh process
     each time, with an empty cache and with the cache an earlier process left, against
     `git log --name-only -n 500` on the same repository; and the same question to a running
     `serve`, as the agent asks it;
  2. the persisted code index of the Python standard library: its size on disk, and
     `tool call analyze_impact` answered from it (a warm restart);
  3. `metabob-mcp serve` start to the initialize answer;
  4. `finding close` of 20 findings in the worst case (every one of 50,000 commits newer than
     the findings) against one `git log --format=%B` over the same history (`--close`). Each
     binary closes on its own copy of the same ledger, taken while it was stopped.

Each measurement alternates ours, the baseline build and git, run by run; medians in ms. Prints
a JSON object. Nothing is asserted.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cell_bench  # noqa: E402  (history_stream and record)
from bench_common import history, start_serve  # noqa: E402


def timed(cmd, env, cwd=None):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    return time.perf_counter() - t


def start_to_initialize(binary, env, cwd):
    p, dt = start_serve(binary, env, cwd)
    p.stdin.close()
    p.wait()
    return dt


class Ledger:
    """`ledger serve` on a data directory, stopped with `stop`; restartable on a copy."""

    def __init__(self, binary, data, env):
        self.proc = subprocess.Popen([binary, "ledger", "serve", "--data", data, "--listen", "127.0.0.1:0"],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.proc.stdout.readline().split()[-1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def close_worst_case(bins, base, tmp, runs, n=50_000):
    """{name: median ms} of `finding close` in the worst case, and git log's."""
    times = {name: [] for name in bins}
    times["git_log_format_B"] = []
    first = next(iter(bins.values()))
    for rep in range(runs):
        root = os.path.join(tmp, f"close-{rep}")
        data = os.path.join(root, "ledger")
        os.makedirs(root)
        ledger = Ledger(first, data, base)
        key = json.loads(subprocess.run([first, "ledger", "key", "create", "--data", data, "--scopes",
                                         "read,write", "--json"], env=base, check=True,
                                        capture_output=True, text=True).stdout)["key"]
        env = dict(base, METABOB_API_KEY=key, DISCOVERY_ENDPOINT=ledger.url)
        repo = os.path.join(root, "hist")
        subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True, env=base)
        cell_bench.BIN = first
        fids = [cell_bench.record(env, "file://" + repo, f"finding {k} of the close bench",
                                  category="bug", file=f"f{k}.txt") for k in range(20)]
        ledger.stop()
        subprocess.run(["git", "-C", repo, "fast-import", "--quiet"], check=True, env=base, text=True,
                       input=cell_bench.history_stream(n, fids, n))
        subprocess.run(["git", "-C", repo, "gc", "-q"], check=True, env=base)
        work = os.path.join(root, "work")
        subprocess.run(["git", "clone", "-q", "file://" + repo, work], check=True, env=base)
        shas = subprocess.run(["git", "-C", work, "log", "--format=%H", "--grep=^Fixes-Finding: agf_", "main"],
                              check=True, env=base, capture_output=True, text=True).stdout.split()
        commits = os.path.join(root, "commits")
        with open(commits, "w") as f:
            f.write("\n".join(shas) + "\n")
        for name, binary in bins.items():
            copy = os.path.join(root, f"ledger-{name}")
            shutil.copytree(data, copy)
            ledger = Ledger(binary, copy, base)
            t = time.perf_counter()
            out = subprocess.run([binary, "finding", "close", "--commits-from", commits, "--work-dir", work,
                                  "--json"], env=dict(env, DISCOVERY_ENDPOINT=ledger.url),
                                 capture_output=True, text=True)
            times[name].append(time.perf_counter() - t)
            ledger.stop()
            closed = out.returncode == 0 and sum(
                1 for r in json.loads(out.stdout)["findings"] if r["outcome"] == "closed")
            if closed != 20:
                raise SystemExit(f"{name}: finding close closed {closed} of 20: {out.stderr[-2000:]}")
        times["git_log_format_B"].append(timed(["git", "-C", work, "log", "--format=%B", "origin/main"], base))
    return {name: round(statistics.median(xs) * 1000, 1) for name, xs in times.items()}


def in_serve(bins, env, repo, arguments, runs):
    """{name: median ms} of a `predict_cochanges` round trip to a running `serve`, as the agent
    makes it: each binary's server started once (its first call left out), calls alternating."""
    procs = {}
    for name, binary in bins.items():
        p, _ = start_serve(binary, dict(env[name], WORKSPACE_PATH=repo), repo)
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        procs[name] = p
    ids = iter(range(2, 1 << 30))

    def call(p):
        i = next(ids)
        t = time.perf_counter()
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
            "name": "predict_cochanges", "arguments": arguments}}) + "\n")
        p.stdin.flush()
        while True:
            reply = json.loads(p.stdout.readline())
            if reply.get("id") == i:
                break
        dt = time.perf_counter() - t
        if reply["result"].get("isError"):
            raise SystemExit(f"predict_cochanges in serve: {reply}")
        return dt

    for p in procs.values():
        call(p)
    got = alternate(runs, {name: (lambda p=p: call(p)) for name, p in procs.items()})
    for p in procs.values():
        p.stdin.close()
        p.wait()
    return got


def alternate(runs, sides):
    """{name: median ms}, the sides run one after another in each round."""
    got = {name: [] for name in sides}
    for _ in range(runs):
        for name, f in sides.items():
            got[name].append(f())
    return {name: round(statistics.median(xs) * 1000, 2) for name, xs in got.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("--baseline")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--commits", type=int, default=5000)
    ap.add_argument("--close", type=int, default=0, help="runs of the finding close row (0: skip)")
    a = ap.parse_args()
    bins = {"ours": os.path.abspath(a.ours)}
    if a.baseline:
        bins["baseline"] = os.path.abspath(a.baseline)
    out = {}
    with tempfile.TemporaryDirectory(prefix="cell-reads-bench-") as tmp:
        base = {"HOME": tmp, "PATH": os.environ["PATH"], "METABOB_NO_SYSTEM_CA": "1",
                "RUST_LOG": "error", "GIT_CONFIG_NOSYSTEM": "1"}
        caches = {name: os.path.join(tmp, f"cache-{name}") for name in bins}
        env = {name: dict(base, METABOB_CACHE_DIR=caches[name]) for name in bins}

        repo = os.path.join(tmp, "history")
        names = history(repo, a.commits)
        args = json.dumps({"changed_files": [names[5]]})

        def cochange(name, cold):
            def run():
                if cold:
                    shutil.rmtree(caches[name], ignore_errors=True)
                return timed([bins[name], "tool", "call", "predict_cochanges", "--args", args],
                             dict(env[name], WORKSPACE_PATH=repo))
            return run

        # The answers must agree before any time is worth reading.
        answers = {name: subprocess.run([b, "tool", "call", "predict_cochanges", "--args", args],
                                        env=dict(env[name], WORKSPACE_PATH=repo), check=True,
                                        capture_output=True, text=True).stdout
                   for name, b in bins.items()}
        if len(set(answers.values())) != 1:
            raise SystemExit(f"predict_cochanges answers differ: {answers}")
        git_log = lambda: timed(["git", "log", "--name-only", "-n", "500"], base, repo)
        sides = {"git_log_name_only_500": git_log}
        sides.update({f"{name}_cold": cochange(name, True) for name in bins})
        out["cochange_cold_ms"] = alternate(a.runs, sides)
        sides = {"git_log_name_only_500": git_log}
        sides.update({f"{name}_warm": cochange(name, False) for name in bins})
        out["cochange_warm_ms"] = alternate(a.runs, sides)

        out["cochange_in_serve_ms"] = in_serve(bins, env, repo, json.loads(args), a.runs * 3)

        stdlib = sysconfig.get_paths()["stdlib"]
        sizes = {}
        for name, b in bins.items():
            subprocess.run([b, "tool", "call", "init_workspace", "--args",
                            json.dumps({"workspace_path": stdlib})], env=env[name], check=True,
                           stdout=subprocess.DEVNULL)
            idx = os.path.join(caches[name], "index")
            sizes[name] = sum(os.path.getsize(os.path.join(idx, f)) for f in os.listdir(idx))
        out["code_index_bytes"] = sizes

        def warm(name):
            return lambda: timed([bins[name], "tool", "call", "analyze_impact", "--args",
                                  json.dumps({"changed_files": ["json/decoder.py"]})],
                                 dict(env[name], WORKSPACE_PATH=stdlib))
        out["analyze_impact_warm_ms"] = alternate(a.runs, {name: warm(name) for name in bins})
        if a.close:
            out["finding_close_worst_ms"] = close_worst_case(bins, base, tmp, a.close)
        out["serve_start_to_initialize_ms"] = alternate(
            a.runs * 3, {name: (lambda b=b, name=name: start_to_initialize(b, env[name], tmp))
                         for name, b in bins.items()})
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
