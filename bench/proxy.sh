#!/usr/bin/env bash
# Load benchmark of the Pingora sidecar, in one run, against the same upstream (the axum
# hello-world example):
#   direct      wrk -> hello
#   nginx       wrk -> Debian's nginx (plain keep-alive reverse proxy) -> hello
#   proxy-off   wrk -> proxy, route `public: true` (no token check) -> hello
#   proxy-on    wrk -> proxy, route needs scope `read`, token introspected by a real authorization
#               server, every measured request a cache hit -> hello
# Every case gets the same request (GET / with `Authorization: Bearer <token>`) and the same wrk
# settings; odd rounds run the cases in one order, even rounds in the reverse order. Reported per
# case: req/s, p50, p99, non-2xx, and the CPU time per request of the box in the middle (proxy or
# nginx workers). The checks-on proxy's RSS is sampled while it is under load, and its /metrics
# (cache hits/misses, introspection calls) read before and after the runs.
# Load comes from wrk in a second process on loopback; every listener is on 127.0.0.1.
# Usage: bench/proxy.sh [seconds per case]   (env: CONNS, THREADS (wrk), WORKERS (nginx worker
#        processes = proxy threads), ROUNDS, NGINX, SKIP_BUILD=1 (use the release binaries as built)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
ROUNDS=${ROUNDS:-2}
NGINX=${NGINX:-/usr/sbin/nginx}
command -v wrk >/dev/null || { echo "install wrk (apt-get install wrk)"; exit 1; }
[ -x "$NGINX" ] || { echo "install nginx (apt-get install nginx-light) or set NGINX"; exit 1; }
[ -n "${SKIP_BUILD:-}" ] || { cargo build --release -q -p authserver --bin authserver --example hello
  cargo build --profile dist -q -p proxy --bin proxy; }   # the proxy as shipped (LTO)
AUTH=target/release/authserver
PROXY=target/dist/proxy
HELLO=target/release/examples/hello
WORK=$(mktemp -d)
DB="sqlite://$WORK/db.sqlite"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # $1 url: polls until the server answers at all
  for _ in $(seq 200); do curl -s -o /dev/null "$1" && return 0; sleep 0.05; done
  echo "no answer from $1" >&2; exit 1
}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
LOAD_BEFORE=$(uptime)

