"""Helpers for the peer tests: run async tests, and a raw wire end to script the other side."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from sturdyrpc.transports.memory import MemoryTransport

_dec = msgspec.json.Decoder()


def aio(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test function in a fresh event loop (debug mode off: the tests time things)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


class Raw:
    """The other end of a connection, driven by hand: send raw bytes, read decoded messages."""

    def __init__(self, t: MemoryTransport) -> None:
        self.t = t

    async def send(self, obj: Any) -> None:
        await self.t.send(obj if isinstance(obj, bytes) else msgspec.json.encode(obj))

    async def recv(self, timeout: float = 2.0) -> Any:
        data = await asyncio.wait_for(self.t.receive(), timeout)
        if data is None:
            return None
        assert isinstance(data, bytes)
        return _dec.decode(data)

    async def nothing(self, wait: float = 0.05) -> None:
        """Assert that nothing arrives within ``wait`` seconds."""
        try:
            got = await asyncio.wait_for(self.t.receive(), wait)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected message: {got!r}")


async def settle(n: int = 5) -> None:
    """Let the loop run a few rounds."""
    for _ in range(n):
        await asyncio.sleep(0)
