"""The dispatcher: method registry and the request/response logic, sans I/O.

:meth:`Dispatcher.receive` takes the bytes of one message (:mod:`sturdyrpc.envelope` reads
them, once) and :meth:`Dispatcher.accept` takes what was read; both say what is to be done:
nothing, bytes to send at once (an error), one :class:`Call` to run, or a :class:`BatchJob`.
Each registered entry knows its :data:`plan` (how it runs: inline on the reader's turn, on the
reader's turn with its context or middleware, or as a task), worked out once at registration and
again when the middleware changes. Running a call is the runner's business
(:mod:`sturdyrpc.runner`, the one executor); turning its outcome into bytes is the
dispatcher's again (:meth:`Dispatcher.result`, :meth:`Dispatcher.failure`).

Nothing here reads a socket, starts a thread or touches an event loop.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, overload

import msgspec

from . import codec
from .envelope import UNSET, Envelope, Refused, read
from .errors import HANDLER_ERRORS, INTERNAL_ERROR, InternalError, InvalidRequest, MethodNotFound, RPCError, incident_of
from .invoke import answer_now, call_async, call_now
from .limits import DEFAULT_LIMITS, Limits
from .messages import ErrorResponse, Id, InvalidMessage, Message, Response, is_valid_id
from .params import Binder, compile_binder
from .profile import Profile

__all__ = [
    "NOTIFICATION",
    "Dispatcher", "Call", "BatchJob", "Context", "MethodEntry", "Received", "HANDLER_ERRORS", "Middleware", "CallNext",
    "Plan", "INLINE", "NOW", "TASK",
]

log = logging.getLogger("sturdyrpc")

F = TypeVar("F", bound=Callable[..., Any])

_NOTIFICATION: Any = object()  # the id slot of a call that must not be answered
#: :attr:`Call.id` of a notification (compare with ``is``): what :attr:`Call.is_notification`
#: asks, for a caller that asks it once per message on its hot path (a property is a call).
NOTIFICATION: Any = _NOTIFICATION
_encode = codec.encode
_RAW = msgspec.Raw  # encoded already (a rendered result): nothing non-finite can hide in it
_EMPTY: dict[str, Any] = {}
#: Results that cannot hold a float (a rendered result is checked already).
_NO_FLOATS = frozenset({_RAW, str, int, bool, type(None)})
_encode_result = msgspec.json.Encoder().encode
#: What encoding a value may raise: NaN/inf, unsupported types, and RecursionError for a cyclic or
#: too deeply nested result (a RuntimeError, so it needs naming).
_UNENCODABLE = (codec.NonFiniteFloat, TypeError, ValueError, OverflowError, RecursionError)

#: How an entry runs (:attr:`MethodEntry.plan`):
#: ``INLINE``: a sync ``blocking=False`` handler that takes no context, with no middleware: called
#: on the reader's turn, its reply ready at once;
#: ``NOW``: a sync ``blocking=False`` handler that takes a context, or runs through the middleware
#: chain (``Dispatcher.eager_chain``): started on the reader's turn, answered at once unless the
#: chain suspends (then it goes on in a task);
#: ``TASK``: an async or blocking handler: a task (blocking ones on the bounded thread pool).
Plan = Literal["inline", "now", "task"]
INLINE: Plan = "inline"
NOW: Plan = "now"
TASK: Plan = "task"


class _Result(msgspec.Struct, gc=False):
    """A result response as the encoder writes it (a struct encodes faster than a dict)."""

    jsonrpc: str
    result: Any
    id: Any


class Context:
    """What a handler (and each middleware) can know about the request it serves.

    Declare a parameter annotated ``Context`` (any name) to receive it; it is never bound
    from params. Transports that support more (progress, cancellation, calls back to the
    peer) pass a subclass.

    ``session_id``, ``principal``, ``lifespan``, ``headers`` and ``state`` are filled by the
    layer that knows them before the middleware chain runs (None where nothing does: e.g.
    ``principal`` without an HTTP security step, ``headers`` off HTTP).
    """

    __slots__ = ("id", "method", "params", "is_notification", "session_id", "principal", "lifespan", "headers", "state", "incident")

    def __init__(self, id: Id, method: str, params: Any, is_notification: bool) -> None:
        self.id = id
        self.method = method
        self.params = params
        self.is_notification = is_notification
        #: The session the request belongs to (MCP: the connection's or ``Mcp-Session-Id``).
        self.session_id: str | None = None
        #: Whatever the transport's security step produced for the caller (None without one).
        self.principal: Any = None
        #: The value the server's lifespan yielded (MCP servers with ``lifespan=``).
        self.lifespan: Any = None
        #: The HTTP request's headers, lower-case names (None off HTTP).
        self.headers: Mapping[str, str] | None = None
        #: A dict that lives as long as the session (None where there is no session).
        self.state: dict[str, Any] | None = None
        #: The incident id of an unexpected failure answered inside the chain (an MCP tool's
        #: ``isError`` result), so an outer middleware can report it; None otherwise.
        self.incident: str | None = None

    @property
    def meta(self) -> dict[str, Any]:
        """``params._meta`` when params is an object holding one, else an empty dict."""
        p = self.params
        if type(p) is dict:
            m = p.get("_meta")
            if type(m) is dict:
                return m
        return {}

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress to the caller. Without a transport that carries it, a no-op."""
        return None


