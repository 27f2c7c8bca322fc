"""Plain JSON-RPC over HTTP on a real uvicorn (127.0.0.1): the executor's error policy, the
server-wide cap of running requests, the same message limits as stdio, and the bounded,
timed request head of serve_http."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import msgspec
import pytest

from sturdyrpc import Dispatcher, Limits
from sturdyrpc.transports.asgi import HTTPSecurity
from sturdyrpc.transports.http import JSONRPCHTTPApp
from sturdyrpc.transports.serve_http import uvicorn_config

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("httptools")


class Served:
    def __init__(self, server: Any, port: int) -> None:
        self.server = server
        self.port = port
        self.url = f"http://127.0.0.1:{port}/"

    def connections(self) -> int:
        return len(self.server.server_state.connections)


@contextmanager
def serve(app: Any, **options: Any) -> Iterator[Served]:
    """Run ``app`` on uvicorn (through serve_http's config) in a thread on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield Served(server, port)
    finally:
        server.should_exit = True
        thread.join(10)


def post(url: str, body: Any) -> httpx.Response:
    return httpx.post(url, content=msgspec.json.encode(body), headers={"content-type": "application/json"}, timeout=20)


def assert_internal_error(reply: Any, id_: Any) -> None:
    assert reply["id"] == id_
    assert reply["error"]["code"] == -32603
    assert len(reply["error"]["data"]["incident"]) == 8


def raising_rpc(limits: Limits | None = None) -> Dispatcher:
    rpc = Dispatcher(limits or Limits())

    @rpc.method
    async def async_exit() -> None:
        await asyncio.sleep(0)
        sys.exit(3)

    @rpc.method
    async def async_exit_at_once() -> None:
        sys.exit(3)

    @rpc.method
    def sync_interrupt() -> None:
        raise KeyboardInterrupt

    @rpc.method(blocking=False)
    def inline_interrupt() -> None:
        raise KeyboardInterrupt

    @rpc.method
    async def async_generator_exit() -> None:
        await asyncio.sleep(0)
        raise GeneratorExit

    @rpc.method
    def sync_generator_exit() -> None:
        raise GeneratorExit

    @rpc.method(blocking=False)
    def echo(value: Any) -> Any:
        return value

    return rpc


RAISING = ["async_exit", "async_exit_at_once", "sync_interrupt", "inline_interrupt", "async_generator_exit", "sync_generator_exit"]


def test_async_handler_calling_sys_exit_over_http_is_answered_and_server_keeps_serving() -> None:
    with serve(JSONRPCHTTPApp(raising_rpc())) as s:
        for i, method in enumerate(RAISING):
            r = post(s.url, {"jsonrpc": "2.0", "method": method, "id": i})
            assert r.status_code == 200, (method, r.status_code, r.text)
            assert_internal_error(r.json(), i)
            # ... and the next request is served.
            r = post(s.url, {"jsonrpc": "2.0", "method": "echo", "params": [method], "id": "next"})
            assert r.json() == {"jsonrpc": "2.0", "result": method, "id": "next"}
        r = post(s.url, [{"jsonrpc": "2.0", "method": m, "id": m} for m in RAISING])
        assert r.status_code == 200
        replies = r.json()
        assert sorted(m["id"] for m in replies) == sorted(RAISING)
        for m in replies:
            assert_internal_error(m, m["id"])
        assert s.server.started and not s.server.should_exit


def slow_rpc(limits: Limits, stats: dict[str, int]) -> Dispatcher:
    rpc = Dispatcher(limits)

    @rpc.method
    async def slow(i: int) -> int:
        stats["now"] += 1
        stats["peak"] = max(stats["peak"], stats["now"])
        stats["ran"] += 1
        try:
            await asyncio.sleep(0.002)
        finally:
            stats["now"] -= 1
        return i

    return rpc


def test_concurrent_batches_over_http_never_run_more_than_max_server_in_flight_and_the_rest_get_503() -> None:
    stats = {"now": 0, "peak": 0, "ran": 0}
    limit = 20  # below the number of batches: even if every POST arrived at once, some must get 503
    app = JSONRPCHTTPApp(slow_rpc(Limits(max_server_in_flight=limit, max_in_flight=8), stats))
    batch = [{"jsonrpc": "2.0", "method": "slow", "params": [i], "id": i} for i in range(1000)]
    body = msgspec.json.encode(batch)

    async def clients(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=40)) as client:
            return list(await asyncio.gather(*(
                client.post(url, content=body, headers={"content-type": "application/json"}) for _ in range(40)
            )))

    with serve(app) as s:
        responses = asyncio.run(clients(s.url))
        statuses = [r.status_code for r in responses]
        served = [r for r in responses if r.status_code == 200]
        busy = [r for r in responses if r.status_code == 503]
        assert len(served) + len(busy) == 40, statuses
        assert served and busy, statuses
        for r in served:
            assert sorted(m["result"] for m in r.json()) == list(range(1000))
        for r in busy:
            assert r.headers["retry-after"] == "1"
            err = r.json()
            assert err["id"] is None and -32099 <= err["error"]["code"] <= -32000
        assert stats["peak"] <= limit, stats
        assert stats["ran"] == 1000 * len(served)  # a refused batch ran nothing
        assert app.admission.in_use == 0
        # Once the load is gone the server serves again.
        r = post(s.url, {"jsonrpc": "2.0", "method": "slow", "params": [7], "id": 1})
        assert r.json() == {"jsonrpc": "2.0", "result": 7, "id": 1}


