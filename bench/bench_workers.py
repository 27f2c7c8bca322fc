"""MCP ``tools/call`` over Streamable HTTP with workers sharing sessions in Redis, against the
memory store on one worker, same run, under ``wrk`` (a native load generator: the client is
never the bottleneck).

Servers: ``sturdyrpc demo --mcp --http 127.0.0.1:PORT --loop LOOP [--workers N --store
redis://...]``, a redis-server started here (a free port, nothing on disk). ``wrk`` (1 thread,
64 keep-alive connections, bench_http's script) sends ``tools/call`` on 64 sessions opened
beforehand, round robin. Two tools: ``echo`` (answered on its own turn: the session lookup is
all Redis sees) and ``test_simple_text`` (an ``async def``: its reply is streamed, its events
stored). Configurations, run alternately ``ROUNDS`` times, medians reported:

- memory store, 1 worker (the baseline);
- Redis store, 1 and 2 workers.

Measured: throughput, server CPU per call (user + system of the launcher and all its workers;
redis-server's own CPU shown apart), and Redis's own count of commands and reads per call
(``INFO commandstats``, ``total_reads_processed``). Target (issue 25): 2 workers on Redis cost
at most 1.5x the CPU per call of one worker on the memory store.

Run alone: ``.venv/bin/python bench/bench_workers.py [seconds] [rounds] [loop]`` (loop: asyncio,
uvloop or auto, the default).
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
CLIENTS = bench_http.CLIENTS
TARGET_RATIO = 1.5
CONFIGS = [("memory", 1), ("redis", 1), ("redis", 2)]
#: The tools/call params of each workload (bench_http.lua_script's ``tool``).
TOOLS = {"echo": bench_http.ECHO, "streamed": '"name":"test_simple_text","arguments":{}'}


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


def redis_counts(port: int) -> dict[str, int]:
    import redis

    r = redis.Redis(port=port)
    out = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}
    out["reads"] = int(r.info("stats")["total_reads_processed"])
    return out


def run_one(store: str, workers: int, tool: str, redis_srv: Redis, seconds: float, loop: str, wrk: str) -> dict[str, Any]:
    port = bench_http.free_port()
    cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{port}", "--loop", loop]
    if store == "redis":
        cmd += ["--store", redis_srv.url, "--workers", str(workers)]
        redis_srv.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            start_new_session=True, preexec_fn=bench_http.pin(bench_http.SERVER_CPU))
    script = ""
    try:
        bench_http.wait_port(port, proc)  # type: ignore[arg-type]
        time.sleep(0.5 if workers > 1 else 0)  # every worker listening
        sessions = bench_http.open_sessions(port, CLIENTS)
        fd, script = tempfile.mkstemp(prefix="bench_workers_", suffix=".lua")
        with os.fdopen(fd, "w") as f:
            f.write(bench_http.lua_script("mcp-sse", sessions, TOOLS[tool]))
        url = f"http://127.0.0.1:{port}"
        warm = [wrk, "-t1", f"-c{CLIENTS}", "-d1s", "--timeout", "10s", "-s", script, url]
        subprocess.run(warm, capture_output=True, timeout=60, preexec_fn=bench_http.pin(bench_http.WRK_CPU))
        time.sleep(0.1)
        cpu0, rcpu0 = tree_cpu_seconds(proc.pid), bench_http.cpu_seconds(redis_srv.proc.pid)
        stats0 = redis_counts(redis_srv.port)
        r = subprocess.run([wrk, "-t1", f"-c{CLIENTS}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", script, url],
                           capture_output=True, text=True, timeout=seconds + 60, preexec_fn=bench_http.pin(bench_http.WRK_CPU))
        cpu1, rcpu1 = tree_cpu_seconds(proc.pid), bench_http.cpu_seconds(redis_srv.proc.pid)
        time.sleep(0.1)  # the writes after the last responses
        stats1 = redis_counts(redis_srv.port)
        line = next((x for x in r.stdout.splitlines() if x.startswith("BENCH ")), None)
        if r.returncode != 0 or line is None:
            raise RuntimeError(f"wrk failed: {r.stdout[-800:]} {r.stderr[-800:]}")
        res: dict[str, Any] = json.loads(line[6:])
        if res["bad"] or res["socket_errors"]:
            raise RuntimeError(f"{res['bad']} bad replies, {res['socket_errors']} socket errors: {res}")
        calls = max(res["requests"], 1)
        res["req_per_s"] = res["requests"] / (res["duration_us"] / 1e6)
        res["cpu_us_per_call"] = (cpu1 - cpu0) / calls * 1e6
        res["redis_cpu_us_per_call"] = (rcpu1 - rcpu0) / calls * 1e6
        delta = {k: v - stats0.get(k, 0) for k, v in stats1.items() if k not in ("info", "set")}
        res["reads_per_call"] = delta.pop("reads", 0) / calls
        res["commands_per_call"] = sum(delta.values()) / calls
        res["commands"] = {k: round(v / calls, 2) for k, v in delta.items() if v}
        return res
    finally:
        if script:
            os.unlink(script)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def main(seconds: float = SECONDS, rounds: int = ROUNDS, loop: str = "auto") -> dict[str, Any]:
    wrk, how = bench_http.find_wrk()
    if wrk is None:
        print(f"bench_workers: {how}", file=sys.stderr)
        return {"title": f"Streamable HTTP workers: NOT MEASURED ({how})", "metrics": []}
    redis_srv = Redis()
    names = [f"{t}/{s}/{w}" for t in TOOLS for s, w in CONFIGS]
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    try:
        for _ in range(rounds):
            for t in TOOLS:
                for s, w in CONFIGS:
                    results[f"{t}/{s}/{w}"].append(run_one(s, w, t, redis_srv, seconds, loop, wrk))
    finally:
        redis_srv.stop()

    def med(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[name]))

    metrics: list[dict[str, Any]] = []
    for t in TOOLS:
        base = f"{t}/memory/1"
        for s, w in CONFIGS:
            name = f"{t}/{s}/{w}"
            ratio = med(name, "cpu_us_per_call") / med(base, "cpu_us_per_call")
            extra = f"{med(name, 'req_per_s'):,.0f} calls/s; {ratio:.2f}x memory/1"
            if s == "redis":
                extra += (f"; redis-server {med(name, 'redis_cpu_us_per_call'):.0f} us; {med(name, 'commands_per_call'):.2f} "
                          f"commands, {med(name, 'reads_per_call'):.2f} reads per call {results[name][-1]['commands']}")
            target = w == 2
            metrics.append({"name": f"{t}: {s} store, {w} worker{'s' if w > 1 else ''}: server CPU per call",
                            "value": round(med(name, "cpu_us_per_call"), 1), "unit": "us", "extra": extra,
                            "target": f"<= {TARGET_RATIO}x memory/1" if target else None,
                            "ok": ratio <= TARGET_RATIO if target else None})
    return {
        "title": f"Streamable HTTP workers under wrk: {CLIENTS} sessions, {seconds:.0f} s per run, {rounds} rounds (median), "
                 f"loop {loop}, {os.cpu_count()} cores",
        "metrics": metrics,
        "rounds": results,
    }


if __name__ == "__main__":
    a = sys.argv[1:]
    out = main(float(a[0]) if a else SECONDS, int(a[1]) if len(a) > 1 else ROUNDS, a[2] if len(a) > 2 else "auto")
    for m in out["metrics"]:
        print(f"{m['name']:<60} {m['value']:>10} {m['unit']:<8} {m['extra']}")
