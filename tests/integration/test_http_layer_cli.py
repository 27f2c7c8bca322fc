"""The command line serves every target behind the one HTTP layer (transports/http_layer.py).

Only subprocesses and HTTP here (no import of the layer itself), so the module runs against any
version of the package: the attack first, ``sturdyrpc run disp.py:rpc --http ... --auth-*``,
which served a Dispatcher with no token check at all; then the plain demo with ``--auth-*`` and
``--workers``, app factories, ``--allow-host``/``--trusted-proxy``, what ``--allow-remote``
lets through, and ``--keepalive``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.auth import IdP
from support.http import ACCEPT, demo_http_cmd, free_port, server_process

pytestmark = pytest.mark.timeout(120)

RUN = [sys.executable, "-m", "sturdyrpc", "run"]
CALL = {"jsonrpc": "2.0", "id": 1, "method": "secret"}
DISPATCHER = ("from sturdyrpc import Dispatcher\nrpc = Dispatcher()\n\n"
              "@rpc.method\nasync def secret() -> str:\n    return 'the secret'\n")
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()


@pytest.fixture
def idp() -> Iterator[IdP]:
    provider = IdP()
    provider.add_key("k1")
    with provider.serve():
        yield provider


def post(url: str, body: Any = CALL, token: str | None = None, **headers: str) -> httpx.Response:
    h = {"content-type": "application/json", **headers}
    if token is not None:
        h["authorization"] = f"Bearer {token}"
    return httpx.post(url, content=json.dumps(body).encode(), headers=h, timeout=20)


# ------------------------------------------------------------------ the attack: auth on every target


@pytest.mark.parametrize("workers", [1, 2])
def test_run_protects_a_dispatcher_with_the_auth_options(idp: IdP, workers: int, tmp_path: Path) -> None:
    # Before: the Dispatcher was served with no token check at all (the result came back to anyone).
    disp = tmp_path / "disp.py"
    disp.write_text(DISPATCHER)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    aud = base + "/"  # a Dispatcher is served at the root: that is its resource
    cmd = RUN + [f"{disp}:rpc", "--http", f"127.0.0.1:{port}", "--auth-issuer", idp.issuer, "--auth-jwks", idp.jwks_url,
                 "--auth-scopes", "rpc:call"]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    with server_process(cmd, port):
        r = post(base + "/")
        assert r.status_code == 401, r.text
        assert "the secret" not in r.text
        assert r.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource", scope="rpc:call"')
        assert r.json() == {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Unauthorized"}, "id": None}
        assert post(base + "/", token="not-a-jwt").status_code == 401
        r = post(base + "/", token=idp.token(aud, scope="profile"))
        assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["www-authenticate"]
        assert post(base + "/", token=idp.token("http://127.0.0.1:1/", scope="rpc:call")).status_code == 401  # another audience
        for _ in range(4):  # with 2 workers, fresh connections land on both: each one checks
            r = post(base + "/", token=idp.token(aud, scope="rpc:call"))
            assert r.status_code == 200 and r.json()["result"] == "the secret"
        meta = httpx.get(base + "/.well-known/oauth-protected-resource", timeout=10).json()
        assert meta["resource"] == aud and meta["authorization_servers"] == [idp.issuer]


def test_plain_demo_takes_the_auth_options(idp: IdP) -> None:
    # Before: `sturdyrpc demo --http` refused --auth-* (exit 2), so the plain demo could not be protected.
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = demo_http_cmd(port) + ["--auth-issuer", idp.issuer, "--auth-jwks", idp.jwks_url, "--workers", "2"]
    echo = {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["hi"]}
    with server_process(cmd, port):
        assert post(base + "/", echo).status_code == 401
        r = post(base + "/", echo, token=idp.token(base + "/"))
        assert r.status_code == 200 and r.json()["result"] == "hi"


def test_run_serves_an_app_factory_with_the_options_and_refuses_one_that_drops_them(idp: IdP, tmp_path: Path) -> None:
    mod = tmp_path / "apps.py"
    mod.write_text(
        "from sturdyrpc import Dispatcher\nfrom sturdyrpc.transports.http import JSONRPCHTTPApp\n"
        "rpc = Dispatcher()\n\n@rpc.method\nasync def secret() -> str:\n    return 'the secret'\n\n"
        "def with_options(**options):\n    return JSONRPCHTTPApp(rpc, security=options['security'])\n\n"
        "def without_options():\n    return JSONRPCHTTPApp(rpc)\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = ["--auth-issuer", idp.issuer, "--auth-jwks", idp.jwks_url]
    with server_process(RUN + [f"{mod}:with_options", "--http", f"127.0.0.1:{port}", *auth], port):
        assert post(base + "/").status_code == 401
    # An app built without the options would be served without the token check: refused instead.
    out = subprocess.run(RUN + [f"{mod}:without_options", "--http", f"127.0.0.1:{free_port()}", *auth],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "built without the security of --auth-issuer" in out.stderr, out.stderr



# ------------------------------------------------------------------ the Host check behind a proxy


def test_run_allow_host_and_trusted_proxy_options(tmp_path: Path) -> None:
    disp = tmp_path / "disp.py"
    disp.write_text(DISPATCHER)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    cmd = RUN + [f"{disp}:rpc", "--http", f"127.0.0.1:{port}", "--allow-host", "mcp.example.com", "--trusted-proxy", "127.0.0.1"]
    with server_process(cmd, port):
        assert post(url, host="mcp.example.com").json()["result"] == "the secret"
        # the test client is 127.0.0.1, trusted: its X-Forwarded-Host is the host checked
        assert post(url, host="backend:9000", **{"x-forwarded-host": "mcp.example.com"}).status_code == 200
        assert post(url, **{"x-forwarded-host": "evil.example"}).status_code == 403
        assert post(url, host="evil.example").status_code == 403


def test_allow_remote_lets_addresses_in_but_no_foreign_name(tmp_path: Path) -> None:
    # Before: --allow-remote switched the Host check off (any name, DNS rebinding included).
    disp = tmp_path / "disp.py"
    disp.write_text(DISPATCHER)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with server_process(RUN + [f"{disp}:rpc", "--http", f"127.0.0.1:{port}", "--allow-remote"], port):
        assert post(url, host="evil.example").status_code == 403
        assert post(url, host=f"192.0.2.7:{port}").json()["result"] == "the secret"
        assert post(url).status_code == 200


# ------------------------------------------------------------------ keep-alive comments


def test_keepalive_cli_option_reaches_the_get_stream() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with server_process(demo_http_cmd(port, mcp=True) + ["--keepalive", "0.2"], port), httpx.Client(timeout=10) as c:
        r = c.post(url, content=INIT, headers={"content-type": "application/json", "accept": ACCEPT})
        h = {"accept": ACCEPT, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
        t0 = time.monotonic()
        raw = b""
        with c.stream("GET", url, headers={**h, "accept": "text/event-stream"}) as resp:
            for chunk in resp.iter_raw():
                raw += chunk
                if raw.count(b":\n\n") >= 3:
                    break
        assert raw.count(b":\n\n") >= 3 and time.monotonic() - t0 < 5  # not the 15 s default
