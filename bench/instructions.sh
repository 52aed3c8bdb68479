#!/usr/bin/env bash
# User-space instructions per request of the box in the middle, counted by valgrind's callgrind:
# a figure that other processes on a busy machine do not move, unlike CPU time. Same upstream
# (the axum hello-world), same request (GET / with `Authorization: Bearer <token>`) as
# bench/proxy.sh, on HTTP/1.1 keep-alive connections:
#   on       tokengate, route needs scope `read`, every measured request a cache hit (proxy.sh's on)
#   on-tls   the same proxy terminating TLS (one ECDSA P-256 certificate made for the run)
#   on-ssf   `on` with the revocation stream receiver on (`revocation:` following the
#            authorization server's SSF stream; measured once the stream is healthy)
#   on-aud   `on` with the proxy bound to a resource (`resource:`, the token's `aud` checked): the
#            token asked for that resource (RFC 8707)
#   on-dpop  `on` on a `dpop: required` route, a DPoP-bound token (ES256 key) and a new proof per
#            request (bench/dpop_proofs.py: made before the requests are sent, Python's
#            http.client as the load, so its header set differs from h2load's by a header or two)
#   on-dpop-eddsa  the same with an Ed25519 key
#   bare     the bare Pingora proxy (proxy/examples/bare.rs)
#   njs      nginx + njs introspection, answers kept by proxy_cache (bench/nginx/), one process
#            (master_process off)
#   njs-tls  the same over TLS
# Each box runs alone under callgrind; after a warm-up, its counters are zeroed, $SMALL requests
# sent (h2load --h1, $CONNS connections), counters dumped, $LARGE requests sent on the same number
# of new connections, dumped again: (I_large - I_small) / (LARGE - SMALL) is the cost of one request
# without the cost of starting, connecting or warming up. Kernel work (loopback TCP, about half of
# a proxy's CPU in perf) is not counted: compare it with `perf stat` of syscalls if needed.
# Valgrind counts each byte a `rep movsb` moves as one instruction (a CPU retires it as one):
# glibc's memcpy moves large blocks so, and Pingora moves its ~14 KB boxed session
# future once per request (about 13 k of every Pingora box's count, none of nginx's). With
# GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=100000000 in the environment memcpy uses its
# vector loop at every size: the count a CPU would see is closer (bench/README.md gives both).
# Usage: bench/instructions.sh   (env: CASES="on bare on-tls on-ssf on-aud on-dpop on-dpop-eddsa njs
#        njs-tls", SMALL=500, LARGE=2500,
#        CONNS=4, KEEP=dir (keep the callgrind files there, for callgrind_annotate), PROXY, BARE,
#        AUTH, HELLO, NGINX (binaries; default /work/bench-target/release or target/release))
# Build: cargo build --release -p proxy --bin proxy --example bare -p authserver --bin authserver
#        --example hello (with CARGO_PROFILE_RELEASE_DEBUG=line-tables-only for annotated lines).
set -euo pipefail
cd "$(dirname "$0")/.."
CASES=${CASES:-on bare on-tls on-ssf on-aud on-dpop on-dpop-eddsa njs njs-tls}
SMALL=${SMALL:-500}
LARGE=${LARGE:-2500}
CONNS=${CONNS:-4}
BIN=${CARGO_TARGET_DIR:-target}/release
PROXY=${PROXY:-$BIN/proxy}
BARE=${BARE:-$BIN/examples/bare}
AUTH=${AUTH:-$BIN/authserver}
HELLO=${HELLO:-$BIN/examples/hello}
NGINX=${NGINX:-/usr/sbin/nginx}
WORKERS=1
WORK_STEALING=false
for tool in valgrind callgrind_control h2load; do
  command -v $tool >/dev/null || { echo "missing $tool (apt-get install valgrind nghttp2-client)" >&2; exit 1; }
done
for b in "$AUTH" "$PROXY" "$BARE" "$HELLO"; do [ -x "$b" ] || { echo "missing $b: build it (see the top of $0)" >&2; exit 1; }; done
. bench/common.sh

# The key-encryption secret of the authorization server's signing keys (the stream's events are
# signed).
export AUTHSERVER_SECRETS_SYSTEM=$(openssl rand -hex 32)
start_authserver
HELLO_PORT=$(free_port)
$HELLO "127.0.0.1:$HELLO_PORT" & PIDS+=($!)
wait_http "http://127.0.0.1:$HELLO_PORT/"
CERT=$WORK/tls.crt; KEY=$WORK/tls.key
tls_certificate "$CERT" "$KEY"
# The audience case's port, fixed now: the resource (and its token's `aud`) names it.
AUD_PORT=$(free_port)
case " $CASES " in *" on-aud "*) AUD_TOKEN=$(audience_token "http://127.0.0.1:$AUD_PORT/") ;; esac
case " $CASES " in *" on-dpop "*) DPOP_TOKEN=$(dpop_token ES256 "$WORK/dpop-on-dpop.pem") ;; esac
case " $CASES " in *" on-dpop-eddsa "*) DPOP_EDDSA_TOKEN=$(dpop_token EdDSA "$WORK/dpop-on-dpop-eddsa.pem") ;; esac

