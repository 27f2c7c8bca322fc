"""``tools/call``: the one path from a request to its reply, however the request arrives.

Decode -> bind -> execute -> render, once:

- **decode**: the dispatcher decodes the envelope (stdio, HTTP, batches, stateless); the stdio
  early answer (:meth:`ToolsCall.early_answer`) decodes it as a typed msgspec struct
  (:class:`ToolsCallRequest`) in C, the HTTP one makes the same checks on the body the POST
  decoded already, and anything of another shape is left to the dispatcher;
- **bind**: :meth:`ToolsCall.prepare` checks name, arguments and ``requestState`` and binds
  the arguments to the tool's signature (the same code for every entry);
- **execute**: the tool runs through :mod:`sturdyrpc.execute` (inline for sync non-blocking
  tools, the bounded daemon pool for blocking ones, the loop for async ones);
- **render**: :meth:`ToolsCall.outcome` applies the error policy (a tool's failure is an
  ``isError`` result without internals; a :class:`~sturdyrpc.errors.RPCError` raised on
  purpose is the JSON-RPC error) and renders the common results through reply templates
  cached per version, as ``msgspec.Raw`` bytes the dispatcher embeds as they are.

The early answer is this path entered before the peer's queues: it answers only what the
peer would answer the same way at once (a negotiated session, an inline tool, no duplicate of
a running id, the connection open), and returns None for everything else.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .. import codec
from ..dispatch import BatchJob, Call, Context, Dispatcher, MethodEntry, Received
from ..errors import HANDLER_ERRORS, InvalidParams, MethodNotFound, RPCError, assigned_incident, incident_of
from ..execute import call_now, shared_pool
from ..limits import Limits
from ..messages import InvalidMessage, Message
from ..peer import Peer
from ..profile import Profile
from .content import ToolError, text_content
from .context import InputRequired, MCPContext
from .registry import TEMPLATE_TEXT, TEMPLATE_WRAPPED, OutputMismatch, Tool
from .session_state import SessionState, current_session, use_session
from .versions import VersionRules

if TYPE_CHECKING:
    from .server import MCPServer

__all__ = ["ToolsCall", "ToolsCallRequest", "MCPDispatcher", "Prepared"]

log = logging.getLogger("sturdyrpc.mcp")


class ToolsCallRequest(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """A ``tools/call`` request of the usual shape, typed in C; anything else (another method,
    an unknown member, an id that is not a string or an integer) fails the decode."""

    jsonrpc: Literal["2.0"]
    method: Literal["tools/call"]
    params: dict[str, Any]
    id: int | str


_decode_request = msgspec.json.Decoder(ToolsCallRequest).decode
_raw_encode = msgspec.json.encode
_Raw = msgspec.Raw
#: The reply envelope around a rendered result, as the dispatcher's encoder writes it.
_REPLY_HEAD = b'{"jsonrpc":"2.0","result":'
_REPLY_ID = b',"id":'
_WRAPPED = TEMPLATE_WRAPPED
_TEXT = TEMPLATE_TEXT


#: A checked ``tools/call``: the version's rules, the tool and its bound arguments.
Prepared = tuple[VersionRules, Tool, tuple[Any, ...], dict[str, Any]]


class _Template:
    """A rendered result cut around its holes: the text, then the structured value (``mid`` is
    None when the result has none); ``reply_head``/``reply_tail`` are the same cut with the
    reply envelope around it, the id following ``reply_tail``."""

    __slots__ = ("head", "mid", "tail", "reply_head", "reply_tail", "info")

    def __init__(self, head: bytes, mid: bytes | None, tail: bytes, info: tuple[str, str, str | None]) -> None:
        self.head = head
        self.mid = mid
        self.tail = tail
        self.reply_head = _REPLY_HEAD + head
        self.reply_tail = tail + _REPLY_ID
        #: The server's name, version and title when it was made (2026-07-28 results hold them).
        self.info = info


#: ``run_inline``'s ``id_`` when the caller wants the result, not the whole reply.
_RESULT_ONLY: Any = object()
#: The early answer before it has seen the session's negotiated version (even None).
_NOT_SEEN: Any = object()


class ToolsCall:
    """The ``tools/call`` logic of one server (see the module docstring)."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._tools = server.tools
        #: Per template kind and rules: the template, or None when none fits.
        self._templates: dict[str, dict[VersionRules, _Template | None]] = {_WRAPPED: {}, _TEXT: {}}

    # ------------------------------------------------------------------ bind

    def prepare(
        self, session: SessionState, params: dict[str, Any], tool: Tool | None = None, rules: VersionRules | None = None,
        as_task: bool = False,
    ) -> Prepared | dict[str, Any]:
        """Check a ``tools/call``: the :data:`Prepared` call, or the finished result of a
        validation failure (a tool error from 2025-11-25 on). Raises ``InvalidParams``.
        ``tool``: the tool ``params`` names, when the caller has looked it up already;
        ``rules``: ``session.rules_of(params)``, when the caller knows them already; ``as_task``:
        the call runs as a task (:mod:`.tasks`), else a tool that requires tasks is refused."""
        if rules is None:
            rules = session.rules_of(params)
        if tool is None:
            name = params.get("name")
            tool = self._tools.get(name) if type(name) is str else None
        if tool is None:
            if type(name) is not str:
                raise InvalidParams("Invalid params: 'name' must be a string", {"param": "name"})
            raise InvalidParams(f"Unknown tool: {name}", {"tool": name})
        if tool.task_support == "required" and not as_task and rules.tasks:
            # rule 28: a non-task call to a tool that requires tasks MUST be -32601
            raise MethodNotFound(f"Method not found: the tool {tool.name!r} must be called as a task (params.task)",
                                 {"tool": tool.name, "taskSupport": "required"})
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif type(arguments) is not dict:
            raise InvalidParams("Invalid params: 'arguments' must be an object", {"param": "arguments"})
        if "requestState" in params:
            self.server.request_state.check(params, "tools/call", tool.name)
        spec = tool.by_position
        if spec is not None and len(arguments) == len(spec):
            # the common case, bound as Binder.bind would by name; any doubt (a name missing, a
            # value refused) goes to Binder.bind below, which says what is wrong
            try:
                if len(spec) == 1:
                    nm, chk = spec[0]
                    return rules, tool, (arguments[nm] if chk is None else chk(arguments[nm]),), {}
                return rules, tool, tuple([arguments[nm] if c is None else c(arguments[nm]) for nm, c in spec]), {}
            except Exception:
                pass
        try:
            args, kwargs = tool.bind(arguments)  # checked before the tool runs
        except InvalidParams as exc:
            if rules.validation_as_tool_error:  # SEP-1303 (2025-11-25+): the model sees what to fix
                return self.server.finish(rules, {"content": [text_content(exc.message)], "isError": True})
            raise
        return rules, tool, args, kwargs

    # ------------------------------------------------------------------ execute

    def run_inline(
        self, session: SessionState, params: dict[str, Any], id_: Any = _RESULT_ONLY, tool: Tool | None = None, rules: VersionRules | None = None,
        ctx: Context | None = None,
    ) -> Any:
        """``tools/call`` of an inline tool (sync, non-blocking, no context), right here.

        Returns the rendered result as bytes when a template applies (the whole reply when
        ``id_`` is given), else the result object. Raises an ``RPCError`` raised on purpose.
        ``tool`` and ``rules`` as for :meth:`prepare`. ``ctx``: the request's context, under
        middleware (the result is then never rendered, and an unexpected failure's incident id
        goes on it, as :meth:`run` does).
        """
        p = self.prepare(session, params, tool, rules)
        if type(p) is not tuple:
            return p
        rules, tool, args, kwargs = p
        ok, value = call_now(tool.fn, args, kwargs)
        if ctx is None:
            if ok and tool.template_kind is not None:
                raw = self.render(rules, tool, value, id_)
                if raw is not None:
                    return raw
            return self.outcome(rules, tool, ok, value, params)
        result = self.outcome(rules, tool, ok, value, params)
        if not ok:
            ctx.incident = assigned_incident(value)
        return result

    async def run(self, session: SessionState, ctx: Context, params: dict[str, Any], as_task: bool = False) -> Any:
        """``tools/call`` of any tool, awaited (blocking tools on the bounded daemon pool);
        ``as_task``: it runs as a task (:mod:`.tasks` parks the outcome)."""
        p = self.prepare(session, params, as_task=as_task)
        if type(p) is not tuple:
            return p
        rules, tool, args, kwargs = p
        mctx = MCPContext(session, ctx)
        try:
            running = tool.run(args, kwargs, mctx, shared_pool(self.server.dispatcher.limits.max_threads))
            if tool.timeout is None:
                ok, value = await running
            else:
                try:
                    ok, value = await asyncio.wait_for(running, tool.timeout)
                except TimeoutError:  # execute() returns the tool's own exceptions: this one is the limit's
                    ok, value = False, ToolError(f"The tool {tool.name!r} timed out: it did not finish within its {tool.timeout:g} s limit.")
        finally:
            mctx.done = True
        result = self.outcome(rules, tool, ok, value, params)
        if not ok:
            ctx.incident = assigned_incident(value)  # set by failed() when the failure was unexpected
        return result

    # ------------------------------------------------------------------ render

    def outcome(self, rules: VersionRules, tool: Tool, ok: bool, value: Any, params: Any = None) -> Any:
        """The result for a tool's outcome (error policy included); raises an ``RPCError`` the
        tool raised on purpose."""
        if ok:
            try:
                return self.result(rules, tool, value)
            except HANDLER_ERRORS as exc:  # a return value that cannot become a result
                value = exc
        if isinstance(value, RPCError):
            raise value
        if isinstance(value, InputRequired):
            return self.server.input_required(rules, value, "tools/call", tool.name, params)
        return self.failed(rules, tool.name, value)

    def failed_call(self, call: Call, exc: BaseException) -> dict[str, Any] | None:
        """The ``isError`` result of ``tools/call`` ``call`` whose middleware (or anything around
        the tool) raised ``exc``; None outside an MCP session (the caller answers -32603)."""
        session = current_session()
        if session is None:
            return None
        params = call.params if type(call.params) is dict else {}
        name = params.get("name")
        return self.failed(session.rules_of(params), name if type(name) is str else "?", exc)

    def failed(self, rules: VersionRules, name: str, exc: BaseException) -> dict[str, Any]:
        """The ``isError`` result of a tool that raised ``exc``: a :class:`ToolError`'s message
        as is, anything else a generic text naming an incident id (the traceback is logged)."""
        if isinstance(exc, ToolError):
            return self.server.finish(rules, {"content": [text_content(exc.message)], "isError": True})
        incident = incident_of(exc)
        if isinstance(exc, OutputMismatch):  # the author's bug, said in full; no traceback to read
            log.error("incident %s: %s", incident, exc)
        else:
            log.error("incident %s: tool %r raised", incident, name, exc_info=exc)
        text = f"The tool failed with an internal error (incident {incident})."
        return self.server.finish(rules, {"content": [text_content(text)], "isError": True})

    def result(self, rules: VersionRules, tool: Tool, value: Any) -> Any:
        """The result for ``value``: rendered bytes (``msgspec.Raw``) for the common shapes,
        else the result object for the dispatcher to encode (which refuses NaN and the like).
        With middleware, always the object: the chain sees results as plain data."""
        raw = None if self.server.dispatcher.middleware_chain else self.render(rules, tool, value)
        if raw is not None:
            return _Raw(raw)
        return self.server.finish(rules, tool.result(value, rules))

    def render(self, rules: VersionRules, tool: Tool, value: Any, id_: Any = _RESULT_ONLY) -> bytes | None:
        """The encoded result (or, given ``id_``, the whole reply) from a cached template, or
        None when no template applies."""
        t = type(value)
        if t is not tool.template_type:  # another type: the general path checks and renders it
            return None
        kind: str = tool.template_kind  # type: ignore[assignment]  # set whenever template_type is
        cache = self._templates[kind]
        tpl = cache.get(rules, _RESULT_ONLY)
        if tpl is _RESULT_ONLY or (tpl is not None and rules.result_type and tpl.info != self._info()):
            tpl = cache[rules] = self._make_template(rules, tool)
        if tpl is None:
            return None
        try:
            v = _raw_encode(value)
            text = v if t is str else _raw_encode(str(value))
            if id_ is _RESULT_ONLY:
                if tpl.mid is None:
                    return b"".join((tpl.head, text, tpl.tail))
                return b"".join((tpl.head, text, tpl.mid, v, tpl.tail))
            if tpl.mid is None:
                return b"".join((tpl.reply_head, text, tpl.reply_tail, _raw_encode(id_), b"}"))
            return b"".join((tpl.reply_head, text, tpl.mid, v, tpl.reply_tail, _raw_encode(id_), b"}"))
        except Exception:  # e.g. a lone surrogate: the general encoder decides
            return None

    def _info(self) -> tuple[str, str, str | None]:
        s = self.server
        return s.name, s.version, s.title

    def _make_template(self, rules: VersionRules, tool: Tool) -> _Template | None:
        """Cut the general rendering of ``tool``'s result around its holes, and check the cut
        against the general rendering of a few awkward values (else no template: None)."""
        mark = "\x00sturdyrpc-hole\x00"
        finish = self.server.finish
        try:
            # one template per kind serves str and int tools alike: cut and checked on the
            # unchecked rendering (the mark is a string, whatever the tool's declared type)
            shape = tool.wrapped if tool.template_kind is _WRAPPED else tool.result
            out = codec.encode(finish(rules, shape(mark, rules)))
            parts = out.split(_raw_encode(mark))
            if len(parts) not in (2, 3):
                return None
            tpl = _Template(parts[0], parts[1] if len(parts) == 3 else None, parts[-1], self._info())
            samples: tuple[Any, ...] = ('a"\u2028b', "", -12345, 2**70) if tool.template_kind is _WRAPPED else ('a"\u2028b', "")
            for sample in samples:
                v = _raw_encode(sample)
                text = v if type(sample) is str else _raw_encode(str(sample))
                got = b"".join((tpl.head, text, tpl.tail)) if tpl.mid is None else b"".join((tpl.head, text, tpl.mid, v, tpl.tail))
                if got != codec.encode(finish(rules, shape(sample, rules))):
                    return None
            return tpl
        except Exception:
            return None

    # ------------------------------------------------------------------ early answer (stdio)

    def early_answer(self, peer: Peer | None, session: SessionState, chain: bool = False) -> Callable[..., bytes | None]:
        """``answer(frame, decoded=None) -> reply | None`` for ``peer``: this path entered before
        the peer's queues, for transports that can answer on the reader's turn (stdio, the HTTP
        POST); ``decoded``: ``frame`` as the transport decoded it already, if it did. ``peer``
        None: 2026-07-28 stateless requests (``session`` then has a stateless profile, and
        there is no connection whose ids could repeat).

        With middleware, None (the peer's path runs the chain) unless ``chain``: then the chain is
        started here as the peer would (:meth:`Peer.run_now`), and a chain that suspends answers
        ``b""`` (taken: the peer sends the reply when it is ready). Only for transports that
        skip an empty reply (stdio)."""
        profile = session.profile
        d = self.server.dispatcher
        if not isinstance(d, MCPDispatcher):
            return lambda frame, decoded=None: None
        if peer is None and chain:
            raise ValueError("a chained early answer needs the peer that finishes it")
        run_now = peer.run_now if peer is not None else None
        tools = self.server.tools
        accepts_id = peer.accepts_id if peer is not None else None
        decode = _decode_request
        run_inline = self.run_inline
        # What is constant for the session once it is negotiated, worked out again whenever the
        # negotiated version changes: on a handshake-era session every tools/call of the usual
        # shape passes the profile's checks (MCPProfile.accepts_every), under one version's rules.
        seen: Any = _NOT_SEEN  # profile.version when `fixed` was worked out
        fixed: VersionRules | None = None  # the rules, when the profile's checks pass every frame

        def answer(frame: bytes, decoded: Any = None) -> bytes | None:
            nonlocal seen, fixed
            chained = d.middleware_chain
            if chained and not (chain and d.eager_chain and d.chained_call is not None):
                return None  # the chain is awaited: the peer's path runs it
            n = len(frame)
            if n > d.small_frame:  # valid JSON of n bytes nests at most n // 2 deep: short frames need no count
                limits = d.limits
                if n > limits.max_message_bytes or frame.count(b"[") + frame.count(b"{") > limits.max_depth:
                    return None
            if decoded is None:
                try:
                    req = decode(frame)
                except Exception:  # another method or shape, or malformed: the dispatcher answers it
                    return None
                params: Any = req.params
                id_: Any = req.id
            else:
                # ``frame`` as the transport decoded it already (HTTP): the typed decode's checks
                # (exactly these four members, "2.0", tools/call, an object, a string or integer
                # id) made on the dict, instead of decoding the frame a second time
                if type(decoded) is not dict or len(decoded) != 4:
                    return None
                params = decoded.get("params")
                id_ = decoded.get("id")
                if (type(params) is not dict or decoded.get("method") != "tools/call" or decoded.get("jsonrpc") != "2.0"
                        or (type(id_) is not str and type(id_) is not int)):
                    return None
            name = params.get("name")
            tool = tools.get(name) if type(name) is str else None
            if tool is None or not tool.inline or "task" in params or tool.task_support != "forbidden":
                return None  # a task call: the async path decides and parks it
            if profile.version is not seen:
                seen = profile.version
                fixed = session.rules_of(params) if profile.accepts_every("tools/call") else None
            rules = fixed
            if rules is None:
                # 2026-07-28: the version this request's envelope names, if the profile accepts it
                rules = profile.rules_if_accepted("tools/call", params, id_) if profile.era is not None else None
                if rules is None:
                    return None  # the lifecycle, or a refused envelope: the peer answers as it must
            if accepts_id is not None and not accepts_id(id_):
                return None  # the connection closing, or a duplicate id: the peer refuses it
            if chained:
                assert run_now is not None
                # the chain started here, in the context the peer's reader would give it
                cv = contextvars.copy_context()
                cv.run(use_session, session)
                return run_now(Call(id_, "tools/call", d.chained_call, (), params, params), cv)  # type: ignore[arg-type]
            try:
                result = run_inline(session, params, id_, tool, rules)
            except RPCError as exc:
                return d.failure(Call(id_, "tools/call", _entry(d), (), params, params), exc)
            if type(result) is bytes:
                return result
            return d.result(Call(id_, "tools/call", _entry(d), (), params, params), result)

        return answer


