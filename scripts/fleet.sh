#!/usr/bin/env bash
# A standing fleet from examples/fleet/compose.yaml (or, with FLEET_ENGINE=swarm, the Docker
# stack examples/swarm/stack.yaml), one command per step:
#
#   scripts/fleet.sh up N [ORIGIN]   build what is missing, start the ledger, create a key for
#                                    the cells, and start N cells that wait for tasks on ORIGIN:
#                                    a URL the cells clone from and push to themselves (logging
#                                    in with FLEET_GIT_CREDENTIALS); a repository on this host
#                                    (a path), served as a bare clone by the fleet's git server
#                                    as git://git/app.git, where the fixes then land; or, with
#                                    none, a demo repository made from examples/demo, served
#                                    the same way. A later `up` keeps the ORIGIN it was given
#   scripts/fleet.sh record ARGS...  record a task on that repository: `finding record` with
#                                    --origin and --category task filled in (give --summary and
#                                    --file; --severity is MEDIUM unless given; --details holds
#                                    the task's ref and policy lines)
#   scripts/fleet.sh status          the board (`task list`)
#   scripts/fleet.sh task ARGS...    any `task` command with the fleet's key: `task show ID`,
#                                    `task reopen ID`, `task release ID --force`, `task cancel
#                                    ID --reason TEXT`
#   scripts/fleet.sh backup [FILE]   a consistent copy of the ledger while it serves (`ledger
#                                    backup`), written to FILE (default FLEET_STATE/backups/
#                                    ledger-<time>.db)
#   scripts/fleet.sh restore FILE    the ledger put back from FILE (`ledger restore`): the ledger
#                                    is stopped meanwhile, and the cells wait for it
#   scripts/fleet.sh stop | start    stop the fleet's containers (each cell gives its claim back)
#                                    and start them again; everything is kept
#   scripts/fleet.sh down [--purge]  stop and remove the containers and the network; the
#                                    ledger's volume (the board, every task and key) and the
#                                    repositories the cells pushed to are kept, and the next
#                                    `up` goes on with them. --purge removes those too, and the
#                                    fleet's images and state, and says what it removed
#
# Environment:
#   FLEET_ENGINE   compose (default): one host, Docker compose; swarm: a stack on the Swarm this
#                  engine manages (`docker swarm init` first), cells spread over its nodes; `up`
#                  deploys with no cells, hands them the key as a Swarm secret and scales them to
#                  N, `record` and `status` run in a one-off container on the stack's network,
#                  and `down` removes the stack and waits until its services, containers and
#                  network are gone; its volume and repositories are kept unless --purge
#   FLEET_GIT_CREDENTIALS  a git-credential-store file (one line per host, as
#                  https://user:token@git.example.com) the cells log in to ORIGIN with; it
#                  reaches them as the secret /run/secrets/git-credentials, never in their
#                  environment (examples/fleet/compose.origin.yaml). Kept for later `up`s until
#                  `down --purge`; give it again to replace it
#   FLEET_GIT_CA   the certificate (PEM) of a private CA that signed ORIGIN's certificate; the
#                  cells trust it, and the fleet's own CA, for the clone and the pushes
#                  (examples/fleet/compose.origin-ca.yaml; under swarm a secret). Kept like the
#                  login
#   METABOB_BIN    a metabob-mcp binary to put in the images (default: cargo build --release)
#   BASE_IMAGE     the images' base (default: debian:bookworm-slim when the engine has it, else
#                  the offline base from images/base/build.sh)
#   HARNESS        the cells' harness (default: examples/fleet/harness.sh)
#   FLEET_PROJECT  the compose project name, or the stack's (default metabob-fleet; under swarm
#                  metabob-swarm, so the two engines' volumes never share a name). Fleets with
#                  different names run side by side on one host: each has its own state, port,
#                  repositories and image tags (metabob-ledger:<project>, metabob-cell:<project>)
#   FLEET_STATE    where the fleet's key, certificates, image context and repositories are kept
#                  (default target/fleet for the default project, else target/fleet-<project>;
#                  under swarm target/fleet-swarm)
#   FLEET_PORT     the host port the ledger is published on, on 127.0.0.1 (default: the first
#                  free one from 18100; `up` names it)
#   FLEET_TLS      1 (default): the compose fleet's ledger serves HTTPS with a certificate made
#                  for it under FLEET_STATE/tls by a fresh CA (openssl), which the cells trust
#                  (examples/fleet/compose.tls.yaml); 0: plain HTTP on the fleet's network
#   FLEET_WAIT     seconds `up` waits for the ledger to be healthy (default 120); under swarm
#                  also for the N cells to run, and `down` for the stack to be gone
#   CELL_IMAGE, LEDGER_IMAGE  under swarm, the images' names (default metabob-cell:latest and
#                  metabob-ledger:latest); across hosts, names in a registry every node reaches
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$repo/examples/fleet
origin_url=git://git/app.git

