# Shared by the bench scripts (sourced): a scratch directory with a SQLite database, the PIDs of
# the servers started (killed on exit), and small helpers.
WORK=$(mktemp -d)
DB="sqlite://$WORK/db.sqlite"
PIDS=()
SCHEMAS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for schema in "${SCHEMAS[@]}"; do
    psql -q "$DATABASE_URL" -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # $1 url: polls until the server answers at all
  for _ in $(seq 200); do curl -s -o /dev/null "$1" && return 0; sleep 0.05; done
  echo "no answer from $1" >&2; exit 1
}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
basic() { printf '%s:%s' "$(field "$1" client_id)" "$(field "$1" client_secret)" | base64 -w0; } # $1: `app create --json`
# A fresh schema of $DATABASE_URL, dropped on exit (cleanup): sets SCHEMA, and DB to a URL whose
# connections use it. $1: the schema name's prefix.
pg_schema() {
  SCHEMA="$1_$(date +%s)_$$"
  psql -q "$DATABASE_URL" -c "CREATE SCHEMA $SCHEMA" >/dev/null
  SCHEMAS+=("$SCHEMA")
  local sep='?'; [[ "$DATABASE_URL" == *\?* ]] && sep='&'
  DB="${DATABASE_URL}${sep}options=-c%20search_path%3D$SCHEMA"
}

# A tokengate proxy configuration in front of the hello upstream: writes $WORK/proxy-$1.yaml.
# $1 name, $2 route access (YAML), $3 listen port, $4 admin port, $5 extra top-level YAML.
# Needs WORKERS, WORK_STEALING, HELLO_PORT, AUTH_PORT, CC_ID, CC_SECRET; max_ttl covers a run.
proxy_yaml() {
  cat > "$WORK/proxy-$1.yaml" <<YAML
listen: 127.0.0.1:$3
admin_listen: 127.0.0.1:$4
threads: $WORKERS
work_stealing: $WORK_STEALING
grace_period: 1s
shutdown_timeout: 1s
upstreams:
  hello: { address: "127.0.0.1:$HELLO_PORT" }
introspection:
  url: http://127.0.0.1:$AUTH_PORT/o/introspect/
  client_id: $CC_ID
  client_secret: $CC_SECRET
  cache: { max_ttl: 1h }
${5:-}
routes:
  - { name: hello, path: /, upstream: hello, $2 }
YAML
}

# The authorization server on $DB (binary $AUTH) with one user, a password-grant client and an
# introspection client: sets AUTH_PORT, CC_ID and CC_SECRET (the introspection client's), PW_CLIENT
# (the password-grant client's `id:secret`) and TOKEN (the user's, scope `read`).
start_authserver() {
  local pw cc
  # A key-encryption secret for every command on $DB (the revocation stream signs its events;
  # without one it is off): a command without it would keep a secret file of its own beside the
  # database, which cannot read keys the server made.
  export AUTHSERVER_SECRETS_SYSTEM=${AUTHSERVER_SECRETS_SYSTEM:-bench-secret-$(head -c 24 /dev/urandom | base64 | tr -d '/+=')}
  $AUTH migrate --database-url "$DB" >/dev/null
  echo bench-password | $AUTH user create --username bench --database-url "$DB" >/dev/null
  pw=$($AUTH app create --name bench-client --scopes '*' --database-url "$DB" --json)
  cc=$($AUTH app create --name proxy --scopes '*' --grant-type client-credentials --introspect --ssf --database-url "$DB" --json)
  CC_ID=$(field "$cc" client_id); CC_SECRET=$(field "$cc" client_secret)
  AUTH_PORT=$(free_port)
  AUTHSERVER_LISTEN=127.0.0.1:$AUTH_PORT RUST_LOG=warn $AUTH serve --database-url "$DB" & PIDS+=($!)
  wait_http "http://127.0.0.1:$AUTH_PORT/healthz"
  PW_CLIENT="$(field "$pw" client_id):$(field "$pw" client_secret)"
  TOKEN=$(curl -s -u "$PW_CLIENT" -d grant_type=password \
    -d username=bench -d password=bench-password -d scope=read "http://127.0.0.1:$AUTH_PORT/o/token/" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
}

# The bench user's token for the API $1 (RFC 8707 `resource`, registered here with scope `read`):
# its `aud` is $1. Needs start_authserver first.
audience_token() {
  $AUTH resource create --identifier "$1" --name bench-api --scopes read --database-url "$DB" >/dev/null
  curl -s -u "$PW_CLIENT" -d grant_type=password -d username=bench -d password=bench-password \
    -d scope=read --data-urlencode "resource=$1" "http://127.0.0.1:$AUTH_PORT/o/token/" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])'
}
# The bench user's DPoP-bound token (scope `read`), bound to a new key of algorithm $1 (ES256 or
# EdDSA) kept in $2 (PEM) for bench/dpop_proofs.py. Needs start_authserver first.
dpop_token() {
  python3 bench/dpop_proofs.py token --auth "http://127.0.0.1:$AUTH_PORT" --client "$PW_CLIENT" \
    --username bench --password bench-password --scope read --alg "$1" --key-out "$2"
}

