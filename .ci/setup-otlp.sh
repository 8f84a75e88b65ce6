# Sourced by .ci/run (and usable by hand: `source .ci/setup-otlp.sh`): installs what the OTLP receiver process of the
# reins-cli tests (crates/reins-cli/tests/otlp/receiver.py, gRPC and HTTP on 127.0.0.1) runs on, into the CI cache,
# and exports where it is. Idempotent: a second run installs nothing.
#   REINS_OTLP_PYTHON  a Python interpreter with the PyPI `grpcio` and `opentelemetry-proto` packages
_reins_otlp_setup() {
    local venv="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/otlp/venv"
    local grpcio_version="1.85.1" proto_version="1.45.2"
    local stamp="$venv/.installed-$grpcio_version-$proto_version"
    if [ ! -f "$stamp" ]; then
        echo "setup-otlp: installing grpcio and opentelemetry-proto into $venv" >&2
        python3 -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            "grpcio==$grpcio_version" "opentelemetry-proto==$proto_version" >&2 || return 1
        touch "$stamp"
    fi
    export REINS_OTLP_PYTHON="$venv/bin/python"
}
_reins_otlp_setup || echo "setup-otlp: installing the OTLP receiver's packages failed; the reins-cli OTLP tests will say what is missing" >&2
unset -f _reins_otlp_setup
