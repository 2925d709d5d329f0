#!/usr/bin/env bash
# Local cluster launcher: a Strata cluster of N stratad nodes on loopback, in the
# foreground. Installs the dependencies (as root), builds a release stratad, starts the
# nodes, waits until every node reports a ready cluster on GET /admin/cluster, prints the
# endpoints, and stops every node cleanly on Ctrl-C / SIGTERM.
#
#   bash deploy/cluster.sh [--nodes 3] [--data-dir DIR] [--port 8000] [--peer-port 9000]
#                          [--stratad PATH] [--start-timeout 90]
#
# Node i (1..N) gets id i, AZ az<((i-1) mod 3)+1>, host label h<i> (on one machine every node
# is its own "host", so the placement rule "no two replicas on one host" can be met), client
# port PORT+i-1, peer port PEER_PORT+i-1, and DIR/n<i> for its data and stratad.log. Node 1
# bootstraps the cluster (--bootstrap --bootstrap-expect 3: the meta group's three voters);
# the others join it. Every node proves DIR/peer-secret (made at the first start, mode 600)
# on its peer connections (--peer-secret-file).
# Running the launcher again on the same DIR restarts the same cluster with its data.
#
# Defaults: DIR is /var/lib/strata-cluster as root, ./data-cluster otherwise; every option
# also reads an environment variable: STRATA_NODES, STRATA_DATA_DIR, STRATA_PORT,
# STRATA_PEER_PORT, STRATA_STRATAD (skip the build), STRATA_START_TIMEOUT (seconds),
# STRATA_STOP_TIMEOUT (seconds between SIGTERM and SIGKILL, default 20), STRATA_BUILD_DIR
# (default build/release, relative to the repository).
#
# Relative paths are relative to the directory the launcher is started from; the default
# ./data-cluster is in the repository.
#
# Exit status: 0 after a clean stop; 1 when a node fails to start (its log tail is
# printed), the cluster is not ready before the deadline, a port is taken, or a node does
# not stop cleanly (non-zero exit, or SIGKILL after the deadline); 2 on usage errors.
set -euo pipefail
CALLER_DIR=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD

NODES=${STRATA_NODES:-3}
if [ "$(id -u)" -eq 0 ]; then DATA=${STRATA_DATA_DIR:-/var/lib/strata-cluster}
else DATA=${STRATA_DATA_DIR:-$REPO/data-cluster}; fi
PORT=${STRATA_PORT:-8000}
PEER_PORT=${STRATA_PEER_PORT:-9000}
STRATAD=${STRATA_STRATAD:-}
START_TIMEOUT=${STRATA_START_TIMEOUT:-90}
STOP_TIMEOUT=${STRATA_STOP_TIMEOUT:-20}
BUILD_DIR=${STRATA_BUILD_DIR:-build/release} # relative to the repository
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
AZS=3 # az1..az3 round robin: any 3 consecutive nodes cover 3 AZs

PIDS=() # PIDS[i] = pid of node i, "" once reaped (a sparse array: no index 0)
STOPPING=0

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