def test_one_http_batch_larger_than_the_server_cap_runs_in_order_within_the_cap() -> None:
    stats = {"now": 0, "peak": 0, "ran": 0}
    app = JSONRPCHTTPApp(slow_rpc(Limits(max_server_in_flight=5), stats))
    with serve(app) as s:
        r = post(s.url, [{"jsonrpc": "2.0", "method": "slow", "params": [i], "id": i} for i in range(200)])
        assert r.status_code == 200
        assert sorted(m["result"] for m in r.json()) == list(range(200))
    assert stats["peak"] <= 5 and stats["ran"] == 200


def test_http_applies_max_batch_max_depth_and_max_message_bytes_as_stdio_does() -> None:
    # max_batch and max_depth: the reply stdio sends, as a 200. max_message_bytes bounds the body
    # (the smaller of it and HTTPSecurity.max_body_bytes): 413 with the error stdio sends, before
    # the body is decoded, as the MCP endpoint answers (both sit behind the same HTTP layer).
    limits = Limits(max_batch=3, max_depth=5, max_message_bytes=2000)
    rpc = raising_rpc(limits)
    app = JSONRPCHTTPApp(rpc, security=HTTPSecurity(max_body_bytes=10_000))
    bodies = [
        (200, msgspec.json.encode([{"jsonrpc": "2.0", "method": "echo", "params": [1], "id": i} for i in range(4)])),
        (200, b'{"jsonrpc":"2.0","method":"echo","params":[[[[[[[1]]]]]]],"id":1}'),
        (413, msgspec.json.encode({"jsonrpc": "2.0", "method": "echo", "params": ["x" * 3000], "id": 1})),
    ]
    with serve(app) as s:
        for status, body in bodies:
            r = httpx.post(s.url, content=body, headers={"content-type": "application/json"})
            expected = rpc.handle_sync(body)
            assert expected is not None and msgspec.json.decode(expected)["error"]["code"] == -32600
            assert r.status_code == status and r.json() == msgspec.json.decode(expected)


