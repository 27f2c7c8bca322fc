"""The OpenTelemetry side of :mod:`sturdyrpc.otel`: imported only once a provider is configured.

:class:`ServerTelemetry` is a middleware (``async (ctx, call_next)``); :class:`ClientTelemetry`
is a :data:`~sturdyrpc.peer.SendHook`. Both describe a message the same way (:class:`_Conventions`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from .. import __version__, codec
from ..dispatch import CallNext, Context
from ..errors import INTERNAL_ERROR, RPCError, incident_of
from ..peer import Peer, PeerContext, RequestTimeout
from ..transports.memory import MemoryTransport
from ..transports.stdio import StdioTransport
from ..transports.streams import StreamTransport

__all__ = ["ServerTelemetry", "ClientTelemetry", "NoticeTelemetry", "hash_session_id", "MCP_BUCKETS", "RPC_BUCKETS"]

#: Explicit bucket boundaries (seconds) the MCP conventions give for their histograms.
MCP_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: ... and the RPC conventions for ``rpc.*.call.duration``.
RPC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)

INCIDENT = "sturdyrpc.incident.id"
_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe", "notifications/resources/updated"})
#: Span attributes that also go on the duration histograms (the others are per request: ids, URIs).
_METRIC_KEYS = frozenset({
    "mcp.method.name", "gen_ai.tool.name", "gen_ai.prompt.name", "gen_ai.operation.name", "mcp.protocol.version",
    "network.transport", "network.protocol.name", "error.type", "rpc.response.status_code", "rpc.system.name", "rpc.method",
})


@functools.lru_cache(maxsize=4096)  # one digest per session, not per request
def hash_session_id(session_id: str) -> str:
    """What ``mcp.session.id`` records: a SHA-256 digest (32 hex digits), never the id itself,
    which on HTTP is what a client presents to use the session. The same on both sides."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _type_name(exc: BaseException) -> str:
    """``error.type`` for an exception: its class's qualified name (the module too, off builtins)."""
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _extract(carrier: Mapping[str, Any]) -> otel_context.Context | None:
    """The remote span context in ``carrier``, or None (also when its values are not strings:
    whatever a client sends, telemetry never fails its request)."""
    try:
        ctx = propagate.extract(carrier)
    except Exception:
        return None
    return ctx if _span_context_of(ctx) is not None else None


def _span_context_of(ctx: otel_context.Context) -> trace.SpanContext | None:
    sc = trace.get_current_span(ctx).get_span_context()
    return sc if sc.is_valid else None