parse_args() {
    while [ $# -gt 0 ]; do
        case $1 in
            --nodes) NODES=${2:?--nodes N}; shift 2 ;;
            --data-dir) DATA=${2:?--data-dir DIR}; shift 2 ;;
            --port) PORT=${2:?--port N}; shift 2 ;;
            --peer-port) PEER_PORT=${2:?--peer-port N}; shift 2 ;;
            --stratad) STRATAD=${2:?--stratad PATH}; shift 2 ;;
            --start-timeout) START_TIMEOUT=${2:?--start-timeout S}; shift 2 ;;
            -h|--help) usage ;;
            *) log "unknown option $1"; usage ;;
        esac
    done
    [[ $DATA == /* ]] || DATA=$CALLER_DIR/$DATA
    [ -z "$STRATAD" ] || [[ $STRATAD == /* ]] || STRATAD=$CALLER_DIR/$STRATAD
    # Three replicas per partition on three distinct hosts need at least three nodes.
    is_uint "$NODES" && [ "$NODES" -ge 3 ] && [ "$NODES" -le 64 ] || die "--nodes wants 3..64"
    is_uint "$START_TIMEOUT" && [ "$START_TIMEOUT" -ge 1 ] || die "--start-timeout wants seconds"
    is_uint "$STOP_TIMEOUT" || die "STRATA_STOP_TIMEOUT wants seconds"
    local p
    for p in "$PORT" "$PEER_PORT"; do
        is_uint "$p" && [ "$p" -ge 1 ] && [ "$p" -le $((65536 - NODES)) ] ||
            die "ports: $p + $NODES nodes does not fit in 1..65535"
    done
    # The two port ranges must not overlap.
    if [ $((PORT + NODES)) -gt "$PEER_PORT" ] && [ $((PEER_PORT + NODES)) -gt "$PORT" ]; then
        die "client ports $PORT.. and peer ports $PEER_PORT.. overlap"
    fi
}

client_port() { echo $((PORT + $1 - 1)); }
peer_port() { echo $((PEER_PORT + $1 - 1)); }
node_az() { echo "az$(( ($1 - 1) % AZS + 1 ))"; }
node_dir() { echo "$DATA/n$1"; }

# The one place that says how node i is started (into NODE_CMD).
node_command() {
    local i=$1
    NODE_CMD=("$STRATAD" --node-id "$i" --az "$(node_az "$i")" --host-label "h$i"
        --listen "127.0.0.1:$(client_port "$i")" --peer-listen "127.0.0.1:$(peer_port "$i")"
        --data-dir "$(node_dir "$i")/data" --peer-secret-file "$DATA/peer-secret")
    if [ "$i" -eq 1 ]; then
        NODE_CMD+=(--bootstrap --bootstrap-expect 3)
    else
        NODE_CMD+=(--join "127.0.0.1:$(peer_port 1)")
    fi
}

install_and_build() {
    if [ -n "$STRATAD" ]; then
        [ -x "$STRATAD" ] || die "--stratad $STRATAD is not executable"
        return 0
    fi
    if [ "$(id -u)" -eq 0 ]; then
        bash deploy/install-deps.sh
    else
        log "not root: skipping deploy/install-deps.sh (the build needs its packages)"
    fi
    if [ ! -f "$BUILD_DIR/build.ninja" ]; then
        meson setup "$BUILD_DIR" --buildtype=release -Dtests=false -Dbench=false
    fi
    ninja -C "$BUILD_DIR" node/stratad
    STRATAD=$BUILD_DIR/node/stratad
}

# Fails when a port we need is already listened on (another cluster, a stale node).
check_ports() {
    local listening i p taken=()
    listening=$(ss -Hltn 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
    for ((i = 1; i <= NODES; i++)); do
        for p in "$(client_port "$i")" "$(peer_port "$i")"; do
            grep -qx "$p" <<<"$listening" && taken+=("$p")
        done
    done
    [ ${#taken[@]} -eq 0 ] || die "ports already in use: ${taken[*]} (another cluster running? see --port, --peer-port)"
}

start_node() {
    local i=$1 dir; dir=$(node_dir "$i")
    mkdir -p "$dir/data"
    node_command "$i"
    printf '==== %s: %s\n' "$(date -u +%FT%TZ)" "${NODE_CMD[*]}" >>"$dir/stratad.log"
    # Its own session: a Ctrl-C in the terminal reaches only the launcher, which then stops
    # the nodes with one SIGTERM each (a second signal would cut a node's clean shutdown
    # short). Without job control the background child is no group leader, so setsid
    # does not fork and $! is stratad's pid.
    setsid "${NODE_CMD[@]}" </dev/null >>"$dir/stratad.log" 2>&1 &
    PIDS[i]=$!
}

alive() { kill -0 "${PIDS[$1]}" 2>/dev/null; }

log_tail() {
    local i=$1
    log "---- last lines of $(node_dir "$i")/stratad.log ----"
    tail -n 25 "$(node_dir "$i")/stratad.log" >&2 || true
    log "----"
}

# GET /admin/cluster of node i, or nothing.
admin_cluster() {
    curl -s --max-time 2 "http://127.0.0.1:$(client_port "$1")/admin/cluster" 2>/dev/null || true
}

# Polls until every node says "ready": true, failing loudly when a node exits meanwhile.
wait_ready() {
    local deadline=$((SECONDS + START_TIMEOUT)) i pending
    while :; do
        pending=()
        for ((i = 1; i <= NODES; i++)); do
            if ! alive "$i"; then
                local rc=0; wait "${PIDS[$i]}" || rc=$?
                log "node $i (pid ${PIDS[$i]}) exited with status $rc while starting"
                log_tail "$i"
                PIDS[i]=""
                return 1
            fi
            admin_cluster "$i" | grep -Eq '"ready" *: *true' || pending+=("$i")
        done
        [ ${#pending[@]} -eq 0 ] && return 0
        if [ $SECONDS -ge $deadline ]; then
            log "not ready after ${START_TIMEOUT}s: nodes ${pending[*]}"
            for i in "${pending[@]}"; do log_tail "$i"; done
            return 1
        fi
        sleep 0.2
    done
}

# SIGTERM to every live node, SIGKILL to those still alive after STOP_TIMEOUT seconds.
stop_all() {
    local i deadline rc status=0
    for i in "${!PIDS[@]}"; do
        [ -n "${PIDS[$i]}" ] && alive "$i" && kill -TERM "${PIDS[$i]}" 2>/dev/null || true
    done
    deadline=$((SECONDS + STOP_TIMEOUT))
    for i in "${!PIDS[@]}"; do
        [ -n "${PIDS[$i]}" ] || continue
        while alive "$i" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        if alive "$i"; then
            log "node $i did not stop within ${STOP_TIMEOUT}s: SIGKILL"
            kill -KILL "${PIDS[$i]}" 2>/dev/null || true
            status=1
        fi
        rc=0; wait "${PIDS[$i]}" 2>/dev/null || rc=$?
        if [ "$rc" -ne 0 ]; then
            log "node $i exited with status $rc"
            status=1
        fi
        PIDS[i]=""
    done
    return $status
}

on_signal() {
    [ "$STOPPING" = 1 ] && return
    STOPPING=1
    log "stopping $NODES nodes"
    if stop_all; then log "stopped"; exit 0; fi
    exit 1
}

print_endpoints() {
    local i
    printf '\nStrata: %d-node cluster on loopback (data and logs in %s)\n' "$NODES" "$DATA"
    printf '  %-5s %-4s %-5s %-16s %-16s %-8s %s\n' NODE AZ HOST CLIENT PEER PID LOG
    for ((i = 1; i <= NODES; i++)); do
        printf '  %-5s %-4s %-5s %-16s %-16s %-8s %s\n' "$i" "$(node_az "$i")" "h$i" \
            "127.0.0.1:$(client_port "$i")" "127.0.0.1:$(peer_port "$i")" "${PIDS[$i]}" \
            "$(node_dir "$i")/stratad.log"
    done
    cat <<MSG

Every node serves the whole DynamoDB API. Point the AWS CLI at any of them, with any
credentials:
  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1
  aws --endpoint-url http://127.0.0.1:$(client_port 1) dynamodb list-tables
Cluster map, partitions and leaders: curl http://127.0.0.1:$(client_port 1)/admin/cluster
Ctrl-C stops every node (data stays in $DATA).
MSG
}

# Foreground until a signal; a node dying later is reported (it may have been killed on
# purpose, e.g. to watch a failover) and the others keep running.
supervise() {
    local i rc
    while :; do
        for ((i = 1; i <= NODES; i++)); do
            if [ -n "${PIDS[$i]}" ] && ! alive "$i"; then
                rc=0; wait "${PIDS[$i]}" 2>/dev/null || rc=$?
                log "node $i (pid ${PIDS[$i]}) exited with status $rc; the others keep running"
                log_tail "$i"
                PIDS[i]=""
            fi
        done
        # A background sleep lets the trap run at once on a signal.
        sleep 1 &
        wait $! || true
    done
}

# The cluster's peer secret (stratad --peer-secret-file): only nodes that know it may use
# the peer ports. Made once per DIR, readable by its owner alone, as stratad requires.
make_peer_secret() {
    [ -s "$DATA/peer-secret" ] && return 0
    (umask 077 && head -c 32 /dev/urandom | base64 >"$DATA/peer-secret")
}

main() {
    parse_args "$@"
    install_and_build
    check_ports
    mkdir -p "$DATA"
    DATA=$(cd "$DATA" && pwd)
    make_peer_secret
    trap on_signal INT TERM
    # Any other exit (a failed start, set -e) must not leave nodes behind.
    trap '[ "$STOPPING" = 1 ] || { STOPPING=1; stop_all || true; }' EXIT
    local i
    for ((i = 1; i <= NODES; i++)); do start_node "$i"; done
    log "started $NODES nodes; waiting (up to ${START_TIMEOUT}s) until every node is ready"
    if ! wait_ready; then
        log "cluster did not start; stopping the nodes"
        exit 1
    fi
    print_endpoints
    supervise
}

main "$@"
