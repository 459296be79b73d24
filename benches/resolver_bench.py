#!/usr/bin/env python3
"""The loopback resolver against stdio, and a goal's way onto the task board (issue 12).

Usage: cargo build --release && python3 benches/resolver_bench.py [--n 200] [--goals 10]

1. One `metabob-mcp serve` process: `get_metrics` as a JSON-RPC tools/call over its stdio,
   against the same tool as an `mcp:tool_call` impulse POSTed to its loopback resolver on one
   keep-alive connection; round trips, interleaved in one loop, medians.
2. `tool call run_goal_async` with `variables.repo` on a local bare repository, then
   `task pull --origin` of that repository: the dispatch, the pull, and dispatch start to a
   pulled task, each a fresh process, medians over --goals goals.

Prints Markdown rows for docs/benchmarks.md. Nothing is asserted."""

import argparse, http.client, json, os, statistics, subprocess, tempfile, time

BIN = os.path.join(os.path.dirname(__file__), "..", "target", "release", "metabob-mcp")


def med(xs):
    return statistics.median(xs) * 1000


def rpc(proc, msg):
    proc.stdin.write(json.dumps(msg) + "\n")
    proc.stdin.flush()
    if "id" not in msg:
        return None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("serve closed stdout")
        reply = json.loads(line)
        if reply.get("id") == msg["id"]:
            return reply


def resolver_rows(binary, env, ws, key, n):
    serve = subprocess.Popen([binary, "serve", "--resolver-port", "0"], env=env, cwd=ws, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        port = None
        while port is None:
            line = serve.stderr.readline()
            if not line:
                raise SystemExit("serve ended before announcing its resolver")
            if "loopback resolver on" in line:
                port = int(line.rsplit(":", 1)[1])
        rpc(serve, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
        rpc(serve, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"authorization": f"ApiKey {key}", "content-type": "application/json"}
        body = json.dumps({"pointer": {"type": "mcp:tool_call", "tool": "get_metrics", "input": {}}})
        stdio, loop = [], []
        for i in range(n):
            t = time.perf_counter()
            r = rpc(serve, {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                            "params": {"name": "get_metrics", "arguments": {}}})
            stdio.append(time.perf_counter() - t)
            assert not r["result"].get("isError"), r
            t = time.perf_counter()
            conn.request("POST", "/v2/impulses/resolve", body, headers)
            resp = conn.getresponse()
            data = json.loads(resp.read())
            loop.append(time.perf_counter() - t)
            assert resp.status == 200 and data["results"][0]["loaded"], data
        a, b = med(loop), med(stdio)
        return [f"| `mcp:tool_call get_metrics` over the loopback resolver (keep-alive) vs the same "
                f"`tools/call` over stdio, one `serve` process, {n} each | {a:.2f} ms | {b:.2f} ms | {a / b:.2f} |"]
    finally:
        serve.kill()
        serve.wait()


def goal_rows(binary, env, root, goals):
    seed = os.path.join(root, "seed")
    subprocess.run(["git", "init", "-q", "-b", "main", seed], check=True)
    with open(os.path.join(seed, "a.py"), "w") as f:
        f.write("x = 1\n")
    git = ["git", "-C", seed, "-c", "user.name=b", "-c", "user.email=b@x"]
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "seed"], check=True)
    bare = os.path.join(root, "app.git")
    subprocess.run(["git", "clone", "-q", "--bare", seed, bare], check=True)
    origin = f"file://{bare}"
    dispatch, pull, total = [], [], []
    for i in range(goals):
        args = {"goal": f"goal {i}", "variables": {"repo": origin, "files": ["a.py"], "ref": "main"}}
        t0 = time.perf_counter()
        out = subprocess.run([binary, "tool", "call", "run_goal_async", "--args", json.dumps(args)],
                             env=env, cwd=root, capture_output=True, text=True)
        t1 = time.perf_counter()
        assert out.returncode == 0, out
        cell = os.path.join(root, f"cell{i}")
        out = subprocess.run([binary, "task", "pull", "--origin", origin, "--task-dir", f"{cell}/task",
                              "--work-dir", f"{cell}/work", "--json"], env=env, cwd=root,
                             capture_output=True, text=True)
        t2 = time.perf_counter()
        assert out.returncode == 0, out
        dispatch.append(t1 - t0)
        pull.append(t2 - t1)
        total.append(t2 - t0)
    return [f"| `tool call run_goal_async` (fresh process) | {med(dispatch):.1f} ms | | |",
            f"| `task pull` of the task it became (fresh process, claim and clone of a one-file repository) | {med(pull):.1f} ms | | |",
            f"| dispatch start to a pulled task, {goals} goals | {med(total):.1f} ms | | |"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--goals", type=int, default=10)
    ap.add_argument("--bin", default=BIN)
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    root = tempfile.mkdtemp(prefix="mb-resolver-bench-")
    # HOME apart from the repositories: the outgoing guard refuses a path under HOME in an acted-on
    # field such as variables.repo.
    home = os.path.join(root, "home")
    os.makedirs(home)
    env = {"PATH": os.environ["PATH"], "HOME": home, "RUST_LOG": "warn", "VESSEL_ID": "bench",
           "GIT_CONFIG_GLOBAL": "/dev/null"}
    ws = os.path.join(root, "ws")
    os.makedirs(ws)
    ledger = subprocess.Popen([binary, "ledger", "serve", "--data", os.path.join(root, "ledger"),
                               "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        ledger.stdout.readline()
        key = json.load(open(os.path.join(home, ".substrate", "config.json")))["metabob"]["apiKey"]
        rows = resolver_rows(binary, env, ws, key, args.n) + goal_rows(binary, env, root, args.goals)
    finally:
        ledger.kill()
        ledger.wait()
    print("| measurement | ours | baseline | ratio |")
    print("|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
