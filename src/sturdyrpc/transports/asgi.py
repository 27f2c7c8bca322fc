"""Small ASGI building blocks shared by the HTTP transports (plain JSON-RPC and MCP Streamable HTTP).

No framework: the apps here are bare ASGI callables, so any ASGI server (uvicorn, hypercorn,
daphne) or framework (Starlette ``Mount``, FastAPI ``app.mount``) can run them.

- :class:`HTTPSecurity`: what every request must pass (``Host``/``Origin`` allow-lists, trusted
  proxies, body bound and deadline, bearer authentication); the wrappers of
  :mod:`sturdyrpc.transports.http_layer` apply it, the same way in front of both endpoints.
- :class:`BearerAuth`: the bearer-token step (a verifier, the 401 challenge, and the RFC 9728
  metadata documents a resource server publishes); :class:`sturdyrpc.auth.ResourceServer`
  is one.
- Responses and refusals: :func:`respond`, :class:`HTTPRefusal`, :func:`refuse`,
  :func:`refuse_busy`, :func:`error_body`. Error bodies are fixed JSON-RPC error objects:
  nothing from an exception or from the request is echoed back.
"""

from __future__ import annotations

import inspect
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from .. import codec

__all__ = [
    "Scope",
    "Receive",
    "Send",
    "ASGIApp",
    "BearerAuth",
    "Presentation",
    "HTTPSecurity",
    "HTTPRefusal",
    "LOCAL_HOSTS",
    "request_headers",
    "RequestHeaders",
    "header",
    "header_index",
    "respond",
    "error_body",
    "refuse",
    "refuse_busy",
    "SERVER_BUSY",
    "DEFAULT_BODY_TIMEOUT",
    "parse_networks",
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


def error_body(code: int, message: str, *, with_null_id: bool = True, data: Any = None) -> bytes:
    """A JSON-RPC error response as bytes, built only from constants chosen by the caller.

    ``with_null_id``: JSON-RPC 2.0 wants ``"id": null`` when the id is unknown; MCP's schema has
    no null id (2025-11-25 omits it), so the MCP endpoint passes False.
    """
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    obj: dict[str, Any] = {"jsonrpc": "2.0", "error": err}
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


Verifier = Callable[[str], Any]


@dataclass(frozen=True)
class Presentation:
    """How a token came with a request: the ``Authorization`` scheme (lower-case: ``bearer`` or
    ``dpop``), the token, every ``DPoP`` header value, the request's method and URL (without query)."""

    scheme: str
    token: str
    proofs: tuple[str, ...]
    method: str
    url: str


@dataclass
class BearerAuth:
    """Bearer-token authentication hook.

    ``verify(token)`` (sync or async) returns the principal the token stands for, or None when
    the token is invalid. Principals must compare equal across requests of the same user (a user
    id string, a frozen dataclass): MCP sessions are bound to the principal that opened them. ``realm`` and ``resource_metadata`` (the OAuth protected-resource
    metadata URL, RFC 9728) go into the ``WWW-Authenticate`` challenge of a 401.

    The HTTP layer (:class:`~sturdyrpc.transports.http_layer.BearerAuthentication`) calls
    :meth:`principal` and :meth:`challenge` on every request, and publishes what
    :meth:`metadata_documents` returns; :class:`sturdyrpc.auth.ResourceServer` overrides all three.
    """

    verify: Verifier
    realm: str = "sturdyrpc"
    resource_metadata: str | None = None

    def challenge(self, error: str | None) -> bytes:
        """The ``WWW-Authenticate`` value of a 401 (``error``: None, ``invalid_request``, ``invalid_token``)."""
        parts = [f'Bearer realm="{self.realm}"']
        if error is not None:
            parts.append(f'error="{error}"')
        if self.resource_metadata is not None:
            parts.append(f'resource_metadata="{self.resource_metadata}"')
        return ", ".join(parts).encode("latin-1")

    async def principal(self, token: str) -> Any:
        """The principal of ``token``, or None to refuse it (401); may raise :class:`HTTPRefusal`
        for another answer (403, 503)."""
        result = self.verify(token)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def check_presentation(self, principal: Any, presented: Presentation) -> list[tuple[bytes, bytes]]:
        """Whether ``principal``'s token may be used as ``presented``; raise :class:`HTTPRefusal`
        if not. Returns the headers to add to the answer (a DPoP server's current nonce, RFC
        9449 §9), usually none. A plain hook knows only bearer tokens: a ``DPoP`` scheme
        carries none (401 without an error code, RFC 6750 §3.1);
        :class:`sturdyrpc.auth.ResourceServer` checks DPoP proofs for bound tokens."""
        if presented.scheme != "bearer":
            raise HTTPRefusal(401, -32600, "Unauthorized", [(b"www-authenticate", self.challenge(None))])
        return []

    def metadata_documents(self) -> Mapping[str, bytes]:
        """The OAuth protected-resource metadata (RFC 9728) this resource publishes, by path:
        served to anyone, without a token (it is how a client learns where to get one). A
        plain hook publishes none (its ``resource_metadata`` URL points elsewhere)."""
        return {}


class HTTPRefusal(Exception):
    """An HTTP-level refusal: status, fixed JSON-RPC error code and message, extra headers, and
    optional fixed ``data`` (a limit's name and bound)."""

    def __init__(self, status: int, code: int, message: str, headers: Iterable[tuple[bytes, bytes]] = (),
                 data: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = list(headers)
        self.data = data


#: Seconds a client has to send a whole request body by default (then 408; ``HTTPSecurity.body_timeout``).
DEFAULT_BODY_TIMEOUT = 30.0


@dataclass
class HTTPSecurity:
    """What every HTTP request must pass before anything else happens (both endpoints alike:
    :func:`sturdyrpc.transports.http_layer.http_layer` builds the checks from it).

    - ``allowed_hosts``: host names (any port) the ``Host`` header may carry. Default: localhost
      names. None switches the check off (only behind a proxy that validates it itself; prefer
      ``trusted_proxies``).
    - ``allow_ip_hosts``: also accept any IP-address literal as ``Host`` (``192.0.2.7:8000``,
      ``[2001:db8::1]``). DNS rebinding needs a name the attacker controls, so an address is
      safe to accept; names still need ``allowed_hosts``. ``sturdyrpc run/demo --allow-remote``
      sets it.
    - ``trusted_proxies``: client addresses or networks (``"10.0.0.0/8"``, ``"127.0.0.1"``) whose
      ``X-Forwarded-Host`` and ``X-Forwarded-Proto`` are believed: the host checked is the
      forwarded one, and the scope's ``scheme`` the forwarded protocol. Anyone else's
      ``X-Forwarded-*`` headers are ignored.
    - ``allowed_origins``: exact origins (``https://app.example.com``) browsers may call from,
      in addition to localhost origins when ``allow_localhost_origins`` is true. ``"*"`` allows
      any origin (only sensible behind authentication).
    - ``max_body_bytes``: larger bodies are answered 413 without being read (the endpoint's
      ``Limits.max_message_bytes`` bounds them too: the smaller applies).
    - ``body_timeout``: seconds a client has to send the whole body once the request's head is in
      (408 and the connection closed after it); None: no deadline.
    - ``auth``: a :class:`BearerAuth`, or None for no authentication.
    """

    allowed_hosts: Iterable[str] | None = LOCAL_HOSTS
    allowed_origins: Iterable[str] = ()
    allow_localhost_origins: bool = True
    max_body_bytes: int = 4 * 1024 * 1024
    auth: BearerAuth | None = None
    trusted_proxies: Iterable[str] = ()
    allow_ip_hosts: bool = False
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT

    def __post_init__(self) -> None:
        # Iterables are kept as tuples: the checks are built from them once, and a generator
        # given here must not be spent by the first reader.
        if self.allowed_hosts is not None:
            self.allowed_hosts = tuple(self.allowed_hosts)
        self.allowed_origins = tuple(self.allowed_origins)
        self.trusted_proxies = tuple(self.trusted_proxies)
        parse_networks(self.trusted_proxies)  # a bad address fails here, not on the first request
        if self.body_timeout is not None and not self.body_timeout > 0:
            raise ValueError("body_timeout must be positive (or None)")
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be positive")


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """``"10.0.0.0/8"``, ``"127.0.0.1"``, ``"::1"`` -> networks (an address is a network of one);
    ValueError names an entry that is neither."""
    out: list[Network] = []
    for e in entries:
        try:
            out.append(ipaddress.ip_network(str(e).strip().strip("[]"), strict=False))
        except ValueError:
            raise ValueError(f"not an IP address or network: {e!r}") from None
    return tuple(out)


async def refuse(send: Send, refusal: HTTPRefusal, *, with_null_id: bool = True) -> None:
    """Answer an :class:`HTTPRefusal` with its status and a fixed JSON-RPC error body."""
    body = error_body(refusal.code, refusal.message, with_null_id=with_null_id, data=refusal.data)
    await respond(send, refusal.status, body, extra=refusal.headers)


#: The JSON-RPC error code of a request refused because the server is at its
#: ``Limits.max_server_in_flight`` (an implementation-defined server error, -32000..-32099).
SERVER_BUSY = -32000


async def refuse_busy(send: Send, *, with_null_id: bool = True, retry_after: int = 1) -> None:
    """Answer ``503 Service Unavailable`` with ``Retry-After`` and a fixed JSON-RPC error (id null):
    the server-wide cap of running requests is full and nothing of this request was run.

    The one busy answer of both HTTP endpoints: the layer's
    :class:`~sturdyrpc.transports.http_layer.Busy` sends it before the body is read when the
    server-wide :class:`~sturdyrpc.admission.Admission` is full, and an endpoint sends it later
    when a POST needs more slots than are free.
    """
    await respond(
        send,
        503,
        error_body(SERVER_BUSY, "Server busy: too many requests in flight, retry later", with_null_id=with_null_id),
        extra=[(b"retry-after", str(retry_after).encode("ascii"))],
    )
