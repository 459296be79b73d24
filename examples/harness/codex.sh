#!/bin/sh
# A cell's HARNESS that runs Codex (OpenAI's `codex` CLI) on the task, with `metabob-mcp serve`
# as its MCP server. What a harness gets and must leave is docs/harness.md.
#
#   HARNESS='sh /harness/codex.sh'          # common.sh must sit beside it
#
# It gives Codex a home of its own for the task, $TASK_DIR/codex-home (CODEX_HOME), whose
# config.toml is Codex's MCP config:
#   [mcp_servers.metabob]
#   command = "/…/metabob-mcp"
#   args = ["serve"]
#   required = true
#   [mcp_servers.metabob.env]
#   METABOB_API_KEY = "…"
# and runs, in the clone:
#   codex exec --sandbox workspace-write $CODEX_ARGS PROMPT
# where PROMPT is $TASK_DIR/context.md and an instruction to leave the fix uncommitted: Codex's
# workspace-write sandbox keeps .git read-only, so the recipe commits the agent's changes with
# the task's `Fixes-Finding: <task_id>` trailer (common.sh; commits the agent did make get the
# trailer too). A run that changed nothing fails in one line, so the cell gives the task back as
# failed.
#
# Environment, besides the cell's (TASK_DIR, WORK_DIR, METABOB_API_KEY, DISCOVERY_ENDPOINT):
#   CODEX_BIN        the agent's binary (default: codex); the tests put a stand-in here
#   CODEX_ARGS       more arguments for `codex exec`, split on spaces (e.g. "--model gpt-5-codex")
#   CODEX_HOME       where a saved `codex login` is (default ~/.codex): its auth.json is copied
#                    into the task's home; in CI give CODEX_API_KEY instead
#   CODEX_API_KEY    the agent's own credential, read by codex exec itself
#   METABOB_BIN      the binary the config names as the server (default: metabob-mcp, on PATH)
#   METABOB_CALL_LOG handed to the MCP server: a log of its tool calls, names and sizes only
#
# Exit: 0 with the fix committed; 1 and one line on stderr when the agent failed or changed
# nothing.
set -eu
RECIPE=codex.sh
. "$(dirname "$0")/common.sh"

codex_bin=${CODEX_BIN:-codex}
command -v "$codex_bin" >/dev/null 2>&1 \
    || fail "$codex_bin not found: install Codex (npm install -g @openai/codex) or set CODEX_BIN"

# A home of its own: the user's config.toml is left alone, no other MCP server is started, and
# the cell empties TASK_DIR (the key with it) once the task is done.
umask 077
home=$TASK_DIR/codex-home
mkdir -p "$home"
login=${CODEX_HOME:-${HOME:-/nonexistent}/.codex}/auth.json
[ ! -f "$login" ] || cp "$login" "$home/auth.json"
{
    printf '[mcp_servers.metabob]\ncommand = "%s"\nargs = ["serve"]\n' "$(quoted "$METABOB_MCP")"
    # Without its tools the run is not what the cell asked for: codex exec fails instead.
    printf 'required = true\n\n[mcp_servers.metabob.env]\n'
    # Codex starts a server with a short whitelist of the environment: the ledger's variables
    # go in here.
    server_env | while IFS='=' read -r name value; do
        printf '%s = "%s"\n' "$name" "$(quoted "$value")"
    done
} >"$home/config.toml"

rc=0
# shellcheck disable=SC2086 # CODEX_ARGS is split on purpose
CODEX_HOME=$home "$codex_bin" exec --sandbox workspace-write ${CODEX_ARGS:-} \
    "$(prompt "Leave your changes uncommitted (the sandbox keeps .git read-only): this harness commits them with the trailer Fixes-Finding: $TASK_ID.")" \
    || rc=$?
[ "$rc" = 0 ] || fail "$codex_bin exited $rc; the task goes back as failed"
finish
