"""Task records on a :class:`~sturdyrpc.store.Store`: one record ``task:<id>`` per task,
expiring with the task's ``ttl``, changed by compare-and-set (so two workers never overwrite
each other's change), an index stream per owner for ``tasks/list``, and every change announced
on :data:`CHANNEL`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from ... import codec
from ...store import Store, StoreUnavailable

__all__ = ["TaskStore", "CHANNEL"]

#: The channel every change of a task record is announced on (payload: the task id).
CHANNEL = "tasks"


class TaskStore:
    """Task records on ``store`` (see the module docstring)."""

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
        """Store a new ``record`` (numbered in creation order) and list it in ``index``."""
        record["seq"] = await self.store.incr("tasks:seq")
        await self.store.set(self._key(record["id"]), codec.encode(record), ttl=self._ttl(record))
        ttl = self._ttl(record)
        await self.store.append(f"tasks:{index}", record["id"].encode(), maxlen=1000, ttl=None if ttl is None else max(ttl, 3600.0))

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The record of ``task_id`` (None: none, or expired)."""
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
        """The ids listed in ``index``, oldest first (some may have expired)."""
        return [d.decode() for _, d in await self.store.read_after(f"tasks:{index}", None, 1000)]
