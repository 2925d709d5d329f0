#!/usr/bin/env bash
# Chaos run against stratad: tests/chaos/run.sh --stratad BIN [--duration S]
#   [--schedule short|long] [--seed N] [--clients N] [--keys N] [--out DIR] [--keep]
# See tests/chaos/README.md. Uses Debian's /usr/bin/python3 (not the first on PATH).
set -euo pipefail
exec /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/chaos.py" "$@"
