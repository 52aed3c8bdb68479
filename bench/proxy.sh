#!/usr/bin/env bash
# Sidecar cost per request, in one run, the way service meshes report it. Same upstream (the axum
# hello-world example), same request (GET / with `Authorization: Bearer <token>`) for every case:
#   direct      load -> hello
#   nginx       load -> nginx, plain keep-alive reverse proxy -> hello
#   njs         load -> nginx, auth_request + njs introspection, answer kept by proxy_cache (NGINX's
#               documented OAuth 2.0 pattern; bench/nginx/) -> hello
#   bare        load -> bare Pingora proxy (proxy/examples/bare.rs: upstream_peer only) -> hello
#   off         load -> tokengate proxy, route `public: true` (no token check) -> hello
#   on          load -> tokengate proxy, route needs scope `read`, token introspected by a real
#               authorization server, every measured request a cache hit -> hello
# and over TLS (one ECDSA P-256 certificate made for the run, served by both; TLS 1.3 and each
# server's default session resumption; cleartext to hello behind them):
#   njs-tls     load -> nginx + njs as above, terminating TLS, HTTP/1.1 keep-alive
#   on-ssf      as on, the proxy following the authorization server's revocation stream
#   on-aud      as on, the proxy bound to a resource (`resource:`, the token's `aud` checked), the
#               token asked for that resource (RFC 8707)
#   on-dpop     as on, on a `dpop: required` route: a DPoP-bound token (ES256 key) and a new proof
#               per request, made beforehand by bench/dpop_proofs.py and sent by wrk with
#               bench/dpop.lua (saturation: $DPOP_SAT_RATE proofs a second of the run; fixed rate:
#               wrk pacing each of $RATE_CONNS connections to about $RATE req/s in total, so its
#               p50/p99 come from wrk, not h2load)
#   on-tls      load -> tokengate checks on, terminating TLS (rustls), HTTP/1.1 keep-alive
#   njs-tls-new / on-tls-new   the same with a new connection (and handshake) per request:
#               wrk with `Connection: close`; at the fixed rate h2load --h1 opening $NEW_RATE
#               connections a second, one request each
#   njs-h2 / on-h2   HTTP/2 over TLS, many streams on one connection: h2load -c1 -m$STREAMS
#               (saturation), h2load -c1 -m$STREAMS at $RATE req/s (fixed rate)
# Two measurements per case and round:
#   saturation  wrk -t$THREADS -c$CONNS --latency: req/s, p50, p99, CPU µs per request of the box
#               in the middle, and its RSS (sampled every 0.5 s, max, at $CONNS connections)
#   fixed rate  h2load --h1 at $RATE req/s in total ($RATE_CONNS connections): the box's CPU
#               seconds per 1000 req/s (= vCPU per 1000 req/s, from /proc/<pid>/stat utime+stime
#               before and after), p50 and p99 from h2load's per-request log
# Odd rounds run the cases in one order, even rounds in the reverse order. Load comes from a second
# process on loopback; every listener is on 127.0.0.1. The middle boxes get the same CPU budget:
# $WORKERS nginx worker processes, $WORKERS proxy threads (work_stealing: $WORK_STEALING).
# Usage: bench/proxy.sh [seconds per measurement]   (env: CONNS=64, THREADS=2 (wrk), WORKERS=1,
#        WORK_STEALING=false (the binary's default), RATE=2000, RATE_CONNS=40, NEW_RATE=500, STREAMS=100, ROUNDS=2,
#        CASES="direct nginx njs bare off on on-ssf on-aud on-dpop njs-tls on-tls njs-tls-new on-tls-new
#        njs-h2 on-h2", DPOP_SAT_RATE=8000,
#        NGINX, SKIP_BUILD=1 (use the binaries as built: target/dist/{proxy,examples/bare},
#        target/release/{authserver,examples/hello}, or the paths in PROXY, BARE, AUTH, HELLO))
#        PERF=1: perf record (cpu-clock) on the box during each fixed-rate measurement, for the
#        kernel's share of its CPU as perf samples it, and perf stat of its system calls per
#        request (needs perf, linux-perf)
#        CONFIG=2x2: issue 42's second, independent configuration (2 nginx workers, 2 proxy threads,
#        64 connections at the fixed rate too): WORKERS=2 RATE_CONNS=64 unless set
set -euo pipefail
cd "$(dirname "$0")/.."
case ${CONFIG:-} in
  2x2) WORKERS=${WORKERS:-2}; RATE_CONNS=${RATE_CONNS:-64} ;;
  "") ;;
  *) echo "CONFIG=$CONFIG: expected 2x2 or nothing" >&2; exit 1 ;;
