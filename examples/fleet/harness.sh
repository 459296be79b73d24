#!/bin/sh
# A sample HARNESS: "fixes" the task by appending a line to each of its files and commits with
# the trailer `finding close` reads. A real agent goes here instead; it gets the same
# TASK_DIR (task.json, context.md) and WORK_DIR (the clone, checked out at the task's ref).
set -eu
cd "$WORK_DIR"
task="$TASK_DIR/task.json"
# task.json is read with a JSON parser, never with grep: its strings may hold anything JSON can
# escape. jq is in the cell image; python3 is on the machines scripts/quickstart.sh runs on.
if command -v jq >/dev/null 2>&1; then
    task_id=$(jq -er '.task_id' "$task")
    files=$(jq -r '.files[]' "$task")
else
    task_id=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["task_id"])' "$task")
    files=$(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["files"]))' "$task")
fi
# The files come from the ledger, which any write key can write to: only paths inside the clone.
printf '%s\n' "$files" | while IFS= read -r file; do
    case "/$file/" in
        //*|*/../*) echo "harness: skipping '$file': not a path inside the clone" >&2; continue ;;
    esac
    mkdir -p "$(dirname "$file")"
    echo "# fixed for $task_id" >>"$file"
    git add -- "$file"
done
git commit -q -m "Fix $task_id" -m "Fixes-Finding: $task_id"
