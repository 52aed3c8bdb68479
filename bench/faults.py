#!/usr/bin/env python3
"""Fault suite (issue 9): real faults against the release binaries, with figures.

Scenarios (all by default; name some to run only those):
  kill9     the authorization server is killed with SIGKILL under load, restarted 3 s later
  sigstop   the authorization server is frozen with SIGSTOP under load, resumed 3 s later
  sighup    100 SIGHUPs in 5 s while the rules file is rewritten, every other time broken
  sigterm   the proxy gets SIGTERM while keep-alive clients send continuously
  race      N-way refresh-token races (2, 5, 50), on SQLite and, with DATABASE_URL, PostgreSQL

Load: keep-alive client threads through the proxy (route `/` needs scope `read`, upstream the axum
hello-world), each request one of
  cached   a valid token seen before the fault          expected 200 (cache hit)
  fresh    a valid token never presented before         200 when the server answers, else 503
  revoked  a token revoked before the run               never 2xx
  garbage  a random string                              never 2xx
"Let through" counts 2xx answers that must not happen: a revoked or garbage token, or a fresh token
sent while the authorization server could not answer. Usage: bench/faults.sh [scenario ...]
"""

import base64
import http.client
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(ROOT, "target", "release"))
AUTH = os.path.join(BIN, "authserver")
PROXY = os.path.join(BIN, "proxy")
HELLO = os.path.join(BIN, "examples", "hello")
CLIENTS = int(os.environ.get("CLIENTS", "8"))
WORK = tempfile.mkdtemp(prefix="tokengate-faults-")
PROCS = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(args, env=None, log=None):
    out = open(os.path.join(WORK, log), "ab") if log else subprocess.DEVNULL
    p = subprocess.Popen(args, env={**os.environ, "RUST_LOG": "warn", **(env or {})},
                         stdout=out, stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


def http_call(port, method, path, body=None, headers=None, timeout=5):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def wait_http(port, path="/healthz", deadline=20):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            status, _, _ = http_call(port, "GET", path, timeout=1)
            if status == 200:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(0.01)
    sys.exit(f"faults: nothing answered on port {port}{path} within {deadline} s (logs in {WORK})")


def basic(client):
    raw = f"{client['client_id']}:{client['client_secret']}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode(),
            "Content-Type": "application/x-www-form-urlencoded"}


def cli(*args, stdin=None, db):
    out = subprocess.run([AUTH, *args, "--database-url", db], input=stdin, capture_output=True,
                         text=True, check=True)
    return out.stdout


class AuthServer:
    """A release authserver on a database; can be killed, frozen and restarted."""

    def __init__(self, db):
        self.db, self.port, self.proc = db, free_port(), None
        cli("migrate", db=db)
        cli("user", "create", "--username", "alice", stdin="alice-password\n", db=db)
        self.app = json.loads(cli("app", "create", "--name", "faults", "--json", db=db))
        self.cc = json.loads(cli("app", "create", "--name", "faults-cc", "--grant-type",
                                 "client-credentials", "--json", db=db))
        self.introspector = json.loads(cli("app", "create", "--name", "faults-proxy", "--grant-type",
                                           "client-credentials", "--introspect", "--ssf", "--json", db=db))

    def start(self):
        self.proc = spawn([AUTH, "serve", "--database-url", self.db],
                          env={"AUTHSERVER_LISTEN": f"127.0.0.1:{self.port}"}, log="authserver.log")
        return wait_http(self.port)

    def token(self, form, client):
        status, body, _ = http_call(self.port, "POST", "/o/token/",
                                    urllib.parse.urlencode(form), basic(client))
        return status, json.loads(body)

    def client_token(self, scope="read"):
        status, body = self.token({"grant_type": "client_credentials", "scope": scope}, self.cc)
        assert status == 200, body
        return body["access_token"]

    def introspect(self, token):
        _, body, _ = http_call(self.port, "POST", "/o/introspect/",
                               urllib.parse.urlencode({"token": token}), basic(self.introspector))
        return json.loads(body).get("active") is True

    def revoke(self, token):
        status, _, _ = http_call(self.port, "POST", "/o/revoke_token/",
                                 urllib.parse.urlencode({"token": token}), basic(self.cc))
        assert status == 200


ROUTES_OK = """routes:
  - {{ name: hello{n}, path: /, upstream: hello, scopes: [read] }}
"""
ROUTES_BROKEN = [
    "routes:\n",                                                      # truncated
    "routes: []\n",                                                   # empty
    "routes:\n  - { name: hello, path: /, upstream: hello, scopes: [read]\n",  # bad YAML
    "routes:\n  - { name: hello, path: /, upstream: nowhere, scopes: [read] }\n",  # bad upstream
    "routes:\n  - { name: hello, path: /, upstream: hello, scope: [read] }\n",  # unknown key
]


