#!/usr/bin/env bash
# Instructions per proxied request, counted by valgrind's callgrind: steady on a shared, noisy
# machine where CPU time is not. The proxy of bench/proxy.sh's "on" case (route needs scope
# `read`, token introspected once, every measured request a cache hit), one thread, one
# keep-alive connection (h2load --h1 -c1). Counters are zeroed, N1 requests run and dumped, zeroed
# again, N2 requests run and dumped: (I(N2) - I(N1)) / (N2 - N1) leaves out what does not grow
# with the requests. Dumps are taken with `callgrind_control -d` while the proxy runs.
# Usage: bench/callgrind_proxy.sh [N1 N2]   (N1=500 N2=2500; env PROXY, AUTH, HELLO: the binaries,
#        default target/release/{proxy,authserver,examples/hello}; build them with
#        cargo build --release -p proxy --bin proxy -p authserver --bin authserver --example hello)
set -euo pipefail
cd "$(dirname "$0")/.."
N1=${1:-500}
N2=${2:-2500}
AUTH=${AUTH:-target/release/authserver}
PROXY=${PROXY:-target/release/proxy}
HELLO=${HELLO:-target/release/examples/hello}
WORKERS=1
WORK_STEALING=false
for b in "$AUTH" "$PROXY" "$HELLO"; do [ -x "$b" ] || { echo "missing $b (see the top of $0)" >&2; exit 1; }; done
command -v callgrind_control >/dev/null || { echo "missing valgrind" >&2; exit 1; }
. bench/common.sh

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

PORT=$(free_port); ADMIN=$(free_port)
proxy_yaml on "scopes: [read]" "$PORT" "$ADMIN"
OUT=$WORK/callgrind.out
RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$OUT" "$PROXY" --config "$WORK/proxy-on.yaml" \
  2>"$WORK/proxy.log" & PROXY_PID=$!; PIDS+=($PROXY_PID)
for _ in $(seq 600); do curl -s -o /dev/null "http://127.0.0.1:$ADMIN/healthz" && break; sleep 0.2; done
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/")
[ "$code" = 200 ] || { echo "warm-up: HTTP $code" >&2; cat "$WORK/proxy.log" >&2; exit 1; }

# Instructions for $1 requests: zero, run, dump, read the newest dump's totals.
instructions() {
  callgrind_control -z "$PROXY_PID" >/dev/null
  local done
  done=$(h2load --h1 -n "$1" -c 1 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/" \
    | awk '/^status codes:/ { print $3 }')
  [ "$done" = "$1" ] || { echo "$1 requests: $done answered 2xx" >&2; exit 1; }
  callgrind_control -d "$PROXY_PID" >/dev/null
  sleep 1
  local dump
  dump=$(ls -t "$OUT"* | head -1)
  awk '/^(totals|summary):/ { print $2; exit }' "$dump"
}
# One round unmeasured: the connection's and the allocator's first-time costs.
instructions "$N1" >/dev/null
I1=$(instructions "$N1")
I2=$(instructions "$N2")
echo "proxy: $PROXY"
echo "instructions: $N1 requests $I1, $N2 requests $I2"
echo "instructions per request: $(( (I2 - I1) / (N2 - N1) ))"
