"""Several workers sharing sessions through a real redis-server.

Each worker is a separate ``sturdyrpc demo --mcp --http --store redis://...`` process and every
HTTP request goes on a new TCP connection to the next worker in turn, so each step of a session
is served by another process than the step before (what a load balancer without stickiness does
to ``--workers N``; the launcher itself is tested in test_workers_cli.py).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from support import SERVERS
from support.loops import loop_env, uses_uvloop
from support.redis import RedisServer
from support.workers import Client, cluster, sse_events


def text_of(reply: dict[str, Any]) -> str:
    return str(reply["result"]["content"][0]["text"])


@pytest.mark.parametrize(("n", "loop"), [(2, "asyncio"), (2, "uvloop"), (4, "uvloop")])
def test_any_worker_serves_any_request_of_a_session(redis_server: RedisServer, n: int, loop: str) -> None:
    with cluster(redis_server, n, env=loop_env(loop)) as ws:
        assert all(uses_uvloop(w.proc.pid) == (loop == "uvloop") for w in ws)
        c = Client(ws)
        init = c.initialize(on=0)
        assert init["result"]["protocolVersion"] == "2025-11-25"
        for i in range(2 * n):  # each worker serves the session in turn
            assert text_of(c.request("tools/call", {"name": "echo", "arguments": {"text": f"t{i}"}})) == f"t{i}"
        names = {t["name"] for t in c.request("tools/list")["result"]["tools"]}
        assert {"echo", "test_elicitation"} <= names
        # the log level set on one worker holds on the others
        assert c.request("logging/setLevel", {"level": "error"}, on=0)["result"] == {}
        r = c.post({"jsonrpc": "2.0", "id": 900, "method": "tools/call", "params": {"name": "test_tool_with_logging"}}, on=1)
        events = [e["data"] for e in sse_events(r.text) if e.get("data")]
        assert not [e for e in events if e.get("method") == "notifications/message"]  # info < error: none sent
        assert c.request("logging/setLevel", {"level": "debug"}, on=1)["result"] == {}
        r = c.post({"jsonrpc": "2.0", "id": 901, "method": "tools/call", "params": {"name": "test_tool_with_logging"}}, on=0)
        logs = [e for e in (ev["data"] for ev in sse_events(r.text) if ev.get("data")) if e.get("method") == "notifications/message"]
        assert len(logs) == 3


def test_unknown_and_foreign_sessions_are_404_everywhere(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.sid = "no-such-session"
        for i in range(2):
            r = c.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, on=i)
            assert r.status_code == 404


def test_elicitation_answered_on_another_worker(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        call = {"jsonrpc": "2.0", "id": 50, "method": "tools/call",
                "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}}
        got: list[dict[str, Any]] = []
        answered = threading.Event()
        with httpx.Client(timeout=20) as h, h.stream("POST", ws[0].url, content=json.dumps(call), headers=c.headers()) as r:
            assert r.status_code == 200
            buf = ""
            for chunk in r.iter_text():
                buf += chunk
                while "\n\n" in buf:
                    block, buf = buf.split("\n\n", 1)
                    for ev in sse_events(block + "\n\n"):
                        if not ev.get("data"):
                            continue
                        msg = ev["data"]
                        got.append(msg)
                        if msg.get("method") == "elicitation/create":
                            # the answer goes to the OTHER worker, on a new connection
                            ans = {"jsonrpc": "2.0", "id": msg["id"],
                                   "result": {"action": "accept", "content": {"username": "ann", "email": "a@x"}}}
                            assert c.post(ans, on=1).status_code == 202
                            answered.set()
                if got and got[-1].get("id") == 50:
                    break
        assert answered.is_set()
        assert "action=accept" in text_of(got[-1]) and "ann" in text_of(got[-1])


def test_last_event_id_resumes_on_another_worker(redis_server: RedisServer, loop_name: str) -> None:
    with cluster(redis_server, 2, env=loop_env(loop_name)) as ws:
        c = Client(ws)
        c.initialize(on=0)
        # test_reconnection closes its SSE response mid-call; the result comes after a resume
        r = c.post({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "test_reconnection"}}, on=0)
        events = sse_events(r.text)
        assert events and events[0]["data"] is None and "id" in events[0]  # the priming event
        assert not [e for e in events if e.get("data")]
        with httpx.Client(timeout=20) as h:
            g = h.get(ws[1].url, headers={**c.headers(), "last-event-id": events[-1]["id"]})
        assert g.status_code == 200
        replies = [e["data"] for e in sse_events(g.text) if e.get("data")]
        assert replies[-1]["id"] == 7 and "Reconnection test completed" in text_of(replies[-1])
        with httpx.Client(timeout=20) as h:  # unknown ids are refused on every worker
            assert h.get(ws[0].url, headers={**c.headers(), "last-event-id": "nope.1"}).status_code == 400


def test_subscription_notifications_reach_the_get_stream_on_another_worker(redis_server: RedisServer) -> None:
    with cluster(redis_server, 4) as ws:
        c = Client(ws)
        c.initialize(on=0)
        assert c.request("resources/subscribe", {"uri": "test://watched-resource"}, on=1)["result"] == {}
        seen: list[dict[str, Any]] = []
        ready = threading.Event()

        def hold_get() -> None:
            with httpx.Client(timeout=20) as h, h.stream("GET", ws[2].url, headers=c.headers(accept="text/event-stream")) as g:
                ready.set()
                buf = ""
                for chunk in g.iter_text():
                    buf += chunk
                    seen.extend(e["data"] for e in sse_events(buf) if e.get("data"))
                    buf = buf[buf.rfind("\n\n") + 2:] if "\n\n" in buf else buf
                    if any(m.get("method") == "notifications/resources/updated" for m in seen):
                        return

        t = threading.Thread(target=hold_get, daemon=True)
        t.start()
        assert ready.wait(10)
        time.sleep(0.3)
        # the change happens on a third worker; the GET stream is held by another one
        assert "updated" in text_of(c.request("tools/call", {"name": "update_watched", "arguments": {"text": "v2"}}, on=3))
        t.join(15)
        ups = [m for m in seen if m.get("method") == "notifications/resources/updated"]
        assert len(ups) == 1 and ups[0]["params"] == {"uri": "test://watched-resource"}  # once, not once per worker


def test_delete_is_seen_by_every_worker_at_once(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        c.request("tools/list", on=0)
        c.request("tools/list", on=1)  # both workers now hold the session
        with httpx.Client(timeout=10) as h:
            assert h.delete(ws[1].url, headers=c.headers()).status_code == 200
        for i in range(2):
            assert c.post({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}, on=i).status_code == 404


def test_request_state_retry_on_another_worker(redis_server: RedisServer) -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}
    heads = {"accept": "application/json, text/event-stream", "content-type": "application/json",
             "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "test_elicitation"}
    params = {"name": "test_elicitation", "arguments": {"message": "who?"}, "_meta": meta}

    def call(worker: str, extra: dict[str, Any], id_: int) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {**params, **extra}}
        with httpx.Client(timeout=20) as h:
            r = h.post(worker, content=json.dumps(body), headers=heads)
        return dict(r.json()) if r.headers.get("content-type", "").startswith("application/json") else \
            [e["data"] for e in sse_events(r.text) if e.get("data")][-1]

    with cluster(redis_server, 2) as ws:
        first = call(ws[0].url, {}, 1)["result"]
        assert first["resultType"] == "input_required"
        (key, _ask), = first["inputRequests"].items()
        answer = {key: {"action": "accept", "content": {"username": "u", "email": "e"}}}
        done = call(ws[1].url, {"inputResponses": answer, "requestState": first["requestState"]}, 2)
        assert done["result"]["resultType"] == "complete" and "action=accept" in text_of(done)
        # bound to the arguments: the same token with other arguments is refused, on any worker
        other = {**params, "arguments": {"message": "changed"}}
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {**other, "inputResponses": answer, "requestState": first["requestState"]}}
        with httpx.Client(timeout=20) as h:
            r = h.post(ws[0].url, content=json.dumps(body), headers=heads)
        assert r.json()["error"]["code"] == -32602
        tampered = first["requestState"][:-3] + ("AAA" if not first["requestState"].endswith("AAA") else "BBB")
        assert call(ws[1].url, {"inputResponses": answer, "requestState": tampered}, 4)["error"]["code"] == -32602


def test_redis_restarted_mid_run(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        redis_server.stop()
        try:
            for i in range(2):
                t0 = time.monotonic()
                r = c.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, on=i, timeout=15)
                assert time.monotonic() - t0 < 10  # bounded: the store's op timeout, never a hang
                assert r.status_code == 503 and r.headers.get("retry-after")
                err = r.json()["error"]
                # the client is told what failed, not where the store is; the worker's log says where
                assert err == {"code": -32001, "message": "The session store is unavailable"}
                assert str(redis_server.port) not in r.text
                assert redis_server.url in ws[i].output()
            r = c.post({"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}, on=1)
            assert r.status_code == 503
        finally:
            redis_server.start()
        # Redis is back (empty: this test server keeps nothing on disk): the workers serve again
        c2 = Client(ws)
        for _attempt in range(50):
            try:
                c2.initialize(on=0)
                break
            except AssertionError:
                time.sleep(0.2)
        else:
            raise AssertionError("workers did not recover")
        for _ in range(4):
            assert text_of(c2.request("tools/call", {"name": "echo", "arguments": {"text": "back"}})) == "back"
        assert all(w.proc.poll() is None for w in ws)  # no worker died of it


def test_worker_killed_mid_run(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        c.request("tools/list", on=0)
        c.request("tools/list", on=1)
        body = {"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 30}}}
        first_id: list[str] = []
        err: list[BaseException] = []

        def run_slow() -> None:
            try:
                with httpx.Client(timeout=40) as h, h.stream("POST", ws[0].url, content=json.dumps(body), headers=c.headers()) as r:
                    for chunk in r.iter_text():
                        for e in sse_events(chunk):
                            if "id" in e:
                                first_id.append(e["id"])
            except httpx.HTTPError as exc:  # the worker died under it
                err.append(exc)

        t = threading.Thread(target=run_slow, daemon=True)
        t.start()
        deadline = time.monotonic() + 10
        while not first_id and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first_id, "no priming event"
        ws[0].kill()
        t.join(10)
        assert not t.is_alive()  # the request's stream ended with its worker
        # resuming the dead worker's stream on the survivor ends (no hang) without a reply
        t0 = time.monotonic()
        with httpx.Client(timeout=30) as h:
            g = h.get(ws[1].url, headers={**c.headers(), "last-event-id": first_id[0]})
        assert g.status_code == 200 and time.monotonic() - t0 < 20
        assert not [e for e in sse_events(g.text) if e.get("data") and e["data"].get("id") == 77]
        # the session lives on: the survivor serves it
        assert text_of(c.request("tools/call", {"name": "echo", "arguments": {"text": "alive"}}, on=1)) == "alive"


def test_redis_frozen_mid_run_gives_503_not_a_hang(redis_server: RedisServer) -> None:
    import os
    import signal

    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        assert redis_server.proc is not None
        os.kill(redis_server.proc.pid, signal.SIGSTOP)  # up, but answers nothing: "slow"
        try:
            t0 = time.monotonic()
            r = c.post({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, on=1, timeout=20)
            assert r.status_code == 503 and time.monotonic() - t0 < 10
            assert r.json()["error"] == {"code": -32001, "message": "The session store is unavailable"}
        finally:
            os.kill(redis_server.proc.pid, signal.SIGCONT)
        for _attempt in range(50):  # the same session is served again once Redis answers
            r = c.post({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}, on=1)
            if r.status_code == 200:
                break
            time.sleep(0.1)
        assert r.status_code == 200
        assert text_of(c.request("tools/call", {"name": "echo", "arguments": {"text": "ok"}}, on=0)) == "ok"


def test_get_stream_resumes_on_another_worker_from_its_priming_id(redis_server: RedisServer) -> None:
    with cluster(redis_server, 2) as ws:
        c = Client(ws)
        c.initialize(on=0)
        c.request("resources/subscribe", {"uri": "test://watched-resource"}, on=1)
        with httpx.Client(timeout=10) as h, h.stream("GET", ws[0].url, headers=c.headers(accept="text/event-stream")) as g:
            assert g.status_code == 200
            first = next(g.iter_text())
        prime = sse_events(first)[0]["id"]  # the GET stream is new: nothing was sent on it yet
        # while no GET is open, a notification for the session is raised on the other worker
        c.request("tools/call", {"name": "update_watched", "arguments": {"text": "v3"}}, on=1)
        got: list[dict[str, Any]] = []
        with httpx.Client(timeout=10) as h, h.stream("GET", ws[1].url,
                                                     headers={**c.headers(accept="text/event-stream"), "last-event-id": prime}) as g:
            assert g.status_code == 200  # not "unknown Last-Event-ID" on the other worker
            buf = ""
            for chunk in g.iter_text():
                buf += chunk
                got = [e["data"] for e in sse_events(buf) if e.get("data")]
                if got:
                    break
        assert got[0]["method"] == "notifications/resources/updated"


def test_per_session_values_follow_the_session_across_workers(redis_server: RedisServer) -> None:
    """A user's server (not the demo) through serve_mcp_workers: its own per-session values."""
    import os
    import sys

    from support.http import free_port, server_process
    from support.workers import Worker

    env = {"PYTHONPATH": str(SERVERS) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    ports = [free_port(), free_port()]
    cmds = [[sys.executable, str(SERVERS / "mcp_session_values_server.py"), str(p), redis_server.url, "1"] for p in ports]
    with server_process(cmds[0], ports[0], env) as p0, server_process(cmds[1], ports[1], env) as p1:
        ws = [Worker(ports[0], p0, None), Worker(ports[1], p1, None)]
        a, b = Client(ws), Client(ws)
        a.initialize(on=0)
        b.initialize(on=1)
        pids = {text_of(a.request("tools/call", {"name": "remember", "arguments": {"text": w}})) for w in ("x", "y", "z")}
        assert len(pids) == 2  # written on both workers in turn
        text_of(b.request("tools/call", {"name": "remember", "arguments": {"text": "other"}}))
        assert text_of(a.request("tools/call", {"name": "recall", "arguments": {}}, on=0)) == "x,y,z"
        assert text_of(a.request("tools/call", {"name": "recall", "arguments": {}}, on=1)) == "x,y,z"
        assert text_of(b.request("tools/call", {"name": "recall", "arguments": {}}, on=0)) == "other"


def test_sessions_survive_a_restart_of_a_persistent_redis() -> None:
    srv = RedisServer("--appendonly", "yes", "--appendfsync", "always")
    srv.start()
    try:
        with cluster(srv, 2) as ws:
            c = Client(ws)
            c.initialize(on=0)
            c.request("logging/setLevel", {"level": "error"}, on=1)
            srv.stop()
            assert c.post({"jsonrpc": "2.0", "id": 70, "method": "tools/list"}, on=0).status_code == 503
            srv.start()
            for _attempt in range(50):
                r = c.post({"jsonrpc": "2.0", "id": 71, "method": "tools/list"}, on=1)
                if r.status_code != 503:
                    break
                time.sleep(0.1)
            assert r.status_code == 200  # the same session, on both workers
            assert text_of(c.request("tools/call", {"name": "echo", "arguments": {"text": "same"}}, on=0)) == "same"
            r = c.post({"jsonrpc": "2.0", "id": 72, "method": "tools/call", "params": {"name": "test_tool_with_logging"}}, on=1)
            assert not [e for e in sse_events(r.text) if e.get("data") and e["data"].get("method") == "notifications/message"]
    finally:
        srv.stop()
