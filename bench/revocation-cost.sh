#!/usr/bin/env bash
# The revocation receiver's cost on the proxy's request path (issue 24, "Cost"), in instructions,
# which a noisy machine does not blur: the proxy runs under valgrind --tool=callgrind, receiver
# off then on (same binary, same route needing scope `read`, every measured request a cache hit
# on keep-alive connections). Each case runs twice, with $WARM and with $WARM + $MEASURED
# requests; the difference of the two runs' instruction totals (callgrind's dump at exit) /
# $MEASURED is the instructions per request, start-up left out. (callgrind_control could not
# reach the proxy here: vgdb found no process to talk to.) Prints both and their ratio.
# Usage: bench/revocation-cost.sh   (env: PROXY (default target/release/proxy), AUTH, HELLO
#        (default target/debug/...: they are not measured), WARM=500, MEASURED=2000)
set -euo pipefail
cd "$(dirname "$0")/.."
WARM=${WARM:-500}
MEASURED=${MEASURED:-2000}
PROXY=${PROXY:-target/release/proxy}
AUTH=${AUTH:-target/debug/authserver}
HELLO=${HELLO:-target/debug/examples/hello}
WORKERS=1
WORK_STEALING=false
command -v callgrind_control >/dev/null || { echo "missing valgrind (apt-get install valgrind)" >&2; exit 1; }
command -v h2load >/dev/null || { echo "missing h2load (apt-get install nghttp2-client)" >&2; exit 1; }
for b in "$AUTH" "$PROXY" "$HELLO"; do [ -x "$b" ] || { echo "missing $b: build it" >&2; exit 1; }; done
. bench/common.sh
export AUTHSERVER_SECRETS_SYSTEM=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')

$AUTH migrate --database-url "$DB" >/dev/null
echo bench-password | $AUTH user create --username bench --database-url "$DB" >/dev/null
PW=$($AUTH app create --name bench-client --database-url "$DB" --json)
CC=$($AUTH app create --name proxy --grant-type client-credentials --introspect --database-url "$DB" --json)
CC_ID=$(field "$CC" client_id); CC_SECRET=$(field "$CC" client_secret)
AUTH_PORT=$(free_port)
AUTHSERVER_LISTEN=127.0.0.1:$AUTH_PORT RUST_LOG=warn $AUTH serve --database-url "$DB" & PIDS+=($!)
wait_http "http://127.0.0.1:$AUTH_PORT/healthz"
TOKEN=$(curl -s -u "$(field "$PW" client_id):$(field "$PW" client_secret)" -d grant_type=password \
  -d username=bench -d password=bench-password -d scope=read "http://127.0.0.1:$AUTH_PORT/o/token/" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
HELLO_PORT=$(free_port)
$HELLO "127.0.0.1:$HELLO_PORT" & PIDS+=($!)
wait_http "http://127.0.0.1:$HELLO_PORT/"

# $1 port, $2 requests: h2load over 4 keep-alive HTTP/1.1 connections, every answer a 200.
load() {
  local out
  out=$(h2load --h1 -n "$2" -c 4 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$1/")
  grep -q "status codes: $2 2xx" <<<"$out" || { echo "not every answer was a 200: $out" >&2; exit 1; }
}

# $1 name, $2 extra YAML, $3 requests: the proxy's instructions over its whole run (callgrind's
# dump at exit), start-up and one introspection included.
run_total() {
  local port admin pid
  port=$(free_port); admin=$(free_port)
  proxy_yaml "$1" "scopes: [read]" "$port" "$admin" "$2"
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.$1.$3" \
    "$PROXY" --config "$WORK/proxy-$1.yaml" 2>"$WORK/valgrind-$1.log" & pid=$!
  for _ in $(seq 1200); do curl -s -o /dev/null "http://127.0.0.1:$admin/healthz" && break; sleep 0.1; done
  if [ -n "$2" ]; then   # the receiver follows its stream before anything is sent
    for _ in $(seq 1200); do [ "$(curl -s "http://127.0.0.1:$admin/readyz")" = ready ] && break; sleep 0.1; done
  fi
  load "$port" "$3"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  awk '/^(summary|totals):/ { print $2; exit }' "$WORK/callgrind.$1.$3"
}

# $1 name, $2 extra YAML: instructions per request, (total at WARM+MEASURED - total at WARM) /
# MEASURED: start-up, warm-up and the one introspection cancel out.
measure() {
  local few many
  few=$(run_total "$1" "$2" "$WARM")
  many=$(run_total "$1" "$2" $((WARM + MEASURED)))
  python3 -c "print(($many - $few) / $MEASURED)"
}

OFF=$(measure off "")
ON=$(measure on "revocation: { configuration_url: http://127.0.0.1:$AUTH_PORT/.well-known/ssf-configuration }")
python3 - "$OFF" "$ON" "$MEASURED" <<'PY'
import sys
off, on, n = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print(f"instructions per cache-hit request ({n} measured, keep-alive): receiver off {off:,.0f}, "
      f"on {on:,.0f}; on/off = {on / off:.4f} ({(on / off - 1) * 100:+.2f} %)")
PY