esac
DURATION=${1:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-1}
WORK_STEALING=${WORK_STEALING:-false}
RATE=${RATE:-2000}
RATE_CONNS=${RATE_CONNS:-40}
NEW_RATE=${NEW_RATE:-500}
STREAMS=${STREAMS:-100}
ROUNDS=${ROUNDS:-2}
CASES=${CASES:-direct nginx njs bare off on on-ssf on-aud on-dpop njs-tls on-tls njs-tls-new on-tls-new njs-h2 on-h2}
DPOP_SAT_RATE=${DPOP_SAT_RATE:-8000}
NGINX=${NGINX:-/usr/sbin/nginx}
NJS_MODULE=/usr/lib/nginx/modules/ngx_http_js_module.so
INSTALL="apt-get install nginx libnginx-mod-http-js wrk nghttp2-client"
missing() { echo "missing $1; install with: $INSTALL" >&2; exit 1; }
command -v wrk >/dev/null || missing wrk
command -v h2load >/dev/null || missing "h2load (nghttp2-client)"
[ -x "$NGINX" ] || missing "nginx (or set NGINX)"
[ -f "$NJS_MODULE" ] || missing "nginx's njs module ($NJS_MODULE, libnginx-mod-http-js)"
[ -n "${SKIP_BUILD:-}" ] || { cargo build --release -q -p authserver --bin authserver --example hello
  cargo build --profile dist -q -p proxy --bin proxy --example bare; }   # the proxy as shipped (LTO)
AUTH=${AUTH:-target/release/authserver}
PROXY=${PROXY:-target/dist/proxy}
BARE=${BARE:-target/dist/examples/bare}
HELLO=${HELLO:-target/release/examples/hello}
for b in "$AUTH" "$PROXY" "$BARE" "$HELLO"; do [ -x "$b" ] || { echo "missing $b: build it (cargo build, see the top of $0) or run without SKIP_BUILD" >&2; exit 1; }; done
. bench/common.sh
LOAD_BEFORE=$(uptime)

# Authorization server, introspection client (tokengate's and nginx's) and token.
start_authserver

# The upstream.
HELLO_PORT=$(free_port)
$HELLO "127.0.0.1:$HELLO_PORT" & HELLO_PID=$!; PIDS+=($HELLO_PID)
wait_http "http://127.0.0.1:$HELLO_PORT/"

# The certificate both TLS terminators serve: ECDSA P-256, for localhost and 127.0.0.1.
CERT=$WORK/tls.crt; KEY=$WORK/tls.key
tls_certificate "$CERT" "$KEY"

# Three tokengate proxies, same binary: only `public: true` and `tls:` differ. max_ttl covers the
# whole run.
start_proxy() { # $1 name, $2 route access (YAML), $3 port, $4 admin port, $5 extra YAML; sets PROXY_PID
  proxy_yaml "$1" "$2" "$3" "$4" "${5:-}"
  RUST_LOG=warn $PROXY --config "$WORK/proxy-$1.yaml" 2>"$WORK/proxy-$1.log" & PROXY_PID=$!
  PIDS+=($PROXY_PID)
  wait_http "http://127.0.0.1:$4/healthz"
}
ON_PORT=$(free_port); ON_ADMIN=$(free_port)
start_proxy on "scopes: [read]" "$ON_PORT" "$ON_ADMIN"; ON_PID=$PROXY_PID
OFF_PORT=$(free_port); OFF_ADMIN=$(free_port)
start_proxy off "public: true" "$OFF_PORT" "$OFF_ADMIN"; OFF_PID=$PROXY_PID
# The same with the revocation stream followed (issue 24: the receiver's cost on the request path).
SSF_PORT=$(free_port); SSF_ADMIN=$(free_port)
start_proxy ssf "scopes: [read]" "$SSF_PORT" "$SSF_ADMIN" \
  "revocation: { configuration_url: http://127.0.0.1:$AUTH_PORT/.well-known/ssf-configuration }"
