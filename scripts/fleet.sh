#!/usr/bin/env bash
# A standing fleet from examples/fleet/compose.yaml, one command per step:
#
#   scripts/fleet.sh up N [ORIGIN]   build what is missing, serve ORIGIN's repository (a bare
#                                    clone; default a demo repository made from examples/demo)
#                                    as git://git/app.git, start the ledger and git, create a
#                                    key for the cells, and start N cells that wait for tasks
#   scripts/fleet.sh record ARGS...  record a task on that repository: `finding record` with
#                                    --origin and --category task filled in (give --summary and
#                                    --file; --severity is MEDIUM unless given; --details holds
#                                    the task's ref and policy lines)
#   scripts/fleet.sh status          the board (`task list`)
#   scripts/fleet.sh down            stop the cells (each gives its claim back), remove the
#                                    containers, the ledger's volume, the key and the copies
#
# Environment:
#   METABOB_BIN    a metabob-mcp binary to put in the images (default: cargo build --release)
#   BASE_IMAGE     the images' base (default: debian:bookworm-slim when the engine has it, else
#                  the offline base from images/base/build.sh)
#   HARNESS        the cells' harness (default: examples/fleet/harness.sh)
#   FLEET_PROJECT  the compose project name (default metabob-fleet)
#   FLEET_STATE    where the fleet's key is kept between steps (default target/fleet); give each
#                  fleet on one host its own, with its own FLEET_PROJECT
#   FLEET_WAIT     seconds `up` waits for the ledger to be healthy (default 120)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$repo/examples/fleet
state=${FLEET_STATE:-$repo/target/fleet}
project=${FLEET_PROJECT:-metabob-fleet}
origin_url=git://git/app.git

log() { echo "fleet.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

# Docker's compose plugin (`docker compose`), which most installs now carry, else the standalone
# `docker-compose`.
if docker compose version >/dev/null 2>&1; then
    compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null; then
    compose_cmd=(docker-compose)
else
    compose_cmd=()
fi
compose() {
    [ ${#compose_cmd[@]} -gt 0 ] \
        || die "neither \`docker compose\` nor docker-compose is installed (install Docker's compose plugin, or Debian's docker-compose)"
    "${compose_cmd[@]}" -p "$project" -f "$dir/compose.yaml" "$@"
}

key() {
    [ -s "$state/key" ] || die "no fleet is up (no key in $state); run: scripts/fleet.sh up N"
    cat "$state/key"
}

# A one-off cell container attached with the fleet's key, running metabob-mcp.
mb() {
    compose run --rm -T --no-deps -e METABOB_API_KEY="$(key)" --entrypoint metabob-mcp cell "$@"
}

base_image() {
    if [ -n "${BASE_IMAGE:-}" ]; then
        echo "$BASE_IMAGE"
    elif docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
        echo debian:bookworm-slim
    else
        "$repo/images/base/build.sh"
    fi
}

# The repository the cells work on, as a bare clone under repos/ (git daemon serves it).
serve_repository() {
    local origin=$1
    rm -rf "$dir/repos/app.git"
    mkdir -p "$dir/repos"
    if [ -n "$origin" ]; then
        git clone -q --bare "$origin" "$dir/repos/app.git"
        return
    fi
    local demo
    demo=$(mktemp -d "${TMPDIR:-/tmp}/metabob-fleet-demo.XXXXXX")
    cp -R "$repo/examples/demo/." "$demo/"
    git -C "$demo" init -q -b main
    git -C "$demo" add -A
    git -C "$demo" -c user.name=fleet -c user.email=fleet@metabob.invalid \
        commit -q -m "demo repository"
    git clone -q --bare "$demo" "$dir/repos/app.git"
    rm -rf "$demo"
}

wait_healthy() {
    local id deadline=$((SECONDS + ${FLEET_WAIT:-120}))
    id=$(compose ps -q ledger)
    [ -n "$id" ] || die "the ledger container did not start; see: ${compose_cmd[*]} -p $project logs ledger"
    until [ "$(docker inspect -f '{{.State.Health.Status}}' "$id")" = healthy ]; do
        [ "$SECONDS" -lt "$deadline" ] \
            || die "the ledger is not healthy after ${FLEET_WAIT:-120}s; see: ${compose_cmd[*]} -p $project logs ledger"
        sleep 1
    done
}

up() {
    local n=${1:-}
    local origin=${2:-}
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "up needs the number of cells: scripts/fleet.sh up N [ORIGIN]"
    [ ${#compose_cmd[@]} -gt 0 ] || compose version
    local bin=${METABOB_BIN:-}
    if [ -z "$bin" ]; then
        log "building the release binary"
        (cd "$repo" && cargo build --release --quiet)
        bin=$repo/target/release/metabob-mcp
    fi
    [ -x "$bin" ] || die "METABOB_BIN=$bin is not an executable"
    mkdir -p "$dir/context" "$state"
    cp "$bin" "$dir/context/metabob-mcp"
    cp "$repo/entrypoint/cell-entrypoint" "$dir/context/cell-entrypoint"
    serve_repository "$origin"

    BASE_IMAGE=$(base_image)
    export BASE_IMAGE
    log "building the images on $BASE_IMAGE"
    compose build -q ledger cell-image >&2
    compose up -d ledger git >&2
    wait_healthy
    compose exec -T ledger metabob-mcp ledger key create --data /data --org default \
        --scopes read,write --label fleet.sh --json \
        | sed -n 's/.*"key": "\(.*\)".*/\1/p' >"$state/key"
    [ -s "$state/key" ] || die "creating the cells' key failed; see: ${compose_cmd[*]} -p $project logs ledger"
    METABOB_API_KEY=$(key) ON_EMPTY=wait ORIGIN=$origin_url compose up -d --scale cell="$n" cell >&2
    log "$n cells are up on $origin_url; record tasks with: scripts/fleet.sh record --summary TEXT --file PATH"
}

record() {
    local severity=(--severity MEDIUM)
    for arg in "$@"; do
        case $arg in --severity | --severity=*) severity=() ;; esac
    done
    mb finding record --origin "$origin_url" --category task "${severity[@]}" "$@"
}

status() {
    mb task list
}

down() {
    compose down -v --remove-orphans >&2 || true
    rm -rf "$state" "$dir/context" "$dir/repos"
    log "the fleet is down"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
up) up "$@" ;;
record) record "$@" ;;
status) status "$@" ;;
down) down ;;
*) die "usage: scripts/fleet.sh up N [ORIGIN] | record ARGS... | status | down" ;;
esac
