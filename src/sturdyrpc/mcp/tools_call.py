"""``tools/call``: the one path from a request to its reply, however the request arrives.

Decode -> bind -> execute -> render, once:

- **decode**: :mod:`sturdyrpc.envelope` reads the message once, whatever the transport;
- **route**: the dispatcher's ``tools/call`` entry routes each request to the called tool's
  own entry (:meth:`ToolsCall.route`), planned once like any entry: a tool that runs inline
  (sync, ``blocking=False``) is answered on the reader's turn by the runner, with no task;
  every other tool, and every task call, takes the async entry;
- **bind**: :meth:`ToolsCall.prepare` checks name, arguments and ``requestState`` and binds
  the arguments to the tool's signature (the same code for every entry);
- **execute**: the tool runs through :mod:`sturdyrpc.execute` (inline for sync non-blocking
  tools, the bounded daemon pool for blocking ones, the loop for async ones);
- **render**: :meth:`ToolsCall.outcome` applies the error policy (a tool's failure is an
  ``isError`` result without internals; a :class:`~sturdyrpc.errors.RPCError` raised on
  purpose is the JSON-RPC error) and renders the common results through reply templates
  cached per version, as ``msgspec.Raw`` bytes the dispatcher embeds as they are.

"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import msgspec

from .. import codec
from ..dispatch import Call, Context, Dispatcher, MethodEntry
from ..errors import InvalidParams, InvalidRequest, MethodNotFound, RPCError, assigned_incident, incident_of
from ..execute import shared_pool
from ..invoke import call_now
from ..request_context import current_session
from .content import ToolError, text_content
from .context import InputRequired, MCPContext
from .core import ServerCore
from .registry import TEMPLATE_TEXT, TEMPLATE_WRAPPED, OutputMismatch, Tool
from .session_state import SessionState, request_session
from .versions import VersionRules

#: The session of the request at hand (request_context's variable, read without a call).
_session_of_request = current_session.get

__all__ = ["ToolsCall", "Prepared"]

log = logging.getLogger("sturdyrpc.mcp")


_raw_encode = msgspec.json.encode
_Raw = msgspec.Raw
_WRAPPED = TEMPLATE_WRAPPED
_TEXT = TEMPLATE_TEXT


#: A checked ``tools/call``: the version's rules, the tool and its bound arguments.
Prepared = tuple[VersionRules, Tool, tuple[Any, ...], dict[str, Any]]


class _Template:
    """A rendered result cut around its holes: the text, then the structured value (``mid`` is
    None when the result has none). ``head`` None: no template fits (remembered as well)."""

    __slots__ = ("head", "mid", "tail", "info")

    def __init__(self, head: bytes | None, mid: bytes | None, tail: bytes, info: tuple[str, str, str | None] | None) -> None:
        self.head = head
        self.mid = mid
        self.tail = tail
        #: The server's name, version and title when it was made, for results that hold them
        #: (2026-07-28); None for the others.
        self.info = info


#: What a template cache holds for rules no template fits.
_NO_FIT = _Template(None, None, b"", None)


class ToolsCall:
    """The ``tools/call`` logic of the server whose core is ``core`` (see the module docstring)."""

    def __init__(self, core: ServerCore) -> None:
        self.core = core
        self._tools = core.tools
        self._dispatcher: Dispatcher | None = None
        self._async_entry: MethodEntry | None = None
        #: tool name -> (the tool, its entry): made at the first call, remade for a new tool of that name
        self._inline_entries: dict[str, tuple[Tool, MethodEntry]] = {}
        #: Per template kind and rules: the template, or _NO_FIT.
        self._templates: dict[str, dict[VersionRules, _Template]] = {_WRAPPED: {}, _TEXT: {}}

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
            rules = session.profile.session_rules  # the connection's, when it has one (rules_of's first step)
            if rules is None:
                rules = session.rules_of(params)
        if tool is None:
            name = params.get("name")
            if type(name) is not str:
                raise InvalidParams("Invalid params: 'name' must be a string", {"param": "name"})
            tool = self._tools.get(name)
            if tool is None:
                raise InvalidParams(f"Unknown tool: {name}", {"tool": name})
        if tool.requires_task and not as_task and rules.tasks:
            # rule 28: a non-task call to a tool that requires tasks MUST be -32601
            raise MethodNotFound(f"Method not found: the tool {tool.name!r} must be called as a task (params.task)",
                                 {"tool": tool.name, "taskSupport": "required"})
        arguments = params.get("arguments")
        if type(arguments) is not dict:
            if arguments is not None:
                raise InvalidParams("Invalid params: 'arguments' must be an object", {"param": "arguments"})
            arguments = {}
        if "requestState" in params or "inputResponses" in params:
            self.core.request_state.check(params, "tools/call", tool.name)  # merges earlier rounds' answers
        one = tool.one_param
        if one is not None and len(arguments) == 1:
            # the commonest case of all, bound as below without calling the check: a value of
            # the one type the check admits; anything else goes on below
            nm, exact = one
            v = arguments.get(nm)  # None when absent: never of that type
            if type(v) is exact:
                return rules, tool, (v,), {}
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
                return self.core.finish(rules, {"content": [text_content(exc.message)], "isError": True})
            raise
        return rules, tool, args, kwargs

    # ------------------------------------------------------------------ execute

    def run_inline(self, tool: Tool, params: dict[str, Any], ctx: Context | None = None) -> Any:
        """``tools/call`` of the inline tool ``tool`` (sync, non-blocking), right here, in the
        session of the request at hand: the routed entry of the tool (:meth:`route`) is this
        method with the tool bound.

        Returns the result: rendered (``msgspec.Raw``) when a template applies, else the result
        object. ``ctx``: the request's context, under middleware (the result is then never
        rendered, a failure is its ``isError`` result, and an unexpected failure's incident id
        goes on it, as :meth:`run` does).

        Without middleware, what the tool raises (or its value, failing to become a result) is
        left to the dispatcher's one catch of the call: the server's tool failure
        (:meth:`failed_call`) answers it as :meth:`outcome` would, an ``RPCError`` as itself.
        """
        session = _session_of_request()
        if session is None:
            raise InvalidRequest("Invalid Request", {"reason": "no MCP session for this request"})
        p = self.prepare(session, params, tool)
        if type(p) is not tuple:
            return p
        rules, tool, args, kwargs = p
        if ctx is not None:
            # the chain sees the outcome as plain data: a failure is the isError result
            ok, value = call_now(tool.fn, args, kwargs)
            result = self.outcome(rules, tool, ok, value, params)
            if not ok:
                ctx.incident = assigned_incident(value)
            return result
        value = tool.fn(*args, **kwargs)
        if type(value) is tool.template_type:
            raw = self.render(rules, tool, value)
            if raw is not None:
                return _Raw(raw)
        return self.core.finish(rules, tool.result(value, rules))

    async def run(self, session: SessionState, ctx: Context, params: dict[str, Any], as_task: bool = False) -> Any:
        """``tools/call`` of any tool, awaited (blocking tools on the bounded daemon pool);
        ``as_task``: it runs as a task (:mod:`.tasks` parks the outcome)."""
        p = self.prepare(session, params, as_task=as_task)
        if type(p) is not tuple:
            return p
        rules, tool, args, kwargs = p
        # the answers of earlier rounds (2026-07-28), checked by prepare() already
        carried = self.core.request_state.check(params, "tools/call", tool.name) if "requestState" in params else None
        mctx = MCPContext(session, ctx, carried, self.core.reader)
        try:
            running = tool.run(args, kwargs, mctx, shared_pool(self.core.dispatcher.limits.max_threads))
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
            ok, value = call_now(self.result, (rules, tool, value), {})  # a return value that cannot become a result fails
            if ok:
                return value
        if isinstance(value, RPCError):
            raise value
        if isinstance(value, InputRequired):
            return self.core.input_required(rules, value, "tools/call", tool.name, params)
        return self.failed(rules, tool.name, value)

    def failed_call(self, call: Call, exc: BaseException) -> dict[str, Any] | None:
        """The ``isError`` result of ``tools/call`` ``call`` whose middleware (or anything around
        the tool) raised ``exc``; None outside an MCP session (the caller answers -32603)."""
        session = request_session()
        if session is None:
            return None
        params = call.params if type(call.params) is dict else {}
        name = params.get("name")
        name = name if type(name) is str else "?"
        if isinstance(exc, InputRequired):  # an inline tool's, left to this catch (see run_inline)
            return self.core.input_required(session.rules_of(params), exc, "tools/call", name, params)
        return self.failed(session.rules_of(params), name, exc)

    def failed(self, rules: VersionRules, name: str, exc: BaseException) -> dict[str, Any]:
        """The ``isError`` result of a tool that raised ``exc``: a :class:`ToolError`'s message
        as is, anything else a generic text naming an incident id (the traceback is logged),
        or its message alone when the server does not mask errors (``mask_errors=False``)."""
        if isinstance(exc, ToolError):
            return self.core.finish(rules, {"content": [text_content(exc.message)], "isError": True})
        incident = incident_of(exc)
        if isinstance(exc, OutputMismatch):  # the author's bug, said in full; no traceback to read
            log.error("incident %s: %s", incident, exc)
        else:
            log.error("incident %s: tool %r raised", incident, name, exc_info=exc)
        message = str(exc).strip() if not self.core.mask_errors else ""
        # unmasked, the message alone (a message-less exception stays the generic text)
        text = message or f"The tool failed with an internal error (incident {incident})."
        return self.core.finish(rules, {"content": [text_content(text)], "isError": True})

    def result(self, rules: VersionRules, tool: Tool, value: Any) -> Any:
        """The result for ``value``: rendered bytes (``msgspec.Raw``) for the common shapes,
        else the result object for the dispatcher to encode (which refuses NaN and the like).
        With middleware, always the object: the chain sees results as plain data."""
        if type(value) is tool.template_type and not self.core.dispatcher.middleware_chain:
            raw = self.render(rules, tool, value)
            if raw is not None:
                return _Raw(raw)
        return self.core.finish(rules, tool.result(value, rules))

    def render(self, rules: VersionRules, tool: Tool, value: Any) -> bytes | None:
        """The encoded result of ``value`` (of the tool's ``template_type``: the caller checks)
        from a cached template, or None when no template applies."""
        cache = self._templates[tool.template_kind]  # type: ignore[index]  # set whenever template_type is
        tpl = cache.get(rules)
        if tpl is None:
            tpl = cache[rules] = self._make_template(rules, tool)
        elif tpl.info is not None:  # the result holds the server's info (2026-07-28): still the same?
            c, info = self.core, tpl.info  # by identity (the usual case), or _same_info
            if not (info[0] is c.name and info[1] is c.version and info[2] is c.title) and not self._same_info(info):
                tpl = cache[rules] = self._make_template(rules, tool)
        head = tpl.head
        if head is None:  # no template fits
            return None
        try:
            v = _raw_encode(value)
            mid = tpl.mid
            if mid is None:
                return b"".join((head, v if type(value) is str else _raw_encode(str(value)), tpl.tail))
            return b"".join((head, v if type(value) is str else _raw_encode(str(value)), mid, v, tpl.tail))
        except Exception:  # e.g. a lone surrogate: the general encoder decides
            return None

    def _info(self) -> tuple[str, str, str | None]:
        c = self.core
        return c.name, c.version, c.title

    def _same_info(self, info: tuple[str, str, str | None]) -> bool:
        """Whether the server's name, version and title are still ``info`` (a template made for
        other ones is made again): compared by identity first, which is the usual case."""
        c = self.core
        return (info[0] is c.name and info[1] is c.version and info[2] is c.title) or info == self._info()

    def _make_template(self, rules: VersionRules, tool: Tool) -> _Template:
        """Cut the general rendering of ``tool``'s result around its holes, and check the cut
        against the general rendering of a few awkward values (else no template: _NO_FIT)."""
        mark = "\x00sturdyrpc-hole\x00"
        finish = self.core.finish
        try:
            # one template per kind serves str and int tools alike: cut and checked on the
            # unchecked rendering (the mark is a string, whatever the tool's declared type)
            shape = tool.wrapped if tool.template_kind is _WRAPPED else tool.result
            out = codec.encode(finish(rules, shape(mark, rules)))
            parts = out.split(_raw_encode(mark))
            if len(parts) not in (2, 3):
                return _NO_FIT
            tpl = _Template(parts[0], parts[1] if len(parts) == 3 else None, parts[-1], self._info() if rules.result_type else None)
            samples: tuple[Any, ...] = ('a"\u2028b', "", -12345, 2**70) if tool.template_kind is _WRAPPED else ('a"\u2028b', "")
            for sample in samples:
                v = _raw_encode(sample)
                text = v if type(sample) is str else _raw_encode(str(sample))
                got = b"".join((parts[0], text, parts[1])) if len(parts) == 2 else b"".join((parts[0], text, parts[1], v, parts[2]))
                if got != codec.encode(finish(rules, shape(sample, rules))):
                    return _NO_FIT
            return tpl
        except Exception:
            return _NO_FIT

    # ------------------------------------------------------------------ route

    def route(self, params: Any) -> MethodEntry:
        """The entry that serves ``tools/call`` with ``params`` (the dispatcher's route, see
        :class:`~sturdyrpc.dispatch.MethodEntry`): a tool that runs inline (sync,
        ``blocking=False``) has an entry of its own, planned like any entry (inline on the
        reader's turn; through the middleware chain when there is one); everything else (an
        async or blocking tool, a task call, a name no tool has, params of the wrong shape) takes
        the async entry, which decides and answers.

        The routed entry of a tool is made at its first call and kept with the tool it serves:
        a call finds it by the name it asks for, and takes it while that tool is still the one
        registered under its name and still runs inline (:attr:`.Tool.routed_inline`)."""
        try:
            made = self._inline_entries.get(params.get("name"))
        except (AttributeError, TypeError):  # params not an object, a name no key can be: the async entry says what is wrong
            made = None
        if made is not None:
            tool, entry = made
            if tool is self._tools.get(tool.name) and tool.routed_inline and "task" not in params:
                return entry
        if type(params) is dict:  # the first call of the tool (or of another one registered under its name)
            name: Any = params.get("name")
            found = self._tools.get(name) if type(name) is str else None
            if found is not None and found.routed_inline and "task" not in params:
                entry = self._inline_entry(found)
                self._inline_entries[name] = (found, entry)
                return entry
        other = self._async_entry
        assert other is not None, "ToolsCall.use_dispatcher() was not called"
        return other

    def use_dispatcher(self, dispatcher: Dispatcher, async_entry: MethodEntry) -> None:
        """Make the per-tool entries on ``dispatcher``; ``async_entry`` serves what they do not."""
        self._dispatcher = dispatcher
        self._async_entry = async_entry
        self._inline_entries.clear()

    def _inline_entry(self, tool: Tool) -> MethodEntry:
        assert self._dispatcher is not None
        # the tool bound in C (functools.partial): one Python frame per call, run_inline's
        return self._dispatcher.make_entry(functools.partial(self.run_inline, tool), "tools/call", blocking=False, raw=True)
