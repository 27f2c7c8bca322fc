"""The Redis :class:`~.base.Store` (``redis://host:port/db``), on ``redis.asyncio``.

Records are strings (``GETEX`` reads and renews a TTL in one round trip, a Lua script does
compare-and-set), streams are Redis Streams (``XADD MAXLEN``, ``XRANGE``, ``XREAD BLOCK``),
channels share one pub/sub connection per store object. Every call is bounded by
``op_timeout`` seconds: a Redis that is down or slow gives :class:`~.base.StoreUnavailable`
(never a hang), and the next call tries again, so a worker recovers by itself when Redis returns.

Needs the ``redis`` package (``pip install 'sturdyrpc[redis]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .base import Entry, StoreUnavailable
from .resp import RespClient, RespError

__all__ = ["RedisStore"]

log = logging.getLogger("sturdyrpc.store")

T = TypeVar("T")

_CAS = """
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
elseif cur ~= ARGV[2] then
  return 0
end
if ARGV[3] == '0' then
  redis.call('DEL', KEYS[1])
elseif ARGV[5] ~= '' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[4])
end
return 1
"""

#: How long one XREAD waits for new entries before asking again (also how soon a follower
#: notices that the consumer stopped).
_BLOCK_MS = 1000


def _public_name(url: str) -> str:
    """The URL without credentials: it appears in error messages sent to clients."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class _Sub:
    def __init__(self, hub: _Hub, channel: str) -> None:
        self.hub = hub
        self.channel = channel
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(10000)
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)
            await self.hub.remove(self)


