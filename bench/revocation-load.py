#!/usr/bin/env python3
"""Revocation under load (issue 24): 3 proxies and 2 authorization servers on one PostgreSQL,
steady traffic through the proxies, and REVOCATIONS revocations (RFC 7009, of the access token or
of its refresh token) at random moments. Prints, per revocation, how long until every proxy
refused the token (goal: all within 1 s), the requests with a revoked token served after it was
refused everywhere (goal: 0), and the introspection calls per token and proxy (goal: 1).

Each proxy introspects at one authorization server and follows the revocation stream there, with
the other one as its replica (`revocation.replica_urls`). Caches: `max_ttl: 1h`, as shipped.

Usage: bench/revocation-load.py [seconds]    (default 600)
  env: DATABASE_URL (postgres://postgres@127.0.0.1:5432/test; the run makes and drops a schema
       of its own), AUTH, PROXY, HELLO (binaries; default target/release/... if built, else
       target/debug/...), REVOCATIONS=100, TOKENS=200 (revoked ones included), WORKERS=8
       (concurrent request loops), RATE=60 (their requests a second in all: steady traffic; at
       saturation every request queues and the latency measured is the queue's),
       REVOKED_SHARE=0.1 (share of traffic using revoked tokens)
"""

import asyncio
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DURATION = float(sys.argv[1]) if len(sys.argv) > 1 else 600.0
REVOCATIONS = int(os.environ.get("REVOCATIONS", "100"))
TOKENS = int(os.environ.get("TOKENS", "200"))
WORKERS = int(os.environ.get("WORKERS", "8"))
RATE = float(os.environ.get("RATE", "60"))  # requests a second in all (steady, not saturating)
REVOKED_SHARE = float(os.environ.get("REVOKED_SHARE", "0.1"))
BOUND = 1.0  # seconds: the goal for a revocation to be refused everywhere
PG = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
if not PG.startswith("postgres"):
    sys.exit("DATABASE_URL must name a PostgreSQL database")


def binary(env, name):
    if env in os.environ:
        return os.environ[env]
    for profile in ("release", "debug"):
        path = os.path.join(ROOT, "target", profile, name)
        if os.access(path, os.X_OK):
            return path
    sys.exit(f"missing {name}: cargo build -p authserver -p proxy --example hello, or set {env}")


AUTH = binary("AUTH", "authserver")
PROXY = binary("PROXY", "proxy")
HELLO = binary("HELLO", "examples/hello")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    def __init__(self):
        self.work = tempfile.mkdtemp(prefix="revload-")
        self.children = []
        self.schema = f"revload_{int(time.time())}_{random.randrange(1 << 30)}"
        sep = "&" if "?" in PG else "?"
        self.db = f"{PG}{sep}options=-c%20search_path%3D{self.schema}"
        subprocess.run(["psql", PG, "-qc", f"CREATE SCHEMA {self.schema}"], check=True)
        # The key-encryption secret the signing keys are kept under (the SETs are signed).
        self.secret = os.urandom(32).hex()

    def close(self):
        for child in self.children:
            child.kill()
            child.wait()
        subprocess.run(["psql", PG, "-qc", f"DROP SCHEMA {self.schema} CASCADE"],
                       check=False, stderr=subprocess.DEVNULL)
        if os.environ.get("KEEP"):
            print(f"logs kept in {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def cli(self, *args, stdin=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTHSERVER_")}
        env["AUTHSERVER_SECRETS_SYSTEM"] = self.secret
        out = subprocess.run([AUTH, *args, "--database-url", self.db], input=stdin, env=env,
                             capture_output=True, text=True, check=True)
        return out.stdout

    def spawn(self, name, argv, env):
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("AUTHSERVER_", "PROXY_"))}
        child = subprocess.Popen(argv, env={**base, "RUST_LOG": "warn", **env},
                                 stdout=log, stderr=log)
        self.children.append(child)
        return child


async def wait_http(client, url):
    for _ in range(600):
        try:
            await client.get(url)
            return
        except httpx.TransportError:
            await asyncio.sleep(0.05)
    sys.exit(f"no answer from {url}")


