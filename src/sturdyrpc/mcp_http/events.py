"""SSE encoding and the event store behind resumable streams (``Last-Event-ID``).

An :class:`EventStore` keeps what was sent on each stream of a session so that a client whose
connection dropped can resume with a GET carrying ``Last-Event-ID`` and receive what it
missed. Event ids are unique across all streams of a session and name their stream, so a
replay never mixes in another stream's events. :class:`MemoryEventStore` is the in-process
default (bounded in events, streams and bytes; a finished stream is kept for a short replay
window only); :class:`~.store_events.StoreEventStore` keeps events in a shared
:class:`~sturdyrpc.store.Store`.

A tool result whose text content repeats its ``structuredContent`` (the spec asks servers to
send both) is kept once: :func:`stored_form` cuts the repeated part out and
:meth:`Compacted.expand` puts the same bytes back.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import struct
import time
from collections import OrderedDict
from typing import Any, Protocol

from .. import codec

__all__ = ["EventStore", "MemoryEventStore", "sse_event", "sse_priming", "SSE_HEADERS", "Compacted", "stored_form",
           "REPLAY_WINDOW", "MAX_BYTES_PER_SESSION", "COMPACT_MIN"]

#: Response headers of every SSE stream. ``X-Accel-Buffering: no`` keeps nginx from holding events back.
SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]

#: Seconds a finished stream stays resumable, by default (then its events are dropped).
REPLAY_WINDOW = 30.0
#: Bytes of events :class:`MemoryEventStore` keeps per session, by default (oldest dropped first).
MAX_BYTES_PER_SESSION = 4 * 1024 * 1024
#: Replies at least this long are checked for a text content that repeats ``structuredContent``.
COMPACT_MIN = 2048


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
        """(stream id, events after ``last_event_id`` on that stream only), or None if unknown
        or malformed."""

    def end_stream(self, session_id: str, stream_id: str) -> None:
        """The stream is finished: no more events will come; it stays resumable for the store's
        replay window only."""

    async def drop_stream(self, session_id: str, stream_id: str) -> None:
        """Forget one stream (finished and no longer resumable)."""

    async def drop_session(self, session_id: str) -> None:
        """Forget everything of a session (ended)."""


# ------------------------------------------------------------------ stored once


class Compacted:
    """A reply kept with one repeated part cut out: ``expand()`` gives back the exact bytes.

    The part cut out at ``at`` is ``body[src:src + size]`` again (a ``str`` result, which the
    reply carries as the text and as ``structuredContent.result``), or, with ``as_text``, that
    JSON value written as a JSON string (an object result, whose text is its JSON)."""

    __slots__ = ("body", "at", "src", "size", "as_text")

    def __init__(self, body: bytes, at: int, src: int, size: int, as_text: bool) -> None:
        self.body, self.at, self.src, self.size, self.as_text = body, at, src, size, as_text

    def expand(self) -> bytes:
        part = self.body[self.src:self.src + self.size]
        if self.as_text:
            part = codec.encode(part.decode())
        return self.body[:self.at] + part + self.body[self.at:]

    def __len__(self) -> int:
        return len(self.body) + 32

    _HEAD = struct.Struct(">IIIB")

    def to_bytes(self) -> bytes:
        return self._HEAD.pack(self.at, self.src, self.size, self.as_text) + self.body

    @classmethod
    def from_bytes(cls, raw: bytes) -> Compacted:
        at, src, size, as_text = cls._HEAD.unpack_from(raw)
        return cls(raw[cls._HEAD.size:], at, src, size, bool(as_text))


def stored_form(data: bytes) -> bytes | Compacted:
    """``data`` as an event store keeps it: a reply whose text content repeats its
    ``structuredContent`` (at least :data:`COMPACT_MIN` bytes) as a :class:`Compacted`, checked
    to expand to exactly ``data``; anything else as it is."""
    if len(data) < COMPACT_MIN or b'"structuredContent"' not in data:
        return data
    try:
        obj = codec.decode(data)
    except Exception:
        return data
    result = obj.get("result") if type(obj) is dict else None
    content = result.get("content") if type(result) is dict else None
    if type(content) is not list or "structuredContent" not in result:  # type: ignore[operator]
        return data
    structured = result["structuredContent"]  # type: ignore[index]
    for block in content:
        text = block.get("text") if type(block) is dict and block.get("type") == "text" else None
        if type(text) is str and len(text) >= COMPACT_MIN // 2:
            found = _cut(data, codec.encode(text), structured)
            if found is not None and found.expand() == data:
                return found
    return data


def _cut(data: bytes, text: bytes, structured: Any) -> Compacted | None:
    i = data.find(text)
    if i < 0:
        return None
    j = data.find(text, i + len(text))
    if j >= 0:  # the text again, verbatim: a str result wrapped as {"result": text}
        return Compacted(data[:j] + data[j + len(text):], j, i, len(text), False)
    values = [structured]
    if type(structured) is dict and len(structured) == 1 and "result" in structured:
        values.append(structured["result"])  # a list or number result wrapped as {"result": value}
    for value in values:
        raw = codec.encode(value)
        k = data.find(raw)
        if k >= 0 and (k >= i + len(text) or k + len(raw) <= i) and codec.encode(raw.decode()) == text:
            return Compacted(data[:i] + data[i + len(text):], i, k if k < i else k - len(text), len(raw), True)
    return None


def _expanded(kept: bytes | Compacted) -> bytes:
    return kept if type(kept) is bytes else kept.expand()  # type: ignore[union-attr]


# ------------------------------------------------------------------ in memory


class _Tally:
    """One session's events in a :class:`MemoryEventStore`: its event counter, bytes kept and
    streams (oldest first)."""

    __slots__ = ("n", "bytes", "streams")

    def __init__(self) -> None:
        self.n = 0
        self.bytes = 0
        self.streams: dict[str, None] = {}


class MemoryEventStore:
    """In-memory :class:`EventStore`, bounded: at most ``max_events_per_stream`` per stream,
    ``max_streams`` streams overall (the oldest stream is forgotten first), and
    ``max_bytes_per_session`` bytes of events per session (its oldest events are dropped first).
    A finished stream stays resumable for ``replay_window`` seconds, then it is dropped.

    Event ids are ``<stream>.<n>`` where ``n`` grows across the whole session (unique per
    session, as the spec requires) and ``<stream>`` names the stream, so an id from one stream
    can never select another stream's events. Stream ids must not contain ``.``.
    """

    def __init__(self, max_events_per_stream: int = 1000, max_streams: int = 10000, *,
                 max_bytes_per_session: int = MAX_BYTES_PER_SESSION, replay_window: float = REPLAY_WINDOW) -> None:
        self.max_events_per_stream = max_events_per_stream
        self.max_streams = max_streams
        self.max_bytes_per_session = max_bytes_per_session
        self.replay_window = replay_window
        # Per stream a plain list of (n, data): most streams are a POST's priming event and one
        # reply, and a list of two costs a fraction of a deque's block (memory and time per request).
        self._streams: OrderedDict[tuple[str, str], list[tuple[int, bytes | Compacted | None]]] = OrderedDict()
        self._sessions: dict[str, _Tally] = {}
        #: (session, stream) of the finished streams -> when their window ends, oldest first (the
        #: window is one length for all); a stream dropped otherwise leaves it at once.
        self._finished: dict[tuple[str, str], float] = {}
        self._next_due = math.inf  # when the oldest finished stream's window ends
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    async def store(self, session_id: str, stream_id: str, data: bytes | None) -> str:
        return self.store_nowait(session_id, stream_id, data)

    def store_nowait(self, session_id: str, stream_id: str, data: bytes | None) -> str:
        t = self._sessions.get(session_id)
        if t is None:
            t = self._sessions[session_id] = _Tally()
        n = t.n = t.n + 1
        key = (session_id, stream_id)
        events = self._streams.get(key)
        if events is None:
            events = self._streams[key] = []
            t.streams[stream_id] = None
            while len(self._streams) > self.max_streams:
                self._forget(*self._streams.popitem(last=False))
        if data is None:
            events.append((n, None))
        else:
            kept = stored_form(data) if len(data) >= COMPACT_MIN else data
            events.append((n, kept))
            t.bytes += len(kept)
            if t.bytes > self.max_bytes_per_session:
                self._shed(session_id, t)
        if len(events) > self.max_events_per_stream:
            old = events.pop(0)[1]
            if old is not None:
                t.bytes -= len(old)
        return f"{stream_id}.{n}"

    def _shed(self, session_id: str, t: _Tally) -> None:
        """Drop the session's oldest events (ids grow across its streams) until it is within
        ``max_bytes_per_session``."""
        while t.bytes > self.max_bytes_per_session:
            oldest: list[tuple[int, bytes | Compacted | None]] | None = None
            for stream_id in t.streams:
                events = self._streams.get((session_id, stream_id))
                if events and (oldest is None or events[0][0] < oldest[0][0]):
                    oldest = events
            if oldest is None:
                return
            old = oldest.pop(0)[1]
            if old is not None:
                t.bytes -= len(old)

    def _forget(self, key: tuple[str, str], events: list[tuple[int, bytes | Compacted | None]]) -> None:
        """A stream left ``_streams``: forget what else was kept of it."""
        self._finished.pop(key, None)
        t = self._sessions.get(key[0])
        if t is not None:
            t.streams.pop(key[1], None)
            t.bytes -= sum(len(d) for _, d in events if d is not None)

    async def replay_after(self, session_id: str, last_event_id: str) -> tuple[str, list[tuple[str, bytes]]] | None:
        stream_id, _, num = last_event_id.rpartition(".")
        if not stream_id or not num.isdigit():
            return None
        if self._finished:
            self._expire(time.monotonic())
        events = self._streams.get((session_id, stream_id))
        if events is None:
            return None
        after = int(num)
        out = [(f"{stream_id}.{n}", _expanded(d)) for n, d in events if n > after and d is not None]
        return stream_id, out

    def end_stream(self, session_id: str, stream_id: str) -> None:
        key = (session_id, stream_id)
        if key not in self._streams:
            return
        if self.replay_window <= 0:
            self._drop(session_id, stream_id)
            return
        now = time.monotonic()
        self._finished[key] = now + self.replay_window
        # Dropped by a timer at the end of the window; here only when no timer runs (the first
        # finished stream, or a timer of an event loop that is gone).
        if self._timer is None or now >= self._next_due:
            self._expire(now)
            self._arm(now)

    def _arm(self, now: float) -> None:
        """A timer drops the finished streams when their window ends, also on a server that has gone quiet."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # used outside a loop: expiry happens on the next call
        if self._timer is not None and self._timer_loop is loop or not self._finished:
            return
        self._timer_loop = loop
        # In a context of its own: the timer must not keep the context (headers, principal) of
        # the request that happened to arm it.
        self._timer = loop.call_later(max(0.0, self._next_due - now), self._on_timer, context=contextvars.Context())

    def _on_timer(self) -> None:
        self._timer = None
        now = time.monotonic()
        self._expire(now)
        self._arm(now)

    def _expire(self, now: float) -> None:
        due = []
        self._next_due = math.inf
        for key, deadline in self._finished.items():
            if deadline > now:
                self._next_due = deadline
                break
            due.append(key)
        for session_id, stream_id in due:
            self._drop(session_id, stream_id)

    def _drop(self, session_id: str, stream_id: str) -> None:
        key = (session_id, stream_id)
        events = self._streams.pop(key, None)
        if events is not None:
            self._forget(key, events)

    async def drop_stream(self, session_id: str, stream_id: str) -> None:
        self._drop(session_id, stream_id)

    async def drop_session(self, session_id: str) -> None:
        t = self._sessions.pop(session_id, None)
        if t is not None:
            for stream_id in t.streams:
                self._streams.pop((session_id, stream_id), None)
                self._finished.pop((session_id, stream_id), None)

    def bytes_kept(self, session_id: str) -> int:
        """Bytes of events kept for ``session_id`` now."""
        t = self._sessions.get(session_id)
        return t.bytes if t is not None else 0
