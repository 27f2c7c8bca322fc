"""A small pipelining Redis client for the Redis store's ordinary calls (RESP2 over asyncio).

redis-py costs about 85 µs of CPU per command on asyncio; a session request needs one or two
commands, which is more than the rest of the request. Here every command goes on one connection,
replies are matched to waiters in order (Redis answers in order), and many concurrent commands
share writes and reads. Blocking reads and pub/sub stay on redis-py (:mod:`.redis`), on their
own connections, where their cost is per stream, not per request.

A connection that fails or times out is dropped; the next command connects again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["RespClient", "RespError"]


class RespError(Exception):
    """An error reply from Redis (``-ERR ...``)."""


_INCOMPLETE = object()


def _parse(buf: bytearray, pos: int) -> tuple[Any, int] | object:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return _INCOMPLETE
    kind = buf[pos]
    line = bytes(buf[pos + 1:end])
    pos = end + 2
    if kind == 36:  # $ bulk string
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            return _INCOMPLETE
        return bytes(buf[pos:pos + n]), pos + n + 2
    if kind == 58:  # : integer
        return int(line), pos
    if kind == 43:  # + simple string
        return line, pos
    if kind == 45:  # - error
        return RespError(line.decode(errors="replace")), pos
    if kind == 42:  # * array
        n = int(line)
        if n < 0:
            return None, pos
        items: list[Any] = []
        value: Any
        for _ in range(n):
            r = _parse(buf, pos)
            if r is _INCOMPLETE:
                return _INCOMPLETE
            value, pos = r  # type: ignore[misc]
            items.append(value)
        return items, pos
    raise ConnectionError(f"unexpected reply from Redis: {bytes(buf[pos - len(line) - 3:pos])!r}")


def encode(args: tuple[Any, ...]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.waiters: deque[asyncio.Future[Any]] = deque()
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        value: Any
        try:
            while self.waiters:
                r = _parse(buf, pos)
                if r is _INCOMPLETE:
                    break
                value, pos = r  # type: ignore[misc]
                fut = self.waiters.popleft()
                if not fut.done():  # a waiter that timed out still owns its place in the order
                    if isinstance(value, RespError):
                        fut.set_exception(value)
                    else:
                        fut.set_result(value)
        except (ValueError, ConnectionError) as exc:
            self.abort(ConnectionError(str(exc)))
            return
        if pos:
            del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort(ConnectionError("connection to Redis lost"))

    def abort(self, exc: Exception) -> None:
        self.lost = True
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()


def _expire(conn: _Conn, fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        conn.abort(ConnectionError("Redis did not answer in time"))


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
        conn = _Conn()
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
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            conn = await asyncio.shield(self._connecting)
        except BaseException:
            self._connecting = None
            raise
        self._conn = conn
        return conn

    def _send(self, conn: _Conn, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        return self._send_all(conn, [args])[0]

    def _send_all(self, conn: _Conn, commands: list[tuple[Any, ...]]) -> list[asyncio.Future[Any]]:
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[Any]] = []
        for _ in commands:
            fut: asyncio.Future[Any] = loop.create_future()
            conn.waiters.append(fut)
            futs.append(fut)
        assert conn.transport is not None
        conn.transport.write(b"".join(encode(a) for a in commands))
        # Redis slow or gone without a word: drop the connection (every waiter fails, the next
        # command connects again). A caller that stops waiting does not: others share the connection.
        timer = loop.call_later(self.reply_timeout, _expire, conn, futs[-1])
        futs[-1].add_done_callback(lambda _f: timer.cancel())
        return futs

    async def call(self, *args: Any) -> Any:
        """One command's reply (an error reply raises :class:`RespError`)."""
        return await self._send(await self._get(), args)

    async def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Several commands in one write; their replies in order (an error reply raises)."""
        return list(await asyncio.gather(*self._send_all(await self._get(), commands)))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.abort(ConnectionError("closed"))
            self._conn = None