def prometheus(text, name):
    """Sum of the samples of metric `name` (all labels) in a Prometheus text page."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$", line)
        if m:
            total += float(m.group(2))
    return total


async def main():
    run = Run()
    try:
        await bench(run)
    finally:
        run.close()


async def bench(run):
    run.cli("migrate")
    run.cli("user", "create", "--username", "load", stdin="load-password-long\n")
    client = json.loads(run.cli("app", "create", "--name", "load-client", "--json"))
    proxy_app = json.loads(run.cli("app", "create", "--name", "proxies", "--grant-type",
                                   "client-credentials", "--introspect", "--ssf", "--json"))
    http = httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_connections=200))

    auths = []
    for i in range(2):
        port, metrics = free_port(), free_port()
        run.spawn(f"authserver-{i}", [AUTH, "serve", "--database-url", run.db],
                  {"AUTHSERVER_LISTEN": f"127.0.0.1:{port}",
                   "AUTHSERVER_METRICS_LISTEN": f"127.0.0.1:{metrics}",
                   "AUTHSERVER_SECRETS_SYSTEM": run.secret,
                   "AUTHSERVER_ISSUER": "http://127.0.0.1:8000"})
        auths.append((f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics"))
    for base, _ in auths:
        await wait_http(http, f"{base}/healthz")
    hello_port = free_port()
    run.spawn("hello", [HELLO, f"127.0.0.1:{hello_port}"], {})
    await wait_http(http, f"http://127.0.0.1:{hello_port}/")

    proxies = []
    for i in range(3):
        own, other = auths[i % 2][0], auths[(i + 1) % 2][0]
        port, admin = free_port(), free_port()
        path = os.path.join(run.work, f"proxy-{i}.yaml")
        with open(path, "w") as f:
            f.write(f"""listen: 127.0.0.1:{port}
admin_listen: 127.0.0.1:{admin}
grace_period: 0s
shutdown_timeout: 1s
upstreams:
  hello: {{ address: "127.0.0.1:{hello_port}" }}
introspection:
  url: {own}/o/introspect/
  client_id: {proxy_app["client_id"]}
  client_secret: {proxy_app["client_secret"]}
  cache: {{ max_ttl: 1h }}
revocation:
  configuration_url: {own}/.well-known/ssf-configuration
  replica_urls: [{other}/.well-known/ssf-configuration]
  healthy_max_ttl: 1h
routes:
  - {{ name: hello, path: /, upstream: hello, scopes: [read] }}
