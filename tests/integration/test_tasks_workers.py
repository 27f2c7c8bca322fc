"""Tasks across workers sharing a real redis-server (issue 16).

Each worker is a separate ``sturdyrpc demo --mcp --http --store redis://...`` process, and every
HTTP request goes on a new TCP connection to the worker the test names, so a task created through
one worker is polled, fetched and cancelled through another; a worker killed (SIGKILL) while its
task runs leaves the task ``failed``, not ``working`` forever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.mcp import modern_meta
from support.redis import RedisServer
from support.workers import Client, cluster, sse_events

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    srv = RedisServer()
    srv.start()
    yield srv
    srv.stop()


def result_of(reply: dict[str, Any]) -> dict[str, Any]:
    assert "result" in reply, reply
    out: dict[str, Any] = reply["result"]
    return out


def test_task_created_on_one_worker_is_served_by_the_other(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        init = c.initialize(on=0)
        assert init["result"]["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
        created = result_of(c.request("tools/call", {"name": "report", "arguments": {"topic": "w", "seconds": 1.2}, "task": {}}, on=0))
        tid = created["task"]["taskId"]
        assert result_of(c.request("tasks/get", {"taskId": tid}, on=1))["status"] == "working"
        # tasks/result on the other worker waits on the store and returns when the task is done
        t0 = time.monotonic()
        res = result_of(c.request("tasks/result", {"taskId": tid}, on=1))
        took = time.monotonic() - t0
        assert res["content"][0]["text"] == "Report on w: 4 sections written in 1.2 s."
        assert res["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": tid}
        assert took < 4.0
        assert result_of(c.request("tasks/get", {"taskId": tid}, on=0))["status"] == "completed"
        for on in (0, 1):
            assert [t["taskId"] for t in result_of(c.request("tasks/list", {}, on=on))["tasks"]] == [tid]
            assert c.request("tasks/cancel", {"taskId": tid}, on=on)["error"]["code"] == -32602
            assert c.request("tasks/get", {"taskId": "no-such-task"}, on=on)["error"]["code"] == -32602

        # cancelled through worker 1 while it runs on worker 0: the record says so before the
        # reply, and the tool's finishing later never changes a terminal status
        slow = result_of(c.request("tools/call", {"name": "slow", "arguments": {"seconds": 0.5}, "task": {}}, on=0))["task"]["taskId"]
        cancelled = result_of(c.request("tasks/cancel", {"taskId": slow}, on=1))
        assert cancelled["status"] == "cancelled"
        time.sleep(0.7)
        assert result_of(c.request("tasks/get", {"taskId": slow}, on=0))["status"] == "cancelled"
        assert c.request("tasks/result", {"taskId": slow}, on=1)["error"]["code"] == -32602


def progress_of(redis: RedisServer, sid: str, task_id: str) -> int:
    """How many progress notifications of ``task_id`` the session's GET stream (``g``) holds."""
    import asyncio
    import json

    from sturdyrpc.store.redis import RedisStore

    async def read() -> list[tuple[str, bytes]]:
        store = RedisStore(redis.url)
        try:
            return await store.read_after(f"ev:{sid}:g", None, 1000)
        finally:
            await store.aclose()

    n = 0
    for _, data in asyncio.run(read()):
        if data[:1] == b"m":
            m = json.loads(data[1:])
            if m.get("method") == "notifications/progress":
                assert m["params"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
                n += 1
    return n


def test_cancel_through_another_worker_stops_the_tool(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        assert c.sid is not None
        params = {"name": "slow", "arguments": {"seconds": 4, "steps": 40}, "task": {}, "_meta": {"progressToken": "p1"}}
        tid = result_of(c.request("tools/call", params, on=0))["task"]["taskId"]
        deadline = time.monotonic() + 10
        while progress_of(redis_server, c.sid, tid) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)  # the tool runs on worker 0 and reports progress with the related-task _meta
        assert result_of(c.request("tasks/cancel", {"taskId": tid}, on=1))["status"] == "cancelled"
        time.sleep(0.4)
        stopped_at = progress_of(redis_server, c.sid, tid)
        time.sleep(1.0)  # ten more steps would have been reported by now
        assert 3 <= progress_of(redis_server, c.sid, tid) == stopped_at < 40


def test_worker_killed_while_its_task_runs_marks_it_failed(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=1)
        tid = result_of(c.request("tools/call", {"name": "slow", "arguments": {"seconds": 60}, "task": {}}, on=0))["task"]["taskId"]
        assert result_of(c.request("tasks/get", {"taskId": tid}, on=1))["status"] == "working"
        got: dict[str, Any] = {}

        def wait_result() -> None:  # a tasks/result already waiting on worker 1 when worker 0 dies
            got["reply"] = c.request("tasks/result", {"taskId": tid}, on=1)

        waiter = threading.Thread(target=wait_result)
        waiter.start()
        time.sleep(0.2)
        ws[0].kill()
        waiter.join(20)
        assert not waiter.is_alive()
        reply = got["reply"]
        assert reply["error"]["code"] == -32603 and "stopped" in reply["error"]["message"]
        task = result_of(c.request("tasks/get", {"taskId": tid}, on=1))
        assert task["status"] == "failed" and "stopped before it finished" in task["statusMessage"]


def test_modern_extension_across_workers(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}}

        def post(method: str, params: dict[str, Any], on: int, caps: dict[str, Any] | None = None) -> dict[str, Any]:
            import httpx

            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": modern_meta(caps=caps)}}
            headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                       "mcp-protocol-version": "2026-07-28", "mcp-method": method, "connection": "close"}
            if method == "tools/call":
                headers["mcp-name"] = params["name"]
            elif "taskId" in params:  # SEP-2663: tasks/* are routed by task id
                headers["mcp-name"] = params["taskId"]
            with httpx.Client(timeout=20) as h:
                r = h.post(ws[on].url, json=body, headers=headers)
            assert r.status_code in (200, 400, 404), r.text
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                return [e["data"] for e in sse_events(r.text) if e.get("data") and e["data"].get("id") == 1][-1]  # type: ignore[no-any-return]
            out: dict[str, Any] = r.json()
            return out

        disc = post("server/discover", {}, 0)
        assert disc["result"]["capabilities"]["extensions"] == caps["extensions"]
        t = result_of(post("tools/call", {"name": "report", "arguments": {"seconds": 0.4}}, 0, caps))
        assert t["resultType"] == "task" and t["status"] == "working"
        deadline = time.monotonic() + 10
        while True:
            g = result_of(post("tasks/get", {"taskId": t["taskId"]}, 1, caps))
            if g["status"] != "working" or time.monotonic() > deadline:
                break
            time.sleep(t["pollIntervalMs"] / 1000)
        assert g["status"] == "completed" and g["result"]["content"][0]["text"].startswith("Report on sales")


