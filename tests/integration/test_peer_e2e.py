"""A client Peer driving ``sturdyrpc demo`` in a subprocess over real pipes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest
from support.peer import aio

from sturdyrpc import InvalidParams, MethodNotFound
from sturdyrpc.client import connect_stdio, connect_tcp, connect_unix
from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.errors import InternalError
from sturdyrpc.peer import ConnectionClosed, Peer, RequestTimeout
from sturdyrpc.transports.streams import StreamTransport

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "sturdyrpc", "demo"]


@aio
async def test_basic_calls_and_errors() -> None:
    async with connect_stdio(DEMO) as conn:
        p = conn.peer
        assert await p.request("subtract", [42, 23]) == 19
        assert await p.request("subtract", {"minuend": 42, "subtrahend": 23}) == 19
        assert await p.request("echo", {"value": "7"}, id="7") == "7"
        with pytest.raises(MethodNotFound):
            await p.request("nope")
        with pytest.raises(InvalidParams):
            await p.request("subtract", [1])
        with pytest.raises(InternalError) as e:
            await p.request("fail")
        assert "SECRET" not in repr(e.value.data)
        await p.notify("record", ["a"])
        await p.notify("record", ["b"])
        assert await p.request("recorded") == ["a", "b"]
    assert conn.returncode == 0


@aio
async def test_batch_over_pipe() -> None:
    async with connect_stdio(DEMO) as conn:
        res = await conn.peer.batch([("subtract", [3, 1], False), ("record", ["c"], True), ("nope", None, False)])
        assert res[0] == 2 and res[1] is None and isinstance(res[2], MethodNotFound)


@aio
async def test_pipelining_and_out_of_order_replies() -> None:
    async with connect_stdio(DEMO) as conn:
        p = conn.peer
        order: list[str] = []

        async def timed(name: str, seconds: float) -> None:
            assert await p.request("sleep", {"seconds": seconds, "value": name}) == name
            order.append(name)

        await asyncio.gather(timed("slow", 0.3), timed("mid", 0.15), timed("fast", 0.0))
        assert order == ["fast", "mid", "slow"]
        # many requests pipelined on one pipe
        start = time.perf_counter()
        res = await asyncio.gather(*(p.request("subtract", [i, 1]) for i in range(3000)))
        assert res == [i - 1 for i in range(3000)]
        assert time.perf_counter() - start < 10


@aio
async def test_timeout_against_sleep_sends_cancel() -> None:
    async with connect_stdio(DEMO, shutdown_grace=0.3) as conn:
        p = conn.peer
        start = time.perf_counter()
        with pytest.raises(RequestTimeout):
            await p.request("sleep", {"seconds": 30, "value": 1}, timeout=0.2)
        assert time.perf_counter() - start < 1.0
        assert p.stats["timeouts"] == 1
        # a reply that comes after the timeout is ignored (counted), and nothing else is disturbed
        with pytest.raises(RequestTimeout):
            await p.request("sleep", {"seconds": 0.3, "value": "late"}, timeout=0.1)
        assert await p.request("echo", ["alive"]) == "alive"
        for _ in range(100):
            if p.stats["late_replies"]:
                break
            await asyncio.sleep(0.02)
        assert p.stats["late_replies"] == 1 and p.stats["unmatched_replies"] == 0


@aio
async def test_stdin_closed_while_calls_in_flight() -> None:
    async with connect_stdio(DEMO, shutdown_grace=0.3) as conn:
        p = conn.peer
        tasks = [asyncio.ensure_future(p.request("sleep", {"seconds": 0.2, "value": i})) for i in range(5)]
        tasks += [asyncio.ensure_future(p.request("sleep", {"seconds": 30})) for _ in range(3)]
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        # Closing: the server drains what it can; whatever is left fails, nothing hangs.
        await p.close(1.0)
        res = await asyncio.gather(*tasks, return_exceptions=True)
        assert time.perf_counter() - start < 3
        assert res[:5] == [0, 1, 2, 3, 4]
        assert all(isinstance(r, ConnectionClosed) for r in res[5:])


@aio
async def test_server_killed_while_calls_in_flight() -> None:
    async with connect_stdio(DEMO) as conn:
        p = conn.peer
        tasks = [asyncio.ensure_future(p.request("sleep", {"seconds": 30}, timeout=None)) for _ in range(10)]
        await asyncio.sleep(0.1)
        start = time.perf_counter()
        conn.process.send_signal(signal.SIGKILL)
        res = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert time.perf_counter() - start < 2
        assert all(isinstance(r, ConnectionClosed) for r in res), res
        with pytest.raises(ConnectionClosed):
            await p.request("echo", ["x"])
    assert conn.returncode == -signal.SIGKILL


@aio
async def test_server_that_exits_with_a_grandchild_holding_stdout() -> None:
    script = "head -c1 >/dev/null; sleep 30 & echo bye >&2; exit 3"
    async with connect_stdio(["sh", "-c", script], default_timeout=None) as conn:
        start = time.perf_counter()
        with pytest.raises(ConnectionClosed) as e:
            await conn.peer.request("x")
        assert time.perf_counter() - start < 3
        assert "code 3" in str(e.value)
    assert "bye" in conn.stderr_text()


@aio
async def test_server_that_ignores_stdin_close_is_terminated() -> None:
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    start = time.perf_counter()
    async with connect_stdio([sys.executable, "-c", code], shutdown_grace=0.3) as conn:
        await asyncio.sleep(0.2)  # let it install the handler
    assert conn.returncode == -signal.SIGKILL
    assert time.perf_counter() - start < 5


@aio
async def test_cannot_start() -> None:
    with pytest.raises(OSError):
        async with connect_stdio(["/nonexistent/program"]):
            pass


@aio
async def test_content_length_framing() -> None:
    async with connect_stdio([*DEMO, "--framing", "content-length"], framing="content-length") as conn:
        assert await conn.peer.request("echo", ["héllo\n"]) == "héllo\n"


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    async with Peer(StreamTransport(reader, writer), make_demo(), name="srv") as peer:
        await peer.wait_closed()


@aio
async def test_tcp_and_unix() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with connect_tcp("127.0.0.1", port) as conn:
        assert await asyncio.gather(*(conn.peer.request("subtract", [i, 1]) for i in range(100))) == [i - 1 for i in range(100)]
    server.close()
    await server.wait_closed()
    path = f"/tmp/sturdyrpc-test-{os.getpid()}.sock"
    userver = await asyncio.start_unix_server(_serve, path)
    try:
        async with connect_unix(path) as conn:
            assert await conn.peer.request("echo", ["unix"]) == "unix"
    finally:
        userver.close()
        await userver.wait_closed()
        os.unlink(path)


PEER_SERVER = """
import asyncio, sys
from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.peer import Peer, PeerContext
from sturdyrpc.transports.stdio import stdio_transport

async def main():
    rpc = make_demo()

    @rpc.method
    async def ask(ctx: PeerContext) -> object:
        print("a stray print")  # must land on stderr, not in the protocol stream
        return await ctx.request("client_side", {"q": 1})

    async with Peer(await stdio_transport(FRAMING), rpc, name="srv") as peer:
        await peer.wait_closed()

asyncio.run(main())
"""


@pytest.mark.parametrize("framing", ["line", "content-length"])
@aio
async def test_peer_server_on_stdio_calls_back(framing: str) -> None:
    from sturdyrpc import Dispatcher

    client_rpc = Dispatcher()

    @client_rpc.method(blocking=False)
    def client_side(q: int) -> str:
        return f"answer {q}"

    code = PEER_SERVER.replace("FRAMING", repr(framing))
    async with connect_stdio([sys.executable, "-c", code], dispatcher=client_rpc, framing=framing) as conn:  # type: ignore[arg-type]
        assert await asyncio.gather(*(conn.peer.request("ask") for _ in range(20))) == ["answer 1"] * 20
        assert await conn.peer.request("subtract", [5, 3]) == 2
    assert conn.returncode == 0
    assert "a stray print" in conn.stderr_text()
