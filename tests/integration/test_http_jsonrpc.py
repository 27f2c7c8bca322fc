"""Plain JSON-RPC over HTTP: the ASGI app in-process (httpx) and under uvicorn (a real socket)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from support.http import demo_http_cmd, free_port, server_process

from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.request_context import current_principal
from sturdyrpc.transports.asgi import BearerAuth, HTTPSecurity
from sturdyrpc.transports.http import JSONRPCHTTPApp

pytestmark = pytest.mark.timeout(60)

H = {"content-type": "application/json"}


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_single_request_and_notification() -> None:
    async def go() -> None:
        async with client(JSONRPCHTTPApp(make_demo())) as c:
            r = await c.post("/", content=b'{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}', headers=H)
            assert r.status_code == 200
            assert r.headers["content-type"] == "application/json"
            assert r.json() == {"jsonrpc": "2.0", "result": 19, "id": 1}
            r = await c.post("/", content=b'{"jsonrpc":"2.0","method":"update","params":[1]}', headers=H)
            assert r.status_code == 204 and r.content == b""

    run(go())


def test_batches_per_spec() -> None:
    async def go() -> None:
        async with client(JSONRPCHTTPApp(make_demo())) as c:
            body = json.dumps([
                {"jsonrpc": "2.0", "method": "sum", "params": [1, 2, 4], "id": "1"},
                {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
                {"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": "2"},
                {"foo": "boo"},
                {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
                {"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.01, "value": "z"}, "id": "9"},
            ])
            r = await c.post("/", content=body, headers=H)
            assert r.status_code == 200
            got = {json.dumps(x.get("id")): x for x in r.json()}
            assert got['"1"']["result"] == 7 and got['"2"']["result"] == 19 and got['"9"']["result"] == "z"
            assert got["null"]["error"]["code"] == -32600
            assert got['"5"']["error"]["code"] == -32601
            # [] -> one -32600; only notifications -> nothing (204), never "[]"
            r = await c.post("/", content=b"[]", headers=H)
            assert r.json() == {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None}
            r = await c.post("/", content=b'[{"jsonrpc":"2.0","method":"update","params":[1]}]', headers=H)
            assert r.status_code == 204 and r.content == b""
            r = await c.post("/", content=b"[1,2", headers=H)
            assert r.json()["error"]["code"] == -32700

    run(go())


def test_http_refusals_and_no_internals() -> None:
    async def go() -> None:
        app = JSONRPCHTTPApp(make_demo(), security=HTTPSecurity(max_body_bytes=1000, allowed_origins=["https://app.example"]))
        async with client(app) as c:
            ok = b'{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}'
            assert (await c.get("/")).status_code == 405
            assert (await c.get("/")).headers["allow"] == "POST"
            assert (await c.post("/", content=ok, headers={"content-type": "text/plain"})).status_code == 415
            assert (await c.post("/", content=ok, headers={**H, "accept": "text/html"})).status_code == 406
            assert (await c.post("/", content=b"[" + b"1," * 1000 + b"1]", headers=H)).status_code == 413
            r = await c.post("/", content=ok, headers={**H, "origin": "https://evil.example"})
            assert r.status_code == 403 and r.json()["error"]["code"] == -32600
            assert (await c.post("/", content=ok, headers={**H, "origin": "https://app.example"})).status_code == 200
            assert (await c.post("/", content=ok, headers={**H, "origin": "http://localhost:3000"})).status_code == 200
            assert (await c.post("/", content=ok, headers={**H, "host": "evil.example"})).status_code == 403
            r = await c.post("/", content=b'{"jsonrpc":"2.0","method":"fail","id":1}', headers=H)
            assert r.json()["error"]["code"] == -32603
            assert "SECRET" not in r.text and "shadow" not in r.text

    run(go())


def test_bearer_auth_hook() -> None:
    seen: list[Any] = []

    async def verify(token: str) -> str | None:
        return "alice" if token == "good" else None

    async def go() -> None:
        rpc = make_demo()

        @rpc.method
        async def whoami() -> Any:
            seen.append(current_principal.get())
            return current_principal.get()

        app = JSONRPCHTTPApp(rpc, security=HTTPSecurity(auth=BearerAuth(verify, realm="test")))
        async with client(app) as c:
            body = b'{"jsonrpc":"2.0","method":"whoami","id":1}'
            r = await c.post("/", content=body, headers=H)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith('Bearer realm="test"')
            r = await c.post("/", content=body, headers={**H, "authorization": "Bearer bad"})
            assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]
            # never from the query string
            r = await c.post("/?access_token=good", content=body, headers=H)
            assert r.status_code == 401
            r = await c.post("/", content=body, headers={**H, "authorization": "Bearer good"})
            assert r.status_code == 200 and r.json()["result"] == "alice"

    run(go())
    assert seen == ["alice"]


def test_disconnect_cancels_running_call() -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def go() -> None:
        rpc = make_demo()

        @rpc.method
        async def slow() -> int:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
            return 1

        app = JSONRPCHTTPApp(rpc)
        body = b'{"jsonrpc":"2.0","method":"slow","id":1}'
        msgs: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]
        disconnect = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if msgs:
                return msgs.pop(0)
            await disconnect.wait()
            return {"type": "http.disconnect"}

        sent: list[dict[str, Any]] = []

        async def send(m: dict[str, Any]) -> None:
            sent.append(m)

        scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]}
        task = asyncio.create_task(app(scope, receive, send))
        await started.wait()
        disconnect.set()
        await asyncio.wait_for(task, 5)

    run(go())
    assert cancelled == [True]


def test_under_uvicorn() -> None:
    port = free_port()
    with server_process(demo_http_cmd(port), port):
        url = f"http://127.0.0.1:{port}/"
        with httpx.Client(timeout=10) as c:
            r = c.post(url, content=b'{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42,"subtrahend":23},"id":3}', headers=H)
            assert r.json() == {"jsonrpc": "2.0", "result": 19, "id": 3}
            r = c.post(url, content=b'{"jsonrpc":"2.0","method":"sleep","params":{"seconds":0.05,"value":1},"id":4}', headers=H)
            assert r.json()["result"] == 1
            assert c.post(url, content=b'{"jsonrpc":"2.0","method":"update","params":[1]}', headers=H).status_code == 204
            assert c.post(url, content=b"{}", headers={**H, "origin": "http://evil.example"}).status_code == 403


def test_remote_bind_needs_flag() -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "sturdyrpc", "demo", "--http", "0.0.0.0:1"], capture_output=True, timeout=30)
    assert r.returncode == 2 and b"--allow-remote" in r.stderr
