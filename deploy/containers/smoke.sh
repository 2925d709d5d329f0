#!/usr/bin/env bash
# End-to-end check of the container deployment, from the host with the AWS CLI. Root only.
#
#   deploy/containers/smoke.sh [--nodes 9] [--name strata-smoke] [--subnet 10.90]
#
# cluster.sh up (builds the image if missing) -> CreateTable through n1 -> PutItem of 20
# items through nodes in every AZ -> strongly consistent GetItem of each through another
# AZ's node -> `strata cluster status --all` inside n2 (every partition has a leader) ->
# restart of n3 (same address and MAC) -> strong reads through n3 again -> down. Tears the
# cluster down on any failure. Exit 0 only if every step passed.
set -euo pipefail
LOG_TAG=smoke # used by lib.sh's log()
# shellcheck source-path=SCRIPTDIR disable=SC2034
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=strata-smoke
NODES=9
SUBNET=10.90
ITEMS=20
TABLE=SmokeMusic
DEADLINE_S=60

while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=${2:?}; shift 2 ;;
    --name) NAME=${2:?}; shift 2 ;;
    --subnet) SUBNET=${2:?}; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
need_root
command -v aws >/dev/null || die "the AWS CLI is missing (deploy/install-deps.sh installs it)"
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1
AWS=(/usr/bin/aws --cli-read-timeout 20 --cli-connect-timeout 5)
CLUSTER=("$CONTAINERS_DIR/cluster.sh")
ip_of() { local i=$1 az=$(( ($1 - 1) % 3 + 1 )); echo "$SUBNET.$az.$((10 + i))"; }
ep() { echo "http://$(ip_of "$1"):8000"; }

cleanup() { bash "${CLUSTER[@]}" down --name "$NAME" || true; }
trap cleanup EXIT

# Retries a command until it succeeds or DEADLINE_S passes (new leaders take ~2 s).
retry() {
  local end=$((SECONDS + DEADLINE_S))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || { "$@"; die "gave up after ${DEADLINE_S}s: $*"; }
    sleep 0.5
  done
}

key() { printf '{"Artist":{"S":"a%d"},"Song":{"S":"s%d"}}' "$1" "$1"; }
item() { printf '{"Artist":{"S":"a%d"},"Song":{"S":"s%d"},"N":{"N":"%d"}}' "$1" "$1" "$1"; }

get_strong() { # node item: the item's N through that node, strongly consistent
  "${AWS[@]}" dynamodb get-item --endpoint-url "$(ep "$1")" --table-name "$TABLE" \
    --key "$(key "$2")" --consistent-read --query Item.N.N --output text
}

check_reads() { # node: every item reads back strongly through it
  local node=$1 k v
  for k in $(seq 1 "$ITEMS"); do
    v=$(get_strong "$node" "$k" 2>/dev/null || true)
    [ "$v" = "$k" ] || return 1
  done
}

t0=$SECONDS
bash "${CLUSTER[@]}" up --nodes "$NODES" --name "$NAME" --subnet "$SUBNET"
"${AWS[@]}" dynamodb create-table --endpoint-url "$(ep 1)" --table-name "$TABLE" \
  --attribute-definitions AttributeName=Artist,AttributeType=S AttributeName=Song,AttributeType=S \
  --key-schema AttributeName=Artist,KeyType=HASH AttributeName=Song,KeyType=RANGE \
  --billing-mode PAY_PER_REQUEST >/dev/null
log "table $TABLE created through n1"
for k in $(seq 1 "$ITEMS"); do
  retry "${AWS[@]}" dynamodb put-item --endpoint-url "$(ep $(( (k - 1) % NODES + 1 )))" \
    --table-name "$TABLE" --item "$(item "$k")"
done
log "$ITEMS items put through n1..n$NODES"
for k in $(seq 1 "$ITEMS"); do
  node=$(( k % NODES + 1 )) # another node than the writer, in another AZ
  v=$(get_strong "$node" "$k") || die "strong read of item $k through n$node failed"
  [ "$v" = "$k" ] || die "item $k through n$node: got '$v'"
done
log "every item read back strongly through a node of another AZ"
status=$(podman exec "$NAME-n2" strata cluster status --all)
summary=$(grep '^SUMMARY' <<<"$status")
log "$summary"
grep -q "nodes up $NODES/$NODES" <<<"$summary" || die "not every node up: $summary"
grep -q "without leader 0, leader unknown 0" <<<"$summary" || die "partitions without leader"
bash "${CLUSTER[@]}" restart 3 --name "$NAME"
retry check_reads 3
log "n3 restarted at $(ip_of 3); every item reads back strongly through it"
log "passed in $((SECONDS - t0))s"