class _Conventions:
    """Names, attributes and instruments for one side (server or client) of one protocol."""

    def __init__(self, *, mcp: bool, server: bool, params_key: str | None, tracer_provider: Any, meter_provider: Any,
                 record_params: bool) -> None:
        self.mcp = mcp
        self.params_key = params_key
        self.record_params = record_params
        self.tracer = trace.get_tracer("sturdyrpc", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("sturdyrpc", __version__, meter_provider=meter_provider)
        side = "server" if server else "client"
        if mcp:
            self.duration = meter.create_histogram(
                f"mcp.{side}.operation.duration", unit="s", explicit_bucket_boundaries_advisory=MCP_BUCKETS,
                description=f"MCP request or notification duration as observed on the {'receiver' if server else 'sender'}.")
            self.session_duration: metrics.Histogram | None = meter.create_histogram(
                f"mcp.{side}.session.duration", unit="s", explicit_bucket_boundaries_advisory=MCP_BUCKETS,
                description="The duration of the MCP session as observed on the MCP " + side + ".")
        else:
            self.duration = meter.create_histogram(
                f"rpc.{side}.call.duration", unit="s", explicit_bucket_boundaries_advisory=RPC_BUCKETS,
                description=f"The duration of an {'incoming' if server else 'outgoing'} JSON-RPC call.")
            self.session_duration = None

    def describe(self, method: str, params: Any, id_: Any) -> tuple[str, dict[str, Any]]:
        """The span name and the attributes known before the call (``id_``: None for a notification)."""
        name = method
        if self.mcp:
            attrs: dict[str, Any] = {"mcp.method.name": method}
            if type(params) is dict:
                if method == "tools/call":
                    attrs["gen_ai.operation.name"] = "execute_tool"
                    tool = params.get("name")
                    if type(tool) is str:
                        name = f"{method} {tool}"
                        attrs["gen_ai.tool.name"] = tool
                    if self.record_params and type(params.get("arguments")) is dict:
                        try:
                            attrs["gen_ai.tool.call.arguments"] = codec.encode(params["arguments"]).decode()
                        except Exception:
                            pass
                elif method == "prompts/get":
                    prompt = params.get("name")
                    if type(prompt) is str:
                        name = f"{method} {prompt}"
                        attrs["gen_ai.prompt.name"] = prompt
                elif self.record_params and method in _RESOURCE_METHODS and type(params.get("uri")) is str:
                    attrs["mcp.resource.uri"] = params["uri"]
        else:
            attrs = {"rpc.system.name": "jsonrpc", "rpc.method": method}
        if id_ is not None:
            attrs["jsonrpc.request.id"] = str(id_)
        return name, attrs

    def finish(self, span: trace.Span, attrs: dict[str, Any], late: dict[str, Any], start: float, error: str | None,
               code: int | None, description: str | None, incident: str | None) -> None:
        """Set the outcome on ``span``, end it, and record the duration. ``attrs``: what the span
        started with; ``late``: what was learnt since (set now; the SDK cleans every value set)."""
        elapsed = time.perf_counter() - start
        if error is not None:
            late["error.type"] = error
            if code is not None:
                late["rpc.response.status_code"] = str(code)
            if incident is not None:
                late[INCIDENT] = incident
            span.set_status(Status(StatusCode.ERROR, description))
        if late:
            span.set_attributes(late)
            attrs.update(late)
        span.end()
        self.duration.record(elapsed, {k: v for k, v in attrs.items() if k in _METRIC_KEYS})


def _transport_attrs(transport: Any, attrs: dict[str, Any]) -> None:
    """``network.*`` for a peer's transport (nothing when it cannot be told)."""
    if isinstance(transport, StdioTransport):
        attrs["network.transport"] = "pipe"
    elif isinstance(transport, MemoryTransport):
        attrs["network.transport"] = "inproc"
    elif isinstance(transport, StreamTransport):
        sock = transport.writer.get_extra_info("socket")
        if sock is None:
            attrs["network.transport"] = "pipe"  # a subprocess's stdin/stdout
        else:
            import socket

            attrs["network.transport"] = "unix" if getattr(socket, "AF_UNIX", None) == sock.family else "tcp"
    else:
        # HTTP classes only exist where the http extra is in use: look, do not import
        client, session = sys.modules.get("sturdyrpc.mcp_http.client"), sys.modules.get("sturdyrpc.mcp_http.session")
        if (client is not None and isinstance(transport, client.StreamableHTTPClientTransport)) or \
                (session is not None and isinstance(transport, session.SessionPipe)):
            attrs["network.transport"] = "tcp"
            attrs["network.protocol.name"] = "http"


class ServerTelemetry(_Conventions):
    """The server-side middleware: a SERVER span and a duration per request and notification."""

    def __init__(self, *, mcp: bool, params_key: str | None, tracer_provider: Any, meter_provider: Any, record_params: bool) -> None:
        super().__init__(mcp=mcp, server=True, params_key=params_key, tracer_provider=tracer_provider,
                         meter_provider=meter_provider, record_params=record_params)
        self._providers = (tracer_provider, meter_provider)
        # Sessions seen (for the session duration), and the tasks waiting for them to close.
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        self._watchers: set[asyncio.Task[None]] = set()
        if mcp:
            from ..mcp.session_state import is_replayed, request_session

            self._current_session: Callable[[], Any] = request_session
            self._replayed: Callable[[Any], bool] = is_replayed
        else:
            self._current_session = lambda: None
            self._replayed = lambda params: False

    def parent(self, params: Any, headers: Mapping[str, str] | None) -> tuple[otel_context.Context | None, list[Link] | None]:
        """The context to parent the span on, and links: the caller's span from ``params`` first
        (the MCP convention; the HTTP request may carry several messages, or be a retry), then the
        HTTP request's W3C headers; the HTTP-level (or ambient) span, when another, is linked."""
        key = self.params_key
        carrier = params.get(key) if key is not None and type(params) is dict else None
        from_params = _extract(carrier) if type(carrier) is dict and carrier else None
        from_headers = _extract(headers) if headers else None
        if from_params is None:
            return from_headers, None
        links: list[Link] = []
        for other in (from_headers, otel_context.get_current()):
            sc = _span_context_of(other) if other is not None else None
            if sc is not None and sc != _span_context_of(from_params) and all(sc != ln.context for ln in links):
                links.append(Link(sc))
        return from_params, links or None

    async def __call__(self, ctx: Context, call_next: CallNext) -> Any:
        params = ctx.params
        method = ctx.method
        if (method == "initialize" or method == "notifications/initialized") and self._replayed(params):
            return await call_next(ctx)  # a shared session's replica replaying the handshake: no request
        name, attrs = self.describe(ctx.method, params, None if ctx.is_notification else ctx.id)
        if ctx.session_id is not None:
            attrs["mcp.session.id"] = hash_session_id(ctx.session_id)
        headers = ctx.headers
        if headers is not None:
            attrs["network.transport"] = "tcp"
            attrs["network.protocol.name"] = "http"
        elif isinstance(ctx, PeerContext):
            _transport_attrs(ctx.peer.transport, attrs)
        parent, links = self.parent(params, headers)
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attrs, links=links)
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        start = time.perf_counter()
        error: str | None = None
        code: int | None = None
        description: str | None = None
        incident: str | None = None
        try:
            result = await call_next(ctx)
            if self.mcp and ctx.method == "tools/call" and type(result) is dict and result.get("isError") is True:
                error, incident = "tool_error", ctx.incident
            return result
        except RPCError as exc:
            code = exc.code
            error, description = str(code), exc.message  # what the client is told anyway
            raise
        except asyncio.CancelledError:
            error = "cancelled"
            raise
        except BaseException as exc:
            # Never the text or traceback: the type, and the id the traceback is logged under.
            error, incident = _type_name(exc), incident_of(exc)
            if not ctx.is_notification and not (self.mcp and ctx.method == "tools/call"):  # there: an isError result
                code, description = INTERNAL_ERROR, "Internal error"
            raise
        finally:
            otel_context.detach(token)
            late: dict[str, Any] = {}
            session = self._current_session()
            if session is not None:
                version = self._version(session, params)
                if version is not None:
                    late["mcp.protocol.version"] = version
                self._watch(session, attrs, version)
            self.finish(span, attrs, late, start, error, code, description, incident)

    def received_notice(self, method: str, params: Any, base: dict[str, Any], session: Any) -> None:
        """A SERVER span (and a duration) for a notification the peer handled itself."""
        name, attrs = self.describe(method, params, None)
        attrs.update(base)
        parent, links = self.parent(params, None)
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attrs, links=links)
        late: dict[str, Any] = {}
        if session is not None:
            version = self._version(session, params)
            if version is not None:
                late["mcp.protocol.version"] = version
        self.finish(span, attrs, late, time.perf_counter(), None, None, None, None)

    @staticmethod
    def _version(session: Any, params: Any) -> str | None:
        profile = session.profile
        if profile.version is None and profile.era != "modern":
            return None  # not negotiated (yet)
        return session.rules_of(params).version  # type: ignore[no-any-return]

    def _watch(self, session: Any, attrs: dict[str, Any], version: str | None) -> None:
        """Start timing ``session`` the first time one of its requests is seen (its ``initialize``)."""
        if self.session_duration is None or session in self._sessions:
            return
        peer = session.peer
        if peer is None:
            return  # a 2026-07-28 request: no session
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._sessions.add(session)
        if peer.send_hook is None:
            # what the server sends on this session (sampling, elicitation, roots, notifications):
            # CLIENT spans, children of the request's span when a handler sends them
            peer.send_hook = ClientTelemetry(peer, mcp=True, params_key=self.params_key, tracer_provider=self._providers[0],
                                             meter_provider=self._providers[1], record_params=self.record_params,
                                             network_transport=attrs.get("network.transport"), session_duration=False,
                                             session_id=session.session_id)
        if peer.notice_hook is None:
            # cancellation and progress, which the peer handles itself: spans too
            base: dict[str, Any] = {k: attrs[k] for k in ("network.transport", "network.protocol.name", "mcp.session.id") if k in attrs}
            sender = peer.send_hook if isinstance(peer.send_hook, ClientTelemetry) else None
            peer.notice_hook = NoticeTelemetry(self, sender, lambda: base, session)
        keep: dict[str, Any] = {k: attrs[k] for k in ("network.transport", "network.protocol.name") if k in attrs}
        if version is not None:
            keep["mcp.protocol.version"] = version
        task = loop.create_task(self._session_ended(peer, session, keep, time.perf_counter()))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _session_ended(self, peer: Peer, session: Any, attrs: dict[str, Any], start: float) -> None:
        try:
            await peer.wait_closed()
        finally:  # cancelled: the event loop is ending, and the session with it
            version = session.profile.version
            if version is not None:
                attrs["mcp.protocol.version"] = version
            assert self.session_duration is not None
            self.session_duration.record(time.perf_counter() - start, attrs)


