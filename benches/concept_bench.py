#!/usr/bin/env python3
"""concept_search in query mode through `metabob-mcp tool call` against the same conceptSearch
sent straight to the ledger with curl, side by side in one run (issue 11).

Usage: cargo build --release && python3 benches/concept_bench.py [--n 30] [--concepts 500]

Both sides are a fresh process per search against one `ledger serve` on loopback holding
`--concepts` concepts: `tool call` pays process start, the attachment (bootstrap, identity, org
check), the schema check, the outgoing guard and the rendering; curl pays its start and one
request. Medians; prints a Markdown table for docs/benchmarks.md. Nothing is asserted."""

import argparse, json, os, statistics, subprocess, tempfile, time

BIN = os.path.join(os.path.dirname(__file__), "..", "target", "release", "metabob-mcp")
QUERY = "null check handler"


def timed(cmd, env, cwd=None):
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t, out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--concepts", type=int, default=500)
    ap.add_argument("--bin", default=BIN, help="the metabob-mcp binary (default: the release build)")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="mb-concept-bench-")
    env = {"PATH": os.environ["PATH"], "HOME": home, "RUST_LOG": "error"}
    data = os.path.join(home, "ledger")
    ws = os.path.join(home, "ws")
    os.makedirs(ws)
    ledger = subprocess.Popen(
        [args.bin, "ledger", "serve", "--data", data, "--listen", "127.0.0.1:0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = ledger.stdout.readline().split()[-1]
        key = json.load(open(os.path.join(home, ".substrate", "config.json")))["metabob"]["apiKey"]
        curl = ["curl", "-sS", "--fail", "-X", "POST", f"{url}/resolve",
                "-H", f"authorization: ApiKey {key}", "-H", "content-type: application/json"]
        for i in range(args.concepts):
            pointer = {"type": "concept_create_write", "conceptData": {
                "content": f"finding {i}: null check missing in handler {i % 37}\n" + "detail line\n" * 20,
                "summary": f"[HIGH][bug] h{i}.py: null check", "shape": "code_finding",
                "source_type": "metabob_annotation"}}
            subprocess.run(curl + ["-d", json.dumps({"pointer": pointer})], check=True,
                           stdout=subprocess.DEVNULL)
        search = {"pointer": {"type": "conceptSearch", "query": QUERY, "limit": 10}}
        ours, theirs = [], []
        for _ in range(args.n):
            dt, out = timed([args.bin, "tool", "call", "concept_search", "--args",
                             json.dumps({"query": QUERY, "limit": 10})], env, cwd=ws)
            assert "concept_" in out, out
            ours.append(dt)
            dt, out = timed(curl + ["-d", json.dumps(search)], env)
            assert len(json.loads(out)["concepts"]) == 10, out
            theirs.append(dt)
    finally:
        ledger.kill()
        ledger.wait()
    a = statistics.median(ours) * 1000
    b = statistics.median(theirs) * 1000
    print("| measurement | ours (median ms) | baseline (median ms) | ratio |")
    print("|---|---|---|---|")
    print(f"| `tool call concept_search` query mode (limit 10, {args.concepts} concepts, fresh "
          f"process, {args.n} runs) vs the same `conceptSearch` sent with curl | {a:.1f} | {b:.1f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
