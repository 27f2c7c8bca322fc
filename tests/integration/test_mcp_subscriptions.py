"""2026-07-28 ``subscriptions/listen``: the long-lived notification channel, on stdio (the peer) and HTTP.

What is checked, on each transport: the acknowledgement comes first and names what the server
agreed to; only the requested notification types arrive, each tagged with the subscription id;
the client's cancellation (``notifications/cancelled`` on stdio, closing the stream on HTTP)
ends it with no reply and nothing after; the server's own ending is a final
``resultType: "complete"`` result; every message validates against the 2026-07-28 schema.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.http import free_port
from support.mcp import Wire, modern_meta, recorded_cmd, validate_recording, validate_server_message

from sturdyrpc.demos.mcp import make_mcp_demo
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp.client import connect
from sturdyrpc.mcp_http.sse import SSEParser

pytestmark = pytest.mark.timeout(40)

V = "2026-07-28"
SUB = "io.modelcontextprotocol/subscriptionId"
WATCHED = "test://watched-resource"
ACK = "notifications/subscriptions/acknowledged"


def listen_req(id_: Any, notifications: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "subscriptions/listen", "params": {"_meta": modern_meta(), "notifications": notifications}}


def tool_req(id_: Any, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"_meta": modern_meta(), "name": name, "arguments": args or {}}}


def cancel(id_: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id_, "reason": "done"}}


# ----------------------------------------------------------------------------- stdio (the peer), raw wire


def test_stdio_ack_first_only_requested_cancel_ends() -> None:
    async def main() -> None:
        mcp = make_mcp_demo()
        async with Wire(mcp) as w:
            await w.send(listen_req("L", {"toolsListChanged": True, "resourceSubscriptions": [WATCHED]}))
            ack = await w.recv()
            assert ack["method"] == ACK and "id" not in ack
            assert ack["params"]["_meta"] == {SUB: "L"}
            assert ack["params"]["notifications"] == {"toolsListChanged": True, "resourceSubscriptions": [WATCHED]}

            # a resource update it asked for
            await w.send(tool_req(1, "update_watched", {"text": "v2"}))
            got = [await w.recv(), await w.recv()]
            upd = next(m for m in got if m.get("method") == "notifications/resources/updated")
            assert upd["params"] == {"uri": WATCHED, "_meta": {SUB: "L"}}
            assert any(m.get("id") == 1 and m["result"]["content"][0]["text"] == "updated" for m in got)

            # a tool-list change it asked for (the tool is added, then removed)
            for i, word in ((2, "added"), (3, "removed")):
                await w.send(tool_req(i, "toggle_extra_tool"))
                got = [await w.recv(), await w.recv()]
                changed = [m for m in got if m.get("method") == "notifications/tools/list_changed"]
                assert changed and changed[0]["params"] == {"_meta": {SUB: "L"}}
                assert any(m.get("id") == i and m["result"]["content"][0]["text"] == word for m in got)

            # resources/list_changed was not asked for: nothing on the stream (the call's reply only)
            await mcp.notify_list_changed("resources")
            await mcp.notify_list_changed("prompts")
            await mcp.resource_updated("test://static-text")  # not subscribed
            await w.nothing(0.4)

            # cancelled: no reply, and no more messages for it
            await w.send(cancel("L"))
            await asyncio.sleep(0.1)
            await mcp.notify_list_changed("tools")
            await mcp.resource_updated(WATCHED)
            await w.nothing(0.5)
            assert not len(mcp.listeners)
            # the id is free again, and the session still works
            await w.send(listen_req("L", {"promptsListChanged": True}))
            ack = await w.recv()
            assert ack["params"]["notifications"] == {"promptsListChanged": True}
            await w.send(cancel("L"))
            w.validate(V)

    asyncio.run(main())


def test_stdio_server_ends_with_complete_result_and_filter_agreement() -> None:
    async def main() -> None:
        server = MCPServer("bare", "1.0")  # tools only: no prompts or resources to honour

        @server.tool()
        def noop() -> str:
            return "ok"

        async with Wire(server) as w:
            # unsupported types are left out of the acknowledgement
            await w.send(listen_req(7, {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True,
                                        "resourceSubscriptions": ["file:///x"]}))
            ack = await w.recv()
            assert ack["params"] == {"_meta": {SUB: 7}, "notifications": {"toolsListChanged": True}}
            # discovery advertises it
            r = await w.call("server/discover", {"_meta": modern_meta()}, id=8)
            assert r["result"]["capabilities"]["tools"] == {"listChanged": True}
            # the server ends it: the final result, then nothing
            assert server.close_subscriptions() == 1
            final = await w.recv()
            assert final["id"] == 7 and final["result"]["resultType"] == "complete"
            assert final["result"]["_meta"][SUB] == 7
            await server.notify_list_changed("tools")
            await w.nothing(0.4)
            # bad filters are -32602; handshake-era sessions have no such method
            r = await w.call("subscriptions/listen", {"_meta": modern_meta(), "notifications": {"toolsListChanged": "yes"}}, id=9)
            assert r["error"]["code"] == -32602
            r = await w.call("subscriptions/listen", {"_meta": modern_meta()}, id=10)
            assert r["error"]["code"] == -32602
            w.validate(V)
        async with Wire(make_mcp_demo()) as w:
            await w.initialize("2025-11-25")
            r = await w.call("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id=2)
            assert r["error"]["code"] == -32601

    asyncio.run(main())


# ----------------------------------------------------------------------------- stdio, a real subprocess and our client


def test_stdio_subprocess_with_our_client(tmp_path: Path) -> None:
    log = tmp_path / "wire"

    async def main() -> None:
        seen: list[tuple[str, dict[str, Any]]] = []
        async with connect(recorded_cmd(log), timeout=15) as client:
            assert client.version == V
            got_tools = asyncio.Event()

            def on_note(method: str, params: dict[str, Any]) -> None:
                seen.append((method, params))
                if method == "notifications/tools/list_changed":
                    got_tools.set()

            sub = await client.listen({"toolsListChanged": True, "resourceSubscriptions": [WATCHED]}, on_note)
            assert sub.acknowledged == {"toolsListChanged": True, "resourceSubscriptions": [WATCHED]}
            assert (await client.call_tool("update_watched", {"text": "x"}))["content"][0]["text"] == "updated"
            assert (await client.call_tool("toggle_extra_tool"))["content"][0]["text"] == "added"
            await asyncio.wait_for(got_tools.wait(), 5)
            await sub.close()
            n = len(seen)
            await client.call_tool("toggle_extra_tool")  # removed: would be a list change
            await client.call_tool("update_watched", {"text": "y"})
            await asyncio.sleep(0.3)
            assert len(seen) == n
        methods = [m for m, _ in seen]
        assert methods.count("notifications/resources/updated") == 1 and methods.count("notifications/tools/list_changed") == 1
        assert all(p["_meta"][SUB] == sub.id for _, p in seen)

    asyncio.run(main())
    assert validate_recording(log, V) > 0
    out = [json.loads(x) for x in Path(str(log) + ".out").read_bytes().splitlines() if x.strip()]
    listen_msgs = [m for m in out if m.get("id", "").__class__ is str and str(m.get("id")).startswith("sturdyrpc-listen")]
    assert listen_msgs == []  # cancelled: never answered
    tagged = [m for m in out if "method" in m and SUB in (m.get("params") or {}).get("_meta", {})]
    assert tagged[0]["method"] == ACK and len(tagged) == 3  # ack, updated, tools changed: nothing after the cancel


def test_stdio_official_python_sdk_listen(tmp_path: Path) -> None:
    """The official Python SDK's ``Client.listen()`` against our stdio demo (wire validated)."""
    from support.sdk import Client, StdioServerParameters, need_python_sdk

    need_python_sdk()
    log = tmp_path / "wire"
    cmd = recorded_cmd(log)

    async def main() -> list[Any]:
        events: list[Any] = []
        async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:]), read_timeout_seconds=20) as c:
            async with c.listen(tools_list_changed=True, resource_subscriptions=[WATCHED]) as sub:
                assert sub.honored.tools_list_changed is True and list(sub.honored.resource_subscriptions or []) == [WATCHED]
                await c.call_tool("toggle_extra_tool", {})
                await c.call_tool("update_watched", {"text": "sdk"})

                async def read() -> None:
                    async for ev in sub:
                        events.append(ev)
                        if len(events) >= 2:
                            return

                await asyncio.wait_for(read(), 10)
            await asyncio.sleep(0.5)  # the SDK writes its notifications/cancelled a moment after the block ends
            await c.call_tool("toggle_extra_tool", {})  # after the cancellation: nothing more for it
            await asyncio.sleep(0.3)
        return events

    events = asyncio.run(main())
    assert sorted(type(e).__name__ for e in events) == ["ResourceUpdated", "ToolsListChanged"]
    assert validate_recording(log, V) > 0
    sent = [json.loads(x) for x in Path(str(log) + ".in").read_bytes().splitlines() if x.strip()]
    listen_id = next(m["id"] for m in sent if m.get("method") == "subscriptions/listen")
    assert any(m.get("method") == "notifications/cancelled" and m["params"]["requestId"] == listen_id for m in sent)
    out = [json.loads(x) for x in Path(str(log) + ".out").read_bytes().splitlines() if x.strip()]
    tagged = [m for m in out if SUB in ((m.get("params") or m.get("result") or {}).get("_meta") or {})]
    assert [m.get("method") for m in tagged][0] == ACK and len(tagged) == 3  # ack + 2 notifications, no reply