SSF_PID=$PROXY_PID
# An API bound to a resource (its token's `aud` checked), and a route that requires DPoP.
AUD_PORT=$(free_port); AUD_ADMIN=$(free_port)
AUD_TOKEN=$(audience_token "http://127.0.0.1:$AUD_PORT/")
start_proxy aud "scopes: [read]" "$AUD_PORT" "$AUD_ADMIN" "resource: http://127.0.0.1:$AUD_PORT/"
AUD_PID=$PROXY_PID
DPOP_PORT=$(free_port); DPOP_ADMIN=$(free_port)
DPOP_TOKEN=$(dpop_token ES256 "$WORK/dpop.pem")
start_proxy dpop "scopes: [read], dpop: required" "$DPOP_PORT" "$DPOP_ADMIN"; DPOP_PID=$PROXY_PID
# $1 proofs for the DPoP proxy's URL, into $WORK/proofs (made just before a measurement: a proof
# is good for 60 s).
dpop_proofs() {
  python3 bench/dpop_proofs.py proofs --key "$WORK/dpop.pem" --token "$DPOP_TOKEN" \
    --url "http://127.0.0.1:$DPOP_PORT/" -n "$1" --out "$WORK/proofs"
}
TLS_PORT=$(free_port); TLS_ADMIN=$(free_port)
start_proxy tls "scopes: [read]" "$TLS_PORT" "$TLS_ADMIN" "tls: { cert_file: $CERT, key_file: $KEY }"
TLS_PID=$PROXY_PID

# The bare Pingora proxy, same runtime settings.
BARE_PORT=$(free_port)
$BARE "127.0.0.1:$BARE_PORT" "127.0.0.1:$HELLO_PORT" "$WORKERS" "$WORK_STEALING" 2>"$WORK/bare.log" & BARE_PID=$!
PIDS+=($BARE_PID)
wait_http "http://127.0.0.1:$BARE_PORT/"

# nginx: pass-through and njs introspection, foreground, everything in $WORK.
NGINX_PORT=$(free_port); NJS_PORT=$(free_port); NJS_TLS_PORT=$(free_port)
nginx_conf
$NGINX -p "$WORK" -e "$WORK/nginx-error.log" -c "$WORK/nginx.conf" & NGINX_PID=$!; PIDS+=($NGINX_PID)
wait_http "http://127.0.0.1:$NGINX_PORT/"
# Its workers and cache manager (the cache loader exits after a minute: not counted).
NGINX_WORKERS=$(pgrep -P "$NGINX_PID" -f "worker process|cache manager" | tr '\n' ' ')

# Warm up: fills both token caches, and fails early if anything is refused.
for port in "$HELLO_PORT" "$NGINX_PORT" "$NJS_PORT" "$BARE_PORT" "$OFF_PORT" "$ON_PORT"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$port/")
  [ "$code" = 200 ] || { echo "warm-up on port $port: HTTP $code" >&2; cat "$WORK/nginx-error.log" >&2; exit 1; }
