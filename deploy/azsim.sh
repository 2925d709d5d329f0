#!/usr/bin/env bash
# AZ simulator: a Strata cluster on one machine, one network namespace per node, nodes
# grouped into availability zones, with delay and loss between zones. Root only.
#
#   deploy/azsim.sh up [--nodes 9] [--azs 3] [--inter-az-delay-ms 2] [--loss-pct 0]
#                      [--az-delay I-J=MS ...] [--delay-mode auto|netem|nfqueue|none]
#                      [--stratad PATH] [--port 8000] [--peer-port 7000]
#                      [--mode cluster|single] [--name strata]
#   deploy/azsim.sh down [--name strata]          kill everything, delete every namespace
#   deploy/azsim.sh status [--name strata]        nodes, addresses, pids, HTTP check
#   deploy/azsim.sh exec NODE CMD...              run CMD inside NODE's namespace
#   deploy/azsim.sh ip NODE                       NODE's address
# NODE is a node number (3), its short name (n3) or its namespace (strata-n3). `exec` and
# `ip` take --name right after the command: azsim.sh exec --name NAME NODE CMD...
#
# Network (nothing is created in the root namespace):
#   NAME-hub   namespace holding bridge br0 and the hub ends v1..vN of the veth pairs
#   NAME-nI    node I: eth0 = 10.77.<az>.<I>/16, lo up; stratad on 0.0.0.0:PORT (client)
#              and 0.0.0.0:PEER_PORT (peer), which is both the node address and 127.0.0.1
#              inside the namespace
# Node I is in AZ ((I-1) mod AZS)+1, so consecutive nodes land in different zones.
# --mode cluster (the default) makes the nodes one cluster: node I has id I, AZ az<az>,
# host label nI (a namespace stands for a machine), advertises its 10.77 address; n1
# bootstraps (waiting for 3 nodes: the meta group's voters), the others join n1. `up` returns once every
# node reports "ready" on GET /admin/cluster. Cluster mode needs --nodes >= 3 and
# --azs >= 3 (three replicas in three AZs). --mode single runs independent single nodes.
# Delay and loss apply on each node's egress towards the other zones' /24s, so a round
# trip between zones costs twice the delay. With netem (when the kernel has it) it is a
# prio qdisc with one netem band per remote zone; without it an nfq-delay process per
# namespace (deploy/nfq-delay/, built here with cc) holds packets that iptables sends to
# NFQUEUE (--queue-bypass: traffic flows if nfq-delay dies).
#
# State: $STRATA_AZSIM_STATE/NAME (default /run/strata-azsim/NAME): settings, the list of
# namespaces (written before each is created, so `down` after a failed `up` finds them),
# the cluster's peer secret (peer-secret, new at each `up`), pid files, logs and the nodes'
# data directories. `down` also finds NAME-hub / NAME-nI
# namespaces without any state, and is safe to run twice.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE_ROOT=${STRATA_AZSIM_STATE:-/run/strata-azsim}
BUILD_DIR=${STRATA_AZSIM_BUILD:-$REPO/build/azsim}
SUBNET_PREFIX=10.77 # 10.77.<az>.<node>/16, private and only inside our namespaces
START_TIMEOUT_S=${STRATA_AZSIM_START_TIMEOUT:-30}
READY_TIMEOUT_S=${STRATA_AZSIM_READY_TIMEOUT:-120}

NAME=strata
NODES=9
AZS=3
DELAY_MS=2
LOSS_PCT=0
DELAY_MODE=auto
STRATAD=""
PORT=8000
PEER_PORT=7000
MODE=cluster
PAIR_DELAYS=() # "I-J=MS" overrides, symmetric

log() { printf 'azsim: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
}

state_dir() { echo "$STATE_ROOT/$NAME"; }
hub_ns() { echo "$NAME-hub"; }
node_ns() { echo "$NAME-n$1"; }
node_az() { echo $(( ($1 - 1) % AZS + 1 )); }
node_addr() { echo "$SUBNET_PREFIX.$(node_az "$1").$1"; }
az_net() { echo "$SUBNET_PREFIX.$1.0/24"; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_number() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }

