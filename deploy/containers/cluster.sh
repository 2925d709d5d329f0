#!/usr/bin/env bash
# A Strata cluster of podman containers in three AZs on one machine. Root only.
#
#   deploy/containers/cluster.sh up [--nodes 9] [--name strata] [--image TAG]
#                                   [--subnet 10.89] [--ready-timeout 180] [--keep-on-failure]
#   deploy/containers/cluster.sh status [--name strata]   containers, readiness, cluster status
#   deploy/containers/cluster.sh restart NODE [--name strata]   podman restart of node NODE
#   deploy/containers/cluster.sh down [--name strata]     remove containers, volumes, network
#
# Network: one podman network NAME-net = SUBNET.0.0/16 (gateway SUBNET.0.1), one /24 per AZ:
# node I is in AZ A = ((I-1) mod 3)+1 with the fixed address SUBNET.A.(10+I) and the MAC
# 02:00 + that address in hex, so a restarted container comes back at once where the
# others expect it. (Separate podman networks per AZ would masquerade source addresses;
# podman-compose cannot set static IPs: hence one network and plain `podman run`.)
# Node I: container NAME-nI (hostname nI, --init), id I, AZ azA, host label nI, client port
# 8000 and peer port 7000 on its address, data in the volume NAME-nI-data
# (/var/lib/strata). n1 bootstraps (waits for 3 nodes), the others join n1. n1..n3 are in
# three AZs, as the first three replicas need.
# `up` builds the image first if it is missing (build-image.sh), waits until every node
# answers GET /admin/cluster with "ready":true and node 1 lists every node ACTIVE (curl from
# the host to the container addresses), then prints the endpoints. A failed `up` tears
# itself down (unless --keep-on-failure) after printing the failing node's log tail.
# Everything carries the label strata.cluster=NAME, so `down` finds it without any state
# (after a failed or killed `up` too) and is safe to run twice.
# Podman runs with CONTAINERS_CONF from lib.sh (runc, explicit nofile/nproc ulimits).
set -euo pipefail
LOG_TAG=containers # used by lib.sh's log()
# shellcheck source-path=SCRIPTDIR disable=SC2034
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=strata
NODES=9
AZS=3
IMAGE=$IMAGE_DEFAULT
SUBNET=10.89
READY_TIMEOUT_S=180
KEEP_ON_FAILURE=0
CLIENT_PORT=8000
PEER_PORT=7000

usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 64; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
node_az() { echo $(( ($1 - 1) % AZS + 1 )); }
node_ip() { echo "$SUBNET.$(node_az "$1").$(( 10 + $1 ))"; }
node_mac() {
  local a b c d
  IFS=. read -r a b c d <<<"$(node_ip "$1")"
  printf '02:00:%02x:%02x:%02x:%02x' "$a" "$b" "$c" "$d"
}
node_ctr() { echo "$NAME-n$1"; }
net_name() { echo "$NAME-net"; }
label() { echo "strata.cluster=$NAME"; }

parse_common() { # sets REST to what is left
  REST=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --name) NAME=${2:?}; shift 2 ;;
      --nodes) NODES=${2:?}; shift 2 ;;
      --image) IMAGE=${2:?}; shift 2 ;;
      --subnet) SUBNET=${2:?}; shift 2 ;;
      --ready-timeout) READY_TIMEOUT_S=${2:?}; shift 2 ;;
      --keep-on-failure) KEEP_ON_FAILURE=1; shift ;;
      -h|--help) usage ;;
      *) REST+=("$1"); shift ;;
    esac
  done
  [[ $NAME =~ ^[a-z][a-z0-9-]{0,30}$ ]] || die "--name: lowercase letters, digits, '-' (at most 31)"
  if ! is_uint "$NODES" || [ "$NODES" -lt 3 ] || [ "$NODES" -gt 240 ]; then die "--nodes: 3..240"; fi
  is_uint "$READY_TIMEOUT_S" || die "--ready-timeout: seconds"
  [[ $SUBNET =~ ^(10\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])|192\.168)$ ]] ||
    die "--subnet: the first two octets of a private /16, e.g. 10.89"
}

# ------------------------------------------------------------------ up

