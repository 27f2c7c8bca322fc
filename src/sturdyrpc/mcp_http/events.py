"""SSE encoding and the event store behind resumable streams (``Last-Event-ID``).

An :class:`EventStore` keeps what was sent on each stream of a session so that a client whose
connection dropped can resume with a GET carrying ``Last-Event-ID`` and receive what it
missed. Event ids are unique across all streams of a session and name their stream, so a
replay never mixes in another stream's events. :class:`MemoryEventStore` is the in-process
default; a shared store (Redis, a database) implements the same four async methods.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

__all__ = ["EventStore", "MemoryEventStore", "sse_event", "sse_priming", "SSE_HEADERS"]

#: Response headers of every SSE stream. ``X-Accel-Buffering: no`` keeps nginx from holding events back.
SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


def sse_event(data: bytes, event_id: str | None = None) -> bytes:
    """One SSE ``message`` event. Our JSON never holds raw newlines, so ``data`` is one line."""
    if event_id is None:
        return b"event: message\ndata: " + data + b"\n\n"
    return b"event: message\nid: " + event_id.encode("ascii") + b"\ndata: " + data + b"\n\n"


def sse_priming(event_id: str, retry_ms: int | None) -> bytes:
    """The priming event (2025-11-25, SEP-1699): an id and empty data, so the client can resume at once."""
    out = b"id: " + event_id.encode("ascii") + b"\n"
    if retry_ms is not None:
        out += b"retry: " + str(int(retry_ms)).encode() + b"\n"
    return out + b"data: \n\n"


class EventStore(Protocol):
    """Where sent events are kept for replay. All methods may be called concurrently."""

    async def store(self, session_id: str, stream_id: str, data: bytes | None) -> str:
        """Record one event (``None`` data: a priming event) and return its new id."""

    def store_nowait(self, session_id: str, stream_id: str, data: bytes | None) -> str | None:
        """:meth:`store` without waiting, when the store can number the event itself (then it
        is written in the background); None when it cannot: then use :meth:`store`."""

    async def replay_after(self, session_id: str, last_event_id: str) -> tuple[str, list[tuple[str, bytes]]] | None:
        """(stream id, events after ``last_event_id`` on that stream only), or None if unknown."""

    async def drop_stream(self, session_id: str, stream_id: str) -> None:
        """Forget one stream (finished and no longer resumable)."""

    async def drop_session(self, session_id: str) -> None:
        """Forget everything of a session (ended)."""


class MemoryEventStore:
    """In-memory :class:`EventStore`, bounded: at most ``max_events_per_stream`` per stream and
    ``max_streams`` streams overall (the oldest stream is forgotten first).

    Event ids are ``<stream>.<n>`` where ``n`` grows across the whole session (unique per
    session, as the spec requires) and ``<stream>`` names the stream, so an id from one stream
    can never select another stream's events. Stream ids must not contain ``.``.
    """

    def __init__(self, max_events_per_stream: int = 1000, max_streams: int = 10000) -> None:
        self.max_events_per_stream = max_events_per_stream
        self.max_streams = max_streams
        # Per stream a plain list of (n, data): most streams are a POST's priming event and one
        # reply, and a list of two costs a fraction of a deque's block (memory and time per request).
        self._streams: OrderedDict[tuple[str, str], list[tuple[int, bytes | None]]] = OrderedDict()
        self._counters: dict[str, int] = {}

    async def store(self, session_id: str, stream_id: str, data: bytes | None) -> str:
        return self.store_nowait(session_id, stream_id, data)

    def store_nowait(self, session_id: str, stream_id: str, data: bytes | None) -> str:
        n = self._counters.get(session_id, 0) + 1
        self._counters[session_id] = n
        key = (session_id, stream_id)
        events = self._streams.get(key)
        if events is None:
            events = self._streams[key] = []
            while len(self._streams) > self.max_streams:
                self._streams.popitem(last=False)
        events.append((n, data))
        if len(events) > self.max_events_per_stream:
            del events[0]
        return f"{stream_id}.{n}"

    async def replay_after(self, session_id: str, last_event_id: str) -> tuple[str, list[tuple[str, bytes]]] | None:
        stream_id, _, num = last_event_id.rpartition(".")
        if not stream_id or not num.isdigit():
            return None
        events = self._streams.get((session_id, stream_id))
        if events is None:
            return None
        after = int(num)
        out = [(f"{stream_id}.{n}", d) for n, d in events if n > after and d is not None]
        return stream_id, out

    async def drop_stream(self, session_id: str, stream_id: str) -> None:
        self._streams.pop((session_id, stream_id), None)

    async def drop_session(self, session_id: str) -> None:
        self._counters.pop(session_id, None)
        for key in [k for k in self._streams if k[0] == session_id]:
            del self._streams[key]
