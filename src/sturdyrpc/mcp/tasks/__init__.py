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
becomes ``input_required`` until the answer is written into the record (:meth:`Tasks.answer <.service.TaskService.answer>`),
by any worker. 2025-11-25: ``tasks/result`` delivers the parked requests on its own response
stream, with the ``related-task`` ``_meta``, and records the client's answers. 2026-07-28:
``tasks/get`` shows them as ``inputRequests``; ``tasks/update`` carries the ``inputResponses``.

The tool runs through :meth:`~sturdyrpc.mcp.tools_call.ToolsCall.run`, the one ``tools/call``
path (binding, validation, timeouts, output checks, error policy); this package only parks its
outcome.

**States** (:mod:`.states`): one table says which event (``ask``, ``resume``, ``complete``,
``fail``, ``cancel``) moves a task from which status to which; every status change goes through
it, and terminal statuses are final.

**Layout**: :mod:`.states` (the table), :mod:`.store` (:class:`TaskStore`), :mod:`.context`
(:class:`TaskContext`), :mod:`.service` (creating, running, input, liveness, waking:
:class:`~.service.TaskService`), :mod:`.methods` (the ``tasks/*`` requests: :class:`Tasks`).

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

from .context import TaskContext
from .methods import Tasks
from .service import TaskService
from .states import META_RELATED_TASK, TASK_SUPPORT, TASKS_EXTENSION, TERMINAL, InvalidTransition
from .store import CHANNEL, TaskStore

__all__ = [
    "Tasks",
    "TaskService",
    "TaskStore",
    "TaskContext",
    "InvalidTransition",
    "META_RELATED_TASK",
    "TASKS_EXTENSION",
    "TERMINAL",
    "TASK_SUPPORT",
    "CHANNEL",
]
