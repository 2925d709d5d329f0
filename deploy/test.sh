#!/usr/bin/env bash
# Sets everything up on a Debian 12 machine (as root) and runs Strata's default tests:
#   1. installs the Debian packages the build and tests need (deploy/install-deps.sh);
#   2. builds with gcc under AddressSanitizer + UndefinedBehaviorSanitizer (build/test)
#      and runs the unit, integration and conformance suites;
#   3. builds the libFuzzer harnesses with clang (build/fuzz) and runs each one briefly
#      over its corpus (STRATA_FUZZ_SECONDS each, default 20), one harness per core at a
#      time.
# Ends with one line "tests: N passed, N failed" and exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

bash deploy/install-deps.sh

jobs=$(nproc)
passed=0
failed=0

# Reads meson's test summary ("Ok:", "Fail:", "Timeout:", ...) into the totals.
count_meson_results() {
    local log=$1 ok fail
    # "Expected Fail" tests pass when the failure they expect happens.
    ok=$(awk '/^(Ok|Expected Fail):/ {s += $NF} END {print s + 0}' "$log")
    fail=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $NF} END {print s + 0}' "$log")
    passed=$((passed + ${ok:-0}))
    failed=$((failed + ${fail:-0}))
}

echo "== build (gcc, ASan + UBSan)"
if [ ! -f build/test/build.ninja ]; then
    meson setup build/test -Db_sanitize=address,undefined -Db_lundef=false
fi
ninja -C build/test -j "$jobs"

echo "== unit, integration and conformance tests"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
meson test -C build/test --print-errorlogs --num-processes "$jobs" 2>&1 | tee build/test/meson-test.out
meson_status=${PIPESTATUS[0]}
set -e
count_meson_results build/test/meson-test.out
# meson failing without a summary (a crash, a configure error) must not pass silently.
if [ "$meson_status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    echo "meson test exited with status $meson_status"
    failed=$((failed + 1))
fi

echo "== fuzz harnesses (clang, libFuzzer, ${STRATA_FUZZ_SECONDS:-20} s each)"
if [ ! -f build/fuzz/build.ninja ]; then
    CC=clang meson setup build/fuzz -Dfuzz=true -Dbench=false \
        -Db_sanitize=address,undefined -Db_lundef=false
fi
ninja -C build/fuzz -j "$jobs"
fuzz_status=0
bash tests/fuzz/run.sh build/fuzz "${STRATA_FUZZ_SECONDS:-20}" >build/fuzz/fuzz-run.out 2>&1 ||
    fuzz_status=$?
cat build/fuzz/fuzz-run.out | grep -E '^fuzz:' || true
fz_ok=$(grep -c '^fuzz: ok' build/fuzz/fuzz-run.out || true)
fz_fail=$(grep -c '^fuzz: FAIL' build/fuzz/fuzz-run.out || true)
passed=$((passed + fz_ok))
failed=$((failed + fz_fail))
if [ "$fuzz_status" -ne 0 ] && [ "$fz_fail" -eq 0 ]; then
    tail -5 build/fuzz/fuzz-run.out
    failed=$((failed + 1))
fi

echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
