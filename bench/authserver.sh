#!/usr/bin/env bash
# Load benchmark of the authorization server against an axum hello-world, in one run.
# Load comes from wrk in a second process on loopback. Usage: bench/authserver.sh [seconds]
#   DATABASE_URL=postgres://…   bench on fresh schemas of that PostgreSQL server, one per binary
#                               (default: a temporary SQLite file per binary)
#   BASELINE_BIN=path           also bench that (earlier) authserver binary, in the same run
#   BASELINE_CONFIG=path        its settings file, when it does not read today's config/authserver.yaml
#   SKIP_BUILD=1                use the release binaries already built
#   CONNS=32 THREADS=2          wrk's connections and threads
#   PROFILE=1                   also sample every CPU with `perf record -a` (cpu-clock, no
#                               hardware counters needed) in the middle of the hello run and of
#                               each server's runs (at least 6 s), and print where each request's CPU went:
#                               the server's threads in the kernel and in user space, wrk, PostgreSQL,
#                               other processes, and idle CPU (perf's own sampling costs a few %)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
BASELINE_BIN=${BASELINE_BIN:-}
BASELINE_CONFIG=${BASELINE_CONFIG:-config/authserver.yaml}
command -v wrk >/dev/null || { echo "install wrk (apt-get install wrk)"; exit 1; }
if [ -n "${PROFILE:-}" ]; then
  command -v perf >/dev/null || { echo "PROFILE=1 needs perf (apt-get install linux-perf)" >&2; exit 1; }
  perf record -q -a -o /dev/null true >/dev/null 2>&1 \
    || { echo "perf record -a is refused here: sysctl kernel.perf_event_paranoid=-1" >&2; exit 1; }
  [ "$DURATION" -ge 6 ] || { echo "PROFILE=1 needs runs of at least 6 s" >&2; exit 1; }
fi
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p authserver --bin authserver --example hello --example argon2_time
BIN=target/release/authserver
for b in "$BIN" target/release/examples/hello target/release/examples/argon2_time ${BASELINE_BIN:+"$BASELINE_BIN"}; do [ -x "$b" ] || { echo "missing $b: build it (cargo build, see the top of $0) or run without SKIP_BUILD" >&2; exit 1; }; done
. bench/common.sh

if [[ "${DATABASE_URL:-}" == postgres* ]]; then
  BACKEND=postgres
else
  BACKEND=sqlite
fi

AUTH_PORT=$(free_port); HELLO_PORT=$(free_port); METRICS_PORT=$(free_port)
target/release/examples/hello 127.0.0.1:$HELLO_PORT &
PIDS+=($!)
wait_http "http://127.0.0.1:$HELLO_PORT/"

post_script() { # $1 file, $2 authorization, $3 body
  cat > "$1" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = "$2"
wrk.body = "$3"
LUA
}

# A database of its own for one server (a SQLite file, or a schema of DATABASE_URL), migrated
# and given the bench's user and applications by that server's binary: each binary runs on the
# schema its own migrations make, and none on the rows another one wrote before it. Sets DB,
# PW_BASIC, CC_BASIC and the client_credentials and password scripts.
fresh_database() { # $1 label, $2 binary
  if [ "$BACKEND" = postgres ]; then
    pg_schema "bench_$1"
  else
    DB="sqlite://$WORK/$1.sqlite"
  fi
  "$2" migrate --database-url "$DB" >/dev/null
  echo bench-password | "$2" user create --username bench --database-url "$DB" >/dev/null
  local pw cc
  pw=$("$2" app create --name pw --scopes '*' --database-url "$DB" --json)
  cc=$("$2" app create --name cc --scopes '*' --grant-type client-credentials --introspect --database-url "$DB" --json)
  PW_BASIC=$(basic "$pw"); CC_BASIC=$(basic "$cc")
  post_script "$WORK/cc.lua" "Basic $CC_BASIC" "grant_type=client_credentials&scope=read"
  post_script "$WORK/pw.lua" "Basic $PW_BASIC" "grant_type=password&username=bench&password=bench-password"
}

