"""The one HTTP layer in front of both HTTP endpoints (plain JSON-RPC and MCP Streamable HTTP).

Each check a request passes before its endpoint sees it is one small ASGI wrapper here, in
Starlette's style: an ASGI callable wrapping an inner app, configured by explicit constructor
parameters. :func:`http_layer` composes them, the same way around both endpoints, so the two
cannot differ. Outermost first:

====================  ==============================================================================
``Lifespan``          the ASGI lifespan (enter/leave the app's lifespan); non-HTTP scopes end here
``ResourceMetadata``  RFC 9728 metadata documents of the bearer auth (public: no Host, Origin or token check)
``HostOriginCheck``   ``Host`` (``X-Forwarded-Host`` from a trusted proxy), then ``Origin``: 403
``BearerAuthentication``  ``Authorization: Bearer``: 401 / 403 / 503; the principal -> ``current_principal``
``Route``             the path (404) and the method (405 with ``Allow``)
``ContentNegotiation``  ``Content-Type: application/json`` (415), ``Accept`` (406)
``Busy``              the server-wide admission is full: 503 with ``Retry-After``, before the body is read
``BodyLimit``         the whole body: 413 beyond the bound, 408 after the deadline; handed on in one message
``RequestContext``    ``current_headers`` for the endpoint and everything it calls
====================  ==============================================================================

A refusal is a fixed JSON-RPC error object (:func:`~.asgi.error_body`): nothing from the request
or an exception. Its ``id`` follows the endpoint's protocol (``null_id``: JSON-RPC 2.0 sends
``"id": null``, MCP omits it).

Wrappers whose check needs no I/O return their inner app's awaitable instead of awaiting it, so
the checks cost a call each, not a coroutine each. They are ASGI callables for any framework
that awaits ``app(scope, receive, send)`` (Starlette, FastAPI); to serve one directly with
uvicorn, put it inside an ``async def`` app, as :class:`~.http.JSONRPCHTTPApp` does.

Also here: :func:`is_json` (the one Content-Type rule), :func:`acceptable` (the one Accept
parser), :func:`wait_disconnect` and :func:`until_disconnect` (the one
"wait for this or the client's disconnect" helper).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..admission import Admission
from ..request_context import current_headers, current_principal
from .asgi import (
    LOCAL_HOSTS,
    ASGIApp,
    BearerAuth,
    HTTPRefusal,
    HTTPSecurity,
    Message,
    Network,
    Receive,
    RequestHeaders,
    Scope,
    Send,
    header,
    header_index,
    parse_networks,
    refuse,
    refuse_busy,
    respond,
)

__all__ = [
    "http_layer",
    "Lifespan",
    "ResourceMetadata",
    "HostOriginCheck",
    "BearerAuthentication",
    "Route",
    "ContentNegotiation",
    "Busy",
    "BodyLimit",
    "RequestContext",
    "not_found",
    "JSON",
    "SSE",
    "is_json",
    "acceptable",
    "wait_disconnect",
    "until_disconnect",
    "too_large_refusal",
]

#: The media types the endpoints read and answer with.
JSON = b"application/json"
SSE = b"text/event-stream"

LifespanContext = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


# ------------------------------------------------------------------ the builder


def http_layer(endpoint: ASGIApp, *, security: HTTPSecurity, admission: Admission, max_message_bytes: int,
               path: str | None, methods: Iterable[str], produces: Mapping[str, Iterable[bytes]], null_id: bool,
               may_free: Callable[[Scope], bool] | None = None, lifespan: LifespanContext | None = None,
               on_shutdown: Callable[[], Awaitable[None]] | None = None) -> ASGIApp:
    """``endpoint`` behind every check of ``security``, in the order of this module's table.

    ``max_message_bytes``: the endpoint's own message bound (the body bound is the smaller of it
    and ``security.max_body_bytes``); ``path`` (None: any) and ``methods``: what the endpoint
    serves; ``produces``: per method, the media types it answers with (Accept); ``null_id``:
    the protocol's id rule for refusals; ``may_free``: see :class:`Busy`; ``lifespan`` and
    ``on_shutdown``: see :class:`Lifespan`. Returns the outermost wrapper's bound ``__call__``.
    """
    bound = min(security.max_body_bytes, max_message_bytes)
    # The limit a 413 names is the one that bounds: the protocol's own (as stdio names it) or the HTTP one.
    limit = "max_message_bytes" if bound == max_message_bytes else "max_body_bytes"
    app: ASGIApp = RequestContext(endpoint)
    app = BodyLimit(app, max_bytes=bound, limit=limit, timeout=security.body_timeout, null_id=null_id)
    app = Busy(app, admission=admission, may_free=may_free, null_id=null_id)
    app = ContentNegotiation(app, produces=produces, null_id=null_id)
    app = Route(app, path=path, methods=methods, null_id=null_id)
    auth = security.auth
    if auth is not None:
        app = BearerAuthentication(app, auth=auth, null_id=null_id)
    app = HostOriginCheck(app, allowed_hosts=security.allowed_hosts, allow_ip_hosts=security.allow_ip_hosts,
                          trusted_proxies=security.trusted_proxies, allowed_origins=security.allowed_origins,
                          allow_localhost_origins=security.allow_localhost_origins, null_id=null_id)
    documents = auth.metadata_documents() if auth is not None else {}
    if documents:
        app = ResourceMetadata(app, documents=documents)
    return _entry(Lifespan(app, context=lifespan, on_shutdown=on_shutdown))


def _entry(app: ASGIApp) -> ASGIApp:
    """What to call to run ``app``: an object's ``__call__`` bound once (calling the object itself
    looks the method up again on every request, at every layer)."""
    if isinstance(app, (types.FunctionType, types.MethodType)):
        return app
    for klass in type(app).__mro__:
        func = klass.__dict__.get("__call__")
        if func is not None:
            return types.MethodType(func, app) if isinstance(func, types.FunctionType) else app
    return app


# ------------------------------------------------------------------ lifespan


class Lifespan:
    """Answers the ASGI lifespan protocol; passes ``http`` scopes on; ends any other (websockets).

    At startup it enters ``context()`` when given (a failure is ``lifespan.startup.failed`` with
    the exception's message, for the server's log: the server stops, never half started); at
    shutdown it awaits ``on_shutdown()`` and then leaves the context.
    """

    def __init__(self, app: ASGIApp, *, context: LifespanContext | None = None,
                 on_shutdown: Callable[[], Awaitable[None]] | None = None) -> None:
        self.app = app
        self._next = _entry(app)
        self.context = context
        self.on_shutdown = on_shutdown
        self._entered: contextlib.AbstractAsyncContextManager[Any] | None = None

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        kind = scope["type"]
        if kind == "http":
            return self._next(scope, receive, send)
        if kind == "lifespan":
            return self._lifespan(receive, send)
        return _nothing()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                if self.context is not None:
                    cm = self.context()
                    try:
                        await cm.__aenter__()
                    except Exception as exc:
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                    self._entered = cm
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if self.on_shutdown is not None:
                    await self.on_shutdown()
                entered, self._entered = self._entered, None
                if entered is not None:
                    await entered.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _nothing() -> None:
    return None  # returning closes a websocket this layer does not serve


# ------------------------------------------------------------------ RFC 9728 metadata

_METADATA_HEADERS = [
    (b"cache-control", b"public, max-age=3600"),
    # Public by design (RFC 9728): browser-based clients on other origins must be able to read it.
    (b"access-control-allow-origin", b"*"),
]


class ResourceMetadata:
    """Serves the protected-resource metadata documents (``{path: JSON}``, RFC 9728) to anyone:
    GET and HEAD (200), OPTIONS (204, CORS preflight), other methods 405. Every other request
    goes to ``app``. Outside the Host/Origin check on purpose: the document is public, and
    browser clients of other origins read it."""

    def __init__(self, app: ASGIApp, *, documents: Mapping[str, bytes]) -> None:
        self.app = app
        self._next = _entry(app)
        self.documents = dict(documents)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http":
            doc = self.documents.get(scope.get("path", ""))
            if doc is not None:
                return self._serve(scope["method"], doc, send)
        return self._next(scope, receive, send)

    @staticmethod
    async def _serve(method: str, doc: bytes, send: Send) -> None:
        if method in ("GET", "HEAD"):
            await respond(send, 200, doc if method == "GET" else b"", extra=_METADATA_HEADERS)
        elif method == "OPTIONS":
            await respond(send, 204, extra=[*_METADATA_HEADERS, (b"access-control-allow-methods", b"GET, HEAD, OPTIONS")])
        else:
            await respond(send, 405, extra=[(b"allow", b"GET, HEAD, OPTIONS")])


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI app answering 404 to every HTTP request (the inner app of a lone :class:`ResourceMetadata`)."""
    if scope["type"] == "http":
        await respond(send, 404)


