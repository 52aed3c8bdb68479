#!/usr/bin/env bash
# The proxy's token check by source, in one run. Same upstream (the axum hello-world example),
# same request (GET / with `Authorization: Bearer <token>`), same wrk settings and wrk script
# (bench/jwt.lua) for every case:
#   off         tokengate proxy, route `public: true` (no token check)
#   intro-hit   tokengate proxy, `token_source: introspection` (default), route needs scope
#               `read`, opaque token from a real authorization server (SQLite), every measured
#               request a cache hit
#   jwt-hit     tokengate proxy, `token_source: jwt` (EdDSA key, JWKS from a file), route needs
#               scope `read`, one token: every measured request a cache hit
#   jwt-miss    same configuration (its own process), every request a new token: wrk cycles
#               through pre-minted distinct tokens (bench/jwt_tokens.py), each used once; the
#               hit ratio is read from the proxy's /metrics and printed
#   jwt-miss-rs the same with RS256 tokens (RSA 2048: what Keycloak, Auth0, Entra ID, Okta and
#               Google sign with), its own process
# Per case and round: wrk -t$THREADS -c$CONNS --latency: req/s, p50, p99, non-2xx, CPU µs per
# request of the proxy (/proc/<pid>/stat utime+stime before and after). Odd rounds run the cases
# in one order, even rounds in the reverse order. Load comes from a second process on loopback.
# Goals (reported, not asserted): jwt-hit within 5 % of intro-hit (req/s >= 0.95x), jwt-miss
# and jwt-miss-rs >= 0.5x jwt-hit.
# Usage: bench/jwt.sh [seconds per measurement]   (env: CONNS=64, THREADS=2 (wrk), WORKERS=1
#        (proxy threads), WORK_STEALING=false (the binary's default), ROUNDS=2, TOKENS_PER_SECOND=20000 (distinct tokens
#        minted per second of a miss round), RS_TOKENS_PER_SECOND=12000 (the same for RS256: about
#        1 ms of CPU each to mint), CASES="off intro-hit jwt-hit jwt-miss jwt-miss-rs",
#        SKIP_BUILD=1 (use the binaries as built), PROXY= AUTH= HELLO=)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-1}
WORK_STEALING=${WORK_STEALING:-false}
ROUNDS=${ROUNDS:-2}
TOKENS_PER_SECOND=${TOKENS_PER_SECOND:-20000}
RS_TOKENS_PER_SECOND=${RS_TOKENS_PER_SECOND:-12000}
CASES=${CASES:-off intro-hit jwt-hit jwt-miss jwt-miss-rs}
command -v wrk >/dev/null || { echo "missing wrk; install with: apt-get install wrk" >&2; exit 1; }
# Release profile (not dist/LTO, to keep the build short): compare only within one run.
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p authserver --bin authserver --example hello \
  -p proxy --bin proxy
AUTH=${AUTH:-target/release/authserver}
PROXY=${PROXY:-target/release/proxy}
HELLO=${HELLO:-target/release/examples/hello}
for b in "$AUTH" "$PROXY" "$HELLO"; do [ -x "$b" ] || { echo "missing $b: build it (cargo build, see the top of $0) or run without SKIP_BUILD" >&2; exit 1; }; done
. bench/common.sh
LOAD_BEFORE=$(uptime)

# JWTs: an Ed25519 and an RSA key, their JWKS, one token for the hit case and distinct ones for
# every miss round.
ISSUER=https://issuer.bench.example
AUDIENCE=bench-api
PER_ROUND=$((DURATION * TOKENS_PER_SECOND))
RS_PER_ROUND=$((DURATION * RS_TOKENS_PER_SECOND))
echo "minting $((ROUNDS * PER_ROUND + 1)) EdDSA and $((ROUNDS * RS_PER_ROUND)) RS256 tokens..." >&2
python3 bench/jwt_tokens.py "$ISSUER" "$AUDIENCE" "$WORK" "$ROUNDS" "$PER_ROUND" "$RS_PER_ROUND" 2>/dev/null
JWT=$(cat "$WORK/hit.txt")

# Authorization server: one user, a password-grant client, and the introspection client.
start_authserver
printf '%s\n' "$TOKEN" > "$WORK/opaque.txt"

# The upstream.
HELLO_PORT=$(free_port)
$HELLO "127.0.0.1:$HELLO_PORT" & PIDS+=($!)
wait_http "http://127.0.0.1:$HELLO_PORT/"

