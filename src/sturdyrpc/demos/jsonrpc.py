"""The demo JSON-RPC server behind ``sturdyrpc demo`` (``sturdyrpc.demos.jsonrpc``).

The JSON-RPC 2.0 specification's example methods, plus a few to try limits,
concurrency and error handling with any client.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..dispatch import Dispatcher
from ..limits import DEFAULT_LIMITS, Limits

__all__ = ["make_demo"]


def make_demo(limits: Limits = DEFAULT_LIMITS) -> Dispatcher:
    """A fresh dispatcher with the demo methods (each instance has its own ``record`` list)."""
    rpc = Dispatcher(limits)
    recorded: list[Any] = []

    @rpc.method(blocking=False)
    def subtract(minuend: float, subtrahend: float) -> float:
        """[minuend, subtrahend] or {"minuend", "subtrahend"} -> the difference."""
        return minuend - subtrahend

    @rpc.method(name="sum", blocking=False)
    def sum_(*numbers: float) -> float:
        """Numbers -> their sum (an overflow to infinity is answered -32603, never Infinity)."""
        return sum(numbers)

    @rpc.method(blocking=False)
    def update(*args: Any) -> None:
        """Any positional params -> null."""
        return None

    @rpc.method(blocking=False)
    def notify_hello(n: Any) -> Any:
        """[n] -> n."""
        return n

    @rpc.method(blocking=False)
    def notify_sum(*numbers: float) -> float:
        """Numbers -> their sum."""
        return sum(numbers)

    @rpc.method(blocking=False)
    def get_data() -> list[Any]:
        """-> ["hello", 5]."""
        return ["hello", 5]

    @rpc.method(blocking=False)
    def echo(value: Any) -> Any:
        """{"value": X} or [X] -> X."""
        return value

    @rpc.method
    async def sleep(seconds: float, value: Any = None) -> Any:
        """{"seconds": s, "value": X} -> X after s seconds, without blocking other requests."""
        if seconds < 0 or seconds > 3600:
            from ..errors import InvalidParams

            raise InvalidParams("Invalid params: parameter 'seconds' must be between 0 and 3600", {"param": "seconds"})
        await asyncio.sleep(seconds)
        return value

    @rpc.method(blocking=False)
    def fail() -> None:
        """Always raises: shows that exception text never reaches the client."""
        raise RuntimeError("SECRET-TOKEN-42 /etc/shadow")

    @rpc.method(blocking=False)
    def record(value: Any) -> None:
        """[X] -> appends X to a list, null."""
        recorded.append(value)

    @rpc.method(name="recorded", blocking=False)
    def recorded_() -> list[Any]:
        """-> everything recorded so far, in order."""
        return list(recorded)

    return rpc
