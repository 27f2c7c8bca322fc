"""What OpenTelemetry instrumentation costs on the stdio MCP benchmark (``tools/call echo``, 64 in flight).

The MCP demo server (``bench/otel_bench_server.py``, as ``sturdyrpc demo --mcp``) in four modes,
interleaved round by round in the same run, each compared with the baseline of its round:

- ``off``: no instrumentation call (the baseline);
- ``api``: ``instrument_server(server)`` with ``opentelemetry-api`` installed and no provider
  configured: it installs nothing (issue 12: <= 3% on throughput);
- ``sdk``: the SDK configured, spans to a BatchSpanProcessor with an exporter that drops them,
  histograms into a reader that is never read (reported, no target);
- ``sdk-sampled-off``: the same with the ``always_off`` sampler (reported, no target);
- ``middleware``: no telemetry, one pass-through middleware: the cost of the middleware seam
  itself (the chain around the inline tool, started by the early answer on the reader's turn), which
  the ``sdk`` modes pay too.

Throughput ratios are medians of per-round ratios; in each round ``off`` and ``api`` run twice,
alternating, and the better run of each is taken (they differ only at start-up, so the rest is
the machine's other load). CPU per call is the server process's.
Start-up (spawn -> ``initialize`` answered) is compared for ``off`` and ``api`` too.

Run alone: ``.venv/bin/python bench/bench_otel.py [n_calls]``.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_mcp  # noqa: E402

N_CALLS = 60_000
N_SDK_CALLS = 5_000
ROUNDS = 5
TARGET_API = 0.97  # throughput with the API and no provider, as a share of the baseline's
SERVER = [sys.executable, str(HERE / "otel_bench_server.py")]


def _sdk_available() -> bool:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _load(mode: str, n: int) -> dict[str, Any]:
    os.environ["OTEL_BENCH_MODE"] = mode
    try:
        return bench_mcp.load(SERVER, n)
    finally:
        del os.environ["OTEL_BENCH_MODE"]


def _startup(mode: str) -> dict[str, float]:
    os.environ["OTEL_BENCH_MODE"] = mode
    try:
        return bench_mcp.startup(SERVER, 7)
    finally:
        del os.environ["OTEL_BENCH_MODE"]


def main(n: int = N_CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return {"title": "OpenTelemetry cost: opentelemetry-api is not installed (pip install '.[otel]')", "metrics": []}
    modes = ["api", "middleware"] + (["sdk", "sdk-sampled-off"] if _sdk_available() else [])
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in ["off", *modes]}
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(rounds):
        # off and api run twice a round, in alternating order: they differ only at start-up, so
        # what separates them is the machine's other load, which pairing and best-of-round damp
        got: dict[str, list[dict[str, Any]]] = {"off": [], "api": []}
        for m in (["off", "api", "api", "off"] if i % 2 == 0 else ["api", "off", "off", "api"]):
            got[m].append(_load(m, n))
        base = max(got["off"], key=lambda r: r["req_per_s"])
        api = max(got["api"], key=lambda r: r["req_per_s"])
        runs["off"].append(base)
        runs["api"].append(api)
        ratios["api"].append(api["req_per_s"] / base["req_per_s"])
        for m in modes[1:]:
            r = _load(m, N_SDK_CALLS if m.startswith("sdk") else n // 2)
            runs[m].append(r)
            ratios[m].append(r["req_per_s"] / base["req_per_s"])

    def med(m: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[m])

    base_cpu = med("off", "cpu_us_per_call")
    metrics: list[dict[str, Any]] = [
        {"name": "baseline: no instrumentation", "value": round(med("off", "req_per_s")), "unit": "req/s",
         "extra": f"cpu/call {base_cpu:.1f} us; {n} calls, median of {rounds} rounds", "target": None, "ok": None},
    ]
    labels = {"api": "API installed, no provider (nothing installed)", "sdk": "SDK, no-op exporter",
              "middleware": "one pass-through middleware, no telemetry",
              "sdk-sampled-off": "SDK, always_off sampler"}
    for m in modes:
        r = statistics.median(ratios[m])
        cpu = med(m, "cpu_us_per_call")
        target = f">= {TARGET_API}" if m == "api" else None
        metrics.append({"name": f"throughput ratio {labels[m]} / baseline", "value": round(r, 3), "unit": "x",
                        "extra": f"per round {', '.join(f'{x:.2f}' for x in ratios[m])}; cpu/call {cpu:.1f} us "
                        f"({cpu / base_cpu:.2f}x)", "target": target, "ok": (r >= TARGET_API) if m == "api" else None})
    st_off, st_api = _startup("off"), _startup("api")
    metrics.append({"name": "start-up ratio API, no provider / baseline", "value": round(st_api["median"] / st_off["median"], 3),
                    "unit": "x", "extra": f"{st_api['median']:.0f} ms vs {st_off['median']:.0f} ms (median of 7)",
                    "target": None, "ok": None})
    bad = sum(r["bad_replies"] for rs in runs.values() for r in rs)
    metrics.append({"name": "bad replies", "value": bad, "unit": "", "extra": "", "target": "0", "ok": bad == 0})
    return {"title": "OpenTelemetry cost on MCP stdio tools/call echo (64 in flight), ratios to a baseline in the same run",
            "metrics": metrics, "rounds": runs, "startup": {"off": st_off, "api": st_api}}


if __name__ == "__main__":
    res = main(int(sys.argv[1]) if len(sys.argv) > 1 else N_CALLS)
    for m in res["metrics"]:
        status = "" if m["ok"] is None else ("PASS" if m["ok"] else "MISS")
        print(f"{m['name']:62s} {m['value']:>10} {m['unit']:6s} {m['extra']} {m['target'] or ''} {status}")
