# Sourced by the agent recipes beside it (claude-code.sh, codex.sh); not a harness itself.
# RECIPE names the recipe in its one-line failures.

fail() {
    echo "$RECIPE: $*" >&2
    exit 1
}

[ -n "${TASK_DIR:-}" ] && [ -f "$TASK_DIR/task.json" ] \
    || fail "TASK_DIR/task.json is missing: run this as a cell's HARNESS (docs/harness.md)"
[ -f "$TASK_DIR/context.md" ] || fail "$TASK_DIR/context.md is missing"
cd "${WORK_DIR:-.}"

# task.json is read with a JSON parser, never with grep: its strings may hold anything JSON can
# escape. jq is in the cell image; python3 is on most hosts that run a cell without Docker.
task_field() {
    if command -v jq >/dev/null 2>&1; then
        jq -er ".$1" "$TASK_DIR/task.json"
    else
        python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
            "$TASK_DIR/task.json" "$1"
    fi
}
TASK_ID=$(task_field task_id) || fail "task.json names no task_id"
TASK_BASE=$(task_field base) || fail "task.json names no base commit"
TASK_SUMMARY=$(task_field summary) || TASK_SUMMARY="the task"

# The MCP config names the server by absolute path: the agent may start it with a PATH of its own.
METABOB_MCP=$(command -v "${METABOB_BIN:-metabob-mcp}") \
    || fail "${METABOB_BIN:-metabob-mcp} not found: install metabob-mcp, or set METABOB_BIN"

# A string as a JSON or TOML basic string's inside (both escape the same two characters).
quoted() {
    printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'
}

# The variables the MCP server reads to reach the cell's ledger, as NAME=VALUE lines, set ones
# only. An agent may start its servers with a bare environment (Codex passes a short whitelist),
# so the recipe hands them over in the config.
server_env() {
    for name in METABOB_API_KEY DISCOVERY_ENDPOINT METABOB_LEDGER METABOB_ENDPOINT \
        METABOB_CALL_LOG METABOB_NO_SYSTEM_CA METABOB_EXTRA_CA_CERTS NODE_EXTRA_CA_CERTS \
        HTTPS_PROXY HTTP_PROXY NO_PROXY; do
        eval "value=\${$name:-}"
        # shellcheck disable=SC2154 # set by the eval above
        [ -z "$value" ] || printf '%s=%s\n' "$name" "$value"
    done
}

# The agent's instructions: the task as the cell wrote it, then how to leave the fix. $1 says how
# the agent is to commit.
prompt() {
    cat "$TASK_DIR/context.md"
    cat <<EOF

---

You are in a git clone of the repository, checked out at the task's ref. Fix the task above.
The MCP server "metabob" knows this code base and the shared ledger: call init_workspace first,
then get_problems and analyze_impact on the files you are about to change.
$1
Do not push: the cell pushes and closes the task.
EOF
}

# Leaves the fix committed with the trailer `finding close` reads. Uncommitted changes are
# committed with it; commits that lack it get it on the last one; no change at all fails, and the
# cell gives the task back as failed.
finish() {
    if [ -n "$(git status --porcelain)" ]; then
        git add -A
        git commit -q -m "Fix: $TASK_SUMMARY" -m "Fixes-Finding: $TASK_ID" \
            || fail "could not commit the agent's changes"
    fi
    [ "$(git rev-list --count "$TASK_BASE..HEAD")" -gt 0 ] \
        || fail "the agent changed nothing; the task goes back as failed"
    if ! git log --format=%B "$TASK_BASE..HEAD" | grep -qx "Fixes-Finding: $TASK_ID"; then
        git commit -q --amend --no-edit --trailer "Fixes-Finding: $TASK_ID" \
            || fail "could not add the Fixes-Finding trailer to the agent's last commit"
    fi
    echo "$RECIPE: $(git rev-list --count "$TASK_BASE..HEAD") commit(s) for $TASK_ID" >&2
}