# Four tokengate proxies, same binary. The JWT ones still need the introspection section (not
# called for JWTs). max_ttl covers the whole run.
declare -A PORT ADMIN PID TOKENS
start_proxy() { # $1 case, $2 route access (YAML), $3 extra top-level YAML
  local port admin
  port=$(free_port); admin=$(free_port)
  proxy_yaml "$1" "$2" "$port" "$admin" "$3"
  RUST_LOG=warn $PROXY --config "$WORK/proxy-$1.yaml" 2>"$WORK/proxy-$1.log" & PID[$1]=$!
  PIDS+=(${PID[$1]})
  PORT[$1]=$port; ADMIN[$1]=$admin
  wait_http "http://127.0.0.1:$admin/healthz"
}
JWT_YAML="token_source: jwt
audience: $AUDIENCE
jwt:
  jwks_file: $WORK/jwks.json
  issuer: $ISSUER
  algorithms: [EdDSA, RS256]"
start_proxy off "public: true" ""
start_proxy intro-hit "scopes: [read]" ""
start_proxy jwt-hit "scopes: [read]" "$JWT_YAML"
start_proxy jwt-miss "scopes: [read]" "$JWT_YAML"
start_proxy jwt-miss-rs "scopes: [read]" "$JWT_YAML"
TOKENS[off]=$WORK/opaque.txt; TOKENS[intro-hit]=$WORK/opaque.txt; TOKENS[jwt-hit]=$WORK/hit.txt

