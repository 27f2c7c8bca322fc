"""Every guarantee on every way a message can enter sturdyrpc: one table.

Rows (:data:`ROWS`) are the ways in: ``sturdyrpc run`` over stdio for a ``Dispatcher`` and for
an ``MCPServer``, a ``Peer`` over TCP (served, and connecting out with ``connect_tcp``,
``connect_unix`` and ``connect_stdio``), the peer in process, ``handle_sync``,
``MCPServer.serve`` and ``handle_stateless``, plain JSON-RPC over HTTP, Streamable HTTP
sessions on the memory store and on Redis with two workers, 2026-07-28 requests on both, the
test client, and batches wherever the protocol version has them. Each test function is one
guarantee (a column), parametrized by row, so a failure names its cell
(``test_no_leak[http-plain]``):

- ``test_auth``: HTTP rows only: 401 without a token, 403 without the server-wide scope and
  (MCP) without a tool's ``scopes=``, the request running with a good token;
- ``test_limits``: an over-long and an over-deep message get the same -32600 error on every
  row, and (batch rows) a batch over ``max_batch``; the connection keeps serving;
- ``test_no_leak``: a handler raising ``RuntimeError(SECRET)`` gets -32603 with an incident id
  only (a tool: an ``isError`` result naming an incident), nothing of its text;
- ``test_exit_contained``: ``sys.exit()`` and ``KeyboardInterrupt`` in a handler are answered
  like that, and the server serves the next request;
- ``test_middleware_runs``: the app's middleware answers ``intercepted_*`` itself;
- ``test_principal``: the handler's ``ctx.principal`` is its own token's (HTTP), also with two
  tokens in flight at once and on a session; None elsewhere;
- ``test_every_request_settles``: many concurrent requests (inline, async, on threads) are
  answered exactly once; on rows with a stream, the end of the input right after sending them
  still answers every one, then the server exits 0.

Every handler exists inline, async and on a thread (tests/servers/paths_app.py); each check
calls all three. Servers are real: subprocesses started by the CLI, real sockets, uvicorn,
redis-server. One server per row (rows that differ only in the framing share one), started on
first use and stopped at the end of the module; the end-of-input checks start their own.

``test_every_way_in_has_a_row`` finds the serving entry points by introspection (every public
function or class taking a ``Dispatcher`` or an ``MCPServer``, and the ``serve*``, ``run*``,
``handle*``, ``create_peer`` and ``test_client`` methods of both) and fails on one that no row
covers: a new way in joins the table, or the suite fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import itertools
import json
import os
import pkgutil
import re
import signal
import sys
import tempfile
import threading
import time
import types
import typing
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from support import SERVERS
from support.auth import IdP, init_body
from support.http import free_port, server_process
from support.mcp import modern_meta, schema
from support.redis import RedisServer

import sturdyrpc
from sturdyrpc import Dispatcher, RPCError
from sturdyrpc.mcp import MCPServer
from sturdyrpc.peer import Peer
from sturdyrpc.targets import load_target
from sturdyrpc.transports.memory import memory_pair

APP = str(SERVERS / "paths_app.py")
TCP = str(SERVERS / "paths_tcp.py")
CONNECT = str(SERVERS / "paths_connect.py")
RUN = [sys.executable, "-m", "sturdyrpc", "run"]
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
#: How long any one exchange may take before the cell fails (a hang is a failure, not a wait).
STEP = 10.0

# The application, loaded as `sturdyrpc run` loads it (the in-process rows serve these objects).
RPC: Dispatcher = load_target(f"{APP}:rpc", (Dispatcher,))
MCP: MCPServer = load_target(f"{APP}:server", (MCPServer,))
app = importlib.import_module("paths_app")
LIMITS = app.LIMITS
SECRET_PARTS = ("SECRET", "sk-live-4242", "/srv/paths", "credentials", "RuntimeError", "Traceback")

TOO_LARGE = {"code": -32600, "message": "Message too large", "data": {"limit": "max_message_bytes", "max": LIMITS.max_message_bytes}}
TOO_DEEP = {"code": -32600, "message": "Nesting too deep", "data": {"limit": "max_depth", "max": LIMITS.max_depth}}
BATCH_TOO_LARGE = {"code": -32600, "message": "Batch too large", "data": {"limit": "max_batch", "max": LIMITS.max_batch}}


# ---------------------------------------------------------------- the rows

#: What every call on the runner goes through (the executor, the inline path, the chain).
RUNNER = ("sturdyrpc.runner.Runner", "sturdyrpc.execute.run_call", "sturdyrpc.execute.run_call_now",
          "sturdyrpc.Dispatcher.run_inline", "sturdyrpc.Dispatcher.run_chain")
PEER = ("sturdyrpc.Peer", "sturdyrpc.peer.incoming.Incoming", *RUNNER)
#: What an MCP session goes through, whatever carries it.
SESSION = ("sturdyrpc.mcp.MCPServer.create_peer", "sturdyrpc.mcp.session_state.SessionPeer", "sturdyrpc.mcp.SessionState",
           "sturdyrpc.mcp.handlers.ProtocolHandlers", "sturdyrpc.mcp.tools_call.ToolsCall", "sturdyrpc.mcp.tasks.Tasks",
           "sturdyrpc.mcp.tasks.TaskService", "sturdyrpc.mcp.lifespan.LifespanRunner", *PEER)
#: What a 2026-07-28 request goes through.
STATELESS = ("sturdyrpc.mcp.MCPServer.serve_stateless", "sturdyrpc.mcp.stateless.StatelessServing",
             "sturdyrpc.mcp.SessionState", "sturdyrpc.mcp.handlers.ProtocolHandlers", "sturdyrpc.mcp.tools_call.ToolsCall",
             "sturdyrpc.mcp.tasks.Tasks", "sturdyrpc.mcp.tasks.TaskService", *RUNNER)
HTTP_MCP = ("sturdyrpc.mcp_http.mcp_http_app", "sturdyrpc.mcp.scopes.required_scopes", "sturdyrpc.mcp.lifespan.LifespanRunner")
BATCH = ("sturdyrpc.BatchJob",)

#: Public callables taking a server that no message enters through (each says why).
NOT_A_WAY_IN = {
    "sturdyrpc.otel.instrument_server": "adds a middleware to the chain; the requests it sees enter by the rows",
}


@dataclass(frozen=True)
class Row:
    """One way in. ``server``: which running server it uses (rows that differ only in framing
    share one); ``mcp``: None for plain JSON-RPC, else the protocol version its messages speak;
    ``http``: auth and the principal apply; ``stream``: a connection whose end the server sees
    (the end-of-input check); ``suspends``: async handlers may suspend (not under handle_sync);
    ``covers``: the entry points (qualified names) a message on this row goes through."""

    id: str
    server: str
    mcp: str | None = None
    batch: bool = False
    http: bool = False
    stream: bool = False
    suspends: bool = True
    covers: tuple[str, ...] = ()

    @property
    def session(self) -> bool:
        """Whether the row's calls belong to an MCP session of the handshake era."""
        return self.mcp is not None and self.mcp != MODERN


