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
``BodyLimit``         the whole body: 413 beyond the bound, 408 after the deadline; handed on in ``scope["sturdyrpc.body"]``;
                      then ``current_headers`` for the endpoint and everything it calls
====================  ==============================================================================

A refusal is a fixed JSON-RPC error object (:func:`~sturdyrpc.transports.asgi.error_body`): nothing from the request
or an exception. Its ``id`` follows the endpoint's protocol (``null_id``: JSON-RPC 2.0 sends
``"id": null``, MCP omits it).

Wrappers whose check needs no I/O return their inner app's awaitable instead of awaiting it, so
the checks cost a call each, not a coroutine each. They are ASGI callables for any framework
that awaits ``app(scope, receive, send)`` (Starlette, FastAPI); to serve one directly with
uvicorn, put it inside an ``async def`` app, as :class:`~sturdyrpc.transports.http.JSONRPCHTTPApp` does.

Also here: :func:`is_json` (the one Content-Type rule), :func:`acceptable` (the one Accept
parser), :func:`wait_disconnect` and :func:`until_disconnect` (the one "wait for this or the
client's disconnect" helper). Modules: ``lifecycle`` (lifespan, disconnects), ``guards``
(metadata, Host/Origin, bearer), ``negotiation`` (path, method, media types), ``body`` (busy,
bound, deadline, the request's headers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from ...admission import Admission
from ..asgi import ASGIApp, HTTPSecurity, Scope
from .body import BodyLimit, Busy, too_large_refusal
from .guards import BearerAuthentication, HostOriginCheck, ResourceMetadata, not_found
from .lifecycle import Lifespan, LifespanContext, bound_call, until_disconnect, wait_disconnect
from .negotiation import JSON, SSE, ContentNegotiation, Route, acceptable, is_json

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
    "not_found",
    "JSON",
    "SSE",
    "is_json",
    "acceptable",
    "wait_disconnect",
    "until_disconnect",
    "too_large_refusal",
]


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
    app: ASGIApp = BodyLimit(endpoint, max_bytes=bound, limit=limit, timeout=security.body_timeout, null_id=null_id)
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
    return bound_call(Lifespan(app, context=lifespan, on_shutdown=on_shutdown))