done
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $AUD_TOKEN" "http://127.0.0.1:$AUD_PORT/")
[ "$code" = 200 ] || { echo "warm-up on the audience proxy: HTTP $code" >&2; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$AUD_PORT/")
[ "$code" = 401 ] || { echo "audience proxy with a token for another API: HTTP $code, expected 401" >&2; exit 1; }
dpop_proofs 1
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: DPoP $DPOP_TOKEN" -H "DPoP: $(cat "$WORK/proofs")" \
  "http://127.0.0.1:$DPOP_PORT/")
[ "$code" = 200 ] || { echo "warm-up on the DPoP proxy: HTTP $code" >&2; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: DPoP $DPOP_TOKEN" -H "DPoP: $(cat "$WORK/proofs")" \
  "http://127.0.0.1:$DPOP_PORT/")
[ "$code" = 401 ] || { echo "DPoP proxy with a replayed proof: HTTP $code, expected 401" >&2; exit 1; }
for port in "$NJS_TLS_PORT" "$TLS_PORT"; do
  for v in --http1.1 --http2; do
    got=$(curl -s -o /dev/null -w '%{http_code} %{http_version}' --cacert "$CERT" $v \
      -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$port/")
    want="200 ${v#--http}"
    [ "$got" = "$want" ] || { echo "warm-up on TLS port $port ($v): $got, expected $want" >&2; exit 1; }
  done
done
# What each TLS terminator negotiates with an OpenSSL client (printed with the results).
tls_of() { openssl s_client -connect "127.0.0.1:$1" -CAfile "$CERT" -brief </dev/null 2>&1 \
  | awk -F': ' '/Protocol version|Ciphersuite|Peer signature type/ { printf "%s ", $2 }'; }
TLS_NGINX=$(tls_of "$NJS_TLS_PORT"); TLS_TOKENGATE=$(tls_of "$TLS_PORT")
for port in "$ON_PORT" "$NJS_PORT"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")
  [ "$code" = 401 ] || { echo "port $port without a token: HTTP $code, expected 401" >&2; exit 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer not-a-token" "http://127.0.0.1:$port/")
  case $code in 401|403) ;; *) echo "port $port with a bad token: HTTP $code" >&2; exit 1 ;; esac
done

# CPU clock ticks (user+system) used so far by the given processes, all threads.
cpu_ticks() { local t=0 p; for p in "$@"; do
  [ -e "/proc/$p/stat" ] || { echo "process $p of the box in the middle is gone" >&2; exit 1; }
  t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done; echo "$t"; }
# The same, system (kernel) time only.
sys_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $15 }' "/proc/$p/stat"))); done; echo "$t"; }
# Minor page faults so far (a page the allocator gave back and touched again costs one).
minor_faults() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{ print $10 }' "/proc/$p/stat"))); done; echo "$t"; }
HZ=$(getconf CLK_TCK)
rss_sampler() { # $@ pids: max summed VmRSS (kB) every 0.5 s; bash builtins only (no forks but
  local max=0 sum k v _ p #  sleep), so that sampling costs the machine next to nothing
  while [ -e "$WORK/sampling" ]; do
    sum=0
    for p in "$@"; do
      while read -r k v _; do [ "$k" = VmRSS: ] && sum=$((sum + v)); done < "/proc/$p/status"
    done
    [ "$sum" -gt "$max" ] && max=$sum
    sleep 0.5
  done
  echo "$max"
}
# Saturation: "rps p50_ms p99_ms non2xx socket_errors box_us_per_req rss_kb"
saturate() { # $1 url, $2 pids of the box in the middle (empty for direct), $3 mode: keep | new | h2
  local out box0 box1 rps p50 p99 non2xx total errors rss=0 sampler
  if [ -n "$2" ]; then touch "$WORK/sampling"; rss_sampler $2 > "$WORK/rss" & sampler=$!; fi
  rm -f "$WORK/h2load.log"
  box0=$(cpu_ticks $2)
  case $3 in
    keep) out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -H "Authorization: Bearer $TOKEN" "$1") ;;
    new) out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -H "Connection: close" \
           -H "Authorization: Bearer $TOKEN" "$1") ;;
    h2) out=$(h2load -t1 -c1 -m"$STREAMS" -D"$DURATION" --log-file="$WORK/h2load.log" \
          -H "Authorization: Bearer $TOKEN" "$1") ;;
    aud) out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -H "Authorization: Bearer $AUD_TOKEN" "$1") ;;
    dpop) out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s bench/dpop.lua "$1" -- \
            "$DPOP_TOKEN" "$WORK/proofs" "$THREADS") ;;
  esac
  box1=$(cpu_ticks $2)
  if [ -n "$2" ]; then rm -f "$WORK/sampling"; wait "$sampler" || true; read -r rss < "$WORK/rss"; fi
  [ "$3" = dpop ] && grep -q "proof wraps: 0" <<<"$out" || [ "$3" != dpop ] \
    || echo "on-dpop saturation: proofs replayed (raise DPOP_SAT_RATE): $(grep 'proof wraps' <<<"$out")" >&2
  if [ "$3" = h2 ]; then
    read -r rps p50 p99 non2xx total errors < <(python3 bench/wrk_stats.py --h2load "$WORK/h2load.log" <<<"$out")
  else
    read -r rps p50 p99 non2xx total errors < <(python3 bench/wrk_stats.py <<<"$out")
  fi
  echo "$rps $p50 $p99 $non2xx $errors $(( (box1 - box0) * 1000000 / (HZ * (total > 0 ? total : 1)) )) $rss"
}
# Fixed rate: "rps p50_ms p99_ms non2xx errors box_cpu_ms_per_1000_requests box_kernel_ms_per_1000"
# (CPU seconds per 1000 requests = vCPU per 1000 req/s, printed in thousandths; the kernel's part
# of it beside, from the scheduler's accounting) and, with PERF=1, the kernel's share of the box's
# `perf record -e cpu-clock` samples in percent and the system calls it made ("-" without)
fixed() { # $1 url, $2 pids, $3 mode: keep | new | h2
  local out box0 box1 sys0 sys1 flt0 flt1 rps p50 p99 non2xx total errors n perf_pid="" stat_pid="" kernel=- calls=-
  rm -f "$WORK/h2load.log"
  if [ -n "${PERF:-}" ] && [ -n "$2" ]; then
    perf record -q -e cpu-clock -F 997 -p "$(echo $2 | tr ' ' ',')" -o "$WORK/perf.data" \
      -- sleep "$DURATION" 2>/dev/null & perf_pid=$!
    perf stat -x, -e raw_syscalls:sys_enter -p "$(echo $2 | tr ' ' ',')" -o "$WORK/syscalls" \
      -- sleep "$DURATION" 2>/dev/null & stat_pid=$!
  fi
  box0=$(cpu_ticks $2); sys0=$(sys_ticks $2); flt0=$(minor_faults $2)
  case $3 in
    keep) out=$(h2load --h1 -t1 -c"$RATE_CONNS" --rps="$(python3 -c "print($RATE / $RATE_CONNS)")" \
            -D"$DURATION" --log-file="$WORK/h2load.log" -H "Authorization: Bearer $TOKEN" "$1") ;;
    # $NEW_RATE connections a second, one request on each (h2load's rate mode).
    new) n=$((NEW_RATE * DURATION))
         out=$(h2load --h1 -t1 -r"$NEW_RATE" -c"$n" -n"$n" --log-file="$WORK/h2load.log" \
           -H "Connection: close" -H "Authorization: Bearer $TOKEN" "$1") ;;
    h2) out=$(h2load -t1 -c1 -m"$STREAMS" --rps="$RATE" -D"$DURATION" --log-file="$WORK/h2load.log" \
          -H "Authorization: Bearer $TOKEN" "$1") ;;
    aud) out=$(h2load --h1 -t1 -c"$RATE_CONNS" --rps="$(python3 -c "print($RATE / $RATE_CONNS)")" \
            -D"$DURATION" --log-file="$WORK/h2load.log" -H "Authorization: Bearer $AUD_TOKEN" "$1") ;;
    # Each connection waits RATE_CONNS * 1000 / RATE ms after an answer: about $RATE req/s.
    dpop) out=$(wrk -t1 -c"$RATE_CONNS" -d"${DURATION}s" --latency -s bench/dpop.lua "$1" -- \
            "$DPOP_TOKEN" "$WORK/proofs" 1 "$((RATE_CONNS * 1000 / RATE))") ;;
  esac
  box1=$(cpu_ticks $2); sys1=$(sys_ticks $2); flt1=$(minor_faults $2)
  if [ -n "$perf_pid" ]; then
    wait "$perf_pid" || true
    kernel=$(perf report -i "$WORK/perf.data" --stdio --sort dso -g none 2>/dev/null \
      | awk '/\[kernel/ { sub("%", "", $1); s += $1 } END { printf "%.1f", s }')
    wait "$stat_pid" || true
    calls=$(awk -F, '/raw_syscalls:sys_enter/ { print $1 }' "$WORK/syscalls")
  fi
  if [ "$3" = dpop ]; then
    read -r rps p50 p99 non2xx total errors < <(python3 bench/wrk_stats.py <<<"$out")
  else
    read -r rps p50 p99 non2xx total errors < <(python3 bench/wrk_stats.py --h2load "$WORK/h2load.log" <<<"$out")
  fi
  total=$((total > 0 ? total : 1))
  echo "$rps $p50 $p99 $non2xx $errors $(( (box1 - box0) * 1000 * 1000 / (HZ * total) ))" \
    "$(( (sys1 - sys0) * 1000 * 1000 / (HZ * total) ))" "$kernel" \
    "$([ "$calls" = - ] && echo - || echo $((calls * 1000 / total)))" "$(( (flt1 - flt0) * 1000 / total ))"
}
metric() { # $1 metric name: its value on the checks-on proxy's admin /metrics
  curl -s "http://127.0.0.1:$ON_ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}
INTROSPECTION_COUNT=tokengate_proxy_introspection_duration_seconds_count
snapshot() { echo "$(metric tokengate_proxy_cache_hits_total) $(metric tokengate_proxy_cache_misses_total) $(metric $INTROSPECTION_COUNT)"; }

ROWS=""
read -r H0 M0 I0 < <(snapshot)
run_case() { # $1 case, $2 round
  local url pids mode=keep
  case $1 in
    direct) url="http://127.0.0.1:$HELLO_PORT/"; pids="" ;;
    nginx) url="http://127.0.0.1:$NGINX_PORT/"; pids="$NGINX_WORKERS" ;;
    njs) url="http://127.0.0.1:$NJS_PORT/"; pids="$NGINX_WORKERS" ;;
    bare) url="http://127.0.0.1:$BARE_PORT/"; pids="$BARE_PID" ;;
    off) url="http://127.0.0.1:$OFF_PORT/"; pids="$OFF_PID" ;;
    on) url="http://127.0.0.1:$ON_PORT/"; pids="$ON_PID" ;;
    on-ssf) url="http://127.0.0.1:$SSF_PORT/"; pids="$SSF_PID" ;;
    on-aud) url="http://127.0.0.1:$AUD_PORT/"; pids="$AUD_PID" ;;
    on-dpop) url="http://127.0.0.1:$DPOP_PORT/"; pids="$DPOP_PID" ;;
    njs-tls*|njs-h2) url="https://127.0.0.1:$NJS_TLS_PORT/"; pids="$NGINX_WORKERS" ;;
    on-tls*|on-h2) url="https://127.0.0.1:$TLS_PORT/"; pids="$TLS_PID" ;;
    *) echo "unknown case $1" >&2; exit 1 ;;
  esac
  case $1 in *-new) mode=new ;; *-h2) mode=h2 ;; on-aud) mode=aud ;; on-dpop) mode=dpop ;; esac
  local sat
  [ "$mode" = dpop ] && dpop_proofs "$((DPOP_SAT_RATE * DURATION))"
  sat=$(saturate "$url" "$pids" "$mode")
  [ "$mode" = dpop ] && dpop_proofs "$((RATE * DURATION * 11 / 10))"
  ROWS+="$1 $2 $sat $(fixed "$url" "$pids" "$mode")"$'\n'
}
REVERSED=$(echo "$CASES" | tr ' ' '\n' | tac | tr '\n' ' ')
for round in $(seq "$ROUNDS"); do # odd rounds in one order, even rounds in the reverse order
  if [ $((round % 2)) = 1 ]; then order=$CASES; else order=$REVERSED; fi
  for c in $order; do run_case "$c" "$round"; done
