"""``sturdyrpc guard --url`` under load: through guard against straight to its upstream, same run.

The upstream is ``sturdyrpc demo --mcp --http`` (bench_http's ``mcp-sse`` server: 2025-11-25
sessions, ``tools/call echo``), guard is ``sturdyrpc guard --url ... --http ...`` in front of it,
and the load is bench_http's: ``wrk``, one thread, 64 keep-alive connections, a fresh id per
request, 64 sessions round robin (opened through guard for the guarded runs). Rounds interleave
the two, so they share the machine's state of the moment. The target (issue 23): through guard at
least 0.6x the direct throughput, the median of the per-round ratios. Guard's CPU per request is
printed beside it (on a machine where wrk, guard and the upstream share the CPUs it is the
steadier figure).

Run alone: ``.venv/bin/python bench/bench_guard_http.py [seconds] [rounds]``.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import bench_http as b

TARGET = 0.6
SECONDS, ROUNDS = 4.0, 3


class Guard:
    """guard in front of the upstream on ``up_port``, with bench_http's sessions and wrk script."""

    def __init__(self, up_port: int) -> None:
        self.name = "guard"
        self.port = b.free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "sturdyrpc", "guard", "--url", f"http://127.0.0.1:{up_port}/mcp",
                                      "--http", f"127.0.0.1:{self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        self.script = ""
        try:
            b.wait_port(self.port, self.proc)
            self.sessions = b.open_sessions(self.port, b.CLIENTS)
            fd, self.script = tempfile.mkstemp(prefix="bench_guard_http_", suffix=".lua")
            with os.fdopen(fd, "w") as f:
                f.write(b.lua_script("mcp-sse", self.sessions))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.script:
            os.unlink(self.script)


def main(seconds: float = SECONDS, rounds: int = ROUNDS) -> dict[str, Any]:
    wrk, why = b.find_wrk()
    if wrk is None:
        return {"title": "guard --url under wrk: not measured", "metrics": [], "skipped": why}
    direct = b.Server("mcp-sse")
    try:
        guard = Guard(direct.port)
        try:
            b.run_wrk(wrk, direct, 1)  # warm-up
            b.run_wrk(wrk, guard, 1)  # type: ignore[arg-type]  # (a Server in all it needs)
            runs: dict[str, list[dict[str, Any]]] = {"direct": [], "guard": []}
            for _ in range(rounds):
                runs["direct"].append(b.run_wrk(wrk, direct, seconds))
                runs["guard"].append(b.run_wrk(wrk, guard, seconds))  # type: ignore[arg-type]
        finally:
            guard.stop()
    finally:
        direct.stop()
    bad = sum(r["bad"] + r["socket_errors"] for rs in runs.values() for r in rs)
    ratios = [g["req_per_s"] / d["req_per_s"] for d, g in zip(runs["direct"], runs["guard"], strict=True)]
    ratio = statistics.median(ratios)
    rps = {k: statistics.median(r["req_per_s"] for r in rs) for k, rs in runs.items()}
    cpu = {k: statistics.median(r["server_cpu_us"] for r in rs) for k, rs in runs.items()}
    return {
        "title": f"guard --url in front of sturdyrpc demo --mcp --http (wrk -c{b.CLIENTS}, {rounds} x {seconds:g} s)",
        "metrics": [
            {"name": "direct", "value": rps["direct"], "unit": "req/s", "extra": f"{cpu['direct']:.0f} us CPU/req", "target": None, "ok": None},
            {"name": "through guard", "value": rps["guard"], "unit": "req/s", "extra": f"guard {cpu['guard']:.0f} us CPU/req",
             "target": None, "ok": None},
            {"name": "guard / direct", "value": ratio, "unit": "x", "extra": "per round: " + ", ".join(f"{r:.2f}" for r in ratios)
             + (f"; {bad} bad replies" if bad else ""), "target": f">= {TARGET}", "ok": ratio >= TARGET and not bad},
        ],
        "runs": runs,
    }


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:3]]
    out = main(*(args[:1] or [SECONDS]), *([int(args[1])] if len(args) > 1 else []))
    for m in out["metrics"]:
        print(f"{m['name']:>16}: {m['value']:.2f} {m['unit']}  {m['extra']}  {m['target'] or ''}")
