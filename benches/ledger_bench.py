#!/usr/bin/env python3
"""Measures attach --check wall time against a local ledger, and the ledger's single-client
round trips for concept_create_write and conceptSearch (medians of many).

Usage: cargo build --release && python3 benches/ledger_bench.py [--n 500]
Prints a Markdown table for docs/benchmarks.md. Nothing here is asserted; it only measures."""

import argparse, http.client, json, os, statistics, subprocess, tempfile, time

BIN = os.path.join(os.path.dirname(__file__), "..", "target", "release", "metabob-mcp")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def row(name, xs):
    ms = [x * 1000 for x in xs]
    return f"| {name} | {len(ms)} | {statistics.median(ms):.2f} | {pct(ms, 0.9):.2f} | {min(ms):.2f} |"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--attach-n", type=int, default=30)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="mb-bench-")
    env = {"PATH": os.environ["PATH"], "HOME": home, "RUST_LOG": "error"}
    ledger = subprocess.Popen(
        [BIN, "ledger", "serve", "--data", os.path.join(home, "ledger"), "--listen", "127.0.0.1:0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = ledger.stdout.readline().split()[-1]
        host, port = url.removeprefix("http://").split(":")
        cfg = json.load(open(os.path.join(home, ".substrate", "config.json")))
        key = cfg["metabob"]["apiKey"]

        attach = []
        for _ in range(args.attach_n):
            t = time.perf_counter()
            subprocess.run([BIN, "attach", "--check"], env=env, check=True, stdout=subprocess.DEVNULL)
            attach.append(time.perf_counter() - t)

        conn = http.client.HTTPConnection(host, int(port))
        headers = {"authorization": f"ApiKey {key}", "content-type": "application/json"}

        def resolve(pointer):
            body = json.dumps({"pointer": pointer})
            t = time.perf_counter()
            conn.request("POST", "/resolve", body, headers)
            resp = conn.getresponse()
            data = resp.read()
            dt = time.perf_counter() - t
            assert resp.status < 300, (resp.status, data)
            return dt

        create = [resolve({"type": "concept_create_write", "conceptData": {
            "content": f"finding {i}: null check missing in handler {i % 37}",
            "summary": f"[HIGH][bug] h{i}.py: null check", "shape": "code_finding",
            "source_type": "metabob_annotation"}}) for i in range(args.n)]
        search_list = [resolve({"type": "conceptSearch", "shape": "code_finding", "limit": 300})
                       for _ in range(args.n)]
        search_query = [resolve({"type": "conceptSearch", "query": "null check handler", "limit": 10})
                        for _ in range(args.n)]
    finally:
        ledger.kill()
        ledger.wait()

    print("| measurement | runs | median ms | p90 ms | min ms |")
    print("|---|---|---|---|---|")
    print(row("`attach --check` wall time (process start to exit)", attach))
    print(row("`concept_create_write` round trip", create))
    print(row(f"`conceptSearch` list mode, limit 300, over {args.n} concepts", search_list))
    print(row(f"`conceptSearch` query mode, limit 10, over {args.n} concepts", search_query))


if __name__ == "__main__":
    main()
