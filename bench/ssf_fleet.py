#!/usr/bin/env python3
"""The revocation stream at N sidecars (issue 42 item 4): N lightweight RFC 8936 receivers
(`bench/ssf_fleet/`, one Rust process per 10,000) long-poll two authorization servers on one
PostgreSQL database, half on each; then R revocations (RFC 7009, on the first replica) a few
seconds apart. Prints, per revocation, how long until each receiver had its SET (p50, p99, max,
how many later than 1 s and 5 s, how many never), the replicas' CPU (idle, and per revocation)
and memory (before any stream, and with N: per stream), and what PostgreSQL did (transactions,
rows, its backends' CPU) per idle second and per revocation.

Usage: bench/ssf_fleet.py
  env: N=10000 receivers, R=5 revocations, GAP=6 (seconds between them), IDLE=60 (seconds of the
       idle measurement), POLL_TIMEOUT=25 (AUTHSERVER_SSF_POLL_TIMEOUT), STREAMS_PER_CLIENT=500
       (the server allows 1,000), SHARD=10000 (receivers per fleet process), SETUP=64 (streams
       made at once), PRIORITY (a nice value such as -10 for the replicas, the fleet and this
       database's backends, ahead of other load on a shared machine), STATUS=1 (ask the status after an empty poll, as the proxy does),
       DATABASE_URL (postgres://postgres@127.0.0.1:5432/test: the run makes a database of its
       own beside it, dropped at the end unless KEEP=1), AUTH (default $CARGO_TARGET_DIR or
       target /release/authserver), FLEET (default
       $CARGO_TARGET_DIR or target /release/ssf-fleet: cargo build --release --manifest-path
       bench/ssf_fleet/Cargo.toml)
"""

import json
import math
import os
import queue
import random
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = int(os.environ.get("N", "10000"))
R = int(os.environ.get("R", "5"))
GAP = float(os.environ.get("GAP", "6"))
IDLE = float(os.environ.get("IDLE", "60"))
SETTLE = float(os.environ.get("SETTLE", "12"))
POLL_TIMEOUT = int(os.environ.get("POLL_TIMEOUT", "25"))
PER_CLIENT = int(os.environ.get("STREAMS_PER_CLIENT", "500"))
SHARD = int(os.environ.get("SHARD", "10000"))
SETUP = int(os.environ.get("SETUP", "64"))
STATUS = os.environ.get("STATUS", "1") == "1"
PRIORITY = os.environ.get("PRIORITY")  # e.g. -10: the run's processes ahead of other load
PG = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
HZ = os.sysconf("SC_CLK_TCK")
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def first_executable(*paths):
    for path in paths:
        if path and os.access(path, os.X_OK):
            return path
    sys.exit(f"missing binary: none of {paths}")


