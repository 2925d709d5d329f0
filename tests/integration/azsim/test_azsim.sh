#!/usr/bin/env bash
# Integration test of deploy/azsim.sh: 9 stratad nodes in 3 AZs with 5 ms between AZs.
# Checks every node answers GET / from another namespace, that the nine form one cluster
# (n1's map lists nine nodes in three AZs; an item written in one AZ is read strongly in
# another), that inter-AZ round trips cost at least twice the delay while intra-AZ ones
# do not, and that `down` leaves no namespace, interface, process or state behind (also
# after a failed `up`).
#   tests/integration/azsim/test_azsim.sh STRATAD
# Root only; exits 77 (skipped) without root, ip netns, or a way to delay packets.
set -euo pipefail

STRATAD=${1:?usage: test_azsim.sh STRATAD}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
AZSIM=$HERE/../../../deploy/azsim.sh
NAME=strata-t$$
DELAY_MS=5
PORT=8000
export STRATA_AZSIM_STATE=${STRATA_AZSIM_STATE:-/run/strata-azsim}
STATE=$STRATA_AZSIM_STATE/$NAME

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
pass() { echo "ok: $*"; }

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null && ip netns list >/dev/null 2>&1 || skip "ip netns unavailable"
for tool in curl ping; do command -v $tool >/dev/null || skip "$tool missing"; done
probe=$NAME-probe
ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace"
ip -n "$probe" link set lo up
netem=0
ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms 2>/dev/null && netem=1
ip netns del "$probe"
if [ $netem = 0 ]; then
    command -v iptables >/dev/null && pkg-config --exists libnetfilter_queue 2>/dev/null ||
        skip "no netem and no iptables + libnetfilter-queue-dev to delay packets"
fi

links_in_root() { ip -o link show | awk -F': ' '{print $2}' | sort; }
links_before=$(links_in_root)