class _Hub:
    """One pub/sub connection for every channel this process listens to."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.subs: dict[str, set[_Sub]] = {}
        self.pubsub: Any = None
        self.reader: asyncio.Task[None] | None = None

    async def add(self, channel: str) -> _Sub:
        sub = _Sub(self, channel)
        first = channel not in self.subs
        self.subs.setdefault(channel, set()).add(sub)
        if first:
            try:
                if self.pubsub is None:
                    self.pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)
                await self.store.bounded(self.pubsub.subscribe(channel))
            except StoreUnavailable:
                self.subs[channel].discard(sub)
                if not self.subs[channel]:
                    del self.subs[channel]
                raise
        if self.reader is None or self.reader.done():
            # in a context of its own: the reader outlives the request that started it
            self.reader = asyncio.get_running_loop().create_task(self._read(), context=contextvars.Context())
        return sub

    async def remove(self, sub: _Sub) -> None:
        subs = self.subs.get(sub.channel)
        if subs is None:
            return
        subs.discard(sub)
        if not subs:
            del self.subs[sub.channel]
            if self.pubsub is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.pubsub.unsubscribe(sub.channel), self.store.op_timeout)

    async def _read(self) -> None:
        while self.subs:
            try:
                msg = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: redis-py resubscribes on the next read
                log.debug("pub/sub read failed: %r", exc)
                await asyncio.sleep(0.2)
                continue
            if msg is None or msg.get("type") != "message":
                continue
            ch = msg["channel"]
            ch = ch.decode() if isinstance(ch, bytes) else ch
            for sub in list(self.subs.get(ch, ())):
                with contextlib.suppress(asyncio.QueueFull):  # a stuck consumer loses messages, never blocks others
                    sub.queue.put_nowait(msg["data"])

    async def aclose(self) -> None:
        for subs in list(self.subs.values()):
            for s in list(subs):
                s.closed = True
                s.queue.put_nowait(None)
        self.subs.clear()
        if self.reader is not None:
            self.reader.cancel()
        if self.pubsub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pubsub.aclose(), self.store.op_timeout)


class RedisStore:
    """:class:`~.base.Store` on one Redis server (``shared`` is True).

    ``prefix`` is put before every key and channel (several applications can share a Redis
    database); ``op_timeout`` bounds each call in seconds; ``max_connections`` bounds the pool of
    connections for ordinary calls (a call waits for a free one, within ``op_timeout``). Live
    follows (``XREAD BLOCK``) use a pool of their own, one connection per open follow, so that
    open SSE streams never starve ordinary calls.
    """

    shared = True

    def __init__(self, url: str, *, prefix: str = "sturdyrpc:", op_timeout: float = 2.0, max_connections: int = 256) -> None:
        try:
            import redis.asyncio as aioredis
            from redis import exceptions as rexc
        except ImportError:
            # A ModuleNotFoundError naming the module: the CLI turns it into its missing-extra line.
            raise ModuleNotFoundError("the Redis store needs the redis package: pip install 'sturdyrpc[redis]'", name="redis") from None
        self.url = url
        self.name = _public_name(url)
        self.prefix = prefix
        self.op_timeout = op_timeout
        # Retries are ours (the next call); redis-py's own would stretch one call past op_timeout.
        common: dict[str, Any] = {"socket_timeout": op_timeout + _BLOCK_MS / 1000, "socket_connect_timeout": op_timeout,
                                  "retry_on_timeout": False, "health_check_interval": 0, "retry": None}
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=op_timeout, **common)
        self.client: Any = aioredis.Redis(connection_pool=pool)
        self.follower: Any = aioredis.Redis(connection_pool=aioredis.ConnectionPool.from_url(url, max_connections=100000, **common))
        self._errors: tuple[type[BaseException], ...] = (rexc.ConnectionError, rexc.TimeoutError, OSError, TimeoutError,
                                                           rexc.BusyLoadingError, RespError)
        self.raw = RespClient(url, connect_timeout=op_timeout, reply_timeout=op_timeout)
        self._hub = _Hub(self)

    def __repr__(self) -> str:
        return f"RedisStore({self.name!r})"

    async def bounded(self, aw: Awaitable[T], timeout: float | None = None) -> T:
        """Await a Redis call, turning failure or slowness into :class:`StoreUnavailable`."""
        try:
            async with asyncio.timeout(self.op_timeout if timeout is None else timeout):
                return await aw
        except self._errors as exc:
            raise StoreUnavailable(self.name, type(exc).__name__ + (f": {exc}" if str(exc) else "")) from None

    async def _raw(self, aw: Awaitable[T]) -> T:
        """:meth:`bounded` for the pipelined client, which bounds every reply itself."""
        try:
            return await aw
        except self._errors as exc:
            raise StoreUnavailable(self.name, type(exc).__name__ + (f": {exc}" if str(exc) else "")) from None

    def _k(self, key: str) -> str:
        return self.prefix + key

    # ---------------------------------------------------------------- records

    async def get(self, key: str) -> bytes | None:
        v: bytes | None = await self._raw(self.raw.call("GET", self._k(key)))
        return v

    async def get_touch(self, key: str, ttl: float) -> bytes | None:
        v: bytes | None = await self._raw(self.raw.call("GETEX", self._k(key), "PX", _ms(ttl)))
        return v

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        cmd: tuple[Any, ...] = ("SET", self._k(key), value) if ttl is None else ("SET", self._k(key), value, "PX", _ms(ttl))
        await self._raw(self.raw.call(*cmd))

    async def delete(self, *keys: str) -> int:
        if not keys:
            return 0
        n: int = await self._raw(self.raw.call("DEL", *[self._k(k) for k in keys]))
        return n

    async def touch(self, key: str, ttl: float) -> bool:
        ok = await self._raw(self.raw.call("PEXPIRE", self._k(key), _ms(ttl)))
        return bool(ok)

    async def compare_and_set(self, key: str, expected: bytes | None, value: bytes | None, ttl: float | None = None) -> bool:
        args = ["0" if expected is None else "1", expected or b"", "0" if value is None else "1", value or b"",
                "" if ttl is None else str(_ms(ttl))]
        ok = await self._raw(self.raw.call("EVAL", _CAS, 1, self._k(key), *args))
        return bool(ok)

    async def incr(self, key: str, ttl: float | None = None) -> int:
        k = self._k(key)
        cmds: list[tuple[Any, ...]] = [("INCR", k)] + ([("PEXPIRE", k, _ms(ttl))] if ttl is not None else [])
        out = await self._raw(self.raw.pipeline(cmds))
        return int(out[0])

    # ---------------------------------------------------------------- streams

    async def append(self, stream: str, data: bytes, *, maxlen: int = 1000, ttl: float | None = None) -> str:
        return (await self.append_batch([(stream, None, data)], maxlen=maxlen, ttl=ttl))[0]

    async def append_batch(self, items: list[tuple[str, int | None, bytes]], *, maxlen: int = 1000,
                           ttl: float | None = None, ttls: Mapping[str, float] | None = None,
                           within: float = 0.0) -> list[str]:
        cmds: list[tuple[Any, ...]] = []
        keys: dict[str, float | None] = {}
        for stream, seq, data in items:
            keys[stream] = ttl if ttls is None else ttls.get(stream, ttl)
            cmds.append(("XADD", self._k(stream), "MAXLEN", maxlen, "*" if seq is None else f"{seq}-0", "d", data))
        cmds.extend(("PEXPIRE", self._k(k), _ms(t)) for k, t in keys.items() if t is not None)
        out = await self._raw(self.raw.pipeline(cmds, within=within))
        return [_s(x) for x in out[: len(items)]]

    def entry_id(self, seq: int) -> str:
        return f"{seq}-0"

    async def read_after(self, stream: str, after: str | None, count: int = 1000) -> list[Entry]:
        start = "-" if after is None else "(" + after
        rows = await self._raw(self.raw.call("XRANGE", self._k(stream), start, "+", "COUNT", count))
        return [(_s(eid), _field(fields)) for eid, fields in rows or ()]

    async def follow(self, stream: str, after: str | None) -> AsyncIterator[Entry]:
        k = self._k(stream)
        cursor = "$" if after is None else after
        if cursor == "$":
            # "$" would be re-evaluated on every XREAD and lose entries between two reads
            cursor = await self.last_id(stream) or "0-0"
        while True:
            rows = await self.bounded(self.follower.xread({k: cursor}, count=1000, block=_BLOCK_MS),
                                      self.op_timeout + _BLOCK_MS / 1000)
            for _name, entries in rows or ():
                for eid, fields in entries:
                    cursor = _s(eid)
                    yield cursor, _field(fields)

    async def last_id(self, stream: str) -> str | None:
        rows = await self._raw(self.raw.call("XREVRANGE", self._k(stream), "+", "-", "COUNT", 1))
        return _s(rows[0][0]) if rows else None

    async def drop_stream(self, stream: str) -> None:
        await self._raw(self.raw.call("DEL", self._k(stream)))

    # --------------------------------------------------------------- channels

    async def publish(self, channel: str, data: bytes) -> int:
        n: int = await self._raw(self.raw.call("PUBLISH", self._k(channel), data))
        return n

    async def subscribe(self, channel: str) -> _Sub:
        return await self._hub.add(self._k(channel))

    async def ping(self) -> None:
        await self._raw(self.raw.call("PING"))

    async def aclose(self) -> None:
        self.raw.close()
        await self._hub.aclose()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.aclose(), self.op_timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.follower.aclose(), self.op_timeout)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _field(fields: Any) -> bytes:
    """The ``d`` field of a stream entry's flat [name, value, ...] list (RESP2)."""
    if isinstance(fields, dict):
        return bytes(fields.get(b"d", b""))
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == b"d":
            return bytes(fields[i + 1])
    return b""
