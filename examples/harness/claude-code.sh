#!/bin/sh
# A cell's HARNESS that runs Claude Code (Anthropic's `claude` CLI) on the task, with
# `metabob-mcp serve` as its MCP server. What a harness gets and must leave is docs/harness.md.
#
#   HARNESS='sh /harness/claude-code.sh'    # common.sh must sit beside it
#
# It writes an MCP config, $TASK_DIR/claude-mcp.json, in Claude Code's format:
#   {"mcpServers": {"metabob": {"command": "/…/metabob-mcp", "args": ["serve"], "env": {…}}}}
# and runs, in the clone:
#   claude --mcp-config FILE --strict-mcp-config --permission-mode acceptEdits \
#       --allowedTools "mcp__metabob,Bash(git …)…" $CLAUDE_ARGS -p PROMPT
# where PROMPT is $TASK_DIR/context.md and an instruction to commit with the task's
# `Fixes-Finding: <task_id>` trailer. Afterwards the fix is left committed with that trailer
# whatever the agent did (common.sh: uncommitted changes are committed, a commit without the
# trailer gets it), and a run that changed nothing fails in one line, so the cell gives the task
# back as failed.
#
# Environment, besides the cell's (TASK_DIR, WORK_DIR, METABOB_API_KEY, DISCOVERY_ENDPOINT):
#   CLAUDE_BIN         the agent's binary (default: claude); the tests put a stand-in here
#   CLAUDE_ARGS        more arguments for it, split on spaces (e.g. "--model sonnet --max-turns 60")
#   CLAUDE_ALLOWED_TOOLS  what it may do without asking (default below; -p cannot ask)
#   METABOB_BIN        the binary the config names as the server (default: metabob-mcp, on PATH)
#   METABOB_CALL_LOG   handed to the MCP server: a log of its tool calls, names and sizes only
#   ANTHROPIC_API_KEY  the agent's own credential, read by claude itself
#
# Exit: 0 with the fix committed; 1 and one line on stderr when the agent failed or changed
# nothing.
set -eu
RECIPE=claude-code.sh
. "$(dirname "$0")/common.sh"

claude_bin=${CLAUDE_BIN:-claude}
command -v "$claude_bin" >/dev/null 2>&1 \
    || fail "$claude_bin not found: install Claude Code (npm install -g @anthropic-ai/claude-code) or set CLAUDE_BIN"

# The key is in this file: only this user may read it, and the cell empties TASK_DIR afterwards.
umask 077
config=$TASK_DIR/claude-mcp.json
{
    printf '{\n  "mcpServers": {\n    "metabob": {\n'
    printf '      "command": "%s",\n      "args": ["serve"],\n      "env": {' "$(quoted "$METABOB_MCP")"
    sep=
    server_env | while IFS='=' read -r name value; do
        printf '%s\n        "%s": "%s"' "$sep" "$name" "$(quoted "$value")"
        sep=,
    done
    printf '\n      }\n    }\n  }\n}\n'
} >"$config"

# Print mode cannot ask for permission, so whatever the agent needs is allowed up front: every
# metabob tool, edits (acceptEdits) and the git commands that commit its fix. Nothing pushes.
allowed=${CLAUDE_ALLOWED_TOOLS:-"mcp__metabob,Read,Edit,Write,Glob,Grep,Bash(git status:*),Bash(git diff:*),Bash(git log:*),Bash(git add:*),Bash(git commit:*)"}

rc=0
# --strict-mcp-config: the clone's own .mcp.json, if any, is the repository's to choose, not
# this cell's; only the server above is started.
# shellcheck disable=SC2086 # CLAUDE_ARGS is split on purpose
"$claude_bin" --mcp-config "$config" --strict-mcp-config --permission-mode acceptEdits \
    --allowedTools "$allowed" ${CLAUDE_ARGS:-} \
    -p "$(prompt "When the fix is done, commit it with git; the commit message's last paragraph must be the line
Fixes-Finding: $TASK_ID")" || rc=$?
[ "$rc" = 0 ] || fail "$claude_bin exited $rc; the task goes back as failed"
finish