done
read -r H1 M1 I1 < <(snapshot)
LOAD_AFTER=$(uptime)

python3 - "$ROWS" <<PY
import sys, statistics
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
print(f"cores=$(nproc); saturation: wrk -t$THREADS -c$CONNS -d${DURATION}s --latency; fixed rate:"
      f" h2load --h1 -c$RATE_CONNS at $RATE req/s for ${DURATION}s; x $ROUNDS round(s), GET / with a"
      f" bearer token; nginx worker_processes=$WORKERS, proxies threads=$WORKERS work_stealing=$WORK_STEALING")
print("TLS (openssl s_client): nginx $TLS_NGINX; tokengate $TLS_TOKENGATE; new connections at the fixed"
      f" rate: $NEW_RATE/s, one request each; h2: $STREAMS streams on one connection")
print("load before: $LOAD_BEFORE".replace("  ", " "))
print("load after:  $LOAD_AFTER".replace("  ", " "))
label = {"direct": "direct (hello)", "nginx": "nginx pass-through", "njs": "nginx + njs introspection",
         "bare": "bare Pingora", "off": "tokengate, checks off", "on": "tokengate, checks on",
         "on-ssf": "tokengate on + revocation", "on-aud": "tokengate on + audience",
         "on-dpop": "tokengate on + DPoP (ES256)",
         "njs-tls": "TLS nginx + njs", "on-tls": "TLS tokengate on",
         "njs-tls-new": "TLS new conn nginx + njs", "on-tls-new": "TLS new conn tokengate on",
         "njs-h2": "h2 nginx + njs", "on-h2": "h2 tokengate on"}