# A self-signed ECDSA P-256 certificate for localhost and 127.0.0.1: $1 certificate, $2 key.
tls_certificate() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$2" -out "$1" 2>/dev/null
}

# bench/nginx/nginx.conf filled in as $WORK/nginx.conf. Needs WORKERS, NGINX_PORT (pass-through),
# NJS_PORT, NJS_TLS_PORT, HELLO_PORT, AUTH_PORT, CC_ID, CC_SECRET, CERT, KEY.
nginx_conf() {
  local basic
  basic=$(printf '%s:%s' "$CC_ID" "$CC_SECRET" | base64 -w0)
  sed -e "s|@WORK@|$WORK|g" -e "s|@WORKERS@|$WORKERS|g" -e "s|@USER@|$(id -un)|g" \
      -e "s|@PASS_PORT@|$NGINX_PORT|g" -e "s|@NJS_PORT@|$NJS_PORT|g" -e "s|@HELLO_PORT@|$HELLO_PORT|g" \
      -e "s|@NJS_TLS_PORT@|$NJS_TLS_PORT|g" -e "s|@CERT@|$CERT|g" -e "s|@KEY@|$KEY|g" \
      -e "s|@AUTH_PORT@|$AUTH_PORT|g" -e "s|@CLIENT_BASIC@|$basic|g" -e "s|@JS@|$PWD/bench/nginx/oauth2.js|g" \
      bench/nginx/nginx.conf > "$WORK/nginx.conf"
}

# Callgrind runs (bench/instructions.sh, bench/authserver_instructions.sh): starts "$@" under
# callgrind (output $WORK/cg.$CASE, dumps numbered .1, .2); sets BOX_PID. mimalloc's settings as
# our binaries set them (resource-server/src/allocator.rs): unset, they re-execute themselves with
# them, and the new program would run outside valgrind (the empty profile of an earlier session).
under_callgrind() {
  MIMALLOC_PURGE_DELAY=250 MIMALLOC_ALLOW_THP=0 valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$CASE" "$@" 2>"$WORK/valgrind-$CASE.log" &
  BOX_PID=$!; PIDS+=($BOX_PID)
}
# The instructions counted in callgrind dump $1.
instructions() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }
# Measures the box under callgrind ($BOX_PID) with the script's own `load N`: a warm-up, counters
# zeroed, $SMALL requests, a dump, $LARGE requests, a dump; appends "$CASE small large" to ROWS,
# keeps the dumps in $KEEP when set, and stops the box.
measure_case() {
  load 100   # warm-up: caches, pools, lazily built state
  callgrind_control -z "$BOX_PID" >/dev/null 2>&1
  load "$SMALL"; callgrind_control -d "$BOX_PID" >/dev/null 2>&1
  load "$LARGE"; callgrind_control -d "$BOX_PID" >/dev/null 2>&1
  small=$(instructions "$WORK/cg.$CASE.1"); large=$(instructions "$WORK/cg.$CASE.2")
  ROWS+="$CASE $small $large"$'\n'
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$WORK/cg.$CASE".[12] "$KEEP/"; fi
  kill "$BOX_PID"; wait "$BOX_PID" 2>/dev/null || true
}
