"""Small ASGI building blocks shared by the HTTP transports (plain JSON-RPC and MCP Streamable HTTP).

No framework: the apps here are bare ASGI callables, so any ASGI server (uvicorn, hypercorn,
daphne) or framework (Starlette ``Mount``, FastAPI ``app.mount``) can run them.

Security checks every request goes through, in this order (:meth:`HTTPSecurity.check`):

1. ``Host`` against an allow-list (DNS rebinding: a browser tricked into resolving
   ``evil.example`` to 127.0.0.1 still sends ``Host: evil.example``). Localhost names by default.
2. ``Origin``, when present, against an allow-list (403). Localhost origins by default;
   requests without ``Origin`` (non-browser clients) pass.
3. Bearer-token authentication when an :class:`BearerAuth` is configured (401 with
   ``WWW-Authenticate``). Tokens are read from the ``Authorization`` header only, never
   from the query string.

Error bodies are fixed JSON-RPC error objects: nothing from an exception or from the
request is echoed back.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .. import codec

__all__ = [
    "Scope",
    "Receive",
    "Send",
    "ASGIApp",
    "BearerAuth",
    "HTTPSecurity",
    "HTTPRefusal",
    "LOCAL_HOSTS",
    "request_headers",
    "RequestHeaders",
    "header",
    "header_index",
    "read_body",
    "respond",
    "error_body",
    "refuse",
    "refuse_busy",
    "SERVER_BUSY",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Host names a local server answers to by default.
LOCAL_HOSTS: frozenset[str] = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})



def _decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in raw:
        name = bytes(k).decode("latin-1").lower()
        value = bytes(v).decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


class RequestHeaders(Mapping[str, str]):
    """A request's headers as a read-only ``str`` mapping (lower-case names, repeated ones
    joined with ", "), decoded on first use: most requests never look at them (``ctx.headers``)."""

    __slots__ = ("_raw", "_d")

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._d: dict[str, str] | None = None

    def _dict(self) -> dict[str, str]:
        d = self._d
        if d is None:
            d = self._d = _decode_headers(self._raw)
        return d

    def __getitem__(self, name: str) -> str:
        return self._dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __contains__(self, name: object) -> bool:
        return name in self._dict()

    def get(self, name: str, default: Any = None) -> Any:
        return self._dict().get(name, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RequestHeaders):
            other = other._dict()
        return self._dict() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RequestHeaders({self._dict()!r})"


def request_headers(scope: Scope) -> RequestHeaders:
    """The request's headers as a ``str`` mapping (lower-case names, repeated ones joined with
    ", "), decoded when first read."""
    return RequestHeaders(scope.get("headers", ()))


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower-case bytes), or None.

    The headers are indexed once per request (kept in the scope) since every request looks up
    several of them.
    """
    index = scope.get("sturdyrpc.headers")
    if index is None:
        index = header_index(scope)
    return index.get(name)


