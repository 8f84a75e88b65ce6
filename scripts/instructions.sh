#!/usr/bin/env bash
# Instructions per step of the engine, counted by valgrind's callgrind: deterministic for one binary, whatever
# else the machine is doing, so two builds can be compared on a busy machine. Prints one line per figure
# (W1, W1-context, W1-observer, W1-observer-read; or the figures given as arguments) and each figure's ratio to W1.
#
#   scripts/instructions.sh                  # builds the harness bench (release) and counts
#   scripts/instructions.sh W1 W1-observer   # only these figures
#   HARNESS=path/to/harness scripts/instructions.sh   # count an already built bench binary (e.g. an older one)
#
# How: the bench runs with REINS_BENCH_QUICK=1 (each W1 figure is one warm-up run and four timed runs of
# 1000 steps: STEPS below) and REINS_BENCH_WALL=1 (valgrind cannot read the thread clock); only the
# instructions inside the runtime's block_on are collected, so building the agent and the script before the
# runs and the process's start-up are left out.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=5000 # 5 runs x 1000 steps per W1 figure in quick mode (crates/reins/benches/harness.rs: w1, reps)

command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind (Debian: apt-get install valgrind)" >&2; exit 2; }

harness="${HARNESS:-}"
if [ -z "$harness" ]; then
    harness="$(cargo bench -p reins --bench harness --no-run --message-format=json 2>/dev/null |
        grep -o '"executable":"[^"]*/harness-[^"]*"' | tail -n 1 | cut -d'"' -f4)"
fi
[ -x "$harness" ] || { echo "instructions.sh: no harness bench binary (${harness:-none found})" >&2; exit 2; }

figures=("$@")
[ ${#figures[@]} -gt 0 ] || figures=(W1 W1-context W1-observer W1-observer-read)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

base=""
for fig in "${figures[@]}"; do
    REINS_BENCH_QUICK=1 REINS_BENCH_WALL=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
        --toggle-collect='*Runtime*block_on*' "$harness" "$fig\$" >"$tmp/stdout" 2>"$tmp/stderr" ||
        { cat "$tmp/stderr" >&2; exit 1; }
    grep -q "\"id\":\"$fig\"" "$tmp/stdout" || { echo "instructions.sh: the bench has no figure $fig" >&2; exit 2; }
    total="$(grep -E '^(summary|totals):' "$tmp/cg.out" | head -n 1 | awk '{print $2}')"
    per_step=$((total / STEPS))
    [ -n "$base" ] || base="$per_step"
    ratio="$(awk -v a="$per_step" -v b="$base" 'BEGIN { printf "%.3f", a / b }')"
    printf '%-14s %8d instructions/step  (%s x %s)\n' "$fig" "$per_step" "$ratio" "${figures[0]}"
done
