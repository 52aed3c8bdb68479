#!/usr/bin/env bash
# CPU per 1000 client_credentials tokens on PostgreSQL, on both sides: the authserver process and
# the PostgreSQL backends serving its connections (their utime+stime from /proc before and after,
# 10 ms ticks), with PostgreSQL's WAL writer, background writer and checkpointer apart (shared
# with anything else writing to that server, so only indicative on a busy machine). Also what the
# requests did inside PostgreSQL, from the statistics views of the run's own schema (index scans,
# sequential scans, rows inserted per token: which statements ran, which indexes were looked up
# or written), and the sizes of the token writer's groups (`tokengate_authserver_write_group_size`).
# CPU time, unlike req/s, barely depends on what else runs on the machine.
# Usage: DATABASE_URL=postgres://… bench/postgres_cpu.sh   (env: N=20000 requests after a
#        warm-up of 2000, CONNS=32 keep-alive connections (h2load --h1), AUTH=binary (default
#        $CARGO_TARGET_DIR or target /release/authserver), SQL='…' (statements run on the schema after
#        migrating: to try a schema change before writing its migration), DETAIL=1 (each backend's
#        ticks and last statement, on stderr))
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-20000}
CONNS=${CONNS:-32}
AUTH=${AUTH:-${CARGO_TARGET_DIR:-target}/release/authserver}
[[ "${DATABASE_URL:-}" == postgres* ]] || { echo "set DATABASE_URL=postgres://…" >&2; exit 1; }
for tool in h2load psql ss; do command -v $tool >/dev/null || { echo "missing $tool" >&2; exit 1; }; done
[ -x "$AUTH" ] || { echo "missing $AUTH: cargo build --release -p authserver --bin authserver" >&2; exit 1; }
. bench/common.sh
pg_schema bench_cpu
# The PostgreSQL server's port, by which the authserver's backends are found (TCP only).
PG_PORT=$(python3 -c 'import sys, urllib.parse as u; print(u.urlsplit(sys.argv[1]).port or 5432)' "$DATABASE_URL")

$AUTH migrate --database-url "$DB" >/dev/null
[ -z "${SQL:-}" ] || psql -q "$DB" -c "$SQL" >/dev/null
CC=$($AUTH app create --name cc --scopes '*' --grant-type client-credentials --introspect --database-url "$DB" --json)
BASIC=$(basic "$CC")
PORT=$(free_port); METRICS_PORT=$(free_port)
AUTHSERVER_LISTEN=127.0.0.1:$PORT AUTHSERVER_METRICS_LISTEN=127.0.0.1:$METRICS_PORT RUST_LOG=warn \
  "$AUTH" serve --database-url "$DB" & AUTH_PID=$!; PIDS+=($AUTH_PID)