class Proxy:
    def __init__(self, auth, upstream_port, stale_grace="0s", request_timeout="1s"):
        self.port, self.admin, self.path = free_port(), free_port(), os.path.join(WORK, "proxy.yaml")
        self.head = f"""listen: 127.0.0.1:{self.port}
admin_listen: 127.0.0.1:{self.admin}
grace_period: 10s
shutdown_timeout: 2s
upstreams:
  hello: {{ address: "127.0.0.1:{upstream_port}" }}
introspection:
  url: http://127.0.0.1:{auth.port}/o/introspect/
  client_id: {auth.introspector['client_id']}
  client_secret: {auth.introspector['client_secret']}
  connect_timeout: 500ms
  request_timeout: {request_timeout}
  cache: {{ max_ttl: 60s, negative_ttl: 5s, stale_grace: {stale_grace} }}
"""
        self.write(ROUTES_OK.format(n=0))
        self.proc = spawn([PROXY, "--config", self.path], log="proxy.log")
        wait_http(self.admin)

    def write(self, routes):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(self.head + routes)
        os.replace(tmp, self.path)

    def metrics(self):
        _, body, _ = http_call(self.admin, "GET", "/metrics")
        values = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


class Load:
    """Keep-alive client threads; every answer recorded as (sent, done, kind, status)."""

    def __init__(self, port, tokens, kinds, clients=CLIENTS, leave_on_close=False):
        # leave_on_close: a client told `Connection: close` goes elsewhere (as one behind a
        # Service does when a draining pod says so) instead of reconnecting.
        self.port, self.tokens, self.kinds, self.leave_on_close = port, tokens, kinds, leave_on_close
        self.records, self.lock, self.running = [], threading.Lock(), True
        self.fresh = iter(tokens["fresh"])
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.running = False
        for t in self.threads:
            t.join()
        return self.records

    def pick(self):
        kind = random.choice(self.kinds)
        if kind == "fresh":
            with self.lock:
                token = next(self.fresh, None)
            return (kind, token) if token else ("cached", self.tokens["cached"])
        if kind == "garbage":
            return kind, secrets.token_urlsafe(30)
        return kind, self.tokens[kind]

    def client(self):
        conn = None
        while self.running:
            kind, token = self.pick()
            sent = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", "/", headers={"Authorization": f"Bearer {token}"})
                resp = conn.getresponse()
                resp.read()
                status, closing = resp.status, resp.getheader("connection", "").lower() == "close"
            except (OSError, http.client.HTTPException):
                status, closing = "error", True
                time.sleep(0.01)
            with self.lock:
                self.records.append((sent, time.monotonic(), kind, status))
            if closing:
                conn.close()
                conn = None
                if self.leave_on_close:
                    return


def summarize(name, records, down=None, recovered=None):
    """Prints one scenario's figures; returns the number of let-through answers and errors."""
    total = len(records)
    ok = sum(1 for r in records if r[3] == 200)
    refused = sum(1 for r in records if r[3] in (401, 403, 503))
    errors = sum(1 for r in records if r[3] not in (200, 401, 403, 503))
    let_through = sum(1 for r in records if r[2] in ("revoked", "garbage") and r[3] == 200)
    if down:
        let_through += sum(1 for r in records
                           if r[2] == "fresh" and r[3] == 200 and down[0] < r[0] and r[1] < down[1])
    line = (f"{name:<9} requests {total:>6}  200 {ok:>6}  refused {refused:>6}  "
            f"let through {let_through}  errors {errors}")
    if down:
        cached = [r for r in records if r[2] == "cached" and down[0] < r[0] < down[1]]
        served = sum(1 for r in cached if r[3] == 200)
        fresh = [r for r in records if r[2] == "fresh" and down[0] < r[0] < down[1]]
        slow = max((r[1] - r[0] for r in fresh), default=0)
        line += (f"\n          during the fault ({down[1] - down[0]:.1f} s): cached tokens served "
                 f"{served}/{len(cached)}, fresh tokens refused {sum(1 for r in fresh if r[3] == 503)}"
                 f"/{len(fresh)} (slowest answer {slow * 1000:.0f} ms)")
    if recovered is not None:
        line += (f"\n          recovery: a new token served {recovered * 1000:.0f} ms after the server was ready"
                 if recovered >= 0 else "\n          recovery: NO new token served within 5 s of the server's return")
    print(line, flush=True)
    return let_through + errors + (recovered is not None and recovered < 0)