log() { echo "fleet.sh: $*" >&2; }
die() {
    log "$*"
    exit 1
}

engine=${FLEET_ENGINE:-compose}
case $engine in
compose)
    project=${FLEET_PROJECT:-metabob-fleet}
    if [ "$project" = metabob-fleet ]; then
        state=${FLEET_STATE:-$repo/target/fleet}
    else
        state=${FLEET_STATE:-$repo/target/fleet-$project}
    fi
    repos=$state/repos
    # What compose.yaml takes from the environment, so fleets of other names never share them.
    export FLEET_REPOS=$repos FLEET_CONTEXT=$state/context FLEET_IMAGES=$repo/images
    export LEDGER_IMAGE=metabob-ledger:$project CELL_IMAGE=metabob-cell:$project
    FLEET_PORT_GIVEN=${FLEET_PORT:-}
    if [ -z "$FLEET_PORT_GIVEN" ] && [ -s "$state/port" ]; then
        FLEET_PORT=$(cat "$state/port")
    fi
    export FLEET_PORT=${FLEET_PORT:-18100}
    ;;
swarm)
    # Apart from the compose fleet's files, so the two engines can run side by side from one
    # checkout.
    state=${FLEET_STATE:-$repo/target/fleet-swarm}
    project=${FLEET_PROJECT:-metabob-swarm}
    repos=$state/repos
    ;;
*) die "FLEET_ENGINE is '$engine', which is no engine; set it to compose (the default) or swarm" ;;
esac

# Docker's compose plugin (`docker compose`), which most installs now carry, else the standalone
# `docker-compose`.
if docker compose version >/dev/null 2>&1; then
    compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null; then
    compose_cmd=(docker-compose)
else
    compose_cmd=()
fi
tls=${FLEET_TLS:-1}
case $tls in
0 | 1) ;;
*) die "FLEET_TLS is '$tls'; set it to 1 (HTTPS, the default) or 0 (plain HTTP)" ;;
esac
# The origin the fleet was brought up on: kept, so `record` and a later `up` use it.
[ -s "$state/origin" ] && origin_url=$(cat "$state/origin")
credentials_given=${FLEET_GIT_CREDENTIALS:-}
ca_given=${FLEET_GIT_CA:-}
compose_files=(-f "$dir/compose.yaml")
if [ "$engine" = compose ] && [ "$tls" = 1 ]; then
    compose_files+=(-f "$dir/compose.tls.yaml")
    export FLEET_TLS_DIR=$state/tls
fi
# The copy `up` keeps of the operator's credentials (see use_origin).
if [ "$engine" = compose ] && [ -s "$state/git-credentials" ]; then
    compose_files+=(-f "$dir/compose.origin.yaml")
    export FLEET_GIT_CREDENTIALS=$state/git-credentials
fi
if [ "$engine" = compose ] && [ -s "$state/trust.pem" ]; then
    compose_files+=(-f "$dir/compose.origin-ca.yaml")
    export FLEET_TRUST=$state/trust.pem
