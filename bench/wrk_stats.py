"""Reads `wrk --latency` output on stdin; prints `req/s p50_ms p99_ms non2xx requests socket_errors`.

Shared by the bench/*.sh scripts. Percentiles are matched at the start of a line, so the
"+/- Stdev" column (e.g. `75.50%`) is never taken for them.
"""
import re
import sys

out = sys.stdin.read()


def ms(value):
    number, unit = re.match(r"([\d.]+)(\w+)", value).groups()
    return float(number) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[unit]


def percentile(p):
    return ms(re.search(rf"^\s+{p}%\s+(\S+)", out, re.M).group(1))


rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
total = int(re.search(r"(\d+) requests in", out).group(1))
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
errors = re.search(r"Socket errors: (.*)", out)
print(
    f"{rps:.0f} {percentile(50):.3f} {percentile(99):.3f} {non2xx.group(1) if non2xx else 0}"
    f" {total} {errors.group(1).replace(' ', '') if errors else '-'}"
)
