"""The two-way Peer: round trips with 64 calls in flight, and the peer's own cost per call.

- in-memory: two peers in one process over ``memory_pair()``; both ends' work is counted.
- pipe: a client peer driving ``sturdyrpc demo`` in a subprocess over its stdin/stdout.
- overhead: the serving side of a peer (read a frame, dispatch, queue and write the reply)
  against the dispatcher alone on the same frames (``receive`` + ``run_inline`` with the same
  profile). Target (issue 3): the peer's own overhead per call (peer minus dispatcher) stays
  within 2x the dispatcher's time. Figures are the best of several interleaved repeats (the
  machine is shared; the minimum is the least disturbed run).

Run alone: ``.venv/bin/python bench/bench_peer.py``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

IN_FLIGHT = 64
TARGET_RATIO = 2.0
REQUEST = b'{"jsonrpc":"2.0","method":"echo","params":{"value":"hello"},"id":%d}'


def _dispatcher() -> Any:
    from sturdyrpc import Dispatcher

    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def echo(value: Any) -> Any:
        return value

    return rpc


async def _round_trips(peer: Any, n: int, method: str, params: Any) -> dict[str, float]:
    latencies: list[float] = []
    clock = time.perf_counter
    per = n // IN_FLIGHT

    async def worker() -> None:
        req = peer.request
        for _ in range(per):
            t = clock()
            await req(method, params)
            latencies.append(clock() - t)

    start = clock()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    elapsed = clock() - start
    latencies.sort()
    return {
        "calls_per_s": len(latencies) / elapsed,
        "p50_us": latencies[len(latencies) // 2] * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
    }


async def _memory(n: int) -> dict[str, float]:
    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.memory import memory_pair

    a, b = memory_pair()
    client = Peer(a, name="client")
    server = Peer(b, _dispatcher(), name="server")
    await client.start()
    await server.start()
    await _round_trips(client, 2_000, "echo", {"value": "hello"})  # warm-up
    res = await _round_trips(client, n, "echo", {"value": "hello"})
    await client.close()
    await server.wait_closed()
    return res


async def _pipe(n: int) -> dict[str, float]:
    from sturdyrpc.client import connect_stdio

    async with connect_stdio([sys.executable, "-m", "sturdyrpc", "demo"]) as conn:
        await _round_trips(conn.peer, 1_000, "echo", {"value": "hello"})
        return await _round_trips(conn.peer, n, "echo", {"value": "hello"})


async def _peer_serving(frames: list[bytes]) -> float:
    """µs per call for a peer to take request frames and hand back their replies."""
    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.memory import memory_pair

    a, b = memory_pair()
    peer = Peer(b, _dispatcher())
    await peer.start()
    receive = a.receive
    start = time.perf_counter()
    for f in frames:
        a._outbox.items.append(f)  # deliver all at once: a full pipe, as a busy client makes it
    a._outbox._wake_getter()
    for _ in frames:
        await receive()
    elapsed = time.perf_counter() - start
    await peer.close()
    return elapsed / len(frames) * 1e6


def _dispatcher_alone(frames: list[bytes]) -> float:
    from sturdyrpc.profile import JSONRPCProfile

    rpc = _dispatcher()
    profile = JSONRPCProfile()
    receive = rpc.receive
    run = rpc.run_inline
    start = time.perf_counter()
    for f in frames:
        run(receive(f, None, profile))
    return (time.perf_counter() - start) / len(frames) * 1e6


def main(n: int = 20_000, rounds: int = 3, repeats: int = 7) -> dict[str, Any]:
    mem = [asyncio.run(_memory(n)) for _ in range(rounds)]
    pipe = [asyncio.run(_pipe(n)) for _ in range(rounds)]
    frames = [REQUEST % i for i in range(n)]
    peer_us: list[float] = []
    disp_us: list[float] = []
    for _ in range(repeats):  # interleaved, so a noisy moment hits both alike
        disp_us.append(_dispatcher_alone(frames))
        peer_us.append(asyncio.run(_peer_serving(frames)))
    d = min(disp_us)
    p = min(peer_us)
    overhead = p - d
    ratio = overhead / d

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    metrics: list[dict[str, Any]] = []
    for label, rows in (("in-memory pair", mem), ("pipe to sturdyrpc demo", pipe)):
        metrics.append(
            {
                "name": f"peer round trip, {label}: throughput",
                "value": round(med(rows, "calls_per_s")),
                "unit": "calls/s",
                "extra": f"{IN_FLIGHT} in flight, range {min(r['calls_per_s'] for r in rows):.0f}..{max(r['calls_per_s'] for r in rows):.0f}",
                "target": None,
                "ok": None,
            }
        )
        metrics.append(
            {
                "name": f"peer round trip, {label}: latency p50 / p99",
                "value": round(med(rows, "p50_us")),
                "unit": "us",
                "extra": f"p99 {med(rows, 'p99_us'):.0f} us",
                "target": None,
                "ok": None,
            }
        )
    metrics.append(
        {
            "name": "peer serving a call (read, dispatch, reply)",
            "value": round(p, 2),
            "unit": "us/call",
            "extra": f"dispatcher alone {d:.2f} us/call",
            "target": None,
            "ok": None,
        }
    )
    metrics.append(
        {
            "name": "peer's own overhead per call",
            "value": round(overhead, 2),
            "unit": "us/call",
            "extra": f"{ratio:.2f}x the dispatcher's {d:.2f} us",
            "target": f"<= {TARGET_RATIO}x dispatcher",
            "ok": ratio <= TARGET_RATIO,
        }
    )
    return {
        "title": f"Two-way Peer: round trips ({IN_FLIGHT} in flight, {n} calls, median of {rounds}) and per-call overhead (best of {repeats})",
        "metrics": metrics,
        "rows": [{"case": "in-memory", **r} for r in mem] + [{"case": "pipe", **r} for r in pipe],
    }


if __name__ == "__main__":
    res = main()
    for m in res["metrics"]:
        status = "" if m["ok"] is None else ("PASS" if m["ok"] else "MISS")
        print(f"{m['name']:52s} {m['value']:>10} {m['unit']:8s} {m['extra']:44s} {m['target'] or ''} {status}")
    sys.exit(0)
