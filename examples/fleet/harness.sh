#!/bin/sh
# A sample HARNESS: "fixes" the task by appending a line to each of its files and commits with
# the trailer `finding close` reads. A real agent goes here instead; it gets the same
# TASK_DIR (task.json, context.md) and WORK_DIR (the clone, checked out at the task's ref).
set -eu
cd "$WORK_DIR"
# The clone's real path: every path written must resolve to somewhere below it.
root=$(pwd -P)
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

# Where a write to $1 lands, every symlink followed. A symlink at the end is read by readlink -f
# (which fails when its target's directory is missing). Otherwise the nearest ancestor that
# exists is resolved by cd -P: what is missing below it, mkdir -p creates as real directories.
# Prints nothing and fails when that cannot be known (a dangling link on the way, a file used as
# a directory).
landing() {
    if [ -L "$1" ]; then
        readlink -f -- "$1"
        return
    fi
    dir=$(dirname -- "$1")
    rest=/$(basename -- "$1")
    while [ ! -e "$dir" ] && [ ! -L "$dir" ]; do
        rest=/$(basename -- "$dir")$rest
        dir=$(dirname -- "$dir")
    done
    dir=$(cd -P -- "$dir" 2>/dev/null && pwd -P) || return 1
    printf '%s\n' "${dir%/}$rest"
}

skip() {
    echo "harness: skipping '$1': $2" >&2
}

# The files come from the ledger, which any write key can write to, and the clone's content from
# the origin, which may hold symlinks: only what really lies inside the clone is written.
printf '%s\n' "$files" | while IFS= read -r file; do
    case "/$file/" in
        //*|*/../*) skip "$file" "not a path inside the clone"; continue ;;
    esac
    if ! real=$(landing "$file") || [ -z "$real" ]; then
        skip "$file" "its real path cannot be resolved (a dangling symlink or a file on the way)"
        continue
    fi
    case "$real" in
        "$root"/.git|"$root"/.git/*) skip "$file" "it is inside .git"; continue ;;
        "$root"/*) ;;
        *) skip "$file" "its real path $real is outside the clone (a symlink leads there)"; continue ;;
    esac
    if [ -d "$real" ]; then
        skip "$file" "it is a directory"
        continue
    fi
    # Relative to the clone and free of symlinks: written and added as the file it really is.
    rel=${real#"$root"/}
    mkdir -p "$(dirname -- "$rel")"
    echo "# fixed for $task_id" >>"$rel"
    git add -- "$rel"
done
git commit -q -m "Fix $task_id" -m "Fixes-Finding: $task_id"