# ------------------------------------------------------------------ Host and Origin


def _host_name(value: str) -> str:
    """``example.com:8000`` -> ``example.com``; ``[::1]:80`` -> ``[::1]``."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end != -1 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_ip_literal(name: str) -> bool:
    """Whether a host name (as :func:`_host_name` gives it) is an IP address: ``192.0.2.1``, ``[2001:db8::1]``."""
    if name.startswith("["):
        if not name.endswith("]"):
            return False
        name = name[1:-1]
    elif ":" in name:
        return False  # an IPv6 address in Host must be bracketed
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _last(value: bytes) -> str:
    """The last element of a comma-separated header: the one the nearest (trusted) proxy added."""
    return value.decode("latin-1").rsplit(",", 1)[-1].strip()


class HostOriginCheck:
    """Refuses (403) a request whose ``Host`` is not allowed (DNS rebinding: a browser tricked
    into resolving ``evil.example`` to this server still sends ``Host: evil.example``), then one
    whose ``Origin``, when present, is not allowed. Requests without ``Origin`` (non-browser
    clients) pass the second check.

    ``allowed_hosts``: names (any port; None: no Host check); ``allow_ip_hosts``: any IP-address
    literal too; ``trusted_proxies``: client addresses or networks whose ``X-Forwarded-Host``
    (checked instead of ``Host``) and ``X-Forwarded-Proto`` (the scope's ``scheme`` from then on)
    are believed; everyone else's are ignored. ``allowed_origins``: exact origins, ``"*"`` for any;
    ``allow_localhost_origins``: ``http(s)://localhost|127.0.0.1|[::1]`` on any port too.
    """

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str] | None = LOCAL_HOSTS, allow_ip_hosts: bool = False,
                 trusted_proxies: Iterable[str] = (), allowed_origins: Iterable[str] = (),
                 allow_localhost_origins: bool = True, null_id: bool = True) -> None:
        self.app = app
        self._next = _entry(app)
        self.hosts = None if allowed_hosts is None else frozenset(_host_name(h) for h in allowed_hosts)
        self.allow_ip_hosts = allow_ip_hosts
        self.proxies: tuple[Network, ...] = parse_networks(trusted_proxies)
        self.origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins)
        self.allow_localhost_origins = allow_localhost_origins
        self.null_id = null_id
        # Verdicts by header value (clients send a handful of distinct values; bounded anyway).
        self._host_ok: dict[bytes, bool] = {}
        self._origin_ok: dict[bytes, bool] = {}
        self._trusted: dict[str, bool] = {}

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self._next(scope, receive, send)
        hx = scope.get("sturdyrpc.headers")
        if hx is None:
            hx = header_index(scope)
        if self.hosts is not None:
            host = hx.get(b"host")
            if self.proxies and self._from_proxy(scope):
                host = self._forwarded(scope, host)
            ok = self._host_ok.get(host) if host is not None else False
            if ok is None:
                assert host is not None
                ok = self._host_allowed(host)
                _remember(self._host_ok, host, ok, 1024)
            if not ok:
                return refuse(send, HTTPRefusal(403, -32600, "Forbidden: host not allowed"), with_null_id=self.null_id)
        elif self.proxies and self._from_proxy(scope):
            self._forwarded(scope, None)
        origin = hx.get(b"origin")
        if origin is not None:
            ok = self._origin_ok.get(origin)
            if ok is None:
                ok = self._origin_allowed(origin.decode("latin-1"))
                _remember(self._origin_ok, origin, ok, 1024)
            if not ok:
                return refuse(send, HTTPRefusal(403, -32600, "Forbidden: origin not allowed"), with_null_id=self.null_id)
        return self._next(scope, receive, send)

    def _from_proxy(self, scope: Scope) -> bool:
        client = scope.get("client")
        if not client:
            return False  # a Unix socket or an unknown peer: nobody to trust
        addr = str(client[0])
        hit = self._trusted.get(addr)
        if hit is None:
            try:
                ip = ipaddress.ip_address(addr)
            except ValueError:
                hit = False
            else:
                hit = any(ip in net for net in self.proxies)
            _remember(self._trusted, addr, hit, 4096)
        return hit

    @staticmethod
    def _forwarded(scope: Scope, host: bytes | None) -> bytes | None:
        """What a trusted proxy says: the scope's scheme from ``X-Forwarded-Proto``; the host to
        check from ``X-Forwarded-Host`` (``host`` when it sent none)."""
        proto = header(scope, b"x-forwarded-proto")
        if proto is not None:
            p = _last(proto).lower()
            if p in ("http", "https"):
                scope["scheme"] = p
        fwd = header(scope, b"x-forwarded-host")
        if fwd is None:
            return host
        return _last(fwd).encode("latin-1")

    def _host_allowed(self, raw: bytes) -> bool:
        assert self.hosts is not None
        name = _host_name(raw.decode("latin-1"))
        return name in self.hosts or (self.allow_ip_hosts and _is_ip_literal(name))

    def _origin_allowed(self, origin: str) -> bool:
        o = origin.strip().rstrip("/").lower()
        if "*" in self.origins or o in self.origins:
            return True
        if self.allow_localhost_origins:
            try:
                parts = urlsplit(o)
                host = parts.hostname
            except ValueError:
                return False
            if parts.scheme in ("http", "https") and host is not None:
                name = f"[{host}]" if ":" in host else host
                return name in LOCAL_HOSTS
        return False


def _remember(cache: dict[Any, bool], key: Any, value: bool, bound: int) -> None:
    if len(cache) < bound:
        cache[key] = value


# ------------------------------------------------------------------ bearer authentication


class BearerAuthentication:
    """Requires ``Authorization: Bearer <token>`` (never from the query string) and verifies it
    with ``auth`` (a :class:`~.asgi.BearerAuth`: 401 with ``WWW-Authenticate`` without a token,
    with another scheme, an empty or a refused one; ``auth`` may answer 403 or 503 itself). The
    principal it stands for is :data:`~sturdyrpc.request_context.current_principal` while the
    inner app runs: the one way both endpoints learn it."""

    def __init__(self, app: ASGIApp, *, auth: BearerAuth, null_id: bool = True) -> None:
        self.app = app
        self._next = _entry(app)
        self.auth = auth
        self.null_id = null_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._next(scope, receive, send)
            return
        try:
            principal = await self._principal(scope)
        except HTTPRefusal as refusal:
            await refuse(send, refusal, with_null_id=self.null_id)
            return
        token = current_principal.set(principal)
        try:
            await self._next(scope, receive, send)
        finally:
            current_principal.reset(token)

    async def _principal(self, scope: Scope) -> Any:
        auth = self.auth
        raw = header(scope, b"authorization")
        if raw is None:
            raise HTTPRefusal(401, -32600, "Unauthorized", [(b"www-authenticate", auth.challenge(None))])
        scheme, _, token = raw.decode("latin-1").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer":
            # Another scheme carries no bearer credentials at all: no error code (RFC 6750 §3.1).
            raise HTTPRefusal(401, -32600, "Unauthorized", [(b"www-authenticate", auth.challenge(None))])
        if not token:
            raise HTTPRefusal(401, -32600, "Unauthorized", [(b"www-authenticate", auth.challenge("invalid_request"))])
        try:
            principal = await auth.principal(token)
        except HTTPRefusal:
            raise  # the auth's own answer (403 insufficient_scope, 503 cannot verify now)
        except Exception:  # a verifier bug must not become a 500 that leaks a traceback
            principal = None
        if principal is None:
            raise HTTPRefusal(401, -32600, "Unauthorized", [(b"www-authenticate", auth.challenge("invalid_token"))])
        return principal


# ------------------------------------------------------------------ path and method


class Route:
    """404 for another path than ``path`` (None: any path; a trailing slash does not count), 405
    with ``Allow`` for a method not in ``methods``."""

    def __init__(self, app: ASGIApp, *, path: str | None, methods: Iterable[str], null_id: bool = True) -> None:
        self.app = app
        self._next = _entry(app)
        self.path = path
        self._path = path.rstrip("/") if path is not None else None
        ordered = tuple(dict.fromkeys(methods))
        self.methods = frozenset(ordered)
        self._allow = ", ".join(ordered).encode("ascii")
        self.null_id = null_id

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self._next(scope, receive, send)
        if self._path is not None:
            path = scope.get("path", "")
            if path != self.path and path.rstrip("/") != self._path:
                return refuse(send, HTTPRefusal(404, -32600, "Not found"), with_null_id=self.null_id)
        if scope["method"] not in self.methods:
            return refuse(send, HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", self._allow)]),
                          with_null_id=self.null_id)
        return self._next(scope, receive, send)


# ------------------------------------------------------------------ content negotiation

_JSON_CACHE: dict[bytes, bool] = {}
_ACCEPT_CACHE: dict[tuple[bytes | None, tuple[bytes, ...]], tuple[bool, ...]] = {}


def is_json(content_type: bytes | None) -> bool:
    """The one Content-Type rule of both endpoints: ``application/json``, parameters aside (both
    JSON-RPC over HTTP and MCP name exactly that type; ``application/foo+json`` is another format)."""
    if content_type is None:
        return False
    hit = _JSON_CACHE.get(content_type)
    if hit is None:
        hit = content_type.split(b";", 1)[0].strip().lower() == JSON
        _remember(_JSON_CACHE, content_type, hit, 256)
    return hit


def acceptable(accept: bytes | None, offered: tuple[bytes, ...]) -> tuple[bool, ...]:
    """The one Accept parser: for each media type of ``offered``, whether an ``Accept`` value
    admits it (RFC 9110 §12.5.1: the most specific matching range decides, ``q=0`` excludes; no
    header admits anything). Cached, as clients send the same few values."""
    key = (accept, offered)
    hit = _ACCEPT_CACHE.get(key)
    if hit is not None:
        return hit
    if accept is None:
        out = tuple(True for _ in offered)
    else:
        ranges: dict[bytes, float] = {}
        for part in accept.split(b","):
            media, *params = part.split(b";")
            q = 1.0
            for p in params:
                name, _, value = p.partition(b"=")
                if name.strip().lower() == b"q":
                    try:
                        q = float(value.strip())
                    except ValueError:
                        q = 1.0
            m = media.strip().lower()
            if m:
                ranges[m] = max(q, ranges[m]) if m in ranges else q
        out = tuple(_admits(ranges, t) for t in offered)
    _remember(_ACCEPT_CACHE, key, out, 256)  # type: ignore[arg-type]
    return out


def _admits(ranges: dict[bytes, float], media: bytes) -> bool:
    kind = media.split(b"/", 1)[0]
    for r in (media, kind + b"/*", b"*/*"):
        if r in ranges:
            return ranges[r] > 0
    return False


class ContentNegotiation:
    """415 unless a request with a body (``body_methods``) says ``Content-Type: application/json``
    (:func:`is_json`); 406 unless its ``Accept`` admits one of the media types the endpoint
    answers that method with (``produces``, :func:`acceptable`).

    What it found is handed on in ``scope["sturdyrpc.media"]``: for each type of
    ``produces[method]``, in order, whether the client accepts it (the endpoint picks its
    reply's type from it, without parsing ``Accept`` again).
    """

    def __init__(self, app: ASGIApp, *, produces: Mapping[str, Iterable[bytes]], body_methods: Iterable[str] = ("POST",),
                 null_id: bool = True) -> None:
        self.app = app
        self._next = _entry(app)
        self.produces = {m: tuple(types) for m, types in produces.items()}
        self.body_methods = frozenset(body_methods)
        self.null_id = null_id
        # Verdicts by header value: clients send the same few (bounded all the same).
        self._ctype_ok: dict[bytes | None, bool] = {}
        self._media: dict[tuple[str, bytes | None], tuple[bool, ...]] = {}

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self._next(scope, receive, send)
        method = scope["method"]
        hx = scope.get("sturdyrpc.headers")
        if hx is None:
            hx = header_index(scope)
        if method in self.body_methods:
            ctype = hx.get(b"content-type")
            ok = self._ctype_ok.get(ctype)
            if ok is None:
                ok = is_json(ctype)
                _remember(self._ctype_ok, ctype, ok, 256)
            if not ok:
                return refuse(send, HTTPRefusal(415, -32600, "Unsupported Media Type: Content-Type must be application/json"),
                              with_null_id=self.null_id)
        offered = self.produces.get(method)
        if offered is not None:
            key = (method, hx.get(b"accept"))
            media = self._media.get(key)
            if media is None:
                media = acceptable(key[1], offered)
                if len(self._media) < 256:
                    self._media[key] = media
            if True not in media:
                return refuse(send, HTTPRefusal(406, -32600, "Not Acceptable: the Accept header excludes every media type of the response"),
                              with_null_id=self.null_id)
            scope["sturdyrpc.media"] = media
        return self._next(scope, receive, send)


# ------------------------------------------------------------------ the busy 503


class Busy:
    """503 with ``Retry-After`` (:func:`~.asgi.refuse_busy`) for a request with a body
    (``methods``) while ``admission`` is full, before the body is read: a busy server spends
    nothing on it. An endpoint refuses with the same answer later when a POST needs more slots
    than are free.

    ``may_free(scope)``, when given, names the requests let through while full because they may
    carry what running requests need to finish (MCP: a session's POST may hold only a
    cancellation or the client's answer to a server-to-client request, which take no slot;
    refusing those would leave a full server full). The endpoint counts their slots once decoded.
    """

    def __init__(self, app: ASGIApp, *, admission: Admission, methods: Iterable[str] = ("POST",),
                 may_free: Callable[[Scope], bool] | None = None, null_id: bool = True) -> None:
        self.app = app
        self._next = _entry(app)
        self.admission = admission
        self.methods = frozenset(methods)
        self.may_free = may_free
        self.null_id = null_id

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http" and self.admission.full and scope["method"] in self.methods and (
                self.may_free is None or not self.may_free(scope)):
            return refuse_busy(send, with_null_id=self.null_id)
        return self._next(scope, receive, send)


# ------------------------------------------------------------------ the body


def too_large_refusal(limit: str, bound: int) -> HTTPRefusal:
    """The one 413: the error stdio sends for a message over its bound (same message and data)."""
    return HTTPRefusal(413, -32600, "Message too large", data={"limit": limit, "max": bound})


_TOO_SLOW = HTTPRefusal(408, -32600, "Request body not received in time", [(b"connection", b"close")])


class BodyLimit:
    """Reads the whole body of a request with one (``methods``) and hands it to ``app`` as the
    first message of its ``receive`` (later calls are the client's: its disconnect).

    - more than ``max_bytes`` (declared by ``Content-Length``, or counted) -> 413
      (:func:`too_large_refusal` naming ``limit``), read no further;
    - not complete ``timeout`` seconds after the app started reading it (None: no deadline) ->
      408 with ``Connection: close``: the server closes the connection and frees what it held
      (a client dripping its body a byte at a time holds nothing for longer);
    - the client gone before the end -> nothing is answered.

    The deadline is checked by one timer for every request of the wrapper (a tick of at most a
    second), not one per request: a request's body may take up to a tick longer than ``timeout``.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, limit: str = "max_body_bytes", timeout: float | None = None,
                 methods: Iterable[str] = ("POST",), null_id: bool = True) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.app = app
        self._next = _entry(app)
        self.max_bytes = max_bytes
        self.limit = limit
        self.timeout = timeout
        self.methods = frozenset(methods)
        self.null_id = null_id
        self._deadlines = _Deadlines(timeout) if timeout is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in self.methods:
            await self._next(scope, receive, send)
            return
        hx = scope.get("sturdyrpc.headers")
        declared = (hx if hx is not None else header_index(scope)).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_bytes
            except ValueError:
                too_large = False  # the server rejects malformed framing itself; counting below still bounds it
            if too_large:
                await refuse(send, too_large_refusal(self.limit, self.max_bytes), with_null_id=self.null_id)
                return
        deadlines = self._deadlines
        task = None
        if deadlines is not None:
            loop = asyncio.get_running_loop()
            task = asyncio.current_task(loop)
            if task is not None:
                if loop is not deadlines.loop or deadlines.handle is None:
                    deadlines.start(loop)
                deadlines.due[task] = deadlines.generation
        try:
            first = await receive()
            # The usual request: its body whole in the first message, handed on as it came.
            msg: Message | None = first
            if first["type"] != "http.request" or first.get("more_body", False) or len(first.get("body", b"")) > self.max_bytes:
                msg = await self._rest(first, receive)
        except asyncio.CancelledError:
            if task is not None and deadlines is not None and deadlines.expired(task):
                await refuse(send, _TOO_SLOW, with_null_id=self.null_id)
                return
            raise
        finally:
            if task is not None and deadlines is not None:
                deadlines.due.pop(task, None)
        if msg is None:
            return  # the client went away
        if msg is _TOO_LARGE:
            await refuse(send, too_large_refusal(self.limit, self.max_bytes), with_null_id=self.null_id)
            return
        await self._next(scope, _Replay(msg, receive), send)

    async def _rest(self, msg: Message, receive: Receive) -> Message | None:
        """The body from ``msg`` on, whole (None: the client left; :data:`_TOO_LARGE`: over the bound)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            if msg["type"] != "http.request":
                return None
            chunk = msg.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.max_bytes:
                    return _TOO_LARGE
                chunks.append(chunk)
            if not msg.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            msg = await receive()


_TOO_LARGE: Message = {"type": "http.request", "body": b"", "more_body": False}


class _Replay:
    """A ``receive`` whose first message is the whole body; then the client's own."""

    __slots__ = ("first", "receive")

    def __init__(self, first: Message, receive: Receive) -> None:
        self.first: Message | None = first
        self.receive = receive

    async def __call__(self) -> Message:
        first = self.first
        if first is not None:
            self.first = None
            return first
        return await self.receive()


class _Deadlines:
    """Cancels the tasks whose body read overran ``timeout``, with one timer for all of them.

    A timer (or ``asyncio.timeout``) per request costs more than the rest of a small request's
    checks together; a body deadline needs no precision beyond a tick. A reader registers in
    :attr:`due` with the current :attr:`generation` (a tick count) and takes itself out when done.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.tick = min(1.0, timeout / 4)
        self.ticks = max(1, round(timeout / self.tick))  # whole ticks in the timeout
        self.generation = 0
        self.due: dict[asyncio.Task[Any], int] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self.handle: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the timer on ``loop`` (a timer handle belongs to one loop: an app served again on
        a new loop starts afresh)."""
        if loop is not self.loop:
            if self.handle is not None:
                self.handle.cancel()
            self.loop, self.due, self._expired, self.handle = loop, {}, set(), None
        if self.handle is None:
            self.handle = loop.call_later(self.tick, self._check)

    def expired(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` was cancelled by its deadline (its cancellation is then withdrawn)."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        # Only this deadline's cancellation: one from elsewhere (shutdown) still stands.
        return task.uncancel() == 0

    def _check(self) -> None:
        self.handle = None
        self.generation += 1
        # Registered ``ticks`` generations ago or earlier: at least ``timeout`` has passed.
        limit = self.generation - self.ticks - 1
        for task, gen in list(self.due.items()):
            if gen <= limit:
                del self.due[task]
                self._expired.add(task)
                task.cancel()
        self._expired = {t for t in self._expired if not t.done()}
        if self.due and self.loop is not None and not self.loop.is_closed():
            self.handle = self.loop.call_later(self.tick, self._check)


# ------------------------------------------------------------------ headers for the endpoint


class RequestContext:
    """Sets :data:`~sturdyrpc.request_context.current_headers` (the request's headers, decoded
    when first read) while ``app`` runs: the one place both endpoints get it from."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._next = _entry(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = current_headers.set(RequestHeaders(scope.get("headers", ())))
        try:
            await self._next(scope, receive, send)
        finally:
            current_headers.reset(token)


# ------------------------------------------------------------------ disconnects


async def wait_disconnect(receive: Receive) -> None:
    """Return once the client has gone (``http.disconnect``), discarding anything else it sends."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


async def until_disconnect(fut: asyncio.Future[Any], receive: Receive, *, grace: float = 0.0) -> bool:
    """Wait for ``fut`` or the client's disconnect, whichever comes first: True when ``fut`` is
    done, False when the client left first (``fut`` is left as it is: the caller decides). With
    ``grace``, no disconnect watcher runs for the first ``grace`` seconds, so that quick answers
    never pay for one."""
    if grace > 0:
        done, _ = await asyncio.wait((fut,), timeout=grace)
        if done:
            return True
    watcher = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait((fut, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    return fut.done()

