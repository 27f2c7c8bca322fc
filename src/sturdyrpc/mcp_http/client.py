"""The client side of MCP Streamable HTTP, as a :class:`~sturdyrpc.peer.MessageTransport`.

Put a :class:`~sturdyrpc.peer.Peer` (or an MCP client built on one) on top of
:class:`StreamableHTTPClientTransport`: every message it sends becomes a POST, and every
message the server sends (JSON bodies, SSE events on POST streams and on the GET stream)
comes out of :meth:`receive`.

- Both response kinds (``application/json`` and ``text/event-stream``).
- Sessions: ``Mcp-Session-Id`` is taken from the initialize response and sent on every later
  request; ``DELETE`` on :meth:`close`. A 404 for a known session fails the requests in flight
  (the session ended; initialize again on a new transport).
- ``MCP-Protocol-Version`` on every request after initialize (handshake era); for 2026-07-28
  messages the version, ``Mcp-Method`` and ``Mcp-Name`` headers are derived from the body, and a
  ``notifications/cancelled`` closes the request's response stream instead of being posted.
- Resumption: when an SSE stream ends before all its responses came, the transport waits the
  server's ``retry`` delay and resumes with ``GET`` + ``Last-Event-ID`` (bounded attempts).
- The standalone GET stream is opened after initialization (405 means the server has none).
- An HTTP failure answers the affected requests with a JSON-RPC error reply, so no caller
  waits forever.
- Authorization (``auth=``, e.g. :class:`sturdyrpc.oauth.OAuthClientProvider`): its
  ``Authorization`` header (and ``DPoP`` proof, made for each request) on every request; a 401 or 403 goes to the provider, which may obtain
  a token, and the request is sent again while it says so (it bounds the retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from .. import codec
from ..framing import BadHeader, FrameTooLarge
from ..mcp.param_headers import header_values
from ..mcp.versions import META_PROTOCOL_VERSION, MODERN_VERSIONS
from ..oauth import HTTPAuth, OAuthError
from .modern import NAME_SOURCE, encode_header_value
from .sse import SSEParser

__all__ = ["StreamableHTTPClientTransport", "HTTPTransportError"]

log = logging.getLogger("sturdyrpc.http.client")


class HTTPTransportError(ConnectionError):
    """The transport is closed or the server cannot be reached."""


def _error_reply(id_: Any, message: str, code: int = -32603, data: Any = None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return codec.encode({"jsonrpc": "2.0", "id": id_, "error": err})


class StreamableHTTPClientTransport:
    """Messages over MCP Streamable HTTP to ``url``.

    ``headers``: extra headers on every request (e.g. ``Authorization``). ``client``: an
    ``httpx.AsyncClient`` to use (not closed by us); else one is made. ``open_get_stream``:
    open the standalone SSE stream after initialization. ``default_retry_ms``: the resumption
    delay when the server sent none; ``max_resume_attempts`` bounds reconnections per stream.
    ``auth``: authorization for every request (:class:`~sturdyrpc.oauth.HTTPAuth`).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        open_get_stream: bool = True,
        default_retry_ms: int = 1000,
        max_resume_attempts: int = 5,
        timeout: float = 30.0,
        auth: HTTPAuth | None = None,
    ) -> None:
        self.url = url
        self.auth = auth
        self.extra_headers = dict(headers or {})
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout, read=None))
        self.open_get_stream = open_get_stream
        self.default_retry_ms = default_retry_ms
        self.max_resume_attempts = max_resume_attempts
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        #: SEP-2243: a tool's ``Mcp-Param-*`` headers by tool name (lower-case header name ->
        #: (parameter, JSON type)), sent with each 2026-07-28 ``tools/call``; :func:`connect_http`
        #: sets it to what the client learnt from ``tools/list``.
        self.param_headers: Callable[[str], Mapping[str, tuple[str, str]] | None] | None = None
        self._inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._modern_posts: dict[tuple[type, Any], asyncio.Task[Any]] = {}
        self._closed = False
        self._get_started = False
        #: Every HTTP exchange, for tests and debugging: (method, status, content-type).
        self.exchanges: list[tuple[str, int, str]] = []

    # ------------------------------------------------------------ MessageTransport

    async def receive(self) -> bytes | FrameTooLarge | BadHeader | None:
        if self._closed and self._inbox.empty():
            return None
        return await self._inbox.get()

    async def send(self, data: bytes) -> None:
        if self._closed:
            raise HTTPTransportError("transport closed")
        try:
            obj = codec.decode(data)
        except Exception:
            obj = None
        modern = self._modern_version(obj)
        if type(obj) is dict and obj.get("method") == "notifications/cancelled":
            # 2026-07-28 over HTTP: closing the response stream IS the cancellation. (The cancel
            # notification has no _meta, so a request of ours on a modern POST is what says so.)
            params = obj.get("params")
            rid = params.get("requestId") if type(params) is dict else None
            task = self._modern_posts.pop(_key(rid), None) if type(rid) in (str, int) else None
            if task is not None:
                task.cancel()
                return
            if modern is not None:
                return
        ids = _request_ids(obj)
        if not ids:
            await self._post(data, obj, ids, modern)  # notifications and responses: 202 expected, quick
            if type(obj) is dict and obj.get("method") == "notifications/initialized":
                self._start_get_stream()
            return
        if type(obj) is dict and obj.get("method") == "initialize":
            await self._post(data, obj, ids, modern)  # the session id must be known before anything else
            return
        task = self._spawn(self._post(data, obj, ids, modern))
        if modern is not None and len(ids) == 1:
            k = _key(ids[0])
            self._modern_posts[k] = task
            task.add_done_callback(lambda t, k=k: self._modern_posts.pop(k, None))  # type: ignore[misc]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        if self.session_id is not None:
            try:
                headers = self._headers(None, None)
                if self.auth is not None:
                    headers.update(await self.auth.request_headers("DELETE", self.url))
                r = await self._client.delete(self.url, headers=headers)
                self.exchanges.append(("DELETE", r.status_code, r.headers.get("content-type", "")))
            except (httpx.HTTPError, OAuthError) as exc:
                log.debug("DELETE failed: %r", exc)
        if self._own_client:
            await self._client.aclose()
        self._inbox.put_nowait(None)

    # ------------------------------------------------------------------ internals

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _modern_version(self, obj: Any) -> str | None:
        if type(obj) is dict:
            params = obj.get("params")
            meta = params.get("_meta") if type(params) is dict else None
            v = meta.get(META_PROTOCOL_VERSION) if type(meta) is dict else None
            if type(v) is str and v in MODERN_VERSIONS:
                return v
        if self.protocol_version in MODERN_VERSIONS:
            return self.protocol_version
        return None

    def _headers(self, obj: Any, modern: str | None, *, sse_only: bool = False) -> dict[str, str]:
        h = dict(self.extra_headers)
        h["accept"] = "text/event-stream" if sse_only else "application/json, text/event-stream"
        if type(obj) is dict:
            _trace_headers(obj, h)
        if modern is not None:
            h["mcp-protocol-version"] = modern
            if type(obj) is dict and "id" in obj and type(obj.get("method")) is str:
                method = obj["method"]
                h["mcp-method"] = encode_header_value(method)
                field = NAME_SOURCE.get(method)
                params = obj.get("params")
                if field is not None and type(params) is dict and type(params.get(field)) is str:
                    h["mcp-name"] = encode_header_value(params[field])
                    if method == "tools/call" and self.param_headers is not None:
                        for header, text in header_values(self.param_headers(params[field]) or {}, params.get("arguments")).items():
                            h[header] = encode_header_value(text)
            return h
        if self.session_id is not None:
            h["mcp-session-id"] = self.session_id
        if self.protocol_version is not None:
            h["mcp-protocol-version"] = self.protocol_version
        return h

    def _deliver(self, data: bytes, waiting: set[tuple[type, Any]]) -> None:
        try:
            obj = codec.decode(data)
        except Exception:
            obj = None
        items = obj if type(obj) is list else [obj]
        for item in items:
            if type(item) is dict and "method" not in item and "id" in item:
                waiting.discard(_key(item["id"]))
                res = item.get("result")
                if self.protocol_version is None and type(res) is dict and type(res.get("protocolVersion")) is str:
                    self.protocol_version = res["protocolVersion"]
        if type(obj) is list:
            for item in obj:
                self._inbox.put_nowait(codec.encode(item))
        else:
            self._inbox.put_nowait(data)

    def _fail(self, waiting: set[tuple[type, Any]], message: str, code: int = -32603, data: Any = None) -> None:
        for k in list(waiting):
            self._inbox.put_nowait(_error_reply(k[1], message, code, data))
        waiting.clear()

    async def _post(self, data: bytes, obj: Any, ids: list[Any], modern: str | None) -> None:
        waiting = {_key(i) for i in ids}
        headers = self._headers(obj, modern)
        headers["content-type"] = "application/json"
        try:
            async with self._request("POST", headers, data) as resp:
                ctype = resp.headers.get("content-type", "")
                self.exchanges.append(("POST", resp.status_code, ctype))
                sid = resp.headers.get("mcp-session-id")
                if sid and modern is None and self.session_id is None:
                    self.session_id = sid
                if resp.status_code in (202, 204) and not waiting:
                    return
                if resp.status_code >= 400:
                    body = await resp.aread()
                    self._http_error(resp.status_code, body, waiting)
                    return
                if ctype.startswith("text/event-stream"):
                    parser = SSEParser()
                    await self._read_sse(resp, parser, waiting)
                    if waiting and modern is None:
                        await self._resume(parser, waiting)
                    if waiting:
                        self._fail(waiting, "The response stream ended before the response")
                    return
                body = await resp.aread()
                if body:
                    self._deliver(body, waiting)
                if waiting:
                    self._fail(waiting, f"HTTP {resp.status_code} without a response")
        except asyncio.CancelledError:
            raise
        except httpx.HTTPError as exc:
            self._fail(waiting, "HTTP request failed", data={"reason": type(exc).__name__})
        except OAuthError as exc:
            self._fail(waiting, f"Authorization failed: {exc}", data={"reason": "authorization", "error": exc.error})

    @contextlib.asynccontextmanager
    async def _request(self, method: str, headers: dict[str, str], content: bytes | None = None) -> AsyncIterator[httpx.Response]:
        """One request, streamed, with the auth's header; sent again while the auth says so after
        a 401 or 403 (it bounds the retries). The response yielded is the last one."""
        attempt = 0
        while True:
            sent = None
            if self.auth is not None:
                given = await self.auth.request_headers(method, self.url)
                headers = {k: v for k, v in headers.items() if k not in ("authorization", "dpop")} | given
                sent = given.get("authorization")
            async with self._client.stream(method, self.url, content=content, headers=headers) as resp:
                nonce = resp.headers.get("dpop-nonce")
                if nonce and self.auth is not None:
                    self.auth.note_dpop_nonce(self.url, nonce)  # on a success too: the next proof carries it
                if self.auth is not None and resp.status_code in (401, 403):
                    await resp.aread()
                    challenges = resp.headers.get_list("www-authenticate")
                    if await self.auth.handle_challenge(self.url, resp.status_code, challenges, sent=sent, attempt=attempt,
                                                        dpop_nonce=resp.headers.get("dpop-nonce")):
                        self.exchanges.append((method, resp.status_code, resp.headers.get("content-type", "")))
                        attempt += 1
                        continue
                yield resp
                return

    def _http_error(self, status: int, body: bytes, waiting: set[tuple[type, Any]]) -> None:
        code, message, data = -32603, f"HTTP {status}", None
        try:
            obj = codec.decode(body) if body else None
        except Exception:
            obj = None
        if type(obj) is dict and type(obj.get("error")) is dict:
            err = obj["error"]
            if type(err.get("code")) is int:
                code = err["code"]
            if type(err.get("message")) is str:
                message = err["message"]
            data = err.get("data")
            if waiting and "id" in obj and _key(obj["id"]) in waiting:
                self._deliver(body, waiting)  # a proper JSON-RPC error reply: pass it on as it is
                return
        if status == 404 and self.session_id is not None:
            message = "Session not found (HTTP 404): initialize a new session"
        self._fail(waiting, message, code, data)

    async def _read_sse(self, resp: httpx.Response, parser: SSEParser, waiting: set[tuple[type, Any]]) -> None:
        try:
            async for chunk in resp.aiter_raw():
                for ev in parser.feed(chunk):
                    if ev.event == "message":
                        self._deliver(ev.data.encode("utf-8"), waiting)
                if not waiting and resp.request.method == "POST":
                    return  # every response is in: the stream is done for us
        except httpx.HTTPError as exc:
            log.debug("SSE stream broke: %r", exc)  # resumable below when ids were sent

    async def _resume(self, parser: SSEParser, waiting: set[tuple[type, Any]]) -> None:
        attempts = 0
        while waiting and parser.last_event_id is not None and attempts < self.max_resume_attempts and not self._closed:
            attempts += 1
            delay = parser.retry if parser.retry is not None else self.default_retry_ms
            await asyncio.sleep(delay / 1000.0)  # the server's retry hint MUST be respected
            headers = self._headers(None, None, sse_only=True)
            headers["last-event-id"] = parser.last_event_id
            try:
                async with self._request("GET", headers) as resp:
                    self.exchanges.append(("GET", resp.status_code, resp.headers.get("content-type", "")))
                    if resp.status_code != 200:
                        return
                    before = parser.last_event_id
                    await self._read_sse(resp, parser, waiting)
                    if parser.last_event_id != before:
                        attempts = 0  # progress was made: the budget is per silent reconnection
            except (httpx.HTTPError, OAuthError) as exc:
                log.debug("resumption failed: %r", exc)

    def _start_get_stream(self) -> None:
        if self._get_started or not self.open_get_stream or self.session_id is None:
            return
        self._get_started = True
        self._spawn(self._get_stream())

    async def _get_stream(self) -> None:
        parser = SSEParser()
        failures = 0
        sink: set[tuple[type, Any]] = set()
        while not self._closed and failures < self.max_resume_attempts:
            headers = self._headers(None, None, sse_only=True)
            if parser.last_event_id is not None:
                headers["last-event-id"] = parser.last_event_id
            try:
                async with self._request("GET", headers) as resp:
                    self.exchanges.append(("GET", resp.status_code, resp.headers.get("content-type", "")))
                    if resp.status_code != 200:
                        return  # 405: the server offers no standalone stream
                    failures = 0
                    await self._read_sse(resp, parser, sink)
            except (httpx.HTTPError, OAuthError) as exc:
                log.debug("GET stream failed: %r", exc)
            failures += 1
            delay = parser.retry if parser.retry is not None else self.default_retry_ms
            await asyncio.sleep(delay / 1000.0)


def _trace_headers(obj: dict[str, Any], h: dict[str, str]) -> None:
    """W3C trace context headers copied from ``params._meta`` (where :mod:`sturdyrpc.otel` puts
    it), so HTTP-level tracing on the way sees the same parent as the MCP server."""
    params = obj.get("params")
    meta = params.get("_meta") if type(params) is dict else None
    if type(meta) is dict:
        for name in ("traceparent", "tracestate"):
            v = meta.get(name)
            if type(v) is str and v.isascii() and v.isprintable():
                h[name] = v


def _key(id_: Any) -> tuple[type, Any]:
    return (type(id_), id_)


def _request_ids(obj: Any) -> list[Any]:
    items = obj if type(obj) is list else [obj]
    return [m["id"] for m in items if type(m) is dict and "method" in m and "id" in m]
