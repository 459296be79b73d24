#!/usr/bin/env bash
# Runs the whole test suite. The tests use real tools: openssl (TLS servers) and tinyproxy (a
# real HTTP proxy); this installs them from Debian's packages when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v tinyproxy >/dev/null || missing+=(tinyproxy)
# A real Prometheus scrapes a ledger (tests/ledger/prometheus.rs).
command -v prometheus >/dev/null || missing+=(prometheus)
# The board test (tests/board.rs) loads /board in a real headless Chromium.
command -v chromium >/dev/null || missing+=(chromium)
# The ledger's tests run a second time on a real PostgreSQL cluster (tests/support/pg.rs).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The official Python MCP SDK (a third-party client) and pyyaml, in a venv the tests use: the agent
# recipes' stand-in (tests/recipes.rs) and the CI examples' parsing run on this interpreter; and
# kubernetes-validate (offline schemas) and checkov, which tests/k8s.rs runs on examples/k8s.
venv=target/mcp-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check mcp pyyaml kubernetes-validate checkov
export METABOB_TEST_PYTHON=$PWD/$venv/bin/python
cargo test --locked --workspace --lib --test runner "$@"
# Nothing may lean on this machine's git identity or config: the git tests run again with an
# empty HOME, as on a fresh CI runner or in a new container.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
empty_home=$(mktemp -d)
trap 'rm -rf "$empty_home"' EXIT
env HOME="$empty_home" XDG_CONFIG_HOME="$empty_home/.config" GIT_CONFIG_NOSYSTEM=1 \
  CARGO_HOME="$cargo_home" RUSTUP_HOME="$rustup_home" \
  cargo test --locked --test runner -- git:: refs:: cell::finding_close
# The same ledger tests on the PostgreSQL store: each ledger gets its own database of one
# cluster the test process starts and stops. The goal board's tests read the SQLite file itself.
METABOB_TEST_STORE=postgres cargo test --locked --test runner -- \
  ledger:: take:: depends:: depends_model:: concepts:: parking:: hostile::rows_at soak:: attach::a_revoked_key --skip goals_ledger::
# A third-party MCP client: the official Python SDK drives the binary the tests built.
"$venv/bin/python" scripts/mcp_smoke.py "${CARGO_TARGET_DIR:-target}/debug/metabob-mcp" .
