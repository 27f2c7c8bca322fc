"""Servers for ``bench_http`` that the ``sturdyrpc`` program has no flag for, on the same uvicorn
settings as ``sturdyrpc demo --http`` (:func:`sturdyrpc.transports.serve_http.run_uvicorn`: one
worker, httptools with the bounded head, no access log, 127.0.0.1).

    python bench/http_servers.py bare PORT       # the limit: the least an ASGI JSON-RPC endpoint does
    python bench/http_servers.py mcp-json PORT   # the MCP demo with json_response=True

``bare``: reads the body, msgspec-decodes it, and encodes a ``tools/call``-shaped result (the
shape our ``echo`` tool answers) with the request's id. No validation, no limits, no security
checks, no sessions: what is left of a request when everything sturdyrpc adds is taken away.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec

from sturdyrpc.transports.serve_http import run_uvicorn

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.encode
_HEADERS_JSON = b"application/json"


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        return
    body = b""
    more = True
    while more:
        msg = await receive()
        body += msg.get("body", b"")
        more = msg.get("more_body", False)
    req = _decode(body)
    text = req["params"]["arguments"]["text"]
    out = _encode({"jsonrpc": "2.0", "id": req["id"], "result": {
        "content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": False}})
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", _HEADERS_JSON), (b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "bare":
        run_uvicorn(bare_app, "127.0.0.1", port)
    elif kind == "mcp-json":
        from sturdyrpc.demos.mcp_http import make_demo_app

        run_uvicorn(make_demo_app(json_response=True), "127.0.0.1", port)
    else:
        raise SystemExit(f"unknown server kind {kind!r}")


if __name__ == "__main__":
    main()