def header_index(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers as ``{lower-case name: first value}``, built once per request."""
    index: dict[bytes, bytes] | None = scope.get("sturdyrpc.headers")
    if index is None:
        # ASGI header names are lower-case bytes already. Reversed: the first occurrence wins.
        index = scope["sturdyrpc.headers"] = dict(reversed(scope["headers"]))
    return index


def error_body(code: int, message: str, *, with_null_id: bool = True) -> bytes:
    """A JSON-RPC error response as bytes, built only from constants chosen by the caller."""
    obj: dict[str, Any] = {"jsonrpc": "2.0", "error": {"code": code, "message": message}}
    if with_null_id:
        obj["id"] = None
    return codec.encode(obj)


async def respond(send: Send, status: int, body: bytes = b"", content_type: bytes | None = b"application/json",
                  extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Send a whole response in one go."""
    length = (b"content-length", b"%d" % len(body))
    if body and content_type is not None:
        headers = [(b"content-type", content_type), length, *extra]
    else:
        headers = [length, *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyTooLarge(Exception):
    """The request body passed the configured limit."""


class Disconnected(Exception):
    """The client went away before the body was complete."""


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing (:class:`BodyTooLarge`) beyond ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before reading anything.
    """
    declared = header(scope, b"content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BodyTooLarge
        except ValueError:
            pass  # the server already rejects malformed framing; keep counting below
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise Disconnected
        chunk = msg.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
        if not msg.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


Verifier = Callable[[str], Any]


@dataclass
class BearerAuth:
    """Bearer-token authentication hook.

    ``verify(token)`` (sync or async) returns the principal the token stands for, or None when
    the token is invalid. Principals must compare equal across requests of the same user (a user
    id string, a frozen dataclass): MCP sessions are bound to the principal that opened them. ``realm`` and ``resource_metadata`` (the OAuth protected-resource
    metadata URL, RFC 9728) go into the ``WWW-Authenticate`` challenge of a 401.
    """

    verify: Verifier
    realm: str = "sturdyrpc"
    resource_metadata: str | None = None

    def challenge(self, error: str | None) -> bytes:
        parts = [f'Bearer realm="{self.realm}"']
        if error is not None:
            parts.append(f'error="{error}"')
        if self.resource_metadata is not None:
            parts.append(f'resource_metadata="{self.resource_metadata}"')
        return ", ".join(parts).encode("latin-1")

    async def principal(self, token: str) -> Any:
        result = self.verify(token)
        if inspect.isawaitable(result):
            result = await result
        return result


class HTTPRefusal(Exception):
    """An HTTP-level refusal: status, fixed JSON-RPC error code and message, extra headers."""

    def __init__(self, status: int, code: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = list(headers)


def _host_name(value: str) -> str:
    """``example.com:8000`` -> ``example.com``; ``[::1]:80`` -> ``[::1]``."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end != -1 else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass
class HTTPSecurity:
    """What every HTTP request must pass before anything else happens.

    - ``allowed_hosts``: host names (any port) the ``Host`` header may carry; None switches the
      check off (behind a reverse proxy that already validates it). Default: localhost names.
    - ``allowed_origins``: exact origins (``https://app.example.com``) browsers may call from,
      in addition to localhost origins when ``allow_localhost_origins`` is true. ``"*"`` allows
      any origin (only sensible behind authentication).
    - ``max_body_bytes``: larger bodies are answered 413 without being read.
    - ``auth``: a :class:`BearerAuth`, or None for no authentication.
    """

    allowed_hosts: Iterable[str] | None = LOCAL_HOSTS
    allowed_origins: Iterable[str] = ()
    allow_localhost_origins: bool = True
    max_body_bytes: int = 4 * 1024 * 1024
    auth: BearerAuth | None = None
    _hosts: frozenset[str] | None = field(init=False, repr=False)
    _origins: frozenset[str] = field(init=False, repr=False)
    _host_ok: dict[bytes, bool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._host_ok = {}
        self._hosts = None if self.allowed_hosts is None else frozenset(_host_name(h) for h in self.allowed_hosts)
        self._origins = frozenset(o.rstrip("/").lower() for o in self.allowed_origins)

    def origin_allowed(self, origin: str) -> bool:
        o = origin.strip().rstrip("/").lower()
        if "*" in self._origins or o in self._origins:
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

    async def check(self, scope: Scope) -> Any:
        """Raise :class:`HTTPRefusal` unless the request may proceed; return the principal (or None)."""
        self.check_origin(scope)
        if self.auth is None:
            return None
        return await self.authenticate(scope)

    def check_origin(self, scope: Scope) -> None:
        """The part of :meth:`check` that needs no I/O: ``Host`` and ``Origin`` (then, when
        :attr:`auth` is set, :meth:`authenticate`)."""
        if self._hosts is not None:
            host = header(scope, b"host")
            ok = self._host_ok.get(host) if host is not None else False
            if ok is None:
                assert host is not None
                ok = _host_name(host.decode("latin-1")) in self._hosts
                if len(self._host_ok) < 1024:  # a handful of distinct values in practice; bounded anyway
                    self._host_ok[host] = ok
            if not ok:
                raise HTTPRefusal(403, -32600, "Forbidden: host not allowed")
        origin = header(scope, b"origin")
        if origin is not None and not self.origin_allowed(origin.decode("latin-1")):
            raise HTTPRefusal(403, -32600, "Forbidden: origin not allowed")

    async def authenticate(self, scope: Scope) -> Any:
        """The principal of the request's bearer token (None without :attr:`auth`); raises
        :class:`HTTPRefusal` (401, 403, 503) when there is none to be had."""
        auth = self.auth
        if auth is None:
            return None
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


async def refuse(send: Send, refusal: HTTPRefusal, *, with_null_id: bool = True) -> None:
    """Answer an :class:`HTTPRefusal` with its status and a fixed JSON-RPC error body."""
    await respond(send, refusal.status, error_body(refusal.code, refusal.message, with_null_id=with_null_id), extra=refusal.headers)


#: The JSON-RPC error code of a request refused because the server is at its
#: ``Limits.max_server_in_flight`` (an implementation-defined server error, -32000..-32099).
SERVER_BUSY = -32000


async def refuse_busy(send: Send, *, with_null_id: bool = True, retry_after: int = 1) -> None:
    """Answer ``503 Service Unavailable`` with ``Retry-After`` and a fixed JSON-RPC error (id null):
    the server-wide cap of running requests is full and nothing of this request was run.

    Shared by the HTTP apps (plain JSON-RPC and Streamable HTTP): hold one
    :class:`~sturdyrpc.admission.Admission` of ``Limits.max_server_in_flight`` per app, call this
    when a POST arrives while it is ``full``, and take one slot per request that will run.
    """
    await respond(
        send,
        503,
        error_body(SERVER_BUSY, "Server busy: too many requests in flight, retry later", with_null_id=with_null_id),
        extra=[(b"retry-after", str(retry_after).encode("ascii"))],
    )