def test_input_required_across_workers(redis_server: RedisServer) -> None:
    """2025-11-25: a task running on worker 0 asks for input; ``tasks/result`` on worker 1
    delivers the elicitation on its own SSE stream, the answer (posted to worker 0) reaches the
    tool through the store, and the result comes back on worker 1's stream."""
    import json

    import httpx

    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        tid = result_of(c.request("tools/call", {"name": "approve", "arguments": {"action": "merge"}, "task": {}}, on=0))["task"]["taskId"]
        deadline = time.monotonic() + 10
        while result_of(c.request("tasks/get", {"taskId": tid}, on=1))["status"] != "input_required":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        asked: list[dict[str, Any]] = []
        reply: dict[str, Any] = {}
        body = {"jsonrpc": "2.0", "id": "res", "method": "tasks/result", "params": {"taskId": tid}}
        with httpx.Client(timeout=20) as h, h.stream("POST", ws[1].url, content=json.dumps(body), headers=c.headers()) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            block: list[str] = []
            for line in r.iter_lines():
                if line:
                    block.append(line)
                    continue
                events = sse_events("\n".join(block))
                block = []
                for ev in events:
                    msg = ev.get("data")
                    if not msg:
                        continue
                    if msg.get("method") == "elicitation/create":
                        asked.append(msg)
                        answer = {"jsonrpc": "2.0", "id": msg["id"], "result": {"action": "accept", "content": {"ok": True}}}
                        assert c.post(answer, on=0).status_code == 202
                    elif msg.get("id") == "res":
                        reply = msg
                if reply:
                    break
        assert len(asked) == 1 and asked[0]["params"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": tid}
        assert reply["result"]["content"][0]["text"] == "merge: approved", reply
        assert reply["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": tid}
        assert result_of(c.request("tasks/get", {"taskId": tid}, on=0))["status"] == "completed"


def test_modern_input_across_workers(redis_server: RedisServer) -> None:
    """2026-07-28: input requests of a task running on worker 0 are read and answered
    (``tasks/update``) through worker 1."""
    import httpx

    caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}
    with cluster(redis_server, 2) as ws:
        def post(method: str, params: dict[str, Any], on: int) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": modern_meta(caps=caps)}}
            headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                       "mcp-protocol-version": "2026-07-28", "mcp-method": method, "connection": "close"}
            if method == "tools/call":
                headers["mcp-name"] = params["name"]
            elif "taskId" in params:  # SEP-2663: tasks/* are routed by task id
                headers["mcp-name"] = params["taskId"]
            with httpx.Client(timeout=20) as h:
                r = h.post(ws[on].url, json=body, headers=headers)
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                return [e["data"] for e in sse_events(r.text) if e.get("data") and e["data"].get("id") == 1][-1]  # type: ignore[no-any-return]
            out: dict[str, Any] = r.json()
            return out

        def until(tid: str, status: str, on: int) -> dict[str, Any]:
            deadline = time.monotonic() + 10
            while True:
                g = result_of(post("tasks/get", {"taskId": tid}, on))
                if g["status"] == status or time.monotonic() > deadline:
                    return g
                time.sleep(0.05)

        t = result_of(post("tools/call", {"name": "approve", "arguments": {"action": "tag"}}, 0))
        assert t["resultType"] == "task"
        g = until(t["taskId"], "input_required", 1)
        assert g["status"] == "input_required" and list(g["inputRequests"]) == ["elicitation-1"]
        assert result_of(post("tasks/update", {"taskId": t["taskId"], "inputResponses": {"elicitation-1": {"action": "accept", "content": {"ok": True}}}}, 1))["resultType"] == "complete"
        g = until(t["taskId"], "completed", 0)
        assert g["status"] == "completed" and g["result"]["content"][0]["text"] == "tag: approved"
