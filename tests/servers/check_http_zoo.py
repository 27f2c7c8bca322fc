"""Deliberately broken HTTP servers for ``tests/integration/test_check_http.py``, each with one classic bug.

They are the project's own (correct) ASGI apps with the bug put in front of them by a small
middleware or a careless option, so each differs from a correct server in exactly one way.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from sturdyrpc.transports.asgi import HTTPSecurity

Rewrite = Callable[[dict[str, Any], int, list[tuple[bytes, bytes]], bytes], tuple[int, list[tuple[bytes, bytes]], bytes]]


def rewriting(app: Any, statuses: set[int], fn: Rewrite) -> Any:
    """Wrap ``app``: responses with one of ``statuses`` are buffered and passed through ``fn``."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        body = bytearray()

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                if message["status"] not in statuses:
                    start["pass"] = True
                    await send(message)
                    return
                start.update(message)
                return
            if start.get("pass"):
                await send(message)
                return
            body.extend(message.get("body", b""))
            if not message.get("more_body"):
                status, headers, new = fn(scope, start["status"], list(start.get("headers", [])), bytes(body))
                headers = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"content-type")]
                headers += [(b"content-length", str(len(new)).encode()), (b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": new})

        await app(scope, receive, capture)

    return wrapped


def plain_app(**security: Any) -> Any:
    from sturdyrpc.demos.jsonrpc import make_demo
    from sturdyrpc.transports.http import JSONRPCHTTPApp

    return JSONRPCHTTPApp(make_demo(), security=HTTPSecurity(**security) if security else None)


def mcp_app(**security: Any) -> Any:
    from sturdyrpc.demos.mcp_http import make_demo_app

    return make_demo_app(security=HTTPSecurity(**security)) if security else make_demo_app()


def answers_notifications() -> Any:
    """Plain JSON-RPC: a POST of a notification gets 200 and a JSON-RPC body (a 'null result')."""
    reply = json.dumps({"jsonrpc": "2.0", "result": None, "id": None}).encode()
    return rewriting(plain_app(), {204}, lambda scope, status, headers, body: (200, headers, reply))


def no_origin_check() -> Any:
    """MCP: the Origin header is not validated (any web page can drive the server)."""
    return mcp_app(allowed_origins={"*"})


def unknown_session_400() -> Any:
    """MCP: an unknown or ended session id gets 400 instead of 404 (clients never re-initialize)."""

    def fn(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        return (400, headers, body) if scope["method"] == "POST" else (status, headers, body)

    return rewriting(mcp_app(), {404}, fn)


def leaky_errors() -> Any:
    """Plain JSON-RPC: HTTP refusals (405, 415) carry the exception and a traceback frame."""

    def fn(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        msg = 'Traceback (most recent call last):\n  File "/srv/app/server.py", line 42, in handle\nValueError: bad request'
        return status, headers, json.dumps({"jsonrpc": "2.0", "error": {"code": -32600, "message": msg}, "id": None}).encode()

    return rewriting(plain_app(), {405, 415}, fn)


@contextmanager
def serve(app: Any, port: int) -> Iterator[str]:
    """Run ``app`` on uvicorn in a thread at 127.0.0.1:``port``; yields the base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True, name=f"zoo-http-{port}")
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        thread.join(10)