def _entry(d: Dispatcher) -> MethodEntry:
    entry = d.get("tools/call")
    assert entry is not None
    return entry


_base_limits: property = Dispatcher.limits  # type: ignore[assignment]


class MCPDispatcher(Dispatcher):
    """A dispatcher whose ``tools/call`` entry follows the tool: a tool that runs inline (sync,
    ``blocking=False``, no context) takes the sync entry, which the runner runs without a task;
    the others take the async entry (blocking tools go to the pool from there)."""

    def __init__(self, tools: dict[str, Tool], limits: Limits, logger: logging.Logger) -> None:
        #: Frames up to this size cannot nest deeper than ``limits.max_depth`` (nor be too large).
        self.small_frame = 0
        super().__init__(limits, logger=logger)
        self._tools = tools
        self._async_call: MethodEntry | None = None
        self._chained_call: MethodEntry | None = None
        self._tool_failure: Callable[[Call, BaseException], dict[str, Any] | None] | None = None

    def _set_limits(self, value: Limits) -> None:
        _base_limits.fset(self, value)  # type: ignore[misc]
        self.small_frame = min(value.max_message_bytes, 2 * value.max_depth)

    #: :attr:`Dispatcher.limits`, read as fast, and keeping :attr:`small_frame` in step.
    limits = property(_base_limits.fget, _set_limits, doc=_base_limits.__doc__)

    def set_async_tools_call(self, entry: MethodEntry) -> None:
        """The entry for ``tools/call`` of tools that do not run inline."""
        self._async_call = entry

    def set_chained_tools_call(self, entry: MethodEntry) -> None:
        """The entry for ``tools/call`` of inline tools when there is middleware (sync, with the
        request's context: the chain around it can finish on the reader's turn)."""
        self._chained_call = entry

    @property
    def chained_call(self) -> MethodEntry | None:
        """The entry set by :meth:`set_chained_tools_call`."""
        return self._chained_call

    def set_tool_failure(self, fn: Callable[[Call, BaseException], dict[str, Any] | None]) -> None:
        """``fn(call, exc)``: the ``isError`` result of a ``tools/call`` that failed outside its
        tool (a middleware raised), or None for the plain -32603."""
        self._tool_failure = fn

    def prepare_context(self, ctx: Context) -> None:
        session = current_session()
        if session is not None:
            session.fill(ctx)

    def failure(self, call: Call, exc: BaseException) -> bytes | None:
        """As :meth:`Dispatcher.failure`, but a ``tools/call`` failing with anything but an
        ``RPCError`` is a tool error (``isError`` naming an incident id), as a tool's own would be."""
        fn = self._tool_failure
        if fn is not None and call.method == "tools/call" and not isinstance(exc, RPCError) and not call.is_notification:
            value = fn(call, exc)
            if value is not None:
                return self.result(call, value)
        return super().failure(call, exc)

    def receive(
        self, data: bytes, on_response: Callable[[Message | InvalidMessage], None] | None = None, profile: Profile | None = None,
        *, decoded: tuple[Any, int] | None = None,
    ) -> Received:
        todo = super().receive(data, on_response, profile, decoded=decoded)
        t = type(todo)
        if t is Call:
            self._route(todo)  # type: ignore[arg-type]
        elif t is BatchJob:
            for c in todo.calls:  # type: ignore[union-attr]
                self._route(c)
        return todo

    def _route(self, call: Call) -> None:
        if call.method != "tools/call" or self._async_call is None:
            return
        p = call.params
        name = p.get("name") if type(p) is dict else None
        tool = self._tools.get(name) if type(name) is str else None
        if tool is None:
            return
        if not tool.inline or "task" in p or tool.task_support != "forbidden":
            call.entry = self._async_call
        elif self.middleware_chain:
            call.entry = self._chained_call or self._async_call

