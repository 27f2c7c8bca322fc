"""Tasks: a ``tools/call`` that answers at once with a task handle, runs in the background, and
is polled, fetched and cancelled later, through any worker.

Two protocol shapes over one mechanism:

- **2025-11-25** (experimental core feature, ``docs/specification/2025-11-25/basic/utilities/tasks.mdx``):
  the ``tasks`` capability (``list``, ``cancel``, ``requests.tools.call``); per tool
  ``execution.taskSupport``; a ``tools/call`` carrying ``params.task`` gets a
  ``CreateTaskResult`` ``{task: {...}}``; ``tasks/get``, ``tasks/result`` (blocks until the task
  is terminal, then the original result or JSON-RPC error with the ``related-task`` ``_meta``),
  ``tasks/list`` (paginated), ``tasks/cancel``; optional ``notifications/tasks/status``.
- **2026-07-28** (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663): announced in
  ``server/discover`` under ``capabilities.extensions``; the server decides, for a client that
  declares the extension in its per-request capabilities, to answer a ``tools/call`` of a tool
  whose ``task_support`` is ``"optional"`` or ``"required"`` with ``resultType: "task"`` (flat
  task fields, ``ttlMs``/``pollIntervalMs``); ``tasks/get`` carries ``result`` or ``error``
  once terminal; ``tasks/update`` and ``tasks/cancel`` are acknowledgements.

**Input** (``input_required``): a request of the tool to the client (:meth:`TaskContext.request`,
what ``MCPContext.elicit``/``sample``/``list_roots`` call) is parked in the record and the task
becomes ``input_required`` until the answer is written into the record (:meth:`Tasks.answer`),
by any worker. 2025-11-25: ``tasks/result`` delivers the parked requests on its own response
stream, with the ``related-task`` ``_meta``, and records the client's answers. 2026-07-28:
``tasks/get`` shows them as ``inputRequests``; ``tasks/update`` carries the ``inputResponses``.

The tool runs through :meth:`.tools_call.ToolsCall.run`, the one ``tools/call`` path (binding,
validation, timeouts, output checks, error policy); this module only parks its outcome.

**Storage** (:class:`TaskStore`): one record ``task:<id>`` per task in the server's
:class:`~sturdyrpc.store.Store` (memory by default; the shared store of several HTTP workers
when there is one), expiring with the task's ``ttl``, updated by compare-and-set so a terminal
status never changes; an index stream per owner for ``tasks/list``; every change is announced
on the ``tasks`` channel, which wakes ``tasks/result`` waiters on every worker and tells the
worker running a task that it was cancelled. A ``working`` task whose worker stopped beating
(``alive:<worker>``, kept by :mod:`sturdyrpc.mcp_http.shared`) is marked ``failed`` by the first
reader that notices.

**Access**: task ids are ``secrets.token_urlsafe(24)``; a task belongs to the principal that
created it (rule 60), as :func:`~sturdyrpc.auth.identity_of` defines it (issuer, subject and
client: another client of the same user is another principal; a refreshed token of the same
client is the same): any other principal gets "Task not found", exactly as for an id that
never existed. Without a principal, ``tasks.list`` is not declared and ``tasks/list`` lists only
the tasks of the caller's session.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from .. import codec
from ..auth.principal import identity_of
from ..dispatch import Context
from ..errors import InvalidParams, MethodNotFound, RPCError
from ..request_context import current_call, current_principal, principal_source
from ..store import Store, StoreUnavailable, Subscription
from ..store.memory import MemoryStore
from .pages import Pages
from .session_state import SessionState
from .versions import META_CLIENT_CAPABILITIES, VersionRules

if TYPE_CHECKING:
    from .registry import Tool
    from .server import MCPServer

__all__ = [
    "Tasks",
    "TaskStore",
    "TaskContext",
    "META_RELATED_TASK",
    "TASKS_EXTENSION",
    "TERMINAL",
    "TASK_SUPPORT",
]

log = logging.getLogger("sturdyrpc.mcp")

META_RELATED_TASK = "io.modelcontextprotocol/related-task"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TASK_SUPPORT = ("forbidden", "optional", "required")
#: The channel every change of a task record is announced on (payload: the task id).
CHANNEL = "tasks"
#: How often a waiting ``tasks/result`` re-reads the record even without an announcement
#: (a worker that died announces nothing).
_RECHECK = 1.0


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _not_found(task_id: Any) -> InvalidParams:
    return InvalidParams("Invalid params: task not found", {"taskId": task_id})


class _Listed:
    """A record as :class:`~.pages.Pages` sees it (numbered in creation order)."""

    __slots__ = ("seq", "record")

    def __init__(self, record: dict[str, Any]) -> None:
        self.seq: int = record["seq"]
        self.record = record


class TaskStore:
    """Task records on a :class:`~sturdyrpc.store.Store` (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def _key(task_id: str) -> str:
        return f"task:{task_id}"

    @staticmethod
    def _ttl(record: dict[str, Any]) -> float | None:
        exp = record.get("exp")
        return None if exp is None else max(0.001, exp - time.time())

    async def create(self, record: dict[str, Any], index: str) -> None:
        record["seq"] = await self.store.incr("tasks:seq")
        await self.store.set(self._key(record["id"]), codec.encode(record), ttl=self._ttl(record))
        ttl = self._ttl(record)
        await self.store.append(f"tasks:{index}", record["id"].encode(), maxlen=1000, ttl=None if ttl is None else max(ttl, 3600.0))

    async def get(self, task_id: str) -> dict[str, Any] | None:
        raw = await self.store.get(self._key(task_id))
        if raw is None:
            return None
        rec = codec.decode(raw)
        return rec if type(rec) is dict else None

    async def update(self, task_id: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any] | None:
        """Apply ``change(record) -> new record | None (no change)`` atomically; the record as it
        is afterwards (None: absent). Announces a change on :data:`CHANNEL`."""
        key = self._key(task_id)
        for _ in range(50):
            raw = await self.store.get(key)
            if raw is None:
                return None
            rec = codec.decode(raw)
            new = change(dict(rec))
            if new is None:
                return rec  # type: ignore[no-any-return]
            new["updated"] = time.time()
            if await self.store.compare_and_set(key, raw, codec.encode(new), ttl=self._ttl(new)):
                with contextlib.suppress(StoreUnavailable):
                    await self.store.publish(CHANNEL, task_id.encode())
                return new
        raise StoreUnavailable(self.store.name, f"task {task_id[:8]} kept changing")

    async def worker_alive(self, worker: str) -> bool:
        """Whether ``worker`` still beats (``alive:<worker>``, refreshed by :mod:`sturdyrpc.mcp_http.shared`)."""
        return await self.store.get(f"alive:{worker}") is not None

    async def ids(self, index: str) -> list[str]:
        return [d.decode() for _, d in await self.store.read_after(f"tasks:{index}", None, 1000)]


class TaskContext(Context):
    """The context a tool running as a task sees: the request's, outliving its reply; progress,
    log notifications and requests to the client carry the ``related-task`` ``_meta``."""

    __slots__ = ("task_id", "session", "runner", "_last_progress", "_token", "tasks", "modern", "_asked")

    def __init__(self, ctx: Context, session: SessionState, task_id: str, tasks: Tasks | None = None, modern: bool = False) -> None:
        super().__init__(ctx.id, ctx.method, ctx.params, False)
        self.session_id = ctx.session_id
        self.principal = ctx.principal
        self.lifespan = ctx.lifespan
        self.headers = ctx.headers
        self.state = ctx.state
        self.task_id = task_id
        self.session = session
        self._last_progress: float | None = None
        #: The asyncio task running the tool (set when started).
        self.runner: asyncio.Task[Any] | None = None
        self._token = session.profile.read_progress_token(ctx.params)
        self.tasks = tasks
        self.modern = modern
        self._asked = 0

    @property
    def cancelled(self) -> bool:
        t = self.runner
        return t is not None and (t.cancelled() or t.cancelling() > 0)

    def _with_meta(self, params: Any) -> dict[str, Any]:
        p = dict(params) if type(params) is dict else {}
        meta = dict(p.get("_meta") or {})
        meta[META_RELATED_TASK] = {"taskId": self.task_id}
        p["_meta"] = meta
        return p

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        peer = self.session.peer
        if self._token is None or peer is None or peer.is_closing:
            return
        if self._last_progress is not None and not progress > self._last_progress:
            raise ValueError(f"progress must increase (was {self._last_progress}, got {progress})")
        self._last_progress = progress
        method, params = self.session.profile.progress_notification(self._token, progress, total, message)
        await peer.notify(method, self._with_meta(params))

    async def notify(self, method: str, params: Any = None) -> None:
        peer = self.session.peer
        if peer is not None and not peer.is_closing:
            await peer.notify(method, self._with_meta(params))

    async def request(self, method: str, params: Any = None, **kw: Any) -> Any:
        """A request to the client: parked in the task record, the task ``input_required``,
        until the client answers it (2025-11-25: delivered on a ``tasks/result`` stream;
        2026-07-28: ``inputRequests`` of ``tasks/get``, answered by ``tasks/update``)."""
        if self.tasks is None:
            peer = self.session.peer
            if peer is None:
                raise RPCError("no connection to the client for this task")
            return await peer.request(method, self._with_meta(params), **kw)
        self._asked += 1
        key = f"{method.split('/')[0]}-{self._asked}"
        sent = dict(params) if type(params) is dict else {}
        if not self.modern:
            sent = self._with_meta(sent)
        return await self.tasks.ask(self.task_id, key, method, sent, kw.get("timeout"))

    async def ask_input(self, method: str, params: Any = None, timeout: float | None = None) -> Any:
        """What :class:`~.context.MCPContext` calls on 2026-07-28 instead of answering
        ``input_required`` (a task asks through its record, see :meth:`request`)."""
        return await self.request(method, params, timeout=timeout)


class Tasks:
    """The tasks of one :class:`~.server.MCPServer` (its ``tasks`` attribute).

    ``default_ttl_ms`` (a task created without ``ttl``), ``max_ttl_ms`` (a larger ``ttl`` is
    lowered to it), ``poll_interval_ms`` (the suggested polling interval) may be changed.
    """

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.records = TaskStore(MemoryStore())
        #: This worker's name in task records (the shared sessions' tag when bound to a shared store).
        self.worker = secrets.token_hex(4)
        #: Whether other workers' heartbeats (``alive:<worker>``) tell whether a task still runs.
        self.heartbeats = False
        self.default_ttl_ms = 3_600_000
        self.max_ttl_ms = 86_400_000
        self.poll_interval_ms = 500
        self.pages = Pages(50)
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._expired: set[str] = set()
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._listening: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sub: Subscription | None = None

    def use_store(self, store: Store, worker: str) -> None:
        """Keep tasks in ``store`` (shared by several workers), this worker being ``worker``."""
        self.records = TaskStore(store)
        self.worker = worker
        self.heartbeats = store.shared

    # ------------------------------------------------------------------ capabilities, tools

    def enabled(self) -> bool:
        return any(t.task_support != "forbidden" for t in self.server.tools.values())

    def capability(self, bound: bool = False) -> dict[str, Any]:
        """The 2025-11-25 ``tasks`` server capability. ``list`` only with an auth context to bind
        tasks to (``bound``): "receivers that cannot identify requestors SHOULD NOT declare the
        ``tasks.list`` capability" (rule 60). ``tasks/list`` still answers without it, listing
        only the tasks of the caller's own session."""
        if bound:
            return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        return {"cancel": {}, "requests": {"tools": {"call": {}}}}

    def mode(self, session: SessionState, ctx: Context, params: dict[str, Any], rules: VersionRules, tool: Tool | None) -> str | None:
        """How this ``tools/call`` runs: ``"task"`` (2025-11-25 ``params.task``), ``"ext"``
        (2026-07-28, the server decides), None (a plain call). Raises -32601 for a task call to
        a tool that forbids it."""
        if tool is None:
            return None
        if rules.tasks:
            if "task" not in params:
                return None  # a tool that requires tasks: ToolsCall.prepare refuses it
            if type(params.get("task")) is not dict:
                raise InvalidParams("Invalid params: 'task' must be an object", {"param": "task"})
            if tool.task_support == "forbidden":
                raise MethodNotFound(f"Method not found: the tool {tool.name!r} does not support task-augmented calls",
                                     {"tool": tool.name, "taskSupport": "forbidden"})
            return "task"
        if rules.stateless and tool.task_support != "forbidden":
            caps = ctx.meta.get(META_CLIENT_CAPABILITIES)
            ext = caps.get("extensions") if type(caps) is dict else None
            if type(ext) is dict and TASKS_EXTENSION in ext:
                return "ext"
        return None

    # ------------------------------------------------------------------ creating and running

    @staticmethod
    def _owner(session: SessionState) -> str | None:
        """Who the request at hand is (:func:`~sturdyrpc.auth.identity_of`): what a task is bound to."""
        return identity_of(session.request_principal())

    @staticmethod
    def _index(session: SessionState, owner: str | None) -> str:
        """The ``tasks/list`` stream of ``owner`` (without a principal: of the session)."""
        if owner is None:
            return f"s:{session.session_id}"
        import hashlib  # here: only authenticated task calls need it (start-up time)

        return "p:" + hashlib.sha256(owner.encode()).hexdigest()[:32]  # a short store key; records name the owner in full

    async def create(self, session: SessionState, ctx: Context, params: dict[str, Any], rules: VersionRules, modern: bool) -> dict[str, Any]:
        """Create the task, start the tool in the background, return the ``CreateTaskResult``."""
        await self._listen()
        ttl: Any = self.default_ttl_ms
        asked = params.get("task")
        if type(asked) is dict and "ttl" in asked:
            ttl = asked["ttl"]
            if ttl is not None and (type(ttl) is not int or ttl < 0):
                raise InvalidParams("Invalid params: 'task.ttl' must be a non-negative integer (milliseconds)", {"param": "task.ttl"})
        if ttl is None or ttl > self.max_ttl_ms:
            ttl = self.max_ttl_ms  # unlimited is not offered: every task is forgotten in the end
        assert type(ttl) is int
        now = time.time()
        task_id = secrets.token_urlsafe(24)
        principal = session.request_principal()
        owner = identity_of(principal)
        record: dict[str, Any] = {
            "id": task_id, "status": "working", "created": now, "updated": now, "ttl": ttl, "exp": now + ttl / 1000,
            "poll": self.poll_interval_ms, "owner": owner, "worker": self.worker, "modern": modern,
        }
        call_params = {k: v for k, v in params.items() if k != "task"}
        tctx = TaskContext(ctx, session, task_id, self, modern)
        tctx.principal = principal
        context = contextvars.copy_context()
        context.run(current_call.set, None)  # not the creating request's: its stream has ended
        # The tool's ctx.principal is its creating request's, not the session's later ones.
        context.run(principal_source.set, None)
        context.run(current_principal.set, principal)
        stored = asyncio.Event()  # the tool starts once the record exists
        loop = asyncio.get_running_loop()
        runner = loop.create_task(self._run(session, tctx, call_params, record, stored), context=context)
        tctx.runner = runner
        self._running[task_id] = runner  # before the record is visible: it is never taken for lost
        runner.add_done_callback(lambda _t: self._running.pop(task_id, None))
        try:
            await self.records.create(record, self._index(session, owner))
        except BaseException:
            self._expired.add(task_id)
            runner.cancel()
            raise
        stored.set()
        loop.call_later(ttl / 1000, self._expire, task_id)
        if modern:
            return self.server.finish(rules, {"resultType": "task", **self.describe(record, True)})
        return {"task": self.describe(record, False)}

    def _expire(self, task_id: str) -> None:
        t = self._running.get(task_id)
        if t is not None and not t.done():
            self._expired.add(task_id)
            t.cancel()

    async def _run(self, session: SessionState, tctx: TaskContext, params: dict[str, Any], record: dict[str, Any],
                   stored: asyncio.Event) -> None:
        task_id = record["id"]
        modern = record["modern"]
        try:
            await stored.wait()
            value = await self.server.tools_call.run(session, tctx, params, as_task=True)
            result = value if type(value) is dict else msgspec.json.decode(msgspec.json.encode(value))  # rendered bytes too
            if result.get("resultType") == "input_required":
                status, outcome, message = "failed", {"error": {"code": -32603, "message": "Internal error: the tool asked for input, which tasks do not support"}}, "The tool asked for input, which tasks do not support"
            elif result.get("isError") is True and not modern:
                status, outcome, message = "failed", {"result": result}, _text_of(result) or "The tool reported an error"
            else:
                status, outcome, message = "completed", {"result": result}, None
        except asyncio.CancelledError:
            if task_id in self._expired:
                self._expired.discard(task_id)
                return  # the record expired with it
            await self._finish(task_id, "cancelled", None, "The task was cancelled")
            return
        except RPCError as exc:
            status, outcome, message = "failed", {"error": exc.to_dict()}, exc.message
        except Exception as exc:  # never here: ToolsCall.run turns failures into isError results
            log.exception("task %s failed", task_id[:8])
            status, outcome, message = "failed", {"error": {"code": -32603, "message": "Internal error"}}, f"Internal error ({type(exc).__name__})"
        rec = await self._finish(task_id, status, outcome, message)
        if rec is not None and rec.get("status") == status and not modern:
            await self._status_notification(session, rec)

    async def _finish(self, task_id: str, status: str, outcome: dict[str, Any] | None, message: str | None) -> dict[str, Any] | None:
        def change(rec: dict[str, Any]) -> dict[str, Any] | None:
            if rec.get("status") in TERMINAL:
                return None  # cancelled meanwhile: terminal states never change
            rec["status"] = status
            if outcome is not None:
                rec["outcome"] = outcome
            if message:
                rec["msg"] = message
            return rec

        try:
            return await self.records.update(task_id, change)
        except StoreUnavailable as exc:
            log.warning("task %s: outcome not stored: %s", task_id[:8], exc)
            return None

    async def _status_notification(self, session: SessionState, rec: dict[str, Any]) -> None:
        peer = session.peer
        if peer is None or peer.is_closing:
            return
        with contextlib.suppress(Exception):
            await peer.notify("notifications/tasks/status", self.describe(rec, False))


    # ------------------------------------------------------------------ input (input_required)

    async def ask(self, task_id: str, key: str, method: str, params: dict[str, Any], timeout: float | None) -> Any:
        """Park the request ``key`` in the task's record (status ``input_required``) and wait for
        the client's answer, written by whichever worker received it (:meth:`answer`); the
        status goes back to ``working`` once no request is outstanding."""
        await self._listen()

        def park(rec: dict[str, Any]) -> dict[str, Any] | None:
            if rec.get("status") in TERMINAL:
                return None
            inputs = dict(rec.get("inputs") or {})
            inputs[key] = {"method": method, "params": params}
            rec["inputs"] = inputs
            rec["status"] = "input_required"
            rec.pop("msg", None)
            return rec

        rec = await self.records.update(task_id, park)
        if rec is None or rec.get("status") in TERMINAL:
            raise asyncio.CancelledError()
        ev = self._wake_on(task_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                answers = rec.get("answers") or {}
                if key in answers:
                    break
                if rec.get("status") in TERMINAL:
                    raise asyncio.CancelledError()
                if deadline is not None and time.monotonic() > deadline:
                    raise RPCError(f"The client did not answer {method} in time", {"taskId": task_id})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), _RECHECK)
                ev.clear()
                got = await self.records.get(task_id)
                if got is None:
                    raise asyncio.CancelledError()
                rec = got
        finally:
            self._stop_waking(task_id, ev)
        answer = answers[key]

        def settle(r: dict[str, Any]) -> dict[str, Any] | None:
            inputs = dict(r.get("inputs") or {})
            answered = dict(r.get("answers") or {})
            inputs.pop(key, None)
            answered.pop(key, None)
            r["inputs"], r["answers"] = inputs, answered
            if not (set(inputs) - set(answered)) and r.get("status") == "input_required":
                r["status"] = "working"
            return r

        with contextlib.suppress(StoreUnavailable):
            await self.records.update(task_id, settle)
        if "error" in answer:
            err = answer["error"] if type(answer["error"]) is dict else {}
            raise RPCError(str(err.get("message") or "the client refused the request"), err.get("data"), code=int(err.get("code") or -32603))
        return answer.get("result")

    @staticmethod
    def _outstanding(rec: dict[str, Any]) -> dict[str, Any]:
        """The parked requests of a record not answered yet."""
        answers = rec.get("answers") or {}
        return {k: v for k, v in (rec.get("inputs") or {}).items() if k not in answers}

    async def answer(self, task_id: str, responses: dict[str, Any]) -> None:
        """Record answers (``{key: {"result": ...} | {"error": ...}}``) to outstanding requests;
        answers to keys that are not outstanding are ignored."""
        def change(rec: dict[str, Any]) -> dict[str, Any] | None:
            if rec.get("status") in TERMINAL:
                return None
            todo = self._outstanding(rec)
            fresh = {k: v for k, v in responses.items() if k in todo}
            if not fresh:
                return None
            rec["answers"] = {**(rec.get("answers") or {}), **fresh}
            if len(fresh) == len(todo):
                rec["status"] = "working"  # every request answered: the tool goes on
            return rec

        await self.records.update(task_id, change)

    async def _deliver(self, ctx: Context, rec: dict[str, Any], delivering: set[str]) -> bool:
        """2025-11-25: send the task's outstanding requests to the client on the ``tasks/result``
        request's own stream (``ctx``), each carrying the ``related-task`` ``_meta``, and record
        the answers. Whether any was sent."""
        sent = False
        for key, req in self._outstanding(rec).items():
            if key in delivering:
                continue
            delivering.add(key)
            sent = True
            try:
                result = await ctx.request(req["method"], req["params"])  # type: ignore[attr-defined]
                got: dict[str, Any] = {"result": result}
            except RPCError as exc:
                got = {"error": exc.to_dict()}
            await self.answer(rec["id"], {key: got})
        return sent

    # ------------------------------------------------------------------ reading

    def describe(self, rec: dict[str, Any], modern: bool) -> dict[str, Any]:
        """The ``Task`` object of a record (2026-07-28: ``ttlMs``/``pollIntervalMs``)."""
        d: dict[str, Any] = {"taskId": rec["id"], "status": rec["status"]}
        if rec.get("msg"):
            d["statusMessage"] = rec["msg"]
        d["createdAt"] = _iso(rec["created"])
        d["lastUpdatedAt"] = _iso(rec["updated"])
        if modern:
            d["ttlMs"] = rec["ttl"]
            d["pollIntervalMs"] = rec["poll"]
        else:
            d["ttl"] = rec["ttl"]
            d["pollInterval"] = rec["poll"]
        return d

    async def find(self, session: SessionState, params: dict[str, Any]) -> dict[str, Any]:
        """The record ``params.taskId`` names, if the caller may see it (else -32602)."""
        task_id = params.get("taskId")
        if type(task_id) is not str or not task_id or len(task_id) > 200:
            raise InvalidParams("Invalid params: 'taskId' must be a task id", {"param": "taskId"})
        rec = await self.records.get(task_id)
        if rec is None or rec.get("owner") != self._owner(session):
            raise _not_found(task_id)  # another principal's task looks exactly like none
        return await self._check_alive(rec)

    async def _check_alive(self, rec: dict[str, Any]) -> dict[str, Any]:
        """A ``working`` task whose worker is gone becomes ``failed``."""
        if rec["status"] in TERMINAL:
            return rec
        worker = rec.get("worker")
        if worker == self.worker:
            if rec["id"] in self._running:
                return rec
            gone = f"The task's work was lost: worker {worker} no longer runs it"
        elif self.heartbeats:
            with contextlib.suppress(StoreUnavailable):
                if await self.records.worker_alive(str(worker)):
                    return rec
            gone = f"The worker running this task stopped before it finished (worker {worker} is gone)"
        else:
            return rec
        err = {"code": -32603, "message": "Internal error: " + gone}
        new = await self._finish(rec["id"], "failed", {"error": err}, gone)
        return new if new is not None else rec

    async def _listen(self) -> None:
        """Listen on :data:`CHANNEL` (once per worker and loop)."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._listening is not None and not self._listening.done():
            return
        if self._sub is not None:  # served again on a new loop (tests): the old one is gone
            with contextlib.suppress(Exception):
                await self._sub.aclose()
        self._loop = loop
        self._sub = sub = await self.records.store.subscribe(CHANNEL)

        async def pump() -> None:
            try:
                async for msg in sub:
                    self._changed(msg.decode("ascii", "replace"))
            finally:
                with contextlib.suppress(Exception):
                    await sub.aclose()

        self._listening = loop.create_task(pump())

    def _changed(self, task_id: str) -> None:
        for ev in self._waiters.get(task_id, ()):
            ev.set()
        t = self._running.get(task_id)
        if t is not None and not t.done():
            asyncio.get_running_loop().create_task(self._maybe_cancel(task_id))

    def _wake_on(self, task_id: str) -> asyncio.Event:
        """An event set whenever task ``task_id`` changes (until :meth:`_stop_waking`)."""
        ev = asyncio.Event()
        self._waiters.setdefault(task_id, set()).add(ev)
        return ev

    def _stop_waking(self, task_id: str, ev: asyncio.Event) -> None:
        waiting = self._waiters.get(task_id)
        if waiting is not None:
            waiting.discard(ev)
            if not waiting:
                del self._waiters[task_id]

    async def _maybe_cancel(self, task_id: str) -> None:
        rec = await self.records.get(task_id)
        t = self._running.get(task_id)
        if t is not None and (rec is None or rec.get("status") == "cancelled"):
            if rec is None:
                self._expired.add(task_id)
            t.cancel()

    async def wait_terminal(self, session: SessionState, params: dict[str, Any], ctx: Context | None = None) -> dict[str, Any]:
        """Wait until the task is terminal; with ``ctx`` (``tasks/result``), deliver the task's
        requests to the client meanwhile (on ``ctx``'s stream) and record the answers."""
        await self._listen()
        rec = await self.find(session, params)
        task_id = rec["id"]
        ev = self._wake_on(task_id)
        delivering: set[str] = set()
        try:
            while rec["status"] not in TERMINAL:
                if ctx is not None and rec["status"] == "input_required" and hasattr(ctx, "request"):
                    if await self._deliver(ctx, rec, delivering):
                        rec = await self.find(session, params)
                        continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), _RECHECK)
                ev.clear()
                rec = await self.find(session, params)
        finally:
            self._stop_waking(task_id, ev)
        return rec

    # ------------------------------------------------------------------ the methods

    async def get(self, session: SessionState, rules: VersionRules, params: dict[str, Any]) -> dict[str, Any]:
        """``tasks/get``."""
        self._check_version(rules)
        rec = await self.find(session, params)
        if rules.stateless:
            d = self.describe(rec, True)
            outcome = rec.get("outcome") or {}
            if rec["status"] == "completed" and "result" in outcome:
                d["result"] = outcome["result"]
            elif rec["status"] == "failed":
                d["error"] = outcome.get("error") or {"code": -32603, "message": rec.get("msg") or "Internal error"}
            elif rec["status"] == "input_required":
                d["inputRequests"] = self._outstanding(rec)
            return self.server.finish(rules, d)
        return self.describe(rec, False)

    async def result(self, session: SessionState, rules: VersionRules, params: dict[str, Any], ctx: Context | None = None) -> dict[str, Any]:
        """``tasks/result`` (2025-11-25): wait until terminal, then the original outcome; a task
        that is ``input_required`` gets its requests delivered on this request's stream."""
        if rules.stateless:
            raise MethodNotFound("Method not found")  # the extension has no tasks/result
        self._check_version(rules)
        rec = await self.wait_terminal(session, params, ctx)
        related = {META_RELATED_TASK: {"taskId": rec["id"]}}
        outcome = rec.get("outcome") or {}
        if "result" in outcome:
            result = dict(outcome["result"])
            meta = dict(result.get("_meta") or {})
            meta.update(related)
            result["_meta"] = meta
            return result
        if rec["status"] == "cancelled":
            raise InvalidParams("Invalid params: the task was cancelled; it has no result", {"taskId": rec["id"], "status": "cancelled", **related})
        err = outcome.get("error") or {"code": -32603, "message": "Internal error"}
        data = err.get("data")
        if data is None or type(data) is dict:
            data = {**(data or {}), "_meta": related}
        raise RPCError(err.get("message", "Internal error"), data, code=err.get("code", -32603))

    async def list(self, session: SessionState, rules: VersionRules, params: dict[str, Any]) -> dict[str, Any]:
        """``tasks/list`` (2025-11-25): the caller's tasks, oldest first, paginated."""
        if rules.stateless:
            raise MethodNotFound("Method not found")  # the extension has no tasks/list
        self._check_version(rules)
        owner = self._owner(session)
        records: list[_Listed] = []
        seen: set[str] = set()
        for task_id in await self.records.ids(self._index(session, owner)):
            if task_id in seen:
                continue
            seen.add(task_id)
            rec = await self.records.get(task_id)
            if rec is not None and rec.get("owner") == owner:
                records.append(_Listed(await self._check_alive(rec)))
        page, next_cursor = self.pages.page("tasks", records, params)
        result: dict[str, Any] = {"tasks": [self.describe(r.record, False) for r in page]}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    async def cancel(self, session: SessionState, rules: VersionRules, params: dict[str, Any]) -> dict[str, Any]:
        """``tasks/cancel``: the status is ``cancelled`` before the reply; a terminal task is -32602
        (2025-11-25; the 2026-07-28 extension acknowledges it, cancellation being cooperative)."""
        self._check_version(rules)
        rec = await self.find(session, params)
        task_id = rec["id"]
        if rec["status"] in TERMINAL:
            if rules.stateless:
                return self.server.finish(rules, {})
            raise InvalidParams(f"Invalid params: the task is already {rec['status']} and cannot be cancelled",
                                {"taskId": task_id, "status": rec["status"]})
        lost: list[str] = []

        def change(r: dict[str, Any]) -> dict[str, Any] | None:
            if r.get("status") in TERMINAL:
                lost.append(r["status"])
                return None
            r["status"] = "cancelled"
            r["msg"] = "Cancelled by the client"
            return r

        new = await self.records.update(task_id, change)
        if new is None:
            raise _not_found(task_id)
        if lost and not rules.stateless:
            raise InvalidParams(f"Invalid params: the task is already {lost[0]} and cannot be cancelled", {"taskId": task_id, "status": lost[0]})
        t = self._running.get(task_id)
        if t is not None and not t.done():
            t.cancel()
        if rules.stateless:
            return self.server.finish(rules, {})
        return self.describe(new, False)

    async def update(self, session: SessionState, rules: VersionRules, params: dict[str, Any]) -> dict[str, Any]:
        """``tasks/update`` (2026-07-28): the client's ``inputResponses`` to the task's
        outstanding ``inputRequests``; acknowledged with ``{}``, responses to keys that are not
        outstanding (unknown, already answered) ignored, as the extension says."""
        if not rules.stateless:
            raise MethodNotFound("Method not found")
        rec = await self.find(session, params)
        responses = params.get("inputResponses")
        if type(responses) is not dict:
            raise InvalidParams("Invalid params: 'inputResponses' must be an object", {"param": "inputResponses"})
        fresh = {k: {"result": v} for k, v in responses.items() if type(k) is str}
        if fresh and rec["status"] not in TERMINAL:
            await self.answer(rec["id"], fresh)
        return self.server.finish(rules, {})

    @staticmethod
    def _check_version(rules: VersionRules) -> None:
        if not (rules.tasks or rules.stateless):
            raise MethodNotFound("Method not found")


def _text_of(result: dict[str, Any]) -> str | None:
    for block in result.get("content") or ():
        if type(block) is dict and block.get("type") == "text" and type(block.get("text")) is str:
            return str(block["text"])[:500]
    return None
