#!/usr/bin/env python3
"""Side-by-side benchmarks for the cell lifecycle, each ratio measured in one run:

1. `task pull` wall time vs a plain `git clone --branch main` of the same origin (target <= 1.10x).
   The origin is a copy of this machine's Python standard library (about 2,000 files) in a bare
   repository served over file://.
2. `finding close` for 20 findings on a generated 50,000-commit target history vs one
   `git log --format=%B <target>` pass over it (target <= 1.0x), twice: with the usual shape
   (the findings are recent; the fixes are among the newest 1,000 commits) and the worst case
   (every commit is newer than the findings, so the whole history must be read).

Usage: cargo build --release && python3 benches/cell_bench.py [--pulls 10] [--reps 3]
Prints a Markdown table. Nothing is asserted."""

import argparse, json, os, shutil, statistics, subprocess, sys, sysconfig, tempfile, time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "metabob-mcp")


def run(cmd, env, cwd=None, check=True, quiet=True):
    return subprocess.run(cmd, env=env, cwd=cwd, check=check, text=True,
                          stdout=subprocess.PIPE if quiet else None, stderr=subprocess.PIPE)


def timed(cmd, env, cwd=None, ok=(0,)):
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if p.returncode not in ok:
        sys.exit(f"{cmd[:3]} exited {p.returncode}: {p.stderr.strip()}")
    return dt, p.stdout


