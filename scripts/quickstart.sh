#!/usr/bin/env bash
# The whole loop on one machine, no Docker: starts the embedded ledger (its first start writes
# ~/.substrate/config.json when no config exists), makes a demo repository from examples/demo/
# with a bare file:// origin, records three tasks on it (the third waiting for the first), runs two cells
# (entrypoint/cell-entrypoint with examples/fleet/harness.sh as the harness, temporary task and
# work directories) until nothing is open, and prints the board: each task closed, its fix
# commit and the cell that closed it. The ledger keeps running in the foreground; Ctrl-C stops
# it.
#
# Arguments go to `ledger serve` (e.g. --listen 127.0.0.1:0, --data DIR).
# Environment:
#   METABOB_BIN      an existing metabob-mcp binary (default: build target/release/metabob-mcp)
#   QUICKSTART_EXIT  1: stop the ledger and exit 0 after printing the board (tests)
#   CELL_TIMEOUT     seconds the two cells may take together (default 120)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

if [ -n "${METABOB_BIN:-}" ]; then
    bin=$METABOB_BIN
else
    (cd "$repo" && cargo build --release --quiet)
    bin=$repo/target/release/metabob-mcp
fi
# The cells run `metabob-mcp` through this variable (entrypoint/cell-entrypoint).
export METABOB_BIN=$bin

