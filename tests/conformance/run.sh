#!/bin/bash
# Conformance suite: real AWS clients (boto3, AWS CLI) against a DynamoDB endpoint.
#
#   run.sh <stratad-binary> [pytest args]    start stratad on a free loopback port with a
#                                            fresh data dir, run the suite, stop stratad
#   run.sh --endpoint URL [--target NAME] [pytest args]
#                                            run against an endpoint that is already up
#                                            (NAME: dynalite | dynamodb | stratad;
#                                            detected when omitted)
#
# Exits non-zero when a test fails, when stratad does not come up, or when it crashes
# (dies during the run, exits badly on SIGTERM, or logs a sanitizer report).
set -u

here=$(cd "$(dirname "$0")" && pwd)
# Debian's interpreter: it has python3-pytest and python3-boto3 (the python3 first on
# PATH may be another installation without them).
PYTHON=/usr/bin/python3
START_DEADLINE_S=${STRATAD_START_DEADLINE_S:-60}
STOP_DEADLINE_S=${STRATAD_STOP_DEADLINE_S:-30}

usage() {
    echo "usage: $0 <stratad-binary> [pytest args] | $0 --endpoint URL [--target NAME] [pytest args]" >&2
    exit 2
}

run_pytest() {
    cd "$here" || return 2
    # No bytecode or cache files in the source tree.
    PYTHONDONTWRITEBYTECODE=1 CONFORMANCE_ENDPOINT="$1" "$PYTHON" -m pytest \
        -p no:cacheprovider --rootdir "$here" -c /dev/null -q -rfEsxX "${@:2}"
}

[ $# -ge 1 ] || usage

if [ "$1" = --endpoint ]; then
    [ $# -ge 2 ] || usage
    endpoint=$2
    shift 2
    if [ "${1:-}" = --target ]; then
        [ $# -ge 2 ] || usage
        export CONFORMANCE_TARGET=$2
        shift 2
    fi
    run_pytest "$endpoint" "$@"
    exit $?
fi

bin=$1
shift
[ -x "$bin" ] || { echo "run.sh: $bin is not an executable" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-conformance.XXXXXX")
log="$tmp/stratad.log"
pid=

cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
    echo "run.sh: $*" >&2
    echo "---- stratad log (last 50 lines) ----" >&2
    tail -n 50 "$log" >&2
    exit 1
}

mkdir -p "$tmp/data"
"$bin" --listen 127.0.0.1:0 --data-dir "$tmp/data" >"$log" 2>&1 &
pid=$!

# Wait for the "serving on" line, then for GET / to answer 200; poll with a deadline.
deadline=$((SECONDS + START_DEADLINE_S))
url=
while :; do
    url=$(sed -n 's/.*stratad: serving on \(http:\/\/[0-9.]*:[0-9]*\).*/\1/p' "$log" | head -n 1)
    if [ -n "$url" ] && curl -s -o /dev/null -m 2 -w '%{http_code}' "$url/" | grep -q '^200$'; then
        break
    fi
    kill -0 "$pid" 2>/dev/null || fail "stratad exited before it became healthy"
    [ $SECONDS -lt $deadline ] || fail "stratad not healthy after ${START_DEADLINE_S}s"
    sleep 0.05
done
echo "run.sh: stratad (pid $pid) healthy at $url"

export CONFORMANCE_TARGET=${CONFORMANCE_TARGET:-stratad}
run_pytest "$url" "$@"
rc=$?

crashed=0
if ! kill -0 "$pid" 2>/dev/null; then
    echo "run.sh: stratad died during the run" >&2
    crashed=1
else
    kill -TERM "$pid"
    deadline=$((SECONDS + STOP_DEADLINE_S))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "run.sh: stratad did not exit ${STOP_DEADLINE_S}s after SIGTERM" >&2
        crashed=1
    fi
fi
if [ $crashed = 0 ]; then
    wait "$pid"
    status=$?
    pid=
    # stratad handles SIGTERM and must exit 0; 143 would mean it died of the signal
    # without closing its engine and log.
    if [ $status != 0 ]; then
        echo "run.sh: stratad exited with status $status" >&2
        crashed=1
    fi
fi
if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log"; then
    echo "run.sh: sanitizer report in the stratad log" >&2
    crashed=1
fi
if [ $crashed = 1 ]; then
    fail "stratad crashed or misbehaved"
fi
exit $rc
