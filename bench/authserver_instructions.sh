#!/usr/bin/env bash
# User-space instructions per request of the authorization server, counted by valgrind's
# callgrind (all its threads, the SQLite writer's included): a figure other processes on a busy
# machine do not move, for before/after comparisons of a change to the hot paths. The cases of
# bench/authserver.sh, on HTTP/1.1 keep-alive connections:
#   hello               the axum hello-world (GET /), the yardstick of the ratios
#   introspection       POST /o/introspect/, a client with client credentials asking about a
#                       user's opaque token (after the warm-up, every lookup a cache hit)
#   client_credentials  POST /o/token/ with grant_type=client_credentials (a row written each)
# Each server runs alone under callgrind; after a warm-up its counters are zeroed, $SMALL requests
# sent (h2load --h1, $CONNS connections), counters dumped, $LARGE more sent, dumped again:
# (I_large - I_small) / (LARGE - SMALL) is one request without starting or warming up. Kernel
# work is not counted.
# Usage: bench/authserver_instructions.sh   (env: CASES="hello introspection client_credentials",
#        SMALL=500, LARGE=2500, CONNS=4, KEEP=dir (keep the callgrind files, for
#        callgrind_annotate), AUTH, HELLO (binaries; default $CARGO_TARGET_DIR or target /release),
#        DATABASE_URL=postgres://… (a fresh schema there; default a temporary SQLite file))
# Build: cargo build --release -p authserver --bin authserver --example hello
#        (with CARGO_PROFILE_RELEASE_DEBUG=line-tables-only for annotated lines).
set -euo pipefail
cd "$(dirname "$0")/.."
CASES=${CASES:-hello introspection client_credentials}
SMALL=${SMALL:-500}
LARGE=${LARGE:-2500}
CONNS=${CONNS:-4}
BIN=${CARGO_TARGET_DIR:-target}/release
AUTH=${AUTH:-$BIN/authserver}
HELLO=${HELLO:-$BIN/examples/hello}
for tool in valgrind callgrind_control h2load; do
  command -v $tool >/dev/null || { echo "missing $tool (apt-get install valgrind nghttp2-client)" >&2; exit 1; }
done
for b in "$AUTH" "$HELLO"; do [ -x "$b" ] || { echo "missing $b: build it (see the top of $0)" >&2; exit 1; }; done
. bench/common.sh
if [[ "${DATABASE_URL:-}" == postgres* ]]; then
  pg_schema bench_cg
fi

$AUTH migrate --database-url "$DB" >/dev/null
echo bench-password | $AUTH user create --username bench --database-url "$DB" >/dev/null
PW=$($AUTH app create --name pw --scopes '*' --database-url "$DB" --json)
CC=$($AUTH app create --name cc --scopes '*' --grant-type client-credentials --introspect --database-url "$DB" --json)
PW_BASIC=$(basic "$PW"); CC_BASIC=$(basic "$CC")

wait_up() { # $1 url: polls until it answers (valgrind starts a program 20-50x slower)
  for _ in $(seq 600); do curl -s -o /dev/null "$1" && return 0; sleep 0.2; done
  echo "no answer from $1 (see $WORK/valgrind-$CASE.log)" >&2; cat "$WORK/valgrind-$CASE.log" >&2; exit 1
}
# Sends $1 requests of the case on $CONNS keep-alive connections; fails on anything but 2xx.
load() {
  local out
  if [ "$CASE" = hello ]; then
    out=$(h2load --h1 -c"$CONNS" -n"$1" "$URL")
  else
    out=$(h2load --h1 -c"$CONNS" -n"$1" -d "$WORK/body-$CASE" -H "Authorization: Basic $CC_BASIC" \
      -H "Content-Type: application/x-www-form-urlencoded" "$URL")
  fi
  grep -q "status codes: $1 2xx" <<<"$out" || { echo "$CASE: not every request answered 2xx:" >&2; echo "$out" >&2; exit 1; }
}

ROWS=""
for CASE in $CASES; do
  PORT=$(free_port)
  case $CASE in
    hello)
      URL="http://127.0.0.1:$PORT/"
      under_callgrind "$HELLO" "127.0.0.1:$PORT" ;;
    introspection|client_credentials)
      AUTHSERVER_LISTEN=127.0.0.1:$PORT RUST_LOG=warn under_callgrind "$AUTH" serve --database-url "$DB"
      wait_up "http://127.0.0.1:$PORT/healthz"
      if [ "$CASE" = introspection ]; then
        URL="http://127.0.0.1:$PORT/o/introspect/"
        token=$(curl -s -H "Authorization: Basic $PW_BASIC" -d grant_type=password -d username=bench \
          -d password=bench-password "http://127.0.0.1:$PORT/o/token/" \
          | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
        printf 'token=%s' "$token" >"$WORK/body-$CASE"
      else
        URL="http://127.0.0.1:$PORT/o/token/"
        printf 'grant_type=client_credentials&scope=read' >"$WORK/body-$CASE"
      fi ;;
    *) echo "unknown case $CASE" >&2; exit 1 ;;
  esac
  wait_up "$URL"
  measure_case
done

python3 - "$ROWS" <<PY
import sys
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
print(f"authserver user-space instructions per request (callgrind), ($LARGE - $SMALL) requests on $CONNS keep-alive connections")
print(f"{'case':<20}{'I($SMALL)':>14}{'I($LARGE)':>14}{'per request':>13}{'/ hello':>9}")
per = {}
for case, small, large in rows:
    per[case] = (int(large) - int(small)) / ($LARGE - $SMALL)
for case, small, large in rows:
    ratio = f"{per[case] / per['hello']:>9.1f}" if "hello" in per else ""
    print(f"{case:<20}{int(small):>14,}{int(large):>14,}{per[case]:>13,.0f}{ratio}")
PY
