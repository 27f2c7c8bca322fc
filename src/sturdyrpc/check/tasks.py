"""MCP task checks: the task flow, bad task ids, cancelling a terminal task, and the per-tool
``execution.taskSupport`` rules (2025-11-25 ``basic/utilities/tasks.mdx``; the 2026-07-28
``io.modelcontextprotocol/tasks`` extension, SEP-2663).

They apply when a listed tool declares ``execution.taskSupport`` ``optional`` or ``required``
and the checks may call it (``--slow TOOL`` or ``--call-tools``). Task messages may come with
unrelated notifications (``notifications/tasks/status``, progress), so replies are matched by id.
"""

from __future__ import annotations

import time
from typing import Any

from .config import MODERN_VERSION
from .model import CheckFailed, CheckSkipped, Level
from .probe import Probe
from .rules import check, expect_error, show

__all__: list[str] = []

MUST, SHOULD = Level.MUST, Level.SHOULD
RELATED = "io.modelcontextprotocol/related-task"
EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")
NO_SUCH_TASK = "sturdyrpc-check-no-such-task"
SPEC = "MCP 2025-11-25: basic/utilities/tasks.mdx; 2026-07-28: the io.modelcontextprotocol/tasks extension (SEP-2663)"


def _applies(cfg: Any) -> str | None:
    if not cfg.is_mcp:
        return "not an MCP server (use --mcp to force the MCP checks)"
    if not cfg.modern and cfg.version != "2025-11-25":
        return f"tasks exist from MCP 2025-11-25 on (the checks speak {cfg.version})"
    if not cfg.slow and not cfg.call_tools:
        return "needs --slow TOOL or --call-tools (the task checks call a tool that declares task support)"
    return None


