"""Token verification under a deadline: an identity provider that answers slowly (a JWKS or an
introspection answer dripped a byte at a time) costs each request at most the deadline, then
503, on both HTTP apps, and a served process still stops on SIGTERM. Real servers on
127.0.0.1: the dripping endpoint, the apps under uvicorn, the CLI in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from support.auth import DripServer, IdP, ec_key, init_body, public_jwk, serve_app
from support.http import ACCEPT, free_port, server_process

from sturdyrpc.auth import FunctionVerifier, IntrospectionVerifier, JWKSCache, JWTVerifier, ResourceServer
from sturdyrpc.auth.fetch import httpx_get_json, httpx_post_form
from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.transports.asgi import HTTPSecurity
from sturdyrpc.transports.http import JSONRPCHTTPApp

pytestmark = pytest.mark.timeout(120)

ISSUER = "https://issuer.example"
UNAVAILABLE = {"code": -32000, "message": "Service unavailable: the access token cannot be verified now"}
#: What a loaded machine may add to a deadline before the answer is called late.
SLACK = 2.5


def mcp_server() -> MCPServer:
    server = MCPServer("deadline-test", "1.0")

    @server.tool()
    async def hello() -> str:
        return "hi"

    return server


def a_token(audience: str) -> str:
    idp = IdP()
    idp.issuer = ISSUER
    idp.add_key("k1")
    return idp.token(audience)


async def post_all(url: str, token: str, n: int, body: dict[str, Any], *, timeout: float) -> list[tuple[httpx.Response, float]]:
    """``n`` requests at once, each on its own connection; each answer with the seconds it took.
    A request still unanswered after ``timeout`` raises (the hang this file is about)."""

    async def one() -> tuple[httpx.Response, float]:
        async with httpx.AsyncClient(timeout=timeout) as c:
            t0 = time.monotonic()
            r = await c.post(url, json=body, headers={"accept": ACCEPT, "authorization": f"Bearer {token}"})
            return r, time.monotonic() - t0

    return list(await asyncio.gather(*(one() for _ in range(n))))


def assert_unavailable(answers: list[tuple[httpx.Response, float]], deadline: float, *, null_id: bool) -> None:
    for r, took in answers:
        assert r.status_code == 503, (r.status_code, r.text)
        assert took < deadline + SLACK, f"answered after {took:.2f} s, the deadline is {deadline} s"
        assert r.headers["retry-after"] == "5"
        body = r.json()
        assert body["error"] == UNAVAILABLE and body.get("id") is None
        if null_id:
            assert "id" in body
        for leak in ("Timeout", "Traceback", "127.0.0.1", "JWKS", "introspection"):
            assert leak not in r.text


def apps(rs: ResourceServer) -> list[tuple[str, Any, bool]]:
    """Both HTTP apps behind ``rs``: (path to POST to, app, whether its errors carry ``"id": null``)."""
    return [("/mcp", mcp_http_app(mcp_server(), security=HTTPSecurity(auth=rs), json_response=True), False),
            ("/", JSONRPCHTTPApp(make_demo(), security=HTTPSecurity(auth=rs)), True)]


@pytest.mark.parametrize("which", [0, 1], ids=["streamable-http", "plain-jsonrpc-http"])
def test_a_dripping_jwks_costs_every_request_at_most_the_fetch_deadline(which: int) -> None:
    # The attack: a JWKS answered one byte every 0.3 s. httpx's timeout counts per read, so
    # without a deadline for the whole fetch every request waits for ever (8 of 8 at once).
    deadline = 1.0
    with DripServer(interval=0.3).serve() as drip:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        jwks = JWKSCache(drip.url + "/jwks", fetch=httpx_get_json(deadline), refresh_interval=0)
        rs = ResourceServer(JWTVerifier(ISSUER, drip.url + "/jwks", resource, jwks=jwks), resource=resource,
                            authorization_servers=[ISSUER])
        path, app, null_id = apps(rs)[which]
        token = a_token(resource)
        body = init_body() if path == "/mcp" else {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["x"]}
        with serve_app(app, port) as base:
            first = asyncio.run(post_all(base + path, token, 8, body, timeout=deadline + 8))
            assert_unavailable(first, deadline, null_id=null_id)
            assert drip.connections == 1  # the eight waited for one fetch, not one each
            later = asyncio.run(post_all(base + path, token, 4, body, timeout=deadline + 8))
            assert_unavailable(later, deadline, null_id=null_id)
            assert drip.connections == 2


def test_a_dripping_introspection_endpoint_costs_each_request_at_most_the_deadline() -> None:
    deadline = 1.0
    with DripServer(body=b'{"active": true, "sub": "x"}' * 8, interval=0.3).serve() as drip:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        verifier = IntrospectionVerifier(drip.url + "/introspect", audience=resource, client_id="rs", client_secret="s",
                                         post=httpx_post_form(deadline))
        rs = ResourceServer(verifier, resource=resource, authorization_servers=[ISSUER])
        for path, app, null_id in apps(rs):
            body = init_body() if path == "/mcp" else {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["x"]}
            with serve_app(app, port) as base:
                assert_unavailable(asyncio.run(post_all(base + path, "opaque", 6, body, timeout=deadline + 8)), deadline,
                                   null_id=null_id)


def test_every_fetch_and_every_verdict_has_a_deadline_whoever_wrote_the_fetch() -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    token = a_token(resource)

    async def never_answers(*args: Any) -> Any:
        await asyncio.Event().wait()

    # A JWKS fetch function of your own that never returns: cut at the cache's deadline.
    jwks = JWKSCache("https://issuer.example/jwks", fetch=never_answers, timeout=1.0, refresh_interval=0)
    rs = ResourceServer(JWTVerifier(ISSUER, "https://issuer.example/jwks", resource, jwks=jwks), resource=resource,
                        authorization_servers=[ISSUER])
    with serve_app(apps(rs)[0][1], port) as base:
        assert_unavailable(asyncio.run(post_all(base + "/mcp", token, 4, init_body(), timeout=9)), 1.0, null_id=False)
    # An introspection post of your own that never returns: the same.
    introspection = IntrospectionVerifier("https://issuer.example/introspect", audience=resource, post=never_answers, timeout=1.0)
    rs = ResourceServer(introspection, resource=resource, authorization_servers=[ISSUER])
    with serve_app(apps(rs)[1][1], port) as base:
        echo = {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["x"]}
        assert_unavailable(asyncio.run(post_all(base + "/", token, 4, echo, timeout=9)), 1.0, null_id=True)
    # Any verifier at all: the resource server's own deadline for the verdict.
    rs = ResourceServer(FunctionVerifier(never_answers), resource=resource, authorization_servers=[ISSUER], timeout=1.0)
    for path, app, null_id in apps(rs):
        body = init_body() if path == "/mcp" else {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["x"]}
        with serve_app(app, port) as base:
            assert_unavailable(asyncio.run(post_all(base + path, token, 4, body, timeout=9)), 1.0, null_id=null_id)
    with pytest.raises(ValueError):
        ResourceServer(FunctionVerifier(never_answers), resource=resource, authorization_servers=[ISSUER], timeout=0)


def test_a_request_giving_up_leaves_the_shared_fetch_running_for_the_next_ones() -> None:
    # The JWKS takes ~1.5 s to arrive, a request waits 0.5 s: the first requests get 503, the
    # fetch they started goes on (it is nobody's to cancel), and the keys serve the next ones.
    key = ec_key()
    jwks = json.dumps({"keys": [public_jwk(key, "k1")]}).encode()
    with DripServer(body=jwks, interval=0.5, chunk=len(jwks) // 3 + 1).serve() as drip:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        idp = IdP()
        idp.issuer = ISSUER
        idp.add_key("k1", key)
        cache = JWKSCache(drip.url + "/jwks", timeout=10.0)
        rs = ResourceServer(JWTVerifier(ISSUER, drip.url + "/jwks", resource, jwks=cache), resource=resource,
                            authorization_servers=[ISSUER], timeout=0.5)
        with serve_app(apps(rs)[0][1], port) as base:
            assert_unavailable(asyncio.run(post_all(base + "/mcp", idp.token(resource), 4, init_body(), timeout=9)), 0.5,
                               null_id=False)
            time.sleep(2.0)
            ok = asyncio.run(post_all(base + "/mcp", idp.token(resource), 2, init_body(), timeout=9))
            assert [r.status_code for r, _ in ok] == [200, 200]
        assert drip.connections == 1


def test_sigterm_stops_the_served_cli_while_the_jwks_drips() -> None:
    # `sturdyrpc demo --mcp --http --auth-*` with its default deadline (5 s): eight requests
    # wait on a dripping JWKS, SIGTERM arrives meanwhile; every request gets its 503 and the
    # process is gone within the deadline (before: no answer, and SIGTERM ignored for ever).
    default_deadline = 5.0
    with DripServer(interval=0.5).serve() as drip:
        port = free_port()
        resource = f"http://127.0.0.1:{port}/mcp"
        cmd = [sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{port}",
               "--auth-issuer", ISSUER, "--auth-jwks", drip.url + "/jwks"]
        with server_process(cmd, port) as proc:

            async def scenario() -> tuple[list[tuple[httpx.Response, float]], float]:
                requests = asyncio.ensure_future(post_all(resource, a_token(resource), 8, init_body(), timeout=default_deadline + 8))
                await asyncio.sleep(1.0)
                os.killpg(proc.pid, signal.SIGTERM)
                t0 = time.monotonic()
                answers = await requests
                while proc.poll() is None and time.monotonic() - t0 < default_deadline + 8:
                    await asyncio.sleep(0.05)
                return answers, time.monotonic() - t0

            answers, stopped_after = asyncio.run(scenario())
            assert proc.poll() is not None, "still running after SIGTERM"
            assert stopped_after < default_deadline + SLACK, f"stopped {stopped_after:.2f} s after SIGTERM"
            assert_unavailable(answers, default_deadline, null_id=False)
            assert proc.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM)


def test_the_cli_options_reach_every_worker() -> None:
    from sturdyrpc.mcp_http.workers import auth_security

    security, _ = auth_security({"auth_issuer": ISSUER, "auth_jwks": ISSUER + "/jwks", "auth_timeout": 2.5,
                                 "auth_require_at_jwt": True}, "http://127.0.0.1:1/mcp")
    assert security is not None
    rs = security.auth
    assert isinstance(rs, ResourceServer) and rs.timeout == 2.5
    assert isinstance(rs.verifier, JWTVerifier)
    assert rs.verifier.jwks.timeout == 2.5 and rs.verifier.rules.require_at_jwt is True
    r = subprocess.run([sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", "127.0.0.1:0", "--auth-issuer", ISSUER,
                        "--auth-jwks", ISSUER + "/jwks", "--auth-timeout", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--auth-timeout must be between 0 and 300 seconds" in r.stderr, r.stderr