def raw_exchange(port: int, data: bytes, *, read_timeout: float = 10.0) -> bytes:
    """Send ``data`` (as far as the server takes it) and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.settimeout(read_timeout)
        try:
            c.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        try:
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                out += chunk
        except ConnectionResetError:
            pass
        return out


def test_http_request_header_of_200_kib_gets_431_and_the_server_keeps_serving() -> None:
    with serve(JSONRPCHTTPApp(raising_rpc())) as s:
        head = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Big: " + b"a" * (200 * 1024) + b"\r\n\r\n"
        out = raw_exchange(s.port, head)
        assert out.startswith(b"HTTP/1.1 431 "), out[:200]
        # A request line alone over the bound is refused the same way.
        out = raw_exchange(s.port, b"GET /" + b"a" * (100 * 1024) + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 431 "), out[:200]
        r = post(s.url, {"jsonrpc": "2.0", "method": "echo", "params": ["alive"], "id": 1})
        assert r.json()["result"] == "alive"
        deadline = time.monotonic() + 5
        while s.connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.connections() == 0  # nothing of the refused connections is kept


def test_http_request_head_just_under_the_bound_with_a_body_is_served() -> None:
    with serve(JSONRPCHTTPApp(raising_rpc()), max_header_bytes=4096) as s:
        body = msgspec.json.encode({"jsonrpc": "2.0", "method": "echo", "params": ["y" * 100_000], "id": 1})
        start = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
        start += str(len(body)).encode() + b"\r\nX-Pad: "
        head = start + b"p" * (4096 - len(start) - 4) + b"\r\n\r\n"
        assert len(head) == 4096
        out = raw_exchange(s.port, head + body)
        assert out.startswith(b"HTTP/1.1 200 "), out[:200]
        assert b'"result":"yyyy' in out


def test_http_client_sending_half_a_request_line_is_disconnected_after_the_header_timeout() -> None:
    with serve(JSONRPCHTTPApp(raising_rpc()), header_timeout=0.5) as s:
        t0 = time.monotonic()
        out = raw_exchange(s.port, b"POST /som", read_timeout=10)
        elapsed = time.monotonic() - t0
        assert 0.4 <= elapsed < 5, elapsed
        assert out == b"" or out.startswith(b"HTTP/1.1 408 "), out[:200]
        # A connection that sends nothing at all is closed too.
        t0 = time.monotonic()
        out = raw_exchange(s.port, b"", read_timeout=10)
        assert 0.4 <= time.monotonic() - t0 < 5
        # A slow handler is not the client's delay: the timer does not cut its response.
        r = post(s.url, {"jsonrpc": "2.0", "method": "echo", "params": ["fine"], "id": 1})
        assert r.json()["result"] == "fine"
        deadline = time.monotonic() + 5
        while s.connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.connections() == 0


def test_http_client_disconnecting_mid_batch_cancels_it_and_gives_every_slot_back() -> None:
    started: list[int] = []
    rpc = Dispatcher(Limits(max_server_in_flight=4))

    @rpc.method
    async def forever(i: int) -> None:
        started.append(i)
        await asyncio.sleep(60)

    app = JSONRPCHTTPApp(rpc)
    body = msgspec.json.encode([{"jsonrpc": "2.0", "method": "forever", "params": [i], "id": i} for i in range(10)])
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]}
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        gone = asyncio.Event()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(msg: dict[str, Any]) -> None:
            sent.append(msg)

        call = asyncio.ensure_future(app(scope, receive, send))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(started) == 4:
                break
        assert app.admission.in_use == 4 and app.admission.full
        # Meanwhile another POST is refused with 503, and runs nothing.
        other: list[dict[str, Any]] = []

        async def other_send(msg: dict[str, Any]) -> None:
            other.append(msg)

        async def other_receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, other_receive, other_send)
        assert other[0]["status"] == 503 and (b"retry-after", b"1") in other[0]["headers"]
        gone.set()
        await asyncio.wait_for(call, 5)
        await asyncio.sleep(0.05)
        assert app.admission.in_use == 0 and not app.admission.full

    asyncio.run(main())
    assert sorted(started) == [0, 1, 2, 3]
    assert sent == []  # nobody is left to answer


def test_pipelined_and_keep_alive_requests_each_get_the_whole_header_bound() -> None:
    # The bound is per request head: several small requests in one read, or many on one
    # keep-alive connection, must not add up to a refusal; an idle keep-alive connection is
    # uvicorn's keep-alive timer's business, not the header timer's.
    body = b'{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}'
    one = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with serve(JSONRPCHTTPApp(raising_rpc()), max_header_bytes=300, header_timeout=0.5) as s:
        with socket.create_connection(("127.0.0.1", s.port)) as c:
            c.settimeout(10)
            c.sendall(one * 8)  # about 1 KiB in one read, over the 300-byte bound in total

            def read_replies(n: int) -> bytes:
                got = b""
                while got.count(b'"result":1') < n:
                    chunk = c.recv(65536)
                    assert chunk, got
                    got += chunk
                return got

            assert read_replies(8).count(b"HTTP/1.1 200") == 8
            time.sleep(1.0)  # longer than header_timeout, shorter than the keep-alive timeout
            c.sendall(one)
            assert read_replies(1).startswith(b"HTTP/1.1 200")
        with httpx.Client() as client:
            for i in range(20):
                r = client.post(s.url, json={"jsonrpc": "2.0", "method": "echo", "params": [i], "id": i})
                assert r.json()["result"] == i


def test_a_response_head_waits_for_its_body_only_within_a_turn_of_the_loop(loop_name: str) -> None:
    """The head held back for the body (one write per JSON response) still reaches the client
    at once when the body comes later: an SSE stream's status arrives before its first event."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        streamed = scope["path"] == "/stream"
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream" if streamed else b"application/json")]})
        if streamed:
            await asyncio.sleep(0.8)
        await send({"type": "http.response.body", "body": b"data: {}\n\n" if streamed else b"{}"})

    with serve(app, loop=loop_name) as s, socket.create_connection(("127.0.0.1", s.port)) as c:
        c.settimeout(10)
        c.sendall(b"GET /json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while not got.endswith(b"0\r\n\r\n"):
            got += c.recv(65536)
        assert got.startswith(b"HTTP/1.1 200 ") and b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n" in got
        c.sendall(b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        t0 = time.monotonic()
        got = b""
        while b"\r\n\r\n" not in got:
            got += c.recv(65536)
        assert time.monotonic() - t0 < 0.6, "the head waited for the body"
        assert got.startswith(b"HTTP/1.1 200 ") and b"data:" not in got
        while not got.endswith(b"0\r\n\r\n"):
            got += c.recv(65536)
        assert b"data: {}\n\n" in got