status() { curl -s -o /dev/null -w '%{http_code}' ${2:+-H "Authorization: Bearer $2"} "http://127.0.0.1:${PORT[$1]}/"; }
expect() { # $1 case, $2 token, $3 expected status(es) (regex)
  local code; code=$(status "$1" "$2")
  [[ $code =~ ^($3)$ ]] || { echo "$1 with token '${2:0:20}…': HTTP $code, expected $3" >&2
    cat "$WORK/proxy-$1.log" >&2; exit 1; }
}
# Warm-up (fills the hit caches) and sanity: the checks refuse what they must. The jwt-miss
# proxy is checked with the hit token, which no miss round sends.
expect off "$TOKEN" 200
expect intro-hit "$TOKEN" 200; expect intro-hit "" 401; expect intro-hit not-a-token "401|403"
for c in jwt-hit jwt-miss jwt-miss-rs; do
  expect $c "$JWT" 200; expect $c "" 401; expect $c "$TOKEN" 401
  sig=${JWT##*.}; [ "${sig:0:1}" = A ] && flip=B || flip=A
  expect $c "${JWT%.*}.$flip${sig:1}" 401   # signature tampered
done

# CPU clock ticks (user+system) used so far by the given process, all threads.
cpu_ticks() { [ -e "/proc/$1/stat" ] || { echo "proxy $1 is gone" >&2; exit 1; }
  awk '{ print $14 + $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
metric() { # $1 case, $2 metric name (with labels): its value on that proxy's admin /metrics
  curl -s "http://127.0.0.1:${ADMIN[$1]}/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}
VERIFIED='tokengate_proxy_jwt_validations_total{outcome="verified"}'
CACHED='tokengate_proxy_jwt_validations_total{outcome="cached"}'
# One measurement: "rps p50_ms p99_ms non2xx socket_errors us_per_req token_wraps"
saturate() { # $1 case, $2 tokens file
  local out t0 t1 rps p50 p99 non2xx total errors wraps
  t0=$(cpu_ticks "${PID[$1]}")
  out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s bench/jwt.lua \
    "http://127.0.0.1:${PORT[$1]}/" -- "$2" "$THREADS")
  t1=$(cpu_ticks "${PID[$1]}")
  read -r rps p50 p99 non2xx total errors < <(python3 bench/wrk_stats.py <<<"$out")
  wraps=$(sed -n 's/^token wraps: //p' <<<"$out")
  echo "$rps $p50 $p99 $non2xx $errors $(( (t1 - t0) * 1000000 / (HZ * (total > 0 ? total : 1)) )) ${wraps:-0}"
}

ORDER=($CASES)
V0=$(metric jwt-miss "$VERIFIED"); C0=$(metric jwt-miss "$CACHED")
RV0=$(metric jwt-miss-rs "$VERIFIED"); RC0=$(metric jwt-miss-rs "$CACHED")
HV0=$(metric jwt-hit "$VERIFIED"); HC0=$(metric jwt-hit "$CACHED")
ROWS=""
for round in $(seq "$ROUNDS"); do
  if (( round % 2 )); then order=("${ORDER[@]}"); else
    order=(); for ((k=${#ORDER[@]}-1; k>=0; k--)); do order+=("${ORDER[k]}"); done; fi
  for c in "${order[@]}"; do
    case $c in jwt-miss) file=$WORK/miss-$round.txt ;; jwt-miss-rs) file=$WORK/rs-miss-$round.txt ;;
      *) file=${TOKENS[$c]} ;; esac
    echo "round $round: $c" >&2
    ROWS+="$c $round $(saturate "$c" "$file")"$'\n'
  done
done
V1=$(metric jwt-miss "$VERIFIED"); C1=$(metric jwt-miss "$CACHED")
RV1=$(metric jwt-miss-rs "$VERIFIED"); RC1=$(metric jwt-miss-rs "$CACHED")
HV1=$(metric jwt-hit "$VERIFIED"); HC1=$(metric jwt-hit "$CACHED")
LOAD_AFTER=$(uptime)

python3 - "$ROWS" <<PY
import statistics, sys
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
print(f"bench/jwt.sh: wrk -t$THREADS -c$CONNS -d${DURATION}s --latency -s bench/jwt.lua, GET / with a bearer"
      f" token; x $ROUNDS round(s) alternating order; proxies threads=$WORKERS work_stealing=$WORK_STEALING;"
      f" release profile (not dist/LTO): $PROXY")
print("load before: $LOAD_BEFORE".replace("  ", " "))
print("load after:  $LOAD_AFTER".replace("  ", " "))
label = {"off": "checks off (public route)", "intro-hit": "introspection, cache hits",
         "jwt-hit": "JWT (EdDSA), cache hits", "jwt-miss": "JWT (EdDSA), every token new",
         "jwt-miss-rs": "JWT (RS256), every token new"}
cases = [c for c in label if any(r[0] == c for r in rows)]
print(f"{'case':<31}{'round':>5}{'req/s':>9}{'p50 ms':>8}{'p99 ms':>8}{'non-2xx':>8}{'cpu us/req':>11}  socket errors")
for r in rows:
    print(f"{label[r[0]]:<31}{r[1]:>5}{float(r[2]):>9.0f}{float(r[3]):>8.3f}{float(r[4]):>8.3f}{r[5]:>8}{r[7]:>11}  {r[6]}")
mean = lambda c, i: statistics.mean(float(r[i]) for r in rows if r[0] == c)
print()
print(f"{'means':<31}{'req/s':>14}{'p50 ms':>8}{'p99 ms':>8}{'non-2xx':>8}{'cpu us/req':>11}")
for c in cases:
    print(f"{label[c]:<31}{mean(c, 2):>14.0f}{mean(c, 3):>8.3f}{mean(c, 4):>8.3f}"
          f"{sum(int(r[5]) for r in rows if r[0] == c):>8}{mean(c, 7):>11.0f}")
print()
ok = lambda good: "ok" if good else "MISSED"
if "jwt-hit" in cases and "intro-hit" in cases:
    r = mean("jwt-hit", 2) / mean("intro-hit", 2)
    print(f"JWT hits / introspection hits  req/s = {r:.2f}x  (goal >= 0.95x)  {ok(r >= 0.95)};"
          f" cpu per request {mean('jwt-hit', 7) / mean('intro-hit', 7):.2f}x")
for miss, alg in [("jwt-miss", "EdDSA"), ("jwt-miss-rs", "RS256")]:
    if miss in cases and "jwt-hit" in cases:
        r = mean(miss, 2) / mean("jwt-hit", 2)
        print(f"JWT {alg} misses / JWT hits    req/s = {r:.2f}x  (goal >= 0.50x)  {ok(r >= 0.5)};"
              f" cpu per request {mean(miss, 7) / mean('jwt-hit', 7):.2f}x")
for miss, verified, cached in [("jwt-miss", ${V1:-0} - ${V0:-0}, ${C1:-0} - ${C0:-0}),
                               ("jwt-miss-rs", ${RV1:-0} - ${RV0:-0}, ${RC1:-0} - ${RC0:-0})]:
    if miss in cases:
        wraps = sum(int(r[8]) for r in rows if r[0] == miss)
        print(f"{miss} proxy during the runs: {verified:.0f} verified, {cached:.0f} from cache"
              f" (hit ratio {cached / max(verified + cached, 1):.4f}); wrk token-list wraps: {wraps}")
if "jwt-hit" in cases:
    print(f"jwt-hit proxy during the runs: {${HV1:-0} - ${HV0:-0}:.0f} verified, {${HC1:-0} - ${HC0:-0}:.0f} from cache")
PY
