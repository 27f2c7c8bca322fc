"""The life of a task, sans-I/O: its statuses, the events that move it, and the one table of
what each event does in each status (h11's style). Every change of a task's status goes through
:func:`transition`, which refuses what the table does not allow::

    working ──ask──▶ input_required ──resume──▶ working
       │                   │  ▲ ask (another request parked)
       └─────── complete | fail | cancel ───────▶ completed | failed | cancelled (final)

Also the names the tasks protocol uses (extension, ``_meta`` key, ``execution.taskSupport``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "WORKING", "INPUT_REQUIRED", "COMPLETED", "FAILED", "CANCELLED", "STATUSES", "INITIAL", "TERMINAL",
    "ASK", "RESUME", "COMPLETE", "FAIL", "CANCEL", "EVENTS", "TRANSITIONS",
    "InvalidTransition", "next_status", "transition",
    "META_RELATED_TASK", "TASKS_EXTENSION", "TASK_SUPPORT",
]

META_RELATED_TASK = "io.modelcontextprotocol/related-task"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_SUPPORT = ("forbidden", "optional", "required")

WORKING = "working"
INPUT_REQUIRED = "input_required"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
STATUSES = (WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED)
#: The status of a task just created.
INITIAL = WORKING

#: The tool asked the client for something: a request is parked in the record.
ASK = "ask"
#: No parked request is outstanding any more: the tool goes on.
RESUME = "resume"
#: The tool returned its result.
COMPLETE = "complete"
#: The tool failed, or the worker running it is gone.
FAIL = "fail"
#: The client cancelled the task (or the tool was cancelled).
CANCEL = "cancel"
EVENTS = (ASK, RESUME, COMPLETE, FAIL, CANCEL)

#: status -> event -> the status it leads to; an event missing from a status's row is refused.
#: A tool may finish, fail or be cancelled while a request of it is parked (its wait for the
#: answer timed out, or one of several requests failed). The terminal statuses have no row.
TRANSITIONS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    WORKING: MappingProxyType({ASK: INPUT_REQUIRED, COMPLETE: COMPLETED, FAIL: FAILED, CANCEL: CANCELLED}),
    INPUT_REQUIRED: MappingProxyType({ASK: INPUT_REQUIRED, RESUME: WORKING, COMPLETE: COMPLETED, FAIL: FAILED,
                                      CANCEL: CANCELLED}),
    COMPLETED: MappingProxyType({}),
    FAILED: MappingProxyType({}),
    CANCELLED: MappingProxyType({}),
})

#: The statuses nothing moves a task out of (and a record in one never changes again).
TERMINAL = frozenset(status for status, moves in TRANSITIONS.items() if not moves)


class InvalidTransition(Exception):
    """``event`` is not allowed in ``status`` (see :data:`TRANSITIONS`)."""

    def __init__(self, status: Any, event: str) -> None:
        super().__init__(f"a task that is {status!r} cannot {event}")
        self.status = status
        self.event = event


def next_status(status: Any, event: str) -> str:
    """The status ``event`` leads to from ``status``; :class:`InvalidTransition` when the table
    does not allow it (terminal statuses allow nothing; an unknown status nothing either)."""
    moves = TRANSITIONS.get(status) if type(status) is str else None
    new = None if moves is None else moves.get(event)
    if new is None:
        raise InvalidTransition(status, event)
    return new


def transition(record: dict[str, Any], event: str, message: str | None = None) -> dict[str, Any]:
    """Move task ``record`` (changed in place and returned) by ``event``: its ``status`` as the
    table says, its status message ``message`` (None: none, as a message explains the status it
    came with). :class:`InvalidTransition`, the record untouched, when the table refuses."""
    record["status"] = next_status(record.get("status"), event)
    if message:
        record["msg"] = message
    else:
        record.pop("msg", None)
    return record
