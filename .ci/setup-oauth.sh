# Sourced by .ci/run (and usable by hand: `source .ci/setup-oauth.sh`): installs what the OAuth tests of
# `reins mcp login` need — a real authorization server (oidc-provider) and the official MCP TypeScript SDK for the
# protected MCP server in crates/reins-cli/tests/oauth/fixture.mjs — into the CI cache, and exports where it is.
# Idempotent: a second run installs nothing. Nothing is started here: each test starts its own fixture on
# 127.0.0.1 and stops it by PID.
#   REINS_OAUTH_NODE_MODULES  node_modules holding oidc-provider, jose and @modelcontextprotocol/sdk
_reins_oauth_setup() {
    local cache="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/oauth"
    local provider_version="9.13.3" sdk_version="1.32.2" jose_version="6.2.18"
    mkdir -p "$cache" || return 1
    local stamp="$cache/.installed-$provider_version-$sdk_version-$jose_version"
    if [ ! -f "$stamp" ]; then
        echo "setup-oauth: installing oidc-provider and the MCP SDK with npm into $cache" >&2
        (cd "$cache" && npm install --no-audit --no-fund --loglevel=error --prefix "$cache" \
            "oidc-provider@$provider_version" \
            "@modelcontextprotocol/sdk@$sdk_version" \
            "jose@$jose_version" >&2) || return 1
        touch "$stamp"
    fi
    export REINS_OAUTH_NODE_MODULES="$cache/node_modules"
}
_reins_oauth_setup || echo "setup-oauth: installing the OAuth test servers failed; the OAuth tests will say what is missing" >&2
unset -f _reins_oauth_setup
