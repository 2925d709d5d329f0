#!/usr/bin/env bash
# Runs every libFuzzer harness built in BUILD_DIR for SECONDS each, over its seed corpus
# (tests/fuzz/<name>/corpus). New inputs go to a scratch copy, never into the repo.
# JOBS harnesses run at once (default: one per core; each harness is one process on one
# core, so every harness gets its SECONDS of a whole core whatever JOBS is).
# Prints "fuzz: ok <name>" or "fuzz: FAIL <name>" per harness, in name order; exits
# non-zero on a failure.
#   tests/fuzz/run.sh BUILD_DIR [SECONDS] [JOBS]     (long run: SECONDS=3600)
set -uo pipefail
build=${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS] [JOBS]}
seconds=${2:-20}
jobs=${3:-$(nproc)}
src=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Runs one harness; its verdict goes to $scratch/<name>/result, its report to .../report.
run_one() {
    local exe=$1 name dir out seeds=() runs
    name=$(basename "$exe")
    dir=$(basename "$(dirname "$exe")")
    out=$scratch/$name
    mkdir -p "$out/corpus" "$out/artifacts"
    [ -d "$src/$dir/corpus" ] && seeds+=("$src/$dir/corpus")
    if "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/artifacts/" "$out/corpus" "${seeds[@]}" >"$out/log" 2>&1; then
        runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$out/log")
        echo "fuzz: ok $name (${runs:-?} runs in ${seconds}s)" >"$out/report"
        echo ok >"$out/result"
        return
    fi
    {
        echo "fuzz: FAIL $name"
        tail -40 "$out/log"
        for a in "$out/artifacts"/*; do
            [ -f "$a" ] && echo "  reproducer: $(basename "$a") (base64: $(head -c 2048 "$a" | base64 -w0))"
        done
    } >"$out/report"
    echo fail >"$out/result"
}

names=()
running=0
for exe in "$build"/tests/fuzz/*/fuzz_*; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    names+=("$(basename "$exe")")
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    run_one "$exe" &
    running=$((running + 1))
done
wait
if [ "${#names[@]}" -eq 0 ]; then
    echo "fuzz: no harness built in $build"
    exit 1
fi

status=0
for name in "${names[@]}"; do
    if [ -f "$scratch/$name/report" ]; then
        cat "$scratch/$name/report"
    else
        echo "fuzz: FAIL $name (the runner left no report)"
    fi
    [ "$(cat "$scratch/$name/result" 2>/dev/null)" = ok ] || status=1
done
exit $status
