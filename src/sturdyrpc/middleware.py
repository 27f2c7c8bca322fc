"""Built-in middleware for :meth:`Dispatcher.middleware` and :meth:`MCPServer.middleware`.

- :class:`Timing`: logs each call's method, id, outcome and duration (to a logger: stderr,
  never stdout), and keeps per-method counts and total time;
- :class:`RateLimit`: a token bucket per principal (or any key): beyond it, a -32000 error
  whose ``data.retryAfter`` says how many seconds until a call would pass;
- :class:`ResponseSizeLimit`: a result whose JSON exceeds ``max_bytes`` is replaced by a -32000
  error naming the limit and the size.

Each is an ``async (ctx, call_next)`` callable; add it with ``server.middleware(RateLimit(...))``.
Nothing here does I/O: time comes from ``time.monotonic`` / ``time.perf_counter``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection
from typing import Any

import msgspec

from . import codec
from .dispatch import CallNext, Context
from .errors import ServerError

__all__ = ["Timing", "RateLimit", "RateLimited", "ResponseSizeLimit", "ResponseTooLarge"]


class Timing:
    """Log every request and notification with its duration; keep ``stats[method] = [calls, errors, seconds]``.

    ``logger`` defaults to ``logging.getLogger("sturdyrpc.timing")`` at ``level`` (INFO). Only an
    exception's type is logged, never its text (it may hold what the client must not see; the
    handler's own incident log has the traceback).
    """

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self.log = logger or logging.getLogger("sturdyrpc.timing")
        self.level = level
        self.stats: dict[str, list[float]] = {}

    async def __call__(self, ctx: Context, call_next: CallNext) -> Any:
        start = time.perf_counter()
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            self._note(ctx, start, type(exc).__name__)
            raise
        self._note(ctx, start, None)
        return result

    def _note(self, ctx: Context, start: float, error: str | None) -> None:
        elapsed = time.perf_counter() - start
        row = self.stats.get(ctx.method)
        if row is None:
            row = self.stats[ctx.method] = [0, 0, 0.0]
        row[0] += 1
        row[1] += error is not None
        row[2] += elapsed
        if self.log.isEnabledFor(self.level):
            what = "notification" if ctx.is_notification else f"id={ctx.id!r}"
            self.log.log(self.level, "%s %s %s in %.3f ms", ctx.method, what, error or "ok", elapsed * 1000)


class RateLimited(ServerError):
    """Refused by :class:`RateLimit`; ``data.retryAfter``: seconds until a call would pass."""

    default_message = "Rate limit exceeded"


def _principal(ctx: Context) -> Any:
    return ctx.principal


class RateLimit:
    """A token bucket per key (default: ``ctx.principal``; None, e.g. on stdio, is one shared key).

    ``rate`` calls per second on average, bursts of up to ``burst`` (default: ``max(1, rate)``).
    A call beyond it is refused before its handler runs with :class:`RateLimited` (``code``,
    -32000 by default: the JSON-RPC range for implementation-defined server errors) and
    ``data = {"retryAfter": seconds, "rate": rate, "burst": burst}``. Methods in ``exempt``
    (the MCP lifecycle by default) always pass. At most ``max_keys`` buckets are kept (the
    least recently used goes first), so many principals cannot grow it without bound.
    """

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        key: Callable[[Context], Any] = _principal,
        code: int = -32000,
        exempt: Collection[str] = ("initialize", "notifications/initialized", "server/discover"),
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not rate > 0 or not math.isfinite(rate):
            raise ValueError("rate must be a positive number of calls per second")
        self.rate = float(rate)
        self.burst = float(burst) if burst is not None else max(1.0, self.rate)
        if not self.burst >= 1:
            raise ValueError("burst must be at least 1")
        self.key = key
        self.code = code
        self.exempt = frozenset(exempt)
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: dict[Any, tuple[float, float]] = {}  # key -> (tokens, when)

    def take(self, key: Any) -> float:
        """Take one token for ``key``: 0.0 when there was one, else the seconds until there is."""
        now = self.clock()
        buckets = self._buckets
        tokens, when = buckets.pop(key, (self.burst, now))  # popped and put back: LRU order
        tokens = min(self.burst, tokens + (now - when) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        buckets[key] = (tokens, now)
        if len(buckets) > self.max_keys:
            del buckets[next(iter(buckets))]
        return wait

    async def __call__(self, ctx: Context, call_next: CallNext) -> Any:
        if ctx.method not in self.exempt:
            wait = self.take(self.key(ctx))
            if wait:
                raise RateLimited(None, {"retryAfter": round(wait, 3), "rate": self.rate, "burst": self.burst}, code=self.code)
        return await call_next(ctx)


class ResponseTooLarge(ServerError):
    """Refused by :class:`ResponseSizeLimit`; ``data`` names the limit and the size."""

    default_message = "Response too large"


class ResponseSizeLimit:
    """Refuse results whose JSON is longer than ``max_bytes`` (the result alone, without the
    envelope): the caller gets :class:`ResponseTooLarge` (``code``, -32000 by default) with
    ``data = {"limit": "max_response_bytes", "max": max_bytes, "size": size}``.

    On MCP this is a JSON-RPC error for every method, ``tools/call`` included (a tool result
    cut short would read as complete to the model). Put it first in the chain to cap what every
    other middleware returns too.
    """

    def __init__(self, max_bytes: int, *, code: int = -32000) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.code = code

    async def __call__(self, ctx: Context, call_next: CallNext) -> Any:
        result = await call_next(ctx)
        if ctx.is_notification:
            return result
        if isinstance(result, msgspec.Raw):
            size = len(result)
        else:
            try:
                size = len(codec.encode(result))
            except Exception:
                return result  # not JSON at all: the dispatcher answers it as the handler's failure
        if size > self.max_bytes:
            raise ResponseTooLarge(None, {"limit": "max_response_bytes", "max": self.max_bytes, "size": size}, code=self.code)
        return result
