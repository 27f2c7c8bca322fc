"""The ``tasks/*`` requests (``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel``,
``tasks/update``) of both protocol shapes, over :class:`.service.TaskService`."""

from __future__ import annotations

from typing import Any

from ...dispatch import Context
from ...errors import InvalidParams, MethodNotFound, RPCError
from ..session_state import SessionState
from ..versions import VersionRules
from .service import Move, TaskService, not_found
from .states import CANCEL, CANCELLED, COMPLETED, FAILED, INPUT_REQUIRED, META_RELATED_TASK, TERMINAL

__all__ = ["Tasks"]


class _Listed:
    """A record as :class:`~sturdyrpc.mcp.pages.Pages` sees it (numbered in creation order)."""

    __slots__ = ("seq", "record")

    def __init__(self, record: dict[str, Any]) -> None:
        self.seq: int = record["seq"]
        self.record = record


class Tasks(TaskService):
    """The tasks of one server (:attr:`MCPServer.tasks <sturdyrpc.mcp.server.MCPServer.tasks>`,
    kept by its :class:`~sturdyrpc.mcp.core.ServerCore`): the machinery of :class:`.TaskService`
    and the ``tasks/*`` requests.

    ``default_ttl_ms`` (a task created without ``ttl``), ``max_ttl_ms`` (a larger ``ttl`` is
    lowered to it), ``poll_interval_ms`` (the suggested polling interval) may be changed.
    """

    async def get(self, session: SessionState, rules: VersionRules, params: dict[str, Any]) -> dict[str, Any]:
        """``tasks/get``."""
        self._check_version(rules)
        rec = await self.find(session, params)
        if rules.stateless:
            d = self.describe(rec, True)
            outcome = rec.get("outcome") or {}
            if rec["status"] == COMPLETED and "result" in outcome:
                d["result"] = outcome["result"]
            elif rec["status"] == FAILED:
                d["error"] = outcome.get("error") or {"code": -32603, "message": rec.get("msg") or "Internal error"}
            elif rec["status"] == INPUT_REQUIRED:
                d["inputRequests"] = self.outstanding(rec)
            return self._finish(rules, d)
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
        if rec["status"] == CANCELLED:
            raise InvalidParams("Invalid params: the task was cancelled; it has no result", {"taskId": rec["id"], "status": CANCELLED, **related})
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
                records.append(_Listed(await self.check_alive(rec)))
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
        move = Move(CANCEL, "Cancelled by the client")
        new = rec if rec["status"] in TERMINAL else await self.records.update(task_id, move)
        if new is None:
            raise not_found(task_id)
        if not move.moved:  # terminal already, or it became so meanwhile
            if rules.stateless:
                return self._finish(rules, {})
            status = new["status"]
            raise InvalidParams(f"Invalid params: the task is already {status} and cannot be cancelled", {"taskId": task_id, "status": status})
        self.stop_running(task_id)
        if rules.stateless:
            return self._finish(rules, {})
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
        return self._finish(rules, {})

    @staticmethod
    def _check_version(rules: VersionRules) -> None:
        if not (rules.tasks or rules.stateless):
            raise MethodNotFound("Method not found")
