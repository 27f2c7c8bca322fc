"""The task state machine (issue 22): one table of transitions, every (status, event) pair
allowed or refused as written out here, every status change in the tasks package made through
it, terminal statuses final; and a task that fails unexpectedly says so with an incident id,
never the exception's class or text."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from sturdyrpc.mcp import MCPContext, MCPServer, ToolResult
from sturdyrpc.mcp.tasks import TERMINAL, InvalidTransition
from sturdyrpc.mcp.tasks import states as task_states
from sturdyrpc.mcp.tasks.states import EVENTS, STATUSES, TRANSITIONS, next_status, transition

pytestmark = pytest.mark.timeout(30)

STATUS_NAMES = ["working", "input_required", "completed", "failed", "cancelled"]
EVENT_NAMES = ["ask", "resume", "complete", "fail", "cancel"]
#: The whole table, written out: (status, event) -> the status it leads to; missing: refused.
ALLOWED = {
    ("working", "ask"): "input_required",
    ("working", "complete"): "completed",
    ("working", "fail"): "failed",
    ("working", "cancel"): "cancelled",
    ("input_required", "ask"): "input_required",  # a second request parked while one is outstanding
    ("input_required", "resume"): "working",
    ("input_required", "complete"): "completed",  # e.g. the tool's wait for an answer timed out
    ("input_required", "fail"): "failed",
    ("input_required", "cancel"): "cancelled",
}


def test_the_table_has_exactly_these_statuses_and_events() -> None:
    assert list(STATUSES) == STATUS_NAMES and list(TRANSITIONS) == STATUS_NAMES
    assert list(EVENTS) == EVENT_NAMES
    assert TERMINAL == {"completed", "failed", "cancelled"}
    assert task_states.INITIAL == "working"
    with pytest.raises(TypeError):
        TRANSITIONS["completed"]["cancel"] = "working"  # type: ignore[index]  # read-only


@pytest.mark.parametrize("event", EVENT_NAMES)
@pytest.mark.parametrize("status", STATUS_NAMES)
def test_every_pair_is_allowed_or_refused(status: str, event: str) -> None:
    record = {"id": "t", "status": status, "msg": "before", "outcome": {"result": {}}}
    expected = ALLOWED.get((status, event))
    if expected is None:
        with pytest.raises(InvalidTransition) as exc:
            transition(record, event, "after")
        assert (exc.value.status, exc.value.event) == (status, event)
        assert record == {"id": "t", "status": status, "msg": "before", "outcome": {"result": {}}}  # untouched
        with pytest.raises(InvalidTransition):
            next_status(status, event)
    else:
        assert next_status(status, event) == expected
        assert transition(record, event, "after") is record
        assert record == {"id": "t", "status": expected, "msg": "after", "outcome": {"result": {}}}
        # without a message the old one goes: a message explains the status it came with
        assert transition({"status": status, "msg": "before"}, event) == {"status": expected}


@pytest.mark.parametrize("status", [None, "", "unknown", 3, "WORKING"])
def test_an_unknown_status_allows_nothing(status: Any) -> None:
    for event in EVENT_NAMES:
        with pytest.raises(InvalidTransition):
            transition({"status": status}, event)
    with pytest.raises(InvalidTransition):
        transition({"status": "working"}, "explode")


def test_every_status_change_in_the_tasks_package_goes_through_the_table() -> None:
    # No `record["status"] = ...` and no literal status in a record outside states.py: a status is
    # set by transition() alone (and a new record starts at INITIAL).
    package = Path(task_states.__file__).parent
    found = []
    for path in sorted(package.glob("*.py")):
        if path.name == "states.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "status":
                    found.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Dict):  # a record written with a status of its own choosing
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "status" and isinstance(v, ast.Constant):
                        found.append(f"{path.name}:{node.lineno} (dict)")
    assert found == []


# ---------------------------------------------------------------------------- through the server


class Unstorable:
    """Structured content no JSON encoder can write (so the task's outcome cannot be stored)."""


def make_server() -> MCPServer:
    server = MCPServer("states", "1.0")

    @server.tool(task_support="optional")
    async def odd() -> ToolResult:
        """Returns a result whose structured content cannot be encoded."""
        return ToolResult([{"type": "text", "text": "x"}], structured={"value": Unstorable()})

    @server.tool(task_support="optional")
    async def ask(ctx: MCPContext) -> str:
        """Asks the client, once."""
        answer = await ctx.elicit("ok?", {"type": "object", "properties": {}})
        return str(answer.get("action"))

    return server


def test_a_task_failing_unexpectedly_names_an_incident_not_the_exception(caplog: pytest.LogCaptureFixture) -> None:
    server = make_server()

    async def main() -> None:
        async with server.test_client("2025-11-25") as client:
            created = await client.request("tools/call", {"name": "odd", "arguments": {}, "task": {}})
            tid = created["task"]["taskId"]
            for _ in range(100):
                got = await client.request("tasks/get", {"taskId": tid})
                if got["status"] != "working":
                    break
                await asyncio.sleep(0.02)
            assert got["status"] == "failed", got
            m = re.fullmatch(r"Internal error \(incident ([0-9a-f]{8})\)", got["statusMessage"])
            assert m, got["statusMessage"]
            incident = m.group(1)
            with pytest.raises(Exception) as exc:
                await client.request("tasks/result", {"taskId": tid})
            error = exc.value
            assert getattr(error, "code", None) == -32603 and getattr(error, "message", None) == "Internal error"
            assert (getattr(error, "data", None) or {}).get("incident") == incident
            assert "TypeError" not in repr(got) and "Unstorable" not in repr(got) and "Unstorable" not in repr(error)

    with caplog.at_level(logging.ERROR, logger="sturdyrpc.mcp"):
        asyncio.run(main())
    # the log has the whole story under that id, for the operator
    logged = [r for r in caplog.records if "incident" in r.getMessage() and r.exc_info]
    assert logged and "Unstorable" in str(logged[0].exc_info[1])


def test_a_terminal_task_never_changes() -> None:
    # Cancelled while it waits for the client's answer: the late answer changes nothing, a second
    # cancel is refused, and the record still says cancelled.
    server = make_server()

    async def main() -> None:
        async with server.test_client("2025-11-25", elicitation=lambda p: {"action": "accept"}) as client:
            created = await client.request("tools/call", {"name": "ask", "arguments": {}, "task": {}})
            tid = created["task"]["taskId"]
            for _ in range(100):
                if (await client.request("tasks/get", {"taskId": tid}))["status"] == "input_required":
                    break
                await asyncio.sleep(0.02)
            cancelled = await client.request("tasks/cancel", {"taskId": tid})
            assert cancelled["status"] == "cancelled" and cancelled["statusMessage"] == "Cancelled by the client"
            await server.tasks.answer(tid, {"elicitation-1": {"result": {"action": "accept"}}})
            with pytest.raises(Exception) as exc:
                await client.request("tasks/cancel", {"taskId": tid})
            assert getattr(exc.value, "code", None) == -32602
            rec = await server.tasks.records.get(tid)
            assert rec is not None and rec["status"] == "cancelled" and not rec.get("answers")
            assert rec["msg"] == "Cancelled by the client"

    asyncio.run(main())