node_args() { # the stratad command line of node $1
  local i=$1 ip; ip=$(node_ip "$i")
  local args=(--node-id "$i" --az "az$(node_az "$i")" --host-label "n$i"
    --listen "0.0.0.0:$CLIENT_PORT" --advertise "$ip:$CLIENT_PORT"
    --peer-listen "0.0.0.0:$PEER_PORT" --peer-advertise "$ip:$PEER_PORT"
    --data-dir /var/lib/strata)
  if [ "$i" = 1 ]; then
    args+=(--bootstrap --bootstrap-expect 3)
  else
    args+=(--join "$(node_ip 1):$PEER_PORT")
  fi
  printf '%s\n' "${args[@]}"
}

start_node() {
  local i=$1 args
  mapfile -t args < <(node_args "$i")
  podman volume create --label "$(label)" "$(node_ctr "$i")-data" >/dev/null
  podman run -d --init --name "$(node_ctr "$i")" --hostname "n$i" \
    --label "$(label)" --label "strata.node=$i" --label "strata.az=az$(node_az "$i")" \
    --network "$(net_name)" --ip "$(node_ip "$i")" --mac-address "$(node_mac "$i")" \
    --volume "$(node_ctr "$i")-data:/var/lib/strata" \
    --stop-timeout 20 \
    "$IMAGE" "${args[@]}" >/dev/null
}

admin_cluster() { curl -s --max-time 2 "http://$1:$CLIENT_PORT/admin/cluster" || true; }

node_ready() { admin_cluster "$1" | grep -q '"ready":true'; } # $1: address

# The address of a running container of the cluster, from podman (status and restart do
# not need --subnet).
ctr_ip() {
  podman inspect -f "{{(index .NetworkSettings.Networks \"$(net_name)\").IPAddress}}" \
    "$(node_ctr "$1")" 2>/dev/null || true
}

all_active() { # node 1 lists every node, each ACTIVE
  local n; n=$(admin_cluster "$(node_ip 1)" | grep -o '"state":"ACTIVE"' | wc -l)
  [ "$n" -ge "$NODES" ]
}

running() { [ "$(podman inspect -f '{{.State.Running}}' "$(node_ctr "$1")" 2>/dev/null)" = true ]; }

fail_node() {
  log "node $1 ($(node_ctr "$1")) $2; its log tail:"
  podman logs --tail 30 "$(node_ctr "$1")" >&2 || true
  exit 1
}

