"""Noticing a blocked event loop: one warning when the loop could not run for too long.

Code that blocks the loop (``time.sleep`` or CPU work in an ``async def``, a blocking call made
without a thread) stalls every request and session of the process, and no timeout can cut it:
timeouts are callbacks on that same loop. :class:`LoopWatch` is a repeating ``call_later`` tick
that measures its own lateness; a tick late by the threshold or more means nothing could run
for that long, and one WARNING goes to the ``sturdyrpc`` logger saying for how long. No thread.

Rate-limited: a loop that stays blocked or busy (tick after tick late) is one stall, logged
once; a new stall is logged only after the loop ran on time again, and at most one warning per
``min_gap`` seconds (the stalls in between are counted in the next one).

The serving entry points start one: the stdio servers (``run_until_signalled``, behind
``run_stdio`` and ``run_mcp_stdio``) and uvicorn (``run_uvicorn``, ``uvicorn_config``), each
with ``stall_warning=`` (seconds, default :data:`DEFAULT_STALL_WARNING`; None: off).
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["LoopWatch", "DEFAULT_STALL_WARNING"]

#: Seconds the loop may be blocked before the serving entry points warn.
DEFAULT_STALL_WARNING = 0.5

log = logging.getLogger("sturdyrpc")


class LoopWatch:
    """Warn on the ``sturdyrpc`` logger when the running loop was blocked ``threshold`` seconds or more.

    ``start()`` on the loop to watch (from a coroutine or callback running on it), ``stop()`` when
    done. The tick runs every ``threshold / 4`` seconds (at most every second), so a stall is
    measured within a quarter of the threshold; each tick costs a few microseconds.
    """

    def __init__(self, threshold: float = DEFAULT_STALL_WARNING, *, min_gap: float = 10.0,
                 logger: logging.Logger | None = None) -> None:
        if not threshold > 0:
            raise ValueError("the stall threshold must be a positive number of seconds")
        self.threshold = threshold
        self.interval = min(threshold / 4, 1.0)
        self.min_gap = min_gap
        self.log = logger or log
        #: Stalls seen since start (each counted once, however long).
        self.stalls = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._stalled = False
        self._last_warning: float | None = None
        self._unreported = 0
        self._longest_unreported = 0.0

    def start(self) -> None:
        """Start watching the running loop (again after :meth:`stop`)."""
        self.stop()
        self._loop = asyncio.get_running_loop()
        self._schedule(self._loop.time())

    def stop(self) -> None:
        """Stop watching; nothing more is logged."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.interval
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        late = now - self._due
        if late < self.threshold:
            self._stalled = False
        elif not self._stalled:  # a stall that goes on over several ticks is one stall
            self._stalled = True
            self.stalls += 1
            self._stall(now, late)
        self._schedule(now)

    def _stall(self, now: float, late: float) -> None:
        if self._last_warning is not None and now - self._last_warning < self.min_gap:
            self._unreported += 1
            self._longest_unreported = max(self._longest_unreported, late)
            return
        more = ""
        if self._unreported:
            more = (f" ({self._unreported} more stall(s) since the last warning, the longest "
                    f"{self._longest_unreported:.2f} s)")
        self._last_warning = now
        self._unreported = 0
        self._longest_unreported = 0.0
        self.log.warning(
            "the event loop was blocked for at least %.2f s (threshold %.2f s)%s: code running on the loop without "
            "awaiting (time.sleep or CPU work in an async def, a blocking call) stalls every request of "
            "this process, and no timeout can cut it; run such code in a thread (a sync handler, "
            "asyncio.to_thread)", late, self.threshold, more)
