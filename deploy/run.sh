#!/usr/bin/env bash
# Sets everything up on a Debian 12 machine (as root), builds Strata and runs a local
# node serving the DynamoDB API on http://127.0.0.1:8000 in the foreground (Ctrl-C stops
# it; data stays in STRATA_DATA_DIR, default /var/lib/strata/local).
#   STRATA_PORT=8000 STRATA_DATA_DIR=... bash deploy/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
if [ ! -f build/release/build.ninja ]; then
    meson setup build/release --buildtype=release -Dtests=false -Dbench=false
fi
ninja -C build/release node/stratad

port=${STRATA_PORT:-8000}
data=${STRATA_DATA_DIR:-/var/lib/strata/local}
mkdir -p "$data"
cat <<MSG
Strata: DynamoDB API on http://127.0.0.1:$port (data in $data)
Point the AWS CLI at it, with any credentials:
  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION=us-east-1
  aws dynamodb list-tables --endpoint-url http://127.0.0.1:$port
MSG
exec build/release/node/stratad --listen "127.0.0.1:$port" --data-dir "$data"
