# Sourced by .ci/run (and usable by hand: `source .ci/setup-restate.sh`): installs the Restate server that the
# reins-restate tests start (as a real process bound to 127.0.0.1), into the CI cache, and exports where it is.
# Idempotent: a second run installs nothing.
#   REINS_RESTATE_SERVER  the restate-server binary itself (a static binary; not the node wrapper that spawns it,
#                         so that a test's PID is the server's)
_reins_restate_setup() {
    local cache="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/restate"
    local version="1.7.12"
    mkdir -p "$cache" || return 1
    local stamp="$cache/.installed-$version"
    if [ ! -f "$stamp" ]; then
        echo "setup-restate: installing @restatedev/restate-server@$version with npm into $cache" >&2
        (cd "$cache" && npm install --no-audit --no-fund --loglevel=error --prefix "$cache" \
            "@restatedev/restate-server@$version" >&2) || return 1
        touch "$stamp"
    fi
    local bin
    bin="$(cd "$cache" && node -p 'require.resolve("@restatedev/restate-server-linux-x64/bin/restate-server")' 2>/dev/null)" || return 1
    [ -x "$bin" ] || { echo "setup-restate: $bin is not an executable" >&2; return 1; }
    export REINS_RESTATE_SERVER="$bin"
}
_reins_restate_setup || echo "setup-restate: installing the Restate server failed; the reins-restate tests will say what is missing" >&2
unset -f _reins_restate_setup