wait_http "http://127.0.0.1:$PORT/healthz"
printf 'grant_type=client_credentials&scope=read' >"$WORK/body"
load() { # $1 requests; fails on anything but 2xx
  local out
  out=$(h2load --h1 -c"$CONNS" -n"$1" -d "$WORK/body" -H "Authorization: Basic $BASIC" \
    -H "Content-Type: application/x-www-form-urlencoded" "http://127.0.0.1:$PORT/o/token/")
  grep -q "status codes: $1 2xx" <<<"$out" || { echo "not every request answered 2xx:" >&2; echo "$out" >&2; exit 1; }
}
# The PIDs of the PostgreSQL backends of the authserver's connections (matched by client port).
backends() {
  local ports
  ports=$(ss -tnpH state established "( dport = :$PG_PORT )" | grep "pid=$AUTH_PID," \
    | awk '{ n = split($3, a, ":"); print a[n] }' | paste -sd, -)
  [ -n "$ports" ] || return 0
  psql -At "$DATABASE_URL" -c "SELECT pid FROM pg_stat_activity WHERE client_port IN ($ports)"
}
# PostgreSQL's own writers (WAL writer, background writer, checkpointer).
writers() { pgrep -f 'postgres: .*(walwriter|background writer|checkpointer)' || true; }
ticks() { # total utime+stime of the PIDs given, in clock ticks (gone PIDs count 0)
  local sum=0 pid
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] || continue
    sum=$((sum + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat")))
  done
  echo $sum
}
# Per table and index of the schema: "name seq_scan idx_scan rows_inserted rows_updated".
table_stats() {
  psql -At -F' ' "$DATABASE_URL" -c "
    SELECT relname, seq_scan, COALESCE(idx_scan, 0), n_tup_ins, n_tup_upd FROM pg_stat_user_tables
      WHERE schemaname = '$SCHEMA'
    UNION ALL SELECT indexrelname, 0, idx_scan, 0, 0 FROM pg_stat_user_indexes WHERE schemaname = '$SCHEMA'
    ORDER BY 1"
}
group_sizes() { # "groups writes" of the tokens writer
  curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '
    /^tokengate_authserver_write_group_size_count\{writer="tokens"\}/ { c = $NF }
    /^tokengate_authserver_write_group_size_sum\{writer="tokens"\}/ { s = $NF }
    END { print c + 0, s + 0 }'
}

load 2000   # warm-up: the pool's connections, the caches, the prepared statements
sleep 11    # a backend flushes its last statistics once idle for 10 s (PostgreSQL 15)
read -r -a BACKENDS <<<"$(backends | paste -sd' ' -)"
[ ${#BACKENDS[@]} -gt 0 ] || { echo "no TCP connection of the authserver to port $PG_PORT (a unix-socket DATABASE_URL?)" >&2; exit 1; }
read -r -a WRITERS <<<"$(writers | paste -sd' ' -)"
STATS0=$(table_stats); GROUPS0=$(group_sizes)
A0=$(ticks "$AUTH_PID"); B0=$(ticks "${BACKENDS[@]}"); W0=$(ticks "${WRITERS[@]}")
T0=$(date +%s.%N)
[ -z "${DETAIL:-}" ] || for pid in "${BACKENDS[@]}"; do echo "$pid $(awk '{ sub(/^.*\) /, ""); print $12, $13 }' /proc/$pid/stat)"; done > "$WORK/d0"
load "$N"
T1=$(date +%s.%N)
[ -z "${DETAIL:-}" ] || for pid in "${BACKENDS[@]}"; do echo "$pid $(awk '{ sub(/^.*\) /, ""); print $12, $13 }' /proc/$pid/stat) $(psql -At "$DATABASE_URL" -c "select left(regexp_replace(query, '\s+', ' ', 'g'), 60) from pg_stat_activity where pid=$pid")"; done | join "$WORK/d0" - >&2
A1=$(ticks "$AUTH_PID"); W1=$(ticks "${WRITERS[@]}")
# Backends the pool opened during the run count from their start.
read -r -a AFTER <<<"$(backends | paste -sd' ' -)"
B1=$(ticks "${AFTER[@]}")
NEW=0; for pid in "${AFTER[@]}"; do [[ " ${BACKENDS[*]} " == *" $pid "* ]] || NEW=$((NEW + 1)); done
sleep 11
STATS1=$(table_stats); GROUPS1=$(group_sizes)

python3 - "$N" "$(getconf CLK_TCK)" "$A0 $A1" "$B0 $B1" "$W0 $W1" "$T0 $T1" "$GROUPS0 $GROUPS1" \
  "${#BACKENDS[@]} ${#AFTER[@]} $NEW" "$STATS0" "$STATS1" <<'PY'
import sys
n, hz = int(sys.argv[1]), int(sys.argv[2])
a0, a1 = map(int, sys.argv[3].split()); b0, b1 = map(int, sys.argv[4].split())
w0, w1 = map(int, sys.argv[5].split()); t0, t1 = map(float, sys.argv[6].split())
g0, s0, g1, s1 = map(int, sys.argv[7].split())
before, after, new = sys.argv[8].split()
per_k = lambda ticks: ticks * 1000 / hz / n * 1000  # CPU-ms per 1000 tokens
print(f"{n} client_credentials tokens in {t1 - t0:.1f} s ({n / (t1 - t0):.0f}/s), h2load --h1 on the connections given")
print(f"CPU-ms per 1000 tokens: authserver {per_k(a1 - a0):.0f}, PostgreSQL backends {per_k(b1 - b0):.0f} "
      f"({before} backends, {after} after, {new} new), PostgreSQL writers {per_k(w1 - w0):.0f} (shared)")
if g1 > g0:
    print(f"token writer: {g1 - g0} groups of {(s1 - s0) / (g1 - g0):.1f} tokens on average")
stats = lambda text: {r[0]: list(map(int, r[1:])) for r in (l.split() for l in text.splitlines())}
s0, s1 = stats(sys.argv[9]), stats(sys.argv[10])
print(f"per token: {'table or index':<40}{'seq scans':>10}{'idx scans':>10}{'inserted':>10}{'updated':>10}")
for name, v1 in s1.items():
    d = [(x - y) / n for x, y in zip(v1, s0.get(name, [0] * 4))]
    if any(d):
        print(f"           {name:<40}" + "".join(f"{x:>10.3f}" for x in d))
PY
