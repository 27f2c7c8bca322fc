"""``sturdyrpc trace`` and ``guard`` in front of ``sturdyrpc demo``, against the demo alone, in one run.

The load generator of ``bench_stdio`` (64 ``echo`` requests in flight, real pipes) runs against:
the demo directly; ``trace -- demo`` (no log); ``trace --log FILE -- demo``; ``guard --deadline 30
--max-in-flight 1000 -- demo``. Alternately, ``ROUNDS`` times; medians reported.

Figures:
- throughput through the proxy / direct throughput, the median of per-round ratios (target >= 0.5);
- the proxy's CPU time per message (requests and replies both count: 2 messages per request),
  from ``/proc/PID/task/*/schedstat`` of the proxy process (its server is another process): what
  the proxy adds to each message (target < 20 µs);
- the latency a proxy adds to a round trip with one request in flight (median p50 of the rounds,
  minus the direct one): two more pipe hops plus the proxy's work before it writes.

Run alone: ``.venv/bin/python bench/bench_proxy.py [n_requests]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_stdio import demo_command, load

HERE = Path(__file__).resolve().parent
N_REQUESTS = 10_000
ROUNDS = 7
PING_N = 2_000
TARGET_RATIO = 0.5
TARGET_US = 20.0


def commands(log: Path) -> dict[str, list[str]]:
    demo = demo_command()
    tool = [demo[0], *demo[1:-1]]  # the same sturdyrpc executable
    return {
        "direct": demo,
        "bare relay": [sys.executable, str(HERE / "bare_relay.py"), *demo],
        "trace": [*tool, "trace", "--quiet", "--", *demo],
        "trace --log": [*tool, "trace", "--quiet", "--log", str(log), "--", *demo],
        "guard": [*tool, "guard", "--deadline", "30", "--max-in-flight", "1000", "--", *demo],
    }


def main(n: int = N_REQUESTS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(Path(tmp) / "session.ndjson")
        rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in cmds}
        for _ in range(ROUNDS):
            for name, cmd in cmds.items():
                rounds[name].append(load(cmd, n=n))
    metrics: list[dict[str, Any]] = []
    direct = rounds["direct"]
    metrics.append({
        "name": "direct: sturdyrpc demo",
        "value": statistics.median(r["req_per_s"] for r in direct), "unit": "req/s",
        "extra": f"p50 {statistics.median(r['p50_us'] for r in direct):.0f} µs", "target": None, "ok": None,
    })
    for name in ("bare relay", "trace", "trace --log", "guard"):
        rs = rounds[name]
        ratios = [p["req_per_s"] / d["req_per_s"] for p, d in zip(rs, direct, strict=True)]
        ratio = statistics.median(ratios)
        us = statistics.median(r["cpu_us_per_req"] / 2 for r in rs)
        metrics.append({
            "name": f"{name}: throughput / direct", "value": ratio, "unit": "x",
            "extra": f"{statistics.median(r['req_per_s'] for r in rs):,.0f} req/s; rounds " + ", ".join(f"{x:.2f}" for x in ratios),
            "target": None if name == "bare relay" else f">= {TARGET_RATIO}", "ok": None if name == "bare relay" else ratio >= TARGET_RATIO,
        })
        metrics.append({
            "name": f"{name}: proxy CPU per message", "value": us, "unit": "µs",
            "extra": "rounds " + ", ".join(f"{r['cpu_us_per_req'] / 2:.2f}" for r in rs),
            "target": None if name == "bare relay" else f"< {TARGET_US:g} µs", "ok": None if name == "bare relay" else us < TARGET_US,
        })
        if any(r["bad_replies"] for r in rs):
            raise RuntimeError(f"{name}: replies changed on the way")
    # Latency one request at a time (no queueing): what the proxy adds to a round trip.
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(Path(tmp) / "session.ndjson")
        pings: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(ROUNDS):
            for name, cmd in cmds.items():
                pings[name].append(load(cmd, n=PING_N, in_flight=1, warmup=200)["p50_us"])
    base = statistics.median(pings["direct"])
    for name in ("bare relay", "trace", "trace --log", "guard"):
        added = statistics.median(pings[name]) - base
        metrics.append({
            "name": f"{name}: round trip added, 1 in flight", "value": added, "unit": "µs",
            "extra": f"p50 {statistics.median(pings[name]):.0f} µs vs direct {base:.0f} µs", "target": None, "ok": None,
        })
    return {"title": f"trace/guard in front of sturdyrpc demo, {n:,} echo requests x {ROUNDS} rounds", "metrics": metrics,
            "rounds": rounds, "ping_p50_us": pings}


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and not sys.argv[1].isdigit()):
        sys.exit(f"usage: {sys.argv[0]} [N_REQUESTS]  (default {N_REQUESTS}; see the module docstring)")
    res = main(int(sys.argv[1]) if len(sys.argv) > 1 else N_REQUESTS)
    for m in res["metrics"]:
        print(f"{m['name']:40} {m['value']:>12.2f} {m['unit']:6} {m['extra']}  {m['target'] or ''}")
