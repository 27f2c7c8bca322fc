"""The Redis store's client, chosen by measurement: redis-py (with hiredis) against our own
pipelined client (``sturdyrpc.store.resp``), on asyncio and on uvloop, same run.

One redis-server (a free port, nothing on disk). Two workloads, the commands the store sends:

- ``sequential``: one ``GETEX key PX ms`` at a time (a session lookup), waiting for each reply;
- ``concurrent``: 64 tasks, each in a loop a ``GETEX`` and then a pipeline ``XADD ... MAXLEN``
  + ``PEXPIRE`` (a session request that writes its stream), as 64 sessions on one worker do.

Measured in this process: commands per second and CPU µs per command (user + system of this
process, ``time.process_time``: the worker's side; redis-server's own CPU is not counted).
Clients: ``ours`` (RespClient), ``redis-py+hiredis`` (``redis.asyncio`` with its hiredis
parser, a connection pool as the store would configure it) and ``redis-py`` (its pure-Python
RESP2 parser). Configurations alternate ``ROUNDS`` times; medians are reported.

The rule (issue 25): redis-py+hiredis replaces ours unless ours is clearly cheaper, more than
~1.3x on CPU per command.

Run alone: ``.venv/bin/python bench/bench_redis_client.py [seconds] [rounds]``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_workers import Redis  # noqa: E402  (a redis-server on a free port)

from sturdyrpc.store.resp import RespClient  # noqa: E402
from sturdyrpc.transports.loops import loop_factory  # noqa: E402

SECONDS = 2.0
ROUNDS = 3
TASKS = 64
CLIENTS = ("ours", "redis-py+hiredis", "redis-py")
LOOPS = ("asyncio", "uvloop")
WORKLOADS = ("sequential", "concurrent")
RULE = 1.3


class Ours:
    def __init__(self, url: str) -> None:
        self.c = RespClient(url)

    def getex(self, key: str) -> Awaitable[Any]:
        return self.c.call("GETEX", key, "PX", 60000)

    def write(self, stream: str, data: bytes) -> Awaitable[Any]:
        return self.c.pipeline([("XADD", stream, "MAXLEN", 1000, "*", "d", data), ("PEXPIRE", stream, 60000)])

    async def aclose(self) -> None:
        self.c.close()


class RedisPy:
    def __init__(self, url: str, hiredis: bool) -> None:
        import redis.asyncio as aioredis
        from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser

        parser = _AsyncHiredisParser if hiredis else _AsyncRESP2Parser
        # As the store configures its pool (sturdyrpc.store.redis): one connection per concurrent command.
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=256, timeout=2.0, parser_class=parser,
                                                        health_check_interval=0, retry_on_timeout=False, retry=None)
        self.c = aioredis.Redis(connection_pool=pool)

    def getex(self, key: str) -> Awaitable[Any]:
        return self.c.getex(key, px=60000)  # type: ignore[no-any-return]

    async def write(self, stream: str, data: bytes) -> Any:
        p = self.c.pipeline(transaction=False)
        p.xadd(stream, {"d": data}, maxlen=1000, approximate=False)
        p.pexpire(stream, 60000)
        return await p.execute()

    async def aclose(self) -> None:
        await self.c.aclose()


def make(client: str, url: str) -> Any:
    if client == "ours":
        return Ours(url)
    return RedisPy(url, hiredis=client == "redis-py+hiredis")


async def measure(client: str, workload: str, url: str, seconds: float) -> dict[str, float]:
    c = make(client, url)
    await c.getex("bench:k")  # connected before the clock starts
    commands = 0
    stop = False

    async def sequential() -> None:
        nonlocal commands
        while not stop:
            await c.getex("bench:k")
            commands += 1

    async def session(i: int) -> None:
        nonlocal commands
        stream = f"bench:ev:{i}"
        while not stop:
            await c.getex(f"bench:s:{i}")
            await c.write(stream, b"x" * 200)
            commands += 3

    work: list[Callable[[], Awaitable[None]]] = (
        [sequential] if workload == "sequential" else [lambda i=i: session(i) for i in range(TASKS)])  # type: ignore[misc]
    cpu0, t0 = time.process_time(), time.perf_counter()
    tasks = [asyncio.ensure_future(w()) for w in work]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*tasks)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    await c.aclose()
    return {"commands_per_s": commands / wall, "cpu_us_per_command": cpu / commands * 1e6}


def run(loop: str, client: str, workload: str, url: str, seconds: float) -> dict[str, float]:
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(measure(client, workload, url, seconds))


def main(seconds: float = SECONDS, rounds: int = ROUNDS) -> dict[str, Any]:
    srv = Redis()
    samples: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    try:
        for _ in range(rounds):
            for loop in LOOPS:
                for workload in WORKLOADS:
                    for client in CLIENTS:
                        samples.setdefault((loop, workload, client), []).append(run(loop, client, workload, srv.url, seconds))
                        srv.flush()
    finally:
        srv.stop()
    out: dict[str, Any] = {}
    print(f"{'loop':8} {'workload':11} {'client':17} {'commands/s':>11} {'CPU us/cmd':>11} {'vs ours':>8}")
    for (loop, workload, client), runs in samples.items():
        rate = statistics.median(r["commands_per_s"] for r in runs)
        cpu = statistics.median(r["cpu_us_per_command"] for r in runs)
        out[f"{loop}/{workload}/{client}"] = {"commands_per_s": round(rate), "cpu_us_per_command": round(cpu, 1)}
    for key, fig in out.items():
        loop, workload, client = key.split("/")
        ours = out[f"{loop}/{workload}/ours"]["cpu_us_per_command"]
        print(f"{loop:8} {workload:11} {client:17} {fig['commands_per_s']:>11,} {fig['cpu_us_per_command']:>11.1f} "
              f"{fig['cpu_us_per_command'] / ours:>7.2f}x")
    worst = min(out[f"{lp}/{w}/redis-py+hiredis"]["cpu_us_per_command"] / out[f"{lp}/{w}/ours"]["cpu_us_per_command"]
                for lp in LOOPS for w in WORKLOADS)
    verdict = "redis-py+hiredis" if worst <= RULE else "ours"
    print(f"redis-py+hiredis costs at least {worst:.2f}x our CPU per command (rule: switch if <= {RULE}x): keep {verdict}")
    out["verdict"] = verdict
    return out


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:]]
    result = main(*(args[:1] or [SECONDS]), *([int(args[1])] if len(args) > 1 else []))
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "redis_client.json").write_text(json.dumps(result, indent=2) + "\n")