cases = [c for c in label if any(r[0] == c for r in rows)]
# columns: case round | sat: rps p50 p99 non2xx errors us/req rss_kb | fixed: rps p50 p99 non2xx errors cpu_ms/1000
print(f"{'case':<27}{'round':>5}{'sat req/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'us/req':>8}{'RSS MB':>8}"
      f"{'| fixed req/s':>13}{'vCPU/1k':>9}{'p50 ms':>8}{'p99 ms':>8}{'non-2xx':>8}  errors")
for r in rows:
    mid = r[0] != "direct"
    print(f"{label[r[0]]:<27}{r[1]:>5}{float(r[2]):>10.0f}{float(r[3]):>8.3f}{float(r[4]):>8.3f}"
          f"{r[7] if mid else '-':>8}{f'{int(r[8]) / 1024:.1f}' if mid else '-':>8}{float(r[9]):>13.0f}"
          f"{f'{int(r[14]) / 1000:.3f}' if mid else '-':>9}{float(r[10]):>8.3f}{float(r[11]):>8.3f}"
          f"{int(r[5]) + int(r[12]):>8}  {r[6]} {r[13]}")
mean = lambda c, i: statistics.mean(float(r[i]) for r in rows if r[0] == c)
big = lambda c, i: max(float(r[i]) for r in rows if r[0] == c)
sat = {c: mean(c, 2) for c in cases}; sp99 = {c: mean(c, 4) for c in cases}
cpu = {c: mean(c, 14) / 1000 for c in cases}; fp50 = {c: mean(c, 10) for c in cases}
fp99 = {c: mean(c, 11) for c in cases}; rss = {c: big(c, 8) / 1024 for c in cases}
kern = {c: mean(c, 15) / 1000 for c in cases}
perf = {c: mean(c, 16) for c in cases if all(r[16] != "-" for r in rows if r[0] == c)}
calls = {c: mean(c, 17) / 1000 for c in cases if all(r[17] != "-" for r in rows if r[0] == c)}
faults = {c: mean(c, 18) for c in cases}
print()
print(f"{'means':<27}{'sat req/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'| vCPU/1k req/s':>15}{'kernel':>8}{'p50 ms':>8}{'p99 ms':>8}{'max RSS MB':>11}")
for c in cases:
    mid = c != "direct"
    print(f"{label[c]:<27}{sat[c]:>10.0f}{mean(c, 3):>8.3f}{sp99[c]:>8.3f}"
          f"{f'{cpu[c]:.3f}' if mid else '-':>15}{f'{kern[c]:.3f}' if mid else '-':>8}{fp50[c]:>8.3f}{fp99[c]:>8.3f}"
          f"{f'{rss[c]:.1f}' if mid else '-':>11}")