wait_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT_S)) i pending
  while :; do
    pending=()
    for i in $(seq 1 "$NODES"); do
      running "$i" || fail_node "$i" "exited while the cluster formed"
      node_ready "$(node_ip "$i")" || pending+=("$i")
    done
    if [ ${#pending[@]} -eq 0 ] && all_active; then return 0; fi
    if [ $SECONDS -ge $deadline ]; then
      [ ${#pending[@]} -gt 0 ] && fail_node "${pending[0]}" "not ready after ${READY_TIMEOUT_S}s (also waiting: ${pending[*]})"
      log "node 1 does not list $NODES ACTIVE nodes after ${READY_TIMEOUT_S}s:"
      admin_cluster "$(node_ip 1)" >&2
      exit 1
    fi
    sleep 0.5
  done
}

print_endpoints() {
  local i
  printf '%-6s %-4s %-14s %-19s %s\n' NODE AZ ADDRESS MAC ENDPOINT
  for i in $(seq 1 "$NODES"); do
    printf '%-6s %-4s %-14s %-19s %s\n' "n$i" "az$(node_az "$i")" "$(node_ip "$i")" \
      "$(node_mac "$i")" "http://$(node_ip "$i"):$CLIENT_PORT"
  done
  cat <<EOF

Every node serves every request, e.g.
  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1
  aws dynamodb list-tables --endpoint-url http://$(node_ip 1):$CLIENT_PORT
  podman exec $(node_ctr 1) strata cluster status --all
  $0 down --name $NAME
EOF
}

UP_DONE=0
up_cleanup() {
  [ "$UP_DONE" = 1 ] && return 0
  if [ "$KEEP_ON_FAILURE" = 1 ]; then
    log "up failed; left as is (--keep-on-failure): $0 down --name $NAME"
  else
    log "up failed; tearing down"
    cmd_down_named
  fi
}

cmd_up() {
  [ ${#REST[@]} -eq 0 ] || die "up: unexpected ${REST[*]}"
  ensure_host_packages
  write_containers_conf
  if ! podman image exists "$IMAGE"; then
    [ "$IMAGE" = "$IMAGE_DEFAULT" ] || die "image $IMAGE not found"
    bash "$CONTAINERS_DIR/build-image.sh" --tag "$IMAGE"
  fi
  if podman network exists "$(net_name)" ||
     [ -n "$(podman ps -a -q --filter "label=$(label)")" ]; then
    die "cluster '$NAME' exists already: $0 down --name $NAME"
  fi
  trap up_cleanup EXIT
  log "network $(net_name): $SUBNET.0.0/16, AZ A = $SUBNET.A.0/24"
  podman network create --subnet "$SUBNET.0.0/16" --gateway "$SUBNET.0.1" \
    --label "$(label)" "$(net_name)" >/dev/null
  local i
  for i in $(seq 1 "$NODES"); do
    start_node "$i"
  done
  log "started $NODES containers; waiting until every node is ready (at most ${READY_TIMEOUT_S}s)"
  local t0=$SECONDS
  wait_ready
  UP_DONE=1
  log "all $NODES nodes ready after $((SECONDS - t0))s"
  print_endpoints
}

# ------------------------------------------------------------------ down, status, restart

cmd_down_named() {
  local ids vols
  ids=$(podman ps -a -q --filter "label=$(label)" 2>/dev/null || true)
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086 # one id per word
    podman rm -f -t 5 $ids >/dev/null || true
  fi
  vols=$(podman volume ls -q --filter "label=$(label)" 2>/dev/null || true)
  if [ -n "$vols" ]; then
    # shellcheck disable=SC2086
    podman volume rm -f $vols >/dev/null || true
  fi
  if podman network exists "$(net_name)" 2>/dev/null; then
    podman network rm -f "$(net_name)" >/dev/null || true
  fi
  [ -z "$(podman ps -a -q --filter "label=$(label)" 2>/dev/null)" ] ||
    die "containers of '$NAME' are still there"
  ! podman network exists "$(net_name)" 2>/dev/null || die "network $(net_name) is still there"
  log "cluster '$NAME' removed"
}

cmd_down() {
  [ ${#REST[@]} -eq 0 ] || die "down: unexpected ${REST[*]}"
  write_containers_conf
  cmd_down_named
}

# Containers of the cluster as "node ip" lines, whatever --nodes says.
listed_nodes() {
  podman ps -a --filter "label=$(label)" \
    --format '{{index .Labels "strata.node"}}' 2>/dev/null | sort -n
}

cmd_status() {
  [ ${#REST[@]} -eq 0 ] || die "status: unexpected ${REST[*]}"
  write_containers_conf
  local i first="" state ready ip
  printf '%-14s %-4s %-14s %-10s %s\n' CONTAINER AZ ADDRESS STATE READY
  for i in $(listed_nodes); do
    state=$(podman inspect -f '{{.State.Status}}' "$(node_ctr "$i")" 2>/dev/null || echo missing)
    ip=$(ctr_ip "$i")
    ready=no
    if [ -n "$ip" ] && node_ready "$ip"; then ready=yes; [ -n "$first" ] || first=$i; fi
    printf '%-14s %-4s %-14s %-10s %s\n' "$(node_ctr "$i")" "az$(node_az "$i")" \
      "${ip:--}" "$state" "$ready"
  done
  [ -n "$first" ] || die "no node of '$NAME' is ready"
  echo
  podman exec "$(node_ctr "$first")" strata cluster status --all \
    --endpoint "127.0.0.1:$CLIENT_PORT"
}

cmd_restart() {
  if [ ${#REST[@]} -ne 1 ] || ! is_uint "${REST[0]}"; then die "restart NODE (a node number)"; fi
  write_containers_conf
  local i=${REST[0]} deadline=$((SECONDS + READY_TIMEOUT_S)) ip
  podman restart -t 20 "$(node_ctr "$i")" >/dev/null
  ip=$(ctr_ip "$i")
  [ -n "$ip" ] || fail_node "$i" "has no address on $(net_name) after the restart"
  until node_ready "$ip"; do
    running "$i" || fail_node "$i" "exited after the restart"
    [ $SECONDS -lt $deadline ] || fail_node "$i" "not ready ${READY_TIMEOUT_S}s after the restart"
    sleep 0.5
  done
  log "node $i ready again at $ip"
}

main() {
  [ $# -ge 1 ] || usage
  local cmd=$1; shift
  parse_common "$@"
  need_root
  case "$cmd" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    restart) cmd_restart ;;
    *) usage ;;
  esac
}

main "$@"
