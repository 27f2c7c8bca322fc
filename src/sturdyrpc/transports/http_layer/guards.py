"""The HTTP layer's guards: the RFC 9728 metadata (public), Host and Origin, bearer authentication."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ...request_context import current_principal
from ..asgi import (
    LOCAL_HOSTS,
    ASGIApp,
    BearerAuth,
    HTTPRefusal,
    Message,
    Network,
    Presentation,
    Receive,
    Scope,
    Send,
    header,
    header_index,
    parse_networks,
    refuse,
    respond,
)
from .lifecycle import bound_call, remember

__all__ = ["ResourceMetadata", "not_found", "HostOriginCheck", "BearerAuthentication"]

_UNKNOWN: Any = object()  # no verdict cached yet


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
        self._next = bound_call(app)
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
        self._next = bound_call(app)
        self.hosts = None if allowed_hosts is None else frozenset(_host_name(h) for h in allowed_hosts)
        self.allow_ip_hosts = allow_ip_hosts
        self.proxies: tuple[Network, ...] = parse_networks(trusted_proxies)
        self.origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins)
        self.allow_localhost_origins = allow_localhost_origins
        self.null_id = null_id
        # Verdicts by (host, origin) as sent: clients send a handful of distinct pairs (bounded anyway).
        self._verdicts: dict[tuple[bytes | None, bytes | None], HTTPRefusal | None] = {}
        self._trusted: dict[str, bool] = {}

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http":
            return self._next(scope, receive, send)
        hx = scope.get("sturdyrpc.headers")
        if hx is None:
            hx = header_index(scope)
        host = hx.get(b"host")
        if self.proxies and self._from_proxy(scope):
            host = self._forwarded(scope, host)
        key = (host, hx.get(b"origin"))
        refusal = self._verdicts.get(key, _UNKNOWN)
        if refusal is _UNKNOWN:
            refusal = self._verdict(*key)
            remember(self._verdicts, key, refusal, 1024)
        if refusal is None:
            return self._next(scope, receive, send)
        return refuse(send, refusal, with_null_id=self.null_id)

    def _verdict(self, host: bytes | None, origin: bytes | None) -> HTTPRefusal | None:
        """The refusal of a request with this host (the forwarded one from a trusted proxy) and
        ``Origin`` (None: allowed)."""
        if self.hosts is not None and (host is None or not self._host_allowed(host)):
            return HTTPRefusal(403, -32600, "Forbidden: host not allowed")
        if origin is not None and not self._origin_allowed(origin.decode("latin-1")):
            return HTTPRefusal(403, -32600, "Forbidden: origin not allowed")
        return None

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
            remember(self._trusted, addr, hit, 4096)
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


# ------------------------------------------------------------------ bearer authentication


class BearerAuthentication:
    """Requires ``Authorization: Bearer <token>`` (never from the query string) and verifies it
    with ``auth`` (a :class:`~sturdyrpc.transports.asgi.BearerAuth`: 401 with ``WWW-Authenticate`` without a token,
    with another scheme, an empty or a refused one; ``auth`` may answer 403 or 503 itself). The
    principal it stands for is :data:`~sturdyrpc.request_context.current_principal` while the
    inner app runs: the one way both endpoints learn it."""

    def __init__(self, app: ASGIApp, *, auth: BearerAuth, null_id: bool = True) -> None:
        self.app = app
        self._next = bound_call(app)
        self.auth = auth
        self.null_id = null_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._next(scope, receive, send)
            return
        try:
            principal, extra = await self._principal(scope)
        except HTTPRefusal as refusal:
            await refuse(send, refusal, with_null_id=self.null_id)
            return
        if extra:
            send = _adding_headers(send, extra)
        token = current_principal.set(principal)
        try:
            await self._next(scope, receive, send)
        finally:
            current_principal.reset(token)

    async def _principal(self, scope: Scope) -> tuple[Any, list[tuple[bytes, bytes]]]:
        """The request's principal, and the headers its answer carries (see ``check_presentation``)."""
        auth = self.auth
        raw = header(scope, b"authorization")
        if raw is None:
            raise HTTPRefusal(401, -32600, "Unauthorized", [(b"www-authenticate", auth.challenge(None))])
        scheme, _, token = raw.decode("latin-1").partition(" ")
        token, scheme = token.strip(), scheme.lower()
        if scheme not in ("bearer", "dpop"):
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
        return principal, await auth.check_presentation(principal, _presentation(scope, scheme, token))


def _adding_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """``send`` with ``extra`` headers on the response's start."""
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)
    return sending


def _presentation(scope: Scope, scheme: str, token: str) -> Presentation:
    """How the token came: with the ``DPoP`` headers and the URL the request was sent to (the
    scheme as the trusted-proxy check left it, the ``Host`` header, the path)."""
    proofs = tuple(v.decode("latin-1") for k, v in scope["headers"] if k == b"dpop")
    host = (header(scope, b"host") or b"").decode("latin-1")
    url = f"{scope.get('scheme', 'http')}://{host}{scope['path']}"  # ASGI: the path includes root_path
    return Presentation(scheme, token, proofs, str(scope.get("method", "GET")), url)