AUTH = first_executable(os.environ.get("AUTH"), os.path.join(TARGET, "release", "authserver"))
FLEET = first_executable(os.environ.get("FLEET"), os.path.join(TARGET, "release", "ssf-fleet"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(url, sql):
    out = subprocess.run(["psql", "-AtX", url, "-c", sql], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def ticks(pid):
    """utime + stime of a process (all its threads), in clock ticks; 0 once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except OSError:
        return 0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Run:
    def __init__(self):
        self.work = tempfile.mkdtemp(prefix="ssf-fleet-")
        self.children = []
        self.dbname = f"ssf_fleet_{int(time.time())}_{random.randrange(1 << 20)}"
        parts = urllib.parse.urlsplit(PG)
        self.admin = PG
        self.db = urllib.parse.urlunsplit(parts._replace(path="/" + self.dbname))
        psql(self.admin, f"CREATE DATABASE {self.dbname}")
        self.secret = os.urandom(32).hex()

    def close(self):
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait()
        if not os.environ.get("KEEP"):
            subprocess.run(["psql", "-qX", self.admin, "-c",
                            f"DROP DATABASE IF EXISTS {self.dbname} WITH (FORCE)"],
                           check=False, stderr=subprocess.DEVNULL)
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            print(f"kept: database {self.dbname}, logs in {self.work}")

    def cli(self, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTHSERVER_")}
        env["AUTHSERVER_SECRETS_SYSTEM"] = self.secret
        out = subprocess.run([AUTH, *args, "--database-url", self.db], env=env,
                             capture_output=True, text=True, check=True)
        return out.stdout

    def spawn(self, name, argv, env, **kw):
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        base = {k: v for k, v in os.environ.items() if not k.startswith("AUTHSERVER_")}
        child = subprocess.Popen(argv, env={**base, "RUST_LOG": "warn", **env},
                                 stderr=log, **({"stdout": log} | kw))
        self.children.append(child)
        return child


class Fleet:
    """One ssf-fleet process: its stdout lines in a queue."""

    def __init__(self, run, index, config):
        path = os.path.join(run.work, f"fleet-{index}.json")
        with open(path, "w") as f:
            json.dump(config, f)
        self.proc = run.spawn(f"fleet-{index}", [FLEET, path], {}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def wait_for(self, prefix, timeout, on_other=None):
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                sys.exit("a fleet process ended")
            if line.startswith(prefix):
                return line
            if on_other:
                on_other(line)


class Probe:
    """CPU of the replicas, the fleet and PostgreSQL (this database's backends; its writers
    apart), and this database's transaction and row counters."""

    def __init__(self, run, replicas, fleets):
        self.run, self.replicas, self.fleets = run, replicas, fleets
        self.writers = [int(p) for p in subprocess.run(
            ["pgrep", "-f", "postgres: .*(walwriter|background writer|checkpointer)"],
            capture_output=True, text=True).stdout.split()]

    def backends(self):
        rows = psql(self.run.admin, "SELECT pid FROM pg_stat_activity WHERE datname = "
                                    f"'{self.run.dbname}'")
        pids = [int(p) for p in rows.split()]
        if PRIORITY:
            for pid in pids + [p.pid for p in self.replicas] + [f.proc.pid for f in self.fleets]:
                try:  # every thread: Linux sets a nice value per thread
                    for task in os.listdir(f"/proc/{pid}/task"):
                        os.setpriority(os.PRIO_PROCESS, int(task), int(PRIORITY))
                except OSError:
                    pass
        return {pid: ticks(pid) for pid in pids}

    def sample(self):
        db = psql(self.run.admin,
                  "SELECT xact_commit, xact_rollback, tup_returned, tup_fetched, tup_inserted, "
                  "tup_updated, tup_deleted, blks_hit, blks_read FROM pg_stat_database WHERE "
                  f"datname = '{self.run.dbname}'").split("|")
        return {
            "t": time.monotonic(),
            "replicas": [ticks(p.pid) for p in self.replicas],
            "fleet": sum(ticks(f.proc.pid) for f in self.fleets),
            "backends": self.backends(),
            "writers": sum(ticks(p) for p in self.writers),
            "db": list(map(int, db)),
        }

    @staticmethod
    def delta(a, b):
        backends = sum(t - a["backends"].get(pid, 0) for pid, t in b["backends"].items())
        return {
            "seconds": b["t"] - a["t"],
            "replicas": [(y - x) / HZ for x, y in zip(a["replicas"], b["replicas"])],
            "fleet": (b["fleet"] - a["fleet"]) / HZ,
            "backends": backends / HZ,
            "writers": (b["writers"] - a["writers"]) / HZ,
            "db": dict(zip(["commits", "rollbacks", "returned", "fetched", "inserted",
                            "updated", "deleted", "hit", "read"],
                           [y - x for x, y in zip(a["db"], b["db"])])),
        }


def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, math.ceil(p * len(sorted_values)) - 1)]


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if N / 2 + 200 > hard or min(N, SHARD) + 200 > hard:
        sys.exit(f"N={N} needs more open files than the hard limit {hard} per process allows "
                 f"(each replica holds N/2 connections, each fleet process SHARD)")
    run = Run()
    try:
        bench(run)
    finally:
        run.close()


def bench(run):
    run.cli("migrate")
    clients = []
    for i in range(math.ceil(N / PER_CLIENT)):
        app = json.loads(run.cli("app", "create", "--name", f"fleet-{i}", "--grant-type",
                                 "client-credentials", "--ssf", "--json"))
        clients.append([app["client_id"], app["client_secret"]])
    revoker = json.loads(run.cli("app", "create", "--name", "revoker", "--grant-type",
                                 "client-credentials", "--json"))
    ports = []
    replicas = []
    for i in range(2):
        port, metrics = free_port(), free_port()
        replicas.append(run.spawn(f"authserver-{i}", [AUTH, "serve", "--database-url", run.db], {
            "AUTHSERVER_LISTEN": f"127.0.0.1:{port}",
            "AUTHSERVER_METRICS_LISTEN": f"127.0.0.1:{metrics}",
            "AUTHSERVER_SECRETS_SYSTEM": run.secret,
            "AUTHSERVER_ISSUER": "http://127.0.0.1:8000",
            "AUTHSERVER_SSF_POLL_TIMEOUT": f"{POLL_TIMEOUT}s",
        }))
        ports.append(port)
    http = httpx.Client(timeout=60)
    for port in ports:
        for _ in range(600):
            try:
                http.get(f"http://127.0.0.1:{port}/healthz")
                break
            except httpx.TransportError:
                time.sleep(0.05)
    base = f"http://127.0.0.1:{ports[0]}"
    revoker_auth = (revoker["client_id"], revoker["client_secret"])
    victims = []
    for _ in range(R + 1):  # one more: warms the revocation path before streams exist
        r = http.post(f"{base}/o/token/", auth=revoker_auth,
                      data={"grant_type": "client_credentials"})
        r.raise_for_status()
        victims.append(r.json()["access_token"])
    http.post(f"{base}/o/revoke_token/", auth=revoker_auth,
              data={"token": victims.pop()}).raise_for_status()
    time.sleep(1)
    rss_before = [rss_kib(p.pid) for p in replicas]
    fds_before = [fds(p.pid) for p in replicas]

    started = time.monotonic()
    fleets = []
    for index, first in enumerate(range(0, N, SHARD)):
        fleets.append(Fleet(run, index, {
            "replicas": [f"127.0.0.1:{p}" for p in ports],
            "clients": clients, "first": first, "count": min(SHARD, N - first),
            "setup_concurrency": SETUP, "status_after_empty": STATUS,
        }))
    failures_seen = []
    for fleet in fleets:
        line = fleet.wait_for("ready", 3600, on_other=lambda l: l.startswith("setup") and print(
            f"  {l}", flush=True))
        if line is None:
            sys.exit("the fleet did not get ready within an hour")
    setup_seconds = time.monotonic() - started
    print(f"{N} receivers ({len(clients)} clients, {PER_CLIENT} streams each, half on each "
          f"replica) made their streams and polled in {setup_seconds:.1f} s", flush=True)
    # PostgreSQL's counters lag: a backend sends them at most every second, and once idle
    # for 10 s; so every phase below ends with a settle of SETTLE seconds.
    time.sleep(SETTLE)
    probe = Probe(run, replicas, fleets)

    def stats():
        totals = {}
        for fleet in fleets:
            fleet.send("stats")
            line = fleet.wait_for("stats", 30)
            for item in line.split()[1:]:
                key, value = item.split("=")
                totals[key] = totals.get(key, 0) + int(value)
        return totals

    def phase(a, ka, b, kb):
        d = Probe.delta(a, b)
        d["polls"] = kb["polls"] - ka["polls"]
        d["statuses"] = kb["statuses"] - ka["statuses"]
        return d

    # Idle: every receiver holds a poll; each answers empty at its timeout and polls again.
    s0, k0 = probe.sample(), stats()
    time.sleep(IDLE)
    s1, k1 = probe.sample(), stats()
    idle = phase(s0, k0, s1, k1)
    rss_with = [rss_kib(p.pid) for p in replicas]
    fds_with = [fds(p.pid) for p in replicas]

    # Revocations, GAP seconds apart, each on the first replica.
    revocations = []
    for token in victims:
        a, ka = probe.sample(), stats()
        sent = time.time_ns()
        r = http.post(f"{base}/o/revoke_token/", auth=revoker_auth, data={"token": token})
        answered = time.time_ns()
        r.raise_for_status()
        done = [fleet.wait_for("complete", max(GAP, 60)) for fleet in fleets]
        rest = sent / 1e9 + GAP - time.time()
        if rest > 0:
            time.sleep(rest)
        b, kb = probe.sample(), stats()
        events = {int(line.split()[1]) for line in done if line}
        revocations.append({"sent": sent, "answered": answered, "events": events,
                            "window": phase(a, ka, b, kb)})
    time.sleep(SETTLE)
    s2, k2 = probe.sample(), stats()
    burst = phase(s1, k1, s2, k2)
    k_end = stats()

    arrivals, errors, polls_per_second = {}, {}, {}
    for fleet in fleets:
        fleet.send("dump")
        while True:
            line = fleet.wait_for("", 120)
            if line is None or line == "end":
                break
            kind, *rest = line.split()
            if kind == "recv":
                event, receiver, at = map(int, rest)
                arrivals.setdefault(event, {})[receiver] = at
            elif kind == "err":
                errors[rest[0]] = errors.get(rest[0], 0) + int(rest[1])
            elif kind == "polls":
                second, count = map(int, rest)
                polls_per_second[second] = polls_per_second.get(second, 0) + count
        fleet.send("quit")

    report(run, replicas, clients, setup_seconds, idle, burst, rss_before, rss_with,
           fds_before, fds_with, revocations, arrivals, errors, polls_per_second, k_end)


def report(run, replicas, clients, setup_seconds, idle, burst, rss_before, rss_with,
           fds_before, fds_with, revocations, arrivals, errors, polls_per_second, totals):
    load = os.getloadavg()
    print(f"\nssf_fleet: N={N}, R={R}, GAP={GAP:g} s, IDLE={IDLE:g} s, poll timeout "
          f"{POLL_TIMEOUT} s, status after empty polls: {STATUS}; authserver {AUTH}; "
          f"load average now {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    # Events in the order they were appended: the k-th new event is the k-th revocation.
    events = sorted(arrivals)
    print("\nDelivery of one revocation to every receiver (from the moment the RFC 7009 request "
          "was sent; the revocation answered after `answer`):")
    print(f"{'#':>3} {'event':>6} {'answer':>8} {'got':>7} {'p50':>8} {'p99':>8} {'max':>8} "
          f"{'>1s':>6} {'>5s':>6} {'never':>6}   on A: p50/p99   on B: p50/p99")
    summary = []
    for k, rev in enumerate(revocations):
        event = min(rev["events"]) if rev["events"] else (events[k] if k < len(events) else None)
        got = arrivals.get(event, {})
        delays = sorted((at - rev["sent"]) / 1e6 for at in got.values())
        by_replica = [sorted((at - rev["sent"]) / 1e6 for r, at in got.items() if r % 2 == side)
                      for side in (0, 1)]
        late1 = sum(1 for d in delays if d > 1000)
        late5 = sum(1 for d in delays if d > 5000)
        never = N - len(delays)
        row = {"p50": pct(delays, 0.5), "p99": pct(delays, 0.99), "max": delays[-1] if delays
               else float("nan"), "late1": late1, "late5": late5, "never": never}
        summary.append(row)
        print(f"{k + 1:>3} {event!s:>6} {(rev['answered'] - rev['sent']) / 1e6:>6.1f}ms "
              f"{len(delays):>7} {row['p50']:>6.0f}ms {row['p99']:>6.0f}ms {row['max']:>6.0f}ms "
              f"{late1:>6} {late5:>6} {never:>6}   "
              f"{pct(by_replica[0], .5):>5.0f}/{pct(by_replica[0], .99):<5.0f}ms   "
              f"{pct(by_replica[1], .5):>5.0f}/{pct(by_replica[1], .99):<5.0f}ms")

    def cpu_line(name, d, per):
        print(f"  {name}: replicas {d['replicas'][0] / per * 1000:.0f} + "
              f"{d['replicas'][1] / per * 1000:.0f} CPU-ms, fleet {d['fleet'] / per * 1000:.0f}, "
              f"PostgreSQL backends {d['backends'] / per * 1000:.0f} (its writers "
              f"{d['writers'] / per * 1000:.0f})")

    print(f"\nIdle ({idle['seconds']:.0f} s, every receiver holding a poll): "
          f"{idle['polls'] / idle['seconds']:.0f} polls/s and {idle['statuses'] / idle['seconds']:.0f}"
          f" status reads/s (steady state N/timeout = {N / POLL_TIMEOUT:.0f}/s)")
    cpu_line("per second", idle, idle["seconds"])
    db = idle["db"]
    print(f"  PostgreSQL per second: {db['commits'] / idle['seconds']:.0f} commits, "
          f"{db['returned'] / idle['seconds']:.0f} rows returned, "
          f"{db['fetched'] / idle['seconds']:.0f} fetched, {db['inserted'] / idle['seconds']:.0f} "
          f"inserted, {db['updated'] / idle['seconds']:.0f} updated")
    busiest = max(polls_per_second.values()) if polls_per_second else 0
    print(f"  polls sent in the busiest second of the run: {busiest} (waves: the receivers a "
          f"revocation answered time out together {POLL_TIMEOUT} s later)")

    # Each revocation's window (GAP s) holds its delivery and re-polls, and the poll timeouts
    # that fell in it (one status read each): those are taken off at the idle cost per
    # timeout (idle CPU and counters over idle status reads).
    per_timeout = lambda value: value / max(1, idle["statuses"])
    costs = []
    for rev in revocations:
        w = rev["window"]
        t = w["statuses"]
        costs.append({
            "replicas": [w["replicas"][i] - t * per_timeout(idle["replicas"][i]) for i in range(2)],
            "fleet": w["fleet"] - t * per_timeout(idle["fleet"]),
            "backends": w["backends"] - t * per_timeout(idle["backends"]),
            "db": {k: w["db"][k] - t * per_timeout(idle["db"][k]) for k in w["db"]},
            "timeouts": t,
        })
    mean = lambda f: statistics.mean(f(c) for c in costs)
    print(f"\nPer revocation (its window of {GAP:g} s, less the poll timeouts in it at the idle "
          f"cost of one, {mean(lambda c: c['timeouts']):.0f} on average; mean of {R}):")
    print(f"  CPU-s: replica A (revoked there) {mean(lambda c: c['replicas'][0]):.2f}, replica B "
          f"{mean(lambda c: c['replicas'][1]):.2f}, PostgreSQL backends "
          f"{mean(lambda c: c['backends']):.2f}, fleet {mean(lambda c: c['fleet']):.2f}; per "
          f"receiver: replicas {mean(lambda c: sum(c['replicas'])) / N * 1e6:.0f} µs, PostgreSQL "
          f"{mean(lambda c: c['backends']) / N * 1e6:.0f} µs")
    print(f"  PostgreSQL: {mean(lambda c: c['db']['commits']):.0f} transactions, "
          f"{mean(lambda c: c['db']['returned']):.0f} rows returned, "
          f"{mean(lambda c: c['db']['fetched']):.0f} fetched, "
          f"{mean(lambda c: c['db']['inserted']):.0f} inserted, "
          f"{mean(lambda c: c['db']['updated']):.0f} updated")
    print("  each window, idle not subtracted (replica A + B / PostgreSQL CPU-s, timeouts): "
          + ", ".join(f"{r['window']['replicas'][0]:.2f}+{r['window']['replicas'][1]:.2f}/"
                      f"{r['window']['backends']:.2f} ({r['window']['statuses']})"
                      for r in revocations))
    print(f"  per idle timeout (a poll answered empty, the status read, the next poll): replicas "
          f"{per_timeout(sum(idle['replicas'])) * 1e6:.0f} µs, PostgreSQL "
          f"{per_timeout(idle['backends']) * 1e6:.0f} µs, "
          f"{per_timeout(idle['db']['commits']):.1f} transactions")

    print(f"\nMemory: replicas RSS {rss_before[0] / 1024:.1f} / {rss_before[1] / 1024:.1f} MiB "
          f"before any stream, {rss_with[0] / 1024:.1f} / {rss_with[1] / 1024:.1f} MiB with "
          f"{N // 2} waiting polls each: "
          f"{(rss_with[0] - rss_before[0]) * 1024 / (N / 2):.0f} / "
          f"{(rss_with[1] - rss_before[1]) * 1024 / (N / 2):.0f} bytes per stream; open files "
          f"{fds_before} → {fds_with}")
    print(f"Receivers: {totals.get('polls', 0)} polls, {totals.get('statuses', 0)} status reads, "
          f"{totals.get('reconnects', 0)} connections opened; failures: "
          f"{errors if errors else 'none'}")
    for i, p in enumerate(replicas):
        with open(os.path.join(run.work, f"authserver-{i}.log")) as f:
            lines = f.readlines()
        kinds = {}
        for line in lines:
            # The level and message, without the time and the numbers.
            text = re.sub(r"\d+(\.\d+)?", "#", line.split("Z", 1)[-1].strip())[:160]
            kinds[text] = kinds.get(text, 0) + 1
        print(f"authserver-{i} log: {len(lines)} lines")
        for text, count in sorted(kinds.items(), key=lambda kv: -kv[1])[:4]:
            print(f"  {count:>7} x {text}")
    worst = max(summary, key=lambda s: s["max"]) if summary else None
    if worst:
        print(f"\nsummary N={N}: p50 {statistics.median(s['p50'] for s in summary):.0f} ms, p99 "
              f"{max(s['p99'] for s in summary):.0f} ms (worst of {R}), max {worst['max']:.0f} ms; "
              f">1 s: {sum(s['late1'] for s in summary)}, >5 s: "
              f"{sum(s['late5'] for s in summary)}, never: {sum(s['never'] for s in summary)} "
              f"of {N * R}")


if __name__ == "__main__":
    main()
