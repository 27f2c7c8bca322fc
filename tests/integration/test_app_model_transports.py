"""The app model on every path a message can enter: `sturdyrpc run` over stdio (real pipes), MCP
Streamable HTTP (sessions, a 2025-03-26 batch, stateless 2026-07-28) and plain JSON-RPC over HTTP
on real uvicorn, lifespan startup failures, `sturdyrpc run`'s errors and `sturdyrpc dev` restarts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from servers.app_model_server import make_rpc, make_server
from support import SERVERS
from support.http import free_port, serve_in_thread, stop, wait_port
from support.mcp import modern_meta
from support.process import ServerProcess, wait_until

from sturdyrpc.mcp_http.app import mcp_http_app
from sturdyrpc.transports.asgi import BearerAuth, HTTPSecurity
from sturdyrpc.transports.http import JSONRPCHTTPApp

APP = str(SERVERS / "app_model_server.py")
RUN = [sys.executable, "-m", "sturdyrpc", "run"]
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


def _req(method: str, params: Any = None, id: Any = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        msg["params"] = params
    return msg


# ---------------------------------------------------------------- stdio (sturdyrpc run)


def test_run_mcp_over_stdio(spawn: Any, tmp_path: Path) -> None:
    log = tmp_path / "life.log"
    p: ServerProcess = spawn(RUN + [f"{APP}:server"], env={"APP_LOG": str(log), "APP_PRINT": "1"})
    p.request("initialize", INIT, id=1)
    assert p.recv(20)["result"]["protocolVersion"] == "2025-11-25"
    p.send_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    # an inline tool: with middleware its call goes through the chain, on the same path
    p.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=2)
    assert p.recv()["result"]["content"][0]["text"] == "hi"
    p.request("tools/call", {"name": "whoami", "arguments": {}}, id=3)
    me = p.recv()["result"]["structuredContent"]
    assert me["lifespan"] == {"db": "pool-1"} and me["principal"] is None and me["x_app"] is None
    assert me["session_id"] and me["mw"]["session_id"] == me["session_id"] and me["mw"]["id"] == 3
    # initialize, initialized, echo and whoami each went through the chain
    assert me["seen"] == 4
    p.request("tools/call", {"name": "forbidden", "arguments": {}}, id=4)
    assert p.recv()["error"] == {"code": 4003, "message": "Forbidden by policy"}
    p.request("tools/call", {"name": "explode", "arguments": {}}, id=5)
    exploded = p.recv()["result"]
    assert exploded["isError"] is True and "incident" in exploded["content"][0]["text"]
    assert "secret" not in exploded["content"][0]["text"]
    p.request("tools/call", {"name": "slow", "arguments": {"seconds": 30}}, id=6)
    assert "0.3 s" in p.recv()["result"]["content"][0]["text"]
    p.close_stdin()
    assert p.wait(20) == 0
    assert log.read_text().split() == ["startup", "shutdown"]
    # nothing but protocol on stdout: the import-time print and the tool's print went to stderr
    for line in bytes(p.raw_stdout).splitlines():
        assert msgspec.json.decode(line)["jsonrpc"] == "2.0"
    assert b"importing the app" in p.stderr and b"a tool printing" in p.stderr


def test_run_mcp_stdio_batch_elements_each_pass_the_chain(spawn: Any) -> None:
    p: ServerProcess = spawn(RUN + [f"{APP}:server"])
    p.request("initialize", {**INIT, "protocolVersion": "2025-03-26"}, id=1)
    assert p.recv(20)["result"]["protocolVersion"] == "2025-03-26"
    p.send_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    p.send_line(msgspec.json.encode([_req("tools/call", {"name": "forbidden", "arguments": {}}, id=2),
                                     _req("tools/call", {"name": "echo", "arguments": {"text": "a"}}, id=3),
                                     _req("tools/call", {"name": "whoami", "arguments": {}}, id=4)]))
    replies = {r["id"]: r for r in p.recv()}
    assert replies[2]["error"]["code"] == 4003
    assert replies[3]["result"]["content"][0]["text"] == "a"
    assert msgspec.json.decode(replies[4]["result"]["content"][0]["text"])["mw"]["id"] == 4  # 2025-03-26: no structuredContent


def test_run_dispatcher_over_stdio(spawn: Any) -> None:
    p: ServerProcess = spawn(RUN + [f"{APP}:rpc"])
    p.request("add", [1, 2], id=1)
    assert p.recv(20) == {"jsonrpc": "2.0", "result": 3, "id": 1}
    p.send_line(b'{"jsonrpc":"2.0","method":"add","params":[5,5]}')  # a notification passes the chain too
    p.send_line(msgspec.json.encode([_req("add", [1, 1], id=2), _req("blocked", id=3), _req("boom", id=4)]))
    batch = {r["id"]: r for r in p.recv()}
    assert batch[2]["result"] == 2 and batch[3]["error"]["code"] == 4003
    assert batch[4]["error"]["code"] == -32603 and set(batch[4]["error"]["data"]) == {"incident"}
    p.request("seen_count", id=5)
    assert p.recv()["result"] == 6
    p.close_stdin()
    assert p.wait(20) == 0


def test_failing_lifespan_on_stdio_exits_non_zero_with_its_message(spawn: Any) -> None:
    p: ServerProcess = spawn(RUN + [f"{APP}:server"], env={"APP_FAIL_STARTUP": "1"})
    assert p.wait(20) == 1
    assert p.raw_stdout == b""
    err = bytes(p.stderr).decode()
    assert "database unreachable" in err and "lifespan" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(("target", "message"), [
    ("no_such_module_xyz:server", "no module named 'no_such_module_xyz'"),
    (f"{APP}:nothing", "has no attribute 'nothing'"),
    (f"{APP}:note", "raised TypeError"),
    (f"{APP}:INIT_NOT_THERE.x", "has no attribute 'INIT_NOT_THERE'"),
    ("/no/such/file.py:server", "no such file"),
])
def test_run_bad_targets_are_one_line_and_exit_2(target: str, message: str) -> None:
    out = subprocess.run(RUN + [target], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    err = out.stderr.decode()
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert out.stdout == b""


def test_run_without_attr_finds_the_server(spawn: Any) -> None:
    p: ServerProcess = spawn(RUN + [APP])
    p.request("initialize", INIT, id=1)
    assert p.recv(20)["result"]["serverInfo"]["name"] == "app"


# ---------------------------------------------------------------- HTTP on uvicorn


@contextmanager
def served(app: Any) -> Iterator[str]:
    with serve_in_thread(app) as base:
        yield base


AUTH = HTTPSecurity(auth=BearerAuth(lambda token: {"alice-token": "alice", "bob-token": "bob"}.get(token)))


def _post(url: str, body: Any, token: str = "alice-token", **headers: str) -> httpx.Response:
    h = {"content-type": "application/json", "accept": "application/json, text/event-stream",
         "authorization": f"Bearer {token}", **headers}
    return httpx.post(url, content=msgspec.json.encode(body), headers=h, timeout=20)


def test_mcp_http_sessions_stateless_and_batches_carry_the_ctx_fields() -> None:
    server = make_server()
    app = mcp_http_app(server, security=AUTH, json_response=True)
    with served(app) as base:
        url = base + "/mcp"
        assert server.lifespan_state == {"db": "pool-1"}  # the ASGI lifespan ran it
        init = _post(url, _req("initialize", INIT), **{"x-app": "one"})
        sid = init.headers["mcp-session-id"]
        session = {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **session)
        r = _post(url, _req("tools/call", {"name": "whoami", "arguments": {}}, id=2), **session, **{"x-app": "two"})
        me = r.json()["result"]["structuredContent"]
        assert me["session_id"] == sid and me["principal"] == "alice" and me["x_app"] == "two"
        assert me["mw"] == {"method": "tools/call", "id": 2, "session_id": sid, "principal": "alice",
                            "lifespan": {"db": "pool-1"}, "x_app": "two", "has_state": True}
        r = _post(url, _req("tools/call", {"name": "whoami", "arguments": {}}, id=3), **session, **{"x-app": "three"})
        again = r.json()["result"]["structuredContent"]
        assert again["calls"] == 2 and again["x_app"] == "three"  # state per session, headers per request
        assert _post(url, _req("tools/call", {"name": "forbidden", "arguments": {}}, id=4), **session).json()["error"]["code"] == 4003

        # 2026-07-28: stateless; the chain runs around handle_stateless
        body = _req("tools/call", {"name": "whoami", "arguments": {}, "_meta": modern_meta()}, id=5)
        r = _post(url, body, token="bob-token", **{"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call",
                                                   "mcp-name": "whoami", "x-app": "four"})
        modern = r.json()["result"]["structuredContent"]
        assert modern["principal"] == "bob" and modern["x_app"] == "four" and modern["session_id"] is None
        assert modern["mw"]["method"] == "tools/call" and modern["mw"]["principal"] == "bob"
        assert modern["lifespan"] == {"db": "pool-1"} and modern["calls"] == 1
        body = _req("tools/call", {"name": "explode", "arguments": {}, "_meta": modern_meta()}, id=6)
        r = _post(url, body, **{"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "explode"})
        assert r.json()["result"]["isError"] is True and "secret" not in r.text

        # 2025-03-26 batch: each element through the chain
        init = _post(url, _req("initialize", {**INIT, "protocolVersion": "2025-03-26"}))
        old = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-03-26"}
        _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **old)
        r = _post(url, [_req("tools/call", {"name": "forbidden", "arguments": {}}, id=7),
                        _req("tools/call", {"name": "whoami", "arguments": {}}, id=8)], **old, **{"x-app": "five"})
        replies = {x["id"]: x for x in r.json()}
        assert replies[7]["error"]["code"] == 4003
        assert msgspec.json.decode(replies[8]["result"]["content"][0]["text"])["mw"]["x_app"] == "five"
    assert server.lifespan_state is None  # the ASGI lifespan shutdown ran it


def test_plain_http_middleware_sees_principal_and_headers() -> None:
    rpc = make_rpc()
    with served(JSONRPCHTTPApp(rpc, security=AUTH)) as url:
        assert _post(url, _req("add", [1, 2]), **{"x-app": "one"}).json()["result"] == 3
        seen = _post(url, _req("last_seen", {"back": 0}, id=2), token="bob-token", **{"x-app": "two"}).json()["result"]
        assert seen == {"method": "last_seen", "id": 2, "session_id": None, "principal": "bob", "lifespan": None,
                        "x_app": "two", "has_state": False}
        batch = _post(url, [_req("add", [2, 2], id=3), _req("blocked", id=4)]).json()
        assert {r["id"]: r.get("result", r.get("error", {}).get("code")) for r in batch} == {3: 4, 4: 4003}
        assert _post(url, _req("seen_count", id=5)).json()["result"] == 5


def test_failing_lifespan_on_http_exits_non_zero(tmp_path: Path) -> None:
    port = free_port()
    out = subprocess.run(RUN + [f"{APP}:server", "--http", f"127.0.0.1:{port}"], capture_output=True, timeout=60,
                         env={**os.environ, "APP_FAIL_STARTUP": "1"}, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    assert b"database unreachable" in out.stderr
    assert out.stdout == b""


def test_run_http_lifespan_ends_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "life.log"
    port = free_port()
    proc = subprocess.Popen(RUN + [f"{APP}:server", "--http", f"127.0.0.1:{port}"], env={**os.environ, "APP_LOG": str(log)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_port(port, proc)
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", content=msgspec.json.encode(_req("initialize", INIT)),
                       headers={"content-type": "application/json", "accept": "application/json, text/event-stream"}, timeout=20)
        assert r.status_code == 200 and "mcp-session-id" in r.headers
        os.killpg(proc.pid, signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught (exit status -15)
        assert proc.wait(20) in (0, -signal.SIGTERM)
    finally:
        stop(proc)
    assert log.read_text().split() == ["startup", "shutdown"]


# ---------------------------------------------------------------- sturdyrpc dev


def test_dev_restarts_on_a_change(tmp_path: Path) -> None:
    pytest.importorskip("watchfiles")
    mod = tmp_path / "devapp.py"
    source = "from sturdyrpc import Dispatcher\nrpc = Dispatcher()\n\n@rpc.method(blocking=False)\ndef version() -> int:\n    return {}\n"
    mod.write_text(source.format(1))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sturdyrpc", "dev", "devapp.py:rpc", "--http", f"127.0.0.1:{port}"],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)

    def version() -> int | None:
        try:
            reply = httpx.post(f"http://127.0.0.1:{port}/", content=b'{"jsonrpc":"2.0","method":"version","id":1}',
                               headers={"content-type": "application/json"}, timeout=5)
            return int(reply.json()["result"])
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    try:
        assert wait_until(lambda: version() == 1, timeout=30)
        mod.write_text(source.format(2))
        assert wait_until(lambda: version() == 2, timeout=30)
    finally:
        stop(proc)
    assert proc.stdout is not None and proc.stdout.read() == b""
    assert proc.stderr is not None and b"devapp.py changed: restarting" in proc.stderr.read()


def test_dev_needs_http() -> None:
    out = subprocess.run([sys.executable, "-m", "sturdyrpc", "dev", f"{APP}:server"], capture_output=True, timeout=30)
    assert out.returncode == 2 and b"the following arguments are required: --http" in out.stderr
    # and its help says so: --http is not shown as optional ([--http HOST:PORT])
    out = subprocess.run([sys.executable, "-m", "sturdyrpc", "dev", "--help"], capture_output=True, timeout=30)
    assert out.returncode == 0
    usage = out.stdout.decode().split("\n\n")[0]
    assert " --http HOST:PORT" in usage and "[--http" not in usage


def test_run_http_with_workers(tmp_path: Path) -> None:
    log = tmp_path / "life.log"
    port = free_port()
    proc = subprocess.Popen(RUN + [f"{APP}:server", "--http", f"127.0.0.1:{port}", "--workers", "2", "--stateless"],
                            env={**os.environ, "APP_LOG": str(log)}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_port(port, proc)
        # --stateless: handshake-era HTTP without sessions, a tools/call needs no session of its own
        headers = {"mcp-protocol-version": "2025-11-25", "accept": "application/json, text/event-stream",
                   "content-type": "application/json"}
        for i in range(4):
            r = httpx.post(f"http://127.0.0.1:{port}/mcp", headers=headers, timeout=20,
                           content=msgspec.json.encode(_req("tools/call", {"name": "echo", "arguments": {"text": f"w{i}"}}, id=i)))
            assert r.status_code == 200 and f'"text":"w{i}"' in r.text
        assert wait_until(lambda: log.exists() and log.read_text().split().count("startup") == 2, timeout=20)
    finally:
        stop(proc)
    assert proc.stdout is not None and proc.stdout.read() == b""


def test_run_workers_with_the_memory_store_are_refused() -> None:
    # Sessions of one worker would be unknown to the other: refused, as `demo --workers` refuses.
    out = subprocess.run(RUN + [f"{APP}:server", "--http", f"127.0.0.1:{free_port()}", "--workers", "2"], capture_output=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and out.stdout == b""
    assert b"--workers 2 with the memory store would break sessions" in out.stderr


def test_run_workers_need_http() -> None:
    out = subprocess.run(RUN + [f"{APP}:server", "--workers", "2"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and b"--workers needs --http" in out.stderr


def test_run_module_name_from_the_current_directory(spawn: Any) -> None:
    p: ServerProcess = spawn(RUN + ["app_model_server:make_rpc"], cwd=os.path.dirname(APP))  # a factory works too
    p.request("add", {"a": 2, "b": 3}, id=1)
    assert p.recv(20) == {"jsonrpc": "2.0", "result": 5, "id": 1}


def test_stdio_lifespan_shuts_down_on_sigterm(spawn: Any, tmp_path: Path) -> None:
    log = tmp_path / "life.log"
    p: ServerProcess = spawn(RUN + [f"{APP}:server"], env={"APP_LOG": str(log)})
    p.request("initialize", INIT, id=1)
    assert p.recv(20)["result"]["protocolVersion"] == "2025-11-25"
    p.proc.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    assert log.read_text().split() == ["startup", "shutdown"]