""")
        run.spawn(f"proxy-{i}", [PROXY, "--config", path], {})
        proxies.append((f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{admin}"))
    for _, admin in proxies:
        await wait_http(http, f"{admin}/healthz")
    # Every proxy follows its stream before the clock starts.
    for _, admin in proxies:
        for _ in range(600):
            if (await http.get(f"{admin}/readyz")).text == "ready\n":
                break
            await asyncio.sleep(0.05)
        else:
            sys.exit(f"{admin}: the revocation stream did not become healthy")

    print(f"binaries: {AUTH}, {PROXY}; {DURATION:.0f} s, {REVOCATIONS} revocations, "
          f"{TOKENS} tokens, {WORKERS} request loops at {RATE:.0f} req/s in all", flush=True)
    tokens = []
    for n in range(TOKENS):
        r = await http.post(f"{auths[n % 2][0]}/o/token/",
                            auth=(client["client_id"], client["client_secret"]),
                            data={"grant_type": "password", "username": "load",
                                  "password": "load-password-long", "scope": "read"})
        r.raise_for_status()
        body = r.json()
        tokens.append((body["access_token"], body.get("refresh_token")))
    # Warm every token at every proxy: from here on, each call is a cache hit until revoked.
    for access, _ in tokens:
        for front, _ in proxies:
            r = await http.get(front, headers={"authorization": f"Bearer {access}"})
            assert r.status_code == 200, r.text
    async def introspections(result):
        return sum([prometheus((await http.get(m)).text,
                               f'tokengate_authserver_introspections_total{{result="{result}"}}')
                    for _, m in auths])

    warm_active = await introspections("active")
    warm_inactive = await introspections("inactive")

    to_revoke = random.sample(range(TOKENS), REVOCATIONS)
    started = time.monotonic()
    moments = sorted(random.uniform(0.05, 0.9) * DURATION for _ in range(REVOCATIONS))
    revoked_at = {}        # token index -> monotonic time the revocation was answered
    refused_all_at = {}    # token index -> when every proxy refused it
    latency = []
    served_after = []      # (token index, proxy, seconds after refused everywhere)
    counts = {"requests": 0, "ok": 0, "refused": 0, "errors": 0}
    done = asyncio.Event()

    async def call(index, proxy):
        sent = time.monotonic()
        try:
            r = await http.get(proxies[proxy][0],
                               headers={"authorization": f"Bearer {tokens[index][0]}"})
        except httpx.HTTPError:
            counts["errors"] += 1
            return None
        counts["requests"] += 1
        counts["ok" if r.status_code == 200 else "refused"] += 1
        if r.status_code == 200 and index in refused_all_at and sent > refused_all_at[index]:
            served_after.append((index, proxy, sent - refused_all_at[index]))
        return r.status_code

    async def traffic():
        pause = WORKERS / RATE
        await asyncio.sleep(random.uniform(0, pause))
        while not done.is_set():
            next_at = time.monotonic() + pause
            gone = list(revoked_at)
            if gone and random.random() < REVOKED_SHARE:
                index = random.choice(gone)
            else:
                index = random.randrange(TOKENS)
            await call(index, random.randrange(len(proxies)))
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def revoke(index, at):
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        access, refresh = tokens[index]
        token, hint = ((refresh, "refresh_token") if refresh and index % 2
                       else (access, "access_token"))
        r = await http.post(f"{auths[index % 2][0]}/o/revoke_token/",
                            auth=(client["client_id"], client["client_secret"]),
                            data={"token": token, "token_type_hint": hint})
        r.raise_for_status()
        t0 = time.monotonic()
        revoked_at[index] = t0
        pending = set(range(len(proxies)))
        while pending:
            asked = list(pending)
            answers = await asyncio.gather(*(call(index, proxy) for proxy in asked))
            for proxy, status in zip(asked, answers):
                if status == 401:
                    pending.discard(proxy)
            if pending:
                await asyncio.sleep(0.005)
            if time.monotonic() - t0 > 120:
                break
        refused_all_at[index] = time.monotonic()
        latency.append(refused_all_at[index] - t0)

    loops = [asyncio.create_task(traffic()) for _ in range(WORKERS)]
    revokers = [asyncio.create_task(revoke(i, at)) for i, at in zip(to_revoke, moments)]
    await asyncio.sleep(DURATION)
    await asyncio.gather(*revokers)
    done.set()
    await asyncio.gather(*loops)
    elapsed = time.monotonic() - started

    run_active = await introspections("active") - warm_active
    run_inactive = await introspections("inactive") - warm_inactive
    proxy_metrics = [(await http.get(f"{admin}/metrics")).text for _, admin in proxies]
    misses = sum(prometheus(t, "tokengate_proxy_cache_misses_total") for t in proxy_metrics)
    created = [prometheus(t, "tokengate_proxy_revocation_streams_created_total")
               for t in proxy_metrics]
    healthy = [prometheus(t, "tokengate_proxy_revocation_stream_healthy") for t in proxy_metrics]
    latency.sort()
    within = sum(1 for x in latency if x <= BOUND)
    print(f"requests: {counts['requests']} in {elapsed:.0f} s "
          f"({counts['requests'] / elapsed:.0f}/s through 3 proxies), "
          f"{counts['ok']} served, {counts['refused']} refused, {counts['errors']} errors")
    print(f"revocations: {len(latency)}; refused at all 3 proxies after (measured from the "
          f"revocation's answer, the 3 probed at once every 5 ms): median "
          f"{statistics.median(latency) * 1000:.1f} ms, p90 "
          f"{latency[int(len(latency) * 0.9)] * 1000:.1f} ms, max {latency[-1] * 1000:.1f} ms; "
          f"within {BOUND:.0f} s: {within}/{len(latency)}")
    print(f"requests with a revoked token served after it was refused everywhere: "
          f"{len(served_after)}")
    for index, proxy, after in served_after[:10]:
        print(f"  token {index} at proxy {proxy}, {after * 1000:.1f} ms after")
    per = (warm_active + run_active) / (TOKENS * 3)
    print(f"introspection calls: {warm_active:.0f} while warming ({TOKENS} tokens x 3 proxies); "
          f"during the run {run_active:.0f} answered active and {run_inactive:.0f} inactive (the "
          f"revoked tokens, asked again once evicted); proxy cache misses in all: {misses:.0f}. "
          f"Active introspections per token and proxy over the run: {per:.3f} (goal 1)")
    print(f"streams created per proxy: {created} (1 each: never lost); healthy at the end: "
          f"{healthy}")


if __name__ == "__main__":
    asyncio.run(main())
