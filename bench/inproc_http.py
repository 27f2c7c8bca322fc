"""In-process micro-bench of the MCP HTTP app: the ASGI app called directly in a loop with a
fake receive/send (no sockets, no uvicorn), per request µs for the bench_http shapes.

    .venv/bin/python bench/inproc_http.py [n] [--profile mcp-sse|mcp-2026]
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
import time
from typing import Any

import msgspec

from sturdyrpc.demos.mcp_http import make_demo_app

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_servers import bare_app  # noqa: E402

OLD, NEW = "2025-11-25", "2026-07-28"
CALL = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}'
CALL_NEW = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},'
            b'"_meta":{"io.modelcontextprotocol/protocolVersion":"' + NEW.encode() + b'",'
            b'"io.modelcontextprotocol/clientCapabilities":{}}}}')
BASE = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream")]


def scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": headers, "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}


async def call(app: Any, sc: dict[str, Any], body: bytes) -> tuple[int, bytes]:
    out: list[Any] = []
    msg = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> dict[str, Any]:
        return msg

    async def send(m: dict[str, Any]) -> None:
        out.append(m)

    await app(sc, receive, send)
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])


async def setup() -> tuple[Any, dict[str, tuple[dict[str, Any], bytes]]]:
    app = make_demo_app()
    init = msgspec.json.encode({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": OLD, "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}})
    st, _ = await call(app, scope("/mcp", BASE), init)
    sid = app.sessions  # type: ignore[attr-defined]
    sid = next(iter(sid))
    h = BASE + [(b"mcp-session-id", sid.encode()), (b"mcp-protocol-version", OLD.encode())]
    st, _ = await call(app, scope("/mcp", h), b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    h26 = BASE + [(b"mcp-protocol-version", NEW.encode()), (b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]
    cases = {"bare": (bare_app, scope("/", BASE), CALL), "mcp-sse": (app, scope("/mcp", h), CALL),
             "mcp-2026": (app, scope("/mcp", h26), CALL_NEW)}
    return app, cases  # type: ignore[return-value]


async def run(n: int, prof: str | None) -> None:
    _, cases = await setup()
    for name, (app, sc, body) in cases.items():
        st, out = await call(app, sc, body % 1)
        assert st == 200 and b'"result"' in out, (name, st, out)
    if prof:
        app, sc, body = cases[prof]
        p = cProfile.Profile()
        p.enable()
        for i in range(n):
            await call(app, sc, body % i)
        p.disable()
        pstats.Stats(p).sort_stats("tottime").print_stats(30)
        return
    for _rnd in range(3):
        line = []
        for name, (app, sc, body) in cases.items():
            bodies = [body % i for i in range(n)]
            t = time.perf_counter()
            for b in bodies:
                await call(app, sc, b)
            line.append(f"{name} {(time.perf_counter() - t) / n * 1e6:6.2f} µs")
        print("  ".join(line))


if __name__ == "__main__":
    args = sys.argv[1:]
    prof = None
    if "--profile" in args:
        i = args.index("--profile")
        prof = args[i + 1]
        del args[i:i + 2]
    asyncio.run(run(int(args[0]) if args else 20000, prof))