# ----------------------------------------------------------------------------- HTTP 2026-07-28


class _Stream:
    """A listen request's SSE response, read event by event."""

    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp
        self.parser = SSEParser()
        self.events: list[Any] = []
        self.it = resp.aiter_bytes()

    async def next(self, timeout: float = 3.0) -> Any:
        while not self.events:
            chunk = await asyncio.wait_for(self.it.__anext__(), timeout)
            for ev in self.parser.feed(chunk):
                if ev.data:
                    self.events.append(json.loads(ev.data))
        return self.events.pop(0)

    async def nothing(self, wait: float) -> None:
        try:
            msg = await self.next(wait)
        except (TimeoutError, StopAsyncIteration):
            return
        raise AssertionError(f"unexpected message on the stream: {msg}")


def _headers(method: str, name: str | None = None) -> dict[str, str]:
    h = {"accept": "application/json, text/event-stream", "content-type": "application/json", "mcp-protocol-version": V,
         "mcp-method": method}
    if name is not None:
        h["mcp-name"] = name
    return h


def test_http_listen_stream() -> None:
    import uvicorn

    from sturdyrpc.mcp_http import mcp_http_app

    server = make_mcp_demo()
    checked: list[Any] = []

    def check(msg: Any, method: str) -> Any:
        validate_server_message(V, msg, {(type(msg.get("id")), msg.get("id")): method} if "id" in msg else {})
        checked.append(msg)
        return msg

    async def main() -> None:
        port = free_port()
        http = uvicorn.Server(uvicorn.Config(mcp_http_app(server), host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
        task = asyncio.create_task(http.serve())
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            while not http.started:
                await asyncio.sleep(0.02)
            async with httpx.AsyncClient(timeout=10) as c:
                async def call_tool(id_: int, name: str, args: dict[str, Any] | None = None) -> Any:
                    r = await c.post(url, json=tool_req(id_, name, args), headers=_headers("tools/call", name))
                    assert r.status_code == 200
                    return check(r.json(), "tools/call")

                # a JSON-only client cannot hold the channel
                h = _headers("subscriptions/listen")
                h["accept"] = "application/json"
                r = await c.post(url, json=listen_req(1, {"toolsListChanged": True}), headers=h)
                assert r.status_code == 406

                body = listen_req("h1", {"resourceSubscriptions": [WATCHED]})
                async with c.stream("POST", url, json=body, headers=_headers("subscriptions/listen")) as resp:
                    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
                    s = _Stream(resp)
                    ack = check(await s.next(), "")
                    assert ack["method"] == ACK and ack["params"] == {"_meta": {SUB: "h1"}, "notifications": {"resourceSubscriptions": [WATCHED]}}
                    await call_tool(2, "update_watched", {"text": "v3"})
                    upd = check(await s.next(), "")
                    assert upd == {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": WATCHED, "_meta": {SUB: "h1"}}}
                    await call_tool(3, "toggle_extra_tool")  # tools list changed: not asked for on this stream
                    await s.nothing(0.5)
                    assert len(server.listeners) == 1
                # closing the stream is the cancellation: the server stops
                for _ in range(100):
                    if not len(server.listeners):
                        break
                    await asyncio.sleep(0.02)
                assert not len(server.listeners)
                await call_tool(4, "toggle_extra_tool")

                # the server ends a stream: a final complete result, then the stream ends
                body = listen_req(5, {"toolsListChanged": True})
                async with c.stream("POST", url, json=body, headers=_headers("subscriptions/listen")) as resp:
                    s = _Stream(resp)
                    assert check(await s.next(), "")["params"]["notifications"] == {"toolsListChanged": True}
                    await call_tool(6, "toggle_extra_tool")
                    assert check(await s.next(), "")["method"] == "notifications/tools/list_changed"
                    assert server.close_subscriptions() == 1
                    final = check(await s.next(), "subscriptions/listen")
                    assert final["id"] == 5 and final["result"]["resultType"] == "complete" and final["result"]["_meta"][SUB] == 5
                    await s.nothing(0.5)  # the stream has ended
        finally:
            http.should_exit = True
            await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert len(checked) >= 9



def test_http_our_client_listen_and_close() -> None:
    """Our client over HTTP: ``sub.close()`` closes the listen POST's stream (no notification is
    posted), which the server takes as the cancellation; ``sub.wait()`` gets the server's final result."""
    import uvicorn

    from sturdyrpc.mcp_http import mcp_http_app
    from sturdyrpc.mcp_http.connect import connect_http

    server = make_mcp_demo()

    async def main() -> None:
        port = free_port()
        http = uvicorn.Server(uvicorn.Config(mcp_http_app(server), host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
        task = asyncio.create_task(http.serve())
        try:
            while not http.started:
                await asyncio.sleep(0.02)
            async with connect_http(f"http://127.0.0.1:{port}/mcp", timeout=10) as client:
                assert client.version == V
                seen: list[tuple[str, dict[str, Any]]] = []
                sub = await client.listen({"toolsListChanged": True, "promptsListChanged": True}, lambda m, p: seen.append((m, p)))
                assert sub.acknowledged == {"toolsListChanged": True, "promptsListChanged": True}
                await client.call_tool("toggle_extra_tool")
                await client.call_tool("update_watched", {"text": "z"})  # not subscribed
                for _ in range(100):
                    if seen:
                        break
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.2)
                assert seen == [("notifications/tools/list_changed", {"_meta": {SUB: sub.id}})]
                await sub.close()
                for _ in range(100):
                    if not len(server.listeners):
                        break
                    await asyncio.sleep(0.02)
                assert not len(server.listeners)
                sub2 = await client.listen({"resourceSubscriptions": [WATCHED]}, lambda m, p: None)
                assert server.close_subscriptions() == 1
                final = await asyncio.wait_for(sub2.wait(), 5)
                assert final is not None and final["resultType"] == "complete" and final["_meta"][SUB] == sub2.id
        finally:
            http.should_exit = True
            await asyncio.wait_for(task, 10)

    asyncio.run(main())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