# The ledger's data directory, as `ledger serve` will use it (the key below is made there).
data=$HOME/.substrate/ledger
prev=
for a in "$@"; do
    case "$a" in --data=*) data=${a#--data=} ;; esac
    [ "$prev" = --data ] && data=$a
    prev=$a
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/metabob-quickstart.XXXXXX")
ledger=
cells=()
key_id=
cleanup() {
    for c in "${cells[@]}"; do kill "$c" 2>/dev/null || true; done
    if [ -n "$key_id" ]; then
        "$bin" ledger key revoke "$key_id" --data "$data" 2>/dev/null || true
    fi
    if [ -n "$ledger" ]; then
        kill "$ledger" 2>/dev/null || true
        wait "$ledger" 2>/dev/null || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '\n== %s\n' "$*"; }
fail() {
    echo "quickstart: $*" >&2
    exit 1
}

# ---- the ledger -------------------------------------------------------------------------------
say "starting the embedded ledger"
"$bin" ledger serve --data "$data" "$@" >"$scratch/ledger.out" 2>"$scratch/ledger.err" &
ledger=$!
url=
for _ in $(seq 1 300); do
    url=$(grep -o 'http://[^ ]*' "$scratch/ledger.out" 2>/dev/null | head -n 1 || true)
    [ -n "$url" ] && break
    kill -0 "$ledger" 2>/dev/null || {
        cat "$scratch/ledger.err" >&2
        fail "the ledger exited (see above); is another ledger on its port? pass --listen 127.0.0.1:0"
    }
    sleep 0.1
done
[ -n "$url" ] || fail "the ledger printed no address within 30s; see $scratch/ledger.err"
cat "$scratch/ledger.out" "$scratch/ledger.err"

# A key of its own, given to every command below, so an existing config pointing at another
# substrate never receives the demo's tasks. Revoked on exit.
key_json=$("$bin" ledger key create --data "$data" --org default --scopes read,write \
    --label quickstart --json) || fail "could not create a key in $data"
json_str() { grep -o "\"$1\": \"[^\"]*\"" | head -n 1 | sed 's/.*: "\(.*\)"$/\1/'; }
key=$(printf '%s\n' "$key_json" | json_str key)
key_id=$(printf '%s\n' "$key_json" | json_str key_id)
unset METABOB_ENDPOINT SUBSTRATE_ENDPOINT SUBSTRATE_API_KEY IDENTITY_ENDPOINT
export METABOB_API_KEY=$key DISCOVERY_ENDPOINT=$url

# ---- the demo repository ----------------------------------------------------------------------
say "making the demo repository (examples/demo/) and its origin"
cp -R "$repo/examples/demo" "$scratch/demo"
git_q() { git -c user.name=quickstart -c user.email=quickstart@metabob.invalid "$@"; }
git_q -C "$scratch/demo" init -q -b main
git_q -C "$scratch/demo" add -A
git_q -C "$scratch/demo" commit -q -m "The demo project"
git clone -q --bare "$scratch/demo" "$scratch/demo.git"
origin=file://$scratch/demo.git
echo "origin: $origin"

# ---- three tasks ------------------------------------------------------------------------------
say "recording three tasks (the third waits for the first)"
# record FILE SUMMARY [finding record flags…]: prints the task's line; its id is left in $last_id.
record() {
    local file=$1 summary=$2
    shift 2
    "$bin" finding record --origin "$origin" --category task --severity HIGH \
        --file "$file" --summary "$summary" --details "ref: main" "$@" --json >"$scratch/record.json" \
        || fail "finding record failed for $file"
    last_id=$(grep -o '"agf_[^"]*"' "$scratch/record.json" | head -n 1 | tr -d '"')
    printf '%s  %s: %s%s\n' "$last_id" "$file" "$summary" "${2:+ (waits for $2)}"
}
record stats.py "average divides by len + 1 instead of len"
first=$last_id
record greet.py "greet says Helo instead of Hello"
record temperature.py "to_fahrenheit subtracts 32 instead of adding it" --blocked-by "$first"
dependent=$last_id
echo
echo "ready now (task list --ready): the third waits until the first is fixed"
"$bin" task list --ready --origin "$origin" || fail "task list --ready failed (exit $?)"

# ---- two cells --------------------------------------------------------------------------------
say "running two cells until nothing is open"
for n in 1 2; do
    mkdir -p "$scratch/cell-$n/task" "$scratch/cell-$n/work"
    ORIGIN=$origin HARNESS="sh '$repo/examples/fleet/harness.sh'" VESSEL_ID=cell-$n \
        TASK_DIR=$scratch/cell-$n/task WORK_DIR=$scratch/cell-$n/work RETRY_MAX=2 \
        sh "$repo/entrypoint/cell-entrypoint" >"$scratch/cell-$n.log" 2>&1 &
    cells+=($!)
done
deadline=$((SECONDS + ${CELL_TIMEOUT:-120}))
for n in 1 2; do
    pid=${cells[$((n - 1))]}
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && fail "cell-$n still running after ${CELL_TIMEOUT:-120}s"
    rc=0
    wait "$pid" || rc=$?
    sed "s/^/cell-$n | /" "$scratch/cell-$n.log"
    [ "$rc" = 0 ] || fail "cell-$n exited $rc (its log is above)"
done
cells=()

# ---- the board --------------------------------------------------------------------------------
say "the board"
"$bin" task list --origin "$origin" || fail "task list failed (exit $?)"
echo
echo "checked against the origin's git log (Fixes-Finding: trailers) and the cells' logs:"
closed=0
while IFS= read -r line; do
    id=$(printf '%s\n' "$line" | sed 's/.*: \(agf_[^:]*\): finding close.*/\1/')
    cell=${line%%.log:*}
    cell=${cell##*/}
    fix=$(git --git-dir="$scratch/demo.git" log main --format='%h %s' --grep="Fixes-Finding: $id" -n 1)
    echo "$id  closed by $cell  fix ${fix:-(not on main)}"
    closed=$((closed + 1))
done < <(grep -H 'finding close exit 0, outcome closed' "$scratch"/cell-*.log)
echo "$closed of 3 tasks closed"
[ "$closed" = 3 ] || fail "expected 3 closed tasks; the cells' logs are above"
fix_of() { git --git-dir="$scratch/demo.git" log main --format=%H --grep="Fixes-Finding: $1" -n 1; }
git --git-dir="$scratch/demo.git" merge-base --is-ancestor "$(fix_of "$first")" "$(fix_of "$dependent")" \
    || fail "$dependent was fixed before the task it waits for, $first"
echo "$dependent waited for $first: its fix was made on top of $first's"

echo
echo "board: $url/board"
if [ "${QUICKSTART_EXIT:-}" = 1 ]; then
    exit 0
fi
echo "ledger running (pid $ledger); Ctrl-C to stop"
wait "$ledger"
