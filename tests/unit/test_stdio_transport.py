"""The one stdio transport (``transports.stdio.StdioTransport``), in process over OS pipes, and the
plain and MCP stdio servers that use it, in subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
from support import SERVERS
from support.peer import aio
from support.process import ServerProcess

from sturdyrpc.framing import FrameTooLarge, encode_content_length
from sturdyrpc.transports.stdio import Frame, StdioTransport

pytestmark = pytest.mark.timeout(60)



class Pipes:
    """stdin and stdout of a transport under test: ``feed`` writes its stdin, ``read_all`` its stdout."""

    def __init__(self) -> None:
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.in_w, view) :]

    def end_input(self) -> None:
        if self.in_w >= 0:
            os.close(self.in_w)
            self.in_w = -1

    def read_all(self) -> bytes:
        """Everything written to stdout (call once the transport has closed: this closes our
        copy of its descriptor so that the end is seen)."""
        if self.out_w >= 0:
            os.close(self.out_w)
            self.out_w = -1
        chunks = []
        while True:
            data = os.read(self.out_r, 1 << 16)
            if not data:
                return b"".join(chunks)
            chunks.append(data)

    def close(self) -> None:
        for fd in (self.in_r, self.in_w, self.out_r, self.out_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


@asynccontextmanager
async def transport(**kw: Any) -> AsyncIterator[tuple[StdioTransport, Pipes]]:
    pipes = Pipes()
    t = StdioTransport(pipes.in_r, pipes.out_w, **kw)
    await t.start()
    try:
        yield t, pipes
    finally:
        t.close_nowait()
        pipes.close()


async def receive_all(t: StdioTransport, timeout: float = 10.0) -> list[Frame]:
    out: list[Frame] = []
    while True:
        frame = await asyncio.wait_for(t.receive(), timeout)
        if frame is None:
            return out
        out.append(frame)


def line(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","method":"m","params":[%d],"id":%d}' % (i, i)


# ------------------------------------------------------------------ in process


@aio
async def test_every_frame_read_before_eof_is_received_including_a_last_line_without_newline() -> None:
    async with transport() as (t, pipes):
        pipes.feed(b"".join(line(i) + b"\n" for i in range(300)) + line(300))
        pipes.end_input()
        frames = await receive_all(t)
        assert frames == [line(i) for i in range(301)]
        assert t.input_done


@aio
async def test_framing_is_chosen_by_argument_content_length() -> None:
    async with transport(framing="content-length") as (t, pipes):
        pipes.feed(encode_content_length(line(1)) + encode_content_length(line(2)))
        pipes.end_input()
        assert await receive_all(t) == [line(1), line(2)]
        await t.send(b'{"x":1}')
        await t.close()
        assert pipes.read_all() == b'Content-Length: 7\r\n\r\n{"x":1}'


@aio
async def test_frames_are_bounded_an_oversized_one_is_reported_and_the_next_received() -> None:
    async with transport(max_frame=100) as (t, pipes):
        pipes.feed(b'{"pad":"' + b"x" * 5000 + b'"}\n' + line(1) + b"\n")
        pipes.end_input()
        frames = await receive_all(t)
        assert len(frames) == 2 and isinstance(frames[0], FrameTooLarge) and frames[1] == line(1)


@aio
async def test_every_reply_written_before_close_leaves_even_when_the_reader_is_slow() -> None:
    async with transport() as (t, pipes):
        payload = b'{"r":"' + b"y" * 1000 + b'"}'
        for _ in range(3000):  # 3 MB: far more than the pipe holds
            t.write(payload)
        got: list[bytes] = []

        def slow_reader() -> None:
            time.sleep(0.5)
            chunks = []
            while sum(map(len, chunks)) < 3000 * (len(payload) + 1):
                chunks.append(os.read(pipes.out_r, 1 << 16))
            got.append(b"".join(chunks))

        th = threading.Thread(target=slow_reader)
        th.start()
        t0 = time.monotonic()
        await asyncio.wait_for(t.close(), 20)
        assert time.monotonic() - t0 > 0.3  # close() waited for the reader to take it all
        await asyncio.to_thread(th.join, 20)
        assert got == [(payload + b"\n") * 3000]


@aio
async def test_reading_pauses_while_frames_wait_to_be_received() -> None:
    async with transport(max_buffered=8) as (t, pipes):
        data = b"".join(line(i) + b"\n" for i in range(40_000))  # ~2 MB
        writer = threading.Thread(target=pipes.feed, args=(data,), daemon=True)
        writer.start()
        await asyncio.sleep(0.5)
        # Nobody receives: the transport stopped reading and the pipe holds the client back.
        assert writer.is_alive()
        first = await asyncio.wait_for(t.receive(), 5)
        assert first == line(0)
        rest = []
        for _ in range(39_999):
            f = await asyncio.wait_for(t.receive(), 5)
            assert isinstance(f, bytes)
            rest.append(f)
        assert rest[-1] == line(39_999)
        await asyncio.to_thread(writer.join, 5)
        assert not writer.is_alive()


@aio
async def test_push_mode_holds_frames_in_order_and_delivers_them_when_released() -> None:
    async with transport() as (t, pipes):
        got: list[Frame] = []

        def consumer(frame: Frame) -> None:
            got.append(frame)
            if len(got) == 3:
                t.hold(True)

        t.deliver(consumer)
        pipes.feed(b"".join(line(i) + b"\n" for i in range(10)))
        pipes.end_input()
        await asyncio.sleep(0.2)
        assert got == [line(0), line(1), line(2)]
        assert not t.input_done  # EOF was seen, but frames still wait
        t.hold(False)
        await asyncio.wait_for(t.wait_input_done(), 5)
        assert got == [line(i) for i in range(10)]


@aio
async def test_send_raises_once_the_reader_of_stdout_is_gone() -> None:
    async with transport() as (t, pipes):
        os.close(pipes.out_r)
        pipes.out_r = -1
        with pytest.raises(BrokenPipeError):
            for _ in range(100):
                await asyncio.wait_for(t.send(b'{"x":"' + b"z" * 100_000 + b'"}'), 5)
        assert not t.send_nowait(b"{}")


# ------------------------------------------------------------------ subprocesses


def test_plain_stdio_never_runs_more_than_max_in_flight_from_one_write_and_answers_all() -> None:
    n = 2000
    p = ServerProcess([sys.executable, str(SERVERS / "stdio_admission_server.py")])
    try:
        data = b"".join(b'{"jsonrpc":"2.0","method":"sleep","params":[0.005],"id":%d}\n' % i for i in range(n))
        writer = threading.Thread(target=p.send, args=(data,), daemon=True)  # one write
        writer.start()
        writer.join(30)
        p.close_stdin()
        replies = [p.recv(timeout=30) for _ in range(n)]
        assert sorted(r["id"] for r in replies) == list(range(n))
        assert max(r["result"] for r in replies) <= 32
        assert p.wait(10) == 0
    finally:
        p.stop()


def _mcp_start(p: ServerProcess) -> None:
    p.send_line(
        msgspec.json.encode(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            }
        )
    )
    assert p.recv(timeout=10)["id"] == 0
    p.send_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')


def _tool_call(id_: int, name: str, arguments: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}})


def test_mcp_stdio_exits_promptly_on_sigterm_with_a_blocking_sync_tool_in_flight() -> None:
    p = ServerProcess([sys.executable, str(SERVERS / "mcp_blocking_tool_server.py")])
    try:
        _mcp_start(p)
        p.send_line(_tool_call(1, "block", {"seconds": 0.01}))
        assert p.recv(timeout=10)["result"]["content"][0]["text"] == "done"
        p.send_line(_tool_call(2, "block", {"seconds": 30}))
        time.sleep(0.3)
        t0 = time.monotonic()
        p.proc.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
        assert time.monotonic() - t0 < 3
    finally:
        p.stop()


def test_mcp_stdio_at_eof_answers_every_call_in_flight_and_flushes_before_exiting() -> None:
    # More calls than Limits.max_in_flight (256), taking longer in all than the peer's close
    # deadline (5 s): a deadline at EOF would cut some off, held ones would be refused.
    n = 300
    p = ServerProcess([sys.executable, str(SERVERS / "mcp_blocking_tool_server.py")])
    try:
        _mcp_start(p)
        p.send(b"".join(_tool_call(i, "slow", {"seconds": 2.6, "n": i}) + b"\n" for i in range(1, n + 1)))
        p.close_stdin()
        replies = [p.recv(timeout=30) for _ in range(n)]
        assert sorted(r["id"] for r in replies) == list(range(1, n + 1))
        assert all(r["result"]["content"][0]["text"] == str(r["id"]) for r in replies), replies
        assert p.wait(10) == 0
    finally:
        p.stop()