# The one place that says how a node is started.
node_command() {
    local i=$1 addr
    addr=$(node_addr "$i")
    NODE_CMD=("$STRATAD" --listen "0.0.0.0:$PORT" --data-dir "$(state_dir)/n$i/data")
    [ "$MODE" = cluster ] || return 0
    NODE_CMD+=(--node-id "$i" --az "az$(node_az "$i")" --host-label "n$i"
        --advertise "$addr:$PORT" --peer-listen "0.0.0.0:$PEER_PORT"
        --peer-advertise "$addr:$PEER_PORT" --peer-secret-file "$(state_dir)/peer-secret")
    if [ "$i" -eq 1 ]; then
        NODE_CMD+=(--bootstrap --bootstrap-expect 3)
    else
        NODE_CMD+=(--join "$(node_addr 1):$PEER_PORT")
    fi
}

# Delay in ms between zones a and b: an --az-delay override or the inter-AZ default.
pair_delay() {
    local a=$1 b=$2 spec lo hi
    [ "$a" = "$b" ] && { echo 0; return; }
    for spec in "${PAIR_DELAYS[@]+"${PAIR_DELAYS[@]}"}"; do
        lo=${spec%%-*}; hi=${spec#*-}; hi=${hi%%=*}
        if { [ "$lo" = "$a" ] && [ "$hi" = "$b" ]; } || { [ "$lo" = "$b" ] && [ "$hi" = "$a" ]; }; then
            echo "${spec#*=}"; return
        fi
    done
    echo "$DELAY_MS"
}

is_zero() { awk -v x="$1" 'BEGIN { exit !(x + 0 == 0) }'; }

load_settings() {
    local f; f="$(state_dir)/settings"
    [ -f "$f" ] || return 1
    # shellcheck disable=SC1090
    . "$f"
}

save_settings() {
    {
        printf 'NODES=%q\nAZS=%q\nDELAY_MS=%q\nLOSS_PCT=%q\nDELAY_MODE=%q\n' \
            "$NODES" "$AZS" "$DELAY_MS" "$LOSS_PCT" "$DELAY_MODE"
        printf 'STRATAD=%q\nPORT=%q\nPEER_PORT=%q\nMODE=%q\n' "$STRATAD" "$PORT" \
            "$PEER_PORT" "$MODE"
        printf 'PAIR_DELAYS=(%s)\n' "${PAIR_DELAYS[*]+"${PAIR_DELAYS[*]}"}"
    } >"$(state_dir)/settings"
}

# Creates namespace $1, recording it first so a failure right after still gets cleaned.
make_ns() {
    echo "$1" >>"$(state_dir)/namespaces"
    ip netns add "$1"
    ip -n "$1" link set lo up
}

# Waits until file $1 contains $2, or process $3 dies, or the deadline passes.
wait_for_line() {
    local file=$1 pattern=$2 pid=$3 deadline=$((SECONDS + START_TIMEOUT_S))
    while [ $SECONDS -lt $deadline ]; do
        grep -q "$pattern" "$file" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

netem_available() {
    local ns; ns=$(hub_ns)
    if ip netns exec "$ns" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
        ip netns exec "$ns" tc qdisc del dev lo root 2>/dev/null || true
        return 0
    fi
    return 1
}

build_nfq_delay() {
    local dir=$REPO/deploy/nfq-delay bin=$BUILD_DIR/nfq-delay f stale=0
    local srcs=("$dir/nfq-delay.c" "$dir/delayq.c" "$REPO/storage/base/err.c")
    NFQ_DELAY=$bin
    for f in "${srcs[@]}" "$dir/delayq.h" "$REPO/storage/base/err.h"; do
        [ "$bin" -nt "$f" ] || stale=1
    done
    if [ -x "$bin" ] && [ $stale = 0 ]; then return 0; fi
    if ! pkg-config --exists libnetfilter_queue 2>/dev/null; then
        die "libnetfilter-queue-dev missing (bash deploy/install-deps.sh)"
    fi
    mkdir -p "$BUILD_DIR"
    log "building $bin"
    # shellcheck disable=SC2046
    cc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Wshadow -I"$REPO" "${srcs[@]}" \
        -o "$bin.tmp" $(pkg-config --cflags --libs libnetfilter_queue)
    mv "$bin.tmp" "$bin"
}

# Zones other than `az` that need shaping, as "remote_az delay_ms" lines.
shaped_pairs() {
    local az=$1 j d
    for ((j = 1; j <= AZS; j++)); do
        [ "$j" = "$az" ] && continue
        d=$(pair_delay "$az" "$j")
        if ! is_zero "$d" || ! is_zero "$LOSS_PCT"; then echo "$j $d"; fi
    done
}

shape_netem() {
    local i=$1 ns az band=1 j d bands
    ns=$(node_ns "$i"); az=$(node_az "$i")
    local pairs; pairs=$(shaped_pairs "$az")
    [ -n "$pairs" ] || return 0
    bands=$((AZS + 1))
    # Band 1 (unshaped) gets every priority; filters steer remote zones to their band.
    ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: prio bands "$bands" \
        priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
    while read -r j d; do
        band=$((j + 1))
        local loss=()
        is_zero "$LOSS_PCT" || loss=(loss "${LOSS_PCT}%")
        ip netns exec "$ns" tc qdisc add dev eth0 parent "1:$band" handle "$((band + 10)):" \
            netem delay "${d}ms" "${loss[@]+"${loss[@]}"}" limit 100000
        ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
            match ip dst "$(az_net "$j")" flowid "1:$band"
    done <<<"$pairs"
}

shape_nfqueue() {
    local i=$1 ns az dir j d
    ns=$(node_ns "$i"); az=$(node_az "$i"); dir="$(state_dir)/n$i"
    local pairs; pairs=$(shaped_pairs "$az")
    [ -n "$pairs" ] || return 0
    local args=(--queue 0)
    while read -r j d; do
        args+=(--rule "$(az_net "$az"),$(az_net "$j"),$d,$LOSS_PCT")
    done <<<"$pairs"
    ip netns exec "$ns" "$NFQ_DELAY" "${args[@]}" </dev/null >"$dir/nfq-delay.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/nfq-delay.pid"
    wait_for_line "$dir/nfq-delay.log" '^nfq-delay: queue' "$pid" ||
        die "nfq-delay in $ns did not start: $(tail -3 "$dir/nfq-delay.log")"
    while read -r j d; do
        ip netns exec "$ns" iptables -w -A OUTPUT -d "$(az_net "$j")" \
            -j NFQUEUE --queue-num 0 --queue-bypass
    done <<<"$pairs"
}

start_node() {
    local i=$1 ns dir pid
    ns=$(node_ns "$i"); dir="$(state_dir)/n$i"
    mkdir -p "$dir/data"
    node_command "$i"
    ip netns exec "$ns" "${NODE_CMD[@]}" </dev/null >"$dir/stratad.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/stratad.pid"
    STARTED_PIDS+=("$i:$pid")
}

cmd_up() {
    while [ $# -gt 0 ]; do
        case $1 in
            --nodes) NODES=$2; shift 2 ;;
            --azs) AZS=$2; shift 2 ;;
            --inter-az-delay-ms) DELAY_MS=$2; shift 2 ;;
            --loss-pct) LOSS_PCT=$2; shift 2 ;;
            --az-delay) PAIR_DELAYS+=("$2"); shift 2 ;;
            --delay-mode) DELAY_MODE=$2; shift 2 ;;
            --stratad) STRATAD=$2; shift 2 ;;
            --port) PORT=$2; shift 2 ;;
            --peer-port) PEER_PORT=$2; shift 2 ;;
            --mode) MODE=$2; shift 2 ;;
            --name) NAME=$2; shift 2 ;;
            -h|--help) usage ;;
            *) die "up: unknown option $1" ;;
        esac
    done
    is_uint "$NODES" && [ "$NODES" -ge 1 ] && [ "$NODES" -le 250 ] || die "--nodes wants 1..250"
    is_uint "$AZS" && [ "$AZS" -ge 1 ] && [ "$AZS" -le 15 ] || die "--azs wants 1..15"
    is_number "$DELAY_MS" || die "--inter-az-delay-ms wants a number of milliseconds"
    is_number "$LOSS_PCT" && awk -v x="$LOSS_PCT" 'BEGIN { exit !(x <= 100) }' ||
        die "--loss-pct wants 0..100"
    is_uint "$PORT" && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "--port wants 1..65535"
    is_uint "$PEER_PORT" && [ "$PEER_PORT" -ge 1 ] && [ "$PEER_PORT" -le 65535 ] &&
        [ "$PEER_PORT" != "$PORT" ] || die "--peer-port wants 1..65535, not --port"
    case $MODE in
        cluster) [ "$NODES" -ge 3 ] && [ "$AZS" -ge 3 ] ||
            die "--mode cluster needs --nodes >= 3 and --azs >= 3 (or --mode single)" ;;
        single) ;;
        *) die "--mode: cluster|single" ;;
    esac
    [[ $NAME =~ ^[a-z][a-z0-9-]{0,20}$ ]] || die "--name wants [a-z][a-z0-9-]{0,20}"
    local spec
    for spec in "${PAIR_DELAYS[@]+"${PAIR_DELAYS[@]}"}"; do
        [[ $spec =~ ^([0-9]+)-([0-9]+)=([0-9]+(\.[0-9]+)?)$ ]] ||
            die "--az-delay wants I-J=MS, got $spec"
        [ "${BASH_REMATCH[1]}" -ge 1 ] && [ "${BASH_REMATCH[1]}" -le "$AZS" ] &&
            [ "${BASH_REMATCH[2]}" -ge 1 ] && [ "${BASH_REMATCH[2]}" -le "$AZS" ] ||
            die "--az-delay $spec: AZs are 1..$AZS"
        awk -v x="${BASH_REMATCH[3]}" 'BEGIN { exit !(x <= 60000) }' ||
            die "--az-delay $spec: at most 60000 ms"
    done
    awk -v x="$DELAY_MS" 'BEGIN { exit !(x <= 60000) }' ||
        die "--inter-az-delay-ms wants at most 60000"
    case $DELAY_MODE in auto|netem|nfqueue|none) ;; *) die "--delay-mode: auto|netem|nfqueue|none" ;; esac
    if [ -z "$STRATAD" ]; then
        for STRATAD in "$REPO/build/release/node/stratad" "$REPO/build/test/node/stratad" ""; do
            [ -x "$STRATAD" ] && break
        done
    fi
    [ -n "$STRATAD" ] && [ -x "$STRATAD" ] || die "no stratad: pass --stratad PATH"
    STRATAD=$(cd "$(dirname "$STRATAD")" && pwd)/$(basename "$STRATAD")

    local sd; sd=$(state_dir)
    [ -e "$sd" ] && die "$NAME is already up (or half up): run '$0 down --name $NAME' first"
    mkdir -p "$sd"
    : >"$sd/namespaces"
    # The cluster's peer secret (stratad --peer-secret-file): only its nodes may use the
    # peer ports. Readable by root alone, as stratad requires.
    (umask 077 && head -c 32 /dev/urandom | base64 >"$sd/peer-secret")
    # Any failure from here on (set -e, die) tears down what exists so far.
    UP_DONE=0
    trap 'if [ "$UP_DONE" = 0 ]; then log "up failed; tearing down"; cmd_down_named || true; fi' EXIT

    local hub i az ns
    hub=$(hub_ns)
    make_ns "$hub"
    ip -n "$hub" link add br0 type bridge
    ip -n "$hub" link set br0 up

    if [ "$DELAY_MODE" = auto ]; then
        if netem_available; then DELAY_MODE=netem; else DELAY_MODE=nfqueue; fi
    elif [ "$DELAY_MODE" = netem ] && ! netem_available; then
        die "this kernel has no netem qdisc: use --delay-mode nfqueue"
    fi
    [ "$DELAY_MODE" = nfqueue ] && build_nfq_delay
    save_settings

    for ((i = 1; i <= NODES; i++)); do
        ns=$(node_ns "$i"); az=$(node_az "$i")
        make_ns "$ns"
        mkdir -p "$sd/n$i"
        # Both ends are made from inside the hub: no interface ever exists in the root ns.
        ip -n "$hub" link add "v$i" type veth peer name eth0 netns "$ns"
        ip -n "$hub" link set "v$i" master br0 up
        ip -n "$ns" addr add "$(node_addr "$i")/16" dev eth0
        ip -n "$ns" link set eth0 up
        case $DELAY_MODE in
            netem) shape_netem "$i" ;;
            nfqueue) shape_nfqueue "$i" ;;
        esac
    done

    STARTED_PIDS=()
    for ((i = 1; i <= NODES; i++)); do start_node "$i"; done
    local entry pid
    for entry in "${STARTED_PIDS[@]}"; do
        i=${entry%%:*}; pid=${entry#*:}
        wait_for_line "$sd/n$i/stratad.log" 'serving on' "$pid" ||
            { log "stratad n$i did not start: $(tail -3 "$sd/n$i/stratad.log")"; false; }
    done
    [ "$MODE" = cluster ] && wait_cluster_ready
    UP_DONE=1
    log "up: $NODES nodes in $AZS AZs ($MODE), inter-AZ delay ${DELAY_MS} ms, loss ${LOSS_PCT}%, delay by $DELAY_MODE"
    cmd_status_named
}

