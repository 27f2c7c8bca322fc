"""OpenTelemetry for sturdyrpc: a span and a duration per request, trace context across the wire.

Follows the OpenTelemetry semantic conventions for MCP (development status) and, for plain
JSON-RPC, the JSON-RPC ones (docs/OTEL.md has the details and an example trace)::

    from sturdyrpc.otel import instrument_client, instrument_server

    instrument_server(server)            # an MCPServer, or a plain Dispatcher
    async with connect(argv) as client:
        instrument_client(client)        # an MCPClient, or a plain Peer
        await client.call_tool("echo", {"text": "hi"})   # span "tools/call echo" (CLIENT)

- the server side is one middleware, put outermost on the server's chain: a SERVER span per
  request and notification, whose parent is the caller's span, read from ``params._meta``
  (``traceparent``/``tracestate``, as the MCP trace context convention has it), else from the
  W3C headers of the HTTP request that carried it; ``mcp.server.operation.duration`` and
  ``mcp.server.session.duration`` histograms;
- the client side hangs on :attr:`sturdyrpc.peer.Peer.send_hook`: a CLIENT span per request and
  notification sent, its context put into ``params._meta`` (the HTTP client also sends it as
  W3C headers); ``mcp.client.operation.duration`` and ``mcp.client.session.duration``;
- the other direction too: what a server sends on a session (sampling, elicitation, roots,
  notifications) gets CLIENT spans, children of the request being handled, and an instrumented
  MCP client gives what it receives SERVER spans.

Nothing secret is recorded: a failure gives ``error.type`` (the JSON-RPC code, ``tool_error``,
or the exception's class name) and ``sturdyrpc.incident.id`` (the id the traceback is logged
under), never the exception's text or traceback; parameters are not recorded unless asked
(``record_params=True``); the MCP session id is recorded hashed.

Only ``opentelemetry-api`` is needed (the ``otel`` extra). Without it, or while no tracer or
meter provider is configured, :func:`instrument_server` and :func:`instrument_client` install
nothing and return None: requests take exactly the path they take without this module. This
module itself does not import OpenTelemetry until a provider is known to be configured.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from ..profile import JSONRPCProfile

if TYPE_CHECKING:
    from ..dispatch import Dispatcher
    from ..mcp.client import MCPClient
    from ..mcp.server import MCPServer
    from ..peer import Peer
    from ._instrument import ClientTelemetry, ServerTelemetry

__all__ = ["instrument_server", "instrument_client", "provider_configured", "TraceParamsProfile", "INCIDENT_ATTRIBUTE"]

#: The span attribute holding the incident id of an unexpected failure (as in the log line).
INCIDENT_ATTRIBUTE = "sturdyrpc.incident.id"

# Providers that record nothing: the API's defaults before the application sets one.
_NOOP_PROVIDERS = frozenset({"ProxyTracerProvider", "NoOpTracerProvider", "_DefaultTracerProvider",
                             "_ProxyMeterProvider", "NoOpMeterProvider", "_DefaultMeterProvider"})


def provider_configured() -> bool:
    """Whether a global tracer or meter provider that records is configured.

    False without ``opentelemetry-api``, and without importing it when nothing has (no SDK can
    have been set up then, except through the ``OTEL_PYTHON_*_PROVIDER`` variables).
    """
    if "opentelemetry.trace" not in sys.modules and "opentelemetry.metrics" not in sys.modules \
            and not os.environ.get("OTEL_PYTHON_TRACER_PROVIDER") and not os.environ.get("OTEL_PYTHON_METER_PROVIDER"):
        return False
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return False
    return type(trace.get_tracer_provider()).__name__ not in _NOOP_PROVIDERS \
        or type(metrics.get_meter_provider()).__name__ not in _NOOP_PROVIDERS


def _wanted(tracer_provider: Any, meter_provider: Any) -> bool:
    if tracer_provider is not None or meter_provider is not None:
        return True
    return provider_configured()


def instrument_server(
    server: MCPServer | Dispatcher,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    params_key: str | None = None,
    record_params: bool = False,
) -> ServerTelemetry | None:
    """Trace every request and notification ``server`` handles; returns the middleware, or None
    when nothing was installed (no provider configured and none given, or no OpenTelemetry API).

    ``server``: an :class:`~sturdyrpc.mcp.server.MCPServer` (MCP conventions) or a plain
    :class:`~sturdyrpc.dispatch.Dispatcher` (JSON-RPC conventions). ``tracer_provider`` /
    ``meter_provider``: default the global ones. ``params_key``: the params member holding the
    caller's trace context (MCP: ``_meta``; plain JSON-RPC: None, only HTTP headers, unless set;
    see :class:`TraceParamsProfile`). ``record_params=True`` records ``gen_ai.tool.call.arguments``
    and ``mcp.resource.uri``, which may hold what should not leave the server (off by default).

    Call it after configuring the SDK: whether a provider exists is decided here, once. A
    second call returns the middleware installed by the first.
    """
    if not _wanted(tracer_provider, meter_provider):
        return None
    try:
        from ._instrument import ServerTelemetry
    except ImportError:  # no opentelemetry-api (an explicit provider without it cannot happen)
        return None
    from ..mcp.server import MCPServer

    mcp = isinstance(server, MCPServer)
    dispatcher = server.dispatcher if isinstance(server, MCPServer) else server
    for mw in dispatcher.middleware_chain:
        if isinstance(mw, ServerTelemetry):
            return mw  # instrumented already: one span per request, not two
    key = params_key if params_key is not None else ("_meta" if mcp else None)
    telemetry = ServerTelemetry(mcp=mcp, params_key=key, tracer_provider=tracer_provider, meter_provider=meter_provider,
                                record_params=record_params)
    dispatcher.middleware(telemetry, outermost=True)
    return telemetry


def instrument_client(
    client: MCPClient | Peer,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    params_key: str | None = None,
    record_params: bool = False,
    network_transport: str | None = None,
) -> ClientTelemetry | None:
    """Trace every request and notification ``client`` sends; returns the hook, or None when
    nothing was installed (as :func:`instrument_server`).

    ``client``: an :class:`~sturdyrpc.mcp.client.MCPClient` (or a :class:`~sturdyrpc.peer.Peer`
    with an MCP profile: MCP conventions) or a plain Peer (JSON-RPC conventions). The span's
    context goes into ``params[params_key]`` (MCP: ``_meta``, always; plain JSON-RPC: only when
    ``params_key`` is given, and only into params that are an object). ``network_transport``
    overrides the ``network.transport`` attribute worked out from the peer's transport.

    Requests sent before this call (e.g. the handshake inside ``connect()``) are not traced.
    """
    if not _wanted(tracer_provider, meter_provider):
        return None
    try:
        from ._instrument import ClientTelemetry
    except ImportError:
        return None
    from ..mcp.client import MCPClient
    from ..mcp.profile import MCPProfile

    peer = client.peer if isinstance(client, MCPClient) else client
    if peer is None:
        raise ValueError("the client is not connected (no peer)")
    if isinstance(peer.send_hook, ClientTelemetry):
        return peer.send_hook  # instrumented already
    mcp = isinstance(client, MCPClient) or isinstance(peer.profile, MCPProfile)
    key = params_key if params_key is not None else ("_meta" if mcp else None)
    telemetry = ClientTelemetry(peer, mcp=mcp, params_key=key, tracer_provider=tracer_provider, meter_provider=meter_provider,
                                record_params=record_params, network_transport=network_transport)
    peer.send_hook = telemetry
    if mcp:
        # what the server sends us (sampling, elicitation, roots, its notifications): SERVER spans
        from ._instrument import NoticeTelemetry, ServerTelemetry

        receiving = ServerTelemetry(mcp=True, params_key=key, tracer_provider=tracer_provider, meter_provider=meter_provider,
                                    record_params=record_params)
        peer.dispatcher.middleware(receiving, outermost=True)
        # cancellation and progress, which the peer handles (or sends) itself
        peer.notice_hook = NoticeTelemetry(receiving, telemetry, telemetry.session_attrs)
    return telemetry


class TraceParamsProfile(JSONRPCProfile):
    """Plain JSON-RPC with trace context in ``params[params_key]``, hidden from handlers.

    A plain JSON-RPC handler binds params to its signature, where a trace member would be an
    unknown argument; serve with this profile (e.g. ``Peer(..., profile=TraceParamsProfile("_trace"))``)
    and handlers never see it, while the middleware (``ctx.params``) still does.
    """

    def __init__(self, params_key: str) -> None:
        self.params_key = params_key

    def params_for_handler(self, params: Any) -> Any:
        if type(params) is dict and self.params_key in params:
            params = dict(params)
            del params[self.params_key]
        return params
