"""The :class:`~.events.EventStore` on a shared :class:`~sturdyrpc.store.Store` (Redis): one store
stream ``ev:<session>:<stream>`` per logical SSE stream, readable by every worker.

What it keeps is bounded in time as well as in length: a stream's key lives as long as the
session may (``ttl``, the session idle timeout, renewed by every write), and once the stream is
finished, for the replay window only (``replay_window``). A session abandoned by its client
therefore leaves nothing behind longer than its idle timeout.

A POST stream costs one round trip of two commands when it ends within ``write_delay`` (10 ms)
of its first event: its events wait that long for the stream's end, then go as one store entry
(a *bundle*, up to :data:`BUNDLE_MAX` events) with one ``PEXPIRE`` to the replay window. With
the session lookup (``GETEX``) that is 3 commands per request, whatever the number of events.
Once every stream queued has ended (its client got all of it: the events are kept for a resume
only), the write may wait another ``write_delay`` for the worker's next command to the store and
leave with it, so under load a streamed request costs Redis one read. A client connection that
leaves a stream before it ends writes at once (a resume may follow).
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

__all__ = ["StoreEventStore", "events_key", "BUNDLE_MAX", "WRITE_DELAY"]

log = logging.getLogger("sturdyrpc.http")

_MSG, _COMPACT, _PRIME, _END, _BUNDLE = b"m", b"c", b"p", b"e", b"b"
#: The most events of one stream written as one store entry (the stream's length bound,
#: ``max_events_per_stream``, counts entries).
BUNDLE_MAX = 8
#: Seconds a POST stream's events may wait for more of the stream before they are written.
WRITE_DELAY = 0.01
#: Looks for a stream's first entry before a resume is told the stream is unknown (see replay_after).
RESUME_LOOKS = 6
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


def _bundle(members: list[tuple[int, bytes]]) -> bytes:
    """One store entry holding several entries of a stream: ``b`` then ``<seq> <size>\\n<entry>`` each."""
    return _BUNDLE + b"".join(b"%d %d\n" % (seq, len(e)) + e for seq, e in members)


def _members(bundle: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    pos, size = 1, len(bundle)
    while pos < size:
        sp = bundle.index(b" ", pos)
        nl = bundle.index(b"\n", sp)
        start = nl + 1
        end = start + int(bundle[sp + 1:nl])
        out.append((int(bundle[pos:sp]), bundle[start:end]))
        pos = end
    return out


def _seq_of(entry_id: str) -> int:
    """The sequence number of an entry id of a POST stream (``n-0`` on Redis, ``n`` in memory)."""
    return int(entry_id.partition("-")[0])


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
    here and its writes leave in the background: what is queued within ``write_delay`` seconds
    of the first write not yet sent (sooner when every stream queued has ended, or a client
    connection left one), and what is queued while a write is under way, goes in one round
    trip, the events of one stream as one entry (:data:`BUNDLE_MAX`). The GET stream ``g`` has
    many writers: the store numbers its entries, one round trip each."""

    def __init__(self, store: Store, *, max_events_per_stream: int = 1000, ttl: float = 600.0,
                 replay_window: float = REPLAY_WINDOW, write_delay: float = WRITE_DELAY) -> None:
        self.backend = store
        self.max_events_per_stream = max_events_per_stream
        self.ttl = ttl
        self.replay_window = replay_window
        self.write_delay = write_delay
        self._seqs: dict[tuple[str, str], int] = {}
        self._queue: list[tuple[str, int, bytes]] = []
        self._open: set[str] = set()  # keys of the streams queued that have not ended
        self._ended: dict[str, float] = {}  # keys of the streams whose end marker is queued
        self._writer: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = False  # asked to write what is queued once the write under way is done
        self._urgent = False  # what is queued must leave now (a client left a stream, or a flush)
        self._loop: asyncio.AbstractEventLoop | None = None

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
        key = events_key(session_id, stream_id)
        self._open.add(key)
        self._enqueue(key, n, _entry(data))
        return f"{stream_id}.{self.backend.entry_id(n)}"

    def end_stream(self, session_id: str, stream_id: str) -> None:
        n = self._seqs.pop((session_id, stream_id), None)
        if n is None:
            return  # nothing of it was stored (a JSON reply, a stream answered without events)
        key = events_key(session_id, stream_id)
        self._ended[key] = self.replay_window
        self._open.discard(key)
        self._enqueue(key, n + 1, _END)

    def detached(self, session_id: str, stream_id: str) -> None:
        if self._timer is not None or self._queue:
            self._urgent = True
            self._start()  # the client may resume on another worker at once: what it was sent must be there

    def _enqueue(self, key: str, seq: int, entry: bytes) -> None:
        self._queue.append((key, seq, entry))
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # served again on a new loop (tests): the old one's writer and timer are gone
            self._loop, self._writer, self._timer = loop, None, None
        if self._writer is not None and not self._writer.done():
            return  # the writer decides when the write under way is done
        if not self._open or self.write_delay <= 0:
            self._start()  # nothing queued waits for its stream's end
        elif self._timer is None:
            self._timer = loop.call_later(self.write_delay, self._start, context=contextvars.Context())

    def _start(self) -> None:
        """Write what is queued now (after the write under way, if any)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writer is not None and not self._writer.done():
            self._due = True
        elif self._queue:
            # in a context of its own: the writer outlives the request that started it
            self._writer = asyncio.get_running_loop().create_task(self._write(), context=contextvars.Context())

    async def flush(self) -> None:
        """Write what is queued now, and wait until every queued write has been tried."""
        while True:
            self._urgent = True
            self._start()
            if self._writer is None or self._writer.done():
                return
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        # One writer at a time: the entries of a stream must arrive in order.
        while self._queue:
            batch, self._queue = self._queue, []
            ended, self._ended = self._ended, {}
            # Streams that have all ended were answered in full: their events are kept for a
            # resume only, so they may wait a little more to share a round trip with the next
            # command (a session lookup, usually): a request then costs Redis one read, not two.
            within = 0.0 if self._open or self._urgent else self.write_delay
            self._open.clear()  # what comes from now on waits again, if its stream has not ended
            self._due = self._urgent = False
            try:
                await self.backend.append_batch(_bundled(batch), maxlen=self.max_events_per_stream, ttl=self.ttl, ttls=ended,
                                                within=within)
            except Exception as exc:  # delivery went on without it; only resumption is lost
                store_warning(log, "events not stored", "%d events not stored: %s", len(batch), exc)
            if self._queue and self._open and not self._due and self.write_delay > 0:
                # What came during the write waits for its streams' ends as well (one entry each, not two).
                if self._timer is None:
                    self._timer = asyncio.get_running_loop().call_later(self.write_delay, self._start,
                                                                        context=contextvars.Context())
                return

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
            for eid, entry in self._unpack(stream_id, i, d, after):
                m = _message(entry)
                if m is not None:
                    out.append((eid, m))
        return stream_id, out

    def _unpack(self, stream_id: str, entry_id: str, data: bytes, after: str) -> list[tuple[str, bytes]]:
        """(event id, entry) of each event a store entry holds that comes after ``after``."""
        if data[:1] != _BUNDLE:
            return [(f"{stream_id}.{entry_id}", data)]
        seen = _seq_of(after)  # a bundle's id is its last member's: the first members may be older
        return [(f"{stream_id}.{self.backend.entry_id(n)}", e) for n, e in _members(data) if n > seen]

    async def exists(self, session_id: str, stream_id: str) -> bool:
        """Whether the store still holds the stream (it had an event and has not expired).

        A client that left a stream on another worker and resumes here at once can be faster than
        that worker's write of what it was sent (written at most ``write_delay`` after, at once when
        the client leaves): a stream not found is looked for again for a moment before it is
        called unknown (a resume is rare; a wrong 400 loses the client's replies)."""
        key = events_key(session_id, stream_id)
        for _ in range(RESUME_LOOKS):
            if await self.backend.last_id(key) is not None:
                return True
            await asyncio.sleep(max(self.write_delay, 0.005) * 2)
        return False

    async def follow(self, session_id: str, stream_id: str, after: str) -> AsyncIterator[tuple[str, bytes | None]]:
        """(event id, data) after ``after`` then live; data None: the stream ended."""
        async for i, d in self.backend.follow(events_key(session_id, stream_id), after):
            for eid, entry in self._unpack(stream_id, i, d, after):
                m = _message(entry)
                if m is not None:
                    yield eid, m
                elif entry[:1] == _END:
                    yield eid, None
                    return
            after = i

    async def keep(self, session_id: str, stream_ids: list[str]) -> None:
        """Renew the TTL of open streams (a long call without events must stay resumable)."""
        for stream_id in stream_ids:
            await self.backend.touch(events_key(session_id, stream_id), self.ttl)

    async def drop_stream(self, session_id: str, stream_id: str) -> None:
        await self.backend.drop_stream(events_key(session_id, stream_id))

    async def drop_session(self, session_id: str) -> None:
        return None  # one worker's replica ending is not the session ending


def _bundled(batch: list[tuple[str, int, bytes]]) -> list[tuple[str, int | None, bytes]]:
    """The entries of ``batch`` with those of one stream together, up to :data:`BUNDLE_MAX` per
    store entry (its id the last one's sequence number), in order within each stream."""
    by_key: dict[str, list[tuple[int, bytes]]] = {}
    for key, seq, entry in batch:
        by_key.setdefault(key, []).append((seq, entry))
    out: list[tuple[str, int | None, bytes]] = []
    for key, members in by_key.items():
        for i in range(0, len(members), BUNDLE_MAX):
            part = members[i:i + BUNDLE_MAX]
            out.append((key, part[0][0], part[0][1]) if len(part) == 1 else (key, part[-1][0], _bundle(part)))
    return out