if perf:
    print("kernel time by perf (cpu-clock samples of the box at the fixed rate, PERF=1): "
          + "; ".join(f"{label[c]} {perf[c]:.1f} % = {cpu[c] * perf[c] / 100:.3f} vCPU/1k req/s" for c in perf))
print("minor page faults of the box per 1000 requests at the fixed rate: "
      + "; ".join(f"{label[c]} {faults[c]:.0f}" for c in cases if c != "direct"))
if calls:
    print("system calls per request at the fixed rate (perf stat raw_syscalls:sys_enter, PERF=1): "
          + "; ".join(f"{label[c]} {calls[c]:.2f}" for c in calls))
def verdict(ok): return "met" if ok else "MISSED"
print()
if "on" in cases and "njs" in cases:
    r = cpu["on"] / cpu["njs"]
    print(f"checks on / njs   CPU per 1000 req/s = {r:.2f}x  (goal <= 0.85x, issue 42)  {verdict(r <= 0.85)}")
    r = sat["on"] / sat["njs"]
    print(f"checks on / njs   saturation req/s   = {r:.2f}x  (goal >= 1.00x)  {verdict(r >= 1.0)}")
    r = fp99["on"] / fp99["njs"]
    print(f"checks on / njs   p99 at fixed rate  = {r:.2f}x  (goal <= 1.00x)  {verdict(r <= 1.0)}")
