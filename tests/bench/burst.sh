#!/usr/bin/env bash
# Burst benchmark (not part of the test suite): builds the release binary, then runs
# tests/bench/burst.py, which prints one table. Arguments go to burst.py, e.g. --pairs 1000.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ $(id -u) -ne 0 ]]; then
        echo "burst.sh: must run as root (try: sudo bash tests/bench/burst.sh)" >&2
        exit 1
fi
bash scripts/setup.sh
bash scripts/build.sh release >/dev/null || bash scripts/build.sh release
exec /usr/bin/python3 tests/bench/burst.py "$@"