class ClientTelemetry(_Conventions):
    """The client-side :data:`~sturdyrpc.peer.SendHook`: a CLIENT span and a duration per request
    and notification sent, its context injected into ``params[params_key]``."""

    def __init__(self, peer: Peer, *, mcp: bool, params_key: str | None, tracer_provider: Any, meter_provider: Any,
                 record_params: bool, network_transport: str | None, session_duration: bool = True,
                 session_id: str | None = None) -> None:
        super().__init__(mcp=mcp, server=False, params_key=params_key, tracer_provider=tracer_provider,
                         meter_provider=meter_provider, record_params=record_params)
        self.peer = peer
        #: The session id when the peer's transport does not know it (a server's own peer).
        self.session_id = session_id
        self._network: dict[str, Any] = {}
        _transport_attrs(peer.transport, self._network)
        if network_transport is not None:
            self._network["network.transport"] = network_transport
        self._started = time.perf_counter()
        self._watcher: asyncio.Task[None] | None = None
        if self.session_duration is not None and session_duration:
            try:
                self._watcher = asyncio.get_running_loop().create_task(self._session_ended())
            except RuntimeError:
                pass

    def inject(self, params: Any, ctx: otel_context.Context) -> Any:
        """``params`` (a copy) with the trace context of ``ctx`` in ``params[params_key]``."""
        key = self.params_key
        if key is None:
            return params
        if params is None and self.mcp:
            params = {}  # every MCP request and notification may carry _meta
        elif type(params) is dict:
            params = dict(params)
        else:
            return params  # positional params have nowhere to put it
        old = params.get(key)
        carrier: dict[str, Any] = dict(old) if type(old) is dict else {}
        propagate.inject(carrier, context=ctx)
        if carrier:
            params[key] = carrier
        return params

    async def __call__(self, method: str, params: Any, id_: str | int | None, send: Callable[[Any], Awaitable[Any]]) -> Any:
        name, attrs = self.describe(method, params, id_)
        attrs.update(self._network)
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)
        params = self.inject(params, trace.set_span_in_context(span))
        start = time.perf_counter()
        error: str | None = None
        code: int | None = None
        description: str | None = None
        try:
            result = await send(params)
            if self.mcp and method == "tools/call" and type(result) is dict and result.get("isError") is True:
                error = "tool_error"
            return result
        except RPCError as exc:
            code = exc.code
            error, description = str(code), exc.message
            raise
        except RequestTimeout:
            error = "timeout"
            raise
        except asyncio.CancelledError:
            error = "cancelled"
            raise
        except BaseException as exc:
            error = _type_name(exc)
            raise
        finally:
            late: dict[str, Any] = {}
            self._session_attrs(late)
            self.finish(span, attrs, late, start, error, code, description, None)

    def sent_notice(self, method: str, params: Any) -> Any:
        """A CLIENT span (and a duration) for a notification the peer sends on the spot
        (a cancellation); returns ``params`` with its trace context."""
        name, attrs = self.describe(method, params, None)
        attrs.update(self._network)
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)
        params = self.inject(params, trace.set_span_in_context(span))
        late: dict[str, Any] = {}
        self._session_attrs(late)
        self.finish(span, attrs, late, time.perf_counter(), None, None, None, None)
        return params

    def session_attrs(self) -> dict[str, Any]:
        """The network and session attributes of this side of the session, now."""
        attrs = dict(self._network)
        self._session_attrs(attrs)
        return attrs

    def _session_attrs(self, attrs: dict[str, Any]) -> None:
        if not self.mcp:
            return
        version = getattr(self.peer.profile, "version", None)
        if type(version) is str:
            attrs["mcp.protocol.version"] = version
        sid = self.session_id if self.session_id is not None else getattr(self.peer.transport, "session_id", None)
        if type(sid) is str:
            attrs["mcp.session.id"] = hash_session_id(sid)

    async def _session_ended(self) -> None:
        try:
            await self.peer.wait_closed()
        finally:  # cancelled: the event loop is ending, and the session with it
            attrs = dict(self._network)
            self._session_attrs(attrs)
            attrs.pop("mcp.session.id", None)
            assert self.session_duration is not None
            self.session_duration.record(time.perf_counter() - self._started, attrs)


class NoticeTelemetry:
    """The :data:`~sturdyrpc.peer.NoticeHook` of an instrumented peer: spans for the
    notifications it handles itself (received: SERVER) or sends on the spot (CLIENT)."""

    def __init__(self, server: ServerTelemetry, client: ClientTelemetry | None, base: Callable[[], dict[str, Any]],
                 session: Any = None) -> None:
        self.server = server
        self.client = client
        self.base = base
        self.session = session

    def __call__(self, method: str, params: Any, sent: bool) -> Any:
        if sent:
            return self.client.sent_notice(method, params) if self.client is not None else params
        self.server.received_notice(method, params, self.base(), self.session)
        return params