# Polls $1 until it answers 200 (valgrind starts a program 20-50x slower); a DPoP case until it
# answers at all (its warm-up then fails on anything but 200s).
wait_ok() {
  for _ in $(seq 600); do
    case $CASE in
      on-dpop*) [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" != 000 ] && return 0 ;;
      *) [ "$(curl -sk -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $CASE_TOKEN" "$1")" = 200 ] && return 0 ;;
    esac
    sleep 0.2
  done
  echo "no 200 from $1 (see $WORK/valgrind-$CASE.log)" >&2; cat "$WORK/valgrind-$CASE.log" >&2; exit 1
}
# Polls $1 until it answers exactly "ready" (not degraded: the revocation stream is healthy).
wait_ready() {
  for _ in $(seq 600); do
    [ "$(curl -s "$1")" = ready ] && return 0
    sleep 0.2
  done
  echo "$1: not ready (see $WORK/valgrind-$CASE.log)" >&2; curl -s "$1" >&2; exit 1
}
# Sends $1 requests to $URL on $CONNS keep-alive connections; fails on anything but 200s.
load() {
  local out
  case $CASE in on-dpop*)
    python3 bench/dpop_proofs.py load --key "$WORK/dpop-$CASE.pem" --token "$CASE_TOKEN" --url "$URL" \
      -n "$1" -c "$CONNS" || { echo "$CASE: not every request answered 200" >&2; exit 1; }
    return ;;
  esac
  out=$(h2load --h1 -c"$CONNS" -n"$1" -H "Authorization: Bearer $CASE_TOKEN" "$URL")
  grep -q "status codes: $1 2xx" <<<"$out" || { echo "$CASE: not every request answered 2xx:" >&2; echo "$out" >&2; exit 1; }
}

ROWS=""
for CASE in $CASES; do
  PORT=$(free_port); CASE_TOKEN=$TOKEN
  case $CASE in
    on-aud) PORT=$AUD_PORT; CASE_TOKEN=$AUD_TOKEN ;;
    on-dpop) CASE_TOKEN=$DPOP_TOKEN ;;
    on-dpop-eddsa) CASE_TOKEN=$DPOP_EDDSA_TOKEN ;;
  esac
  URL="http://127.0.0.1:$PORT/"
  case $CASE in
    on|on-tls|on-ssf|on-aud|on-dpop|on-dpop-eddsa)
      ADMIN=$(free_port)
      extra=""; access="scopes: [read]"
      [ "$CASE" = on-tls ] && { extra="tls: { cert_file: $CERT, key_file: $KEY }"; URL="https://127.0.0.1:$PORT/"; }
      ssf="http://127.0.0.1:$AUTH_PORT/.well-known/ssf-configuration"
      [ "$CASE" = on-ssf ] && extra="revocation: { configuration_url: \"$ssf\", healthy_max_ttl: 1h }"
      [ "$CASE" = on-aud ] && extra="resource: http://127.0.0.1:$AUD_PORT/"
      case $CASE in on-dpop*) access="scopes: [read], dpop: required" ;; esac
      proxy_yaml "$CASE" "$access" "$PORT" "$ADMIN" "$extra"
      RUST_LOG=warn under_callgrind "$PROXY" --config "$WORK/proxy-$CASE.yaml" ;;
    bare) under_callgrind "$BARE" "127.0.0.1:$PORT" "127.0.0.1:$HELLO_PORT" "$WORKERS" "$WORK_STEALING" ;;
    njs|njs-tls)
      NJS_PORT=$PORT NJS_TLS_PORT=$(free_port) NGINX_PORT=$(free_port)
      [ "$CASE" = njs-tls ] && URL="https://127.0.0.1:$NJS_TLS_PORT/"
      nginx_conf
      sed -i -e 's/^master_process on;/master_process off;/' "$WORK/nginx.conf"
      under_callgrind "$NGINX" -p "$WORK" -e "$WORK/nginx-error.log" -c "$WORK/nginx.conf" ;;
    *) echo "unknown case $CASE" >&2; exit 1 ;;
  esac
  wait_ok "$URL"
  [ "$CASE" = on-ssf ] && wait_ready "http://127.0.0.1:$ADMIN/readyz"
  measure_case
done

python3 - "$ROWS" <<PY
import sys
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
print(f"user-space instructions per request (callgrind), ($LARGE - $SMALL) requests on $CONNS keep-alive connections")
print(f"{'case':<10}{'I($SMALL)':>14}{'I($LARGE)':>14}{'per request':>13}")
per = {}
for case, small, large in rows:
    per[case] = (int(large) - int(small)) / ($LARGE - $SMALL)
    print(f"{case:<10}{int(small):>14,}{int(large):>14,}{per[case]:>13,.0f}")
for a, b in [("on", "bare"), ("on", "njs"), ("on-tls", "njs-tls"), ("on-ssf", "on"), ("on-aud", "on"),
             ("on-dpop", "on"), ("on-dpop-eddsa", "on")]:
    if a in per and b in per:
        print(f"{a} / {b} = {per[a] / per[b]:.2f}x")
PY
