"""The in-memory :class:`~.base.Store`: one process only, no I/O, the default.

Expiry is lazy (checked on access) plus a sweep every few thousand writes, so an abandoned key
never holds memory for long. Stream ids are decimal sequence numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping

from .base import Entry

__all__ = ["MemoryStore"]

_SWEEP_EVERY = 4096


class _Sub:
    def __init__(self, store: MemoryStore, channel: str) -> None:
        self._store = store
        self._channel = channel
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._closed = False

    def put(self, data: bytes) -> None:
        if not self._closed:
            self._queue.put_nowait(data)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._store._unsubscribe(self._channel, self)
            self._queue.put_nowait(None)


class _Stream:
    __slots__ = ("entries", "seq", "changed", "expires")

    def __init__(self) -> None:
        self.entries: deque[tuple[int, bytes]] = deque()
        self.seq = 0
        self.changed: asyncio.Event = asyncio.Event()
        self.expires: float | None = None


class MemoryStore:
    """In-process :class:`~.base.Store` (not shared: ``shared`` is False)."""

    name = "memory"
    shared = False

    def __init__(self) -> None:
        self._values: dict[str, tuple[bytes | int, float | None]] = {}
        self._streams: dict[str, _Stream] = {}
        self._subs: dict[str, set[_Sub]] = {}
        self._writes = 0

    # ---------------------------------------------------------------- records

    def _live(self, key: str) -> bytes | int | None:
        hit = self._values.get(key)
        if hit is None:
            return None
        value, expires = hit
        if expires is not None and expires <= time.monotonic():
            del self._values[key]
            return None
        return value

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes % _SWEEP_EVERY == 0:
            now = time.monotonic()
            for k in [k for k, (_, e) in self._values.items() if e is not None and e <= now]:
                del self._values[k]
            for k in [k for k, s in self._streams.items() if s.expires is not None and s.expires <= now]:
                del self._streams[k]

    @staticmethod
    def _deadline(ttl: float | None) -> float | None:
        return None if ttl is None else time.monotonic() + ttl

    async def get(self, key: str) -> bytes | None:
        v = self._live(key)
        return v if isinstance(v, bytes) else None if v is None else str(v).encode()

    async def get_touch(self, key: str, ttl: float) -> bytes | None:
        v = self._live(key)
        if v is None:
            return None
        self._values[key] = (v, self._deadline(ttl))
        return v if isinstance(v, bytes) else str(v).encode()

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        self._values[key] = (bytes(value), self._deadline(ttl))
        self._wrote()

    async def delete(self, *keys: str) -> int:
        n = 0
        for k in keys:
            if self._live(k) is not None:
                del self._values[k]
                n += 1
            if self._stream(k) is not None:
                del self._streams[k]
                n += 1
        return n

    async def touch(self, key: str, ttl: float) -> bool:
        v = self._live(key)
        if v is not None:
            self._values[key] = (v, self._deadline(ttl))
            return True
        st = self._stream(key)
        if st is not None:
            st.expires = self._deadline(ttl)
            return True
        return False

    async def compare_and_set(self, key: str, expected: bytes | None, value: bytes | None, ttl: float | None = None) -> bool:
        current = self._live(key)
        if isinstance(current, int):
            current = str(current).encode()
        if current != expected:
            return False
        if value is None:
            self._values.pop(key, None)
        else:
            self._values[key] = (bytes(value), self._deadline(ttl))
            self._wrote()
        return True

    async def incr(self, key: str, ttl: float | None = None) -> int:
        v = self._live(key)
        n = (int(v) if v is not None else 0) + 1
        self._values[key] = (n, self._deadline(ttl) if ttl is not None else (self._values.get(key, (0, None))[1] if v is not None else None))
        self._wrote()
        return n

    # ---------------------------------------------------------------- streams

    def _stream(self, name: str) -> _Stream | None:
        st = self._streams.get(name)
        if st is not None and st.expires is not None and st.expires <= time.monotonic():
            del self._streams[name]
            st.changed.set()
            return None
        return st

    async def append(self, stream: str, data: bytes, *, maxlen: int = 1000, ttl: float | None = None) -> str:
        st = self._stream(stream)
        if st is None:
            st = self._streams[stream] = _Stream()
        st.seq += 1
        st.entries.append((st.seq, bytes(data)))
        while len(st.entries) > maxlen:
            st.entries.popleft()
        if ttl is not None:
            st.expires = self._deadline(ttl)
        ev, st.changed = st.changed, asyncio.Event()
        ev.set()
        self._wrote()
        return str(st.seq)

    async def append_batch(self, items: list[tuple[str, int | None, bytes]], *, maxlen: int = 1000,
                           ttl: float | None = None, ttls: Mapping[str, float] | None = None,
                           within: float = 0.0) -> list[str]:
        out = []  # in process there is no round trip to share: ``within`` changes nothing
        for stream, seq, data in items:
            life = ttl if ttls is None else ttls.get(stream, ttl)
            if seq is not None:
                st = self._stream(stream)
                if st is None:
                    st = self._streams[stream] = _Stream()
                if seq <= st.seq:
                    raise ValueError(f"entry {seq} is not after {st.seq} in {stream!r}")
                st.seq = seq - 1
            out.append(await self.append(stream, data, maxlen=maxlen, ttl=life))
        return out

    def entry_id(self, seq: int) -> str:
        return str(seq)

    async def read_after(self, stream: str, after: str | None, count: int = 1000) -> list[Entry]:
        st = self._stream(stream)
        if st is None:
            return []
        n = _seq(after)
        out: list[Entry] = []
        for seq, data in st.entries:
            if seq > n:
                out.append((str(seq), data))
                if len(out) >= count:
                    break
        return out

    async def follow(self, stream: str, after: str | None) -> AsyncIterator[Entry]:
        if after is None:
            st = self._stream(stream)
            after = str(st.seq) if st is not None else "0"
        while True:
            st = self._stream(stream)
            if st is None:
                st = self._streams[stream] = _Stream()  # followed before its first entry
            changed = st.changed
            batch = await self.read_after(stream, after)
            for entry in batch:
                after = entry[0]
                yield entry
            if not batch:
                await changed.wait()

    async def last_id(self, stream: str) -> str | None:
        st = self._stream(stream)
        return str(st.entries[-1][0]) if st is not None and st.entries else None

    async def drop_stream(self, stream: str) -> None:
        st = self._streams.pop(stream, None)
        if st is not None:
            st.changed.set()

    # --------------------------------------------------------------- channels

    async def publish(self, channel: str, data: bytes) -> int:
        subs = self._subs.get(channel)
        if not subs:
            return 0
        for s in list(subs):
            s.put(bytes(data))
        return len(subs)

    async def subscribe(self, channel: str) -> _Sub:
        sub = _Sub(self, channel)
        self._subs.setdefault(channel, set()).add(sub)
        return sub

    def _unsubscribe(self, channel: str, sub: _Sub) -> None:
        subs = self._subs.get(channel)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[channel]

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        for subs in list(self._subs.values()):
            for s in list(subs):
                await s.aclose()

    def __repr__(self) -> str:
        return "MemoryStore()"


def _seq(entry_id: str | None) -> int:
    if entry_id is None:
        return 0
    try:
        return int(entry_id.partition("-")[0])
    except ValueError:
        return 0


