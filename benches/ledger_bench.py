#!/usr/bin/env python3
"""Measures attach --check wall time against a local ledger, the ledger's single-client round
trips for concept_create_write and conceptSearch (medians of many), and another org's one-row
search while an attacker's searches run, against the same search with the ledger idle (same run).

Usage: cargo build --release && python3 benches/ledger_bench.py [--n 500]
Prints a Markdown table for docs/benchmarks.md. Nothing here is asserted; it only measures."""

import argparse, json, os, sqlite3, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Client, Ledger, row

BIN = os.path.join(os.path.dirname(__file__), "..", "target", "release", "metabob-mcp")
# The ledger's bounds on a search (SPEC.md, conceptSearch): the attack uses the most they allow.
MAX_QUERY_TERMS = 32
MAX_QUERY_BYTES = 1024


def create_key(bin_, data, org, scopes, env):
    out = subprocess.run([bin_, "ledger", "key", "create", "--data", data, "--org", org,
                          "--scopes", scopes, "--json"], env=env, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def seed(data, org_id, rows, content):
    """`rows` concepts in `org_id`, written straight into the file beside the running server (a
    server write per row would take minutes); each holds every attack term."""
    db = sqlite3.connect(os.path.join(data, "ledger.db"), timeout=60)
    db.execute(
        """WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
           INSERT INTO concepts (id, org_id, shape, source_type, summary, content, pointer,
                                 priority, created_at, updated_at)
           SELECT printf('concept_bench%011d', i), ?, 'bulk', 'memo', 'bulk row', ?,
                  '{"type":"bulk"}', 0.5, 1, 1 FROM n""", (rows, org_id, content))
    db.commit()
    db.close()


def attack_rows(args, host, port, data, env):
    """Another org's one-row search, idle and then while `threads` attacker connections search a
    large org back to back with the longest query the bounds allow (and one more sends the
    issue's 100,000-word query, which is refused). Returns the table rows."""
    attacker = create_key(args.bin, data, "attacker", "read", env)
    victim = create_key(args.bin, data, "victim", "read,write", env)
    terms = " ".join(f"term{i:02d}" for i in range(MAX_QUERY_TERMS))
    assert len(terms.encode()) <= MAX_QUERY_BYTES
    seed(data, attacker["org_id"], args.attack_rows, terms)
    v = Client(host, port, victim["key"])
    status, _, body = v.resolve({"type": "concept_create_write", "conceptData": {
        "content": "the victim's only row", "shape": "memo", "source_type": "memo"}})
    assert status == 201, body
    small = {"type": "conceptSearch", "query": "victim", "limit": 1}
    long_query = {"type": "conceptSearch", "query": terms, "limit": 10}
    huge_query = {"type": "conceptSearch", "query": " ".join(["lorem"] * 100_000), "limit": 10}

    def victim_samples():
        out = []
        for _ in range(args.victim_n):
            status, dt, body = v.resolve(small)
            assert status == 200, body
            out.append(dt)
        return out

    idle = victim_samples()
    rows = []
    for threads in args.attack_threads:
        stop = threading.Event()
        long_times, refused_times, statuses = [], [], {}
        lock = threading.Lock()

        def attack(pointer, times):
            a = Client(host, port, attacker["key"])
            while not stop.is_set():
                status, dt, _ = a.resolve(pointer)
                with lock:
                    times.append(dt)
                    statuses[status] = statuses.get(status, 0) + 1

        workers = [threading.Thread(target=attack, args=(long_query, long_times))
                   for _ in range(threads)]
        workers.append(threading.Thread(target=attack, args=(huge_query, refused_times)))
        for w in workers:
            w.start()
        time.sleep(1.0)  # every attacker is in flight before the first sample
        under = victim_samples()
        stop.set()
        for w in workers:
            w.join()
        rows.append(row(f"another org's one-row search during the attack, {threads} long-query "
                        f"connection(s) + 1 refused 100,000-word one (attacker statuses "
                        f"{dict(sorted(statuses.items()))})", under))
        rows.append(row(f"the attacker's longest allowed query ({MAX_QUERY_TERMS} words) over "
                        f"{args.attack_rows:,} rows, {threads} connection(s)", long_times))
        rows.append(row("the attacker's 100,000-word query (refused, 400)", refused_times))
    return [row("another org's one-row search, ledger idle (same run)", idle)] + rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--attach-n", type=int, default=30)
    ap.add_argument("--victim-n", type=int, default=200)
    ap.add_argument("--attack-rows", type=int, default=200_000)
    ap.add_argument("--attack-threads", type=int, nargs="+", default=[1, 8],
                    help="attacker connections sending the longest allowed query, one run each")
    ap.add_argument("--bin", default=BIN, help="the metabob-mcp binary (default: the release build)")
    args = ap.parse_args()
    with Ledger(args.bin, "mb-bench-") as ledger:
        host, port, env, data = ledger.host, ledger.port, ledger.env, ledger.data

        attach = []
        for _ in range(args.attach_n):
            t = time.perf_counter()
            subprocess.run([args.bin, "attach", "--check"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            attach.append(time.perf_counter() - t)

        c = Client(host, port, ledger.key)

        def resolve(pointer):
            status, dt, data = c.resolve(pointer)
            assert status < 300, (status, data)
            return dt

        create = [resolve({"type": "concept_create_write", "conceptData": {
            "content": f"finding {i}: null check missing in handler {i % 37}",
            "summary": f"[HIGH][bug] h{i}.py: null check", "shape": "code_finding",
            "source_type": "metabob_annotation"}}) for i in range(args.n)]
        search_list = [resolve({"type": "conceptSearch", "shape": "code_finding", "limit": 300})
                       for _ in range(args.n)]
        search_query = [resolve({"type": "conceptSearch", "query": "null check handler", "limit": 10})
                        for _ in range(args.n)]
        attack = attack_rows(args, host, port, data, env)

    print("| measurement | runs | median ms | p90 ms | min ms |")
    print("|---|---|---|---|---|")
    print(row("`attach --check` wall time (process start to exit)", attach))
    print(row("`concept_create_write` round trip", create))
    print(row(f"`conceptSearch` list mode, limit 300, over {args.n} concepts", search_list))
    print(row(f"`conceptSearch` query mode, limit 10, over {args.n} concepts", search_query))
    for line in attack:
        print(line)


if __name__ == "__main__":
    main()
