"""Reads load generator output on stdin and prints one line of figures.

Shared by the bench/*.sh scripts.

- `wrk_stats.py` reads `wrk --latency` output; prints `req/s p50_ms p99_ms non2xx requests
  socket_errors`. Percentiles are matched at the start of a line, so the "+/- Stdev" column
  (e.g. `75.50%`) is never taken for them.
- `wrk_stats.py --h2load LOG` reads `h2load` output and the per-request file it wrote with
  `--log-file LOG` (start µs, status, µs to the end of the response); prints the same six fields,
  the percentiles computed from every request in the file, req/s from the file's first start to
  its last end, socket errors as h2load's `failed`/`errored` counts.
"""
import re
import sys

out = sys.stdin.read()


def ms(value):
    number, unit = re.match(r"([\d.]+)(\w+)", value).groups()
    return float(number) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[unit]


def wrk():
    def percentile(p):
        return ms(re.search(rf"^\s+{p}%\s+(\S+)", out, re.M).group(1))

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return (
        f"{rps:.0f} {percentile(50):.3f} {percentile(99):.3f} {non2xx.group(1) if non2xx else 0}"
        f" {total} {errors.group(1).replace(' ', '') if errors else '-'}"
    )


def h2load(log):
    rows = []
    with open(log) as f:
        for line in f:
            start, status, took = line.split("\t")[:3]
            rows.append((int(start), int(status), int(took)))
    if not rows:
        sys.exit(f"h2load wrote no requests:\n{out}")
    times = sorted(took for _, _, took in rows)

    def percentile(p):  # nearest rank, in ms
        return times[min(len(times) - 1, max(0, -(-len(times) * p // 100) - 1))] / 1000

    span = max(s + t for s, _, t in rows) - min(s for s, _, _ in rows)
    rps = len(rows) * 1e6 / max(span, 1)
    non2xx = sum(1 for _, status, _ in rows if not 200 <= status < 400)
    failed = re.search(r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    errors = f"failed:{failed.group(1)},errored:{failed.group(2)},timeout:{failed.group(3)}" if failed else "-"
    if failed and failed.groups() == ("0", "0", "0"):
        errors = "-"
    return f"{rps:.0f} {percentile(50):.3f} {percentile(99):.3f} {non2xx} {len(rows)} {errors}"


if len(sys.argv) == 3 and sys.argv[1] == "--h2load":
    print(h2load(sys.argv[2]))
else:
    print(wrk())