def tokens_for(auth, fresh=3000):
    cached = auth.client_token()
    revoked = auth.client_token()
    auth.revoke(revoked)
    return {"cached": cached, "revoked": revoked,
            "fresh": [auth.client_token() for _ in range(fresh)],
            "recovery": [auth.client_token() for _ in range(fresh // 10)]}


def recovery_after(port, ready, tokens):
    """Seconds from `ready` until a token never seen before is served (-1: not within 5 s)."""
    for token in tokens:
        if time.monotonic() - ready > 5:
            break
        try:
            if http_call(port, "GET", "/", headers={"Authorization": f"Bearer {token}"})[0] == 200:
                return time.monotonic() - ready
        except OSError:
            pass
        time.sleep(0.002)
    return -1


def outage(kind, auth, proxy):
    tokens = tokens_for(auth)
    http_call(proxy.port, "GET", "/", headers={"Authorization": f"Bearer {tokens['cached']}"})
    load = Load(proxy.port, tokens, ["cached"] * 8 + ["fresh", "revoked", "garbage"]).start()
    time.sleep(2)
    down = time.monotonic()
    if kind == "kill9":
        auth.proc.kill()
        auth.proc.wait()
        time.sleep(3)
        up = time.monotonic()
        ready = auth.start()
    else:
        auth.proc.send_signal(signal.SIGSTOP)
        time.sleep(3)
        up = ready = time.monotonic()
        auth.proc.send_signal(signal.SIGCONT)
    recovered = recovery_after(proxy.port, ready, tokens["recovery"])
    time.sleep(max(0.0, 3 - (time.monotonic() - ready)))
    records = load.stop()
    m = proxy.metrics()
    print(f"          proxy metrics: skipped {m.get('tokengate_proxy_introspection_skipped_total', 0):.0f}, "
          f"introspection calls {m.get('tokengate_proxy_introspection_duration_seconds_count', 0):.0f}", flush=True)
    return summarize(kind, records, down=(down, up), recovered=recovered)


def sighup_storm(auth, proxy):
    tokens = tokens_for(auth, fresh=0)
    load = Load(proxy.port, tokens, ["cached", "garbage"]).start()
    time.sleep(1)
    start = time.monotonic()
    for i in range(100):
        proxy.write(ROUTES_OK.format(n=i) if i % 2 else random.choice(ROUTES_BROKEN))
        proxy.proc.send_signal(signal.SIGHUP)
        time.sleep(0.05)
    proxy.write(random.choice(ROUTES_BROKEN))   # the storm ends on a broken file
    proxy.proc.send_signal(signal.SIGHUP)
    storm = time.monotonic() - start
    time.sleep(2.5)                              # a poll or two of the unchanged broken file
    records = load.stop()
    status, body, _ = http_call(proxy.admin, "GET", "/readyz")
    m = proxy.metrics()
    reloads = 'tokengate_proxy_rule_reloads_total{result="%s"}'
    print(f"sighup    101 SIGHUPs in {storm:.1f} s; reloads ok {m.get(reloads % 'ok', 0):.0f}, "
          f"refused {m.get(reloads % 'error', 0):.0f}; "
          f"/readyz after: {status} {body.decode().strip()[:60]}", flush=True)
    # Every cached-token request must be 200 throughout: a broken file never replaces the rules.
    wrong = sum(1 for r in records if r[2] == "cached" and r[3] != 200)
    print(f"          cached-token requests not 200: {wrong}", flush=True)
    return summarize("sighup", records) + wrong + (status != 200)


def sigterm(auth, proxy, reconnect):
    """16 keep-alive clients across SIGTERM. Without `reconnect`, a client told `Connection:
    close` leaves (as one behind a Service goes to another pod); with it, clients reconnect and
    keep sending for 2 s (endpoint removal not yet seen everywhere), then stop."""
    name = "sigterm-r" if reconnect else "sigterm"
    tokens = tokens_for(auth, fresh=0)
    http_call(proxy.port, "GET", "/", headers={"Authorization": f"Bearer {tokens['cached']}"})
    load = Load(proxy.port, tokens, ["cached"], clients=16, leave_on_close=not reconnect).start()
    time.sleep(1)
    term = time.monotonic()
    proxy.proc.send_signal(signal.SIGTERM)
    readyz_503 = None
    while proxy.proc.poll() is None and time.monotonic() - term < 15:
        if readyz_503 is None:
            try:
                if http_call(proxy.admin, "GET", "/readyz", timeout=1)[0] == 503:
                    readyz_503 = time.monotonic() - term
            except OSError:
                pass
        if reconnect and load.running and time.monotonic() - term > 2:
            load.running = False
        time.sleep(0.005)
    exited = time.monotonic() - term
    records = load.stop()
    after = sum(1 for r in records if r[0] >= term)
    last = max((r[1] for r in records), default=term) - term
    print(f"{name:<9} 16 keep-alive clients{' reconnecting for 2 s' if reconnect else ''}; /readyz 503 after "
          f"{(readyz_503 or float('nan')) * 1000:.0f} ms; exit code {proxy.proc.returncode} "
          f"{exited:.2f} s after SIGTERM, {exited - last:.2f} s after the last answer (grace 10 s); "
          f"requests sent after SIGTERM {after}", flush=True)
    return summarize(name, records) + (proxy.proc.returncode != 0)


def race(db, label):
    auth = AuthServer(db)
    auth.start()
    bad = 0
    for ways, trials in ((2, 10), (5, 10), (50, 3)):
        live_access = live_refresh = winners = 0
        for _ in range(trials):
            status, body = auth.token({"grant_type": "password", "username": "alice",
                                       "password": "alice-password", "scope": "read"}, auth.app)
            assert status == 200, body
            refresh, answers, barrier = body["refresh_token"], [], threading.Barrier(ways)

            def one():
                conn = http.client.HTTPConnection("127.0.0.1", auth.port, timeout=20)
                conn.connect()
                form = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": refresh})
                barrier.wait()
                conn.request("POST", "/o/token/", form, basic(auth.app))
                resp = conn.getresponse()
                answers.append((resp.status, json.loads(resp.read())))
                conn.close()
            threads = [threading.Thread(target=one) for _ in range(ways)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            won = [a for s, a in answers if s == 200]
            winners += len(won)
            live_access += sum(auth.introspect(a["access_token"]) for a in won)
            for a in won:
                s, _ = auth.token({"grant_type": "refresh_token", "refresh_token": a["refresh_token"]}, auth.app)
                live_refresh += s == 200
        print(f"race      {label:<10} {ways:>2}-way x {trials:>2}: winners {winners}, live access tokens "
              f"after {live_access}, refresh tokens still rotating {live_refresh}", flush=True)
        bad += live_access + live_refresh
    auth.proc.terminate()
    auth.proc.wait()
    return bad


def postgres_db():
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        return None
    schema = f"faults_{int(time.time())}_{secrets.token_hex(3)}"
    subprocess.run(["psql", url, "-qc", f"CREATE SCHEMA {schema}"], check=True)
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-c%20search_path%3D{schema}", schema


def main():
    wanted = sys.argv[1:] or ["kill9", "sigstop", "sighup", "sigterm", "race"]
    print(f"faults: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, {CLIENTS} client threads; "
          f"logs in {WORK}", flush=True)
    hello_port = free_port()
    spawn([HELLO, f"127.0.0.1:{hello_port}"])
    wait_http(hello_port, "/")
    failures = 0
    for scenario in wanted:
        if scenario == "race":
            failures += race(f"sqlite://{WORK}/race.db", "SQLite")
            pg = postgres_db()
            if pg:
                failures += race(pg[0], "PostgreSQL")
                subprocess.run(["psql", os.environ["DATABASE_URL"], "-qc",
                                f"SET client_min_messages = warning; DROP SCHEMA {pg[1]} CASCADE"],
                               check=False)
            else:
                print("race      PostgreSQL skipped (DATABASE_URL unset)")
            continue
        auth = AuthServer(f"sqlite://{WORK}/{scenario}.db")
        auth.start()
        proxy = Proxy(auth, hello_port, stale_grace="0s")
        if scenario in ("kill9", "sigstop"):
            failures += outage(scenario, auth, proxy)
        elif scenario == "sighup":
            failures += sighup_storm(auth, proxy)
        elif scenario == "sigterm":
            failures += sigterm(auth, proxy, reconnect=False)
            failures += sigterm(auth, Proxy(auth, hello_port), reconnect=True)
        else:
            sys.exit(f"faults: unknown scenario {scenario!r}")
        for p in (proxy.proc, auth.proc):
            if p.poll() is None:
                p.terminate()
                p.wait()
    print(f"faults: {'PASS' if failures == 0 else f'FAIL ({failures} problems)'}; load {os.getloadavg()[0]:.2f}")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        code = main()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
    sys.exit(code)
