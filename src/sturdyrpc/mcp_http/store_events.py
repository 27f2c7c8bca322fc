"""The :class:`~.events.EventStore` on a shared :class:`~sturdyrpc.store.Store` (Redis): one store
stream ``ev:<session>:<stream>`` per logical SSE stream, readable by every worker.

What it keeps is bounded in time as well as in length: a stream's key lives as long as the
session may (``ttl``, the session idle timeout, renewed by every write), and once the stream is
finished, for the replay window only (``replay_window``). A session abandoned by its client
therefore leaves nothing behind longer than its idle timeout.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
from collections.abc import AsyncIterator

from ..store import Store
from ..store.notices import store_warning
from .events import COMPACT_MIN, REPLAY_WINDOW, Compacted, stored_form

__all__ = ["StoreEventStore", "events_key"]

log = logging.getLogger("sturdyrpc.http")

_MSG, _COMPACT, _PRIME, _END = b"m", b"c", b"p", b"e"
#: An entry id as stores make them (the memory store: ``n``; Redis: ``ms-seq``).
_ENTRY_ID = re.compile(r"[0-9]{1,20}(-[0-9]{1,20})?")


def events_key(session_id: str, stream_id: str) -> str:
    """The store key of one stream's events."""
    return f"ev:{session_id}:{stream_id}"


def _entry(data: bytes | None) -> bytes:
    if data is None:
        return _PRIME
    if len(data) >= COMPACT_MIN:
        kept = stored_form(data)
        if type(kept) is Compacted:
            return _COMPACT + kept.to_bytes()
    return _MSG + data


def _message(entry: bytes) -> bytes | None:
    """The message an entry holds (None: a priming event or an end marker)."""
    kind = entry[:1]
    if kind == _MSG:
        return entry[1:]
    if kind == _COMPACT:
        return Compacted.from_bytes(entry[1:]).expand()
    return None


class StoreEventStore:
    """The :class:`~.events.EventStore` on a :class:`~sturdyrpc.store.Store` stream per logical
    SSE stream. Event ids are ``<stream>.<entry id>``. A finished stream gets an end marker, so a
    follower on another worker knows when to stop, and keeps its events for ``replay_window``
    seconds; a live stream's key expires ``ttl`` seconds after its last write. Sessions are
    forgotten by DELETE (:meth:`~.shared.SharedSessions.delete`) or their TTL, not when one
    worker's replica ends.

    A POST stream has one writer (the worker holding the POST), so its entry ids are numbered
    here and its writes leave in the background, every write queued in one event-loop turn in
    one round trip (a quick response costs no wait and a share of one round trip). The GET
    stream ``g`` has many writers: the store numbers its entries, one round trip each."""

    def __init__(self, store: Store, *, max_events_per_stream: int = 1000, ttl: float = 600.0,
                 replay_window: float = REPLAY_WINDOW) -> None:
        self.backend = store
        self.max_events_per_stream = max_events_per_stream
        self.ttl = ttl
        self.replay_window = replay_window
        self._seqs: dict[tuple[str, str], int] = {}
        self._queue: list[tuple[str, int | None, bytes]] = []
        self._ended: dict[str, float] = {}  # keys of the streams whose end marker is queued
        self._writer: asyncio.Task[None] | None = None

    async def store(self, session_id: str, stream_id: str, data: bytes | None) -> str:
        if stream_id == "g":
            eid = await self.backend.append(events_key(session_id, stream_id), _entry(data), maxlen=self.max_events_per_stream,
                                          ttl=self.ttl)
            return f"g.{eid}"
        out = self.store_nowait(session_id, stream_id, data)
        assert out is not None
        return out

    def store_nowait(self, session_id: str, stream_id: str, data: bytes | None) -> str | None:
        if stream_id == "g":
            return None  # many writers: the store numbers its entries
        k = (session_id, stream_id)
        n = self._seqs.get(k, 0) + 1
        self._seqs[k] = n
        self._enqueue(events_key(session_id, stream_id), n, _entry(data))
        return f"{stream_id}.{self.backend.entry_id(n)}"

    def end_stream(self, session_id: str, stream_id: str) -> None:
        n = self._seqs.pop((session_id, stream_id), None)
        if n is None:
            return  # nothing of it was stored (a JSON reply, a stream answered without events)
        key = events_key(session_id, stream_id)
        self._ended[key] = self.replay_window
        self._enqueue(key, n + 1, _END)

    def _enqueue(self, key: str, seq: int, entry: bytes) -> None:
        self._queue.append((key, seq, entry))
        if self._writer is None or self._writer.done():
            # in a context of its own: the writer outlives the request that started it
            self._writer = asyncio.get_running_loop().create_task(self._write(), context=contextvars.Context())

    async def flush(self) -> None:
        """Wait until every queued write has been tried."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        # One writer at a time: the entries of a stream must arrive in order.
        while self._queue:
            batch, self._queue = self._queue, []
            ended, self._ended = self._ended, {}
            try:
                await self.backend.append_batch(batch, maxlen=self.max_events_per_stream, ttl=self.ttl, ttls=ended)
            except Exception as exc:  # delivery went on without it; only resumption is lost
                store_warning(log, "events not stored", "%d events not stored: %s", len(batch), exc)

    def parse(self, last_event_id: str) -> tuple[str, str] | None:
        """(stream id, entry id) of an event id of this store, or None when it cannot be one."""
        stream_id, _, after = last_event_id.rpartition(".")
        if not stream_id or _ENTRY_ID.fullmatch(after) is None:
            return None
        return stream_id, after

    async def replay_after(self, session_id: str, last_event_id: str) -> tuple[str, list[tuple[str, bytes]]] | None:
        found = self.parse(last_event_id)
        if found is None:
            return None
        stream_id, after = found
        key = events_key(session_id, stream_id)
        if await self.backend.last_id(key) is None:
            return None
        out: list[tuple[str, bytes]] = []
        for i, d in await self.backend.read_after(key, after):
            m = _message(d)
            if m is not None:
                out.append((f"{stream_id}.{i}", m))
        return stream_id, out

    async def exists(self, session_id: str, stream_id: str) -> bool:
        """Whether the store still holds the stream (it had an event and has not expired)."""
        return await self.backend.last_id(events_key(session_id, stream_id)) is not None

    async def follow(self, session_id: str, stream_id: str, after: str) -> AsyncIterator[tuple[str, bytes | None]]:
        """(event id, data) after ``after`` then live; data None: the stream ended."""
        async for i, d in self.backend.follow(events_key(session_id, stream_id), after):
            m = _message(d)
            if m is not None:
                yield f"{stream_id}.{i}", m
            elif d[:1] == _END:
                yield f"{stream_id}.{i}", None
                return

    async def keep(self, session_id: str, stream_ids: list[str]) -> None:
        """Renew the TTL of open streams (a long call without events must stay resumable)."""
        for stream_id in stream_ids:
            await self.backend.touch(events_key(session_id, stream_id), self.ttl)

    async def drop_stream(self, session_id: str, stream_id: str) -> None:
        await self.backend.drop_stream(events_key(session_id, stream_id))

    async def drop_session(self, session_id: str) -> None:
        return None  # one worker's replica ending is not the session ending
