"""In-memory message transports: a connected pair, and a seeded fault injector for tests.

:func:`memory_pair` returns two :class:`~sturdyrpc.peer.MessageTransport` endpoints; what one
sends, the other receives, whole messages, in order. Closing either end ends both: each
side's ``receive`` returns ``None`` once the messages already sent have been read.

:class:`FaultyTransport` wraps the sending side of any transport and, driven by a seeded
random generator, delays, reorders, duplicates and drops messages, and can cut the
connection after a chosen number of messages. The decision for message *n* depends only on
the seed and *n*, so a failing schedule is reproduced by its seed.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from typing import Any

from ..framing import BadHeader, FrameTooLarge

__all__ = ["MemoryTransport", "memory_pair", "FaultyTransport", "TransportClosed"]


class TransportClosed(ConnectionError):
    """Sending on a transport that is closed."""


_EOF: Any = None


class _Inbox:
    """One direction of a pair: a deque plus a waiter, bounded when ``maxsize`` > 0."""

    __slots__ = ("items", "closed", "maxsize", "_getter", "_putters")

    def __init__(self, maxsize: int) -> None:
        self.items: deque[bytes | FrameTooLarge | BadHeader] = deque()
        self.closed = False
        self.maxsize = maxsize
        self._getter: asyncio.Future[None] | None = None
        self._putters: deque[asyncio.Future[None]] = deque()

    def _wake_getter(self) -> None:
        g = self._getter
        if g is not None and not g.done():
            g.set_result(None)

    def _wake_putter(self) -> None:
        while self._putters:
            p = self._putters.popleft()
            if not p.done():
                p.set_result(None)
                return

    async def put(self, item: bytes | FrameTooLarge | BadHeader) -> None:
        while self.maxsize and len(self.items) >= self.maxsize and not self.closed:
            fut = asyncio.get_running_loop().create_future()
            self._putters.append(fut)
            await fut
        if self.closed:
            raise TransportClosed("connection closed")
        self.items.append(item)
        self._wake_getter()

    async def get(self) -> bytes | FrameTooLarge | BadHeader | None:
        while not self.items:
            if self.closed:
                return None
            fut = asyncio.get_running_loop().create_future()
            self._getter = fut
            try:
                await fut
            finally:
                self._getter = None
        item = self.items.popleft()
        if self._putters:
            self._wake_putter()
        return item

    def close(self) -> None:
        self.closed = True
        self._wake_getter()
        while self._putters:
            p = self._putters.popleft()
            if not p.done():
                p.set_result(None)


class MemoryTransport:
    """One end of an in-memory connection (see :func:`memory_pair`).

    ``sent`` counts the messages this end has sent (tests use it to check the wire).
    """

    def __init__(self, inbox: _Inbox, outbox: _Inbox, name: str = "") -> None:
        self._inbox = inbox
        self._outbox = outbox
        self.name = name
        self.sent = 0

    async def send(self, data: bytes) -> None:
        """Deliver one whole message to the other end (waits while its inbox is full)."""
        self.sent += 1
        await self._outbox.put(data)

    def send_nowait(self, data: bytes) -> bool:
        """Deliver one message now if the other end's inbox has room; False (nothing sent) when
        it is full or closed (then :meth:`send` waits, or raises)."""
        box = self._outbox
        if box.closed or (box.maxsize and len(box.items) >= box.maxsize):
            return False
        self.sent += 1
        box.items.append(data)
        box._wake_getter()
        return True

    async def receive(self) -> bytes | FrameTooLarge | BadHeader | None:
        """The next message from the other end, or ``None`` once the connection is closed."""
        return await self._inbox.get()

    def receive_nowait(self) -> bytes | FrameTooLarge | BadHeader | None:
        """A message already delivered, or None when none waits now (the end of the
        connection is reported by :meth:`receive`)."""
        box = self._inbox
        if not box.items:
            return None
        item = box.items.popleft()
        if box._putters:
            box._wake_putter()
        return item

    def inject(self, item: bytes | FrameTooLarge | BadHeader) -> None:
        """Make ``receive`` on this end return ``item`` (tests: raw frames, framing events)."""
        self._inbox.items.append(item)
        self._inbox._wake_getter()

    async def close(self) -> None:
        """Close both directions; messages already sent can still be read."""
        self._inbox.close()
        self._outbox.close()

    def close_write(self) -> None:
        """Half-close: the other end reads what was sent, then ``None``; this end still receives
        (like closing a server's stdin while still reading its stdout)."""
        self._outbox.close()

    @property
    def closed(self) -> bool:
        return self._outbox.closed


def memory_pair(maxsize: int = 0) -> tuple[MemoryTransport, MemoryTransport]:
    """Two connected endpoints. ``maxsize`` > 0 bounds each direction (``send`` then waits)."""
    a_to_b = _Inbox(maxsize)
    b_to_a = _Inbox(maxsize)
    return MemoryTransport(b_to_a, a_to_b, "a"), MemoryTransport(a_to_b, b_to_a, "b")


class FaultyTransport:
    """Wraps a transport and perturbs what it sends, deterministically for a given seed.

    Per message sent (counted from 0), in this order:

    - ``cut_after``: once this many messages have been sent, the connection is cut: the
      message is lost, both directions close, and every later ``send`` raises.
    - ``drop``: probability that the message is silently lost.
    - ``duplicate``: probability that it is delivered twice.
    - ``reorder``: probability that it is held back and delivered after the next
      ``hold`` messages (or after ``max_hold`` seconds if no more messages come).
    - ``delay``: probability that delivery waits ``delay_s`` seconds (other messages overtake it).

    ``log`` records every decision as ``(n, action)`` for diagnosing a failing seed.
    """

    def __init__(
        self,
        inner: Any,
        seed: int,
        *,
        drop: float = 0.0,
        duplicate: float = 0.0,
        reorder: float = 0.0,
        delay: float = 0.0,
        delay_s: float = 0.002,
        hold: int = 3,
        max_hold: float = 0.005,
        cut_after: int | None = None,
    ) -> None:
        self.inner = inner
        self.rng = random.Random(seed)
        self.drop = drop
        self.duplicate = duplicate
        self.reorder = reorder
        self.delay = delay
        self.delay_s = delay_s
        self.hold = hold
        self.max_hold = max_hold
        self.cut_after = cut_after
        self.count = 0
        self.cut = False
        self.log: list[tuple[int, str]] = []
        self._held: list[list[Any]] = []  # [countdown, data]
        self._flush_handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, data: bytes) -> None:
        if self.cut:
            raise TransportClosed("connection cut")
        n = self.count
        self.count += 1
        if self.cut_after is not None and n >= self.cut_after:
            self.cut = True
            self.log.append((n, "cut"))
            await self.close()
            raise TransportClosed("connection cut")
        r = self.rng.random
        # Draw every number each time so later decisions do not depend on earlier outcomes.
        d_drop, d_dup, d_reorder, d_delay = r(), r(), r(), r()
        if d_drop < self.drop:
            self.log.append((n, "drop"))
            await self._tick()
            return
        copies = 2 if d_dup < self.duplicate else 1
        if copies == 2:
            self.log.append((n, "duplicate"))
        for _ in range(copies):
            if d_reorder < self.reorder:
                self.log.append((n, "hold"))
                self._held.append([self.hold, data])
                self._arm_flush()
            elif d_delay < self.delay:
                self.log.append((n, "delay"))
                self._spawn(self._deliver_later(data))
            else:
                await self._deliver(data)
        await self._tick()

    async def _deliver(self, data: bytes) -> None:
        try:
            await self.inner.send(data)
        except ConnectionError:
            pass

    async def _deliver_later(self, data: bytes) -> None:
        await asyncio.sleep(self.delay_s)
        if not self.cut:
            await self._deliver(data)

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _tick(self) -> None:
        if not self._held:
            return
        due = []
        for item in self._held:
            item[0] -= 1
            if item[0] < 0:
                due.append(item)
        for item in due:
            self._held.remove(item)
            await self._deliver(item[1])

    def _arm_flush(self) -> None:
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(self.max_hold, self._flush_all)

    def _flush_all(self) -> None:
        self._flush_handle = None
        held, self._held = self._held, []
        for item in held:
            if not self.cut:
                self._spawn(self._deliver(item[1]))

    async def receive(self) -> bytes | FrameTooLarge | BadHeader | None:
        result: bytes | FrameTooLarge | BadHeader | None = await self.inner.receive()
        return result

    async def close(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._held.clear()
        for t in list(self._tasks):
            t.cancel()
        await self.inner.close()