for on, njs, what in [("on-tls", "njs-tls", "TLS keep-alive"), ("on-tls-new", "njs-tls-new", "TLS new conn"),
                      ("on-h2", "njs-h2", "h2 many streams")]:
    if on in cases and njs in cases:
        r = cpu[on] / cpu[njs]
        goal = f"(goal <= 1.00x)  {verdict(r <= 1.0)}" if on == "on-tls" else ""
        print(f"{what:<16} on / njs  CPU per 1000 req/s = {r:.2f}x  {goal}")
        print(f"{what:<16} on / njs  saturation req/s   = {sat[on] / sat[njs]:.2f}x")
if "on" in cases and "on-ssf" in cases:
    r = cpu["on-ssf"] / cpu["on"]
    print(f"revocation stream on / off  CPU per 1000 req/s = {r:.2f}x  (goal 0.97-1.03x)  {verdict(0.97 <= r <= 1.03)}")
for c in ("on-aud", "on-dpop"):
    if "on" in cases and c in cases:
        print(f"{label[c]} / checks on  CPU per 1000 req/s = {cpu[c] / cpu['on']:.2f}x,"
              f" saturation {sat[c] / sat['on']:.2f}x, p99 at the fixed rate {fp99[c] / fp99['on']:.2f}x")
if "on" in cases and "bare" in cases:
    r = sat["on"] / sat["bare"]
    print(f"checks on / bare  saturation req/s   = {r:.2f}x  (goal >= 0.95x)  {verdict(r >= 0.95)}"
          f"; CPU per 1000 req/s {cpu['on'] / cpu['bare']:.2f}x")
if "on" in cases:
    print(f"checks on RSS at $CONNS connections  = {rss['on']:.1f} MB  (goal < 50 MB)  {verdict(rss['on'] < 50)}")
if "bare" in cases and "nginx" in cases:
    print(f"bare Pingora / nginx pass-through: CPU per 1000 req/s {cpu['bare'] / cpu['nginx']:.2f}x,"
          f" saturation {sat['bare'] / sat['nginx']:.2f}x")
hits, misses, calls = $H1 - $H0, $M1 - $M0, $I1 - $I0
print(f"tokengate checks on during the runs: cache hits {hits:.0f}, misses {misses:.0f}, introspection calls {calls:.0f}")
PY
