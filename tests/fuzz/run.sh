#!/usr/bin/env bash
# Runs every libFuzzer harness built in BUILD_DIR for SECONDS each, over its seed corpus
# (tests/fuzz/<name>/corpus). New inputs go to a scratch copy, never into the repo.
# Prints "fuzz: ok <name>" or "fuzz: FAIL <name>" per harness; exits non-zero on a failure.
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]     (long run: SECONDS=3600)
set -uo pipefail
build=${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]}
seconds=${2:-20}
src=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
found=0
for exe in "$build"/tests/fuzz/*/fuzz_*; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    found=1
    name=$(basename "$exe")
    dir=$(basename "$(dirname "$exe")")
    mkdir -p "$scratch/$name/corpus" "$scratch/$name/artifacts"
    seeds=()
    [ -d "$src/$dir/corpus" ] && seeds+=("$src/$dir/corpus")
    if "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$scratch/$name/artifacts/" "$scratch/$name/corpus" "${seeds[@]}" \
        >"$scratch/$name/log" 2>&1; then
        runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$scratch/$name/log")
        echo "fuzz: ok $name (${runs:-?} runs in ${seconds}s)"
    else
        echo "fuzz: FAIL $name"
        tail -40 "$scratch/$name/log"
        for a in "$scratch/$name/artifacts"/*; do
            [ -f "$a" ] && echo "  reproducer: $(basename "$a") (base64: $(head -c 2048 "$a" | base64 -w0))"
        done
        status=1
    fi
done
if [ "$found" -eq 0 ]; then
    echo "fuzz: no harness built in $build"
    exit 1
fi
exit $status