# rps p50_ms p99_ms non2xx from wrk --latency output; with PROFILE=1 and a label ($3), the CPU
# split of the run's middle into $WORK/profile ("label rps share-by-part...").
measure() { # $1 url, $2 script or empty, $3 label to profile under (optional)
  local out perf_pid=""
  if [ -n "${PROFILE:-}" ] && [ -n "${3:-}" ]; then
    (sleep 2; exec perf record -q -a -F 499 -o "$WORK/profile-$3.data" sleep $((DURATION - 4)) >/dev/null 2>&1) &
    perf_pid=$!
  fi
  if [ -n "${2:-}" ]; then out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s "$2" "$1"); else out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$1"); fi
  if [ -n "$perf_pid" ]; then
    # A profile that failed mid-run would read as zeros: stop instead.
    if ! wait "$perf_pid" || [ ! -s "$WORK/profile-$3.data" ]; then
      echo "perf record failed during $3: no CPU split" >&2
      exit 1
    fi
    echo "$3 $(python3 bench/wrk_stats.py <<<"$out" | cut -d" " -f1) $(perf report -i "$WORK/profile-$3.data" --sort comm,dso --stdio 2>/dev/null | awk '
      /^#/ || NF < 3 { next }
      { share = $1; sub("%", "", share); part = "other" }
      $2 == "wrk" { part = "wrk" }
      $2 ~ /^postgres/ { part = "postgres" }
      $2 == "swapper" { part = "idle" }
      $2 == "tokio-rt-worker" || $2 ~ /^sqlite/ || $2 ~ /^authserver/ || $2 ~ /^hello/ { part = ($3 == "[kernel.kallsyms]") ? "server-kernel" : "server-user" }
      { sum[part] += share }
      END { for (p in sum) printf "%s=%.1f ", p, sum[p] }')" >>"$WORK/profile"
  fi
  python3 bench/wrk_stats.py <<<"$out" | cut -d" " -f1-4
}