def _ask(s: Probe, method: str, params: dict[str, Any], *, timeout: float | None = None, caps: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request and its reply, whatever notifications come in between."""
    msg = s.request(method, params, s.new_id("tk"))
    if caps is None and method.startswith("tasks/"):
        caps = {"extensions": {EXTENSION: {}}}  # 2026-07-28: tasks/* need the extension declared (-32021 without)
    if caps is not None and s.cfg.modern:
        msg["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps
    s.send(msg)
    reply, _ = s.wait_for(lambda v: type(v) is dict and v.get("id") == msg["id"] and "method" not in v, timeout or max(s.cfg.timeout, 10.0))
    if reply is None:
        raise CheckFailed(f"no reply to {method}{s.exit_note()}")
    return dict(reply)


def _tools(s: Probe) -> list[dict[str, Any]]:
    reply = _ask(s, "tools/list", {})
    tools = reply.get("result", {}).get("tools") if type(reply.get("result")) is dict else None
    return [t for t in tools or [] if type(t) is dict and type(t.get("name")) is str]


def _support(t: dict[str, Any]) -> str:
    ex = t.get("execution")
    v = ex.get("taskSupport") if type(ex) is dict else None
    return v if v in ("optional", "required") else "forbidden"


def _task_tool(s: Probe) -> tuple[str, dict[str, Any]]:
    """A tool the checks may call as a task, and arguments for it (the slow tool first, fast)."""
    tools = _tools(s)
    ordered = sorted(tools, key=lambda t: t["name"] != s.cfg.slow)
    for t in ordered:
        if _support(t) == "forbidden" or not s.cfg.tool_allowed(t["name"]):
            continue
        if t["name"] == s.cfg.slow:
            return t["name"], {"seconds": 0.2}
        args = _sample(t.get("inputSchema"))
        if args is not None:
            return t["name"], args
    raise CheckSkipped("no tool the checks may call declares execution.taskSupport optional or required")


def _sample(schema: Any) -> dict[str, Any] | None:
    if type(schema) is not dict:
        return None
    samples = {"string": "sturdyrpc", "integer": 1, "number": 0.1, "boolean": False, "array": [], "object": {}}
    out: dict[str, Any] = {}
    props = schema.get("properties") or {}
    for name in schema.get("required") or []:
        p = props.get(name) or {}
        if p.get("type") not in samples:
            return None
        out[name] = samples[p["type"]]
    return out


def _task_of(s: Probe, reply: dict[str, Any]) -> dict[str, Any] | None:
    """The task a tools/call reply created (None: the server answered at once, allowed on 2026-07-28)."""
    result = reply.get("result")
    if type(result) is not dict:
        raise CheckFailed(f"a task-augmented tools/call was refused: {show(reply)}")
    if s.cfg.modern:
        if result.get("resultType") != "task":
            return None
        task: Any = result
        ttl_key = "ttlMs"
    else:
        task = result.get("task")
        if type(task) is not dict:
            raise CheckFailed(f"a tools/call with params.task must return CreateTaskResult {{task: {{...}}}}, got {show(result)}")
        ttl_key = "ttl"
    for key in ("taskId", "status", "createdAt", "lastUpdatedAt"):
        if type(task.get(key)) is not str:
            raise CheckFailed(f"the created task has no string {key!r}: {show(task)}")
    if ttl_key not in task or not (task[ttl_key] is None or type(task[ttl_key]) is int):
        raise CheckFailed(f"the created task needs {ttl_key!r} (integer milliseconds or null): {show(task)}")
    if task["status"] not in ("working", "input_required", *TERMINAL):
        raise CheckFailed(f"unknown task status {task['status']!r}")
    return dict(task)


def _create(s: Probe) -> tuple[str, dict[str, Any] | None]:
    name, args = _task_tool(s)
    params: dict[str, Any] = {"name": name, "arguments": args}
    caps: dict[str, Any] | None = None
    if s.cfg.modern:
        caps = {"extensions": {EXTENSION: {}}}
    else:
        params["task"] = {"ttl": 60000}
    return name, _task_of(s, _ask(s, "tools/call", params, caps=caps))


def _poll(s: Probe, task_id: str, wait: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait
    while True:
        reply = _ask(s, "tasks/get", {"taskId": task_id})
        got = reply.get("result")
        if type(got) is not dict:
            raise CheckFailed(f"tasks/get of a task just created failed: {show(reply)}")
        if got.get("taskId") != task_id:
            raise CheckFailed(f"tasks/get returned another task: {show(got)}")
        if got.get("status") in TERMINAL or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@check(
    "mcp.tasks-flow", "mcp", MUST, "a task-augmented tools/call creates a task that can be polled and fetched",
    SPEC,
    "answer tools/call with params.task by CreateTaskResult at once; serve tasks/get; tasks/result returns the original "
    "result with _meta io.modelcontextprotocol/related-task (2026-07-28: tasks/get carries result once completed)",
    group="mcp-tasks", applies=_applies, budget=4.0,
)
def tasks_flow(s: Probe) -> None:
    name, task = _create(s)
    if task is None:
        raise CheckSkipped(f"the server answered {name!r} at once (it decides, on {MODERN_VERSION})")
    got = _poll(s, task["taskId"], max(s.cfg.timeout, 10.0))
    if got.get("status") not in TERMINAL:
        raise CheckFailed(f"the task of {name!r} did not finish within the timeout (status {got.get('status')!r})", level=SHOULD)
    if s.cfg.modern:
        if got["status"] == "completed" and type(got.get("result")) is not dict:
            raise CheckFailed(f"a completed task's tasks/get must carry result: {show(got)}")
        if got.get("resultType") != "complete":
            raise CheckFailed(f"tasks/get results must have resultType 'complete', got {show(got.get('resultType'))}")
        return
    reply = _ask(s, "tasks/result", {"taskId": task["taskId"]})
    payload = reply.get("result") if "result" in reply else (reply.get("error") or {}).get("data")
    meta = payload.get("_meta") if type(payload) is dict else None
    if "result" in reply and type(reply["result"].get("content")) is not list:
        raise CheckFailed(f"tasks/result must return the tool's CallToolResult, got {show(reply['result'])}")
    if type(meta) is not dict or meta.get(RELATED) != {"taskId": task["taskId"]}:
        raise CheckFailed(f"tasks/result must carry _meta {RELATED} = {{taskId}}, got {show(meta)}")


@check(
    "mcp.tasks-bad-id", "mcp", MUST, "an unknown task id is -32602",
    "MCP 2025-11-25: basic/utilities/tasks.mdx (Error Handling: invalid or nonexistent taskId)",
    "answer tasks/get, tasks/result and tasks/cancel of an unknown taskId with -32602",
    group="mcp-tasks", applies=_applies,
)
def tasks_bad_id(s: Probe) -> None:
    methods = ["tasks/get", "tasks/cancel"] if s.cfg.modern else ["tasks/get", "tasks/result", "tasks/cancel"]
    if not any(_support(t) != "forbidden" for t in _tools(s)):
        raise CheckSkipped("no tool declares task support")
    for method in methods:
        reply = _ask(s, method, {"taskId": NO_SUCH_TASK})
        if "result" in reply:
            raise CheckFailed(f"{method} of an unknown task id was answered with a result: {show(reply['result'])}")
        expect_error(reply, -32602, reply.get("id"), id_may_be_omitted=True)


@check(
    "mcp.tasks-cancel-terminal", "mcp", MUST, "cancelling a finished task is -32602 and changes nothing",
    "MCP 2025-11-25: basic/utilities/tasks.mdx (tasks/cancel: terminal tasks; terminal states never change)",
    "answer tasks/cancel of a completed, failed or cancelled task with -32602; keep its status",
    group="mcp-tasks", applies=_applies, budget=3.0,
)
def tasks_cancel_terminal(s: Probe) -> None:
    if s.cfg.modern:
        raise CheckSkipped(f"the {MODERN_VERSION} extension acknowledges every tasks/cancel (cancellation is cooperative)")
    name, task = _create(s)
    assert task is not None
    got = _poll(s, task["taskId"], max(s.cfg.timeout, 10.0))
    if got.get("status") not in TERMINAL:
        raise CheckSkipped(f"the task of {name!r} did not finish in time")
    reply = _ask(s, "tasks/cancel", {"taskId": task["taskId"]})
    if "result" in reply:
        raise CheckFailed(f"a {got['status']} task was cancelled: {show(reply['result'])}")
    expect_error(reply, -32602, reply.get("id"), id_may_be_omitted=True)
    after = _poll(s, task["taskId"], 0)
    if after.get("status") != got["status"]:
        raise CheckFailed(f"a terminal task changed status: {got['status']!r} -> {after.get('status')!r}")


@check(
    "mcp.tasks-support", "mcp", MUST, "execution.taskSupport is enforced",
    "MCP 2025-11-25: basic/utilities/tasks.mdx (Tool-level negotiation; Error Handling)",
    "answer a plain tools/call of a tool that requires tasks with -32601 (MUST), and a task call of a tool "
    "that forbids them with -32601 (SHOULD)",
    group="mcp-tasks", applies=_applies,
)
def tasks_support(s: Probe) -> None:
    if s.cfg.modern:
        raise CheckSkipped(f"on {MODERN_VERSION} the server decides which calls become tasks")
    tools = [t for t in _tools(s) if s.cfg.tool_allowed(t["name"]) and _sample(t.get("inputSchema")) is not None]
    required = [t for t in tools if _support(t) == "required"]
    forbidden = [t for t in tools if _support(t) == "forbidden" and t["name"] != s.cfg.slow]
    if not required and not forbidden:
        raise CheckSkipped("no tool the checks may call declares taskSupport required, or leaves it forbidden")
    for t in required[:1]:
        reply = _ask(s, "tools/call", {"name": t["name"], "arguments": _sample(t.get("inputSchema"))})
        if "result" in reply:
            raise CheckFailed(f"tool {t['name']!r} requires tasks, yet a plain call was answered: {show(reply['result'])}")
        expect_error(reply, -32601, reply.get("id"), id_may_be_omitted=True)
    for t in forbidden[:1]:
        reply = _ask(s, "tools/call", {"name": t["name"], "arguments": _sample(t.get("inputSchema")), "task": {}})
        if type(reply.get("result")) is dict and "task" in reply["result"]:
            raise CheckFailed(f"tool {t['name']!r} does not declare task support, yet a task was created", level=SHOULD)
        if "error" in reply:
            expect_error(reply, -32601, reply.get("id"), id_may_be_omitted=True)
