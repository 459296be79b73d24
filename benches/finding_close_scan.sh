#!/usr/bin/env bash
# finding close scans the target's whole history for "Fixes-Finding: <id>" lines. This bench
# builds a 50,000-commit linear history with git fast-import (each commit touching a file, 20
# of them carrying a Fixes-Finding line in the body) and times the scan two ways:
#   (a) git log --format=%B <tip>        (the CLI, for reference)
#   (b) examples/scan_history            (Repo::history through gix, what the binary does)
# Uses hyperfine when installed, else a python timer (best of 5). Prints the ratio b/a.
set -euo pipefail
N=${N:-50000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/finding-close-scan.XXXXXX")
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

repo="$work/repo"
git init -q -b main "$repo"
python3 - "$N" > "$work/stream" <<'PY'
import sys
n = int(sys.argv[1])
marks = set(range(n // 21, n, n // 21))
ids = []
out = sys.stdout
t = 1_600_000_000
for i in range(1, n + 1):
    body = f"commit {i}\n\nrefactor step {i}\n"
    if i in marks and len(ids) < 20:
        fid = f"agf_{i:08x}"
        ids.append(fid)
        body += f"\nFixes-Finding: {fid}\n"
    data = f"line {i}\n"
    out.write("commit refs/heads/main\n")
    out.write(f"mark :{i}\n")
    out.write(f"author Bench <bench@example.invalid> {t + i} +0000\n")
    out.write(f"committer Bench <bench@example.invalid> {t + i} +0000\n")
    out.write(f"data {len(body.encode())}\n{body}")
    if i > 1:
        out.write(f"from :{i-1}\n")
    out.write(f"M 100644 inline f{i % 100}.txt\ndata {len(data.encode())}\n{data}\n")
PY
ids=$(python3 - "$N" <<'PY'
import sys
n = int(sys.argv[1]); marks = sorted(range(n // 21, n, n // 21))[:20]
print(" ".join(f"agf_{i:08x}" for i in marks))
PY
)
git -C "$repo" fast-import --quiet < "$work/stream"
git -C "$repo" gc -q
echo "history: $(git -C "$repo" rev-list --count main) commits; ids: $(echo $ids | wc -w)"

# PROFILE=dev reuses the test build (dependencies at opt-level 1); the default is release.
PROFILE=${PROFILE:-release}
(cd "$root" && cargo build -q --profile "$PROFILE" --example scan_history)
dir=$PROFILE; [ "$PROFILE" = dev ] && dir=debug
scan="$CARGO_TARGET_DIR/$dir/examples/scan_history"
"$scan" "$repo" main $ids
echo "git log finds: $(git -C "$repo" log --format=%B main | grep -c '^Fixes-Finding: agf_')"

a="git -C $repo log --format=%B main"
b="$scan $repo main $ids"
if command -v hyperfine >/dev/null; then
  hyperfine -N --warmup 1 --runs 5 --export-json "$work/h.json" "$a" "$b"
  python3 - "$work/h.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
a, b = r[0]["mean"], r[1]["mean"]
print(f"(a) git log: {a*1000:.0f} ms  (b) Repo::history: {b*1000:.0f} ms  ratio b/a: {b/a:.2f}")
PY
else
  python3 - "$a" "$b" <<'PY'
import shlex, subprocess, sys, time
def best(cmd):
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run(shlex.split(cmd), stdout=subprocess.DEVNULL, check=True)
        ts.append(time.perf_counter() - t)
    return min(ts)
a, b = best(sys.argv[1]), best(sys.argv[2])
print(f"(a) git log: {a*1000:.0f} ms  (b) Repo::history: {b*1000:.0f} ms  ratio b/a: {b/a:.2f}")
PY
fi
