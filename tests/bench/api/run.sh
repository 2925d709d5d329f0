#!/bin/bash
# API benchmark: PutItem and GetItem through wrk against stratad and dynalite in one run.
#
#   tests/bench/api/run.sh <stratad-binary> [RUNS] [DURATION]
#
# Uses the shared wrk scripts in <repo>/../shared/bench (preload.py, ddb-put.lua,
# ddb-get.lua). For every operation and connection count (1, 16, 64) it alternates
# stratad and dynalite RUNS times (default 3) for DURATION each (default 10s), then
# prints the median throughput and p50/p99 latency of each and the stratad/dynalite ratio,
# then the floors at 1 connection: GET / (health.lua, no work) and fdatasync alone.
# Environment: KEYS (default 10000), VALSIZE (default 100), DYNALITE_DIR (where dynalite
# is installed if missing; default $TMPDIR/strata-bench-dynalite, outside the repo),
# CONSISTENT=1 for strongly consistent GetItem.
set -u

usage() { echo "usage: $0 <stratad-binary> [RUNS] [DURATION]" >&2; exit 2; }
[ $# -ge 1 ] || usage
stratad_bin=$1
runs=${2:-3}
duration=${3:-10s}
[ -x "$stratad_bin" ] || { echo "$0: $stratad_bin is not an executable" >&2; exit 2; }
command -v wrk >/dev/null || { echo "$0: wrk not installed (Debian package wrk)" >&2; exit 2; }
command -v node >/dev/null || { echo "$0: node not installed" >&2; exit 2; }

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || exit 2
shared="$repo/../shared/bench"
for f in preload.py ddb-common.lua ddb-put.lua ddb-get.lua; do
    [ -f "$shared/$f" ] || { echo "$0: missing $shared/$f" >&2; exit 2; }
done
export WRKDIR=$shared TABLE=bench KEYS=${KEYS:-10000} VALSIZE=${VALSIZE:-100}

dynalite_dir=${DYNALITE_DIR:-${TMPDIR:-/tmp}/strata-bench-dynalite}
dynalite_cli="$dynalite_dir/node_modules/dynalite/cli.js"
if [ ! -f "$dynalite_cli" ]; then
    echo "installing dynalite into $dynalite_dir"
    mkdir -p "$dynalite_dir" && npm install --prefix "$dynalite_dir" --no-audit --no-fund \
        dynalite@3 >/dev/null || { echo "$0: npm install dynalite failed" >&2; exit 1; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-bench-api.XXXXXX")
stratad_pid=
dynalite_pid=
cleanup() {
    for p in $stratad_pid $dynalite_pid; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in $stratad_pid $dynalite_pid; do
        wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Poll GET / until it answers 200, with a deadline.
wait_healthy() {
    local url=$1 pid=$2 deadline=$((SECONDS + 60))
    until [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$url/")" = 200 ]; do
        kill -0 "$pid" 2>/dev/null || { echo "$0: server for $url exited" >&2; return 1; }
        [ $SECONDS -lt $deadline ] || { echo "$0: $url not healthy in 60s" >&2; return 1; }
        sleep 0.05
    done
}

ddb_call() {   # ddb_call URL OPERATION JSON
    curl -s -m 30 -X POST "$1/" -H 'Content-Type: application/x-amz-json-1.0' \
        -H "X-Amz-Target: DynamoDB_20120810.$2" -H 'X-Amz-Date: 20261202T000000Z' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=AKID/20261202/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc' \
        -d "$3"
}

create_bench_table() {
    local url=$1 deadline=$((SECONDS + 60))
    ddb_call "$url" CreateTable '{"TableName":"bench","AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}],"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"BillingMode":"PAY_PER_REQUEST"}' >/dev/null
    until ddb_call "$url" DescribeTable '{"TableName":"bench"}' | grep -Eq '"TableStatus": *"ACTIVE"'; do
        [ $SECONDS -lt $deadline ] || { echo "$0: table bench not ACTIVE at $url" >&2; return 1; }
        sleep 0.05
    done
}

# stratad on a free port with a fresh data dir.
mkdir -p "$tmp/stratad-data"
# --throttle false: dynalite never throttles; measure the server, not DynamoDB's limits.
"$stratad_bin" --listen 127.0.0.1:0 --data-dir "$tmp/stratad-data" --throttle false \
    >"$tmp/stratad.log" 2>&1 &
stratad_pid=$!
deadline=$((SECONDS + 60))
stratad_url=
until [ -n "$stratad_url" ]; do
    stratad_url=$(sed -n 's/.*stratad: serving on \(http:\/\/[0-9.]*:[0-9]*\).*/\1/p' "$tmp/stratad.log" | head -n 1)
    kill -0 "$stratad_pid" 2>/dev/null || { cat "$tmp/stratad.log" >&2; exit 1; }
    [ $SECONDS -lt $deadline ] || { echo "$0: stratad did not start" >&2; exit 1; }
    [ -n "$stratad_url" ] || sleep 0.05
done
wait_healthy "$stratad_url" "$stratad_pid" || exit 1

# dynalite (in memory) on a free port.
dynalite_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
node "$dynalite_cli" --host 127.0.0.1 --port "$dynalite_port" --createTableMs 0 \
    >"$tmp/dynalite.log" 2>&1 &
dynalite_pid=$!
dynalite_url="http://127.0.0.1:$dynalite_port"
wait_healthy "$dynalite_url" "$dynalite_pid" || exit 1

for target in stratad dynalite; do
    url_var=${target}_url
    create_bench_table "${!url_var}" || exit 1
    /usr/bin/python3 "$shared/preload.py" "${!url_var}" bench "$KEYS" "$VALSIZE" >/dev/null \
        || { echo "$0: preload into $target failed" >&2; exit 1; }
done

echo "stratad $stratad_url vs dynalite $dynalite_url: $runs runs x $duration, KEYS=$KEYS VALSIZE=$VALSIZE"
results="$tmp/results"
: >"$results"
here=$(cd "$(dirname "$0")" && pwd)
cd "$shared" || exit 2
for op in put get health; do
    conns="1 16 64"; script="$shared/ddb-$op.lua"
    [ $op = health ] && conns=1 script="$here/health.lua"
    for c in $conns; do
        t=2; [ $c = 1 ] && t=1
        for r in $(seq "$runs"); do
            # Alternate the two servers so that noise on the shared machine hits both.
            for target in stratad dynalite; do
                url_var=${target}_url
                line=$(wrk -t$t -c$c -d"$duration" --latency -s "$script" "${!url_var}" | grep '^SUMMARY')
                echo "$op c=$c run$r $target: $line"
                echo "$op $c $target $line" >>"$results"
            done
        done
    done
done

kill -0 "$stratad_pid" 2>/dev/null || { echo "$0: stratad died during the benchmark" >&2; exit 1; }

# fdatasync alone on the disk of stratad's data dir: 4 KiB appends into a preallocated,
# zero-filled file, as the log writes them. A PutItem at one connection waits for one.
sync_us=$(/usr/bin/python3 - "$tmp/stratad-data" <<'PY'
import os, statistics, sys, tempfile, time
fd, path = tempfile.mkstemp(dir=sys.argv[1])
try:
    os.write(fd, bytes(8 << 20))
    os.fsync(fd)
    block, times = b"x" * 4096, []
    for i in range(1000):
        t = time.perf_counter()
        os.pwrite(fd, block, i * 4096)
        os.fdatasync(fd)
        times.append(time.perf_counter() - t)
    print("%.0f" % (statistics.median(times) * 1e6))
finally:
    os.close(fd)
    os.unlink(path)
PY
)
echo "sync $sync_us" >>"$results"

echo
/usr/bin/python3 - "$results" <<'PY'
import re, statistics, sys
rows = {}
sync_us = None
for line in open(sys.argv[1]):
    if line.startswith("sync "):
        sync_us = float(line.split()[1])
        continue
    op, c, target, rest = line.split(" ", 3)
    m = dict(re.findall(r"(req/s|p50|p99)=([0-9.]+)", rest))
    err = re.search(r"=(\d+)/(\d+)/(\d+)/(\d+)/(\d+)", rest)
    errors = sum(int(x) for x in err.groups()) if err else -1
    r = rows.setdefault((op, int(c), target), {"rps": [], "p50": [], "p99": [], "err": 0})
    r["rps"].append(float(m.get("req/s", 0)))
    r["p50"].append(float(m.get("p50", 0)))
    r["p99"].append(float(m.get("p99", 0)))
    r["err"] += errors
hdr = "%-8s %5s | %10s %8s %8s %6s | %10s %8s %8s %6s | %7s %7s" % (
    "op", "conns", "stratad/s", "p50 ms", "p99 ms", "errors", "dynalite/s", "p50 ms", "p99 ms",
    "errors", "ratio", "p99 rat")
print("medians of each metric over the runs; ratio = stratad req/s / dynalite req/s")
print(hdr)
print("-" * len(hdr))
for op in ("put", "get"):
    for c in (1, 16, 64):
        s, d = rows.get((op, c, "stratad")), rows.get((op, c, "dynalite"))
        if not s or not d:
            continue
        med = lambda r, k: statistics.median(r[k])
        ratio = med(s, "rps") / med(d, "rps") if med(d, "rps") else float("nan")
        p99r = med(s, "p99") / med(d, "p99") if med(d, "p99") else float("nan")
        print("%-8s %5d | %10.0f %8.2f %8.2f %6d | %10.0f %8.2f %8.2f %6d | %7.2f %7.2f" % (
            {"put": "PutItem", "get": "GetItem"}[op], c,
            med(s, "rps"), med(s, "p50"), med(s, "p99"), s["err"],
            med(d, "rps"), med(d, "p50"), med(d, "p99"), d["err"], ratio, p99r))

# What one connection allows at all: a request is one round trip, and a durable write
# one fdatasync more. Goals above these floors cannot be met by any server on this box.
h, g, p = rows.get(("health", 1, "stratad")), rows.get(("get", 1, "dynalite")), \
    rows.get(("put", 1, "dynalite"))
print()
print("floors at 1 connection:")
if h:
    hd = rows.get(("health", 1, "dynalite"))
    print("  GET / (answered with no work): stratad %.0f/s, dynalite %.0f/s" % (
        statistics.median(h["rps"]), statistics.median(hd["rps"]) if hd else float("nan")))
    if g:
        print("  GetItem 3x dynalite needs %.0f/s" % (3 * statistics.median(g["rps"])))
if sync_us:
    print("  fdatasync alone: %.0f us median, at most %.0f durable writes/s one after another"
          % (sync_us, 1e6 / sync_us))
    if h:
        rt_us = 1e6 / statistics.median(h["rps"])
        print("  round trip + fdatasync: %.0f + %.0f us, at most %.0f PutItem/s" % (
            rt_us, sync_us, 1e6 / (rt_us + sync_us)))
    if p:
        print("  PutItem 2x dynalite needs %.0f/s" % (2 * statistics.median(p["rps"])))
PY
