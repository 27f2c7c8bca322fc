"""Memory per idle MCP session over Streamable HTTP: in the server process and in Redis.

Servers: ``sturdyrpc run bench/session_memory_server.py:app --http 127.0.0.1:PORT`` (the MCP
demo, its session cap raised) with the memory store, and with ``--store redis://...`` (a redis-server started here: a free port, nothing on disk), one worker
each. ``SESSIONS`` sessions are opened (``initialize`` + ``notifications/initialized``, 8 client
threads) and left idle; then, per session:

- in process: the growth of the server's resident memory (``VmRSS``, /proc) from before the
  first session to after the last, divided by the number of sessions (the interpreter's
  allocator keeps freed memory, so this is an upper bound of what a session holds);
- in Redis: the growth of ``used_memory`` (``INFO memory``) divided by the number of sessions,
  and the keys a session leaves there.

Target (issue 25): an idle session costs at most a few KiB in either place.

Run alone: ``.venv/bin/python bench/bench_session_memory.py [sessions]`` (default 10,000).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_http  # noqa: E402  (open_sessions, ports, /proc helpers)
from bench_workers import Redis  # noqa: E402

SESSIONS = 10_000
THREADS = 8


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def redis_memory(port: int) -> tuple[int, int]:
    import redis

    r = redis.Redis(port=port)
    return int(r.info("memory")["used_memory"]), int(r.dbsize())


def measure(store: str, redis_srv: Redis, sessions: int) -> dict[str, Any]:
    port = bench_http.free_port()
    cmd = [sys.executable, "-m", "sturdyrpc", "run", f"{HERE / 'session_memory_server.py'}:app", "--http", f"127.0.0.1:{port}"]
    if store == "redis":
        cmd += ["--store", redis_srv.url]
        redis_srv.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        bench_http.wait_port(port, proc)  # type: ignore[arg-type]
        bench_http.open_sessions(port, 20)  # what the first sessions set up once (imports, caches) is not counted
        time.sleep(0.5)
        rss0 = rss_bytes(proc.pid)
        mem0, keys0 = redis_memory(redis_srv.port) if store == "redis" else (0, 0)
        t0 = time.monotonic()
        per = sessions // THREADS
        with ThreadPoolExecutor(THREADS) as pool:
            opened = sum(len(x) for x in pool.map(lambda _: bench_http.open_sessions(port, per), range(THREADS)))
        took = time.monotonic() - t0
        time.sleep(1.0)  # writes in the background have landed
        out: dict[str, Any] = {"store": store, "sessions": opened, "open_s": round(took, 1),
                               "rss_mib": round(rss_bytes(proc.pid) / 2**20, 1),
                               "process_bytes_per_session": round((rss_bytes(proc.pid) - rss0) / opened)}
        if store == "redis":
            mem1, keys1 = redis_memory(redis_srv.port)
            out["redis_bytes_per_session"] = round((mem1 - mem0) / opened)
            out["redis_keys_per_session"] = round((keys1 - keys0) / opened, 2)
        return out
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def main(sessions: int = SESSIONS) -> list[dict[str, Any]]:
    redis_srv = Redis()
    try:
        return [measure(store, redis_srv, sessions) for store in ("memory", "redis")]
    finally:
        redis_srv.stop()


if __name__ == "__main__":
    rows = main(int(sys.argv[1]) if len(sys.argv) > 1 else SESSIONS)
    for row in rows:
        print(json.dumps(row))
