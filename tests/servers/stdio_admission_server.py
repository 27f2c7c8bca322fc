"""A plain stdio server with ``Limits(max_in_flight=32)`` whose async ``sleep`` handler returns the
highest number of its calls that were ever running at once (for tests/unit/test_stdio_transport.py)."""

from __future__ import annotations

import asyncio

from sturdyrpc import Dispatcher, Limits, run_stdio

rpc = Dispatcher(limits=Limits(max_in_flight=32))
running = 0
peak = 0


@rpc.method
async def sleep(seconds: float) -> int:
    global running, peak
    running += 1
    peak = max(peak, running)
    try:
        await asyncio.sleep(seconds)
    finally:
        running -= 1
    return peak


if __name__ == "__main__":
    raise SystemExit(run_stdio(rpc))