#: ``route(params) -> entry``: the entry that serves one request of a routed method (MCP's
#: ``tools/call``: the called tool's own entry); raises an ``RPCError`` to refuse the request.
Route = Callable[[Any], "MethodEntry"]


class MethodEntry:
    """One registered method: the function and what registration learnt about it.

    ``raw``: the function takes the request's params as they are and the request's context,
    ``fn(params, ctx)`` (``ctx`` None when it runs inline without one): the protocol layer's
    own handlers, which check their params themselves. ``route``: see :data:`Route`.
    """

    __slots__ = ("name", "fn", "is_async", "blocking", "binder", "raw", "route", "plan", "takes_context", "__weakref__")

    def __init__(self, name: str, fn: Callable[..., Any], blocking: bool | None, *, raw: bool = False,
                 route: Route | None = None) -> None:
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        # Sync handlers run in a thread unless declared non-blocking: a slow one must not stall
        # the event loop. Async handlers always run on the loop.
        self.blocking = (not self.is_async) if blocking is None else (blocking and not self.is_async)
        self.raw = raw
        self.binder: Binder = compile_binder(_no_params if raw else fn, Context)
        self.route = route
        #: How it runs (see :data:`Plan`); set by the dispatcher that made it.
        self.plan: Plan = TASK
        #: Whether the handler is given the request's context.
        self.takes_context = raw or self.binder.context_name is not None

    @property
    def inline(self) -> bool:
        """Runs at once on the caller's thread: sync, non-blocking, takes no context."""
        return not self.is_async and not self.blocking and not self.raw and self.binder.context_name is None


def _no_params() -> None:
    """The signature of a raw entry as far as binding goes: params are not bound."""


