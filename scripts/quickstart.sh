#!/usr/bin/env bash
# Builds metabob-mcp, starts the embedded ledger (first start writes ~/.substrate/config.json
# when no config exists), and shows `attach --check` attaching with no flags.
# The ledger keeps running in the foreground; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/metabob-mcp
log=$(mktemp)
"$bin" ledger serve "$@" >"$log" &
ledger=$!
trap 'kill $ledger 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do
  grep -q listening "$log" && break
  kill -0 "$ledger" 2>/dev/null || { echo "the ledger exited; see the lines above" >&2; exit 1; }
  sleep 0.1
done
cat "$log"
"$bin" attach --check
echo "ledger running (pid $ledger); Ctrl-C to stop"
wait "$ledger"
