#!/bin/bash
# Cluster benchmark: a 3-node Strata cluster vs a 3-member etcd vs dynalite, in one run.
#
#   tests/bench/cluster/run.sh <stratad-binary> [RUNS] [DURATION]
#
# Starts, on loopback: one 3-node Strata cluster per entry of PARTS (default "4 64": the
# partitions of a new table, --initial-partitions on every node), a 3-member etcd with the
# shared etcd-start.sh, and dynalite (in memory). Creates table `bench` (hash key pk, S, on
# demand) through the DynamoDB API, waits until every partition has a leader, preloads KEYS
# items. Then, for each connection count in CONNS (default "1 16 64") and RUNS times
# (default 3) for DURATION each (default 5s), alternating the systems so that noise on the
# shared machine hits all of them, it runs wrk with the shared scripts:
#   put:    Strata PutItem        | etcd put                    | dynalite PutItem
#   get:    Strata GetItem        | etcd serializable range     | dynalite GetItem
#   strong: Strata GetItem strong | etcd linearizable range
# Strata and etcd both ONE endpoint (node 1 / member 1) and, with SPREAD=1 (default), all
# three endpoints at once (one wrk per endpoint, the connections split among them, req/s
# summed, p50/p99 the worst of the three). Finally it prints medians over the runs and the
# ratios of the goals at 64 connections.
#
# Environment: KEYS (default 10000), VALSIZE (default 100), CONNS, PARTS, SPREAD,
# DYNALITE_DIR (dynalite is taken from there, else /tmp/peer, else installed with npm into
# $TMPDIR/strata-bench-dynalite), ETCD=0 / DYNALITE=0 to leave a peer out, KEEP=1 keeps the
# temp dir (logs, raw results), PROFILE="put get strong" profiles Strata instead (README.md).
# Everything it started is stopped on exit, also on failure.
set -u

