"""The HTTP/1.1 client of ``sturdyrpc guard --url``: keep-alive connections to one upstream
endpoint, responses read as they arrive (a JSON body or an SSE stream), on asyncio and httptools.

Why not httpx, the project's client elsewhere: guard makes one upstream request per message, and
httpx spends about 0.7 ms of CPU on each (its pool looks at every connection it holds for every
request it places, and the layers between it and the socket add up), where the upstream itself
spends 0.05 ms on the whole request. This client does only what guard needs: one origin, HTTP/1.1
with keep-alive, bodies with ``Content-Length`` or chunked (httptools parses both, in C), TLS for
``https``; a connection that did not end its last response cleanly is closed, never reused.
Memory is bounded: a response whose reader falls behind stops its connection from reading.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HTTPUpstream", "UpstreamResponse", "UpstreamError"]

#: Body chunks a response holds unread before its connection stops reading.
_HIGH_WATER = 64


class UpstreamError(Exception):
    """The upstream could not be reached, or its response could not be read whole."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one response in flight on it."""

    def __init__(self) -> None:
        import httptools

        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.response: UpstreamResponse | None = None
        self._names: list[bytes] = []
        self._values: list[bytes] = []

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        import httptools

        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(UpstreamError(f"unreadable response ({exc})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.fail(UpstreamError("the connection was closed" + (f" ({type(exc).__name__})" if exc else "")))

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._names.append(name)
        self._values.append(value)

    def on_headers_complete(self) -> None:
        r = self.response
        if r is not None:
            headers = {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in zip(self._names, self._values, strict=True)}
            r._started(self._parser.get_status_code(), headers)
        self._names, self._values = [], []

    def on_body(self, body: bytes) -> None:
        r = self.response
        if r is not None:
            r._chunk(body)

    def on_message_complete(self) -> None:
        r, self.response = self.response, None
        if not self._parser.should_keep_alive():
            self.close()
        if r is not None:
            r._done()

    # -- the client's side -----------------------------------------------------------------------

    def send(self, head: bytes, body: bytes, response: UpstreamResponse) -> None:
        assert self.transport is not None and self.response is None
        self.response = response
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)

    def fail(self, exc: UpstreamError) -> None:
        """End the response in flight with ``exc`` (and the connection with it)."""
        r, self.response = self.response, None
        if r is not None:
            r._failed(exc)
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def pause(self, paused: bool) -> None:
        if self.transport is not None and not self.closed:
            (self.transport.pause_reading if paused else self.transport.resume_reading)()


class UpstreamResponse:
    """One response: ``status`` and ``headers`` (lower-case names) once :meth:`HTTPUpstream.stream`
    hands it over, then the body in :meth:`chunks` as it arrives."""

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self.status = 0
        self.headers: dict[str, str] = {}
        self._head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._body: deque[bytes] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._error: UpstreamError | None = None
        self.complete = False
        self._paused = False

    def _started(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        if not self._head.done():
            self._head.set_result(None)

    def _chunk(self, data: bytes) -> None:
        self._body.append(data)
        if len(self._body) >= _HIGH_WATER and not self._paused:
            self._paused = True
            self._conn.pause(True)
        self._notify()

    def _done(self) -> None:
        self.complete = True
        self._notify()

    def _failed(self, exc: UpstreamError) -> None:
        self._error = exc
        if not self._head.done():
            self._head.set_exception(exc)
            self._head.exception()  # seen here: whoever waits for the head gets it; nobody waiting is no error
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive; raises :class:`UpstreamError` if it breaks off."""
        while True:
            while self._body:
                yield self._body.popleft()
                if self._paused and len(self._body) < _HIGH_WATER // 2:
                    self._paused = False
                    self._conn.pause(False)
            if self.complete:
                return
            if self._error is not None:
                raise self._error
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
            self._wake = None


class _Exchange:
    """``async with upstream.stream(...) as response``: the connection goes back to the pool if
    the response was read whole, else it is closed."""

    def __init__(self, upstream: HTTPUpstream, method: str, headers: dict[str, str], body: bytes, timeout: float | None) -> None:
        self.upstream, self.method, self.headers, self.body, self.timeout = upstream, method, headers, body, timeout
        self.conn: _Connection | None = None
        self.response: UpstreamResponse | None = None

    async def __aenter__(self) -> UpstreamResponse:
        up = self.upstream
        await up._slots.acquire()
        try:
            self.conn = await up._connection()
            self.response = UpstreamResponse(self.conn)
            self.conn.send(up._head(self.method, self.headers, len(self.body)), self.body, self.response)
            if self.timeout is None:
                await self.response._head
            else:  # a timer, not wait_for: no task per request
                conn = self.conn
                timer = asyncio.get_running_loop().call_later(self.timeout, conn.fail, UpstreamError("no response within the timeout"))
                try:
                    await self.response._head
                finally:
                    timer.cancel()
        except BaseException:
            self._release(reuse=False)
            raise
        return self.response

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._release(reuse=e is None and self.response is not None and self.response.complete)

    def _release(self, *, reuse: bool) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            if reuse and not conn.closed and conn.response is None:
                self.upstream._idle.append(conn)
            else:
                conn.response = None
                conn.close()
        self.upstream._slots.release()


class HTTPUpstream:
    """Keep-alive HTTP/1.1 connections to the endpoint at ``url`` (``http://`` or ``https://``).

    ``timeout``: seconds to connect; a request waits for its response as long as :meth:`stream`'s
    ``timeout`` says (None: as long as it takes, since a server that answers in JSON sends the
    head of its answer only when a tool is done; guard's ``--deadline`` bounds that wait);
    ``max_connections``: connections open at once (more requests wait for one)."""

    def __init__(self, url: str, *, timeout: float = 30.0, max_connections: int = 512) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._authority = parts.netloc.rsplit("@", 1)[-1].encode("latin-1")
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        self.timeout = timeout
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)

    def stream(self, method: str, headers: dict[str, str], body: bytes = b"", *, timeout: float | None = None) -> _Exchange:
        """``async with upstream.stream("POST", headers, body) as response``: one request
        (``timeout``: seconds to wait for the response's head; None: no limit)."""
        return _Exchange(self, method, headers, body, timeout)

    def _head(self, method: str, headers: dict[str, str], length: int) -> bytes:
        lines = [f"{method} ".encode() + self.target.encode("latin-1") + b" HTTP/1.1", b"host: " + self._authority]
        for k, v in headers.items():
            line = f"{k}: {v}"
            if "\r" in line or "\n" in line:  # a line break would start a header (or a request) of its own
                raise UpstreamError(f"a header that cannot be sent: {k!r}")
            lines.append(line.encode("latin-1"))
        if length or method in ("POST", "PUT"):
            lines.append(b"content-length: %d" % length)
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _connection(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl), self.timeout)
        except OSError as exc:  # TimeoutError (wait_for's) is one
            raise UpstreamError(f"cannot connect to {self.host}:{self.port} ({type(exc).__name__})") from None
        return conn

    async def aclose(self) -> None:
        """Close the idle connections (those in use close when their response ends)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def __aenter__(self) -> HTTPUpstream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
