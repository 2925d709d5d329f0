#!/bin/bash
# On-demand burst benchmark (issue #7): throughput, throttled requests and partition count
# over time while splits for heat absorb a burst, plotted with gnuplot.
#
#   tests/bench/burst/run.sh <stratad-binary> [OUT_DIR] [strata-binary]
#
# Runs tests/integration/burst.py (read its header) on a 3-node loopback cluster with
# bigger figures than the default test run: RATE writes/s at the top (default 1200),
# partitions of CEILING WCU (default 100; DynamoDB's 1,000 needs more load than one small
# machine drives with a Python client), split for heat after HEAT s (default 5), SECONDS
# of load (default 120), a table of INITIAL partitions (default 2), WORKERS writers
# (default 48). Writes OUT_DIR/burst.csv (per second: requests, acknowledged, throttled,
# errors, partitions) and OUT_DIR/burst.png (needs gnuplot: STRATA_BENCH_DEPS=1 deploy/install-deps.sh),
# and prints the figures: when the throttled share fell below 1%, partitions at the end.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 <stratad-binary> [OUT_DIR] [strata-binary]" >&2; exit 2; }
stratad=$(realpath -e "$1")
out=${2:-.}
mkdir -p "$out"
out=$(realpath "$out")
here=$(cd "$(dirname "$0")" && pwd)
command -v gnuplot >/dev/null || echo "$0: gnuplot not installed: CSV only (STRATA_BENCH_DEPS=1 deploy/install-deps.sh)" >&2
exec /usr/bin/python3 "$here/../../integration/burst.py" "$stratad" ${3:+"$(realpath -e "$3")"} \
    --rate "${RATE:-1200}" --ceiling "${CEILING:-100}" --heat "${HEAT:-5}" \
    --seconds "${SECONDS_OF_LOAD:-120}" --initial "${INITIAL:-2}" --workers "${WORKERS:-48}" \
    --csv "$out/burst.csv" --plot "$out/burst.png"