# Authorization server: one user, a password-grant client, and the proxy's introspection client.
echo bench | $AUTH user create --username bench --database-url "$DB" >/dev/null
PW=$($AUTH app create --name bench-client --database-url "$DB" --json)
CC=$($AUTH app create --name proxy --grant-type client-credentials --introspect --database-url "$DB" --json)
AUTH_PORT=$(free_port)
AUTHSERVER_LISTEN=127.0.0.1:$AUTH_PORT RUST_LOG=warn $AUTH serve --database-url "$DB" & PIDS+=($!)
wait_http "http://127.0.0.1:$AUTH_PORT/healthz"
TOKEN=$(curl -s -u "$(field "$PW" client_id):$(field "$PW" client_secret)" -d grant_type=password \
  -d username=bench -d password=bench -d scope=read "http://127.0.0.1:$AUTH_PORT/o/token/" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')

# The upstream.
HELLO_PORT=$(free_port)
$HELLO "127.0.0.1:$HELLO_PORT" & HELLO_PID=$!; PIDS+=($HELLO_PID)
wait_http "http://127.0.0.1:$HELLO_PORT/"

# Two proxies, same binary: only `public: true` differs. max_ttl covers the whole run.
start_proxy() { # $1 name, $2 route access (YAML), $3 port, $4 admin port; sets PROXY_PID
  cat > "$WORK/proxy-$1.yaml" <<YAML
listen: 127.0.0.1:$3
admin_listen: 127.0.0.1:$4
threads: $WORKERS
grace_period: 1s
shutdown_timeout: 1s
upstreams:
  hello: { address: "127.0.0.1:$HELLO_PORT" }
introspection:
  url: http://127.0.0.1:$AUTH_PORT/o/introspect/
  client_id: $(field "$CC" client_id)
  client_secret: $(field "$CC" client_secret)
  cache: { max_ttl: 1h }
routes:
  - { name: hello, path: /, upstream: hello, $2 }
YAML
  RUST_LOG=warn $PROXY --config "$WORK/proxy-$1.yaml" & PROXY_PID=$!; PIDS+=($PROXY_PID)
  wait_http "http://127.0.0.1:$4/healthz"
}
ON_PORT=$(free_port); ON_ADMIN=$(free_port)
start_proxy on "scopes: [read]" "$ON_PORT" "$ON_ADMIN"; ON_PID=$PROXY_PID
OFF_PORT=$(free_port); OFF_ADMIN=$(free_port)
start_proxy off "public: true" "$OFF_PORT" "$OFF_ADMIN"; OFF_PID=$PROXY_PID

# nginx as a plain keep-alive reverse proxy, foreground, everything in $WORK.
NGINX_PORT=$(free_port)
cat > "$WORK/nginx.conf" <<NGINX
daemon off;
master_process on;
worker_processes $WORKERS;
user $(id -un);
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx-body;
  proxy_temp_path $WORK/nginx-proxy;
  fastcgi_temp_path $WORK/nginx-fastcgi;
  uwsgi_temp_path $WORK/nginx-uwsgi;
  scgi_temp_path $WORK/nginx-scgi;
  upstream hello {
    server 127.0.0.1:$HELLO_PORT;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://hello;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGINX
$NGINX -p "$WORK" -e "$WORK/nginx-error.log" -c "$WORK/nginx.conf" & NGINX_PID=$!; PIDS+=($NGINX_PID)
wait_http "http://127.0.0.1:$NGINX_PORT/"
NGINX_WORKERS=$(pgrep -P "$NGINX_PID" | tr '\n' ' ')

# Warm up: fills the proxy's cache, and fails early if anything is refused.
for port in "$HELLO_PORT" "$NGINX_PORT" "$OFF_PORT" "$ON_PORT"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$port/")
  [ "$code" = 200 ] || { echo "warm-up on port $port: HTTP $code" >&2; exit 1; }
done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ON_PORT/")
[ "$code" = 401 ] || { echo "proxy-on without a token: HTTP $code, expected 401" >&2; exit 1; }

# CPU seconds (user+system) used so far by the given processes, all threads.
cpu_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo "$t"; }
HZ=$(getconf CLK_TCK)
# rps p50_ms p99_ms non2xx socket_errors box_cpu_us/req hello_cpu_us/req from wrk --latency output
measure() { # $1 url, $2 pids of the box in the middle (empty for direct)
  local out box0 box1 hello0 hello1
  box0=$(cpu_ticks $2); hello0=$(cpu_ticks "$HELLO_PID")
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -H "Authorization: Bearer $TOKEN" "$1")
  box1=$(cpu_ticks $2); hello1=$(cpu_ticks "$HELLO_PID")
  local rps p50 p99 non2xx total errors
  read -r rps p50 p99 non2xx total errors < <(python3 bench/wrk_stats.py <<<"$out")
  echo "$rps $p50 $p99 $non2xx $errors $(( (box1 - box0) * 1000000 / (HZ * (total > 0 ? total : 1)) )) $(( (hello1 - hello0) * 1000000 / (HZ * (total > 0 ? total : 1)) ))"
}
metric() { # $1 metric name: its value on the checks-on proxy's admin /metrics
  curl -s "http://127.0.0.1:$ON_ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}
INTROSPECTION_COUNT=tokengate_proxy_introspection_duration_seconds_count
snapshot() { echo "$(metric tokengate_proxy_cache_hits_total) $(metric tokengate_proxy_cache_misses_total) $(metric $INTROSPECTION_COUNT)"; }
rss_sampler() { # $1 pid: max VmRSS (kB) every 0.5 s, then VmHWM; bash builtins only (no forks
  local max=0 k v _ #   but sleep), so that sampling costs the machine next to nothing
  while [ -e "$WORK/sampling" ]; do
    while read -r k v _; do [ "$k" = VmRSS: ] && [ "$v" -gt "$max" ] && max=$v; done < "/proc/$1/status"
    sleep 0.5
  done
  while read -r k v _; do [ "$k" = VmHWM: ] && echo "$max $v"; done < "/proc/$1/status"
}

ROWS=""
read -r H0 M0 I0 < <(snapshot)
RSS_MAX=0; HWM=0
run_case() { # $1 case, $2 round
  case $1 in
    direct) ROWS+="direct $2 $(measure "http://127.0.0.1:$HELLO_PORT/" "")"$'\n' ;;
    nginx) ROWS+="nginx $2 $(measure "http://127.0.0.1:$NGINX_PORT/" "$NGINX_WORKERS")"$'\n' ;;
    off) ROWS+="off $2 $(measure "http://127.0.0.1:$OFF_PORT/" "$OFF_PID")"$'\n' ;;
    on)
      touch "$WORK/sampling"
      rss_sampler "$ON_PID" > "$WORK/rss" & SAMPLER=$!; PIDS+=($SAMPLER)
      ROWS+="on $2 $(measure "http://127.0.0.1:$ON_PORT/" "$ON_PID")"$'\n'
      rm -f "$WORK/sampling"; wait "$SAMPLER" || true
      read -r r h < "$WORK/rss"
      if [ "$r" -gt "$RSS_MAX" ]; then RSS_MAX=$r; fi
      if [ "$h" -gt "$HWM" ]; then HWM=$h; fi ;;
  esac
}
for round in $(seq "$ROUNDS"); do # odd rounds in one order, even rounds in the reverse order
  if [ $((round % 2)) = 1 ]; then order="direct nginx off on"; else order="on off nginx direct"; fi
  for c in $order; do run_case "$c" "$round"; done
