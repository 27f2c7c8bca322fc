"""The context a tool running as a task sees (:class:`TaskContext`)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ...dispatch import Context
from ...errors import RPCError
from ..session_state import SessionState
from .states import META_RELATED_TASK

__all__ = ["TaskContext", "Asker"]


class Asker(Protocol):
    """Where a task's requests to the client are parked (:meth:`.service.TaskService.ask`)."""

    async def ask(self, task_id: str, key: str, method: str, params: dict[str, Any], timeout: float | None) -> Any: ...


class TaskContext(Context):
    """The context a tool running as a task sees: the request's, outliving its reply; progress,
    log notifications and requests to the client carry the ``related-task`` ``_meta``.

    ``principal``: the principal of the request that created the task (None: ``ctx``'s);
    ``tasks``: where the tool's requests to the client are parked (None: sent on the session's
    connection).

    2026-07-28 (``modern``): the call becomes a task only once the tool's first step is over
    (until it first waits); until then (:attr:`published` False) its requests to the client go by
    input rounds, as a plain call's do, and the call's answer is the ``input_required`` result
    (SEP-2322 composed with SEP-2663). The record exists once :attr:`stored` is set.
    """

    __slots__ = ("task_id", "session", "runner", "_last_progress", "_token", "tasks", "modern", "_asked", "published", "stored")

    def __init__(self, ctx: Context, session: SessionState, task_id: str, tasks: Asker | None = None, modern: bool = False,
                 principal: Any = None) -> None:
        super().__init__(ctx.id, ctx.method, ctx.params, False)
        self.session_id = ctx.session_id
        self.principal = principal if principal is not None else ctx.principal
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
        #: Whether the call is a task yet (see the class docstring); True from the start in
        #: 2025-11-25, where a task call is a task before its tool runs.
        self.published = not modern
        #: Set once the task's record is stored: parking a request needs the record.
        self.stored = asyncio.Event()

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
        key: str | None = kw.pop("key", None)  # its key in the record; the peer picks its own ids
        if self.tasks is None:
            peer = self.session.peer
            if peer is None:
                raise RPCError("no connection to the client for this task")
            return await peer.request(method, self._with_meta(params), **kw)
        await self.stored.wait()
        self._asked += 1
        key = key or f"{method.split('/')[0]}-{self._asked}"
        sent = dict(params) if type(params) is dict else {}
        if not self.modern:
            sent = self._with_meta(sent)
        return await self.tasks.ask(self.task_id, key, method, sent, kw.get("timeout"))

    async def ask_input(self, method: str, params: Any = None, timeout: float | None = None, key: str | None = None) -> Any:
        """What :class:`~sturdyrpc.mcp.context.MCPContext` calls on 2026-07-28 instead of answering
        ``input_required`` (a task asks through its record, see :meth:`request`); ``key``: the
        request's key in ``inputRequests`` (default: one of ours)."""
        return await self.request(method, params, timeout=timeout, key=key)
