"""``sturdyrpc run module:factory --http``: a factory may return the app itself (docs/HTTP.md),
through the real CLI in a subprocess on a real port."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import httpx
import msgspec
import pytest
from support import SERVERS
from support.http import free_port, server_process

pytestmark = pytest.mark.timeout(120)

FACTORIES = str(SERVERS / "app_factory_server.py")
RUN = [sys.executable, "-m", "sturdyrpc", "run"]
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def _post(url: str, msg: Any, **headers: str) -> httpx.Response:
    return httpx.post(url, content=msgspec.json.encode(msg), headers={**HEADERS, **headers}, timeout=20)


def _call_echo(url: str, text: str, **headers: str) -> str:
    r = _post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}},
              **headers)
    assert r.status_code == 200, r.text
    return str(r.json()["result"]["content"][0]["text"])


def test_a_factory_returning_the_streamable_http_app_is_served() -> None:
    port = free_port()
    with server_process(RUN + [f"{FACTORIES}:make_fixed_app", "--http", f"127.0.0.1:{port}"], port):
        url = f"http://127.0.0.1:{port}/mcp"
        init = _post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        assert init.status_code == 200 and init.json()["result"]["serverInfo"]["name"] == "factory-app"
        sid = init.headers["mcp-session-id"]
        assert _call_echo(url, "hi", **{"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}) == "hi"


def test_a_factory_taking_options_gets_what_the_command_line_asks_for() -> None:
    # --stateless reaches the factory: the app it builds keeps no sessions.
    port = free_port()
    with server_process(RUN + [f"{FACTORIES}:make_app", "--http", f"127.0.0.1:{port}", "--stateless"], port):
        url = f"http://127.0.0.1:{port}/mcp"
        init = _post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        assert init.status_code == 200 and "mcp-session-id" not in init.headers
        assert _call_echo(url, "no session", **{"mcp-protocol-version": "2025-11-25"}) == "no session"


def test_a_factory_returning_the_app_on_two_workers() -> None:
    port = free_port()
    cmd = RUN + [f"{FACTORIES}:make_app", "--http", f"127.0.0.1:{port}", "--workers", "2", "--stateless"]
    with server_process(cmd, port):
        url = f"http://127.0.0.1:{port}/mcp"
        for i in range(4):
            assert _call_echo(url, f"w{i}", **{"mcp-protocol-version": "2025-11-25"}) == f"w{i}"


def test_a_factory_returning_a_plain_json_rpc_app_is_served() -> None:
    port = free_port()
    with server_process(RUN + [f"{FACTORIES}:make_rpc_app", "--http", f"127.0.0.1:{port}"], port):
        r = _post(f"http://127.0.0.1:{port}/", {"jsonrpc": "2.0", "id": 1, "method": "add", "params": [2, 3]})
        assert r.status_code == 200 and r.json() == {"jsonrpc": "2.0", "id": 1, "result": 5}


AUTH = ["--auth-issuer", "https://issuer.example", "--auth-jwks", "https://issuer.example/jwks"]


@pytest.mark.parametrize("workers", [[], ["--workers", "2", "--stateless"]])
def test_auth_options_a_factory_cannot_take_are_refused_not_dropped(workers: list[str]) -> None:
    # The app was built without the token check --auth-* asks for: serving it would fail open.
    out = subprocess.run(RUN + [f"{FACTORIES}:make_fixed_app", "--http", f"127.0.0.1:{free_port()}", *workers, *AUTH],
                         capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and out.stdout == b""
    err = out.stderr.decode()
    assert "make_fixed_app" in err and "--auth-" in err and "**options" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_factory_taking_options_gets_the_token_check() -> None:
    port = free_port()
    with server_process(RUN + [f"{FACTORIES}:make_app", "--http", f"127.0.0.1:{port}", *AUTH], port):
        r = _post(f"http://127.0.0.1:{port}/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer ")
