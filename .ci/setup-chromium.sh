# Sourced by .ci/run (and usable by hand: `source .ci/setup-chromium.sh`): installs Debian's `chromium` for the
# reins-view browser tests (headless: the session page loaded from file://, its DOM dumped, a screenshot taken).
# Idempotent: a stamp in the CI cache records the install; a second run installs nothing.
#   REINS_CHROMIUM  the chromium binary
# Installing needs root (apt-get); the tests run it headless with --no-sandbox (as root the sandbox refuses).
_reins_chromium_setup() {
    local cache="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/chromium"
    local stamp="$cache/.installed"
    mkdir -p "$cache" || return 1
    local bin
    bin="$(command -v chromium || true)"
    if [ -z "$bin" ] || [ ! -f "$stamp" ]; then
        if [ -z "$bin" ]; then
            echo "setup-chromium: installing Debian's chromium with apt-get" >&2
            local sudo=""
            [ "$(id -u)" -eq 0 ] || sudo="sudo"
            $sudo apt-get update -qq >&2 || return 1
            DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2 \
                || return 1
            bin="$(command -v chromium)" || return 1
        fi
        "$bin" --version > "$stamp" 2>/dev/null || return 1
    fi
    [ "$(cat "$cache/path" 2>/dev/null)" = "$bin" ] || echo "$bin" > "$cache/path" || return 1
    export REINS_CHROMIUM="$bin"
}
_reins_chromium_setup || echo "setup-chromium: installing chromium failed; the reins-view browser tests will say what is missing" >&2
unset -f _reins_chromium_setup
