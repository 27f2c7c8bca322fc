"""The stdio transport's reads and writes under load: bounded reads that keep long messages whole,
replies written at once leaving in order (in pieces while a long chunk is answered), and a
consumer that fails on one frame."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from support.peer import aio

from sturdyrpc.framing import encode_content_length
from sturdyrpc.transports.fd import READ_SIZE, FdReader, FdWriter
from sturdyrpc.transports.stdio import Frame, StdioTransport

pytestmark = pytest.mark.timeout(60)


def line(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","method":"m","params":[%d],"id":%d}' % (i, i)


def read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    try:
        while True:
            chunks.append(os.read(fd, 1 << 16))
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, True)
    return b"".join(chunks)


@asynccontextmanager
async def transport(**kw: Any) -> AsyncIterator[tuple[StdioTransport, int, int]]:
    """A started transport; yields it, the write end of its stdin and the read end of its stdout."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    t = StdioTransport(in_r, out_w, **kw)
    await t.start()
    try:
        yield t, in_w, out_r
    finally:
        t.close_nowait()
        for fd in (in_r, in_w, out_r, out_w):
            try:
                os.close(fd)
            except OSError:
                pass


async def receive_all(t: StdioTransport) -> list[Frame]:
    out: list[Frame] = []
    while (frame := await asyncio.wait_for(t.receive(), 10)) is not None:
        out.append(frame)
    return out


def feed_in_thread(fd: int, data: bytes) -> asyncio.Future[None]:
    def write() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.close(fd)

    return asyncio.get_running_loop().run_in_executor(None, write)


@aio
async def test_messages_longer_than_one_read_arrive_whole_and_in_order() -> None:
    big = b'{"pad":"' + b"x" * (5 * READ_SIZE + 123) + b'"}'
    data = b"".join(line(i) + b"\n" for i in range(3000)) + big + b"\n" + line(3000) + b"\n"
    async with transport(max_frame=1 << 22) as (t, in_w, _out_r):
        writing = feed_in_thread(in_w, data)
        frames = await receive_all(t)
        await writing
    assert frames == [line(i) for i in range(3000)] + [big, line(3000)]


@aio
async def test_fd_reader_reports_the_end_after_close_and_reads_nothing_more() -> None:
    r, w = os.pipe()
    got: list[bytes] = []
    ends: list[int] = []
    reader = FdReader(r, got.append, lambda: ends.append(1))
    try:
        await reader.start()
        os.write(w, b"one")
        await asyncio.sleep(0.05)
        reader.pause()
        os.write(w, b"two")
        await asyncio.sleep(0.05)
        assert got == [b"one"]  # paused: nothing read
        reader.resume()
        await asyncio.sleep(0.05)
        assert got == [b"one", b"two"]
        reader.close()
        os.write(w, b"three")
        await asyncio.sleep(0.05)
        assert got == [b"one", b"two"] and ends
        reader.resume()  # after close: stays closed
        await asyncio.sleep(0.05)
        assert got == [b"one", b"two"]
    finally:
        os.close(r)
        os.close(w)


@aio
async def test_fd_writer_write_lines_joins_payloads_with_newlines_in_order() -> None:
    r, w = os.pipe()
    writer = FdWriter(w)
    try:
        await writer.start()
        writer.write_lines([])
        writer.write_line(b"a")
        writer.write_lines([b"b", b"c"])
        writer.write(b"d\n")
        await asyncio.sleep(0.05)
        assert read_available(r) == b"a\nb\nc\nd\n"
    finally:
        writer.close()
        os.close(r)


@aio
async def test_replies_written_while_a_long_chunk_is_delivered_leave_in_order_and_in_pieces() -> None:
    """Push mode: a consumer that answers each frame at once (a runner's inline handlers) has
    every reply of a long chunk leave in order, the first ones handed to the system before the
    rest are delivered (so the client can read them meanwhile)."""
    out_seen_at: dict[int, bytes] = {}
    out_fd: list[int] = []

    async with transport() as (t, in_w, out_r):
        out_fd.append(out_r)

        def answer(frame: Frame) -> None:
            assert type(frame) is bytes
            n = int(frame.rsplit(b":", 1)[1][:-1])
            if n == 40:
                out_seen_at[n] = read_available(out_fd[0])
            t.write(b'{"r":%d}' % n)

        t.deliver(answer)
        os.write(in_w, b"".join(line(i) + b"\n" for i in range(100)))
        await asyncio.sleep(0.1)
        rest = read_available(out_r)
    early_part = out_seen_at[40]
    assert early_part and early_part.endswith(b"\n")
    assert early_part + rest == b"".join(b'{"r":%d}\n' % i for i in range(100))


@aio
async def test_a_consumer_that_fails_on_one_frame_keeps_earlier_replies_and_gets_the_rest() -> None:
    async with transport() as (t, in_w, out_r):

        def answer(frame: Frame) -> None:
            assert type(frame) is bytes
            n = int(frame.rsplit(b":", 1)[1][:-1])
            if n == 20:
                raise RuntimeError("a bug in the consumer")
            t.write(b'{"r":%d}' % n)

        t.deliver(answer)
        os.write(in_w, b"".join(line(i) + b"\n" for i in range(25)))
        await asyncio.sleep(0.1)
        written = read_available(out_r)
    assert written == b"".join(b'{"r":%d}\n' % i for i in range(25) if i != 20)


@aio
async def test_replies_with_content_length_framing_are_framed_one_by_one() -> None:
    async with transport(framing="content-length") as (t, in_w, out_r):
        t.deliver(lambda f: t.write(b'{"ok":%s}' % f[-2:-1]))  # type: ignore[index]
        os.write(in_w, b"".join(encode_content_length(line(i)) for i in range(1, 4)))
        await asyncio.sleep(0.1)
        written = read_available(out_r)
    assert written == b"".join(encode_content_length(b'{"ok":%d}' % i) for i in range(1, 4))