fi
compose() {
    [ ${#compose_cmd[@]} -gt 0 ] \
        || die "neither \`docker compose\` nor docker-compose is installed (install Docker's compose plugin, or Debian's docker-compose)"
    "${compose_cmd[@]}" -p "$project" "${compose_files[@]}" "$@"
}

# A CA of this fleet's own and the ledger's certificate from it, for the names the cells
# (ledger) and the host (127.0.0.1, the published port) reach it by. The state directory is
# this user's alone; the files in tls/ are readable so the containers' users can read them.
make_tls() {
    local d=$state/tls
    command -v openssl >/dev/null \
        || die "FLEET_TLS=1 makes the ledger's certificate with openssl, which is not installed; install it, or set FLEET_TLS=0"
    rm -rf "$d"
    mkdir -p "$d"
    chmod 755 "$d"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout "$d/ca.key" -out "$d/ca.pem" -days 825 \
        -subj "/O=metabob fleet/CN=metabob fleet CA ($project)" 2>/dev/null
    openssl req -new "${ec[@]}" -keyout "$d/ledger.key" -out "$d/ledger.csr" \
        -subj "/CN=ledger" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:ledger,DNS:localhost,IP:127.0.0.1\n' >"$d/ledger.ext"
    openssl x509 -req -in "$d/ledger.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -out "$d/ledger.pem" -days 825 -extfile "$d/ledger.ext" 2>/dev/null
    rm -f "$d/ca.key" "$d/ca.srl" "$d/ledger.csr" "$d/ledger.ext"
    chmod 644 "$d/ca.pem" "$d/ledger.pem" "$d/ledger.key"
}

key() {
    [ -s "$state/key" ] || die "no fleet is up (no key in $state); run: scripts/fleet.sh up N"
    cat "$state/key"
}

# A one-off cell container attached with the fleet's key, running metabob-mcp.
mb() {
    if [ "$engine" = swarm ]; then
        swarm_mb "$@"
        return
    fi
    local k
    k=$(key)
    [ ${#compose_cmd[@]} -gt 0 ] || compose version
    [ -n "$(compose ps -q ledger 2>/dev/null)" ] \
        || die "no fleet is up (a fleet that was taken down keeps its data in $state); run: scripts/fleet.sh up N"
    compose run --rm -T --no-deps -e METABOB_API_KEY="$k" --entrypoint metabob-mcp cell "$@"
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

# What ORIGIN is: a URL the cells reach themselves (`url`), or a repository to serve from the
# fleet's git server (`served`: a path on this host, or none for the demo). A URL holding a
# password is refused: it would be stored with every task.
origin_kind() {
    local origin=$1
    case $origin in
    "" | /* | ./* | ../* | file://*) echo served ;;
    *://*)
        if [[ "$origin" =~ ^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*:[^/@]*@ ]]; then
            die "ORIGIN holds a password; give the URL without it and the login in a file: FLEET_GIT_CREDENTIALS=FILE scripts/fleet.sh up N URL"
        fi
        echo url
        ;;
    *@*:*) echo url ;;
    *) echo served ;;
    esac
}

# Checks what `up` was given before anything is built: picks the origin (ORIGIN, else the one
# the last `up` kept) into `origin` and whether the cells reach it by URL into `origin_is_url`.
check_origin() {
    origin=$1
    if [ -z "$origin" ] && [ -s "$state/origin" ] && [ "$(cat "$state/origin")" != git://git/app.git ]; then
        origin=$(cat "$state/origin")
    fi
    local kind
    kind=$(origin_kind "$origin") || exit 1
    origin_is_url=
    [ "$kind" = url ] && origin_is_url=1
    if [ -n "$credentials_given" ]; then
        [ -n "$origin_is_url" ] \
            || die "FLEET_GIT_CREDENTIALS is for an ORIGIN the cells reach by URL; give one: scripts/fleet.sh up N URL"
        [ -f "$credentials_given" ] && [ -r "$credentials_given" ] \
            || die "FLEET_GIT_CREDENTIALS=$credentials_given is not a file this user can read; give a git-credential-store file (lines like https://user:token@host)"
    fi
    if [ -n "$ca_given" ]; then
        [ -n "$origin_is_url" ] \
            || die "FLEET_GIT_CA is for an ORIGIN the cells reach by URL; give one: scripts/fleet.sh up N URL"
        grep -q -- '-----BEGIN CERTIFICATE-----' "$ca_given" 2>/dev/null \
            || die "FLEET_GIT_CA=$ca_given is not a PEM certificate this user can read; give the CA's certificate (-----BEGIN CERTIFICATE-----)"
    fi
}

# Puts check_origin's choice in place: the repository served (unless the cells reach a URL),
# the origin kept for `record` and later `up`s, and the operator's credentials copied into
# the state directory (which only this user can enter) readable by the cells' user, since
# compose mounts a secret file with the file's own mode.
use_origin() {
    if [ -n "$origin_is_url" ]; then
        origin_url=$origin
    else
        origin_url=git://git/app.git
        serve_repository "$origin"
    fi
    mkdir -p "$state"
    # Only this user enters it: the copies below are readable for the containers' users.
    chmod 700 "$state"
    echo "$origin_url" >"$state/origin"
    [ -z "$ca_given" ] || install -m 644 "$ca_given" "$state/git-ca.pem"
    if [ -s "$state/git-ca.pem" ]; then
        # Made again on every `up`, which makes the fleet a new CA: the fleet's own CA stays
        # trusted, since this bundle replaces compose.tls.yaml's for the cells.
        local trust=$state/trust.pem
        cp "$state/git-ca.pem" "$trust"
        if [ "$engine" = compose ] && [ "$tls" = 1 ]; then
            cat "$state/tls/ca.pem" >>"$trust"
        fi
        chmod 644 "$trust"
        if [ "$engine" = compose ] && [ "${FLEET_TRUST:-}" != "$trust" ]; then
            compose_files+=(-f "$dir/compose.origin-ca.yaml")
            export FLEET_TRUST=$trust
        fi
    fi
    [ -n "$credentials_given" ] || return 0
    local copy=$state/git-credentials
    install -m 644 "$credentials_given" "$copy"
    if [ "$engine" = compose ] && [ "${FLEET_GIT_CREDENTIALS:-}" != "$copy" ]; then
        compose_files+=(-f "$dir/compose.origin.yaml")
        export FLEET_GIT_CREDENTIALS=$copy
    fi
}

# The repository the fleet's git server serves, as a bare clone under repos/: a clone of the
# path `origin`, or the demo repository when it is empty.
serve_repository() {
    local origin=$1
    # Kept by a `down`: the fixes the cells pushed are in it.
    if [ -d "$repos/app.git" ]; then
        log "serving the kept repository $repos/app.git (down --purge starts afresh)"
        return
    fi
    mkdir -p "$repos"
    if [ -n "$origin" ]; then
        git clone -q --bare "$origin" "$repos/app.git"
        log "serving a bare clone of $origin as git://git/app.git; the fixes land in $repos/app.git, not in $origin"
        return
    fi
    local demo
    demo=$(mktemp -d "${TMPDIR:-/tmp}/metabob-fleet-demo.XXXXXX")
    cp -R "$repo/examples/demo/." "$demo/"
    git -C "$demo" init -q -b main
    git -C "$demo" add -A
    git -C "$demo" -c user.name=fleet -c user.email=fleet@metabob.invalid \
        commit -q -m "demo repository"
    git clone -q --bare "$demo" "$repos/app.git"
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

# The binary the images carry, in `bin`.
release_binary() {
    bin=${METABOB_BIN:-}
    if [ -z "$bin" ]; then
        log "building the release binary"
        (cd "$repo" && cargo build --release --quiet)
        bin=$repo/target/release/metabob-mcp
    fi
    [ -x "$bin" ] || die "METABOB_BIN=$bin is not an executable"
}

up() {
    local n=${1:-}
    local origin=${2:-}
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "up needs the number of cells: scripts/fleet.sh up N [ORIGIN]"
    check_origin "$origin"
    if [ "$engine" = swarm ]; then
        swarm_up "$n" "$origin"
        return
    fi
    [ ${#compose_cmd[@]} -gt 0 ] || compose version
    local bin
    release_binary
    mkdir -p "$state/context"
    chmod 700 "$state"
    [ "$tls" = 1 ] && make_tls
    cp "$bin" "$state/context/metabob-mcp"
    cp "$repo/entrypoint/cell-entrypoint" "$state/context/cell-entrypoint"
    use_origin

    local build_log=$state/build.log
    log "building the images (output in $build_log)"
    BASE_IMAGE=$(base_image 2>"$build_log") || build_failed "$build_log"
    export BASE_IMAGE
    compose build ledger cell-image >>"$build_log" 2>&1 || build_failed "$build_log"
    # The git server only serves a repository of this host; a URL's cells need none.
    local served=(git) no_deps=()
    if [ "$origin_url" != git://git/app.git ]; then
        served=() no_deps=(--no-deps)
    fi
    # Two `up`s at once must not pick the same port: the pick, and the start of the ledger
    # that binds it, happen under one lock for the whole host (where flock is installed).
    if command -v flock >/dev/null; then
        local lock=${TMPDIR:-/tmp}/metabob-fleet-port.lock
        (umask 0 && : >>"$lock") 2>/dev/null || true
        exec 9<"$lock"
        flock 9
    fi
    pick_port
    compose up -d ledger "${served[@]}" >&2
    exec 9<&-
    wait_healthy
    compose exec -T ledger metabob-mcp ledger key create --data /data --org default \
        --scopes read,write --label fleet.sh --json \
        | sed -n 's/.*"key": "\(.*\)".*/\1/p' >"$state/key"
    [ -s "$state/key" ] || die "creating the cells' key failed; see: ${compose_cmd[*]} -p $project logs ledger"
    METABOB_API_KEY=$(key) ON_EMPTY=wait ORIGIN=$origin_url \
        compose up -d "${no_deps[@]}" --scale cell="$n" cell >&2
    log "$n cells are up on $origin_url; record tasks with: scripts/fleet.sh record --summary TEXT --file PATH"
    local scheme=http
    [ "$tls" = 1 ] && scheme=https
    log "the board: $scheme://127.0.0.1:$FLEET_PORT/board (its key: cat $state/key)"
    if [ "$tls" = 1 ]; then
        log "the ledger serves HTTPS on https://127.0.0.1:$FLEET_PORT; from this host trust its CA with METABOB_EXTRA_CA_CERTS=$state/tls/ca.pem"
    fi
}

# The published port: FLEET_PORT when given or kept from the last `up`, else the first port
# from 18100 nothing on this host answers on.
pick_port() {
    if [ -n "${FLEET_PORT_GIVEN:-}" ] || [ -s "$state/port" ]; then
        echo "$FLEET_PORT" >"$state/port"
        return
    fi
    local p=18100
    while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
        p=$((p + 1))
        [ "$p" -lt 18200 ] || die "no free port in 18100-18199 for the ledger; set FLEET_PORT"
    done
    FLEET_PORT=$p
    echo "$p" >"$state/port"
}

build_failed() {
    tail -n 20 "$1" >&2
    die "building the images failed; the whole output is in $1"
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

backup() {
    [ "$engine" = compose ] || die "backup and restore are for the compose fleet; under swarm run ledger backup in the ledger's task (README: Backups)"
    local to=${1:-$state/backups/ledger-$(date +%Y%m%d-%H%M%S).db}
    key >/dev/null
    [ -n "$(compose ps -q ledger 2>/dev/null)" ] \
        || die "no fleet is up (a fleet that was taken down keeps its data in $state); run: scripts/fleet.sh up N"
    mkdir -p "$(dirname "$to")"
    # Out through the pipe, so the file is this user's; written under a new name until whole.
    compose exec -T ledger sh -c 'metabob-mcp ledger backup --data /data --to /data/.fleet-backup.db >&2 &&
        cat /data/.fleet-backup.db; status=$?; rm -f /data/.fleet-backup.db; exit $status' \
        >"$to.part" || {
        rm -f "$to.part"
        die "the backup failed (the lines above say why); nothing was written to $to"
    }
    mv "$to.part" "$to"
    log "backed up the ledger to $to; put it back with: scripts/fleet.sh restore $to"
}

restore() {
    [ "$engine" = compose ] || die "backup and restore are for the compose fleet; under swarm run ledger restore in a one-off container on the ledger's volume (README: Backups)"
    local from=${1:-}
    [ -n "$from" ] && [ -f "$from" ] && [ -r "$from" ] \
        || die "restore needs a backup file this user can read: scripts/fleet.sh restore FILE"
    key >/dev/null
    [ -n "$(compose ps -q ledger 2>/dev/null)" ] \
        || die "no fleet is up (a fleet that was taken down keeps its data in $state); run: scripts/fleet.sh up N first"
    # In through the pipe, so the ledger's own user owns it; `ledger restore` checks it and
    # swaps it in, and refuses while a ledger serves on the volume.
    compose stop ledger >&2
    if ! compose run --rm -T --no-deps --entrypoint sh ledger -c 'cat >/data/.fleet-restore.db &&
        metabob-mcp ledger restore --data /data --from /data/.fleet-restore.db; status=$?;
        rm -f /data/.fleet-restore.db; exit $status' <"$from"; then
        compose start ledger >&2
        die "the restore failed (the lines above say why); the ledger serves its data as it was"
    fi
    compose start ledger >&2
    wait_healthy
    log "restored the ledger from $from; the cells go on with it"
}

down() {
    local purge=
    case ${1:-} in
    "") ;;
    --purge) purge=1 ;;
    *) die "down takes only --purge (which also removes the ledger's data and the repositories)" ;;
    esac
    if [ "$engine" = swarm ]; then
        swarm_down "$purge"
        return
    fi
    if [ -z "$purge" ]; then
        compose down --remove-orphans >&2 || true
        rm -rf "$state/context"
        log "the fleet is down; kept: the ledger's volume ${project}_ledger-data (the board, its tasks and keys) and the repositories in $repos; scripts/fleet.sh up N goes on with them, down --purge removes them"
        return
    fi
    compose down -v --remove-orphans >&2 || true
    docker image rm "$LEDGER_IMAGE" "$CELL_IMAGE" >/dev/null 2>&1 || true
    rm -rf "$state"
    log "the fleet is down and purged: removed the ledger's volume ${project}_ledger-data, the images $LEDGER_IMAGE and $CELL_IMAGE, and $state (repositories, key, certificates)"
}

stop() {
    [ "$engine" = compose ] || die "stop and start are for the compose fleet; under swarm scale the cells: docker service scale ${project}_cell=0"
    compose stop >&2
    log "the fleet is stopped; everything is kept: scripts/fleet.sh start"
}

start() {
    [ "$engine" = compose ] || die "stop and start are for the compose fleet; under swarm scale the cells: docker service scale ${project}_cell=N"
    key >/dev/null
    compose start >&2
    wait_healthy
    log "the fleet is started again"
}

# --- FLEET_ENGINE=swarm: examples/swarm/stack.yaml on the Swarm this engine manages ---

stack_file=$repo/examples/swarm/stack.yaml
cell_image=${CELL_IMAGE:-metabob-cell:latest}
ledger_image=${LEDGER_IMAGE:-metabob-ledger:latest}
network=${project}_fleet
# Stack deploy labels everything it makes (services, their containers, networks, volumes)
# with the stack's name; the key's secret gets the label too, so `docker stack rm` takes it.
stack_label=com.docker.stack.namespace=$project
fleet_wait=${FLEET_WAIT:-120}

# Stacks are deployed, and secrets made, only through a manager of an active swarm.
require_swarm() {
    local node
    node=$(docker info --format '{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}' 2>/dev/null) \
        || die "the Docker engine does not answer (docker info failed); start it, or point DOCKER_HOST at it"
    case $node in
    "active true") ;;
    active*) die "this Docker engine is a swarm worker; run scripts/fleet.sh on a manager (docker node ls lists them)" ;;
    inactive*) die "this Docker engine is not in a swarm; run: docker swarm init" ;;
    *) die "this Docker engine's swarm is ${node%% *}; see: docker info" ;;
    esac
}

