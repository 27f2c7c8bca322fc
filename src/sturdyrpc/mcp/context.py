"""The context of one MCP request, as tool, resource and prompt functions see it.

A parameter annotated :class:`MCPContext` (or :class:`sturdyrpc.Context`, which it is)
receives it: the request's id, ``_meta`` and negotiated version, progress and log
notifications, and asking the client for something (sampling, elicitation, roots). In the
handshake era that is a request to the client; on 2026-07-28 it is an ``input_required`` result
(:class:`InputRequired`) that the client answers by repeating the request with
``inputResponses``, the function running again with the earlier answers (:meth:`MCPContext.once`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..dispatch import Context
from .content import ToolError
from .profile import MissingRequiredClientCapability
from .session_state import SessionState
from .versions import LATEST, META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION, RULES

__all__ = ["MCPContext", "InputRequired", "LOG_LEVELS", "LEVEL_RANK"]

#: Log levels of ``logging/setLevel`` and ``notifications/message``, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
LEVEL_RANK = {name: i for i, name in enumerate(LOG_LEVELS)}


class InputRequired(Exception):
    """Raised inside a handler on 2026-07-28 when the client must supply input (MRTR).
    ``carry``: the answers so far (and :meth:`MCPContext.once` results), for the next round's
    ``requestState``."""

    def __init__(self, requests: dict[str, Any], carry: dict[str, Any] | None = None) -> None:
        super().__init__("input required")
        self.requests = requests
        self.carry = carry or {}


#: Keys of :meth:`MCPContext.once` results in the carried state (never taken from a client's
#: ``inputResponses``: only the server's signed ``requestState`` brings them back).
_ONCE = "once:"


class MCPContext(Context):
    """What a tool, resource or prompt function can do for the request it serves.

    Declare a parameter annotated ``MCPContext`` (or :class:`sturdyrpc.Context`, which it is a
    kind of: either annotation receives this object, on tools, resources and prompts alike) to
    receive it; that parameter is never part of the input schema or the prompt's arguments.
    """

    # The request's own fields are read through from the dispatcher's context (the properties
    # below shadow Context's slots), so none of those slots is filled here.

    def __init__(self, session: SessionState, ctx: Context, carried: dict[str, Any] | None = None,
                 reader: Callable[[SessionState, Context, str], Awaitable[list[dict[str, Any]]]] | None = None) -> None:
        self.session = session
        self._ctx = ctx
        #: Set once the request is answered: nothing is sent for it afterwards.
        self.done = False
        self._asked = 0
        #: 2026-07-28: what the earlier rounds of this request carried forward in its signed
        #: ``requestState`` (answers by input key, :meth:`once` results), grown by this round's.
        self._carry: dict[str, Any] = dict(carried) if carried else {}
        self._reader = reader

    @property
    def id(self) -> Any:  # type: ignore[override]  # read-only here: the dispatcher's context owns it
        """The request's id (as :attr:`request_id`)."""
        return self._ctx.id

    @property
    def is_notification(self) -> bool:  # type: ignore[override]
        return self._ctx.is_notification

    @property
    def incident(self) -> str | None:
        return self._ctx.incident

    @incident.setter
    def incident(self, value: str | None) -> None:
        self._ctx.incident = value

    @property
    def request_id(self) -> Any:
        return self._ctx.id

    @property
    def session_id(self) -> str | None:  # type: ignore[override]
        """The session's id (``Mcp-Session-Id`` on HTTP, one per connection elsewhere; None for a
        2026-07-28 request, which belongs to no session)."""
        return self.session.session_id

    @property
    def principal(self) -> Any:
        """The principal of this request's token, as the transport's security step verified it
        (None without authentication, e.g. on stdio); for a task, its creating request's."""
        return self.session.request_principal()

    @property
    def lifespan(self) -> Any:
        """The value the server's ``lifespan`` yielded (None without one)."""
        return self.session.lifespan_state

    @property
    def headers(self) -> Mapping[str, str] | None:  # type: ignore[override]
        """The headers of the HTTP request that carried this request (lower-case names; None off HTTP)."""
        return self.session.headers_for(self._ctx.id)

    @property
    def state(self) -> dict[str, Any]:  # type: ignore[override]
        """A dict that lives as long as the session (one request's lifetime on 2026-07-28)."""
        return self.session.state

    @property
    def method(self) -> str:  # type: ignore[override]
        return self._ctx.method

    @property
    def params(self) -> dict[str, Any]:
        p = self._ctx.params
        return p if type(p) is dict else {}

    @property
    def meta(self) -> dict[str, Any]:
        return self._ctx.meta

    @property
    def version(self) -> str:
        """The protocol version this request is served under."""
        v = self.meta.get(META_PROTOCOL_VERSION)
        if self.session.profile.era == "modern" and isinstance(v, str) and v in RULES:
            return v
        return self.session.profile.version or LATEST

    @property
    def modern(self) -> bool:
        return RULES[self.version].stateless

    @property
    def client_capabilities(self) -> dict[str, Any]:
        if self.modern:
            caps = self.meta.get(META_CLIENT_CAPABILITIES)
            return caps if type(caps) is dict else {}
        return self.session.profile.client_capabilities

    @property
    def progress_token(self) -> str | int | None:
        return self.session.profile.read_progress_token(self._ctx.params)

    @property
    def cancelled(self) -> bool:
        return bool(getattr(self._ctx, "cancelled", False))

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` if the caller asked for progress (no-op otherwise).

        ``progress`` must increase with every call; nothing is sent after the reply.
        """
        if self.done:
            return
        await self._ctx.report_progress(progress, total, message)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send ``notifications/message`` when the client asked for this level (or a lower one)."""
        if level not in LEVEL_RANK:
            hint = f" (the level comes first: ctx.log({data!r}, {level!r}))" if data in LEVEL_RANK else ""
            raise ValueError(f"unknown log level {level!r}{hint}")
        if self.done:
            return
        wanted = self.meta.get(META_LOG_LEVEL) if self.modern else self.session.log_level
        if not isinstance(wanted, str) or wanted not in LEVEL_RANK or LEVEL_RANK[level] < LEVEL_RANK[wanted]:
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        notify = getattr(self._ctx, "notify", None)
        if notify is not None:
            await notify("notifications/message", params)

    async def debug(self, data: Any) -> None:
        await self.log("debug", data)

    async def info(self, data: Any) -> None:
        await self.log("info", data)

    async def warning(self, data: Any) -> None:
        await self.log("warning", data)

    async def error(self, data: Any) -> None:
        await self.log("error", data)

    async def _ask(self, method: str, params: dict[str, Any], capability: str, timeout: float | None, key: str | None = None,
                   before_task: bool = False) -> Any:
        self._asked += 1
        if key is None:
            key = f"{method.split('/')[0]}-{self._asked}"
        if capability not in self.client_capabilities:
            if self.modern:
                raise MissingRequiredClientCapability({capability: {}}, f"This request needs the client's {capability} capability")
            raise ToolError(f"The client does not support {capability}")
        ask_input = self._task_input(before_task)
        if self.modern and ask_input is not None:
            return await ask_input(method, params, timeout, key)  # a task: input_required in its record (.tasks)
        if self.modern:
            # the request runs again from the start on every round: an input answered in an
            # earlier round is in the carried state, this round's in inputResponses
            if key in self._carry:
                return self._carry[key]
            responses = self.params.get("inputResponses")
            if type(responses) is dict and key in responses:
                self._carry[key] = responses[key]
                return responses[key]
            raise InputRequired({key: {"method": method, "params": params}}, self._carry)
        return await self._ctx.request(method, params, timeout=timeout)  # type: ignore[attr-defined]

    def _task_input(self, before_task: bool) -> Callable[..., Awaitable[Any]] | None:
        """How a task asks the client (through its record: :class:`.tasks.TaskContext`), or None:
        not a task, or (``before_task``) a 2026-07-28 call that is not a task yet, whose input
        goes by rounds as a plain call's does."""
        ask: Callable[..., Awaitable[Any]] | None = getattr(self._ctx, "ask_input", None)
        if ask is None or before_task and not getattr(self._ctx, "published", True):
            return None
        return ask

    @property
    def rerun(self) -> bool:
        """Whether this run repeats an earlier round of the same request (2026-07-28: the client
        answered an ``input_required`` result; always False in the handshake era and in tasks)."""
        return bool(self._carry) or "inputResponses" in self.params

    async def once(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` (sync, or async: awaited) once per request and return its result.

        On 2026-07-28 a request that asks for input (``elicit``, ``sample``, ``list_roots``) runs
        again from the start when the client answers; a side effect before that ask would run
        on every round. Inside ``once`` it runs on the first round only: its result (it must be
        JSON: ``None``, numbers, strings, lists, dicts) rides in the signed ``requestState`` and
        later rounds get it back without running ``fn``: signed, not encrypted, so the client can
        read it (return an id, not a secret). ``name`` tells the ``once`` calls of one request apart. Elsewhere (handshake era, tasks) nothing runs twice: ``fn`` just runs.
        """
        key = _ONCE + name
        if key in self._carry:
            return self._carry[key]
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        self._carry[key] = value
        return value

    async def read_resource(self, uri: str) -> list[dict[str, Any]]:
        """Read one of this server's resources (a template's URI too): its ``contents`` list, as
        ``resources/read`` gives it, with this request's caller (their scopes apply). Raises the
        ``RPCError`` a client would get (unknown URI, a variable that does not convert)."""
        if self._reader is None:
            raise RuntimeError("this context reads no resources (it does not belong to a server)")
        return await self._reader(self.session, self._ctx, uri)

    async def sample(self, messages: list[dict[str, Any]], max_tokens: int, *, timeout: float | None = 120.0,
                     key: str | None = None, before_task: bool = False, **extra: Any) -> dict[str, Any]:
        """Ask the client's LLM (``sampling/createMessage``); returns the client's result.
        ``key``: the request's key in a 2026-07-28 ``inputRequests`` (default: one of ours).

        ``before_task``: in a 2026-07-28 call that the server runs as a task (the tasks
        extension), ask before the task exists, by an ``input_required`` answer to the call
        itself (SEP-2322); the client calls again with the answer, the tool runs again from the
        start, and the call becomes a task once the tool's first step (up to its first wait) is
        over (SEP-2663). Only in that first step; elsewhere it changes nothing. Without it, a
        task's request waits in the task (status ``input_required``, answered by ``tasks/update``)."""
        params = {"messages": messages, "maxTokens": max_tokens, **extra}
        result: dict[str, Any] = await self._ask("sampling/createMessage", params, "sampling", timeout, key, before_task)
        return result

    async def elicit(self, message: str, requested_schema: dict[str, Any], *, timeout: float | None = 600.0,
                     key: str | None = None, before_task: bool = False) -> dict[str, Any]:
        """Ask the user for input (``elicitation/create``); returns ``{action, content?}``.
        ``key``, ``before_task``: as for :meth:`sample`."""
        if not RULES[self.version].elicitation:
            raise ToolError("Elicitation is not available in this protocol version")
        result: dict[str, Any] = await self._ask(
            "elicitation/create", {"message": message, "requestedSchema": requested_schema}, "elicitation", timeout, key, before_task
        )
        return result

    async def list_roots(self, *, timeout: float | None = 60.0, key: str | None = None, before_task: bool = False) -> dict[str, Any]:
        """The client's roots (``roots/list``). ``key``, ``before_task``: as for :meth:`sample`."""
        result: dict[str, Any] = await self._ask("roots/list", {}, "roots", timeout, key, before_task)
        return result

    async def ask_all(self, requests: Mapping[str, tuple[str, dict[str, Any]]], *, timeout: float | None = 600.0,
                      before_task: bool = False) -> dict[str, Any]:
        """Several requests to the client at once, ``{key: (method, params)}`` with ``method`` one of
        ``sampling/createMessage``, ``elicitation/create``, ``roots/list``; returns ``{key: result}``.

        On 2026-07-28 every request still unanswered goes into ONE ``input_required`` result
        (the client answers them in one round); in a task, or in the handshake era, they are
        sent together and awaited together.
        """
        for method, _params in requests.values():
            if method not in _CAPABILITY_OF:
                raise ValueError(f"not a request to the client: {method!r}")
        if self.modern and self._task_input(before_task) is None:
            for method, _params in requests.values():
                if _CAPABILITY_OF[method] not in self.client_capabilities:
                    raise MissingRequiredClientCapability({_CAPABILITY_OF[method]: {}},
                                                          f"This request needs the client's {_CAPABILITY_OF[method]} capability")
            # answers of earlier rounds ride in the carried state, this round's in inputResponses
            responses = self.params.get("inputResponses")
            given = {**self._carry, **(responses if type(responses) is dict else {})}
            for k in requests:
                if k in given:
                    self._carry[k] = given[k]
            missing = {k: {"method": m, "params": p} for k, (m, p) in requests.items() if k not in given}
            if missing:
                raise InputRequired(missing, self._carry)
            return {k: given[k] for k in requests}
        keys = list(requests)
        answers = await asyncio.gather(*(self._ask(m, p, _CAPABILITY_OF[m], timeout, k, before_task) for k, (m, p) in requests.items()))
        return dict(zip(keys, answers, strict=True))


#: The client capability each request to the client needs.
_CAPABILITY_OF = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation", "roots/list": "roots"}