class Ledger:
    def __init__(self, home, env):
        data = tempfile.mkdtemp(dir=home, prefix="ledger-")
        self.proc = subprocess.Popen([BIN, "ledger", "serve", "--data", data, "--listen", "127.0.0.1:0"],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.proc.stdout.readline().split()[-1]
        out = run([BIN, "ledger", "key", "create", "--data", data, "--scopes", "read,write", "--json"], env).stdout
        self.key = json.loads(out)["key"]

    def env(self, base):
        return dict(base, METABOB_API_KEY=self.key, DISCOVERY_ENDPOINT=self.url)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def git(env, *args, cwd=None):
    return run(["git", *args], env, cwd=cwd).stdout.strip()


def record(env, origin, summary, category="task", file="a.py"):
    out = run([BIN, "finding", "record", "--origin", origin, "--file", file, "--summary", summary,
               "--severity", "HIGH", "--category", category, "--json", "--force"], env).stdout
    return json.loads(out)["finding_ids"][0]


def bench_pull(base, home, pulls):
    src = sysconfig.get_paths()["stdlib"]
    seed = os.path.join(home, "seed")
    shutil.copytree(src, seed, ignore=shutil.ignore_patterns("__pycache__", "site-packages", "test", "tests"))
    git(base, "init", "-q", "-b", "main", cwd=seed)
    git(base, "add", "-A", cwd=seed)
    git(base, "commit", "-q", "-m", "stdlib", cwd=seed)
    bare = os.path.join(home, "stdlib.git")
    git(base, "clone", "-q", "--bare", seed, bare)
    origin = "file://" + bare
    files = int(git(base, "ls-tree", "-r", "--name-only", "main", cwd=bare).count("\n")) + 1

    ledger = Ledger(home, base)
    env = ledger.env(base)
    for i in range(pulls):
        record(env, origin, f"bench task number {i} of the pull series", file=f"f{i}.py")
    pull_t, clone_t = [], []
    for i in range(pulls):
        d = tempfile.mkdtemp(dir=home, prefix="cell-")
        dt, _ = timed([BIN, "task", "pull", "--origin", origin, "--task-dir", os.path.join(d, "task"),
                       "--work-dir", os.path.join(d, "work"), "--json"], env)
        pull_t.append(dt)
        dt, _ = timed(["git", "clone", "-q", "--branch", "main", origin, os.path.join(d, "plain")], base)
        clone_t.append(dt)
    ledger.stop()
    return files, pull_t, clone_t


def history_stream(n, fixes, recent):
    """fast-import stream: n commits on main. The newest `recent` commits are dated after the
    findings and carry the fixes, evenly spaced; the older ones are a commit every ten minutes
    before them, ending two days before the findings were recorded."""
    now = int(time.time())
    old = n - recent
    first = now - 2 * 86400 - old * 600
    marks = {old + recent // (len(fixes) + 1) * (k + 1): fid for k, fid in enumerate(fixes)}
    out = []
    for i in range(1, n + 1):
        t = first + i * 600 if i <= old else now + (i - old)
        body = f"commit {i}\n\nrefactor step {i}\n"
        if i in marks:
            body += f"\nFixes-Finding: {marks[i]}\n"
        data = f"line {i}\n"
        out.append(f"commit refs/heads/main\nmark :{i}\n"
                   f"author Bench <b@example.invalid> {t} +0000\ncommitter Bench <b@example.invalid> {t} +0000\n"
                   f"data {len(body.encode())}\n{body}")
        if i > 1:
            out.append(f"from :{i - 1}\n")
        out.append(f"M 100644 inline f{i % 100}.txt\ndata {len(data.encode())}\n{data}\n")
    return "".join(out)


def bench_close(base, home, reps, recent, n=50_000):
    close_t, log_t = [], []
    for rep in range(reps):
        ledger = Ledger(home, base)
        env = ledger.env(base)
        repo = os.path.join(home, f"hist{recent}-{rep}")
        git(base, "init", "-q", "-b", "main", repo)
        origin = "file://" + repo
        # Findings are recorded first (dated before the fixes), their ids then land in history.
        fids = [record(env, origin, f"finding {k} of the close bench", category="bug", file=f"f{k}.txt")
                for k in range(20)]
        subprocess.run(["git", "-C", repo, "fast-import", "--quiet"], input=history_stream(n, fids, recent),
                       text=True, env=base, check=True)
        git(base, "-C", repo, "gc", "-q")
        work = os.path.join(home, f"work{recent}-{rep}")
        git(base, "clone", "-q", origin, work)
        shas = git(base, "-C", work, "log", "--format=%H", "--grep=^Fixes-Finding: agf_", "main").split()
        commits = os.path.join(home, f"commits{recent}-{rep}")
        with open(commits, "w") as f:
            f.write("\n".join(shas) + "\n")
        dt, out = timed([BIN, "finding", "close", "--commits-from", commits, "--work-dir", work, "--json"], env)
        closed = sum(1 for r in json.loads(out)["findings"] if r["outcome"] == "closed")
        if closed != 20:
            sys.exit(f"finding close closed {closed} of 20: {out[:2000]}")
        close_t.append(dt)
        dt, _ = timed(["git", "-C", work, "log", "--format=%B", "origin/main"], base)
        log_t.append(dt)
        ledger.stop()
    return close_t, log_t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pulls", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="mb-cell-bench-")
    base = {"PATH": os.environ["PATH"], "HOME": home, "RUST_LOG": "error", "METABOB_NO_SYSTEM_CA": "1",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
            "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    try:
        files, pull_t, clone_t = bench_pull(base, home, a.pulls)
        typical = bench_close(base, home, a.reps, recent=1_000)
        worst = bench_close(base, home, a.reps, recent=50_000)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    med = lambda xs: statistics.median(xs) * 1000
    print("| measurement | runs | ours median ms | baseline median ms | ratio |")
    print("|---|---|---|---|---|")
    print(f"| `task pull` vs `git clone --branch main` ({files} files, file://) | {a.pulls} | "
          f"{med(pull_t):.0f} | {med(clone_t):.0f} | {med(pull_t) / med(clone_t):.2f} |")
    for label, (close_t, log_t) in [("1,000 newer than the findings", typical),
                                     ("all 50,000 newer than the findings", worst)]:
        print(f"| `finding close`, 20 findings, 50,000 commits ({label}) vs `git log --format=%B` | "
              f"{a.reps} | {med(close_t):.0f} | {med(log_t):.0f} | {med(close_t) / med(log_t):.2f} |")


if __name__ == "__main__":
    main()
