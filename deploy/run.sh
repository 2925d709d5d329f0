#!/usr/bin/env bash
# Sets everything up on a Debian 12 machine (as root), builds Strata and runs it in the
# foreground (Ctrl-C stops it):
#   bash deploy/run.sh [LAUNCHER OPTIONS]   a 3-node, 3-AZ cluster on loopback, through
#                                           deploy/cluster.sh (client ports 8000-8002, peer
#                                           ports 9000-9002, data in /var/lib/strata-cluster;
#                                           see deploy/cluster.sh --help for the options)
#   bash deploy/run.sh --single             one node on http://127.0.0.1:8000, without
#                                           replication (data in /var/lib/strata/local)
#   STRATA_PORT=8000 STRATA_DATA_DIR=... bash deploy/run.sh [--single]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != --single ]; then
    exec bash deploy/cluster.sh "$@"
fi
shift
[ $# -eq 0 ] || { echo "run.sh: --single takes no other option" >&2; exit 2; }

bash deploy/install-deps.sh
if [ ! -f build/release/build.ninja ]; then
    meson setup build/release --buildtype=release -Dtests=false -Dbench=false
fi
ninja -C build/release node/stratad

port=${STRATA_PORT:-8000}
data=${STRATA_DATA_DIR:-/var/lib/strata/local}
mkdir -p "$data"
cat <<MSG
Strata: one node, DynamoDB API on http://127.0.0.1:$port (data in $data)
Point the AWS CLI at it, with any credentials:
  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1
  aws dynamodb list-tables --endpoint-url http://127.0.0.1:$port
MSG
exec build/release/node/stratad --listen "127.0.0.1:$port" --data-dir "$data"
