"""The dispatcher: method registry and the request/response logic, sans I/O.

:meth:`Dispatcher.receive` takes the bytes of one message and returns what to
do: nothing, bytes to send at once, one :class:`Call` to run, or a
:class:`BatchJob`. Running a call (inline, in a thread or as a task) is the
transport's business (:mod:`sturdyrpc.runner`); turning its outcome into bytes
is the dispatcher's again (:meth:`Dispatcher.result`, :meth:`Dispatcher.failure`).

Nothing here reads a socket, starts a thread or touches an event loop.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, overload

import msgspec

from . import codec
from .errors import (
    HANDLER_ERRORS,
    INTERNAL_ERROR,
    InternalError,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    RPCError,
    incident_of,
)
from .limits import DEFAULT_LIMITS, Limits
from .messages import ErrorResponse, Id, InvalidMessage, Message, Response, classify, is_valid_id
from .params import Binder, compile_binder
from .profile import Profile

__all__ = ["Dispatcher", "Call", "BatchJob", "Context", "MethodEntry", "Received", "HANDLER_ERRORS", "Middleware", "CallNext"]

log = logging.getLogger("sturdyrpc")

F = TypeVar("F", bound=Callable[..., Any])

_NOTIFICATION: Any = object()  # the id slot of a call that must not be answered
_encode = codec.encode
_UNSET: Any = msgspec.UNSET
_encode_result = msgspec.json.Encoder().encode
#: What encoding a value may raise: NaN/inf, unsupported types, and RecursionError for a cyclic or
#: too deeply nested result (a RuntimeError, so it needs naming).
_UNENCODABLE = (codec.NonFiniteFloat, TypeError, ValueError, OverflowError, RecursionError)


class _Request(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """A message of the usual shape, as the hot path decodes it (faster than a dict).

    A request or notification whose members are well-typed, or something with ``result`` /
    ``error`` (a response, told apart by classify()). Anything else fails the decode and
    takes the general path, which answers it. Other members fail it too, so nothing in a
    message goes unvalidated (msgspec skips unknown members without checking their UTF-8).
    """

    jsonrpc: Literal["2.0"]
    method: str | msgspec.UnsetType = msgspec.UNSET
    params: dict[str, Any] | list[Any] | msgspec.UnsetType = msgspec.UNSET
    # Integers of any size stay exact here too; booleans are refused. A fractional id takes the
    # general path, where codec checks that it can be echoed as the number it was sent as.
    id: int | str | None | msgspec.UnsetType = msgspec.UNSET
    result: Any = msgspec.UNSET
    error: Any = msgspec.UNSET


_MEMBERS = ("jsonrpc", "method", "params", "id", "result", "error")


_decode_request = msgspec.json.Decoder(_Request).decode


class _Result(msgspec.Struct, gc=False):
    """A result response as the hot path encodes it (a struct encodes faster than a dict)."""

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


class MethodEntry:
    """One registered method: the function and what registration learnt about it."""

    __slots__ = ("name", "fn", "is_async", "blocking", "binder", "inline")

    def __init__(self, name: str, fn: Callable[..., Any], blocking: bool | None) -> None:
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        # Sync handlers run in a thread unless declared non-blocking: a slow one must not stall
        # the event loop. Async handlers always run on the loop.
        self.blocking = (not self.is_async) if blocking is None else (blocking and not self.is_async)
        self.binder: Binder = compile_binder(fn, Context)
        #: Runs at once on the caller's thread: sync, non-blocking, takes no context.
        self.inline = not self.is_async and not self.blocking and self.binder.context_name is None


class Call:
    """A request or notification, validated and bound, ready to run."""

    __slots__ = ("id", "method", "entry", "args", "kwargs", "params", "job", "slot")

    def __init__(self, id: Any, method: str, entry: MethodEntry, args: tuple[Any, ...], kwargs: dict[str, Any], params: Any) -> None:
        self.id = id
        self.method = method
        self.entry = entry
        self.args = args
        self.kwargs = kwargs
        self.params = params
        self.job: BatchJob | None = None
        self.slot = -1

    @property
    def is_notification(self) -> bool:
        return self.id is _NOTIFICATION

    @property
    def request_id(self) -> Id:
        """The id to answer to (None for a notification)."""
        return None if self.id is _NOTIFICATION else self.id

    def make_context(self, cls: type[Context] = Context, **extra: Any) -> Context:
        ctx = cls(self.request_id, self.method, self.params, self.id is _NOTIFICATION, **extra)
        return ctx

    def arguments(self, context: Context | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The handler's ``(args, kwargs)``, with ``context`` (or a plain one) where it asks for one."""
        name = self.entry.binder.context_name
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
    """A batch in progress: calls to run, and the answers collected so far."""

    __slots__ = ("calls", "_answers", "_dispatcher")

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.calls: list[Call] = []
        self._answers: list[dict[str, Any]] = []
        self._dispatcher = dispatcher

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

    #: Whether a chain around a sync ``blocking=False`` handler is started on the reader's turn
    #: (:func:`sturdyrpc.execute.run_call_now`): one that does not suspend answers with no task.
    #: Its first step then runs outside any task (no ``asyncio.current_task()``, no
    #: ``asyncio.timeout()`` before the first suspension); False runs every chain in a task.
    eager_chain: bool = True

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, logger: logging.Logger | None = None) -> None:
        self._small = 0  # messages up to this size need no size or depth check (set with limits)
        # A subclass that overrides receive() keeps the last word: receive_and_run() defers to it.
        self._own_receive = type(self).receive is Dispatcher.receive
        self.limits = limits
        self.log = logger or log
        self._methods: dict[str, MethodEntry] = {}
        #: The middleware, outermost first; every path runs a call through it (when not empty,
        #: inline handlers have it started on the reader's turn: ``execute.run_call_now``).
        self.middleware_chain: tuple[Middleware, ...] = ()
        self._composed = _compose(())
        self.stats: dict[str, int] = {
            "responses_ignored": 0,
            "parse_errors": 0,
            "invalid_requests": 0,
            "internal_errors": 0,
        }

    @property
    def limits(self) -> Limits:
        """The limits this dispatcher enforces (may be replaced; a :class:`Limits` is immutable)."""
        return self._limits

    @limits.setter
    def limits(self, value: Limits) -> None:
        self._limits = value
        # Valid JSON of n bytes nests at most n // 2 deep.
        self._small = min(value.max_message_bytes, 2 * value.max_depth)

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

    def add_method(self, fn: Callable[..., Any], name: str | None = None, *, blocking: bool | None = None, allow_reserved: bool = False) -> MethodEntry:
        """Register ``fn`` under ``name`` (signature inspected here, once)."""
        method_name = name if name is not None else fn.__name__
        if not isinstance(method_name, str) or not method_name:
            raise ValueError("method name must be a non-empty string")
        if method_name.startswith("rpc.") and not allow_reserved:
            raise ValueError("names starting with 'rpc.' are reserved by JSON-RPC 2.0")
        entry = MethodEntry(method_name, fn, blocking)
        self._methods[method_name] = entry
        return entry

    def get(self, name: str) -> MethodEntry | None:
        return self._methods.get(name)

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

    def receive(
        self,
        data: bytes,
        on_response: Callable[[Message | InvalidMessage], None] | None = None,
        profile: Profile | None = None,
        *,
        decoded: tuple[Any, int] | None = None,
    ) -> Received:
        """Parse and validate one message (or batch); say what is to be done.

        Responses (and malformed responses) are never answered: they go to
        ``on_response`` when given, else they are counted and dropped.
        ``profile`` (per connection) adds a protocol's rules: whether arrays are
        served as batches, extra checks before a call runs, and whether an
        unreadable id is answered as null or left out.
        ``decoded`` (with a ``profile``): ``(obj, depth)``, ``data`` as the transport decoded it
        already with :func:`codec.decode_bounded` at most ``depth`` deep; used instead of a second
        decode when ``depth`` is within :attr:`limits` (every other check is the same).
        """
        if profile is not None:
            return self._receive_profiled(data, on_response, profile, decoded)
        n = len(data)
        limits = self._limits
        if n <= self._small or n <= limits.max_message_bytes and data.count(b"[") + data.count(b"{") <= limits.max_depth:
            try:
                req = _decode_request(data)  # the usual shapes, checked by msgspec in C
            except Exception:
                pass  # anything else: the general path below
            else:
                return self._received(req, on_response)
        if n > limits.max_message_bytes:
            self.stats["invalid_requests"] += 1
            return self._error_bytes(
                InvalidRequest("Message too large", {"limit": "max_message_bytes", "max": limits.max_message_bytes}), None
            )
        try:
            obj = codec.decode_bounded(data, limits.max_depth)
        except codec.DecodeFailure as exc:
            if exc.too_deep:
                self.stats["invalid_requests"] += 1
                return self._error_bytes(InvalidRequest("Nesting too deep", {"limit": "max_depth", "max": limits.max_depth}), None)
            self.stats["parse_errors"] += 1
            self.log.debug("parse error: %s", exc.reason)
            return self._error_bytes(ParseError("Parse error"), None)
        if type(obj) is list:
            return self._receive_batch(obj, on_response)
        # Hot path: a well-formed single request, checked inline without building a message
        # object; anything unusual (including every error) takes the general path.
        if type(obj) is dict and obj.get("jsonrpc") == "2.0":
            method = obj.get("method")
            if type(method) is str:
                params = obj.get("params")
                t = type(params)
                if t is dict or t is list or params is None and "params" not in obj:
                    id_ = obj.get("id", _NOTIFICATION)
                    t = type(id_)
                    if t is int or t is str or id_ is _NOTIFICATION or id_ is None or t is float:
                        entry = self._methods.get(method)
                        if entry is not None:
                            try:
                                args, kwargs = entry.binder.bind(params)
                            except RPCError:
                                return self._prepare(method, params, id_)  # answers the error
                            return Call(id_, method, entry, args, kwargs, params)
                        return self._prepare(method, params, id_)
        return self._receive_slow(obj, on_response, None)

    def receive_and_run(self, data: bytes, on_response: Callable[[Message | InvalidMessage], None] | None = None) -> Received:
        """:meth:`receive`, and a request for an inline handler (sync, ``blocking=False``, no
        context) is run at once: its reply comes back as bytes (None for a notification).

        The hot path of the stdio server and of :meth:`handle_sync`. Only the common case
        (one well-formed request for an inline handler, params that bind) is handled here;
        everything else, every error included, goes through :meth:`receive` unchanged.
        """
        if not self._own_receive:
            todo = self.receive(data, on_response)
            if type(todo) is Call and todo.entry.inline and not self.middleware_chain:
                return self.run_inline(todo)
            return todo
        n = len(data)
        if n > self._small:
            limits = self._limits
            if n > limits.max_message_bytes or data.count(b"[") + data.count(b"{") > limits.max_depth:
                return self.receive(data, on_response)  # too large, or it might nest too deep
        try:
            # The types of the members are checked by msgspec, in C (see _Request).
            req = _decode_request(data)
        except Exception:  # not a request of the usual shape, or malformed: receive() sorts it out
            return self.receive(data, on_response)
        method: Any = req.method
        entry = self._methods.get(method) if method is not _UNSET else None
        if entry is None or not entry.inline or self.middleware_chain:
            # a Call to run elsewhere (through the middleware chain, when there is one), a response, an error
            return self._received(req, on_response)
        params: Any = req.params
        tp = type(params)
        if params is _UNSET:
            params = None
        id_: Any = req.id
        if id_ is _UNSET:
            id_ = _NOTIFICATION
        binder = entry.binder
        args: Any = ()
        kwargs: Any = params
        # The executor's error policy (HANDLER_ERRORS, the same tuple execute.call_now uses):
        # the sans-I/O core sits below the executor and cannot import it, and the call it would
        # add costs about 90 ns, 10% of a request on this path. test_execute checks that this
        # path, run_inline() and the executor answer alike.
        try:
            # Params that need no checks bind as they are (Binder.bind's shortcuts, inlined);
            # passed by position when the signature allows: a cheaper call than by name.
            one = binder.one_name
            names = binder.simple_names
            if tp is dict and one is not None and len(params) == 1 and one in params:
                value = entry.fn(params[one])
            elif tp is dict and names is not None and len(params) == len(names) and names.issuperset(params):
                getter = binder.dict_args
                value = entry.fn(*getter(params)) if getter is not None else entry.fn(**params)
            elif tp is list and binder.list_min <= len(params) <= binder.list_max:
                args, kwargs = params, {}
                value = entry.fn(*params)
            else:
                try:
                    args, kwargs = binder.bind(params)
                except RPCError:
                    return self._prepare(method, params, id_)  # answers the error
                value = entry.fn(*args, **kwargs)
        except HANDLER_ERRORS as exc:
            return self.failure(Call(id_, method, entry, tuple(args), dict(kwargs or {}), params), exc)
        if id_ is _NOTIFICATION:
            return None
        try:
            out: bytes = _encode_result(_Result("2.0", value, id_))
        except Exception:
            return self.result(Call(id_, method, entry, tuple(args), dict(kwargs or {}), params), value)
        t = type(value)
        # msgspec writes NaN/Infinity as null (see codec.encode): only a reply that
        # holds null and a value that can hold a float needs the careful way.
        if t is str or t is int or t is bool or value is None or out.find(b"null") < 0:
            return out
        return self.result(Call(id_, method, entry, tuple(args), dict(kwargs or {}), params), value)

    def _received(self, req: _Request, on_response: Callable[[Message | InvalidMessage], None] | None) -> Received:
        """What :meth:`receive` makes of a message decoded as a :class:`_Request`."""
        method: Any = req.method
        if method is _UNSET:  # a response (or an invalid message): classify() tells which
            obj = {k: v for k in _MEMBERS if (v := getattr(req, k)) is not _UNSET}
            return self._receive_slow(obj, on_response, None)
        params = None if req.params is _UNSET else req.params
        id_ = _NOTIFICATION if req.id is _UNSET else req.id
        entry = self._methods.get(method)
        if entry is not None:
            try:
                args, kwargs = entry.binder.bind(params)
            except RPCError:
                return self._prepare(method, params, id_)  # answers the error
            return Call(id_, method, entry, args, kwargs, params)
        return self._prepare(method, params, id_)

    def _receive_profiled(self, data: bytes, on_response: Callable[[Message | InvalidMessage], None] | None, profile: Profile,
                          decoded: tuple[Any, int] | None = None) -> Received:
        omit = profile.omit_unreadable_id()
        limits = self.limits
        if len(data) > limits.max_message_bytes:
            self.stats["invalid_requests"] += 1
            return self._error_bytes(
                InvalidRequest("Message too large", {"limit": "max_message_bytes", "max": limits.max_message_bytes}), None, omit
            )
        try:
            obj = decoded[0] if decoded is not None and decoded[1] <= limits.max_depth else codec.decode_bounded(data, limits.max_depth)
        except codec.DecodeFailure as exc:
            if exc.too_deep:
                self.stats["invalid_requests"] += 1
                return self._error_bytes(InvalidRequest("Nesting too deep", {"limit": "max_depth", "max": limits.max_depth}), None, omit)
            self.stats["parse_errors"] += 1
            return self._error_bytes(ParseError("Parse error"), None, omit)
        if type(obj) is list:
            if not profile.batches_allowed():
                self.stats["invalid_requests"] += 1
                return self._error_bytes(InvalidRequest("Invalid Request", {"reason": "batches are not supported"}), None, omit)
            return self._receive_batch(obj, on_response, profile)
        # Same hot path as receive(): a well-formed single request skips classify(); the
        # profile's rules still apply in _prepare().
        if type(obj) is dict and obj.get("jsonrpc") == "2.0":
            method = obj.get("method")
            if type(method) is str:
                params = obj.get("params")
                if params is None and "params" not in obj or type(params) is dict or type(params) is list:
                    if "id" not in obj:
                        return self._prepare(method, params, _NOTIFICATION, None, profile)
                    id_ = obj["id"]
                    if is_valid_id(id_):
                        return self._prepare(method, params, id_, None, profile)
        return self._receive_slow(obj, on_response, None, profile)

    def _receive_slow(
        self,
        obj: Any,
        on_response: Callable[[Message | InvalidMessage], None] | None,
        job: BatchJob | None,
        profile: Profile | None = None,
    ) -> Received:
        try:
            msg = classify(obj)
        except InvalidMessage as bad:
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
        if isinstance(msg, (Response, ErrorResponse)):
            self._response_arrived(msg, on_response)
            return None
        return self._prepare(msg.method, msg.params, getattr(msg, "id", _NOTIFICATION), job, profile)

    def _response_arrived(self, msg: Message | InvalidMessage, on_response: Callable[[Message | InvalidMessage], None] | None) -> None:
        if on_response is not None:
            on_response(msg)
        else:
            self.stats["responses_ignored"] += 1
            self.log.debug("ignored a response sent to a server-only endpoint")

    def _prepare(self, method: str, params: Any, id_: Any, job: BatchJob | None = None, profile: Profile | None = None) -> Received:
        entry = self._methods.get(method)
        try:
            if profile is not None:
                refusal = profile.check_request(method, params, None if id_ is _NOTIFICATION else id_, id_ is _NOTIFICATION)
                if refusal is not None:
                    raise refusal
            if entry is None:
                raise MethodNotFound("Method not found")
            # The profile may hide protocol members (progress token, _meta) from the signature.
            args, kwargs = entry.binder.bind(params if profile is None else profile.params_for_handler(params))
        except RPCError as err:
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
        call = Call(id_, method, entry, args, kwargs, params)
        if job is not None:
            call.job = job
            job.calls.append(call)
            return None
        return call

    def _receive_batch(
        self, items: list[Any], on_response: Callable[[Message | InvalidMessage], None] | None, profile: Profile | None = None
    ) -> Received:
        if not items:
            self.stats["invalid_requests"] += 1
            return self._error_bytes(InvalidRequest("Invalid Request"), None)
        if len(items) > self.limits.max_batch:
            self.stats["invalid_requests"] += 1
            return self._error_bytes(
                InvalidRequest("Batch too large", {"limit": "max_batch", "max": self.limits.max_batch}), None
            )
        job = BatchJob(self)
        for item in items:
            self._receive_slow(item, on_response, job, profile)
        if not job.calls:
            return job.finish()
        return job

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
            t = type(value)
            if not (t is str or t is int or t is bool or value is None) and out.find(b"null") >= 0 and codec.has_non_finite(value):
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

    def run_inline(self, call: Call) -> bytes | None:
        """Run ``call`` on this thread (through the executor's error policy: ``sys.exit()`` in a
        handler is a -32603 reply, never the end of the server). Async handlers must finish
        without suspending."""
        entry = call.entry
        if self.middleware_chain:
            return self._run_chain_inline(call)
        args, kwargs = call.arguments() if entry.binder.context_name is not None else (call.args, call.kwargs)
        # The executor's policy (see receive_and_run): the core cannot import execute.py.
        try:
            value = _drive(entry.fn(*args, **kwargs)) if entry.is_async else entry.fn(*args, **kwargs)
        except HANDLER_ERRORS as exc:
            return self.failure(call, exc)
        return self.result(call, value)

    def _run_chain_inline(self, call: Call) -> bytes | None:
        """:meth:`run_inline` through the middleware chain (which must not suspend either)."""
        entry = call.entry
        ctx = call.make_context()
        self.prepare_context(ctx)

        async def endpoint(c: Context) -> Any:
            args, kwargs = call.arguments(c)
            value = entry.fn(*args, **kwargs)
            return await value if entry.is_async else value

        try:
            value = _drive(self.run_chain(ctx, endpoint))
        except HANDLER_ERRORS as exc:
            return self.failure(call, exc)
        return self.result(call, value)

    def handle_sync(self, data: bytes) -> bytes | None:
        """Bytes in, bytes out, all on this thread (batch elements one after another).

        For tests, benchmarks and embedding in synchronous code; servers use
        :class:`sturdyrpc.runner.Runner`, which runs calls concurrently.
        """
        todo = self.receive_and_run(data)
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
    """Run a coroutine that finishes without suspending, with no event loop (``handle_sync``)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("async handler suspended; run it with an async runner")