ROWS = [
    Row("stdio-plain", "stdio-plain", stream=True, covers=("sturdyrpc.run_stdio", "sturdyrpc.serve_stdio", *RUNNER)),
    Row("stdio-plain-batch", "stdio-plain", batch=True, stream=True, covers=("sturdyrpc.run_stdio", *BATCH, *RUNNER)),
    Row("stdio-mcp", "stdio-mcp", mcp="2025-11-25", stream=True,
        covers=("sturdyrpc.mcp.MCPServer.run", "sturdyrpc.mcp.run_mcp_stdio", "sturdyrpc.mcp.serve_mcp_stdio", *SESSION)),
    Row("stdio-mcp-batch", "stdio-mcp-2025-03-26", mcp="2025-03-26", batch=True, stream=True,
        covers=("sturdyrpc.mcp.run_mcp_stdio", *BATCH, *SESSION)),
    Row("tcp", "tcp", stream=True, covers=PEER),
    Row("tcp-connect", "tcp-connect", stream=True, covers=("sturdyrpc.client.connect_tcp", *PEER)),
    Row("unix-connect", "unix-connect", stream=True, covers=("sturdyrpc.client.connect_unix", *PEER)),
    Row("stdio-connect", "stdio-connect", stream=True, covers=("sturdyrpc.client.connect_stdio", *PEER)),
    Row("peer-memory", "peer-memory", stream=True, covers=PEER),
    Row("peer-memory-batch", "peer-memory", batch=True, stream=True, covers=(*BATCH, *PEER)),
    Row("handle-sync", "handle-sync", suspends=False,
        covers=("sturdyrpc.Dispatcher.handle_sync", "sturdyrpc.Dispatcher.run_inline", "sturdyrpc.Dispatcher.run_chain")),
    Row("mcp-serve-memory", "mcp-serve", mcp="2025-11-25", stream=True, covers=("sturdyrpc.mcp.MCPServer.serve", *SESSION)),
    Row("handle-stateless", "handle-stateless", mcp=MODERN, covers=("sturdyrpc.mcp.MCPServer.handle_stateless", *STATELESS)),
    Row("http-plain", "http-plain", http=True, covers=("sturdyrpc.transports.http.JSONRPCHTTPApp", *RUNNER[1:])),
    Row("http-plain-batch", "http-plain", batch=True, http=True,
        covers=("sturdyrpc.transports.http.JSONRPCHTTPApp", *BATCH, *RUNNER[1:])),
    Row("http-session", "http-mcp", mcp="2025-11-25", http=True, covers=(*HTTP_MCP, *SESSION)),
    Row("http-session-batch", "http-mcp", mcp="2025-03-26", batch=True, http=True, covers=(*HTTP_MCP, *BATCH, *SESSION)),
    Row("http-session-redis-2w", "http-mcp-redis", mcp="2025-11-25", http=True, covers=(*HTTP_MCP, *SESSION)),
    Row("http-stateless", "http-mcp", mcp=MODERN, http=True, covers=(*HTTP_MCP, *STATELESS)),
    Row("http-stateless-redis-2w", "http-mcp-redis", mcp=MODERN, http=True, covers=(*HTTP_MCP, *STATELESS)),
    # A proxy of an in-process server (create_proxy(server): its Upstream) reaches that server
    # through connect_in_memory, this row's path.
    Row("test-client", "test-client", mcp=MODERN,
        covers=("sturdyrpc.mcp.MCPServer.test_client", "sturdyrpc.mcp.testing.connect_in_memory", "sturdyrpc.mcp.create_proxy",
                "sturdyrpc.mcp.proxying.Upstream", *SESSION)),
]
HTTP_ROWS = [r for r in ROWS if r.http]
by_row = pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)


# ---------------------------------------------------------------- replies and connections


