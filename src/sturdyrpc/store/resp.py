"""A small pipelining Redis client for the Redis store's ordinary calls (RESP2 over asyncio).

redis-py costs about 85 µs of CPU per command on asyncio; a session request needs one or two
commands, which is more than the rest of the request. Here every command goes on one connection,
replies are matched to waiters in order (Redis answers in order), and many concurrent commands
share writes and reads. Blocking reads and pub/sub stay on redis-py (:mod:`.redis`), on their
own connections, where their cost is per stream, not per request.

A connection that fails or times out is dropped; the next command connects again. So is one
that sends what cannot be a reply (:class:`RespProtocolError`: bad syntax, or arrays nested
deeper than :data:`MAX_DEPTH`): its waiting commands fail, and nothing escapes into the event
loop. Replies are parsed incrementally (:class:`ReplyParser`), so a large reply arriving in
many reads costs time linear in its size.
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
from collections import deque
from typing import Any, Protocol, cast
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["RespClient", "RespError", "RespProtocolError", "ReplyParser", "MAX_DEPTH"]


class RespError(Exception):
    """An error reply from Redis (``-ERR ...``)."""


class RespProtocolError(ConnectionError):
    """Redis sent what cannot be a reply (bad syntax, nested beyond :data:`MAX_DEPTH`): the
    connection is dropped, its waiting commands fail with this, and the next command connects
    again. A ``ConnectionError``, so the store reports it as unavailable."""


#: How deeply arrays may nest in one reply. The store's replies nest three deep (XRANGE);
#: beyond this a reply is refused rather than built.
MAX_DEPTH = 32


class ReplyParser:
    """Incremental RESP2 reply parser: :meth:`feed` bytes as they arrive, get the replies they complete.

    The position, the open arrays and a bulk string's announced length are kept between feeds,
    so every byte is looked at once, whatever the size of the reads: the work for a reply is
    linear in its size. Arrays are built with an explicit stack (no recursion), at most
    ``max_depth`` deep.
    """

    def __init__(self, max_depth: int = MAX_DEPTH) -> None:
        self.max_depth = max_depth
        self._buf = bytearray()  # bytes not yet parsed (consumed ones are dropped after each feed)
        self._scan = 0  # where the search for the current line's CRLF goes on
        self._bulk = -1  # the length of the bulk string whose header was read, or -1
        self._open: list[tuple[list[Any], int]] = []  # arrays being filled: (items, length)
        #: Set when the bytes fed cannot be a reply; the connection is to be dropped.
        self.error: RespProtocolError | None = None

    def feed(self, data: bytes) -> list[Any]:
        """The replies completed by ``data``, in order (an error reply as a :class:`RespError`
        value). Bytes that cannot be a reply set :attr:`error` (a :class:`RespProtocolError`):
        the replies completed before them are still returned, and nothing more is parsed."""
        out: list[Any] = []
        if self.error is not None:
            return out
        buf = self._buf
        buf += data
        try:
            pos = self._parse(buf, out)
        except RespProtocolError as exc:
            self.error = exc
        except ValueError:  # int() of a length or an integer
            self.error = RespProtocolError("unexpected reply from Redis: a bad number")
        else:
            if pos == len(buf):
                buf.clear()
                self._scan = 0
            elif pos:
                del buf[:pos]  # a bytearray drops its head by moving its start, not the rest
                self._scan -= pos
            return out
        buf.clear()
        return out

    def _parse(self, buf: bytearray, out: list[Any]) -> int:
        """Parse from the start of ``buf`` into ``out``; the offset of the first byte not consumed."""
        size = len(buf)
        pos = 0
        stack = self._open
        value: Any
        while True:
            if self._bulk >= 0:
                end = pos + self._bulk
                if size < end + 2:
                    return pos
                if buf[end:end + 2] != b"\r\n":
                    raise RespProtocolError("unexpected reply from Redis: a bulk string longer than announced")
                if self._bulk < 65536:
                    value = bytes(buf[pos:end])
                else:  # one copy, not a slice and then a copy of it
                    with memoryview(buf) as view:
                        value = bytes(view[pos:end])
                pos = end + 2
                self._bulk = -1
            else:
                end = buf.find(b"\r\n", pos if pos > self._scan else self._scan)
                if end < 0:
                    # What was searched is not searched again (a CR at the end may start the CRLF).
                    self._scan = size - 1 if size > pos else pos
                    return pos
                kind = buf[pos]
                if kind == 36:  # $ bulk string
                    n = int(buf[pos + 1:end])
                    pos = end + 2
                    if n >= 0:
                        self._bulk = n
                        continue
                    value = None
                elif kind == 58:  # : integer
                    value = int(buf[pos + 1:end])
                    pos = end + 2
                elif kind == 43:  # + simple string
                    value = bytes(buf[pos + 1:end])
                    pos = end + 2
                elif kind == 42:  # * array
                    n = int(buf[pos + 1:end])
                    pos = end + 2
                    if n > 0:
                        if len(stack) >= self.max_depth:
                            raise RespProtocolError(f"reply from Redis nested deeper than {self.max_depth} arrays")
                        stack.append(([], n))
                        continue
                    value = None if n < 0 else []
                elif kind == 45:  # - error
                    value = RespError(buf[pos + 1:end].decode(errors="replace"))
                    pos = end + 2
                else:
                    raise RespProtocolError(f"unexpected reply from Redis: {bytes([kind])!r}")
            # A finished value goes into the innermost open array, closing those it fills.
            while stack:
                items, n = stack[-1]
                items.append(value)
                if len(items) < n:
                    break
                stack.pop()
                value = items
            else:
                out.append(value)


def encode(args: tuple[Any, ...]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Transport(Protocol):
    """What the client needs of a transport: asyncio's, uvloop's (which is no ``asyncio.Transport``
    subclass) or any other stream transport."""

    def write(self, data: bytes) -> None: ...

    def abort(self) -> None: ...


class _Conn(asyncio.Protocol):
    """One connection: commands written per event-loop turn, replies matched to waiters in order.

    Commands sent in one turn leave in one write at its end (under load, many sessions' commands
    share a system call and a read on Redis's side). One watchdog timer per connection, not one
    per command, bounds the replies: checked every ``reply_timeout / 2`` seconds while commands
    wait, a connection whose oldest waiting command was the oldest at the previous check too
    (no reply in between) is dropped, so no command waits more than ``reply_timeout`` for
    Redis to answer the ones before it and itself."""

    def __init__(self, reply_timeout: float = 2.0) -> None:
        self.parser = ReplyParser()
        self.waiters: deque[asyncio.Future[Any]] = deque()
        self.transport: _Transport | None = None
        self.lost = False
        self.reply_timeout = reply_timeout
        self._out: list[bytes] = []
        self._soon = False  # a write at the end of this turn is scheduled
        self._later: asyncio.TimerHandle | None = None  # the write of commands that may wait
        self._watch: asyncio.TimerHandle | None = None
        self._head: asyncio.Future[Any] | None = None  # the oldest waiter at the last check

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(_Transport, transport)

    def send(self, loop: asyncio.AbstractEventLoop, commands: list[tuple[Any, ...]], within: float = 0.0) -> list[asyncio.Future[Any]]:
        """Queue ``commands`` for this turn's write; their replies' futures, in order.

        ``within`` > 0: the commands may wait up to that many seconds and leave with the next
        command sent here (one write, one read on Redis's side for both)."""
        futs = [loop.create_future() for _ in commands]
        self.waiters.extend(futs)
        self._out.extend(encode(a) for a in commands)
        if not self._soon:
            if within <= 0:
                self._soon = True
                loop.call_soon(self._flush)
            elif self._later is None:
                self._later = loop.call_later(within, self._flush)
        if self._watch is None:
            self._watch = loop.call_later(self.reply_timeout / 2, self._check)
        return futs

    def _flush(self) -> None:
        self._soon = False
        if self._later is not None:
            self._later.cancel()
            self._later = None
        out, self._out = self._out, []
        if out and not self.lost and self.transport is not None:
            self.transport.write(b"".join(out))

    def _check(self) -> None:
        self._watch = None
        if self.lost or not self.waiters:
            self._head = None
            return
        head = self.waiters[0]
        if head is self._head:
            # Redis slow or gone without a word: every waiter fails, the next command connects
            # again. (A caller that stopped waiting does not drop it: others share the connection.)
            self.abort(ConnectionError("Redis did not answer in time"))
            return
        self._head = head
        self._watch = asyncio.get_running_loop().call_later(self.reply_timeout / 2, self._check)

    def data_received(self, data: bytes) -> None:
        if self.lost:
            return
        try:
            replies = self.parser.feed(data)
        except Exception as exc:  # nothing may escape into the loop: the connection is what fails
            self.abort(RespProtocolError(f"unreadable reply from Redis ({type(exc).__name__})"))
            return
        for value in replies:
            if not self.waiters:
                self.abort(RespProtocolError("a reply from Redis that no command asked for"))
                return
            fut = self.waiters.popleft()
            if not fut.done():  # a waiter that timed out still owns its place in the order
                if isinstance(value, RespError):
                    fut.set_exception(value)
                else:
                    fut.set_result(value)
        if self.parser.error is not None:
            self.abort(self.parser.error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort(ConnectionError("connection to Redis lost"))

    def abort(self, exc: Exception) -> None:
        self.lost = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._later is not None:
            self._later.cancel()
            self._later = None
        self._out = []
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()


class RespClient:
    """Commands to the Redis server of ``url`` (``redis://``, ``rediss://``, ``unix://``), on one
    pipelined connection opened on first use."""

    def __init__(self, url: str, *, connect_timeout: float = 2.0, reply_timeout: float = 2.0) -> None:
        parts = urlsplit(url)
        self.scheme = parts.scheme.lower()
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 6379
        self.path = parts.path
        query = parse_qs(parts.query)
        db = parts.path.strip("/") if self.scheme != "unix" else (query.get("db") or ["0"])[0]
        self.db = int(db or 0)
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        self.connect_timeout = connect_timeout
        self.reply_timeout = reply_timeout
        self._conn: _Conn | None = None
        self._connecting: asyncio.Future[_Conn] | None = None

    async def _connect(self) -> _Conn:
        conn = _Conn(self.reply_timeout)
        try:
            await self._open(conn)
        except BaseException:
            conn.abort(ConnectionError("connection to Redis failed"))  # no half-open connection stays behind
            raise
        return conn

    async def _open(self, conn: _Conn) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.connect_timeout):
            if self.scheme == "unix":
                await loop.create_unix_connection(lambda: conn, self.path)
            else:
                tls = ssl.create_default_context() if self.scheme == "rediss" else None
                await loop.create_connection(lambda: conn, self.host, self.port, ssl=tls)
            hello: list[tuple[Any, ...]] = []
            if self.password is not None:
                hello.append(("AUTH", self.username, self.password) if self.username else ("AUTH", self.password))
            if self.db:
                hello.append(("SELECT", self.db))
            if hello:
                await asyncio.gather(*(self._send(conn, cmd) for cmd in hello))

    async def _get(self) -> _Conn:
        conn = self._conn
        if conn is not None and not conn.lost:
            return conn
        if self._connecting is None or self._connecting.done():
            # in a context of its own: the connection (its reader's callbacks) outlives the request that opened it
            self._connecting = asyncio.get_running_loop().create_task(self._connect(), context=contextvars.Context())
        try:
            conn = await asyncio.shield(self._connecting)
        except BaseException:
            self._connecting = None
            raise
        self._conn = conn
        return conn

    def _send(self, conn: _Conn, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        return conn.send(asyncio.get_running_loop(), [args])[0]

    async def call(self, *args: Any) -> Any:
        """One command's reply (an error reply raises :class:`RespError`)."""
        return await self._send(await self._get(), args)

    async def pipeline(self, commands: list[tuple[Any, ...]], *, within: float = 0.0) -> list[Any]:
        """Several commands in one write; their replies in order (an error reply raises).
        ``within`` > 0: they may wait up to that many seconds to leave with the next command."""
        conn = await self._get()
        return list(await asyncio.gather(*conn.send(asyncio.get_running_loop(), commands, within)))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.abort(ConnectionError("closed"))
            self._conn = None