cleanup() { "$AZSIM" down --name "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# Nothing of instance $NAME may remain: namespaces, processes, root-ns links, state.
assert_gone() {
    local what=$1 left
    left=$(ip netns list | awk '{print $1}' | grep -E "^$NAME-" || true)
    [ -z "$left" ] || fail "$what: namespaces left: $left"
    left=$(pgrep -f "$STATE/" || true)
    [ -z "$left" ] || fail "$what: processes left: $left"
    # Only links named like ours count: other tools on the machine (containers, a module
    # load creating ifb0) may change the root namespace meanwhile.
    left=$(comm -13 <(echo "$links_before") <(links_in_root) | grep -E '^(v[0-9]+|br0|eth0)(@|$)' || true)
    [ -z "$left" ] || fail "$what: links left in the root namespace: $left"
    [ ! -e "$STATE" ] || fail "$what: state dir $STATE left"
    pass "$what leaves nothing behind"
}

# A failed up (stratad exits at once) must clean up after itself.
if "$AZSIM" up --name "$NAME" --nodes 3 --azs 3 --stratad /bin/false >/dev/null 2>&1; then
    fail "up with a failing stratad succeeded"
fi
assert_gone "failed up"

"$AZSIM" up --name "$NAME" --nodes 9 --azs 3 --inter-az-delay-ms $DELAY_MS --port $PORT \
    --stratad "$STRATAD"
mode=$(sed -n 's/^DELAY_MODE=//p' "$STATE/settings")
echo "delay mode: $mode"

# Every node answers GET / from the next node's namespace (another AZ).
for i in $(seq 1 9); do
    from=$((i % 9 + 1))
    addr=$("$AZSIM" ip --name "$NAME" "$i")
    code=$("$AZSIM" exec --name "$NAME" "$from" curl -s -o /dev/null -w '%{http_code}' \
        --max-time 10 "http://$addr:$PORT/" || true)
    [ "$code" = 200 ] || fail "n$i ($addr) from n$from: HTTP '$code'"
done
pass "all 9 stratad answer GET / from another namespace"

# "ACTIVE-node-count AZ-count" in n1's cluster map.
cluster_shape() {
    "$AZSIM" exec --name "$NAME" 1 curl -s --max-time 5 \
        "http://$("$AZSIM" ip --name "$NAME" 1):$PORT/admin/cluster" |
        /usr/bin/python3 -c 'import json, sys
d = json.load(sys.stdin)
active = [n for n in d["nodes"] if n["state"] == "ACTIVE"]
print(len(active), len({n["az"] for n in active}))' 2>/dev/null || true
}
deadline=$((SECONDS + 120))
until [ "$(cluster_shape)" = "9 3" ]; do
    [ $SECONDS -lt $deadline ] || fail "n1's cluster map: '$(cluster_shape)', want 9 ACTIVE nodes in 3 AZs"
    sleep 0.5
done
pass "the 9 nodes form one cluster in 3 AZs"

# The AWS CLI inside node I's namespace, against node J.
aws_at() {
    local i=$1 j=$2; shift 2
    "$AZSIM" exec --name "$NAME" "$i" env AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x \
        AWS_DEFAULT_REGION=us-east-1 /usr/bin/aws --output json \
        --endpoint-url "http://$("$AZSIM" ip --name "$NAME" "$j"):$PORT" dynamodb "$@"
}
aws_at 1 1 create-table --table-name azsim --billing-mode PAY_PER_REQUEST \
    --attribute-definitions AttributeName=k,AttributeType=S \
    --key-schema AttributeName=k,KeyType=HASH >/dev/null || fail "create-table through n1"
deadline=$((SECONDS + 60))
until aws_at 5 5 describe-table --table-name azsim 2>/dev/null | grep -q '"TableStatus": "ACTIVE"'; do
    [ $SECONDS -lt $deadline ] || fail "table azsim not ACTIVE through n5 within 60 s"
    sleep 0.5
done
aws_at 2 2 put-item --table-name azsim --item '{"k":{"S":"x"},"v":{"S":"from-az2"}}' ||
    fail "put-item through n2"
got=$(aws_at 9 9 get-item --table-name azsim --key '{"k":{"S":"x"}}' --consistent-read) ||
    fail "get-item through n9"
grep -q from-az2 <<<"$got" || fail "strong read through n9 (AZ 3): $got"
pass "written through n2 (AZ 2), read strongly through n9 (AZ 3)"

# "min avg" RTT in ms from node $1 to node $2.
rtt() {
    local to; to=$("$AZSIM" ip --name "$NAME" "$2")
    "$AZSIM" exec --name "$NAME" "$1" ping -n -q -c 10 -i 0.05 -W 2 "$to" |
        awk -F'[/ ]+' '/^rtt/ {print $7, $8}'
}
# Nodes are placed round robin: n1, n4, n7 in AZ 1, n2 in AZ 2, n3 in AZ 3.
read -r intra_min intra_avg <<<"$(rtt 1 4)"
read -r inter_min inter_avg <<<"$(rtt 1 2)"
read -r inter3_min inter3_avg <<<"$(rtt 2 3)"
echo "RTT intra-AZ n1->n4: min $intra_min avg $intra_avg ms"
echo "RTT inter-AZ n1->n2: min $inter_min avg $inter_avg ms; n2->n3: min $inter3_min avg $inter3_avg ms"
[ -n "$intra_min" ] && [ -n "$inter_min" ] && [ -n "$inter3_min" ] || fail "ping failed"
awk -v m="$inter_min" -v m3="$inter3_min" -v d=$DELAY_MS 'BEGIN { exit !(m >= 2*d && m3 >= 2*d) }' ||
    fail "inter-AZ RTT below twice the delay ($inter_min, $inter3_min < $((2 * DELAY_MS)) ms)"
awk -v m="$intra_min" -v d=$DELAY_MS 'BEGIN { exit !(m < d) }' ||
    fail "intra-AZ RTT $intra_min ms is not below the $DELAY_MS ms delay"
pass "inter-AZ RTT >= 2 x $DELAY_MS ms, intra-AZ below $DELAY_MS ms"

"$AZSIM" status --name "$NAME" >/dev/null || fail "status failed"
helpers=$(cat "$STATE"/n*/nfq-delay.pid 2>/dev/null || true)
"$AZSIM" down --name "$NAME"
assert_gone "down"
for pid in $helpers; do
    [ ! -e "/proc/$pid" ] || fail "nfq-delay $pid survived down"
done
"$AZSIM" down --name "$NAME" || fail "second down failed"
pass "down is idempotent"

# Per-pair override and loss: AZ1<->AZ3 at 8 ms, 40% loss each way between AZs, so
# a ping round trip is lost with probability 1 - 0.6^2 = 64%. Independent nodes: this
# checks the network, and a cluster need not form over 40% loss.
"$AZSIM" up --name "$NAME" --mode single --nodes 3 --azs 3 --inter-az-delay-ms 1 \
    --az-delay 1-3=8 --loss-pct 40 --port $PORT --stratad "$STRATAD" >/dev/null
out=$("$AZSIM" exec --name "$NAME" 1 ping -n -q -c 60 -i 0.02 -W 1 "$("$AZSIM" ip --name "$NAME" 3)" || true)
lost=$(echo "$out" | sed -n 's/.* \([0-9.]*\)% packet loss.*/\1/p')
min=$(echo "$out" | awk -F'[/ ]+' '/^rtt/ {print $7}')
echo "AZ1->AZ3 with 8 ms and 40% loss: ping loss $lost%, min RTT $min ms"
awk -v l="$lost" -v m="$min" 'BEGIN { exit !(l >= 40 && l <= 90 && m >= 16) }' ||
    fail "override/loss: loss $lost% (want 40..90), min RTT $min ms (want >= 16)"
pass "--az-delay override and --loss-pct"
"$AZSIM" down --name "$NAME"
assert_gone "second down"
trap - EXIT
echo "PASS"
