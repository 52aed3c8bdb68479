#!/usr/bin/env bash
# Load benchmark of the authorization server against an axum hello-world, in one run.
# Load comes from wrk in a second process on loopback. Usage: bench/authserver.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
command -v wrk >/dev/null || { echo "install wrk (apt-get install wrk)"; exit 1; }
cargo build --release -q -p authserver --bin authserver --example hello --example argon2_time
BIN=target/release/authserver
WORK=$(mktemp -d)
DB="sqlite://$WORK/db.sqlite"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

echo bench | $BIN user create --username bench --database-url "$DB" >/dev/null
PW=$($BIN app create --name pw --database-url "$DB" --json)
CC=$($BIN app create --name cc --grant-type client-credentials --introspect --database-url "$DB" --json)
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
basic() { printf '%s:%s' "$(field "$1" client_id)" "$(field "$1" client_secret)" | base64 -w0; }
PW_BASIC=$(basic "$PW"); CC_BASIC=$(basic "$CC")

AUTH_PORT=18101; HELLO_PORT=18102
AUTHSERVER_LISTEN=127.0.0.1:$AUTH_PORT RUST_LOG=warn $BIN serve --database-url "$DB" &
target/release/examples/hello 127.0.0.1:$HELLO_PORT &
for port in $AUTH_PORT $HELLO_PORT; do
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/" -w '' 2>/dev/null && break; curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
done
TOKEN=$(curl -s -u "$(echo "$PW_BASIC" | base64 -d)" -d grant_type=password -d username=bench -d password=bench "http://127.0.0.1:$AUTH_PORT/o/token/" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')

post_script() { # $1 file, $2 authorization, $3 body
  cat > "$1" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = "$2"
wrk.body = "$3"
LUA
}
post_script "$WORK/introspect.lua" "Basic $CC_BASIC" "token=$TOKEN"
post_script "$WORK/cc.lua" "Basic $CC_BASIC" "grant_type=client_credentials&scope=read"
post_script "$WORK/pw.lua" "Basic $PW_BASIC" "grant_type=password&username=bench&password=bench"

# rps p50_ms p99_ms from wrk --latency output
measure() { # $1 url, $2 script or empty
  local out
  if [ -n "${2:-}" ]; then out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s "$2" "$1"); else out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$1"); fi
  python3 bench/wrk_stats.py <<<"$out" | cut -d" " -f1-4
}
HASH_MS=$(target/release/examples/argon2_time)
CORES=$(nproc)
read -r H_RPS H_P50 H_P99 H_ERR < <(measure "http://127.0.0.1:$HELLO_PORT/")
read -r I_RPS I_P50 I_P99 I_ERR < <(measure "http://127.0.0.1:$AUTH_PORT/o/introspect/" "$WORK/introspect.lua")
read -r C_RPS C_P50 C_P99 C_ERR < <(measure "http://127.0.0.1:$AUTH_PORT/o/token/" "$WORK/cc.lua")
read -r P_RPS P_P50 P_P99 P_ERR < <(measure "http://127.0.0.1:$AUTH_PORT/o/token/" "$WORK/pw.lua")
python3 - <<PY
hello, intro, cc, pw = $H_RPS, $I_RPS, $C_RPS, $P_RPS
ceiling = $CORES / ($HASH_MS / 1000)
print(f"cores={$CORES} argon2id verify={$HASH_MS} ms -> password-grant ceiling {ceiling:.0f}/s; wrk -t$THREADS -c$CONNS -d${DURATION}s")
print(f"{'case':<22}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}{'ratio':>8}  goal")
print(f"{'hello-world (axum)':<22}{hello:>10.0f}{$H_P50:>9.2f}{$H_P99:>9.2f}{$H_ERR:>9}{1:>8.2f}")
print(f"{'introspection':<22}{intro:>10.0f}{$I_P50:>9.2f}{$I_P99:>9.2f}{$I_ERR:>9}{intro/hello:>8.2f}  >= 0.5 x hello")
print(f"{'client_credentials':<22}{cc:>10.0f}{$C_P50:>9.2f}{$C_P99:>9.2f}{$C_ERR:>9}{cc/hello:>8.2f}  >= 0.3 x hello")
print(f"{'password grant':<22}{pw:>10.0f}{$P_P50:>9.2f}{$P_P99:>9.2f}{$P_ERR:>9}{pw/ceiling:>8.2f}  >= 0.9 x cores/hash")
PY
