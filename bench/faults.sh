#!/usr/bin/env bash
# Fault suite (issue 9), on demand: kills, freezes, reload storms, SIGTERM and refresh races against
# the release binaries, with figures. See bench/faults.py for the scenarios and what is counted.
# Usage: bench/faults.sh [kill9|sigstop|sighup|sigterm|race ...]   (env: CLIENTS, DATABASE_URL for
#        the PostgreSQL refresh race, SKIP_BUILD=1 to use the release binaries as built)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p authserver --bin authserver --example hello \
  -p proxy --bin proxy
exec python3 bench/faults.py "$@"
