"""Every program in examples/ run as its docstring says: real subprocesses, pipes and sockets (and
a real redis-server for the workers), and ``sturdyrpc check`` on the stdio servers."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest
from support import ROOT
from support.http import free_port, server_process
from support.process import ServerProcess
from support.redis import RedisServer
from support.workers import Client, Worker

from sturdyrpc.mcp.client import connect as connect_mcp
from sturdyrpc.mcp_http.connect import connect_http

EXAMPLES = ROOT / "examples"
SRPC = [sys.executable, "-m", "sturdyrpc"]


def _example(name: str) -> list[str]:
    return [sys.executable, str(EXAMPLES / name)]


def test_every_example_is_run_here() -> None:
    tested = {"jsonrpc_server.py", "mcp_server.py", "http_auth_server.py", "workers_server.py", "client.py", "guard_client_config.json"}
    assert {p.name for p in EXAMPLES.iterdir() if not p.name.startswith((".", "__"))} == tested


JSONRPC_TABLE = [
    ({"jsonrpc": "2.0", "id": 1, "method": "divide", "params": [6, 3]}, {"jsonrpc": "2.0", "result": 2.0, "id": 1}),
    ({"jsonrpc": "2.0", "id": "n", "method": "divide", "params": {"a": 1, "b": 4}}, {"jsonrpc": "2.0", "result": 0.25, "id": "n"}),
    ({"jsonrpc": "2.0", "id": 2, "method": "divide", "params": [1, 0]},
     {"jsonrpc": "2.0", "error": {"code": -32602, "message": "Invalid params: 'b' must not be zero", "data": {"param": "b"}}, "id": 2}),
    ({"jsonrpc": "2.0", "id": 3, "method": "echo", "params": [[1, "x"]]}, {"jsonrpc": "2.0", "result": [1, "x"], "id": 3}),
]


def test_jsonrpc_server_answers() -> None:
    proc = ServerProcess(_example("jsonrpc_server.py"))
    try:
        for request_, expected in JSONRPC_TABLE:
            proc.send_line(json.dumps(request_))
            assert proc.recv() == expected
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("name", "args"),
    [("jsonrpc_server.py", ["--echo-method", "echo", "--no-mcp"]), ("mcp_server.py", ["--mcp", "--call-tools", "add"])],
)
def test_stdio_examples_pass_check(name: str, args: list[str]) -> None:
    r = subprocess.run([*SRPC, "check", *args, "--", *_example(name)], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].endswith(" 0 failed")


def test_mcp_server_has_tools_resources_and_prompts() -> None:
    async def main() -> None:
        async with connect_mcp(_example("mcp_server.py"), timeout=20) as client:
            assert [t["name"] for t in await client.list_tools()] == ["add"]
            assert (await client.call_tool("add", {"a": 2, "b": 40}))["structuredContent"] == {"result": 42}
            assert [r["uri"] for r in await client.list_resources()] == ["notes://index"]
            assert [t["uriTemplate"] for t in await client.list_resource_templates()] == ["notes://note/{name}"]
            assert (await client.read_resource("notes://index"))["contents"][0]["text"] == "idea\ntodo"
            assert (await client.read_resource("notes://note/todo"))["contents"][0]["text"] == "buy milk"
            prompt = await client.get_prompt("summarize", {"name": "idea"})
            assert prompt["messages"][0]["content"]["text"] == "Summarize this note in one line: a sturdier server"

    asyncio.run(main())


def test_client_prints_what_the_servers_answered() -> None:
    r = subprocess.run(_example("client.py"), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "divide: 2.0\nerror: -32602 Invalid params: 'b' must not be zero\ntools: ['add']\nadd: 5\n"


def test_guard_in_a_client_config_serves_the_mcp_example() -> None:
    # As a client (an IDE, Claude Desktop) reads the file: the command and its args, run from the
    # repository (the config's paths are relative to it), spoken to over the child's stdio.
    entry = json.loads((EXAMPLES / "guard_client_config.json").read_text())["mcpServers"]["notes"]
    assert entry["command"] == "sturdyrpc" and entry["args"][0] == "guard"
    args = [sys.executable if a == "python" else a for a in entry["args"]]

    async def main() -> None:
        async with connect_mcp([*SRPC, *args], timeout=20, cwd=str(ROOT)) as client:
            assert [t["name"] for t in await client.list_tools()] == ["add"]
            assert (await client.call_tool("add", {"a": 1, "b": 2}))["structuredContent"] == {"result": 3}

    asyncio.run(main())


def test_http_server_refuses_without_the_token_and_serves_with_it() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    heads = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with server_process([*_example("http_auth_server.py"), "127.0.0.1", str(port)], port, env={"EXAMPLE_TOKEN": "s3cret"}):
        for extra in ({}, {"authorization": "Bearer wrong"}):
            r = httpx.post(url, json=init, headers={**heads, **extra}, timeout=10)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith('Bearer realm="sturdyrpc"'), r.text

        async def main() -> None:
            async with connect_http(url, headers={"authorization": "Bearer s3cret"}, timeout=10) as client:
                result = await client.call_tool("whoami", {})
                assert result["content"][0]["text"] == "you are alice"

        asyncio.run(main())


def test_two_workers_share_a_session_through_redis(redis_server: RedisServer) -> None:
    port = free_port()
    cmd = [*SRPC, "run", f"{EXAMPLES / 'workers_server.py'}:server", "--http", f"127.0.0.1:{port}",
           "--workers", "2", "--store", redis_server.url]
    with server_process(cmd, port) as proc:
        c = Client([Worker(port, proc, None)])
        c.initialize()
        workers: set[int] = set()
        for i in range(1, 201):  # a new connection per request until both workers have served the session
            reply = c.request("tools/call", {"name": "count", "arguments": {}})
            got = reply["result"]["structuredContent"]
            assert got["calls"] == i, got  # the count written by one worker is read by the other
            workers.add(got["worker"])
            if len(workers) == 2:
                break
        assert len(workers) == 2, "the kernel never spread the connections over both workers"
