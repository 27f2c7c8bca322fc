"""The tasks of one server: creating them, running their tools, parking the tools' requests to
the client, noticing a worker that is gone, and waking whoever waits on a task. Every status
change is an event of :mod:`.states` applied inside a compare-and-set of :class:`.TaskStore`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ... import codec
from ...auth.principal import identity_of
from ...dispatch import Context
from ...errors import InternalError, InvalidParams, MethodNotFound, RPCError, incident_of
from ...request_context import current_call, current_principal
from ...store import Store, StoreUnavailable, Subscription
from ...store.memory import MemoryStore
from ..pages import Pages
from ..profile import MissingRequiredClientCapability
from ..session_state import SessionState
from ..versions import META_CLIENT_CAPABILITIES, VersionRules
from .context import TaskContext
from .states import (
    ASK,
    CANCEL,
    CANCELLED,
    COMPLETE,
    FAIL,
    INITIAL,
    INPUT_REQUIRED,
    RESUME,
    TASKS_EXTENSION,
    TERMINAL,
    InvalidTransition,
    transition,
)
from .store import CHANNEL, TaskStore


def _extension_missing(message: str) -> MissingRequiredClientCapability:
    return MissingRequiredClientCapability({"extensions": {TASKS_EXTENSION: {}}}, message)

if TYPE_CHECKING:
    from ..registry import Tool

__all__ = ["TaskService", "Move", "not_found", "Finish", "RunTool"]

#: ``finish(rules, result)``: ``result`` with what the version adds to every result
#: (:meth:`~sturdyrpc.mcp.core.ServerCore.finish`).
Finish = Callable[[VersionRules, dict[str, Any]], dict[str, Any]]
#: ``await run(session, ctx, params, as_task=True)``: the one ``tools/call`` path
#: (:meth:`~sturdyrpc.mcp.tools_call.ToolsCall.run`), which a task's tool runs through.
RunTool = Callable[..., Awaitable[Any]]

log = logging.getLogger("sturdyrpc.mcp")

#: How often a waiting ``tasks/result`` re-reads the record even without an announcement
#: (a worker that died announces nothing).
_RECHECK = 1.0

def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def not_found(task_id: Any) -> InvalidParams:
    """What an unknown task id gets, and so every task of another principal."""
    return InvalidParams("Invalid params: task not found", {"taskId": task_id})


class Move:
    """A change for :meth:`.TaskStore.update`: the record moved by ``event`` (:func:`.states.transition`,
    with status message ``message``), then ``edit(record)``; no change where the table refuses
    ``event``. Afterwards :attr:`moved` says whether it was applied and :attr:`refused_in` the
    status that refused it (the change may run more than once: they describe the last run)."""

    __slots__ = ("event", "message", "edit", "moved", "refused_in")

    def __init__(self, event: str, message: str | None = None, edit: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.event = event
        self.message = message
        self.edit = edit
        self.moved = False
        self.refused_in: Any = None

    def __call__(self, rec: dict[str, Any]) -> dict[str, Any] | None:
        try:
            transition(rec, self.event, self.message)
        except InvalidTransition as exc:
            self.moved, self.refused_in = False, exc.status
            return None
        self.moved, self.refused_in = True, None
        return self.edit(rec) if self.edit is not None else rec


def _outstanding(rec: dict[str, Any]) -> dict[str, Any]:
    """The parked requests of a record not answered yet."""
    answers = rec.get("answers") or {}
    return {k: v for k, v in (rec.get("inputs") or {}).items() if k not in answers}


def _text_of(result: dict[str, Any]) -> str | None:
    for block in result.get("content") or ():
        if type(block) is dict and block.get("type") == "text" and type(block.get("text")) is str:
            return str(block["text"])[:500]
    return None


class TaskService:
    """The task machinery of one server (see :class:`.Tasks`): ``tools``, the server's tools by
    name; ``finish``, what completes its results.

    ``default_ttl_ms`` (a task created without ``ttl``), ``max_ttl_ms`` (a larger ``ttl`` is
    lowered to it), ``poll_interval_ms`` (the suggested polling interval) may be changed.
    """

    def __init__(self, tools: Mapping[str, Tool], finish: Finish) -> None:
        self._tools = tools
        self._finish = finish
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
        """Whether any tool may run as a task (the ``tasks`` capability is declared then)."""
        return any(t.task_support != "forbidden" for t in self._tools.values())

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
        a tool that forbids it, -32021 for a 2026-07-28 call to a tool that requires tasks from a
        client without the extension."""
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
            if self.declared(ctx.meta):
                return "ext"
            if tool.requires_task:
                # SEP-2663: a call the server cannot serve without a task, from a client that did
                # not declare the extension (it must never get a task): -32021
                raise _extension_missing(f"The tool {tool.name!r} runs only as a task")
        return None

    @staticmethod
    def declared(meta: dict[str, Any]) -> bool:
        """Whether the request's ``_meta`` client capabilities declare the tasks extension (2026-07-28)."""
        caps = meta.get(META_CLIENT_CAPABILITIES)
        ext = caps.get("extensions") if type(caps) is dict else None
        return type(ext) is dict and TASKS_EXTENSION in ext

    def require_extension(self, rules: VersionRules, meta: dict[str, Any]) -> None:
        """Refuse a 2026-07-28 ``tasks/*`` request from a client that did not declare the tasks
        extension (-32021, naming it in ``requiredCapabilities``)."""
        if rules.stateless and not self.declared(meta):
            raise _extension_missing("The tasks methods need the client's tasks extension")

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
        return "p:" + hashlib.sha256(owner.encode()).hexdigest()[:32]  # a short store key; records name the owner in full

    def _ttl_of(self, params: dict[str, Any]) -> int:
        ttl: Any = self.default_ttl_ms
        asked = params.get("task")
        if type(asked) is dict and "ttl" in asked:
            ttl = asked["ttl"]
            if ttl is not None and (type(ttl) is not int or ttl < 0):
                raise InvalidParams("Invalid params: 'task.ttl' must be a non-negative integer (milliseconds)", {"param": "task.ttl"})
        if ttl is None or ttl > self.max_ttl_ms:
            ttl = self.max_ttl_ms  # unlimited is not offered: every task is forgotten in the end
        assert type(ttl) is int
        return ttl

    async def create(self, session: SessionState, ctx: Context, params: dict[str, Any], rules: VersionRules, modern: bool,
                     run: RunTool) -> dict[str, Any]:
        """Create the task, start the tool in the background (``run``: the ``tools/call`` path it
        runs through), return the ``CreateTaskResult``.

        2026-07-28 (``modern``): the tool's first step (until it first waits) runs before the
        task exists; a first step that asks for input not given yet ends the call with the
        ``input_required`` result and no task (the client answers by calling again: SEP-2322),
        so a tool gathers input by rounds and becomes a task on the last one (SEP-2663)."""
        await self._listen()
        ttl = self._ttl_of(params)
        now = time.time()
        task_id = secrets.token_urlsafe(24)
        principal = session.request_principal()
        owner = identity_of(principal)
        record: dict[str, Any] = {
            "id": task_id, "status": INITIAL, "created": now, "updated": now, "ttl": ttl, "exp": now + ttl / 1000,
            "poll": self.poll_interval_ms, "owner": owner, "worker": self.worker, "modern": modern,
        }
        call_params = {k: v for k, v in params.items() if k != "task"}
        tctx = TaskContext(ctx, session, task_id, self, modern, principal)
        context = contextvars.copy_context()
        context.run(current_call.set, None)  # not the creating request's: its stream has ended
        # The tool's ctx.principal is its creating request's, not the session's later ones.
        context.run(current_principal.set, principal)
        stored = tctx.stored  # a 2025-11-25 tool starts once the record exists
        loop = asyncio.get_running_loop()
        runner = loop.create_task(self._run(run, session, tctx, call_params, record, stored), context=context)
        tctx.runner = runner
        self._running[task_id] = runner  # before the record is visible: it is never taken for lost
        runner.add_done_callback(lambda _t: self._running.pop(task_id, None))
        if modern:
            # the runner was scheduled first: its first step runs before this one resumes (FIFO,
            # on every loop); an input round found there is the call's answer, with no task
            await asyncio.sleep(0)
            early = runner.result() if runner.done() and not runner.cancelled() and runner.exception() is None else None
            if early is not None:
                return early
            tctx.published = True
        try:
            await self.records.create(record, self._index(session, owner))
        except BaseException:
            self._expired.add(task_id)
            runner.cancel()
            raise
        stored.set()
        loop.call_later(ttl / 1000, self._expire, task_id)
        if modern:
            return self._finish(rules, {"resultType": "task", **self.describe(record, True)})
        return {"task": self.describe(record, False)}

    def _expire(self, task_id: str) -> None:
        t = self._running.get(task_id)
        if t is not None and not t.done():
            self._expired.add(task_id)
            t.cancel()

    async def _run(self, run: RunTool, session: SessionState, tctx: TaskContext, params: dict[str, Any], record: dict[str, Any],
                   stored: asyncio.Event) -> dict[str, Any] | None:
        """Run the task's tool and settle its record; returns the ``input_required`` result of a
        2026-07-28 first step that asked for input (then there is no task: see :meth:`create`)."""
        task_id = record["id"]
        modern = record["modern"]
        try:
            if not modern:
                await stored.wait()
            value = await run(session, tctx, params, as_task=True)
            if not tctx.published and type(value) is dict and value.get("resultType") == "input_required":
                return value
            # as the record will hold it (rendered bytes decoded; what the store cannot hold fails here)
            result = codec.decode(codec.encode(value))
            event, outcome, message = self._outcome(result, modern)
        except asyncio.CancelledError:
            if task_id in self._expired:
                self._expired.discard(task_id)
                return None  # the record expired with it
            await self._settle(task_id, CANCEL, None, "The task was cancelled")
            return None
        except RPCError as exc:
            event, outcome, message = FAIL, {"error": exc.to_dict()}, exc.message
        except Exception as exc:  # an outcome the store cannot hold; ToolsCall.run turns tool failures into isError results
            incident = incident_of(exc)
            log.error("incident %s: task %s failed", incident, task_id[:8], exc_info=exc)
            # the incident id, never the exception's text or class: the message goes to the client
            event, outcome = FAIL, {"error": InternalError("Internal error", {"incident": incident}).to_dict()}
            message = f"Internal error (incident {incident})"
        await stored.wait()  # a 2026-07-28 tool may end before its record is stored
        moved, rec = await self._settle(task_id, event, outcome, message)
        if moved and rec is not None and not modern:
            await self._status_notification(session, rec)
        return None

    @staticmethod
    def _outcome(result: Any, modern: bool) -> tuple[str, dict[str, Any], str | None]:
        """The event, outcome and status message of a tool's ``tools/call`` result."""
        if type(result) is not dict:
            raise TypeError("a tools/call result is an object")
        if result.get("resultType") == "input_required":
            err = {"code": -32603, "message": "Internal error: the tool asked for input, which tasks do not support"}
            return FAIL, {"error": err}, "The tool asked for input, which tasks do not support"
        if result.get("isError") is True and not modern:
            return FAIL, {"result": result}, _text_of(result) or "The tool reported an error"
        return COMPLETE, {"result": result}, None

    async def _settle(self, task_id: str, event: str, outcome: dict[str, Any] | None,
                      message: str | None) -> tuple[bool, dict[str, Any] | None]:
        """Move the task by ``event`` with ``outcome``: whether it moved (not when it is terminal
        already, e.g. cancelled meanwhile), and the record as it is now (None: gone)."""
        def keep(rec: dict[str, Any]) -> dict[str, Any]:
            if outcome is not None:
                rec["outcome"] = outcome
            return rec

        move = Move(event, message, keep)
        try:
            rec = await self.records.update(task_id, move)
        except StoreUnavailable as exc:
            log.warning("task %s: outcome not stored: %s", task_id[:8], exc)
            return False, None
        return move.moved and rec is not None, rec

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

        def park(rec: dict[str, Any]) -> dict[str, Any]:
            rec["inputs"] = {**(rec.get("inputs") or {}), key: {"method": method, "params": params}}
            return rec

        move = Move(ASK, None, park)
        rec = await self.records.update(task_id, move)
        if rec is None or not move.moved:
            raise asyncio.CancelledError()  # the task ended (or its record expired) meanwhile
        answer = await self._await_answer(task_id, key, method, rec, timeout)

        def settle(r: dict[str, Any]) -> dict[str, Any] | None:
            if r.get("status") in TERMINAL:
                return None  # a terminal record never changes
            r["inputs"] = {k: v for k, v in (r.get("inputs") or {}).items() if k != key}
            r["answers"] = {k: v for k, v in (r.get("answers") or {}).items() if k != key}
            if r["status"] == INPUT_REQUIRED and not _outstanding(r):
                transition(r, RESUME)
            return r

        with contextlib.suppress(StoreUnavailable):
            await self.records.update(task_id, settle)
        if "error" in answer:
            err = answer["error"] if type(answer["error"]) is dict else {}
            raise RPCError(str(err.get("message") or "the client refused the request"), err.get("data"), code=int(err.get("code") or -32603))
        return answer.get("result")

    async def _await_answer(self, task_id: str, key: str, method: str, rec: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """The answer to parked request ``key`` once a worker has written it into the record."""
        ev = self._wake_on(task_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                answers = rec.get("answers") or {}
                if key in answers:
                    answer: dict[str, Any] = answers[key]
                    return answer
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

    async def answer(self, task_id: str, responses: dict[str, Any]) -> None:
        """Record answers (``{key: {"result": ...} | {"error": ...}}``) to outstanding requests;
        answers to keys that are not outstanding are ignored."""
        def change(rec: dict[str, Any]) -> dict[str, Any] | None:
            if rec.get("status") in TERMINAL:
                return None  # a terminal record never changes
            todo = _outstanding(rec)
            fresh = {k: v for k, v in responses.items() if k in todo}
            if not fresh:
                return None
            rec["answers"] = {**(rec.get("answers") or {}), **fresh}
            if rec["status"] == INPUT_REQUIRED and len(fresh) == len(todo):
                transition(rec, RESUME)  # every request answered: the tool goes on
            return rec

        await self.records.update(task_id, change)

    async def _deliver(self, ctx: Context, rec: dict[str, Any], delivering: set[str]) -> bool:
        """2025-11-25: send the task's outstanding requests to the client on the ``tasks/result``
        request's own stream (``ctx``), each carrying the ``related-task`` ``_meta``, and record
        the answers. Whether any was sent."""
        sent = False
        for key, req in _outstanding(rec).items():
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

    @staticmethod
    def outstanding(rec: dict[str, Any]) -> dict[str, Any]:
        """The parked requests of ``rec`` not answered yet (2026-07-28: its ``inputRequests``)."""
        return _outstanding(rec)

    async def find(self, session: SessionState, params: dict[str, Any]) -> dict[str, Any]:
        """The record ``params.taskId`` names, if the caller may see it (else -32602)."""
        task_id = params.get("taskId")
        if type(task_id) is not str or not task_id or len(task_id) > 200:
            raise InvalidParams("Invalid params: 'taskId' must be a task id", {"param": "taskId"})
        rec = await self.records.get(task_id)
        if rec is None or rec.get("owner") != self._owner(session):
            raise not_found(task_id)  # another principal's task looks exactly like none
        return await self.check_alive(rec)

    async def check_alive(self, rec: dict[str, Any]) -> dict[str, Any]:
        """``rec`` as it is; a task whose worker is gone is ``failed`` first."""
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
        _, new = await self._settle(rec["id"], FAIL, {"error": {"code": -32603, "message": "Internal error: " + gone}}, gone)
        return new if new is not None else rec

    # ------------------------------------------------------------------ waking

    async def _listen(self) -> None:
        """Listen on :data:`~.store.CHANNEL` (once per worker and loop)."""
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
        if t is not None and (rec is None or rec.get("status") == CANCELLED):
            if rec is None:
                self._expired.add(task_id)
            t.cancel()

    def stop_running(self, task_id: str) -> None:
        """Cancel the tool of ``task_id`` if it runs on this worker (it was cancelled)."""
        t = self._running.get(task_id)
        if t is not None and not t.done():
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
                if ctx is not None and rec["status"] == INPUT_REQUIRED and hasattr(ctx, "request"):
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
