#!/usr/bin/env bash
# Load benchmark of the example API: `introspect` mode on cache hits (a real authorization server
# behind it, one token, so every request after the first is a cache hit) against the same API in
# `mode: none` (no checks at all; UNSAFE, benchmarks only), in one run, alternating rounds.
# Load comes from wrk in a second process on loopback.
# Usage: bench/example-api.sh [seconds per round]   (env: CONNS, THREADS, ROUNDS, API_PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
API_PATH=${API_PATH:-/users/1/}
command -v wrk >/dev/null || { echo "install wrk (apt-get install wrk)"; exit 1; }
cargo build --release -q -p authserver --bin authserver -p example-api --bin example-api
AUTH=target/release/authserver
API=target/release/example-api
. bench/common.sh

# The directory: one user (id 1), a password-grant client, and the API's introspection client.
$AUTH migrate --database-url "$DB" >/dev/null
echo bench-password | $AUTH user create --username bench --database-url "$DB" >/dev/null
PW=$($AUTH app create --name bench-client --scopes '*' --database-url "$DB" --json)
CC=$($AUTH app create --name example-api --scopes '*' --grant-type client-credentials --introspect --ssf --database-url "$DB" --json)

AUTH_PORT=$(free_port)
AUTHSERVER_LISTEN=127.0.0.1:$AUTH_PORT RUST_LOG=warn $AUTH serve --database-url "$DB" & PIDS+=($!)
wait_http "http://127.0.0.1:$AUTH_PORT/healthz"
TOKEN=$(curl -s -u "$(field "$PW" client_id):$(field "$PW" client_secret)" -d grant_type=password \
  -d username=bench -d password=bench-password "http://127.0.0.1:$AUTH_PORT/o/token/" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')

# Two example APIs over the same database: the same binary and routes, only the mode differs.
start_api() { # $1 mode, $2 port
  local config="$WORK/example-api-$1.yaml"
  sed -n '/^routes:/,$p' config/example-api.yaml > "$WORK/routes.yaml"
  cat > "$config" <<YAML
mode: $1
listen: 127.0.0.1:$2
database_url: $DB
introspection:
  url: http://127.0.0.1:$AUTH_PORT/o/introspect/
  client_id: $(field "$CC" client_id)
  client_secret: $(field "$CC" client_secret)
  cache: { max_ttl: 300s }
YAML
  cat "$WORK/routes.yaml" >> "$config"
  RUST_LOG=warn $API --config "$config" & PIDS+=($!)
  wait_http "http://127.0.0.1:$2/"
}
CHECKED_PORT=$(free_port); start_api introspect "$CHECKED_PORT"
NONE_PORT=$(free_port); start_api none "$NONE_PORT"
for port in "$CHECKED_PORT" "$NONE_PORT"; do # warm up (fills the cache), and fail early if refused
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$port$API_PATH")
  [ "$code" = 200 ] || { echo "warm-up on port $port: HTTP $code" >&2; exit 1; }
done

# rps p50_ms p99_ms non2xx from wrk --latency output
measure() { # $1 url
  local out
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -H "Authorization: Bearer $TOKEN" "$1")
  python3 bench/wrk_stats.py <<<"$out" | cut -d" " -f1-4
}
ROWS=""
for round in $(seq "$ROUNDS"); do
  ROWS+="introspect $round $(measure "http://127.0.0.1:$CHECKED_PORT$API_PATH")"$'\n'
  ROWS+="none $round $(measure "http://127.0.0.1:$NONE_PORT$API_PATH")"$'\n'
done
python3 - "$ROWS" <<PY
import sys, statistics
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
print(f"cores=$(nproc) wrk -t$THREADS -c$CONNS -d${DURATION}s x $ROUNDS rounds, GET $API_PATH with a bearer token")
print(f"{'mode':<26}{'round':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}")
label = {"introspect": "introspect (cache hits)", "none": "none (no checks, unsafe)"}
for mode, rnd, rps, p50, p99, err in rows:
    print(f"{label[mode]:<26}{rnd:>6}{float(rps):>10.0f}{float(p50):>9.3f}{float(p99):>9.3f}{err:>9}")
mean = lambda m, i: statistics.mean(float(r[i]) for r in rows if r[0] == m)
ratio = mean("introspect", 2) / mean("none", 2)
print(f"mean req/s: introspect {mean('introspect', 2):.0f}, none {mean('none', 2):.0f}; "
      f"p50 {mean('introspect', 3):.3f} vs {mean('none', 3):.3f} ms; p99 {mean('introspect', 4):.3f} vs {mean('none', 4):.3f} ms")
print(f"ratio introspect/none = {ratio:.2f}x (goal >= 0.90x)")
PY
