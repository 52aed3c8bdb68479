# Shared by the bench scripts (sourced): a scratch directory with a SQLite database, the PIDs of
# the servers started (killed on exit), and small helpers.
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
