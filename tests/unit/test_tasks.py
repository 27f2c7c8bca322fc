"""MCP tasks (issue 16): 2025-11-25 task-augmented ``tools/call`` and ``tasks/*``, the 2026-07-28
tasks extension, over the in-memory wire, the test client, stdio (a real subprocess) and HTTP
(with auth binding). Every message the server writes is validated against the official schemas
(2025-11-25 core schema; the extension's schema in tests/data/mcp-tasks-ext)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from support import SERVERS
from support.mcp import Wire, modern_meta, recorded_cmd, validate_recording, validate_server_message

from sturdyrpc.errors import RPCError
from sturdyrpc.mcp import MCPContext, MCPServer
from sturdyrpc.mcp.client import connect
from sturdyrpc.mcp.pages import Pages
from sturdyrpc.mcp.tasks import META_RELATED_TASK, TASKS_EXTENSION

ACCEPT = "application/json, text/event-stream"
pytestmark = pytest.mark.timeout(30)


def make_server() -> tuple[MCPServer, dict[str, Any]]:
    server = MCPServer("tasks-test", "1.0")
    state: dict[str, Any] = {"gate": None, "cancelled": 0, "started": 0}

    @server.tool(task_support="optional")
    async def slow(n: int, ctx: MCPContext) -> int:
        """Doubles n once the test opens the gate (or at once without one)."""
        state["started"] += 1
        await ctx.report_progress(1, 2, "half way")
        await ctx.info("working on it")
        try:
            if state["gate"] is not None:
                await state["gate"].wait()
        except asyncio.CancelledError:
            state["cancelled"] += 1
            raise
        return n * 2

    @server.tool(task_support="required")
    async def report(topic: str = "x") -> str:
        return f"report on {topic}"

    @server.tool(blocking=False)
    def plain() -> str:
        return "plain"

    @server.tool(task_support="optional")
    async def refuse() -> str:
        raise RPCError("refused on purpose", {"why": "test"}, code=-31050)

    @server.tool(task_support="optional")
    async def broken() -> str:
        raise RuntimeError("internal detail")

    return server, state


def err(reply: dict[str, Any]) -> int:
    assert "error" in reply, reply
    return int(reply["error"]["code"])


def test_handshake_flow_on_the_wire_validates() -> None:
    server, state = make_server()

    async def main() -> None:
        async with Wire(server) as w:
            init = await w.initialize("2025-11-25")
            # no auth context to bind tasks to: tasks.list is not declared (rule 60), tasks/list
            # still answers with the session's own tasks
            assert init["result"]["capabilities"]["tasks"] == {"cancel": {}, "requests": {"tools": {"call": {}}}}
            await w.call("logging/setLevel", {"level": "info"}, id="lvl")
            tools = {t["name"]: t for t in (await w.call("tools/list", {}, id="tl"))["result"]["tools"]}
            assert tools["slow"]["execution"] == {"taskSupport": "optional"}
            assert tools["report"]["execution"] == {"taskSupport": "required"}
            assert "execution" not in tools["plain"]  # forbidden, the default: not announced

            # the CreateTaskResult comes at once, while the tool waits on the gate
            state["gate"] = asyncio.Event()
            r = await w.call("tools/call", {"name": "slow", "arguments": {"n": 21}, "task": {"ttl": 60000},
                                            "_meta": {"progressToken": "pt"}}, id=1)
            task = r["result"]["task"]
            assert task["status"] == "working" and task["ttl"] == 60000 and task["pollInterval"] > 0
            assert len(task["taskId"]) >= 32 and task["createdAt"].endswith("Z")
            tid = task["taskId"]
            got = await w.call("tasks/get", {"taskId": tid}, id=2)
            assert got["result"]["status"] == "working" and got["result"]["taskId"] == tid
            listed = await w.call("tasks/list", {}, id=3)
            assert [t["taskId"] for t in listed["result"]["tasks"]] == [tid]
            waiting = asyncio.ensure_future(w.call("tasks/result", {"taskId": tid}, id=4))
            await asyncio.sleep(0.05)
            assert not waiting.done()  # tasks/result blocks until the task is terminal
            state["gate"].set()
            res = await asyncio.wait_for(waiting, 5)
            assert res["result"]["structuredContent"] == {"result": 42}
            assert res["result"]["_meta"][META_RELATED_TASK] == {"taskId": tid}
            # progress and logging during the task carry the related-task _meta
            notes = [m for m in w.received if m.get("method") in ("notifications/progress", "notifications/message")]
            assert {m["method"] for m in notes} == {"notifications/progress", "notifications/message"}
            assert all(m["params"]["_meta"][META_RELATED_TASK] == {"taskId": tid} for m in notes)
            assert [m["params"]["progressToken"] for m in notes if m["method"] == "notifications/progress"] == ["pt"]
            done = await w.call("tasks/get", {"taskId": tid}, id=5)
            assert done["result"]["status"] == "completed"
            # cancelling a terminal task is -32602, and it stays completed
            assert err(await w.call("tasks/cancel", {"taskId": tid}, id=6)) == -32602
            assert (await w.call("tasks/get", {"taskId": tid}, id=7))["result"]["status"] == "completed"

            # bad ids
            for i, params in enumerate(({"taskId": "no-such-task"}, {}, {"taskId": 7}, {"taskId": ""})):
                assert err(await w.call("tasks/get", params, id=f"bad{i}")) == -32602
                assert err(await w.call("tasks/result", params, id=f"badr{i}")) == -32602
                assert err(await w.call("tasks/cancel", params, id=f"badc{i}")) == -32602
            assert err(await w.call("tasks/list", {"cursor": "nope"}, id="badcur")) == -32602

            # required without a task, forbidden with one: -32601 (rule 28)
            assert err(await w.call("tools/call", {"name": "report", "arguments": {}}, id=8)) == -32601
            assert err(await w.call("tools/call", {"name": "plain", "arguments": {}, "task": {}}, id=9)) == -32601
            assert err(await w.call("tools/call", {"name": "nope", "arguments": {}, "task": {}}, id=10)) == -32602
            assert err(await w.call("tools/call", {"name": "slow", "arguments": {"n": 1}, "task": {"ttl": "x"}}, id=11)) == -32602
            assert (await w.call("tools/call", {"name": "plain", "arguments": {}}, id=12))["result"]["content"][0]["text"] == "plain"
            r = await w.call("tools/call", {"name": "report", "arguments": {"topic": "q3"}, "task": {}}, id=13)
            rep = await w.call("tasks/result", {"taskId": r["result"]["task"]["taskId"]}, id=14)
            assert rep["result"]["content"][0]["text"] == "report on q3"

            # cancel a running task: cancelled before the reply, the tool is stopped
            state["gate"] = asyncio.Event()
            before = state["started"]
            r = await w.call("tools/call", {"name": "slow", "arguments": {"n": 1}, "task": {}}, id=15)
            tid2 = r["result"]["task"]["taskId"]
            while state["started"] == before:
                await asyncio.sleep(0.01)
            c = await w.call("tasks/cancel", {"taskId": tid2}, id=16)
            assert c["result"]["status"] == "cancelled" and c["result"]["taskId"] == tid2
            assert (await w.call("tasks/get", {"taskId": tid2}, id=17))["result"]["status"] == "cancelled"
            for _ in range(100):
                if state["cancelled"]:
                    break
                await asyncio.sleep(0.01)
            assert state["cancelled"] == 1
            assert err(await w.call("tasks/result", {"taskId": tid2}, id=18)) == -32602
            assert err(await w.call("tasks/cancel", {"taskId": tid2}, id=19)) == -32602

            # a JSON-RPC error raised on purpose: tasks/result returns exactly that error
            r = await w.call("tools/call", {"name": "refuse", "arguments": {}, "task": {}}, id=20)
            tid3 = r["result"]["task"]["taskId"]
            e = await w.call("tasks/result", {"taskId": tid3}, id=21)
            assert e["error"]["code"] == -31050 and e["error"]["message"] == "refused on purpose"
            assert e["error"]["data"]["why"] == "test" and e["error"]["data"]["_meta"][META_RELATED_TASK] == {"taskId": tid3}
            assert (await w.call("tasks/get", {"taskId": tid3}, id=22))["result"]["status"] == "failed"
            # a tool that raises: an isError result (no internals), the task failed
            r = await w.call("tools/call", {"name": "broken", "arguments": {}, "task": {}}, id=23)
            tid4 = r["result"]["task"]["taskId"]
            b = await w.call("tasks/result", {"taskId": tid4}, id=24)
            assert b["result"]["isError"] is True and "internal detail" not in str(b)
            g = (await w.call("tasks/get", {"taskId": tid4}, id=25))["result"]
            assert g["status"] == "failed" and "incident" in g["statusMessage"]
            # the optional status notifications were sent, one per finished task
            statuses = [m["params"] for m in w.received if m.get("method") == "notifications/tasks/status"]
            assert {s["taskId"] for s in statuses} >= {tid, tid3, tid4}
            await asyncio.sleep(0.05)
            w.validate("2025-11-25")

    asyncio.run(main())


def test_tasks_list_is_paginated() -> None:
    server, _ = make_server()
    server.tasks.pages = Pages(2)

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25")
            ids = []
            for i in range(5):
                r = await w.call("tools/call", {"name": "report", "arguments": {}, "task": {}}, id=i)
                ids.append(r["result"]["task"]["taskId"])
            seen: list[str] = []
            cursor = None
            pages = 0
            while True:
                r = await w.call("tasks/list", {"cursor": cursor} if cursor else {}, id=f"l{pages}")
                pages += 1
                seen += [t["taskId"] for t in r["result"]["tasks"]]
                cursor = r["result"].get("nextCursor")
                if not cursor:
                    break
            assert seen == ids and pages == 3
            w.validate("2025-11-25")

    asyncio.run(main())


def test_older_versions_ignore_task_and_have_no_tasks_methods() -> None:
    server, _ = make_server()

    async def main() -> None:
        async with Wire(server) as w:
            init = await w.initialize("2025-06-18")
            assert "tasks" not in init["result"]["capabilities"]
            tools = (await w.call("tools/list", {}, id="tl"))["result"]["tools"]
            assert all("execution" not in t for t in tools)
            r = await w.call("tools/call", {"name": "report", "arguments": {}, "task": {}}, id=1)
            assert r["result"]["content"][0]["text"] == "report on x"  # task ignored: handled normally
            assert err(await w.call("tasks/get", {"taskId": "x"}, id=2)) == -32601
            w.validate("2025-06-18")

    asyncio.run(main())


def test_expiry_after_ttl() -> None:
    server, state = make_server()

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25")
            r = await w.call("tools/call", {"name": "report", "arguments": {}, "task": {"ttl": 300}}, id=1)
            tid = r["result"]["task"]["taskId"]
            assert r["result"]["task"]["ttl"] == 300
            assert (await w.call("tasks/result", {"taskId": tid}, id=2))["result"]["content"][0]["text"] == "report on x"
            # a running task whose ttl passes is stopped and forgotten
            state["gate"] = asyncio.Event()
            r = await w.call("tools/call", {"name": "slow", "arguments": {"n": 1}, "task": {"ttl": 300}}, id=3)
            tid2 = r["result"]["task"]["taskId"]
            await asyncio.sleep(0.45)
            for i, t in enumerate((tid, tid2)):
                assert err(await w.call("tasks/get", {"taskId": t}, id=f"g{i}")) == -32602
            assert (await w.call("tasks/list", {}, id="l"))["result"]["tasks"] == []
            assert state["cancelled"] == 1

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_client_handle_with_the_test_client(protocol: str) -> None:
    server, state = make_server()

    async def main() -> None:
        async with server.test_client(protocol) as client:
            seen: list[str] = []
            h = await client.call_tool("slow", {"n": 4}, as_task=True)
            assert h.task["status"] == "working" and h.task_id
            assert (await h.status())["status"] in ("working", "completed")
            result = await h.result(on_status=lambda t: seen.append(t["status"]))
            assert result["structuredContent"] == {"result": 8}
            assert seen[-1] == "completed"
            state["gate"] = asyncio.Event()
            h2 = await client.call_tool("slow", {"n": 1}, as_task=True, ttl_ms=10_000)
            await h2.cancel()
            assert (await h2.status())["status"] == "cancelled"
            with pytest.raises(RPCError):
                await h2.result()
            f = await client.call_tool("refuse", {}, as_task=True)
            with pytest.raises(RPCError) as exc:
                await f.result()
            assert exc.value.code == -31050
            # the required tool through the plain call: 2025-11-25 refuses it (-32601); 2026-07-28
            # too, for a client that did not declare the extension: -32021 naming it (SEP-2663)
            with pytest.raises(RPCError) as exc:
                await client.call_tool("report", {})
            if protocol == "2025-11-25":
                assert exc.value.code == -32601
            else:
                assert exc.value.code == -32021 and exc.value.data == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}

    asyncio.run(main())


def test_modern_extension_messages_validate() -> None:
    server, state = make_server()
    ext_caps = {"extensions": {TASKS_EXTENSION: {}}}

    async def main() -> None:
        sent: list[Any] = []
        got: list[Any] = []

        async def related(b: bytes) -> None:
            got.append(msgspec.json.decode(b))

        async def ask(method: str, params: dict[str, Any], caps: dict[str, Any] | None = None) -> dict[str, Any]:
            msg = {"jsonrpc": "2.0", "id": len(sent), "method": method, "params": {**params, "_meta": modern_meta(caps=caps)}}
            sent.append(msg)
            out = await server.handle_stateless(msgspec.json.encode(msg), related)
            assert out is not None
            reply: dict[str, Any] = msgspec.json.decode(out)
            got.append(reply)
            return reply

        disc = await ask("server/discover", {})
        assert disc["result"]["capabilities"]["extensions"] == {TASKS_EXTENSION: {}}
        assert "tasks" not in disc["result"]["capabilities"]
        plain = await ask("tools/call", {"name": "slow", "arguments": {"n": 2}})
        assert plain["result"]["resultType"] == "complete"  # no extension declared: never a task
        state["gate"] = asyncio.Event()
        t = await ask("tools/call", {"name": "slow", "arguments": {"n": 2}}, ext_caps)
        assert t["result"]["resultType"] == "task" and t["result"]["status"] == "working"
        tid = t["result"]["taskId"]
        assert t["result"]["ttlMs"] > 0 and t["result"]["pollIntervalMs"] > 0
        # the tasks methods without the extension declared: -32021 naming it (SEP-2663)
        for method, extra in (("tasks/get", {}), ("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {})):
            refused = await ask(method, {"taskId": tid, **extra})
            assert refused["error"]["code"] == -32021, refused
            assert refused["error"]["data"]["requiredCapabilities"] == ext_caps
        g = await ask("tasks/get", {"taskId": tid}, ext_caps)
        assert g["result"]["status"] == "working" and "result" not in g["result"]
        assert (await ask("tasks/update", {"taskId": tid, "inputResponses": {"x": {}}}, ext_caps))["result"]["resultType"] == "complete"
        state["gate"].set()
        for _ in range(100):
            g = await ask("tasks/get", {"taskId": tid}, ext_caps)
            if g["result"]["status"] != "working":
                break
            await asyncio.sleep(0.01)
        assert g["result"]["status"] == "completed" and g["result"]["result"]["structuredContent"] == {"result": 4}
        # cancel: an acknowledgement, also for a terminal task (cooperative)
        state["gate"] = asyncio.Event()
        t2 = await ask("tools/call", {"name": "slow", "arguments": {"n": 2}}, ext_caps)
        assert (await ask("tasks/cancel", {"taskId": t2["result"]["taskId"]}, ext_caps))["result"]["resultType"] == "complete"
        assert (await ask("tasks/get", {"taskId": t2["result"]["taskId"]}, ext_caps))["result"]["status"] == "cancelled"
        assert (await ask("tasks/cancel", {"taskId": tid}, ext_caps))["result"]["resultType"] == "complete"
        f = await ask("tools/call", {"name": "refuse", "arguments": {}}, ext_caps)
        for _ in range(100):
            g = await ask("tasks/get", {"taskId": f["result"]["taskId"]}, ext_caps)
            if g["result"]["status"] != "working":
                break
            await asyncio.sleep(0.01)
        assert g["result"]["status"] == "failed" and g["result"]["error"]["code"] == -31050
        # what the extension removed, and bad ids
        assert (await ask("tasks/result", {"taskId": tid}, ext_caps))["error"]["code"] == -32601
        assert (await ask("tasks/list", {}, ext_caps))["error"]["code"] == -32601
        assert (await ask("tasks/get", {"taskId": "nope"}, ext_caps))["error"]["code"] == -32602
        # a forbidden tool is never a task
        assert (await ask("tools/call", {"name": "plain", "arguments": {}}, ext_caps))["result"]["resultType"] == "complete"
        methods = {(type(m["id"]), m["id"]): m["method"] for m in sent}
        checked: list[str] = []
        for m in got:
            checked += validate_server_message("2026-07-28", m, methods)
        assert {"ext:CreateTaskResult", "ext:GetTaskResult", "ext:EmptyResult"} <= set(checked)

    asyncio.run(main())


def test_stdio_subprocess_flow_validates(tmp_path: Path) -> None:
    log = tmp_path / "wire"

    async def main() -> None:
        async with connect(recorded_cmd(log), "2025-11-25", timeout=20) as client:
            tools = {t["name"]: t for t in await client.list_tools()}
            assert tools["slow"]["execution"] == {"taskSupport": "optional"}
            assert tools["report"]["execution"] == {"taskSupport": "required"}
            h = await client.call_tool("report", {"topic": "q1", "seconds": 0.2}, as_task=True)
            statuses: list[str] = []
            result = await h.result(on_status=lambda t: statuses.append(t["status"]))
            assert result["content"][0]["text"] == "Report on q1: 4 sections written in 0.2 s."
            assert statuses[0] == "working" and statuses[-1] == "completed"
            s = await client.call_tool("slow", {"seconds": 30}, as_task=True)
            assert (await s.cancel())["status"] == "cancelled"
            with pytest.raises(RPCError) as exc:
                await client.request("tasks/cancel", {"taskId": s.task_id})
            assert exc.value.code == -32602
            listed = await client.request("tasks/list", {})
            assert {t["taskId"] for t in listed["tasks"]} == {h.task_id, s.task_id}

    asyncio.run(main())
    assert validate_recording(log, "2025-11-25") >= 8


def test_http_tasks_bound_to_the_principal() -> None:
    from sturdyrpc.demos.mcp_http import make_demo_app
    from sturdyrpc.transports.asgi import BearerAuth, HTTPSecurity

    tokens = {"tok-alice": "alice", "tok-bob": "bob"}
    app = make_demo_app(path=None, json_response=True, security=HTTPSecurity(auth=BearerAuth(tokens.get, realm="mcp")))
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as c:
            sessions: dict[str, dict[str, str]] = {}
            for who in ("alice", "bob"):
                h = {"accept": ACCEPT, "authorization": f"Bearer tok-{who}", "mcp-protocol-version": "2025-11-25"}
                r = await c.post("/", json=init, headers=h)
                assert r.status_code == 200, r.text
                # an auth context tasks are bound to: tasks.list is declared (rule 60)
                assert r.json()["result"]["capabilities"]["tasks"]["list"] == {}
                h["mcp-session-id"] = r.headers["mcp-session-id"]
                assert (await c.post("/", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)).status_code == 202
                sessions[who] = h

            async def call(who: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
                r = await c.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=sessions[who])
                assert r.status_code == 200, r.text
                out: dict[str, Any] = r.json()
                return out

            created = await call("alice", "tools/call", {"name": "slow", "arguments": {"seconds": 0.3}, "task": {}})
            tid = created["result"]["task"]["taskId"]
            # bob sees nothing of alice's task: exactly what an unknown id gets
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                assert (await call("bob", method, {"taskId": tid}))["error"]["code"] == -32602
            assert (await call("bob", "tasks/list", {}))["result"]["tasks"] == []
            assert (await call("alice", "tasks/get", {"taskId": tid}))["result"]["status"] in ("working", "completed")
            t0 = time.monotonic()
            res = await call("alice", "tasks/result", {"taskId": tid})
            assert res["result"]["content"][0]["text"] == "slept 0.3 seconds" and time.monotonic() - t0 < 5
            assert [t["taskId"] for t in (await call("alice", "tasks/list", {}))["result"]["tasks"]] == [tid]
            # 2026-07-28 requests (no session) are bound to the principal too
            modern = {"accept": ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "tasks/get", "mcp-name": tid}
            body = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                    "params": {"taskId": tid, "_meta": modern_meta(caps={"extensions": {TASKS_EXTENSION: {}}})}}
            r = await c.post("/", json=body, headers={**modern, "authorization": "Bearer tok-bob"})
            assert r.json()["error"]["code"] == -32602
            r = await c.post("/", json=body, headers={**modern, "authorization": "Bearer tok-alice"})
            assert r.json()["result"]["status"] == "completed" and r.json()["result"]["result"]["content"][0]["text"] == "slept 0.3 seconds"
            await app.aclose()

    asyncio.run(main())


def _check_statuses(tmp_path: Path, *cmd: str) -> dict[str, str]:
    import json
    import subprocess
    import sys

    out = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "sturdyrpc", "check", "--mcp", "--protocol", "2025-11-25", "--only", "mcp.tasks-*",
                    "--call-tools", "*", "--json", str(out), "--", *cmd], capture_output=True, text=True, timeout=60)
    return {c["id"]: c["status"] for c in json.loads(out.read_text())["checks"]}


def test_check_task_checks_pass_on_the_demo_and_fail_on_a_broken_server(tmp_path: Path) -> None:
    import sys

    demo = _check_statuses(tmp_path, sys.executable, "-m", "sturdyrpc", "demo", "--mcp")
    assert demo == {"mcp.tasks-flow": "pass", "mcp.tasks-bad-id": "pass", "mcp.tasks-cancel-terminal": "pass", "mcp.tasks-support": "pass"}
    broken = _check_statuses(tmp_path, sys.executable, str(SERVERS / "mcp_tasks_broken_server.py"))
    assert broken == {"mcp.tasks-flow": "fail", "mcp.tasks-bad-id": "fail", "mcp.tasks-cancel-terminal": "fail", "mcp.tasks-support": "fail"}
