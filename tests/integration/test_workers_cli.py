"""``sturdyrpc demo --mcp --http ... --workers N --store URL``: the launcher (serve_mcp_workers)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import redis
from support import SERVERS
from support.http import free_port, server_process
from support.loops import uses_uvloop
from support.redis import RedisServer
from support.workers import Client, Worker, demo_worker_cmd, sse_events


def test_several_workers_with_the_memory_store_are_refused() -> None:
    cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{free_port()}", "--workers", "2"]
    r = subprocess.run(cmd, capture_output=True, timeout=60)
    assert r.returncode == 2 and r.stdout == b""
    assert b"--workers 2 with the memory store would break sessions" in r.stderr and b"--store redis://" in r.stderr


def test_plain_demo_has_no_workers() -> None:
    cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--http", f"127.0.0.1:{free_port()}", "--workers", "2", "--stateless"]
    r = subprocess.run(cmd, capture_output=True, timeout=60)
    assert r.returncode == 2 and b"need --mcp" in r.stderr


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def test_two_workers_on_one_port_share_sessions(redis_server: RedisServer, loop_name: str) -> None:
    redis.Redis(port=redis_server.port).flushall()  # no liveness keys of workers started before
    port = free_port()
    with server_process(demo_worker_cmd(port, redis_server.url, "--workers", "2", "--loop", loop_name), port) as proc:
        w = Worker(port, proc, None)
        c = Client([w])
        c.initialize()
        r = redis.Redis(port=redis_server.port)
        seen: set[bytes] = set()
        for i in range(200):  # new connections until both workers have served the session
            assert c.request("tools/call", {"name": "echo", "arguments": {"text": str(i)}})["result"]["content"][0]["text"] == str(i)
            seen = set(r.keys("sturdyrpc:alive:*"))
            if len(seen) >= 2 and i >= 10:
                break
        assert len(seen) == 2, "the kernel never spread the connections over both workers"
        # --loop reached every worker (uvicorn spawns them: they import the loop by its name)
        workers = [p for p in _children(proc.pid) if b"spawn_main" in open(f"/proc/{p}/cmdline", "rb").read()]
        served = [p for p in workers if uses_uvloop(p) == (loop_name == "uvloop")]
        assert len(workers) >= 2 and served == workers, (loop_name, workers, served)


def test_stateless_workers_share_request_state_keys() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{port}", "--workers", "2", "--stateless"]
    heads = {"accept": "application/json, text/event-stream", "content-type": "application/json",
             "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "test_elicitation"}
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}
    params = {"name": "test_elicitation", "arguments": {"message": "who?"}, "_meta": meta}
    with server_process(cmd, port):
        url = f"http://127.0.0.1:{port}/mcp"
        pids: set[str] = set()
        for i in range(40):  # every retry on a new connection: whichever worker takes it must accept the token
            with httpx.Client(timeout=20) as h:
                first = h.post(url, content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
                               headers=heads).json()["result"]
            (key, _), = first["inputRequests"].items()
            retry = {**params, "inputResponses": {key: {"action": "accept", "content": {"username": "u", "email": "e"}}},
                     "requestState": first["requestState"]}
            with httpx.Client(timeout=20) as h:
                done = h.post(url, content=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry}),
                              headers=heads).json()
            assert done["result"]["resultType"] == "complete", done
            with httpx.Client(timeout=20) as h:
                r = h.post(url, content=json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                                    "params": {"name": "pid", "arguments": {}, "_meta": meta}}),
                           headers={**heads, "mcp-name": "pid"})
            reply = r.json() if r.headers["content-type"].startswith("application/json") else sse_events(r.text)[-1]["data"]
            pids.add(reply["result"]["content"][0]["text"])  # the demo's pid tool: which worker answered
            if len(pids) == 2 and i >= 5:
                break
        assert len(pids) == 2


def test_run_serves_your_server_on_two_workers_sharing_sessions(redis_server: RedisServer) -> None:
    # `sturdyrpc run module:attr --workers 2 --store redis://`: the same launcher as the demo's, for
    # the user's own server; per-session state written on one worker is read on the other.
    port = free_port()
    cmd = [sys.executable, "-m", "sturdyrpc", "run", f"{SERVERS / 'mcp_session_values_server.py'}:server", "--http", f"127.0.0.1:{port}",
           "--workers", "2", "--store", redis_server.url]
    with server_process(cmd, port) as proc:
        c = Client([Worker(port, proc, None)])
        c.initialize()
        pids: set[str] = set()
        for i in range(200):  # a new connection per request until both workers have served the session
            pids.add(c.request("tools/call", {"name": "remember", "arguments": {"text": f"n{i}"}})["result"]["content"][0]["text"])
            if len(pids) >= 2:
                break
        assert len(pids) == 2, "the kernel never spread the connections over both workers"
        notes = c.request("tools/call", {"name": "recall", "arguments": {}})["result"]["content"][0]["text"]
        assert notes == ",".join(f"n{j}" for j in range(i + 1))


def test_several_workers_answer_without_waiting_for_the_client_s_delayed_ack(loop_name: str) -> None:
    # The listening socket of several workers is no "TCP" socket to asyncio (protocol number 0),
    # which then left Nagle's algorithm on: each response's body waited ~40 ms for an ACK.
    import statistics
    import time

    port = free_port()
    cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--http", f"127.0.0.1:{port}", "--workers", "2", "--loop", loop_name]
    with server_process(cmd, port), httpx.Client(timeout=10) as h:  # one keep-alive connection
        took = []
        for i in range(25):
            t0 = time.perf_counter()
            r = h.post(f"http://127.0.0.1:{port}/", json={"jsonrpc": "2.0", "id": i, "method": "echo", "params": {"value": "x"}})
            took.append(time.perf_counter() - t0)
            assert r.status_code == 200 and r.json()["result"] == "x"
        assert statistics.median(took) < 0.02, [round(t * 1000, 1) for t in took]