@dataclass
class Reply:
    """What came back for one frame: the HTTP status (None off HTTP), the decoded body (a
    message, a list of them, or None), its bytes and (HTTP) headers."""

    status: int | None
    body: Any
    raw: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The responses in it (a batch's one by one), notifications from the server left out."""
        items = self.body if isinstance(self.body, list) else [] if self.body is None else [self.body]
        return [m for m in items if isinstance(m, dict) and "method" not in m]


def decode_frame(data: bytes) -> Any:
    return json.loads(data) if data.strip() else None


class Conn:
    """One connection (or, over HTTP, one client and its session) of a row."""

    async def one(self, msg: Any, token: str | None = None) -> Reply:
        """Send ``msg`` (one frame: a message, or a list for a batch) and wait for its reply."""
        raise NotImplementedError

    async def many(self, msgs: list[Any], token: str | None = None) -> list[Reply]:
        """Send every frame before waiting for any reply; the replies, as many as frames, in
        the order they came."""
        return list(await asyncio.gather(*(self.one(m, token) for m in msgs)))

    async def notify(self, msg: Any) -> None:
        await self.one(msg)

    def alive(self) -> bool:
        """Whether the server (process, peer) still runs."""
        return True


class LineConn(Conn):
    """Newline-delimited frames over a byte stream (a subprocess's pipes, a socket)."""

    def __init__(self, reader: asyncio.StreamReader, writer: Any, proc: Any = None) -> None:
        self.writer = writer
        self.proc = proc
        self.lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.pump = asyncio.ensure_future(self._pump(reader))

    async def _pump(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                if line.strip():
                    await self.lines.put(line)
        finally:
            await self.lines.put(None)

    async def next(self) -> bytes | None:
        return await asyncio.wait_for(self.lines.get(), STEP)

    async def _reply(self) -> Reply:
        while True:
            line = await self.next()
            assert line is not None, "the server ended the stream instead of answering"
            reply = Reply(None, decode_frame(line), line)
            if reply.messages or not isinstance(reply.body, dict):
                return reply

    async def _write(self, frames: list[bytes]) -> None:
        self.writer.write(b"".join(f + b"\n" for f in frames))
        await self.writer.drain()

    async def one(self, msg: Any, token: str | None = None) -> Reply:
        await self._write([encode(msg)])
        return await self._reply()

    async def many(self, msgs: list[Any], token: str | None = None) -> list[Reply]:
        await self._write([encode(m) for m in msgs])
        return [await self._reply() for _ in msgs]

    async def notify(self, msg: Any) -> None:
        await self._write([encode(msg)])

    async def send_only(self, msgs: list[Any]) -> None:
        await self._write([encode(m) for m in msgs])

    async def end_input(self) -> list[Reply]:
        """Close our sending side; every frame the server writes until it closes its own."""
        if self.writer.can_write_eof():
            self.writer.write_eof()
        else:
            self.writer.close()
        out = []
        while (line := await self.next()) is not None:
            out.append(Reply(None, decode_frame(line), line))
        return out

    def alive(self) -> bool:
        return self.proc is None or self.proc_returncode() is None

    def proc_returncode(self) -> int | None:
        code: int | None = self.proc.returncode
        return code


class MemoryConn(Conn):
    """Whole messages over the other end of an in-memory pair."""

    def __init__(self, end: Any, serving: asyncio.Future[Any]) -> None:
        self.end = end
        self.serving = serving

    async def _reply(self) -> Reply:
        while True:
            data = await asyncio.wait_for(self.end.receive(), STEP)
            assert isinstance(data, bytes), f"the connection ended instead of answering: {data!r}"
            reply = Reply(None, decode_frame(data), data)
            if reply.messages or not isinstance(reply.body, dict):
                return reply

    async def one(self, msg: Any, token: str | None = None) -> Reply:
        await self.end.send(encode(msg))
        return await self._reply()

    async def many(self, msgs: list[Any], token: str | None = None) -> list[Reply]:
        for m in msgs:
            await self.end.send(encode(m))
        return [await self._reply() for _ in msgs]

    async def notify(self, msg: Any) -> None:
        await self.end.send(encode(msg))

    async def send_only(self, msgs: list[Any]) -> None:
        for m in msgs:
            await self.end.send(encode(m))

    async def end_input(self) -> list[Reply]:
        self.end.close_write()
        out = []
        while isinstance(data := await asyncio.wait_for(self.end.receive(), STEP), bytes):
            out.append(Reply(None, decode_frame(data), data))
        return out

    def alive(self) -> bool:
        return not self.serving.done()


class SyncConn(Conn):
    """``Dispatcher.handle_sync`` on threads of its own (it runs without an event loop)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def one(self, msg: Any, token: str | None = None) -> Reply:
        out = await asyncio.wait_for(asyncio.to_thread(self.dispatcher.handle_sync, encode(msg)), STEP)
        return Reply(None, None if out is None else decode_frame(out), out or b"")


class StatelessConn(Conn):
    """``MCPServer.handle_stateless`` awaited in process, one request each."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server

    async def one(self, msg: Any, token: str | None = None) -> Reply:
        async def related(data: bytes) -> None:
            return None

        out = await asyncio.wait_for(self.server.handle_stateless(encode(msg), related), STEP)
        return Reply(None, None if out is None else decode_frame(out), out or b"")


#: A ``token`` that sends no Authorization header at all.
NO_TOKEN = ""


class HTTPConn(Conn):
    """One POST per frame to ``url``: the session's headers, or (2026-07-28) the request's own."""

    def __init__(self, client: httpx.AsyncClient, url: str, row: Row, token: str | None, watch: Callable[[], bool]) -> None:
        self.client = client
        self.url = url
        self.row = row
        self.token = token
        self.watch = watch
        self.session: dict[str, str] = {}

    def alive(self) -> bool:
        return self.watch()

    def headers(self, msg: Any, token: str | None) -> dict[str, str]:
        h = {"content-type": "application/json", "accept": ACCEPT, **self.session}
        token = self.token if token is None else token
        if token:
            h["authorization"] = f"Bearer {token}"
        if self.row.mcp == MODERN and isinstance(msg, dict):
            h["mcp-protocol-version"] = MODERN
            h["mcp-method"] = str(msg.get("method"))
            name = (msg.get("params") or {}).get("name")
            if isinstance(name, str):
                h["mcp-name"] = name
        return h

    async def one(self, msg: Any, token: str | None = None) -> Reply:
        r = await self.client.post(self.url, content=encode(msg), headers=self.headers(msg, token), timeout=STEP)
        return Reply(r.status_code, http_body(r), r.content, dict(r.headers))

    async def open_session(self) -> None:
        assert self.row.mcp is not None
        r = await self.one(init_body(self.row.mcp))
        assert r.status == 200, (r.status, r.raw)
        self.session = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": self.row.mcp}
        r = await self.one({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert r.status == 202, (r.status, r.raw)


def http_body(r: httpx.Response) -> Any:
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        out = []
        for block in r.text.split("\n\n"):
            data = "\n".join(line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:"))
            if data.strip():
                got = json.loads(data)
                out.extend(got if isinstance(got, list) else [got])
        return out[0] if len(out) == 1 else out
    return json.loads(r.content) if r.content.strip() else None


class TestClientConn(Conn):
    """The ``MCPClient`` of ``server.test_client()``: each frame (a ``tools/call``) is made by
    ``client.call_tool``; the reply is what the client got: its result, the error it raised,
    or an error without an id it could match (``on_error_without_id``), shown as the row's
    version sends one."""

    __test__ = False

    def __init__(self, client: Any, row: Row) -> None:
        self.client = client
        self.row = row
        self.unmatched: asyncio.Queue[RPCError] = asyncio.Queue()
        client.peer.on_error_without_id = self.unmatched.put_nowait

    async def one(self, msg: Any, token: str | None = None) -> Reply:
        assert msg["method"] == "tools/call", msg
        call = asyncio.ensure_future(self.client.call_tool(msg["params"]["name"], msg["params"]["arguments"], timeout=STEP))
        orphan = asyncio.ensure_future(self.unmatched.get())
        done, _ = await asyncio.wait({call, orphan}, timeout=STEP + 5, return_when=asyncio.FIRST_COMPLETED)
        for f in (call, orphan):
            if f not in done:
                f.cancel()
        assert done, f"no answer within {STEP} s"
        if orphan in done:
            body: dict[str, Any] = unreadable(self.row, error_dict(orphan.result()))
        else:
            try:
                body = {"jsonrpc": "2.0", "result": call.result(), "id": msg["id"]}
            except RPCError as exc:
                body = {"jsonrpc": "2.0", "error": error_dict(exc), "id": msg["id"]}
            except Exception as exc:  # e.g. RequestTimeout: the client got no answer it could match
                return Reply(None, None, f"the call ended with {type(exc).__name__}: {exc}".encode())
        return Reply(None, body, json.dumps(body).encode())


def error_dict(exc: RPCError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        out["data"] = exc.data
    return out


def encode(msg: Any) -> bytes:
    return msg if isinstance(msg, bytes) else msgspec.json.encode(msg)


# ---------------------------------------------------------------- messages of a row

_ids = itertools.count(1)


def request(row: Row, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """A request calling handler ``name`` as the row speaks: a method, or an MCP tool."""
    id_ = next(_ids)
    if row.mcp is None:
        return {"jsonrpc": "2.0", "id": id_, "method": name, "params": args or {}}
    params: dict[str, Any] = {"name": name, "arguments": args or {}}
    if row.mcp == MODERN:
        params["_meta"] = modern_meta()
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


async def call_all(row: Row, conn: Conn, calls: list[tuple[str, dict[str, Any]]], token: str | None = None) -> list[dict[str, Any]]:
    """Make ``calls`` (at once: one batch, or one frame each) and return their responses in
    order, each checked to come exactly once and nothing else to come."""
    reqs = [request(row, name, args) for name, args in calls]
    replies = [await conn.one(reqs, token)] if row.batch else await conn.many(reqs, token)
    for r in replies:
        assert r.status in (None, 200), (r.status, r.raw[:500])
    return settled(reqs, replies)


def settled(reqs: list[dict[str, Any]], replies: list[Reply]) -> list[dict[str, Any]]:
    got = [m for r in replies for m in r.messages]
    ids = [m.get("id") for m in got]
    want = [q["id"] for q in reqs]
    assert sorted(ids, key=repr) == sorted(want, key=repr), f"answers {ids} for requests {want}"
    by_id = {m["id"]: m for m in got}
    return [by_id[i] for i in want]


async def call(row: Row, conn: Conn, name: str, args: dict[str, Any] | None = None, token: str | None = None) -> dict[str, Any]:
    return (await call_all(row, conn, [(name, args or {})], token))[0]


def value(row: Row, resp: dict[str, Any]) -> Any:
    """The value a handler returned, from its response on this row."""
    assert "result" in resp, resp
    if row.mcp is None:
        return resp["result"]
    result = resp["result"]
    assert result.get("isError") is not True, result
    return json.loads(result["content"][0]["text"])


def unreadable(row: Row, error: dict[str, Any]) -> dict[str, Any]:
    """The answer to a message whose id could not be read: ``id: null`` (JSON-RPC), or no
    ``id`` at all on the MCP versions whose official schema has an error without one (it
    allows no null there), and over HTTP on every MCP version (an HTTP error body "MAY comprise
    a JSON-RPC error response that has no id", 2025-03-26 on)."""
    if row.mcp is not None and row.http:
        return {"jsonrpc": "2.0", "error": error}
    if row.mcp is not None:
        defs = schema(row.mcp).get("$defs") or schema(row.mcp)["definitions"]
        err = defs.get("JSONRPCErrorResponse") or defs["JSONRPCError"]
        if "id" not in err["required"]:
            return {"jsonrpc": "2.0", "error": error}
    return {"jsonrpc": "2.0", "error": error, "id": None}


def assert_contained(row: Row, resp: dict[str, Any]) -> None:
    """An unexpected exception's answer: -32603 with only an incident id (a tool: ``isError``
    naming an incident), nothing of what was raised."""
    raw = json.dumps(resp)
    for part in SECRET_PARTS:
        assert part not in raw, f"{part!r} reached the client: {raw}"
    if row.mcp is None:
        err = resp.get("error")
        assert err is not None and err["code"] == -32603 and err["message"] == "Internal error", resp
        assert set(err["data"]) == {"incident"} and re.fullmatch(r"[0-9a-f]{6,}", err["data"]["incident"]), resp
    else:
        result = resp.get("result")
        assert result is not None and result.get("isError") is True, f"a tool's failure must be an isError result: {resp}"
        text = " ".join(c.get("text", "") for c in result["content"])
        assert re.search(r"incident [0-9a-f]{6,}", text), f"no incident named: {text!r}"


# ---------------------------------------------------------------- the servers


def run_cmd(target: str, *extra: str) -> list[str]:
    return [*RUN, f"{APP}:{target}", *extra]


class Loop:
    """An event loop on a thread of its own: the tests are plain functions, the in-process
    servers and every client live on this loop for the whole module."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="paths-loop")
        self.thread.start()

    def run(self, coro: Awaitable[Any], timeout: float = 120.0) -> Any:
        assert threading.current_thread() is not self.thread, "run() from the loop itself would wait for itself"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        async def cancel_the_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.wait(rest, timeout=5) if rest else None

        try:
            self.run(cancel_the_rest(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():  # a loop stuck in a callback cannot be closed; it dies with the process
                self.loop.close()


@dataclass
class Served:
    """A running server of one kind: ``connect(row)`` opens a connection for a row (over HTTP
    with ``token``, the good one by default); ``tokens`` by name (HTTP); ``fresh(row)``: a new
    server of the same kind and a connection to it, for the end-of-input check, with
    ``finished()`` returning how it ended (an exit code, or 0 for a peer that closed cleanly)."""

    connect: Callable[..., Awaitable[Conn]]
    tokens: dict[str, str] = field(default_factory=dict)
    fresh: Callable[[Row], Awaitable[tuple[Any, Callable[[], Awaitable[int | None]]]]] | None = None


class Servers:
    """Starts each server on first use; stops them all at the end of the module."""

    def __init__(self) -> None:
        self.loop = Loop()
        self.stack = contextlib.ExitStack()
        self.astack = contextlib.AsyncExitStack()
        self.running: dict[str, Served] = {}
        self.conns: dict[tuple[str, str], Conn] = {}
        self.procs: list[Any] = []
        self.lines: list[LineConn] = []
        self._idp: IdP | None = None

    def run(self, coro: Awaitable[Any], timeout: float = 120.0) -> Any:
        return self.loop.run(coro, timeout)

    def get(self, key: str) -> Served:
        if key not in self.running:
            self.running[key] = getattr(self, "start_" + key.replace("-", "_"))()
        return self.running[key]

    def conn(self, row: Row) -> Conn:
        """The row's connection, opened once (the server's, or a new session of it)."""
        if (row.server, row.id) not in self.conns:
            self.conns[row.server, row.id] = self.run(self.get(row.server).connect(row))
        return self.conns[row.server, row.id]

    def close(self) -> None:
        async def stop_all() -> None:
            await self.astack.aclose()
            for p in self.procs:
                stop_process(p)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(p.wait(), 10)
            for c in self.lines:
                c.writer.close()
                c.pump.cancel()

        # Whatever fails or hangs here, every process this module started is stopped.
        try:
            self.run(stop_all(), 60)
        finally:
            for p in self.procs:
                stop_process(p)
            try:
                self.loop.close()
            finally:
                self.stack.close()

    # -------- helpers

    @property
    def idp(self) -> IdP:
        if self._idp is None:
            idp = IdP()
            idp.add_key("k1")
            self._idp = self.stack.enter_context(idp.serve())
        return self._idp

    def auth_options(self, port: int) -> tuple[list[str], dict[str, str]]:
        """The ``--auth-*`` options of a server on ``port`` and the tokens for it."""
        audience = f"http://127.0.0.1:{port}/mcp"
        opts = ["--auth-issuer", self.idp.issuer, "--auth-jwks", self.idp.jwks_url, "--auth-scopes", "paths:call",
                "--auth-audience", audience]
        tok = self.idp.token
        tokens = {
            "alice": tok(audience, scope=f"paths:call {app.ADMIN_SCOPE}"),
            # the same principal (issuer, subject, client) with another token and other scopes
            "alice-narrow": tok(audience, scope="paths:call"),
            "bob": tok(audience, scope="paths:call", sub="bob", client_id="client-2"),
            "no-call-scope": tok(audience, scope=app.ADMIN_SCOPE),
        }
        return opts, tokens

    def line_conn(self, reader: asyncio.StreamReader, writer: Any, proc: Any = None) -> LineConn:
        conn = LineConn(reader, writer, proc)
        self.lines.append(conn)
        return conn

    async def spawn(self, cmd: list[str], **kw: Any) -> asyncio.subprocess.Process:
        log = self.stack.enter_context(tempfile.TemporaryFile())
        proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=log, limit=1 << 20, start_new_session=True,
                                                    env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kw)
        self.procs.append(proc)
        return proc

    async def stdio_conn(self, cmd: list[str], row: Row) -> LineConn:
        proc = await self.spawn(cmd)
        assert proc.stdout is not None
        conn = self.line_conn(proc.stdout, proc.stdin, proc)
        if row.mcp is not None:
            await initialize(row, conn)
        return conn

    # -------- stdio (`sturdyrpc run`)

    def _stdio(self, target: str) -> Served:
        async def connect(row: Row) -> Conn:
            return await self.stdio_conn(run_cmd(target), row)

        shared: dict[str, Conn] = {}

        async def connect_once(row: Row) -> Conn:
            # one process: its stdin is the one connection the rows sharing it use
            if "conn" not in shared:
                shared["conn"] = await connect(row)
            return shared["conn"]

        async def fresh(row: Row) -> tuple[Any, Callable[[], Awaitable[int | None]]]:
            conn = await self.stdio_conn(run_cmd(target), row)
            return conn, lambda: asyncio.wait_for(conn.proc.wait(), STEP)

        return Served(connect_once, fresh=fresh)

    def start_stdio_plain(self) -> Served:
        return self._stdio("rpc")

    def start_stdio_mcp(self) -> Served:
        return self._stdio("server")

    def start_stdio_mcp_2025_03_26(self) -> Served:
        return self._stdio("server")

    # -------- TCP: served by a Peer on StreamTransport, or connecting out with the client helpers

    def start_tcp(self) -> Served:
        port = free_port()
        self.stack.enter_context(server_process([sys.executable, TCP, str(port)], port))

        async def connect(row: Row) -> Conn:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
            return self.line_conn(reader, writer)

        async def fresh(row: Row) -> tuple[Any, Callable[[], Awaitable[int | None]]]:
            once = free_port()
            proc = await self.spawn([sys.executable, TCP, str(once), "--once"])
            reader, writer = await first_connection(once, proc)
            return self.line_conn(reader, writer, proc), lambda: asyncio.wait_for(proc.wait(), STEP)

        return Served(connect, fresh=fresh)

    def _connecting(self, mode: str) -> Served:
        async def connect_back(row: Row) -> tuple[LineConn, Any]:
            accepted: asyncio.Future[tuple[Any, Any]] = asyncio.get_running_loop().create_future()

            def on_connect(reader: Any, writer: Any) -> None:
                if not accepted.done():
                    accepted.set_result((reader, writer))

            if mode == "unix":
                where = os.path.join(tempfile.mkdtemp(prefix="paths-"), "s")
                listener = await asyncio.start_unix_server(on_connect, where, limit=1 << 20)
            else:
                listener = await asyncio.start_server(on_connect, "127.0.0.1", 0, limit=1 << 20)
                where = str(listener.sockets[0].getsockname()[1])
            proc = await self.spawn([sys.executable, CONNECT, mode, where])
            try:
                reader, writer = await asyncio.wait_for(accepted, STEP)
            finally:
                listener.close()
            return self.line_conn(reader, writer, proc), proc

        async def connect(row: Row) -> Conn:
            return (await connect_back(row))[0]

        async def fresh(row: Row) -> tuple[Any, Callable[[], Awaitable[int | None]]]:
            conn, proc = await connect_back(row)
            return conn, lambda: asyncio.wait_for(proc.wait(), STEP)

        return Served(connect, fresh=fresh)

    def start_tcp_connect(self) -> Served:
        return self._connecting("tcp")

    def start_unix_connect(self) -> Served:
        return self._connecting("unix")

    def start_stdio_connect(self) -> Served:
        return self._connecting("stdio")

    # -------- in process

    def start_peer_memory(self) -> Served:
        async def serve_peer() -> tuple[MemoryConn, Peer]:
            mine, theirs = memory_pair()
            peer = Peer(theirs, RPC, name="paths-memory")
            await peer.start()
            self.astack.push_async_callback(peer.close, 1.0)
            return MemoryConn(mine, asyncio.ensure_future(peer.wait_closed())), peer

        async def connect(row: Row) -> Conn:
            return (await serve_peer())[0]

        async def fresh(row: Row) -> tuple[Any, Callable[[], Awaitable[int | None]]]:
            conn, peer = await serve_peer()

            async def finished() -> int:
                await asyncio.wait_for(peer.wait_closed(), STEP)
                return 0

            return conn, finished

        return Served(connect, fresh=fresh)

    def start_handle_sync(self) -> Served:
        async def connect(row: Row) -> Conn:
            return SyncConn(RPC)

        return Served(connect)

    def start_handle_stateless(self) -> Served:
        async def connect(row: Row) -> Conn:
            return StatelessConn(MCP)

        return Served(connect)

    def start_mcp_serve(self) -> Served:
        async def serve(row: Row) -> MemoryConn:
            mine, theirs = memory_pair()
            task = asyncio.ensure_future(MCP.serve(theirs, name="paths-serve"))
            self.astack.push_async_callback(mine.close)
            conn = MemoryConn(mine, task)
            await initialize(row, conn)
            return conn

        async def fresh(row: Row) -> tuple[Any, Callable[[], Awaitable[int | None]]]:
            conn = await serve(row)

            async def finished() -> int:
                await asyncio.wait_for(conn.serving, STEP)  # raises what serve() raised
                return 0

            return conn, finished

        return Served(serve, fresh=fresh)

    def start_test_client(self) -> Served:
        async def connect(row: Row) -> Conn:
            client = await self.astack.enter_async_context(MCP.test_client(timeout=STEP))
            assert client.version == MODERN, client.version
            return TestClientConn(client, row)

        return Served(connect)

    # -------- HTTP (`sturdyrpc run --http`, auth on)

    def _http(self, target: str, path: str, workers: int = 1, *extra: str) -> Served:
        port = free_port()
        opts, tokens = self.auth_options(port)
        cmd = run_cmd(target, "--http", f"127.0.0.1:{port}", "--workers", str(workers), *opts, *extra)
        proc = self.stack.enter_context(server_process(cmd, port))
        url = f"http://127.0.0.1:{port}{path}"
        # Several workers share the listening socket: a new connection per request lets any of them take it.
        pool = httpx.Limits(max_keepalive_connections=0) if workers > 1 else httpx.Limits()
        started = worker_pids(proc.pid, workers)
        assert len(started) == (workers if workers > 1 else 0), f"workers of the server: {started}"

        def alive() -> bool:
            # a worker that died (and was replaced) did not contain what its handler raised
            return proc.poll() is None and worker_pids(proc.pid) == started

        async def connect(row: Row, token: str | None = None) -> Conn:
            client = await self.astack.enter_async_context(httpx.AsyncClient(limits=pool, timeout=STEP))
            conn = HTTPConn(client, url, row, tokens["alice"] if token is None else token, alive)
            if row.session:
                await conn.open_session()
            return conn

        return Served(connect, tokens)

    def start_http_plain(self) -> Served:
        return self._http("rpc", "/")

    def start_http_mcp(self) -> Served:
        return self._http("server", "/mcp")

    def start_http_mcp_redis(self) -> Served:
        redis = RedisServer()  # skips the cell when there is no redis-server binary
        redis.start()
        self.stack.callback(redis.stop)  # after the workers using it (the stack unwinds in reverse)
        return self._http("server", "/mcp", 2, "--store", redis.url)


async def first_connection(port: int, proc: asyncio.subprocess.Process) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a server that serves one connection only (so no probe may connect first)."""
    deadline = asyncio.get_running_loop().time() + STEP
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        except OSError:
            assert proc.returncode is None and asyncio.get_running_loop().time() < deadline, "the server did not listen"
            await asyncio.sleep(0.05)


def worker_pids(pid: int, wait_for: int = 0) -> set[int]:
    """The worker processes uvicorn started for the server ``pid`` (none with one worker: it
    serves itself); with ``wait_for``, first wait until that many run."""
    deadline = time.monotonic() + STEP
    while True:
        found = set()
        for task in Path(f"/proc/{pid}/task").glob("*"):
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                        found.add(int(child))
        if wait_for < 2 or len(found) >= wait_for or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def stop_process(proc: Any) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


async def initialize(row: Row, conn: Conn) -> None:
    """The handshake of an MCP session on a connection (versions before 2026-07-28)."""
    assert row.mcp is not None and row.mcp != MODERN
    reply = await conn.one(init_body(row.mcp))
    assert reply.messages[0]["result"]["protocolVersion"] == row.mcp, reply.raw
    await conn.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    s = Servers()
    try:
        yield s
    finally:
        s.close()


# ---------------------------------------------------------------- (a) auth


@pytest.mark.parametrize("row", HTTP_ROWS, ids=lambda r: r.id)
def test_auth(servers: Servers, row: Row) -> None:
    served = servers.get(row.server)
    tokens = served.tokens
    conn = servers.conn(row)

    async def check() -> None:
        echo = [request(row, "echo_inline", {"text": "auth"})]
        frame: Any = echo if row.batch else echo[0]
        if row.session:
            # a session cannot even be opened without a token
            r = await conn.one(init_body(row.mcp or ""), token=NO_TOKEN)
            assert r.status == 401, f"initialize without a token: {r.status} {r.raw[:300]!r}"
        r = await conn.one(frame, token=NO_TOKEN)
        assert r.status == 401, f"no token: {r.status} {r.raw[:300]!r}"
        assert r.headers.get("www-authenticate", "").startswith("Bearer"), r.headers
        r = await conn.one(frame, token=tokens["no-call-scope"])
        assert r.status == 403, f"a token without the server's scope: {r.status} {r.raw[:300]!r}"
        assert 'error="insufficient_scope"' in r.headers.get("www-authenticate", ""), r.headers
        if row.mcp is not None:
            # a tool with scopes=: refused to a token without that scope, run with one
            admin = [request(row, "admin")]
            r = await conn.one(admin if row.batch else admin[0], token=tokens["alice-narrow"])
            assert r.status == 403, f"a tool's scope missing: {r.status} {r.raw[:300]!r}"
            assert value(row, await call(row, conn, "admin", token=tokens["alice"])) == {"admin": True}
        assert value(row, (await call_all(row, conn, [("echo_inline", {"text": "auth"})]))[0]) == {"echo": "auth"}

    servers.run(check())


# ---------------------------------------------------------------- (b) limits


@by_row
def test_limits(servers: Servers, row: Row) -> None:
    conn = servers.conn(row)

    def frame(args: dict[str, Any]) -> Any:
        msg = request(row, "echo_inline", args)
        return [msg] if row.batch else msg

    async def check() -> None:
        deep: Any = "x"
        for _ in range(LIMITS.max_depth + 8):
            deep = [deep]
        for args, error in (({"text": "x" * (LIMITS.max_message_bytes + 1024)}, TOO_LARGE), ({"text": deep}, TOO_DEEP)):
            r = await conn.one(frame(args))
            assert r.messages == [unreadable(row, error)], f"{error['message']}: {r.status} {r.raw[:300]!r}"
        if row.batch:
            over = [request(row, "echo_inline", {"text": str(i)}) for i in range(LIMITS.max_batch + 1)]
            r = await conn.one(over)
            assert r.messages == [unreadable(row, BATCH_TOO_LARGE)], f"{r.status} {r.raw[:300]!r}"
        # and the connection goes on
        assert value(row, await call(row, conn, "echo_inline", {"text": "after"})) == {"echo": "after"}

    servers.run(check())


# ---------------------------------------------------------------- (c) no leak


@by_row
def test_no_leak(servers: Servers, row: Row) -> None:
    conn = servers.conn(row)

    async def check() -> None:
        calls = [(f"fail_{how}", {"kind": "secret"}) for how in ("inline", "async", "thread")] + [("middleware_raises", {})]
        for (name, _), resp in zip(calls, await call_all(row, conn, calls), strict=True):
            try:
                assert_contained(row, resp)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from None

    servers.run(check())


# ---------------------------------------------------------------- (d) sys.exit / KeyboardInterrupt contained


@by_row
@pytest.mark.parametrize("kind", ["exit", "interrupt"])
def test_exit_contained(servers: Servers, row: Row, kind: str) -> None:
    conn = servers.conn(row)

    async def check() -> None:
        for how in ("inline", "async", "thread"):
            name = f"fail_{how}"
            replies = await call_all(row, conn, [(name, {"kind": kind}), ("echo_inline", {"text": how})])
            try:
                assert_contained(row, replies[0])
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from None
            assert value(row, replies[1]) == {"echo": how}
            # the next request, after the failure was answered
            assert value(row, await call(row, conn, "echo_async", {"text": how})) == {"echo": how}
            assert conn.alive(), f"the server stopped after {name}({kind!r})"

    servers.run(check())


# ---------------------------------------------------------------- (e) middleware


@by_row
def test_middleware_runs(servers: Servers, row: Row) -> None:
    conn = servers.conn(row)

    async def check() -> None:
        calls: list[tuple[str, dict[str, Any]]] = [(f"intercepted_{how}", {}) for how in ("inline", "async", "thread")]
        for (name, _), resp in zip(calls, await call_all(row, conn, calls), strict=True):
            assert value(row, resp) == app.MIDDLEWARE_ANSWER, f"{name}: {resp}"

    servers.run(check())


# ---------------------------------------------------------------- (f) the principal


@by_row
def test_principal(servers: Servers, row: Row) -> None:
    conn = servers.conn(row)
    tokens = servers.get(row.server).tokens

    def seen(resp: dict[str, Any]) -> Any:
        return value(row, resp)["principal"]

    async def check() -> None:
        if not row.http:
            got = await call_all(row, conn, [("whoami_inline", {}), ("whoami_async", {})])
            assert [seen(r) for r in got] == [None, None]
            return
        alice = {"subject": "alice", "client": "client-1", "scopes": sorted(["paths:call", app.ADMIN_SCOPE])}
        got = await call_all(row, conn, [("whoami_inline", {}), ("whoami_async", {})], token=tokens["alice"])
        assert [seen(r) for r in got] == [alice, alice]
        # two tokens in flight at once: each request sees its own. On a session both are the
        # session's principal (another client may not use it) with other scopes.
        other_name = "alice-narrow" if row.session else "bob"
        other = ({"subject": "alice", "client": "client-1", "scopes": ["paths:call"]} if row.session
                 else {"subject": "bob", "client": "client-2", "scopes": ["paths:call"]})
        for name in ("whoami_async", "whoami_inline"):
            args = {"ms": 300} if name == "whoami_async" else {}
            first, second = await asyncio.gather(call(row, conn, name, args, token=tokens["alice"]),
                                                 call(row, conn, name, args, token=tokens[other_name]))
            assert (seen(first), seen(second)) == (alice, other), name

    servers.run(check())


# ---------------------------------------------------------------- (g) every request settles

SETTLE_N = 48


def settle_calls(row: Row, n: int) -> list[tuple[str, dict[str, Any]]]:
    kinds = ["echo_inline", "echo_async", "echo_thread"] + (["slow_async"] if row.suspends else [])
    out: list[tuple[str, dict[str, Any]]] = []
    for i in range(n):
        name = kinds[i % len(kinds)]
        args: dict[str, Any] = {"text": f"t{i}"}
        if name == "slow_async":
            args["ms"] = (i * 7) % 60
        out.append((name, args))
    return out


@by_row
def test_every_request_settles(servers: Servers, row: Row) -> None:
    n = LIMITS.max_batch if row.batch else SETTLE_N

    async def on_a_stream(fresh: Callable[[Row], Awaitable[Any]]) -> None:
        # a new server: send everything, end the input at once; all answered, then a clean exit
        conn, finished = await fresh(row)
        calls = [settle_calls(row, n) for _ in range(3 if row.batch else 1)]
        reqs = [[request(row, name, args) for name, args in group] for group in calls]
        await conn.send_only(reqs if row.batch else reqs[0])
        replies = await conn.end_input()
        flat = [q for group in reqs for q in group]
        texts = [args["text"] for group in calls for _, args in group]
        for text, resp in zip(texts, settled(flat, replies), strict=True):
            assert value(row, resp) == {"echo": text}
        assert await finished() == 0, "the server did not end cleanly after the end of its input"

    async def at_once(conn: Conn) -> None:
        calls = settle_calls(row, n)
        for (_, args), resp in zip(calls, await call_all(row, conn, calls), strict=True):
            assert value(row, resp) == {"echo": args["text"]}

    if row.stream:
        fresh = servers.get(row.server).fresh
        assert fresh is not None
        servers.run(on_a_stream(fresh))
    else:
        servers.run(at_once(servers.conn(row)))


# ---------------------------------------------------------------- every way in has a row

#: Packages that serve nothing (the checker, the proxies, the demos, the CLI's commands).
NOT_SERVING = ("check", "proxy", "demos", "commands")
#: The methods of Dispatcher and MCPServer that are ways in (the prefix as a whole word:
#: ``serve_stateless`` is one, ``server_info`` is not).
WAY_IN_METHOD = re.compile(r"(serve|run|handle|create_peer|test_client)(_\w+)?")


def public_modules() -> list[types.ModuleType]:
    found = [sturdyrpc]
    for info in pkgutil.walk_packages(sturdyrpc.__path__, "sturdyrpc."):
        parts = info.name.split(".")[1:]
        if parts[0] in NOT_SERVING or any(p.startswith("_") for p in parts):
            continue
        found.append(importlib.import_module(info.name))
    return found


def _serving_type(hint: Any) -> bool:
    if inspect.isclass(hint) and issubclass(hint, (Dispatcher, MCPServer)):
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType, typing.Annotated):
        return any(_serving_type(a) for a in typing.get_args(hint))
    return False


def takes_a_server(fn: Any, namespace: dict[str, Any]) -> bool:
    """Whether a parameter of ``fn`` is annotated with Dispatcher or MCPServer (or a subclass,
    or an optional one). Names imported only for type checking resolve from ``namespace``."""
    try:
        hints = typing.get_type_hints(fn, globalns={**namespace, **getattr(fn, "__globals__", {})})
        return any(_serving_type(h) for name, h in hints.items() if name != "return")
    except Exception:
        pass
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, {**namespace, **fn.__globals__})  # noqa: S307 - an annotation of our own source
            except Exception:
                if re.search(r"\b(Dispatcher|MCPServer)\b", ann):
                    return True
                continue
        if _serving_type(ann):
            return True
    return False


def ways_in() -> dict[Any, str]:
    """Every serving entry point: the object, and its shortest public name."""
    modules = public_modules()
    namespace: dict[str, Any] = {}
    for name, mod in list(sys.modules.items()):
        if name.startswith("sturdyrpc") and mod is not None:
            for k, v in vars(mod).items():
                if inspect.isclass(v) and getattr(v, "__module__", "").startswith("sturdyrpc"):
                    namespace.setdefault(k, v)
    names: dict[Any, list[str]] = {}
    for mod in modules:
        for attr in {*vars(mod), *getattr(mod, "__all__", ())}:
            if attr.startswith("_"):
                continue
            obj = getattr(mod, attr, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            home = getattr(obj, "__module__", "") or ""
            if not home.startswith("sturdyrpc.") or home.split(".")[1] in NOT_SERVING:
                continue
            names.setdefault(obj, []).append(f"{mod.__name__}.{attr}")
    found: dict[Any, str] = {}
    for obj, paths in names.items():
        fn = obj.__init__ if inspect.isclass(obj) else obj
        if inspect.isfunction(fn) and takes_a_server(fn, namespace):
            found[obj] = min(paths, key=lambda p: (p.count("."), p))
    for cls in (Dispatcher, MCPServer):
        home = min(names[cls], key=lambda p: (p.count("."), p))
        for attr in dir(cls):
            if WAY_IN_METHOD.fullmatch(attr):
                found[_unbound(getattr(cls, attr))] = f"{home}.{attr}"
    return found


def _unbound(obj: Any) -> Any:
    return getattr(obj, "__func__", obj)


def resolve(name: str) -> Any:
    try:
        return _unbound(pkgutil.resolve_name(name))
    except (ImportError, AttributeError, ValueError) as exc:
        raise AssertionError(f"{name!r} names nothing: {exc}") from None


def test_every_way_in_has_a_row() -> None:
    found = ways_in()
    # the discovery itself must see the ways in everyone knows, or it proves nothing
    for known in ("sturdyrpc.run_stdio", "sturdyrpc.Peer", "sturdyrpc.mcp.MCPServer.test_client",
                  "sturdyrpc.mcp_http.mcp_http_app", "sturdyrpc.transports.http.JSONRPCHTTPApp"):
        assert resolve(known) in found, f"the discovery missed {known}"
    covered: dict[Any, list[str]] = {}
    for row in ROWS:
        for name in row.covers:
            covered.setdefault(resolve(name), []).append(row.id)
    exempt = {resolve(name): name for name in NOT_A_WAY_IN}
    for obj, name in exempt.items():
        assert obj in found, f"NOT_A_WAY_IN names {name}, which takes no server any more: drop it"
        assert obj not in covered, f"{name} is both covered by {covered[obj]} and said to be no way in"
    missing = sorted(name for obj, name in found.items() if obj not in covered and obj not in exempt)
    assert not missing, ("ways in that no row of the path table covers (add a row, or name them in the covers of the "
                         f"row whose path they are): {missing}")