# GET /admin/cluster of node i from inside its namespace, or nothing.
admin_cluster() {
    local i=$1
    ip netns exec "$(node_ns "$i")" curl -s --max-time 2 \
        "http://$(node_addr "$i"):$PORT/admin/cluster" 2>/dev/null || true
}

# Until every node says "ready": true; fails (with the log tail) when a node exits or
# the deadline passes.
wait_cluster_ready() {
    local deadline=$((SECONDS + READY_TIMEOUT_S)) i pending sd; sd=$(state_dir)
    while :; do
        pending=()
        for ((i = 1; i <= NODES; i++)); do
            kill -0 "$(cat "$sd/n$i/stratad.pid")" 2>/dev/null ||
                die "stratad n$i exited while the cluster formed: $(tail -5 "$sd/n$i/stratad.log")"
            admin_cluster "$i" | grep -Eq '"ready" *: *true' || pending+=("n$i")
        done
        [ ${#pending[@]} -eq 0 ] && return 0
        [ $SECONDS -lt $deadline ] ||
            die "cluster not ready after ${READY_TIMEOUT_S}s: ${pending[*]}; n1: $(tail -5 "$sd/n1/stratad.log")"
        sleep 0.2
    done
}

# Is pid $1 still a process we started (not a reused pid)?
ours() {
    local cmd
    cmd=$({ tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null) || return 1
    [[ $cmd == *stratad* || $cmd == *nfq-delay* ]]
}

kill_and_wait() {
    local pids=("$@") p deadline
    [ ${#pids[@]} -gt 0 ] || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    for p in "${pids[@]}"; do
        while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
    done
}

# Everything of instance $NAME: the recorded namespaces plus any NAME-hub / NAME-nI.
our_namespaces() {
    local sd; sd=$(state_dir)
    {
        [ -f "$sd/namespaces" ] && cat "$sd/namespaces"
        ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-(hub|n[0-9]+)\$" || true
    } | sort -u
}

cmd_down_named() {
    set +e
    local sd ns f pid pids=()
    sd=$(state_dir)
    # Processes inside our namespaces, and recorded ones in case a namespace is already
    # gone (a process keeps an unnamed namespace alive).
    for ns in $(our_namespaces); do
        [ -e "/run/netns/$ns" ] || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do pids+=("$pid"); done
    done
    for f in "$sd"/n*/stratad.pid "$sd"/n*/nfq-delay.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        is_uint "$pid" && ours "$pid" && pids+=("$pid")
    done
    # shellcheck disable=SC2046 # pids are numbers
    kill_and_wait $(printf '%s\n' "${pids[@]+"${pids[@]}"}" | sort -u)
    # Deleting a namespace deletes its interfaces; a veth goes with its peer, the bridge
    # with the hub.
    for ns in $(our_namespaces); do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$sd"
    rmdir "$STATE_ROOT" 2>/dev/null
    set -e
    local left; left=$(our_namespaces)
    [ -z "$left" ] || { log "down: namespaces left: $left"; return 1; }
    return 0
}

cmd_down() {
    while [ $# -gt 0 ]; do
        case $1 in
            --name) NAME=$2; shift 2 ;;
            *) die "down: unknown option $1" ;;
        esac
    done
    cmd_down_named && log "down: $NAME removed"
}

http_check() {
    local i=$1
    ip netns exec "$(node_ns "$i")" curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
        "http://$(node_addr "$i"):$PORT/" 2>/dev/null || true
}

cmd_status_named() {
    load_settings || { log "$NAME is not up"; return 1; }
    local i pid alive nfq ready sd; sd=$(state_dir)
    printf '%-18s %-3s %-16s %-8s %-5s %-6s %s\n' NODE AZ ADDRESS PID HTTP READY NFQ-DELAY
    for ((i = 1; i <= NODES; i++)); do
        pid=$(cat "$sd/n$i/stratad.pid" 2>/dev/null || echo -)
        alive=dead
        is_uint "$pid" && kill -0 "$pid" 2>/dev/null && alive=$pid
        nfq=-
        if [ -f "$sd/n$i/nfq-delay.pid" ]; then
            nfq=$(cat "$sd/n$i/nfq-delay.pid")
            kill -0 "$nfq" 2>/dev/null || nfq="$nfq(dead)"
        fi
        ready=-
        if [ "$MODE" = cluster ]; then
            ready=no
            admin_cluster "$i" | grep -Eq '"ready" *: *true' && ready=yes
        fi
        printf '%-18s %-3s %-16s %-8s %-5s %-6s %s\n' "$(node_ns "$i")" "$(node_az "$i")" \
            "$(node_addr "$i"):$PORT" "$alive" "$(http_check "$i")" "$ready" "$nfq"
    done
    [ "$MODE" = cluster ] && printf 'cluster: n1 bootstraps, peers on port %s\n' "$PEER_PORT"
    printf 'delay: %s ms between AZs (%s)' "$DELAY_MS" "$DELAY_MODE"
    [ -n "${PAIR_DELAYS[*]+x}" ] && printf ', overrides: %s' "${PAIR_DELAYS[*]}"
    printf ', loss %s%%\n' "$LOSS_PCT"
}

cmd_status() {
    while [ $# -gt 0 ]; do
        case $1 in
            --name) NAME=$2; shift 2 ;;
            *) die "status: unknown option $1" ;;
        esac
    done
    cmd_status_named
}

# NODE argument -> node number (needs settings loaded).
node_index() {
    local n=$1
    n=${n#"$NAME-"}; n=${n#n}
    is_uint "$n" && [ "$n" -ge 1 ] && [ "$n" -le "$NODES" ] || die "no node $1 (1..$NODES)"
    echo $((10#$n))
}

cmd_exec() {
    [ "${1:-}" = --name ] && { NAME=$2; shift 2; }
    [ $# -ge 2 ] || die "usage: exec NODE CMD..."
    load_settings || die "$NAME is not up"
    local i; i=$(node_index "$1"); shift
    exec ip netns exec "$(node_ns "$i")" "$@"
}

cmd_ip() {
    [ "${1:-}" = --name ] && { NAME=$2; shift 2; }
    [ $# -eq 1 ] || die "usage: ip NODE"
    load_settings || die "$NAME is not up"
    local i; i=$(node_index "$1")
    node_addr "$i"
}

main() {
    [ $# -ge 1 ] || usage
    local cmd=$1; shift
    case $cmd in
        -h|--help|help) usage ;;
    esac
    [ "$(id -u)" -eq 0 ] || die "run as root (network namespaces)"
    case $cmd in
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status "$@" ;;
        exec) cmd_exec "$@" ;;
        ip) cmd_ip "$@" ;;
        *) usage ;;
    esac
}

main "$@"
