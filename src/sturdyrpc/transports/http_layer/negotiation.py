"""What an endpoint takes: its path and methods, JSON in (the one Content-Type rule), a reply
type the client accepts (the one Accept parser)."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping

from ..asgi import ASGIApp, HTTPRefusal, Receive, Scope, Send, header_index, refuse
from .lifecycle import bound_call, remember

__all__ = ["Route", "ContentNegotiation", "JSON", "SSE", "is_json", "acceptable"]

#: The media types the endpoints read and answer with.
JSON = b"application/json"
SSE = b"text/event-stream"


# ------------------------------------------------------------------ path and method


class Route:
    """404 for another path than ``path`` (None: any path; a trailing slash does not count), 405
    with ``Allow`` for a method not in ``methods``."""

    def __init__(self, app: ASGIApp, *, path: str | None, methods: Iterable[str], null_id: bool = True) -> None:
        self.app = app
        self._next = bound_call(app)
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
_UNKNOWN: object = object()
_ACCEPT_CACHE: dict[tuple[bytes | None, tuple[bytes, ...]], tuple[bool, ...]] = {}


def is_json(content_type: bytes | None) -> bool:
    """The one Content-Type rule of both endpoints: ``application/json``, parameters aside (both
    JSON-RPC over HTTP and MCP name exactly that type; ``application/foo+json`` is another format)."""
    if content_type is None:
        return False
    hit = _JSON_CACHE.get(content_type)
    if hit is None:
        hit = content_type.split(b";", 1)[0].strip().lower() == JSON
        remember(_JSON_CACHE, content_type, hit, 256)
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
    remember(_ACCEPT_CACHE, key, out, 256)
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
        self._next = bound_call(app)
        self.produces = {m: tuple(types) for m, types in produces.items()}
        self.body_methods = frozenset(body_methods)
        self.null_id = null_id
        # Verdicts by (method, Content-Type, Accept): clients send the same few (bounded all the same).
        self._verdicts: dict[tuple[str, bytes | None, bytes | None], HTTPRefusal | tuple[bool, ...] | None] = {}

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self._next(scope, receive, send)
        hx = scope.get("sturdyrpc.headers")
        if hx is None:
            hx = header_index(scope)
        key = (scope["method"], hx.get(b"content-type"), hx.get(b"accept"))
        verdict = self._verdicts.get(key, _UNKNOWN)
        if verdict is _UNKNOWN:
            verdict = self._verdict(*key)
            remember(self._verdicts, key, verdict, 256)
        if type(verdict) is tuple:
            scope["sturdyrpc.media"] = verdict
        elif verdict is not None:
            return refuse(send, verdict, with_null_id=self.null_id)  # type: ignore[arg-type]
        return self._next(scope, receive, send)

    def _verdict(self, method: str, ctype: bytes | None, accept: bytes | None) -> HTTPRefusal | tuple[bool, ...] | None:
        """The refusal for a request with these headers, or what it accepts of ``produces[method]``
        (None: the method produces nothing negotiated)."""
        if method in self.body_methods and not is_json(ctype):
            return HTTPRefusal(415, -32600, "Unsupported Media Type: Content-Type must be application/json")
        offered = self.produces.get(method)
        if offered is None:
            return None
        media = acceptable(accept, offered)
        if True not in media:
            return HTTPRefusal(406, -32600, "Not Acceptable: the Accept header excludes every media type of the response")
        return media