class Call(msgspec.Struct, dict=False, weakref=False):
    """A request or notification, validated and bound, ready to run (a struct: made in C, one
    per request on every path).

    ``origin``: where its reply goes when the transport gave one (see
    :meth:`sturdyrpc.runner.Runner.feed_envelope`); None: the connection's own ``send``.
    """

    id: Any
    method: str
    entry: MethodEntry
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    params: Any
    job: BatchJob | None = None
    origin: Any = None

    def __hash__(self) -> int:  # calls are keys of the runner's tables: by identity
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    @property
    def is_notification(self) -> bool:
        return self.id is _NOTIFICATION

    @property
    def request_id(self) -> Id:
        """The id to answer to (None for a notification)."""
        return None if self.id is _NOTIFICATION else self.id

    def make_context(self, cls: type[Context] = Context, **extra: Any) -> Context:
        return cls(self.request_id, self.method, self.params, self.id is _NOTIFICATION, **extra)

    def arguments(self, context: Context | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The handler's ``(args, kwargs)``, with ``context`` (or a plain one) where it asks for one."""
        entry = self.entry
        if entry.raw:
            return (self.params, context), _EMPTY
        name = entry.binder.context_name
        if name is None:
            return self.args, self.kwargs
        kwargs = dict(self.kwargs)
        kwargs[name] = context if context is not None else self.make_context()
        return self.args, kwargs

    def invoke(self, context: Context | None = None) -> Any:
        """Call the handler (returns a coroutine for async handlers)."""
        args, kwargs = self.arguments(context)
        return self.entry.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Call(method={self.method!r}, id={'(notification)' if self.is_notification else repr(self.id)})"


class BatchJob:
    """A batch in progress: calls to run, and the answers collected so far.

    ``origin``: as for :class:`Call`, for the batch's one reply."""

    __slots__ = ("calls", "_answers", "_dispatcher", "origin")

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.calls: list[Call] = []
        self._answers: list[dict[str, Any]] = []
        self._dispatcher = dispatcher
        self.origin: Any = None

    def add_answer(self, answer: dict[str, Any]) -> None:
        self._answers.append(answer)

    def finish(self) -> bytes | None:
        """The batch reply, or None when nothing is to be answered (never ``[]``)."""
        if not self._answers:
            return None
        return self._dispatcher._encode_batch(self._answers)


#: What :meth:`Dispatcher.receive` returns.
Received = None | bytes | Call | BatchJob

#: ``call_next(ctx)``: the rest of the middleware chain, then the handler; returns the result.
CallNext = Callable[[Context], Awaitable[Any]]
#: ``async def mw(ctx, call_next) -> result``: may return ``await call_next(ctx)``, return a
#: result of its own, or raise (an ``RPCError`` goes out as it is; anything else as a handler's).
Middleware = Callable[[Context, CallNext], Awaitable[Any]]

OnResponse = Callable[[Message | InvalidMessage], None]


def _compose(chain: tuple[Middleware, ...]) -> Callable[[Context, CallNext], Awaitable[Any]]:
    """``run(ctx, endpoint)``: ``endpoint`` wrapped by ``chain``, the first middleware outermost.

    Built once per change of the chain, so a call costs one small closure per middleware.
    """
    run: Callable[[Context, CallNext], Awaitable[Any]] = lambda ctx, endpoint: endpoint(ctx)  # noqa: E731
    for mw in reversed(chain):
        run = _wrap(mw, run)
    return run


def _wrap(mw: Middleware, inner: Callable[[Context, CallNext], Awaitable[Any]]) -> Callable[[Context, CallNext], Awaitable[Any]]:
    def run(ctx: Context, endpoint: CallNext) -> Awaitable[Any]:
        return mw(ctx, lambda c: inner(c, endpoint))

    return run


class Dispatcher:
    """A registry of methods and the JSON-RPC 2.0 server logic.

    >>> rpc = Dispatcher()
    >>> @rpc.method
    ... def add(a: int, b: int) -> int:
    ...     return a + b
    >>> rpc.handle_sync(b'{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}')
    b'{"jsonrpc":"2.0","result":3,"id":1}'
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, logger: logging.Logger | None = None) -> None:
        #: The limits this dispatcher enforces (may be replaced; a :class:`Limits` is immutable).
        self.limits = limits
        self.log = logger or log
        self._methods: dict[str, MethodEntry] = {}
        #: The entry that serves a method no registered entry names (None: such a call is
        #: refused with -32601). A proxy sets a raw one: it forwards what it cannot know.
        self.fallback: MethodEntry | None = None
        #: Every entry made here (routed ones too), so a change of the middleware re-plans them all.
        self._entries: weakref.WeakSet[MethodEntry] = weakref.WeakSet()
        #: The middleware, outermost first; every path runs a call through it.
        self.middleware_chain: tuple[Middleware, ...] = ()
        self._composed = _compose(())
        self._eager_chain = True
        self.stats: dict[str, int] = {
            "responses_ignored": 0,
            "parse_errors": 0,
            "invalid_requests": 0,
            "internal_errors": 0,
        }

    @property
    def eager_chain(self) -> bool:
        """Whether a chain around a sync ``blocking=False`` handler is started on the reader's turn
        (plan ``NOW``): one that does not suspend answers with no task. Its first step then runs
        outside any task (no ``asyncio.current_task()``, no ``asyncio.timeout()`` before the first
        suspension); False runs every chain in a task (plan ``TASK``)."""
        return self._eager_chain

    @eager_chain.setter
    def eager_chain(self, value: bool) -> None:
        self._eager_chain = bool(value)
        self._replan()

    # ----------------------------------------------------------------- registry

    @overload
    def method(self, fn: F) -> F: ...

    @overload
    def method(self, fn: None = None, *, name: str | None = None, blocking: bool | None = None) -> Callable[[F], F]: ...

    def method(self, fn: F | None = None, *, name: str | None = None, blocking: bool | None = None) -> Any:
        """Register a handler; the method name defaults to the function's name.

        ``blocking``: sync handlers run in a thread pool by default so they cannot stall
        the event loop; pass ``blocking=False`` for a sync handler that returns at once.
        """

        def register(f: F) -> F:
            self.add_method(f, name=name, blocking=blocking)
            return f

        if fn is not None:
            return register(fn)
        return register

    def add_method(self, fn: Callable[..., Any], name: str | None = None, *, blocking: bool | None = None, allow_reserved: bool = False,
                   raw: bool = False, route: Route | None = None) -> MethodEntry:
        """Register ``fn`` under ``name`` (signature inspected here, once). ``raw`` and ``route``:
        see :class:`MethodEntry` (for protocol layers)."""
        method_name = name if name is not None else fn.__name__
        if not isinstance(method_name, str) or not method_name:
            raise ValueError("method name must be a non-empty string")
        if method_name.startswith("rpc.") and not allow_reserved:
            raise ValueError("names starting with 'rpc.' are reserved by JSON-RPC 2.0")
        entry = self.make_entry(fn, method_name, blocking=blocking, raw=raw, route=route)
        self._methods[method_name] = entry
        return entry

    def make_entry(self, fn: Callable[..., Any], name: str, *, blocking: bool | None = None, raw: bool = False,
                   route: Route | None = None) -> MethodEntry:
        """An entry for ``fn``, planned by this dispatcher but registered under no name: what a
        :data:`Route` returns (re-planned with the others when the middleware changes)."""
        entry = MethodEntry(name, fn, blocking, raw=raw, route=route)
        entry.plan = self._plan_of(entry)
        self._entries.add(entry)
        return entry

    def get(self, name: str) -> MethodEntry | None:
        return self._methods.get(name)

    def _plan_of(self, entry: MethodEntry) -> Plan:
        if entry.is_async or entry.blocking:
            return TASK
        if self.middleware_chain:
            return NOW if self._eager_chain else TASK
        # a raw entry runs inline without a context; a handler that takes one needs it made first
        return INLINE if entry.raw or entry.binder.context_name is None else NOW

    def _replan(self) -> None:
        for entry in list(self._entries):
            entry.plan = self._plan_of(entry)

    # --------------------------------------------------------------- middleware

    def middleware(self, fn: Middleware, *, outermost: bool = False) -> Middleware:
        """Add ``fn`` to the end of the middleware chain (innermost so far); usable as a decorator.
        ``outermost=True`` puts it first instead (around everything added before and after:
        instrumentation that must see every outcome).

        ``async def fn(ctx, call_next)`` runs around every request and notification on every
        transport: ``return await call_next(ctx)`` to go on, return a value to answer without
        the handler, or raise. An exception other than ``RPCError`` is handled exactly like a
        handler's (-32603 with an incident id, nothing of its text to the client).
        """
        if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)):
            # a sync function would fail on every call, far from here: say so at registration
            raise TypeError(f"middleware must be an async function (ctx, call_next), not {fn!r}")
        self.middleware_chain = (fn, *self.middleware_chain) if outermost else (*self.middleware_chain, fn)
        self._composed = _compose(self.middleware_chain)
        self._replan()
        return fn

    def run_chain(self, ctx: Context, endpoint: CallNext) -> Awaitable[Any]:
        """``endpoint(ctx)`` (the handler) wrapped by the middleware chain."""
        return self._composed(ctx, endpoint)

    def prepare_context(self, ctx: Context) -> None:
        """Fill what the protocol layer knows about ``ctx`` (session, principal...) before the
        chain sees it. The plain dispatcher knows nothing more; MCP's fills the session's."""

    @property
    def methods(self) -> Iterable[str]:
        return self._methods.keys()

    # ---------------------------------------------------------------- receiving

    def receive(self, data: bytes, on_response: OnResponse | None = None, profile: Profile | None = None) -> Received:
        """Read and validate one message (or batch); say what is to be done.

        Responses (and malformed responses) are never answered: they go to
        ``on_response`` when given, else they are counted and dropped.
        ``profile`` (per connection) adds a protocol's rules: whether arrays are
        served as batches, extra checks before a call runs, and whether an
        unreadable id is answered as null or left out.
        """
        got = read(data, self.limits)
        if type(got) is Envelope:
            return self.accept(got, profile, on_response)
        return self.accept_read(got, profile, on_response)

    def accept_read(self, got: Any, profile: Profile | None = None, on_response: OnResponse | None = None) -> Received:
        """:meth:`receive` for what :func:`sturdyrpc.envelope.read` returned (any of its shapes)."""
        t = type(got)
        if t is Envelope:
            return self.accept(got, profile, on_response)
        if t is list:
            return self.accept_batch(got, profile, on_response)
        if t is Refused:
            omit = profile is not None and profile.omit_unreadable_id()
            err = got.error
            self.stats["parse_errors" if err.code == -32700 else "invalid_requests"] += 1
            return self._error_bytes(err, None, omit)
        return self._invalid(got, profile, on_response, None)

    def accept(self, env: Envelope, profile: Profile | None = None, on_response: OnResponse | None = None,
               job: BatchJob | None = None) -> Received:
        """What is to be done with one message read as ``env``: a :class:`Call` (added to ``job``
        for a batch element, then None), error bytes, or None (a response, or a notification
        refused: never answered)."""
        method: Any = env.method
        if method is UNSET:  # a response (read() checked its shape: it has an id)
            rid: Any = env.id
            self._response_arrived(Response(rid, env.result) if env.error is UNSET else ErrorResponse(rid, env.error), on_response)
            return None
        params: Any = env.params
        if params is UNSET:
            params = None
        id_: Any = env.id
        if id_ is UNSET:
            id_ = _NOTIFICATION
        entry = self._methods.get(method)
        try:
            if profile is not None:
                refusal = profile.check_request(method, params, None if id_ is _NOTIFICATION else id_, id_ is _NOTIFICATION)
                if refusal is not None:
                    raise refusal
            if entry is None:
                entry = self.fallback
                if entry is None:
                    raise MethodNotFound("Method not found")
            if entry.route is not None:
                entry = entry.route(params)
            if entry.raw:  # its params as they are, and no context (as it runs inline: see Call.arguments)
                args: tuple[Any, ...] = (params, None)
                kwargs: dict[str, Any] = _EMPTY
            else:
                # The profile may hide protocol members (progress token, _meta) from the signature.
                args, kwargs = entry.binder.bind(params if profile is None else profile.params_for_handler(params))
        except RPCError as err:
            return self._refuse(err, id_, profile, job)
        call = Call(id_, method, entry, args, kwargs, params)
        if job is not None:
            call.job = job
            job.calls.append(call)
            return None
        return call

    def accept_batch(self, items: list[Envelope | InvalidMessage], profile: Profile | None = None,
                     on_response: OnResponse | None = None) -> Received:
        """What is to be done with a batch read as ``items``: a :class:`BatchJob` with the calls to
        run (the errors of the others collected in it), its finished reply, or None."""
        if profile is not None and not profile.batches_allowed():
            self.stats["invalid_requests"] += 1
            return self._error_bytes(InvalidRequest("Invalid Request", {"reason": "batches are not supported"}), None,
                                     profile.omit_unreadable_id())
        job = BatchJob(self)
        for item in items:
            if type(item) is Envelope:
                self.accept(item, profile, on_response, job)
            else:
                self._invalid(item, profile, on_response, job)  # type: ignore[arg-type]
        if not job.calls:
            return job.finish()
        return job

    def _invalid(self, bad: InvalidMessage, profile: Profile | None, on_response: OnResponse | None, job: BatchJob | None) -> Received:
        if bad.is_response:
            self._response_arrived(bad, on_response)
            return None
        self.stats["invalid_requests"] += 1
        bad_id = bad.id
        if profile is not None and bad_id is not None and not profile.answerable_id(bad_id):
            bad_id = None  # an id the protocol does not allow is answered as unreadable
        omit = profile is not None and bad_id is None and profile.omit_unreadable_id()
        if job is not None:
            job.add_answer(_error_dict(bad.error, bad_id, omit))
            return None
        return self._error_bytes(bad.error, bad_id, omit)

    def _refuse(self, err: RPCError, id_: Any, profile: Profile | None, job: BatchJob | None) -> Received:
        if id_ is _NOTIFICATION:
            return None  # notifications are never answered, not even with an error
        omit = False
        if profile is not None and not profile.answerable_id(id_):
            # e.g. MCP forbids null and fractional ids: answer as if the id were unreadable
            id_, omit = None, profile.omit_unreadable_id()
        if job is not None:
            job.add_answer(_error_dict(err, id_, omit))
            return None
        return self._error_bytes(err, id_, omit)

    def _response_arrived(self, msg: Message | InvalidMessage, on_response: OnResponse | None) -> None:
        if on_response is not None:
            on_response(msg)
        else:
            self.stats["responses_ignored"] += 1
            self.log.debug("ignored a response sent to a server-only endpoint")

    # ---------------------------------------------------------------- answering

    def result(self, call: Call, value: Any) -> bytes | None:
        """The reply to ``call`` that returned ``value`` (None for a notification or batch element)."""
        id_ = call.id
        if id_ is _NOTIFICATION:
            return None
        if call.job is not None:
            call.job.add_answer(self._result_dict(call, value))
            return None
        try:
            out: bytes = _encode_result(_Result("2.0", value, id_))
            # As codec.encode: msgspec writes NaN/Infinity as null, so a reply holding null
            # is checked (unless the value is a scalar that cannot hide one).
            if type(value) not in _NO_FLOATS and out.find(b"null") >= 0 and codec.has_non_finite(value):
                raise codec.NonFiniteFloat("value holds NaN or Infinity")
            return out
        except _UNENCODABLE as exc:
            return self._error_bytes(self._internal(call, exc, "result could not be encoded as JSON"), id_)

    def failure(self, call: Call, exc: BaseException) -> bytes | None:
        """The reply to ``call`` whose handler raised ``exc``.

        An :class:`RPCError` goes out as it is; anything else becomes a bare -32603 whose
        data holds only an incident id, and the traceback goes to the log under that id.
        """
        if isinstance(exc, RPCError):
            err: RPCError = exc
            if call.id is _NOTIFICATION:
                self.log.info("notification %r raised %r (not answered)", call.method, exc)
                return None
        else:
            err = self._internal(call, exc, "handler raised")
        if call.id is _NOTIFICATION:
            return None
        if call.job is not None:
            call.job.add_answer(_error_dict(err, call.id))
            return None
        return self._error_bytes(err, call.id)

    def answer(self, call: Call, ok: bool, value: Any) -> bytes | None:
        """:meth:`result` or :meth:`failure` of an outcome ``(ok, value)``."""
        return self.result(call, value) if ok else self.failure(call, value)

    def _internal(self, call: Call, exc: BaseException, what: str) -> InternalError:
        incident = incident_of(exc)
        self.stats["internal_errors"] += 1
        self.log.error("incident %s: method %r: %s", incident, call.method, what, exc_info=exc)
        return InternalError("Internal error", {"incident": incident})

    def _result_dict(self, call: Call, value: Any) -> dict[str, Any]:
        answer = {"jsonrpc": "2.0", "result": value, "id": call.id}
        try:
            _encode(value)
        except _UNENCODABLE as exc:
            return _error_dict(self._internal(call, exc, "result could not be encoded as JSON"), call.id)
        return answer

    def _error_bytes(self, err: RPCError, id_: Id, omit_id: bool = False) -> bytes:
        try:
            return _encode(_error_dict(err, id_, omit_id))
        except _UNENCODABLE:
            # The error's own data could not be encoded: send the error without it. Nor could
            # the id, when it is one the codec marked unreadable (a transport refusing a held
            # request echoes what it read): answer it as unreadable.
            safe = RPCError(str(err.message), code=err.code)
            return _encode(_error_dict(safe, id_ if is_valid_id(id_) else None, omit_id))

    def _encode_batch(self, answers: list[dict[str, Any]]) -> bytes:
        try:
            return _encode(answers)
        except _UNENCODABLE:
            safe = []
            for a in answers:
                try:
                    _encode(a)
                    safe.append(a)
                except _UNENCODABLE:
                    safe.append({"jsonrpc": "2.0", "error": {"code": INTERNAL_ERROR, "message": "Internal error"}, "id": a.get("id")})
            return _encode(safe)

    def error_reply(self, err: RPCError, id_: Id = None, *, omit_id: bool = False) -> bytes:
        """Encode an error response (for transports that must refuse something themselves)."""
        return self._error_bytes(err, id_, omit_id)

    # -------------------------------------------------------------- convenience

    def run_inline(self, call: Call, context: Context | None = None) -> bytes | None:
        """Run ``call`` to its reply on this thread, without an event loop (``handle_sync``, and
        the runner's ``INLINE`` plan). An async handler (and the middleware chain) must finish
        without suspending. User code runs under the one error policy
        (:mod:`sturdyrpc.invoke`): ``sys.exit()`` in a handler is a -32603 reply, never the end
        of the server."""
        entry = call.entry
        if entry.plan is INLINE and context is None:  # the runner's INLINE plan: its arguments are bound
            return answer_now(entry.fn, call.args, call.kwargs, call, self.result, self.failure)
        if self.middleware_chain:
            return self._run_chain_inline(call, context)
        args, kwargs = call.arguments(context)
        ok, value = _drive(call_async(entry.fn, args, kwargs)) if entry.is_async else call_now(entry.fn, args, kwargs)
        return self.result(call, value) if ok else self.failure(call, value)

    def _run_chain_inline(self, call: Call, context: Context | None) -> bytes | None:
        """:meth:`run_inline` through the middleware chain (which must not suspend either)."""
        entry = call.entry
        ctx = context if context is not None else call.make_context()
        self.prepare_context(ctx)

        async def endpoint(c: Context) -> Any:
            args, kwargs = call.arguments(c)
            value = entry.fn(*args, **kwargs)
            return await value if entry.is_async else value

        ok, value = _drive(call_async(self.run_chain, (ctx, endpoint), {}))
        return self.result(call, value) if ok else self.failure(call, value)

    def handle_sync(self, data: bytes) -> bytes | None:
        """Bytes in, bytes out, all on this thread (batch elements one after another).

        For tests, benchmarks and embedding in synchronous code; servers use
        :class:`sturdyrpc.runner.Runner`, which runs calls concurrently.
        """
        todo = self.receive(data)
        if todo is None or type(todo) is bytes:
            return todo
        if type(todo) is Call:
            return self.run_inline(todo)
        assert isinstance(todo, BatchJob)
        for call in todo.calls:
            self.run_inline(call)
        return todo.finish()


def _error_dict(err: RPCError, id_: Id, omit_id: bool = False) -> dict[str, Any]:
    if omit_id:
        return {"jsonrpc": "2.0", "error": err.to_dict()}
    return {"jsonrpc": "2.0", "error": err.to_dict(), "id": id_}


def _drive(coro: Any) -> Any:
    """Run a coroutine that finishes without suspending, with no event loop (``handle_sync``).
    A coroutine that suspends is closed and its outcome is a failure."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    return False, RuntimeError("async handler suspended; run it with an async runner")