RESULTS=$WORK/results
WRITE_GROUPS=$WORK/groups
# The write-group histogram of the server's /metrics: lines "writer groups writes" (none from a
# binary without it).
write_groups() {
  { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" || true; } | python3 -c '
import re, sys
seen = {}
for line in sys.stdin:
    m = re.match(r"tokengate_authserver_write_group_size_(sum|count)\{writer=\"(\w+)\"\} (\d+)", line)
    if m:
        seen.setdefault(m[2], {})[m[1]] = int(m[3])
for writer, v in seen.items():
    print(writer, v["count"], v["sum"])'
}
# One authserver binary through its HTTP floor and the three cases: lines "label case rps p50 p99 non2xx"; the
# groups its writers committed during the client_credentials run: "label case writer groups writes".
bench_server() { # $1 label, $2 binary, $3 settings file
  fresh_database "$1" "$2"
  AUTHSERVER_CONFIG=$3 AUTHSERVER_LISTEN=127.0.0.1:$AUTH_PORT AUTHSERVER_METRICS_LISTEN=127.0.0.1:$METRICS_PORT \
    RUST_LOG=warn "$2" serve --database-url "$DB" &
  local pid=$!
  PIDS+=("$pid")
  wait_http "http://127.0.0.1:$AUTH_PORT/healthz"
  local token
  token=$(curl -s -u "$(echo "$PW_BASIC" | base64 -d)" -d grant_type=password -d username=bench -d password=bench-password "http://127.0.0.1:$AUTH_PORT/o/token/" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  post_script "$WORK/introspect.lua" "Basic $CC_BASIC" "token=$token"
  # The floor: what the server's HTTP layer (server loop, middleware, router) costs with no
  # handler work at all, the most any endpoint of this binary could reach.
  echo "$1 healthz $(measure "http://127.0.0.1:$AUTH_PORT/healthz")" >>"$RESULTS"
  echo "$1 introspection $(measure "http://127.0.0.1:$AUTH_PORT/o/introspect/" "$WORK/introspect.lua" "$1-introspection")" >>"$RESULTS"
  # The token cache's hits and misses over the introspection run ("- -" for a binary without).
  echo "$1 $(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -F'[" ]' '/^tokengate_authserver_token_cache_total/ {n[$2]=$NF} END {print (n["hit"]==""?"-":n["hit"]), (n["miss"]==""?"-":n["miss"])}')" >>"$WORK/cache"
  local before
  before=$(write_groups)
  echo "$1 client_credentials $(measure "http://127.0.0.1:$AUTH_PORT/o/token/" "$WORK/cc.lua" "$1-client_credentials")" >>"$RESULTS"
  write_groups | while read -r writer groups writes; do
    read -r _ groups0 writes0 <<<"$(grep "^$writer " <<<"$before" || echo "$writer 0 0")"
    [ "$groups" -eq "$groups0" ] || echo "$1 client_credentials $writer $((groups - groups0)) $((writes - writes0))" >>"$WRITE_GROUPS"
  done
  echo "$1 password $(measure "http://127.0.0.1:$AUTH_PORT/o/token/" "$WORK/pw.lua")" >>"$RESULTS"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

HASH_MS=$(target/release/examples/argon2_time)
CORES=$(nproc)
LOAD_BEFORE=$(cut -d" " -f1-3 /proc/loadavg)
echo "hello hello $(measure "http://127.0.0.1:$HELLO_PORT/" "" hello)" >"$RESULTS"
[ -z "$BASELINE_BIN" ] || bench_server baseline "$BASELINE_BIN" "$BASELINE_CONFIG"
bench_server current "$BIN" config/authserver.yaml
# PostgreSQL alone, without the authserver: pgbench runs the hot path's single statements (the
# introspection SELECT; the client_credentials INSERT of one row, as a group of one writes it)
# with as many connections and threads as wrk uses, prepared, over loopback, on the current
# binary's schema. The SELECT bounds
# what a server reading PostgreSQL per request could reach (ours answers hits from memory); the
# INSERT is the ceiling of one write per commit, which grouped writes pass.
if [ "$BACKEND" = postgres ] && command -v pgbench >/dev/null; then
  APP_ID=$(psql -At "$DB" -c "SELECT id FROM applications WHERE name = 'cc'")
  psql -q "$DB" -c "INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, issued_at, expires_at)
    SELECT 'access', 'floor-' || i, $APP_ID, NULL, 'read', 'floor-' || i, 0, 9999999999 FROM generate_series(1, 20000) i"
  # The statements of authserver/src/store/hot/postgres.rs (TOKEN and INSERT_ONE, with
  # synchronous_commit off as on the tokens writer's session), parameters filled in: an existing token
  # of 20 000 at random, a new random digest.
  cat >"$WORK/floor-introspection.sql" <<'SQL'
\set i random(1, 20000)
SELECT t.id, t.kind, t.application_id, a.client_id, t.user_id, u.username, u.is_active,
    t.scope, t.family, t.access_token_id, t.issued_at, t.expires_at, t.revoked, f.family IS NOT NULL,
    a.allowed_scopes, a.may_introspect, t.cnf_x5t_s256, a.may_use_ssf
    FROM tokens t JOIN applications a ON a.id = t.application_id LEFT JOIN users u ON u.id = t.user_id
    LEFT JOIN revoked_families f ON f.family = t.family WHERE t.digest = 'floor-' || :i;
SQL
  cat >"$WORK/floor-client_credentials.sql" <<SQL
INSERT INTO tokens (kind, digest, application_id, user_id, scope, family, access_token_id, issued_at, expires_at, cnf_x5t_s256)
    SELECT 'access', md5(random()::text), $APP_ID, NULL, 'read', md5(random()::text), NULL, 0, 9999999999, NULL
    FROM (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit
    WHERE NOT EXISTS (SELECT 1 FROM revoked_families WHERE family = md5(random()::text))
        AND EXISTS (SELECT 1 FROM applications WHERE id = $APP_ID) RETURNING id;
SQL
  for case in introspection client_credentials; do
    tps=$(pgbench -n -M prepared -c "$CONNS" -j "$THREADS" -T "$DURATION" -f "$WORK/floor-$case.sql" "$DB" 2>/dev/null \
      | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "postgres-alone $case ${tps:-0} - - 0" >>"$RESULTS"
  done
fi
echo "hello hello-again $(measure "http://127.0.0.1:$HELLO_PORT/")" >>"$RESULTS"
LOAD_AFTER=$(cut -d" " -f1-3 /proc/loadavg)

python3 - "$RESULTS" "$WRITE_GROUPS" <<PY
import os, sys
rows = [line.split() for line in open(sys.argv[1])]
hello = [float(r[2]) for r in rows if r[0] == "hello"]
hello_mean = sum(hello) / len(hello)
ceiling = $CORES / ($HASH_MS / 1000)
goals = {
    "sqlite": {"introspection": 0.8, "client_credentials": 0.4},
    "postgres": {"introspection": 0.5, "client_credentials": 0.3},
}["$BACKEND"]
print(f"backend=$BACKEND cores=$CORES argon2id verify=$HASH_MS ms -> password-grant ceiling {ceiling:.0f}/s; "
      f"wrk -t$THREADS -c$CONNS -d${DURATION}s; load average before $LOAD_BEFORE, after $LOAD_AFTER")
print(f"{'server':<15}{'case':<20}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}{'ratio':>8}  goal")
for label, case, rps, p50, p99, errors in rows:
    rps = float(rps)
    if label == "hello":
        ratio, goal = rps / hello_mean, "(ratios against the mean of the two hello runs)"
    elif case == "healthz":
        ratio, goal = rps / hello_mean, "(the HTTP layer alone: the most any endpoint can reach)"
    elif case == "password":
        ratio, goal = rps / ceiling, ">= 0.9 x cores/hash"
    elif label == "postgres-alone":
        ratio, goal = rps / hello_mean, "(pgbench, one statement per commit: not a bound on grouped writes)"
    else:
        ratio, goal = rps / hello_mean, f">= {goals[case]} x hello"
    num = lambda v: f"{float(v):>9.2f}" if v != "-" else f"{'-':>9}"
    print(f"{label:<15}{case:<20}{rps:>10.0f}{num(p50)}{num(p99)}{errors:>9}{ratio:>8.2f}  {goal}")
groups = [line.split() for line in open(sys.argv[2])] if os.path.exists(sys.argv[2]) else []
if groups:
    print("write groups (tokengate_authserver_write_group_size) committed during each client_credentials run:")
for label, case, writer, n, writes in groups:
    print(f"{label:<15}{case:<20}writer={writer:<15}groups={n:<8}writes={writes:<9}mean size={int(writes) / int(n):.1f}")
for label, hits, misses in (line.split() for line in open("$WORK/cache")):
    print(f"{label:<15}token cache over the introspection run: {hits} hits, {misses} misses")
PY
if [ -f "$WORK/profile" ]; then
  python3 - "$WORK/profile" "$CORES" <<'PY'
import sys
cores = int(sys.argv[2])
parts = ["server-kernel", "server-user", "wrk", "postgres", "other", "idle"]
print("CPU per request in microseconds (perf record -a, cpu-clock; the server's threads split into kernel and user space):")
print(f"{'run':<32}{'req/s':>9}" + "".join(f"{p:>15}" for p in parts))
for line in open(sys.argv[1]):
    label, rps, *shares = line.split()
    share = dict(s.split("=") for s in shares)
    us = lambda p: float(share.get(p, 0)) / 100 * cores / float(rps) * 1e6
    print(f"{label:<32}{float(rps):>9.0f}" + "".join(f"{us(p):>15.2f}" for p in parts))
PY
fi
