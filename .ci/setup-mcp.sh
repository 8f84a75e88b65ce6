# Sourced by .ci/run (and usable by hand: `source .ci/setup-mcp.sh`): installs the real MCP servers that the
# reins-mcp tests talk to, into the CI cache, and exports where they are. Idempotent: a second run installs nothing.
#   REINS_MCP_NODE_MODULES  node_modules holding @modelcontextprotocol/server-filesystem and server-everything
#   REINS_MCP_PYTHON        a Python interpreter with the PyPI `mcp` package (2.3.0: speaks 2026-07-28)
#   REINS_MCP_PYTHON_V1     one with `mcp` 1.30.0 (the 2025-11-25 era), in the venv `venv-1` beside it
#   REINS_MCP_INSPECTOR     the official MCP Inspector's command (its CLI mode drives `reins mcp serve`)
_reins_mcp_setup() {
    local cache="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/mcp"
    local npm_dir="$cache/npm"
    local venv="$cache/venv"
    local fs_version="2026.8.31" everything_version="2026.8.31" mcp_py_version="2.3.0"
    mkdir -p "$npm_dir" || return 1
    local stamp="$npm_dir/.installed-$fs_version-$everything_version"
    if [ ! -f "$stamp" ]; then
        echo "setup-mcp: installing MCP servers with npm into $npm_dir" >&2
        (cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error --prefix "$npm_dir" \
            "@modelcontextprotocol/server-filesystem@$fs_version" \
            "@modelcontextprotocol/server-everything@$everything_version" >&2) || return 1
        touch "$stamp"
    fi
    local pystamp="$venv/.installed-mcp-$mcp_py_version"
    if [ ! -f "$pystamp" ]; then
        echo "setup-mcp: installing the Python mcp package into $venv" >&2
        python3 -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$mcp_py_version" >&2 || return 1
        touch "$pystamp"
    fi
    # A Python server of the earlier revision: mcp 1.30.0 speaks 2025-11-25 (2.x speaks 2026-07-28).
    local venv_v1="$cache/venv-1" mcp_py_v1_version="1.30.0"
    if [ ! -f "$venv_v1/.installed-mcp-$mcp_py_v1_version" ]; then
        echo "setup-mcp: installing the Python mcp package $mcp_py_v1_version into $venv_v1" >&2
        python3 -m venv "$venv_v1" || return 1
        "$venv_v1/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$mcp_py_v1_version" >&2 || return 1
        touch "$venv_v1/.installed-mcp-$mcp_py_v1_version"
    fi
    export REINS_MCP_PYTHON_V1="$venv_v1/bin/python"
    local inspector_version="2.12.0" inspector_dir="$cache/inspector"
    if [ ! -f "$inspector_dir/.installed-$inspector_version" ]; then
        echo "setup-mcp: installing the MCP Inspector with npm into $inspector_dir" >&2
        mkdir -p "$inspector_dir" || return 1
        (cd "$inspector_dir" && npm install --no-audit --no-fund --loglevel=error --prefix "$inspector_dir" \
            "@modelcontextprotocol/inspector@$inspector_version" >&2) || return 1
        touch "$inspector_dir/.installed-$inspector_version"
    fi
    export REINS_MCP_INSPECTOR="$inspector_dir/node_modules/.bin/mcp-inspector"
    export REINS_MCP_NODE_MODULES="$npm_dir/node_modules"
    export REINS_MCP_PYTHON="$venv/bin/python"
}
_reins_mcp_setup || echo "setup-mcp: installing the MCP test servers failed; the reins-mcp tests will say what is missing" >&2
unset -f _reins_mcp_setup
