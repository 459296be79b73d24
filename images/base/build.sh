#!/bin/sh
# Builds the cell's base image offline: no image registry is reachable on the build machines,
# but Debian's package mirror is, so debootstrap a minimal bookworm with git,
# ca-certificates and jq (the sample harness reads task.json with it) and `docker import` it (DESIGN.md §Containers).
#
# Idempotent: an existing image is kept unless FORCE=1. Prints the image name on stdout.
# IMAGE overrides the name, MIRROR the Debian mirror (default: the host's apt sources).
set -eu

IMAGE="${IMAGE:-metabob-base:bookworm}"
SUITE=bookworm

log() { echo "build.sh: $*" >&2; }

# One build at a time on a machine: concurrent test runs share the Docker engine. The check
# below runs under the lock, so a waiter finds the image the first one built.
if command -v flock >/dev/null 2>&1; then
    exec 9>"${TMPDIR:-/tmp}/metabob-base-build.lock"
    flock 9
fi

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE exists (FORCE=1 rebuilds)"
    echo "$IMAGE"
    exit 0
fi

# The first Debian mirror the host's apt is configured with, in either source format.
host_mirror() {
    {
        cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p'
        cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | sed -n 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\).*/\2/p'
    } | tr ' ' '\n' | grep -E '^https?://' | grep -v -- '-security' | head -n 1
}
MIRROR="${MIRROR:-$(host_mirror || true)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap >&2
fi

ROOT="$(mktemp -d "${TMPDIR:-/tmp}/metabob-base.XXXXXX")"
cleanup() { $SUDO rm -rf "$ROOT"; }
trap cleanup EXIT

log "debootstrap $SUITE from $MIRROR into $ROOT"
$SUDO debootstrap --variant=minbase --include=git,ca-certificates,jq "$SUITE" "$ROOT" "$MIRROR" >&2

# Shrink: package lists, caches, docs, man pages and locales are not needed in a cell.
$SUDO rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin \
    "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/log/* \
    "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
    "$ROOT"/usr/share/locale/*

$SUDO tar -C "$ROOT" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'CMD ["/bin/bash"]' - "$IMAGE" >&2
log "built $IMAGE"
echo "$IMAGE"