# The running container of the ledger's task on this node (it is pinned to a manager).
ledger_container() {
    docker ps -q --filter "label=com.docker.swarm.service.name=${project}_ledger" \
        --filter status=running | head -n 1
}

running_cells() {
    docker service ps --filter desired-state=running --format '{{.CurrentState}}' \
        "${project}_cell" 2>/dev/null | grep -c '^Running' || true
}

# The image context lives under the fleet's state, not examples/fleet/context: a compose fleet
# of the same checkout rewrites and removes that one.
build_swarm_images() {
    local ctx=$state/context
    mkdir -p "$ctx"
    cp "$bin" "$ctx/metabob-mcp"
    cp "$repo/entrypoint/cell-entrypoint" "$ctx/cell-entrypoint"
    log "building the images on $BASE_IMAGE"
    docker build -q --build-arg BASE_IMAGE="$BASE_IMAGE" -f "$repo/images/ledger/Dockerfile" \
        -t "$ledger_image" "$ctx" >&2
    docker build -q --build-arg BASE_IMAGE="$BASE_IMAGE" -f "$repo/images/cell/Dockerfile" \
        -t "$cell_image" "$ctx" >&2
}

swarm_up() {
    local n=$1 origin=$2 id deadline
    require_swarm
    if docker stack ls --format '{{.Name}}' | grep -qFx -- "$project"; then
        die "a stack named $project is up already; run: FLEET_ENGINE=swarm scripts/fleet.sh down (or set FLEET_PROJECT)"
    fi
    # The git service bind-mounts the repositories, and Swarm takes only absolute paths.
    mkdir -p "$state"
    state=$(cd "$state" && pwd)
    repos=$state/repos
    local bin
    release_binary
    use_origin
    # The git server only serves a repository of this host; a URL's cells need none.
    local git_replicas=1
    [ "$origin_url" = git://git/app.git ] || git_replicas=0
    BASE_IMAGE=$(base_image)
    export BASE_IMAGE
    build_swarm_images

    # No cells yet: their key is made by the ledger, which is not up before the deploy.
    FLEET_REPOS=$repos FLEET_CELLS=0 FLEET_GIT_REPLICAS=$git_replicas \
        LEDGER_IMAGE=$ledger_image CELL_IMAGE=$cell_image \
        ON_EMPTY=wait ORIGIN=$origin_url \
        docker stack deploy -c "$stack_file" --resolve-image never "$project" >&2

    deadline=$((SECONDS + fleet_wait))
    until id=$(ledger_container) && [ -n "$id" ] \
        && [ "$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null)" = healthy ]; do
        [ "$SECONDS" -lt "$deadline" ] \
            || die "the ledger is not healthy after ${fleet_wait}s; see: docker service ps --no-trunc ${project}_ledger; docker service logs ${project}_ledger"
        sleep 1
    done
    docker exec "$id" metabob-mcp ledger key create --data /data --org default \
        --scopes read,write --label fleet.sh --json \
        | sed -n 's/.*"key": "\(.*\)".*/\1/p' >"$state/key"
    [ -s "$state/key" ] || die "creating the cells' key failed; see: docker service logs ${project}_ledger"

    # A secret left by a run that died before its `down`; no stack uses it (checked above).
    docker secret rm "${project}_key" >/dev/null 2>&1 || true
    # printf is a builtin: the key is on no command line.
    printf '{"metabob": {"apiKey": "%s"}}\n' "$(key)" \
        | docker secret create --label "$stack_label" "${project}_key" - >/dev/null \
        || die "creating the secret ${project}_key failed; see: docker secret ls"
    local secrets=(--secret-add "source=${project}_key,target=metabob-config")
    docker secret rm "${project}_git-credentials" >/dev/null 2>&1 || true
    if [ -s "$state/git-credentials" ]; then
        docker secret create --label "$stack_label" "${project}_git-credentials" \
            "$state/git-credentials" >/dev/null \
            || die "creating the secret ${project}_git-credentials failed; see: docker secret ls"
        # The cells' user reads it; nobody else in the container does.
        secrets+=(--secret-add "source=${project}_git-credentials,target=git-credentials,uid=10001,mode=0400")
    fi
    # The swarm's ledger serves plain HTTP on its network, so the origin's CA is all the
    # bundle holds.
    docker secret rm "${project}_trust" >/dev/null 2>&1 || true
    if [ -s "$state/trust.pem" ]; then
        docker secret create --label "$stack_label" "${project}_trust" "$state/trust.pem" >/dev/null \
            || die "creating the secret ${project}_trust failed; see: docker secret ls"
        secrets+=(--secret-add "source=${project}_trust,target=trust.pem,mode=0444"
            --env-add METABOB_EXTRA_CA_CERTS=/run/secrets/trust.pem)
    fi
    docker service update --quiet --detach "${secrets[@]}" \
        --replicas "$n" "${project}_cell" >/dev/null
    deadline=$((SECONDS + fleet_wait))
    until [ "$(running_cells)" -ge "$n" ]; do
        [ "$SECONDS" -lt "$deadline" ] \
            || die "$(running_cells) of $n cells are running after ${fleet_wait}s; see: docker service ps --no-trunc ${project}_cell"
        sleep 1
    done
    log "$n cells are up on $origin_url; record tasks with: FLEET_ENGINE=swarm scripts/fleet.sh record --summary TEXT --file PATH"
}

# A one-off cell container on the stack's attachable network; the key goes in by name, not value.
swarm_mb() {
    local k
    k=$(key)
    docker network inspect "$network" >/dev/null 2>&1 \
        || die "no fleet is up (a fleet that was taken down keeps its data in $state); run: FLEET_ENGINE=swarm scripts/fleet.sh up N"
    METABOB_API_KEY=$k docker run --rm --network "$network" -e METABOB_API_KEY \
        -e DISCOVERY_ENDPOINT=http://ledger:18100 --entrypoint metabob-mcp "$cell_image" "$@"
}

# Everything the stack made, one name per line.
stack_leftovers() {
    docker service ls -q --filter "label=$stack_label"
    docker ps -aq --filter "label=$stack_label"
    docker network ls -q --filter "label=$stack_label"
}

swarm_down() {
    local purge=$1 deadline=$((SECONDS + fleet_wait)) left
    if [ "$(docker info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null)" = active ]; then
        # Removing a service stops its tasks with TERM: each cell gives its claim back.
        docker stack rm "$project" >/dev/null 2>&1 || true
        until [ -z "$(stack_leftovers)" ]; do
            [ "$SECONDS" -lt "$deadline" ] \
                || die "the stack $project is not gone after ${fleet_wait}s; see: docker stack ps $project"
            sleep 1
        done
        docker secret rm "${project}_key" "${project}_git-credentials" "${project}_trust" \
            >/dev/null 2>&1 || true
    fi
    if [ -z "$purge" ]; then
        rm -rf "$state/context"
        log "the fleet is down; kept: the ledger's volume ${project}_ledger-data (the board, its tasks and keys) and the repositories in $repos; FLEET_ENGINE=swarm scripts/fleet.sh up N goes on with them, down --purge removes them"
        return
    fi
    # A volume stays busy for a moment after the last container using it is removed.
    until left=$(docker volume ls -q --filter "label=$stack_label") && [ -z "$left" ]; do
        # shellcheck disable=SC2086 # one volume name per word
        docker volume rm $left >/dev/null 2>&1 || true
        [ "$SECONDS" -lt "$deadline" ] \
            || die "the volumes $(echo $left) are still there after ${fleet_wait}s; see: docker volume inspect $(echo $left)"
        sleep 1
    done
    rm -rf "$state"
    log "the fleet is down and purged: removed the ledger's volume ${project}_ledger-data and $state (repositories, key, image context)"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
up) up "$@" ;;
record) record "$@" ;;
status) status "$@" ;;
task) mb task "$@" ;;
backup) backup "$@" ;;
restore) restore "$@" ;;
down) down "$@" ;;
stop) stop ;;
start) start ;;
*) die "usage: scripts/fleet.sh up N [ORIGIN] | record ARGS... | status | task ARGS... | backup [FILE] | restore FILE | stop | start | down [--purge]" ;;
esac