usage() { echo "usage: $0 <stratad-binary> [RUNS] [DURATION]" >&2; exit 2; }
[ $# -ge 1 ] || usage
stratad_bin=$(realpath -e "$1" 2>/dev/null) || { echo "$0: no such file $1" >&2; exit 2; }
runs=${2:-3}
duration=${3:-5s}
[ -x "$stratad_bin" ] || { echo "$0: $stratad_bin is not an executable" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || usage
for tool in wrk curl ss; do
    command -v $tool >/dev/null || { echo "$0: $tool not installed" >&2; exit 2; }
done
py=/usr/bin/python3
conns=${CONNS:-1 16 64}
parts_list=${PARTS:-4 64}
spread=${SPREAD:-1}
use_etcd=${ETCD:-1}
use_dynalite=${DYNALITE:-1}
# PROFILE="put get strong": measure Strata alone (see profile_one).
[ -z "${PROFILE:-}" ] || { use_etcd=0; use_dynalite=0; }
[ "$use_etcd" = 0 ] || command -v etcd >/dev/null ||
    { echo "$0: etcd not installed (STRATA_BENCH_DEPS=1 deploy/install-deps.sh, or ETCD=0)" >&2; exit 2; }
[ "$use_dynalite" = 0 ] || command -v node >/dev/null ||
    { echo "$0: node not installed (or DYNALITE=0)" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
shared=$(realpath -m "$here/../../../../shared/bench")
for f in preload.py ddb-common.lua ddb-put.lua ddb-get.lua etcd-put.lua etcd-range.lua \
         etcd-start.sh etcd-stop.sh; do
    [ -f "$shared/$f" ] || { echo "$0: missing $shared/$f" >&2; exit 2; }
done
export WRKDIR=$shared TABLE=bench KEYS=${KEYS:-10000} VALSIZE=${VALSIZE:-100}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-bench-cluster.XXXXXX") || exit 2
declare -A node_pid=()  # "P:i" -> pid of node i of the cluster with P partitions
declare -A node_port=() # "P:i" -> client port
dynalite_pid=
etcd_started=0
wrk_pids=()

log() { printf '%s %s\n' "$(date -u +%T)" "$*" >&2; }

# SIGTERM to all, then SIGKILL to those still alive after one shared deadline; reports a
# process that exits with an error.
stop_pids() {   # stop_pids NAME=PID...
    local np deadline=$((SECONDS + ${STOP_TIMEOUT:-20})) rc
    for np in "$@"; do kill -TERM "${np#*=}" 2>/dev/null; done
    for np in "$@"; do
        while kill -0 "${np#*=}" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        if kill -0 "${np#*=}" 2>/dev/null; then
            log "${np%%=*} did not stop within ${STOP_TIMEOUT:-20}s of SIGTERM: SIGKILL"
            kill -KILL "${np#*=}" 2>/dev/null
        fi
        rc=0; wait "${np#*=}" 2>/dev/null || rc=$?
        # stratad handles SIGTERM and exits 0; dynalite dies of it (143).
        [ $rc = 0 ] || { [ $rc = 143 ] && [ "${np%%=*}" = dynalite ]; } ||
            log "${np%%=*} exited with status $rc"
    done
}

cleanup() {
    trap - EXIT INT TERM
    local p k stop=()
    for p in "${wrk_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for k in "${!node_pid[@]}"; do stop+=("stratad-$k=${node_pid[$k]}"); done
    [ -z "$dynalite_pid" ] || stop+=("dynalite=$dynalite_pid")
    [ ${#stop[@]} = 0 ] || stop_pids "${stop[@]}"
    if [ $etcd_started = 1 ]; then
        "$shared/etcd-stop.sh" "$tmp/etcd" >/dev/null 2>&1
    fi
    if [ "${KEEP:-0}" = 1 ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# N free loopback ports, all bound at once so that they are distinct.
free_ports() {
    "$py" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

port_taken() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

ddb_call() {   # ddb_call URL OPERATION JSON
    curl -s -m 30 -X POST "$1/" -H 'Content-Type: application/x-amz-json-1.0' \
        -H "X-Amz-Target: DynamoDB_20120810.$2" -H 'X-Amz-Date: 20261202T000000Z' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=AKID/20261202/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc' \
        -d "$3"
}

# Exits 0 when the /admin/cluster JSON on stdin says ready and (with a table name and a
# partition count) that the table has that many partitions, each with a known leader.
cluster_check() {   # cluster_check [TABLE PARTS]
    "$py" -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(1)
if not d.get("ready"):
    sys.exit(1)
if len(sys.argv) > 1:
    ps = [p for p in d.get("partitions", []) if p.get("table") == sys.argv[1]]
    if len(ps) != int(sys.argv[2]) or not all(p.get("leader") for p in ps):
        sys.exit(1)
' "$@"
}

# Polls every node of cluster P until cluster_check ARGS holds on all of them.
wait_cluster() {   # wait_cluster P WHAT [TABLE PARTS]
    local p=$1 what=$2 deadline=$((SECONDS + 90)) i ok
    shift 2
    while :; do
        ok=1
        for i in 1 2 3; do
            kill -0 "${node_pid[$p:$i]}" 2>/dev/null || {
                log "stratad $p:$i exited; its log:"; tail -n 30 "$tmp/s$p/n$i.log" >&2; return 1; }
            curl -s -m 2 "http://127.0.0.1:${node_port[$p:$i]}/admin/cluster" |
                cluster_check "$@" || ok=0
        done
        [ $ok = 1 ] && return 0
        if [ $SECONDS -ge $deadline ]; then
            log "cluster P=$p: $what not reached in 90s"
            for i in 1 2 3; do tail -n 10 "$tmp/s$p/n$i.log" >&2; done
            return 1
        fi
        sleep 0.1
    done
}

# A 3-node cluster whose new tables get P partitions: 3 AZs, hosts h1..h3, node 1 bootstraps;
# a peer secret, as the launcher gives (one HMAC per peer connection, nothing per request).
start_cluster() {   # start_cluster P
    local p=$1 i ports cport pport
    read -r -a ports <<<"$(free_ports 6)"
    mkdir -p "$tmp/s$p"
    (umask 077; head -c 32 /dev/urandom | base64 >"$tmp/s$p/peer-secret")
    for i in 1 2 3; do
        cport=${ports[$((i - 1))]}
        pport=${ports[$((i + 2))]}
        node_port[$p:$i]=$cport
        local args=(--node-id "$i" --az "az$i" --host-label "h$i"
            --listen "127.0.0.1:$cport" --peer-listen "127.0.0.1:$pport"
            --data-dir "$tmp/s$p/d$i" --initial-partitions "$p" --log-level warn
            --peer-secret-file "$tmp/s$p/peer-secret"
            --throttle false   # peers never throttle: measure the system, not the limits
            --split-heat 0)    # and a table of P partitions keeps P: no split for heat
        if [ "$i" = 1 ]; then args+=(--bootstrap --bootstrap-expect 3)
        else args+=(--join "127.0.0.1:${ports[3]}"); fi
        mkdir -p "$tmp/s$p/d$i"
        "$stratad_bin" "${args[@]}" </dev/null >"$tmp/s$p/n$i.log" 2>&1 &
        node_pid[$p:$i]=$!
    done
    wait_cluster "$p" "ready" || return 1
    local url="http://127.0.0.1:${node_port[$p:1]}" deadline=$((SECONDS + 60)) out
    until out=$(ddb_call "$url" CreateTable '{"TableName":"bench","AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}],"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"BillingMode":"PAY_PER_REQUEST"}') &&
        grep -Eq 'TableDescription|ResourceInUse' <<<"$out"; do
        [ $SECONDS -lt $deadline ] || { log "CreateTable on $url: $out"; return 1; }
        sleep 0.2
    done
    until ddb_call "$url" DescribeTable '{"TableName":"bench"}' | grep -Eq '"TableStatus": *"ACTIVE"'; do
        [ $SECONDS -lt $deadline ] || { log "table bench not ACTIVE at $url"; return 1; }
        sleep 0.1
    done
    wait_cluster "$p" "a leader for each of the $p partitions" bench "$p" || return 1
    "$py" "$shared/preload.py" "$url" bench "$KEYS" "$VALSIZE" >/dev/null ||
        { log "preload into Strata P=$p failed"; return 1; }
}

start_etcd() {
    local p deadline=$((SECONDS + 60))
    for p in 23791 23792 23793 23801 23802 23803; do
        port_taken $p && { log "port $p is taken (another etcd? ETCD=0 leaves it out)"; return 1; }
    done
    etcd_started=1
    "$shared/etcd-start.sh" "$tmp/etcd" >"$tmp/etcd-start.log" 2>&1
    until ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793 \
            endpoint health >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { log "etcd not healthy in 60s"; cat "$tmp"/etcd/m*.log >&2; return 1; }
        sleep 0.2
    done
}

start_dynalite() {
    local dir cli port deadline=$((SECONDS + 60))
    for dir in "${DYNALITE_DIR:-}" /tmp/peer "${TMPDIR:-/tmp}/strata-bench-dynalite"; do
        [ -n "$dir" ] && [ -f "$dir/node_modules/dynalite/cli.js" ] && { cli=$dir/node_modules/dynalite/cli.js; break; }
    done
    if [ -z "${cli:-}" ]; then
        dir=${DYNALITE_DIR:-${TMPDIR:-/tmp}/strata-bench-dynalite}
        log "installing dynalite into $dir"
        mkdir -p "$dir" && npm install --prefix "$dir" --no-audit --no-fund dynalite@3 >/dev/null ||
            { log "npm install dynalite failed"; return 1; }
        cli=$dir/node_modules/dynalite/cli.js
    fi
    port=$(free_ports 1)
    node "$cli" --host 127.0.0.1 --port "$port" --createTableMs 0 >"$tmp/dynalite.log" 2>&1 &
    dynalite_pid=$!
    dynalite_url="http://127.0.0.1:$port"
    until [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$dynalite_url/")" = 200 ]; do
        kill -0 "$dynalite_pid" 2>/dev/null || { log "dynalite exited"; cat "$tmp/dynalite.log" >&2; return 1; }
        [ $SECONDS -lt $deadline ] || { log "dynalite not up in 60s"; return 1; }
        sleep 0.1
    done
    ddb_call "$dynalite_url" CreateTable '{"TableName":"bench","AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}],"KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"BillingMode":"PAY_PER_REQUEST"}' >/dev/null
    until ddb_call "$dynalite_url" DescribeTable '{"TableName":"bench"}' | grep -Eq '"TableStatus": *"ACTIVE"'; do
        [ $SECONDS -lt $deadline ] || { log "dynalite table not ACTIVE"; return 1; }
        sleep 0.1
    done
    "$py" "$shared/preload.py" "$dynalite_url" bench "$KEYS" "$VALSIZE" >/dev/null ||
        { log "preload into dynalite failed"; return 1; }
}

# One measurement: wrk against one URL, or (several URLs) one wrk per URL in parallel with
# the connections split among them. Prints one SUMMARY line (summed req/s and errors,
# worst p50/p99 of the parts).
measure() {   # measure CONNS SCRIPT ENV URL...   (ENV: VAR=VALUE for wrk's script, or -)
    local c=$1 script=$2 envv=() n i t share
    [ "$3" = - ] || envv=("$3")
    shift 3
    n=$#
    if [ "$n" = 1 ]; then
        t=2; [ "$c" = 1 ] && t=1
        env "${envv[@]}" wrk -t$t -c"$c" -d"$duration" --latency -s "$script" "$1" | grep '^SUMMARY'
        return
    fi
    wrk_pids=()
    for ((i = 0; i < n; i++)); do
        share=$(( c / n + (i < c % n ? 1 : 0) ))
        env "${envv[@]}" wrk -t1 -c"$share" -d"$duration" --latency -s "$script" "${@:$((i + 1)):1}" \
            >"$tmp/part$i" 2>&1 &
        wrk_pids+=($!)
    done
    wait "${wrk_pids[@]}"
    wrk_pids=()
    cat "$tmp"/part* | grep '^SUMMARY' | "$py" -c '
import re, sys
rps = p50 = p99 = 0.0; err = [0] * 5; n = 0
for line in sys.stdin:
    m = dict(re.findall(r"(req/s|p50|p99)=([0-9.]+)", line))
    rps += float(m["req/s"]); p50 = max(p50, float(m["p50"])); p99 = max(p99, float(m["p99"]))
    e = re.search(r"=(\d+)/(\d+)/(\d+)/(\d+)/(\d+)", line)
    err = [a + int(b) for a, b in zip(err, e.groups())]; n += 1
print("SUMMARY req/s=%.0f p50=%.2fms p99=%.2fms errors(connect/read/write/status/timeout)=%s parts=%d"
      % (rps, p50, p99, "/".join(map(str, err)), n))'
    rm -f "$tmp"/part*
}

# Sum of commit_index over the local replicas of table bench on node i of cluster P, and
# how many of them this node leads: "COMMITS LEADS".
raft_counts() {   # raft_counts P i
    curl -s -m 5 "http://127.0.0.1:${node_port[$1:$2]}/admin/cluster" | "$py" -c '
import json, sys
d = json.load(sys.stdin)
ps = [p for p in d["partitions"] if p.get("table") == "bench" and "local" in p]
print(sum(p["local"]["commit_index"] for p in ps), sum(p["local"]["state"] == "leader" for p in ps))'
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }   # utime + stime of a pid

# PROFILE mode: one Strata operation at the highest connection count against node 1 while
# perf counts syscalls on every node and samples node 1; prints costs per request.
profile_one() {   # profile_one P GROUP
    local p=$1 group=$2 c script env=- i pids=() line reqs
    c=$(echo $conns | awk '{print $NF}')
    case $group in
        put) script=ddb-put.lua ;;
        get) script=ddb-get.lua ;;
        strong) script=ddb-get.lua env=CONSISTENT=1 ;;
        *) log "PROFILE wants put, get or strong"; return 1 ;;
    esac
    local events=syscalls:sys_enter_fdatasync,syscalls:sys_enter_pwritev,syscalls:sys_enter_pwrite64
    events+=,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_read
    events+=,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex
    declare -A before_cpu before_commit
    for i in 1 2 3; do
        before_cpu[$i]=$(cpu_ticks "${node_pid[$p:$i]}")
        read -r before_commit[$i] _ <<<"$(raft_counts "$p" "$i")"
        perf stat -x, -e "$events" -o "$tmp/stat$i" -p "${node_pid[$p:$i]}" &
        pids+=($!)
    done
    # Release builds have no frame pointers: PERF_CG=dwarf gives usable call chains.
    local cg=(-g)
    [ "${PERF_CG:-fp}" = dwarf ] && cg=(--call-graph dwarf,16384)
    perf record -F 999 "${cg[@]}" -o "$tmp/perf-p$p-$group.data" -p "${node_pid[$p:1]}" \
        2>"$tmp/perf-record.log" &
    pids+=($!)
    line=$(measure "$c" "$script" "$env" "http://127.0.0.1:${node_port[$p:1]}")
    kill -INT "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
    echo "profile P=$p $group c=$c node 1: $line"
    reqs=$("$py" -c 'import re,sys; m=re.search(r"req/s=(\d+)", sys.argv[1]); print(int(m.group(1)) if m else 0)' "$line")
    reqs=$(( reqs * ${duration%s} ))
    [ "$reqs" -gt 0 ] || { log "no requests completed"; return 1; }
    printf '%-6s %8s %6s %9s %9s %7s %7s %9s %7s %8s\n' node leads cpu_ms raft_ents fdatasync \
        pwrite write+wv read epoll_w futex
    for i in 1 2 3; do
        local after_commit leads cpu
        kill -0 "${node_pid[$p:$i]}" 2>/dev/null || { echo "$i      (exited: not counted)"; continue; }
        read -r after_commit leads <<<"$(raft_counts "$p" "$i")"
        cpu=$(( ($(cpu_ticks "${node_pid[$p:$i]}") - before_cpu[$i]) * 1000 / $(getconf CLK_TCK) ))
        "$py" - "$tmp/stat$i" "$reqs" "$i" "$leads/$p" "$cpu" "$((after_commit - before_commit[$i]))" <<'PY'
import sys
f, reqs, node, leads, cpu, ents = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
n = {}
for line in open(f):
    parts = line.strip().split(",")
    if len(parts) > 2 and parts[2].startswith("syscalls:sys_enter_"):
        n[parts[2][19:]] = int(parts[0]) if parts[0].isdigit() else 0
per = lambda *ks: sum(n.get(k, 0) for k in ks) / reqs
print("%-6s %8s %6.3f %9.3f %9.3f %7.3f %7.3f %9.3f %7.3f %8.3f" % (node, leads, cpu / reqs, ents / reqs,
      per("fdatasync"), per("pwritev", "pwrite64"), per("write", "writev"), per("read"),
      per("epoll_wait"), per("futex")))
PY
    done
    echo "(per request over $reqs requests; leads = bench partitions this node leads;"
    echo " raft_ents = log entries committed, summed over its replicas)"
    echo "node 1, perf record, top symbols (self):"
    perf report -i "$tmp/perf-p$p-$group.data" --no-children --stdio --sort dso,symbol -g none \
        --percent-limit 1 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 30
}

# Targets: "group system mode script env url...", one per line, in the order they alternate.
targets="$tmp/targets"
: >"$targets"
add() { echo "$*" >>"$targets"; }

for p in $parts_list; do
    [[ $p =~ ^[0-9]+$ ]] && [ "$p" -ge 1 ] && [ "$p" -le 256 ] || { log "PARTS wants 1..256"; exit 2; }
    log "starting 3-node Strata cluster, tables of $p partitions"
    start_cluster "$p" || exit 1
    one="http://127.0.0.1:${node_port[$p:1]}"
    all="$one http://127.0.0.1:${node_port[$p:2]} http://127.0.0.1:${node_port[$p:3]}"
    for m in one all; do
        [ $m = all ] && [ "$spread" != 1 ] && continue
        add put "strata-p$p" $m ddb-put.lua - ${!m}
        add get "strata-p$p" $m ddb-get.lua - ${!m}
        add strong "strata-p$p" $m ddb-get.lua CONSISTENT=1 ${!m}
    done
done
if [ "$use_etcd" != 0 ]; then
    log "starting 3-member etcd"
    start_etcd || exit 1
    one=http://127.0.0.1:23791
    all="$one http://127.0.0.1:23792 http://127.0.0.1:23793"
    for m in one all; do
        [ $m = all ] && [ "$spread" != 1 ] && continue
        add put etcd $m etcd-put.lua - ${!m}
        add get etcd $m etcd-range.lua SERIALIZABLE=1 ${!m}
        add strong etcd $m etcd-range.lua - ${!m}
    done
fi
if [ "$use_dynalite" != 0 ]; then
    log "starting dynalite"
    start_dynalite || exit 1
    add put dynalite one ddb-put.lua - "$dynalite_url"
    add get dynalite one ddb-get.lua - "$dynalite_url"
fi

if [ -n "${PROFILE:-}" ]; then
    command -v perf >/dev/null || { log "PROFILE needs perf"; exit 2; }
    [[ $duration =~ ^[1-9][0-9]*s$ ]] || { log "PROFILE wants DURATION in seconds (5s)"; exit 2; }
    cd "$shared" || exit 2
    for p in $parts_list; do
        for g in $PROFILE; do profile_one "$p" "$g" || exit 1; echo; done
    done
    exit 0
fi

log "$runs runs x $duration at connections $conns, KEYS=$KEYS VALSIZE=$VALSIZE"
results="$tmp/results"
: >"$results"
cd "$shared" || exit 2
for group in put get strong; do
    for c in $conns; do
        for r in $(seq "$runs"); do
            while read -r g sys mode script env urls; do
                [ "$g" = "$group" ] || continue
                # One connection cannot be spread over three endpoints.
                [ "$mode" = all ] && [ "$c" -lt 3 ] && continue
                # shellcheck disable=SC2086
                measure "$c" "$script" "$env" $urls >"$tmp/line"
                line=$(cat "$tmp/line")
                [ -n "$line" ] || line="SUMMARY failed"
                echo "$group c=$c run$r $sys/$mode: $line"
                echo "$group $c $sys $mode $line" >>"$results"
            done <"$targets"
        done
    done
done

# A node that died makes the run fail, but the figures measured so far are still printed.
status=0
for k in "${!node_pid[@]}"; do
    kill -0 "${node_pid[$k]}" 2>/dev/null || { log "stratad $k died during the benchmark"; status=1; }
done

echo
"$py" - "$results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    group, c, system, mode, rest = line.split(" ", 4)
    m = dict(re.findall(r"(req/s|p50|p99)=([0-9.]+)", rest))
    e = re.search(r"=(\d+)/(\d+)/(\d+)/(\d+)/(\d+)", rest)
    r = rows.setdefault((group, int(c), system, mode), {"rps": [], "p50": [], "p99": [], "err": 0})
    if not m:
        r["err"] += 1
        continue
    for k, v in (("rps", "req/s"), ("p50", "p50"), ("p99", "p99")):
        r[k].append(float(m[v]))
    r["err"] += sum(int(x) for x in e.groups()) if e else 0
med = lambda r, k: statistics.median(r[k]) if r and r[k] else float("nan")
names = {("put", "strata"): "PutItem", ("get", "strata"): "GetItem eventual",
         ("strong", "strata"): "GetItem strong", ("put", "etcd"): "put",
         ("get", "etcd"): "range serializable", ("strong", "etcd"): "range linearizable",
         ("put", "dynalite"): "PutItem", ("get", "dynalite"): "GetItem"}
print("medians over the runs; mode one = every connection to node/member 1, all = spread over")
print("the 3 endpoints (req/s summed, p50/p99 the worst endpoint); errors summed over the runs")
hdr = "%-12s %-19s %-4s %5s | %9s %8s %8s %7s" % ("system", "operation", "mode", "conns",
                                                 "req/s", "p50 ms", "p99 ms", "errors")
print(hdr)
print("-" * len(hdr))
order = lambda k: (["put", "get", "strong"].index(k[0]), k[2], k[3] != "one", k[1])
for k in sorted(rows, key=order):
    group, c, system, mode = k
    r = rows[k]
    print("%-12s %-19s %-4s %5d | %9.0f %8.2f %8.2f %7d" % (
        system, names[(group, system.split("-")[0])], mode, c,
        med(r, "rps"), med(r, "p50"), med(r, "p99"), r["err"]))

conns = max(k[1] for k in rows)
print("\ngoals at %d connections (ratio of median req/s; Strata mode vs the peer in the same mode," % conns)
print("dynalite has one endpoint)")
def ratio(label, s, p, goal, p99_goal=None):
    if not s or not p or not s["rps"] or not p["rps"]:
        return
    q = med(s, "rps") / med(p, "rps")
    ok = q >= goal and (p99_goal is None or med(s, "p99") <= p99_goal)
    extra = ", p99 %.2f ms (goal <= %g)" % (med(s, "p99"), p99_goal) if p99_goal else ""
    print("  %-58s %6.2fx (goal >= %gx%s) %s" % (label, q, goal, extra, "MET" if ok else "MISSED"))
for system in sorted({k[2] for k in rows if k[2].startswith("strata")}, key=lambda s: int(s[8:])):
    for mode in ("one", "all"):
        g = lambda grp, sysname, md: rows.get((grp, conns, sysname, md))
        ratio("%s/%s PutItem / etcd put" % (system, mode), g("put", system, mode),
              g("put", "etcd", mode), 2, 10)
        ratio("%s/%s GetItem eventual / dynalite GetItem" % (system, mode),
              g("get", system, mode), g("get", "dynalite", "one"), 3)
        ratio("%s/%s GetItem strong / etcd linearizable range" % (system, mode),
              g("strong", system, mode), g("strong", "etcd", mode), 1.5)
PY
exit $status
