"""MCP ``tools/call echo`` over Streamable HTTP with several workers and the Redis store,
against the memory store on one worker, same run.

Servers: ``sturdyrpc demo --mcp --http 127.0.0.1:PORT [--workers N --store redis://...]``, a
redis-server started here (on a free port, nothing on disk). The load generator is bench_http's
(its own process, 64 keep-alive sessions: initialize + initialized, then ``tools/call echo`` in a
loop). Configurations, run alternately ``ROUNDS`` times, medians reported:

- memory store, 1 worker (the default: the baseline);
- Redis store, 1, 2 and 4 workers.

Measured: throughput, and server CPU per call (user + system of the server process and all its
workers; redis-server's own CPU shown apart). On a 2-core machine the load generator takes about
one core, so throughput with more workers mostly shows contention; CPU per call is the figure
that travels. Target (issue 13): the Redis store adds < 100 us server CPU per call on a session
request (Redis 1 worker minus memory 1 worker).

Run alone: ``.venv/bin/python bench/bench_workers.py [seconds]``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_http  # noqa: E402  (the load generator and /proc helpers)

SECONDS = 4.0
ROUNDS = 2
CLIENTS = 64
TARGET_US = 100.0
CONFIGS = [("memory", 1), ("redis", 1), ("redis", 2), ("redis", 4)]


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and every process below it (uvicorn's workers)."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            total += bench_http.cpu_seconds(p)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


class Redis:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found (scripts/install_redis.sh installs it)")
        self.port = bench_http.free_port()
        self.dir = tempfile.mkdtemp(prefix="sturdyrpc-bench-redis-")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                      "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bench_http.wait_port(self.port, self.proc)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def flush(self) -> None:
        import redis

        redis.Redis(port=self.port).flushall()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def run_one(store: str, workers: int, redis_srv: Redis, seconds: float) -> dict[str, Any]:
    port = bench_http.free_port()
    cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{port}"]
    if store == "redis":
        cmd += ["--store", redis_srv.url, "--workers", str(workers)]
        redis_srv.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            start_new_session=True)
    try:
        bench_http.wait_port(port, proc)  # type: ignore[arg-type]
        time.sleep(0.5 if workers > 1 else 0)  # every worker listening
        cpu0, rcpu0 = tree_cpu_seconds(proc.pid), bench_http.cpu_seconds(redis_srv.proc.pid)
        gen = subprocess.run([sys.executable, str(HERE / "bench_http.py"), "--loadgen", str(port), str(seconds), str(CLIENTS)],
                             capture_output=True, text=True, timeout=seconds + 120)
        if gen.returncode != 0:
            raise RuntimeError(f"load generator failed: {gen.stderr[-2000:]}")
        res: dict[str, Any] = json.loads(gen.stdout.strip().splitlines()[-1])
        calls = max(res["all_calls"] + 2 * res["sessions"], 1)
        res["cpu_us_per_call"] = (tree_cpu_seconds(proc.pid) - cpu0) / calls * 1e6
        res["redis_cpu_us_per_call"] = (bench_http.cpu_seconds(redis_srv.proc.pid) - rcpu0) / calls * 1e6
        return res
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def main(seconds: float = SECONDS, rounds: int = ROUNDS) -> dict[str, Any]:
    redis_srv = Redis()
    results: dict[str, list[dict[str, Any]]] = {f"{s}/{w}": [] for s, w in CONFIGS}
    try:
        for _ in range(rounds):
            for s, w in CONFIGS:
                results[f"{s}/{w}"].append(run_one(s, w, redis_srv, seconds))
    finally:
        redis_srv.stop()

    def med(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[name]))

    base = med("memory/1", "req_per_s")
    metrics: list[dict[str, Any]] = []
    for s, w in CONFIGS:
        name = f"{s}/{w}"
        extra = f"{med(name, 'req_per_s') / base:.2f}x memory/1; p50 {med(name, 'p50_ms'):.1f} ms"
        metrics.append({"name": f"{s} store, {w} worker{'s' if w > 1 else ''}: throughput", "value": round(med(name, "req_per_s")),
                        "unit": "calls/s", "extra": extra, "target": None, "ok": None})
        rc = f"; redis-server {med(name, 'redis_cpu_us_per_call'):.0f} us" if s == "redis" else ""
        metrics.append({"name": f"{s} store, {w} worker{'s' if w > 1 else ''}: server CPU per call",
                        "value": round(med(name, "cpu_us_per_call")), "unit": "us", "extra": f"all workers{rc}",
                        "target": None, "ok": None})
    added = med("redis/1", "cpu_us_per_call") - med("memory/1", "cpu_us_per_call")
    metrics.append({"name": "CPU the Redis store adds per session call (1 worker)", "value": round(added), "unit": "us",
                    "extra": "redis/1 - memory/1, server processes only", "target": f"< {TARGET_US:.0f}", "ok": added < TARGET_US})
    return {
        "title": f"Streamable HTTP workers: tools/call echo, {CLIENTS} sessions, {seconds:.0f} s per run, "
                 f"{rounds} rounds (median), {os.cpu_count()} cores",
        "metrics": metrics,
        "rounds": results,
    }


if __name__ == "__main__":
    out = main(float(sys.argv[1]) if len(sys.argv) > 1 else SECONDS)
    for m in out["metrics"]:
        print(f"{m['name']:<60} {m['value']:>10} {m['unit']:<8} {m['extra']}")
