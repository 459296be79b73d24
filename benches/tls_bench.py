#!/usr/bin/env python3
"""The ledger over TLS against plain HTTP, in one run: `attach --check` (a process that attaches:
bootstrap, org check, one read; each a new connection, so TLS handshakes included), a keyed
`taskBoard` round trip on a kept-alive connection (warm), and the same with a new connection per
request (cold). One ledger of each kind, same machine, same binary.

Usage: cargo build --release && python3 benches/tls_bench.py [--n 2000]
Prints a Markdown table for docs/benchmarks.md. Nothing here is asserted; it only measures."""

import argparse, os, ssl, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Client, Ledger, row

BIN = os.path.join(os.path.dirname(__file__), "..", "target", "release", "metabob-mcp")
BOARD = {"type": "taskBoard"}


def pki(d):
    """A CA and a leaf for 127.0.0.1 (P-256, as the tests' and the fleet's), in `d`."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=bench CA")
    run("req", "-new", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=ledger")
    with open(os.path.join(d, "leaf.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext")


def attach(bin_, ledger, env, n):
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([bin_, "attach", "--check"], env={**ledger.env, **env}, check=True,
                       capture_output=True)
        xs.append(time.perf_counter() - t)
    return xs


def warm(ledger, n, tls):
    c = Client(ledger.host, ledger.port, ledger.key, tls=tls)
    for _ in range(50):
        c.ok(BOARD)
    return [c.ok(BOARD)[0] for _ in range(n)]


def cold(ledger, n, tls):
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        c = Client(ledger.host, ledger.port, ledger.key, tls=tls)
        c.ok(BOARD)
        c.conn.close()
        xs.append(time.perf_counter() - t)
    return xs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--attach-n", type=int, default=30)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="mb-tls-bench-")
    pki(d)
    ca = os.path.join(d, "ca.pem")
    tls_ctx = ssl.create_default_context(cafile=ca)
    trust = {"METABOB_EXTRA_CA_CERTS": ca, "METABOB_NO_SYSTEM_CA": "1"}
    flags = ["--tls-cert", os.path.join(d, "leaf.pem"), "--tls-key", os.path.join(d, "leaf.key")]
    with Ledger(args.bin, "mb-plain-") as plain, Ledger(args.bin, "mb-tls-", flags, trust) as tls:
        assert tls.url.startswith("https://"), tls.url
        rows = []
        results = {}
        for name, f in [
            ("attach --check (new process)", lambda l, t, e: attach(args.bin, l, e, args.attach_n)),
            ("keyed taskBoard, kept-alive connection", lambda l, t, e: warm(l, args.n, t)),
            ("keyed taskBoard, new connection each", lambda l, t, e: cold(l, args.n // 4, t)),
        ]:
            # Interleaved halves, so drift on the machine touches both sides alike.
            p1 = f(plain, None, {})
            t1 = f(tls, tls_ctx, trust)
            p2 = f(plain, None, {})
            t2 = f(tls, tls_ctx, trust)
            xp, xt = p1 + p2, t1 + t2
            results[name] = statistics.median(xt) / statistics.median(xp)
            rows.append(row(f"{name}: plain HTTP", xp))
            rows.append(row(f"{name}: TLS", xt))
    print("| measure | runs | median ms | p90 ms | min ms |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    for name, r in results.items():
        print(f"- {name}: TLS / plain = {r:.2f}x")


if __name__ == "__main__":
    main()
