"""Tasks that ask the client for input (issue 16, second part).

- 2025-11-25: a tool running as a task that sends a request to the client (roots, sampling,
  elicitation) moves the task to ``input_required``; nothing goes out until the requestor calls
  ``tasks/result``, on whose stream (stdio: the connection; Streamable HTTP: the POST's SSE
  stream) the server delivers the requests with the ``related-task`` ``_meta``; once answered the
  task is ``working`` again and completes (``basic/utilities/tasks.mdx``, "Input Required Status").
- 2026-07-28 (tasks extension): the task is ``input_required`` with its ``inputRequests`` in
  ``tasks/get``; ``tasks/update`` with ``inputResponses`` resumes it.
- the client's ``TaskHandle.result()`` answers both through its elicitation/sampling/roots handlers.

Every message the server writes is validated against the official schemas.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support.http import demo_http_cmd, free_port, server_process
from support.mcp import Wire, modern_meta, recorded_cmd, validate_recording, validate_server_message

from sturdyrpc.mcp import MCPContext, MCPServer
from sturdyrpc.mcp.client import connect
from sturdyrpc.mcp.tasks import META_RELATED_TASK, TASKS_EXTENSION

pytestmark = pytest.mark.timeout(60)

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def make_server() -> MCPServer:
    server = MCPServer("tasks-input", "1.0")

    @server.tool(task_support="optional")
    async def ask(ctx: MCPContext) -> str:
        roots = await ctx.list_roots(timeout=10)
        answer = await ctx.elicit("Go on?", SCHEMA, timeout=10)
        return f"{len(roots['roots'])} roots, {answer['action']} {answer.get('content', {}).get('ok')}"

    @server.tool(task_support="optional")
    async def approve(ctx: MCPContext) -> str:
        answer = await ctx.elicit("Approve?", SCHEMA, timeout=10)
        return f"{answer['action']} {answer.get('content', {}).get('ok')}"

    return server


async def _reply(w: Wire) -> Any:
    """The next message that is not a notification (the optional status notification may come first)."""
    while True:
        msg = await w.recv()
        if "id" in msg:
            return msg


def test_input_required_2025_11_25_requests_go_out_on_tasks_result() -> None:
    server = make_server()

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25", {"roots": {}, "elicitation": {}})
            r = await w.call("tools/call", {"name": "ask", "arguments": {}, "task": {}}, id=1)
            tid = r["result"]["task"]["taskId"]
            await w.nothing(0.3)  # the request waits for tasks/result: it does not go out on its own
            got = await w.call("tasks/get", {"taskId": tid}, id=2)
            assert got["result"]["status"] == "input_required"
            await w.send({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": tid}})
            first = await w.recv()
            assert first["method"] == "roots/list" and first["params"]["_meta"][META_RELATED_TASK] == {"taskId": tid}
            await w.send({"jsonrpc": "2.0", "id": first["id"], "result": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]}})
            second = await w.recv()
            assert second["method"] == "elicitation/create" and second["params"]["_meta"][META_RELATED_TASK] == {"taskId": tid}
            assert second["params"]["message"] == "Go on?"
            await w.send({"jsonrpc": "2.0", "id": second["id"], "result": {"action": "accept", "content": {"ok": True}}})
            res = await _reply(w)
            assert res["id"] == 3, res
            assert res["result"]["content"][0]["text"] == "2 roots, accept True"
            assert res["result"]["_meta"][META_RELATED_TASK] == {"taskId": tid}
            assert (await w.call("tasks/get", {"taskId": tid}, id=4))["result"]["status"] == "completed"

            # the client answers with an error: the tool's request raises it, as in a plain call,
            # and the task fails with that JSON-RPC error
            r = await w.call("tools/call", {"name": "approve", "arguments": {}, "task": {}}, id=5)
            tid2 = r["result"]["task"]["taskId"]
            await w.send({"jsonrpc": "2.0", "id": 6, "method": "tasks/result", "params": {"taskId": tid2}})
            ask = await w.recv()
            assert ask["method"] == "elicitation/create"
            await w.send({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -32603, "message": "no user here"}})
            res = await _reply(w)
            assert res["id"] == 6 and res["error"]["code"] == -32603 and res["error"]["message"] == "no user here"
            assert res["error"]["data"]["_meta"][META_RELATED_TASK] == {"taskId": tid2}
            assert (await w.call("tasks/get", {"taskId": tid2}, id=7))["result"]["status"] == "failed"
            w.validate("2025-11-25")

    asyncio.run(main())


def test_input_required_2026_07_28_inputs_in_tasks_get_and_tasks_update() -> None:
    server = make_server()
    caps = {"extensions": {TASKS_EXTENSION: {}}, "elicitation": {}, "roots": {}}

    async def main() -> None:
        sent: list[Any] = []
        got: list[Any] = []

        async def related(b: bytes) -> None:
            got.append(msgspec.json.decode(b))

        async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
            msg = {"jsonrpc": "2.0", "id": len(sent), "method": method, "params": {**params, "_meta": modern_meta(caps=caps)}}
            sent.append(msg)
            out = await server.handle_stateless(msgspec.json.encode(msg), related)
            assert out is not None
            reply: dict[str, Any] = msgspec.json.decode(out)
            got.append(reply)
            return reply

        async def until(tid: str, status: str) -> dict[str, Any]:
            for _ in range(200):
                g = (await call("tasks/get", {"taskId": tid}))["result"]
                if g["status"] == status:
                    return g
                await asyncio.sleep(0.01)
            raise AssertionError(f"never {status}: {g}")

        t = await call("tools/call", {"name": "ask", "arguments": {}})
        assert t["result"]["resultType"] == "task"
        tid = t["result"]["taskId"]
        g = await until(tid, "input_required")
        assert g["inputRequests"] == {"roots-1": {"method": "roots/list", "params": {}}}
        # a response to a key that is not outstanding is ignored
        assert (await call("tasks/update", {"taskId": tid, "inputResponses": {"nope": {}}}))["result"]["resultType"] == "complete"
        assert (await call("tasks/get", {"taskId": tid}))["result"]["status"] == "input_required"
        await call("tasks/update", {"taskId": tid, "inputResponses": {"roots-1": {"roots": [{"uri": "file:///a"}]}}})
        g = await until(tid, "input_required")
        assert list(g["inputRequests"]) == ["elicitation-2"]
        assert g["inputRequests"]["elicitation-2"]["method"] == "elicitation/create"
        assert g["inputRequests"]["elicitation-2"]["params"]["message"] == "Go on?"
        await call("tasks/update", {"taskId": tid, "inputResponses": {"elicitation-2": {"action": "decline"}}})
        g = await until(tid, "completed")
        assert g["result"]["content"][0]["text"] == "1 roots, decline None"
        assert "inputRequests" not in g
        methods = {(type(m["id"]), m["id"]): m["method"] for m in sent}
        checked: list[str] = []
        for m in got:
            checked += validate_server_message("2026-07-28", m, methods)
        assert {"ext:CreateTaskResult", "ext:GetTaskResult", "ext:EmptyResult"} <= set(checked)

    asyncio.run(main())


def test_2026_07_28_input_by_rounds_before_the_task() -> None:
    """SEP-2322 composed with SEP-2663: asks with ``before_task`` in the tool's first step are
    input rounds of the call itself (no task yet, no ``taskId``); the round that has every answer
    becomes the task (no ``requestState`` on it), whose result holds the answers. An ask after
    the first step waits in the task as any task's does, ``before_task`` or not."""
    server = MCPServer("tasks-rounds", "1.0")
    name_schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

    @server.tool(task_support="required")
    async def onboard(ctx: MCPContext) -> str:
        who = await ctx.elicit("Name?", name_schema, key="who", before_task=True)
        where = await ctx.elicit("City?", name_schema, key="where", before_task=True)
        await asyncio.sleep(0.05)
        late = await ctx.elicit("Sure?", SCHEMA, key="late", before_task=True)  # after the first step: in the task
        return f"{who['content']['name']} of {where['content']['name']}: {late['content']['ok']}"

    caps = {"extensions": {TASKS_EXTENSION: {}}, "elicitation": {}}

    async def main() -> None:
        n = 0

        async def related(b: bytes) -> None:
            pass

        async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
            nonlocal n
            n += 1
            msg = {"jsonrpc": "2.0", "id": n, "method": method, "params": {**params, "_meta": modern_meta(caps=caps)}}
            out = await server.handle_stateless(msgspec.json.encode(msg), related)
            assert out is not None
            reply: dict[str, Any] = msgspec.json.decode(out)
            assert "result" in reply, reply
            validate_server_message("2026-07-28", reply, {(int, n): method})
            return reply["result"]

        r1 = await call("tools/call", {"name": "onboard", "arguments": {}})
        assert r1["resultType"] == "input_required" and "taskId" not in r1
        assert list(r1["inputRequests"]) == ["who"]
        r2 = await call("tools/call", {"name": "onboard", "arguments": {}, "requestState": r1["requestState"],
                                       "inputResponses": {"who": {"action": "accept", "content": {"name": "Ada"}}}})
        assert r2["resultType"] == "input_required" and list(r2["inputRequests"]) == ["where"]
        r3 = await call("tools/call", {"name": "onboard", "arguments": {}, "requestState": r2["requestState"],
                                       "inputResponses": {"where": {"action": "accept", "content": {"name": "London"}}}})
        assert r3["resultType"] == "task" and "requestState" not in r3 and "inputRequests" not in r3
        tid = r3["taskId"]
        for _ in range(300):
            g = await call("tasks/get", {"taskId": tid})
            if g["status"] == "input_required":
                break
            await asyncio.sleep(0.01)
        assert g["status"] == "input_required" and list(g["inputRequests"]) == ["late"], g
        await call("tasks/update", {"taskId": tid, "inputResponses": {"late": {"action": "accept", "content": {"ok": True}}}})
        for _ in range(300):
            g = await call("tasks/get", {"taskId": tid})
            if g["status"] == "completed":
                break
            await asyncio.sleep(0.01)
        assert g["status"] == "completed", g
        assert g["result"]["content"][0]["text"] == "Ada of London: True"

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_client_handle_answers_input_requests(protocol: str) -> None:
    server = make_server()
    asked: list[dict[str, Any]] = []

    def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"ok": True}}

    async def main() -> None:
        async with server.test_client(protocol, elicitation=elicitation, roots=lambda: [{"uri": "file:///r"}]) as client:
            seen: list[str] = []
            h = await client.call_tool("ask", {}, as_task=True)
            assert h.task_id
            result = await h.result(on_status=lambda t: seen.append(t["status"]))
            assert result["content"][0]["text"] == "1 roots, accept True"
            assert "input_required" in seen and seen[-1] == "completed"
            assert [a["message"] for a in asked] == ["Go on?"]
            if protocol == "2025-11-25":
                assert asked[0]["_meta"][META_RELATED_TASK] == {"taskId": h.task_id}

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_stdio_task_asks_for_input(tmp_path: Path, protocol: str) -> None:
    log = tmp_path / "wire"

    async def main() -> None:
        async with connect(recorded_cmd(log), protocol, timeout=20,
                           elicitation=lambda p: {"action": "accept", "content": {"ok": True}}) as client:
            statuses: list[str] = []
            h = await client.call_tool("approve", {"action": "release"}, as_task=True)
            assert h.task_id
            result = await h.result(on_status=lambda t: statuses.append(t["status"]))
            assert result["content"][0]["text"] == "release: approved"
            assert "input_required" in statuses and statuses[-1] == "completed"

    asyncio.run(main())
    assert validate_recording(log, protocol) >= 4


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_http_task_asks_for_input(protocol: str) -> None:
    from sturdyrpc.mcp_http.connect import connect_http

    port = free_port()
    asked: list[dict[str, Any]] = []

    def elicitation(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"ok": True}}

    async def main() -> None:
        async with connect_http(f"http://127.0.0.1:{port}/mcp", protocol, elicitation=elicitation, timeout=20) as client:
            statuses: list[str] = []
            h = await client.call_tool("approve", {"action": "ship"}, as_task=True)
            assert h.task_id
            result = await h.result(on_status=lambda t: statuses.append(t["status"]))
            assert result["content"][0]["text"] == "ship: approved"
            assert "input_required" in statuses and statuses[-1] == "completed"
            assert len(asked) == 1
            if protocol == "2025-11-25":
                assert asked[0]["_meta"][META_RELATED_TASK] == {"taskId": h.task_id}

    with server_process(demo_http_cmd(port, mcp=True), port):
        asyncio.run(main())


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_cli_task_shows_input_required(protocol: str) -> None:
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "sturdyrpc", "mcp", "call", "--protocol", protocol, "--task", "--elicit-accept", '{"ok": true}',
           "approve", '{"action": "x"}', "--", sys.executable, "-m", "sturdyrpc", "demo", "--mcp"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=40)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "x: approved"
    statuses = [line.rsplit(": ", 1)[1] for line in p.stderr.splitlines() if line.startswith("task ")]
    assert statuses[0] == "working" and "input_required" in statuses and statuses[-1] == "completed", p.stderr
    assert "elicitation: Approve x?" in p.stderr


def test_cancel_while_input_required_stops_the_tool() -> None:
    server = make_server()

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25", {"roots": {}, "elicitation": {}})
            tid = (await w.call("tools/call", {"name": "approve", "arguments": {}, "task": {}}, id=1))["result"]["task"]["taskId"]
            for _ in range(100):
                if (await w.call("tasks/get", {"taskId": tid}, id="g"))["result"]["status"] == "input_required":
                    break
                await asyncio.sleep(0.01)
            cancelled = await w.call("tasks/cancel", {"taskId": tid}, id=2)
            assert cancelled["result"]["status"] == "cancelled"
            await asyncio.sleep(0.1)
            assert not server.tasks._running  # the tool waiting for its answer was stopped
            # nothing is delivered for a terminal task: tasks/result answers at once (-32602: no result)
            res = await w.call("tasks/result", {"taskId": tid}, id=3)
            assert res["error"]["code"] == -32602
            assert (await w.call("tasks/get", {"taskId": tid}, id=4))["result"]["status"] == "cancelled"
            w.validate("2025-11-25")

    asyncio.run(main())
