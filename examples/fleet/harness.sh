#!/bin/sh
# A sample HARNESS: "fixes" the task by appending a line to each of its files and commits with
# the trailer `finding close` reads. A real agent goes here instead; it gets the same
# TASK_DIR (task.json, context.md) and WORK_DIR (the clone, checked out at the task's ref).
set -eu
cd "$WORK_DIR"
task_id=$(grep -o '"task_id": "[^"]*"' "$TASK_DIR/task.json" | head -n 1 | sed 's/.*: "\(.*\)"$/\1/')
# task.json is pretty-printed: the files are the quoted lines inside the "files" array.
awk '/"files": \[\]/ { exit } /"files": \[/ { inside = 1; next } inside && /\]/ { exit } inside { print }' \
    "$TASK_DIR/task.json" | sed 's/^[[:space:]]*"\(.*\)",\{0,1\}$/\1/' \
    | while IFS= read -r file; do
        [ -n "$file" ] || continue
        mkdir -p "$(dirname "$file")"
        echo "# fixed for $task_id" >>"$file"
        git add -- "$file"
    done
git commit -q -m "Fix $task_id" -m "Fixes-Finding: $task_id"
