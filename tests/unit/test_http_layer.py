"""The one HTTP layer in front of both HTTP endpoints (transports/http_layer.py), in process
and on uvicorn; the command line's side (the attack on ``sturdyrpc run --auth-*`` first) is in
test_http_layer_cli.py.

- one table of security and negotiation cases run against BOTH endpoints (plain JSON-RPC and
  Streamable HTTP), asserting the same status, headers and error for each;
- the Host check behind a reverse proxy (allowed hosts, trusted proxies, ``--allow-remote``'s rule);
- the body deadline against uvicorn with a real socket dripping a body;
- the SSE keep-alive interval as an app option.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from support.http import ACCEPT, free_port

from sturdyrpc import Dispatcher, Limits
from sturdyrpc.demos.mcp_http import make_demo_app
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.request_context import current_headers, current_principal
from sturdyrpc.transports.asgi import LOCAL_HOSTS, BearerAuth, HTTPSecurity
from sturdyrpc.transports.http import JSONRPCHTTPApp
from sturdyrpc.transports.http_layer import JSON, SSE, acceptable, is_json
from sturdyrpc.transports.serve_http import serving_security, uvicorn_config

pytestmark = pytest.mark.timeout(120)

# ------------------------------------------------------------------ one table, both endpoints

HOST = "mcp.example.com"
PROXY = "10.1.2.3"
TOKENS = {"good": "alice"}


def _security(**extra: Any) -> HTTPSecurity:
    options: dict[str, Any] = {"allowed_hosts": {*LOCAL_HOSTS, HOST}, "trusted_proxies": [PROXY], "max_body_bytes": 1000,
                               "body_timeout": 0.3, "auth": BearerAuth(TOKENS.get, realm="t")}
    options.update(extra)
    return HTTPSecurity(**options)


def _plain(security: HTTPSecurity, limits: Limits | None = None) -> Any:
    rpc = Dispatcher(limits or Limits())

    @rpc.method
    async def initialize(protocolVersion: str = "", capabilities: Any = None, clientInfo: Any = None) -> dict[str, Any]:  # noqa: N803
        return {"principal": current_principal.get(), "x": (current_headers.get() or {}).get("x-test")}

    return JSONRPCHTTPApp(rpc, security=security, path="/mcp")


def _mcp(security: HTTPSecurity, limits: Limits | None = None) -> Any:
    return mcp_http_app(MCPServer("t", "1", limits=limits) if limits else MCPServer("t", "1"), security=security,
                        json_response=True)


ENDPOINTS = {"plain": _plain, "mcp": _mcp}
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()


async def _close(app: Any) -> None:
    aclose = getattr(app, "aclose", None)  # the MCP endpoint ends its sessions
    if aclose is not None:
        await aclose()


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


async def _call(app: Any, *, headers: dict[str, str], body: bytes | None = INIT, chunks: list[bytes] | None = None,
                method: str = "POST", path: str = "/mcp", query: bytes = b"", client: str = "127.0.0.1",
                stall: bool = False) -> Reply:
    """One request straight into the ASGI app: ``chunks`` sent as separate messages; ``stall``:
    the body never ends (the client stops sending)."""
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "", "headers": raw,
             "client": (client, 40000), "server": ("127.0.0.1", 8000)}
    pieces = chunks if chunks is not None else [body or b""]
    queue = [{"type": "http.request", "body": p, "more_body": stall or i < len(pieces) - 1} for i, p in enumerate(pieces)]
    out: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        out.append(msg)
        if msg["type"] == "http.response.body" and not msg.get("more_body"):
            done.set()

    try:
        await asyncio.wait_for(app(scope, receive, send), 5)
    finally:
        done.set()
    start = out[0]
    hdrs = {k.decode(): v.decode() for k, v in start["headers"]}
    return Reply(start["status"], hdrs, b"".join(m.get("body", b"") for m in out[1:]))


OK = {"host": "127.0.0.1:8000", "content-type": "application/json", "accept": ACCEPT, "authorization": "Bearer good"}

#: name -> (request options, expected status); each is run against both endpoints.
CASES: dict[str, tuple[dict[str, Any], int]] = {
    "foreign Host": ({"headers": {**OK, "host": "evil.example"}}, 403),
    "foreign Origin": ({"headers": {**OK, "origin": "https://evil.example"}}, 403),
    "no Host": ({"headers": {k: v for k, v in OK.items() if k != "host"}}, 403),
    "untrusted proxy header": ({"headers": {**OK, "host": "backend:8000", "x-forwarded-host": HOST}, "client": "192.0.2.9"}, 403),
    "trusted proxy, foreign forwarded host": ({"headers": {**OK, "host": "127.0.0.1", "x-forwarded-host": "evil.example"},
                                               "client": PROXY}, 403),
    "no token": ({"headers": {k: v for k, v in OK.items() if k != "authorization"}}, 401),
    "bad token": ({"headers": {**OK, "authorization": "Bearer bad"}}, 401),
    "other scheme": ({"headers": {**OK, "authorization": "Basic Z29vZA=="}}, 401),
    "empty token": ({"headers": {**OK, "authorization": "Bearer "}}, 401),
    "token in the query only": ({"headers": {k: v for k, v in OK.items() if k != "authorization"},
                                 "query": b"access_token=good"}, 401),
    "other path": ({"headers": OK, "path": "/other"}, 404),
    "method": ({"headers": OK, "method": "PUT"}, 405),
    "text/plain": ({"headers": {**OK, "content-type": "text/plain"}}, 415),
    "application/foo+json": ({"headers": {**OK, "content-type": "application/foo+json"}}, 415),
    "no content type": ({"headers": {k: v for k, v in OK.items() if k != "content-type"}}, 415),
    "Accept excludes JSON": ({"headers": {**OK, "accept": "text/html"}}, 406),
    "Accept with q=0 for both": ({"headers": {**OK, "accept": "application/json;q=0, text/event-stream;q=0, text/html"}}, 406),
    "body too large, declared": ({"headers": {**OK, "content-length": "5000"}, "body": b"x" * 5000}, 413),
    "body too large, counted": ({"headers": OK, "chunks": [b"[" * 600, b"[" * 600]}, 413),
    "body too slow": ({"headers": OK, "chunks": [b'{"jsonrpc":'], "stall": True}, 408),
}

#: Layer answers that reach the endpoint (status 200 on both; their bodies are each protocol's own).
PASSES: dict[str, dict[str, Any]] = {
    "allowed host": {"headers": {**OK, "host": f"{HOST}:443"}},
    "trusted proxy header": {"headers": {**OK, "host": "backend:8000", "x-forwarded-host": f"{HOST}:443",
                                         "x-forwarded-proto": "https"}, "client": PROXY},
    "localhost origin": {"headers": {**OK, "origin": "http://localhost:5173"}},
    "JSON with a charset": {"headers": {**OK, "content-type": "application/json; charset=utf-8"}},
    "body in pieces": {"headers": OK, "chunks": [INIT[:10], INIT[10:]]},
}

#: Headers of a refusal compared between the endpoints (``Allow`` names each one's own methods).
_COMPARED = ("www-authenticate", "retry-after", "connection", "content-type")
_ALLOW = {"plain": "POST", "mcp": "GET, POST, DELETE"}


def _error(reply: Reply, endpoint: str) -> dict[str, Any]:
    body = json.loads(reply.body)
    # The one difference is each protocol's id rule: JSON-RPC 2.0 wants "id": null, MCP's schema has no null id.
    if endpoint == "plain":
        assert body.pop("id") is None
    else:
        assert "id" not in body
    return dict(body)


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_endpoints_refuse_alike(case: str) -> None:
    options, status = CASES[case]

    async def go() -> dict[str, Any]:
        seen = {}
        for name, make in ENDPOINTS.items():
            app = make(_security())
            reply = await _call(app, **options)
            assert reply.status == status, (name, reply.status, reply.body)
            assert reply.headers.get("allow") == (_ALLOW[name] if status == 405 else None)
            seen[name] = (reply.status, {k: reply.headers.get(k) for k in _COMPARED}, _error(reply, name))
            await _close(app)
        return seen

    seen = asyncio.run(go())
    assert seen["plain"] == seen["mcp"]
    err = seen["plain"][2]["error"]
    assert err["code"] == -32600
    if status == 413:
        assert err == {"code": -32600, "message": "Message too large", "data": {"limit": "max_body_bytes", "max": 1000}}
    if status == 408:
        assert seen["plain"][1]["connection"] == "close"  # the server closes the connection, and what it held goes


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_the_body_deadline_follows_the_app_to_a_new_loop(endpoint: str) -> None:
    # The deadline's timer and its task lookup belong to the loop that served the app last: the
    # same app served again on another loop (a new asyncio.run) must still cut a stalled body.
    app = ENDPOINTS[endpoint](_security())

    async def one(options: dict[str, Any]) -> int:
        return (await _call(app, **options)).status

    for _ in range(2):
        assert asyncio.run(one({"headers": OK})) == 200
        assert asyncio.run(one({"headers": OK, "chunks": [b'{"jsonrpc":'], "stall": True})) == 408
    asyncio.run(_close(app))


@pytest.mark.parametrize("case", sorted(PASSES))
def test_both_endpoints_let_through_alike(case: str) -> None:
    async def go() -> None:
        for name, make in ENDPOINTS.items():
            app = make(_security())
            reply = await _call(app, **PASSES[case])
            assert reply.status == 200, (name, reply.status, reply.body)
            assert "result" in json.loads(reply.body), (name, reply.body)
            await _close(app)

    asyncio.run(go())


def test_both_endpoints_answer_busy_alike_before_reading_the_body() -> None:
    async def go() -> dict[str, Any]:
        seen = {}
        for name, make in ENDPOINTS.items():
            app = make(_security(), Limits(max_server_in_flight=1))
            assert app.admission.try_acquire() and app.admission.full
            # The body never arrives: only an answer given before reading it comes back at all.
            reply = await _call(app, headers=OK, chunks=[b""], stall=True)
            seen[name] = (reply.status, {k: reply.headers.get(k) for k in _COMPARED}, _error(reply, name))
            app.admission.release()
            await _close(app)
        return seen

    seen = asyncio.run(go())
    assert seen["plain"] == seen["mcp"]
    assert seen["plain"][0] == 503 and seen["plain"][1]["retry-after"] == "1"
    assert seen["plain"][2]["error"]["code"] == -32000


def test_a_session_post_still_reaches_a_full_mcp_server() -> None:
    # A session's POST may hold only a cancellation or an answer to a server-to-client request,
    # which take no slot and let running requests finish: the layer lets it through.
    async def go() -> None:
        app = _mcp(_security(), Limits(max_server_in_flight=1))
        reply = await _call(app, headers=OK)
        sid = reply.headers["mcp-session-id"]
        h = {**OK, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        assert (await _call(app, headers=h, body=note)).status == 202
        assert app.admission.try_acquire()
        cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}'
        assert (await _call(app, headers=h, body=cancel)).status == 202
        ping = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'
        assert (await _call(app, headers=h, body=ping)).status == 503  # a request needs a slot: the same 503
        app.admission.release()
        await app.aclose()

    asyncio.run(go())


def test_the_endpoints_see_the_principal_and_headers_the_layer_set() -> None:
    async def go() -> None:
        reply = await _call(_plain(_security()), headers={**OK, "x-test": "one"})
        assert json.loads(reply.body)["result"] == {"principal": "alice", "x": "one"}

    asyncio.run(go())
    assert current_principal.get() is None and current_headers.get() is None  # reset after the request


def test_a_bearer_hook_publishes_its_metadata_on_both_endpoints() -> None:
    class WithMetadata(BearerAuth):
        def metadata_documents(self) -> dict[str, bytes]:
            return {"/.well-known/oauth-protected-resource": b'{"resource":"http://127.0.0.1:8000/mcp"}'}

    async def go() -> None:
        for make in ENDPOINTS.values():
            app = make(_security(auth=WithMetadata(TOKENS.get)))
            # public: no token, and readable from any origin (CORS)
            reply = await _call(app, method="GET", path="/.well-known/oauth-protected-resource",
                                headers={"host": "127.0.0.1", "origin": "https://elsewhere.example"})
            assert reply.status == 200 and json.loads(reply.body) == {"resource": "http://127.0.0.1:8000/mcp"}
            assert reply.headers["access-control-allow-origin"] == "*"
            reply = await _call(app, method="POST", path="/.well-known/oauth-protected-resource", headers=OK)
            assert reply.status == 405
            reply = await _call(_plain(_security()), method="GET", path="/.well-known/oauth-protected-resource", headers=OK)
            assert reply.status == 404  # a hook without documents publishes none

    asyncio.run(go())


def test_the_one_accept_parser_and_content_type_rule() -> None:
    assert acceptable(None, (JSON, SSE)) == (True, True)
    assert acceptable(b"application/json, text/event-stream", (JSON, SSE)) == (True, True)
    assert acceptable(b"*/*", (JSON,)) == (True,)
    assert acceptable(b"application/*", (JSON, SSE)) == (True, False)
    assert acceptable(b"text/*;q=0.5", (JSON, SSE)) == (False, True)
    assert acceptable(b"application/json;q=0, */*", (JSON, SSE)) == (False, True)  # the most specific range decides
    assert acceptable(b"text/html", (JSON, SSE)) == (False, False)
    assert acceptable(b"APPLICATION/JSON;q=0.1", (JSON,)) == (True,)
    assert is_json(b"application/json") and is_json(b"Application/JSON; charset=utf-8")
    assert not is_json(b"application/foo+json") and not is_json(b"text/json") and not is_json(None)


# ------------------------------------------------------------------ the Host check behind a proxy


def test_serving_security_never_allows_any_host() -> None:
    async def status(security: HTTPSecurity, host: str, **extra: Any) -> int:
        return (await _call(_plain(security), headers={**OK, "host": host, "authorization": "Bearer good"}, **extra)).status

    async def go() -> None:
        local = serving_security(bind_host="127.0.0.1", auth=BearerAuth(TOKENS.get))
        assert await status(local, "localhost:8000") == 200
        assert await status(local, "192.0.2.7:8000") == 403
        remote = serving_security(bind_host="0.0.0.0", allow_remote=True, auth=BearerAuth(TOKENS.get))
        # --allow-remote: any address (a DNS-rebinding page sends a name), never any name
        assert await status(remote, "192.0.2.7:8000") == 200
        assert await status(remote, "[2001:db8::1]:8000") == 200
        assert await status(remote, "evil.example") == 403
        assert await status(remote, "evil.example.192.0.2.7.nip.io") == 403
        named = serving_security(bind_host="mcp.internal", allow_remote=True, allow_hosts=["mcp.example.com"],
                                 trusted_proxies=["10.0.0.0/8"], auth=BearerAuth(TOKENS.get))
        assert await status(named, "mcp.internal:8000") == 200  # the name it was told to bind
        assert await status(named, "MCP.example.com") == 200
        assert await status(named, "evil.example", client="10.9.9.9") == 403
        fwd = {"x-forwarded-host": "mcp.example.com"}
        reply = await _call(_plain(named), headers={**OK, "host": "evil.example", **fwd}, client="10.9.9.9")
        assert reply.status == 200  # a trusted proxy's forwarded host is what counts
        reply = await _call(_plain(named), headers={**OK, "host": "evil.example", **fwd}, client="192.0.2.1")
        assert reply.status == 403  # anyone else's X-Forwarded-Host is ignored
        # several proxies: the value the nearest (trusted) one added counts, not what the client sent first
        reply = await _call(_plain(named), headers={**OK, "host": "x", "x-forwarded-host": "mcp.example.com, evil.example"},
                            client="10.0.0.1")
        assert reply.status == 403

    asyncio.run(go())
    with pytest.raises(ValueError, match="not an IP address or network"):
        HTTPSecurity(trusted_proxies=["proxy.example"])


# ------------------------------------------------------------------ the body deadline on a real socket


@contextmanager
def serve(app: Any) -> Iterator[tuple[int, Callable[[], int]]]:
    """``app`` on uvicorn (our serving settings) in a thread; yields its port and a count of open connections."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    try:
        yield port, lambda: len(server.server_state.connections)
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_a_body_dripped_a_byte_a_second_is_cut_with_408(endpoint: str) -> None:
    app = ENDPOINTS[endpoint](_security(body_timeout=2.0, auth=None))
    with serve(app) as (port, connections):
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n")
            c.settimeout(0.05)
            t0 = time.monotonic()
            out = b""
            while time.monotonic() - t0 < 15:
                try:
                    chunk = c.recv(65536)  # read what came first, then drip the next byte
                except TimeoutError:
                    try:
                        c.sendall(b" ")
                    except OSError:
                        break
                    time.sleep(0.95)
                    continue
                except OSError:
                    break
                if not chunk:
                    break  # the server closed the connection
                out += chunk
            elapsed = time.monotonic() - t0
        assert out.startswith(b"HTTP/1.1 408 "), out[:300]
        assert b"Request body not received in time" in out
        assert 1.8 <= elapsed < 6, elapsed
        deadline = time.monotonic() + 5
        while connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert connections() == 0  # the connection is gone, and what it held with it
        # a body sent at once is served as before
        r = httpx.post(f"http://127.0.0.1:{port}/mcp", content=INIT, headers={"content-type": "application/json", "accept": ACCEPT})
        assert r.status_code == 200


def test_the_body_deadline_defaults_to_30_seconds_and_is_checked_at_construction() -> None:
    assert HTTPSecurity().body_timeout == 30.0
    with pytest.raises(ValueError):
        HTTPSecurity(body_timeout=0)


# ------------------------------------------------------------------ keep-alive comments


def test_keepalive_interval_is_an_app_option() -> None:
    with pytest.raises(ValueError):
        make_demo_app(keepalive_interval=0)
    assert make_demo_app().keepalive_interval == 15.0
    assert make_demo_app(keepalive_interval=2.5).keepalive_interval == 2.5