done
read -r H1 M1 I1 < <(snapshot)
LOAD_AFTER=$(uptime)

python3 - "$ROWS" <<PY
import sys, statistics
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
print(f"cores=$(nproc) wrk -t$THREADS -c$CONNS -d${DURATION}s --latency x $ROUNDS round(s), GET / with a bearer token;"
      f" nginx worker_processes=$WORKERS, proxy threads=$WORKERS")
print("load before: $LOAD_BEFORE".replace("  ", " "))
print("load after:  $LOAD_AFTER".replace("  ", " "))
label = {"direct": "direct (hello)", "nginx": "nginx keep-alive", "off": "proxy, checks off",
         "on": "proxy, checks on (hits)"}
print(f"{'case':<25}{'round':>6}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}{'cpu us/req':>12}{'hello us/req':>14}  socket errors")
for case, rnd, rps, p50, p99, err, sock, box, hello in rows:
    box = "-" if case == "direct" else box
    print(f"{label[case]:<25}{rnd:>6}{float(rps):>10.0f}{float(p50):>9.3f}{float(p99):>9.3f}{err:>9}{box:>12}{hello:>14}  {sock}")
mean = lambda c, i: statistics.mean(float(r[i]) for r in rows if r[0] == c)
rps = {c: mean(c, 2) for c in label}; p50 = {c: mean(c, 3) for c in label}; p99 = {c: mean(c, 4) for c in label}
print()
cpu = {c: mean(c, 7) for c in label}
print(f"{'means':<25}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'rps/direct':>12}{'cpu us/req':>12}")
for c in label:
    box = "-" if c == "direct" else f"{cpu[c]:.0f}"
    print(f"{label[c]:<25}{rps[c]:>10.0f}{p50[c]:>9.3f}{p99[c]:>9.3f}{rps[c] / rps['direct']:>12.2f}{box:>12}")
def verdict(ok): return "ok" if ok else "MISSED"
r1 = rps["on"] / rps["nginx"]; r2 = p99["on"] / p99["nginx"]; cost = 1 - rps["on"] / rps["off"]
rss_mb = $RSS_MAX / 1024; hwm_mb = ${HWM:-0} / 1024
print()
print(f"proxy-on / nginx req/s   = {r1:.2f}x  (goal >= 1.00x)  {verdict(r1 >= 1.0)}")
print(f"proxy-on / nginx p99     = {r2:.2f}x  (goal <= 1.10x)  {verdict(r2 <= 1.1)}")
print(f"checks-on cost vs off    = {cost * 100:.1f}% req/s, p50 {p50['on'] / p50['off']:.2f}x, p99 {p99['on'] / p99['off']:.2f}x"
      f", cpu/req {cpu['on'] / cpu['off']:.2f}x  (goal <= 5%)  {verdict(cost <= 0.05)}")
print(f"proxy / nginx cpu per request = {cpu['off'] / cpu['nginx']:.2f}x (checks off), {cpu['on'] / cpu['nginx']:.2f}x (checks on)")
print(f"proxy-on RSS under load  = max VmRSS {rss_mb:.1f} MB, VmHWM {hwm_mb:.1f} MB  (goal < 50 MB)  {verdict(max(rss_mb, hwm_mb) < 50)}")
hits, misses, calls = $H1 - $H0, $M1 - $M0, $I1 - $I0
print(f"proxy-on during the runs: cache hits {hits:.0f}, misses {misses:.0f}, introspection calls {calls:.0f}"
      f" (totals incl. warm-up: hits $H1, misses $M1, calls $I1)")
PY
