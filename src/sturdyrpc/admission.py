"""Admission: the one place where ``max_in_flight``-style limits are counted.

Every request that will run, alone or as a batch element, over any transport, takes one
slot before its handler starts and gives it back when the handler is done. Stream
transports hold back their reader while no slot is free (backpressure: nothing dropped,
nothing buffered without bound); HTTP, which has no connection to hold back, refuses with
503 when a server-wide :class:`Admission` is full.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["Admission"]


#: The waiters of an admission nobody has waited on yet: shared, always empty (nothing is added to it).
_NOBODY_WAITS: deque[asyncio.Future[None]] = deque(maxlen=0)


class Admission:
    """A counter of running requests with a fixed number of slots.

    ``on_pressure(True)`` is called when the last slot is taken and ``on_pressure(False)``
    when one is free again, so a transport can pause and resume reading. :meth:`acquire`
    waits (oldest first) for a slot; :meth:`try_acquire` never waits.
    """

    __slots__ = ("limit", "_used", "_waiters", "_on_pressure", "full")

    def __init__(self, limit: int, on_pressure: Callable[[bool], None] | None = None) -> None:
        if type(limit) is not int or limit < 1:
            raise ValueError("limit must be a positive integer")
        self.limit = limit
        self._used = 0
        self._waiters: deque[asyncio.Future[None]] = _NOBODY_WAITS  # made when one must wait
        self._on_pressure = on_pressure
        #: Whether a new request would have to wait (or be refused): kept as the count changes
        #: (every HTTP request asks). ``on_pressure`` hears each change of it.
        self.full = False

    @property
    def in_use(self) -> int:
        """Slots taken now."""
        return self._used

    def try_acquire(self) -> bool:
        """Take a slot if one is free (and nobody is queued for one); never waits."""
        used = self._used
        if used >= self.limit or self._waiters:
            return False
        self._used = used = used + 1
        if used >= self.limit and not self.full:  # the last slot (_take's step, without the call)
            self._press(True)
        return True

    async def acquire(self) -> None:
        """Take a slot, waiting for one in arrival order."""
        if self._used < self.limit and not self._waiters:
            self._take()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is _NOBODY_WAITS:
            # A session's admission that never fills holds no deque (760 bytes: its first block).
            self._waiters = deque()
        self._waiters.append(fut)
        try:
            await fut  # release() hands its slot over: _used already counts us
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot arrived as we were cancelled: pass it on
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def force_acquire(self) -> None:
        """Take a slot at once, even beyond the limit.

        For a holder that gave its slot back while it waited on something outside this
        side's control (a handler parked on a call back to the other side) and runs again:
        making it wait for a slot could deadlock two peers calling each other. The count
        may pass the limit for a moment; no new request starts until it is back below.
        """
        self._take()

    def release(self) -> None:
        """Give a slot back (to the oldest waiter, if any, unless the count is over the limit)."""
        if self._used <= self.limit:
            while self._waiters:
                fut = self._waiters.popleft()
                if not fut.done():
                    fut.set_result(None)  # the slot passes straight on: _used is unchanged
                    return
        self._used = used = self._used - 1
        if self.full and used < self.limit:
            self._press(False)

    def _take(self) -> None:
        self._used = used = self._used + 1
        if used >= self.limit and not self.full:
            self._press(True)

    def _press(self, full: bool) -> None:
        self.full = full
        if self._on_pressure is not None:
            self._on_pressure(full)
