"""guard --url's upstream HTTP/1.1 client (``proxy.upstream_http``) against a raw TCP server on
127.0.0.1 that writes scripted responses: whatever pieces a response arrives in, the same status,
headers and body come out; a broken response is an ``UpstreamError``, never a hang; memory stays
bounded for a large body; a header that would split the request is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sturdyrpc.proxy.upstream_http import HTTPUpstream, UpstreamError


async def _serve(script: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> tuple[asyncio.Server, str]:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            await script(r, w)
        finally:
            w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/mcp"


async def _read_request(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    return head + await r.readexactly(length)


async def _fetch(url: str, body: bytes = b"{}") -> tuple[int, dict[str, str], bytes]:
    async with HTTPUpstream(url) as up, up.stream("POST", {"content-type": "application/json"}, body, timeout=5) as resp:
        data = b"".join([c async for c in resp.chunks()])
        return resp.status, resp.headers, data


def _chunked(body: bytes, size: int) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in parts) + b"0\r\n\r\n"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(body=st.binary(max_size=3000), cuts=st.lists(st.integers(1, 200), max_size=12), chunked=st.booleans(), size=st.integers(1, 700))
def test_a_response_in_any_pieces_reads_the_same(body: bytes, cuts: list[int], chunked: bool, size: int) -> None:
    framing = b"transfer-encoding: chunked\r\n\r\n" + _chunked(body, size) if chunked else b"content-length: %d\r\n\r\n" % len(body) + body
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nX-Odd:  spaced \r\n" + framing

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        at = 0
        for n in cuts:
            w.write(raw[at:at + n])
            await w.drain()
            at += n
        w.write(raw[at:])
        await w.drain()

    async def main() -> tuple[int, dict[str, str], bytes]:
        server, url = await _serve(script)
        async with server:
            return await _fetch(url)

    status, headers, got = run(main())
    assert status == 200 and got == body and headers["content-type"] == "application/json"


BROKEN = [
    b"garbage\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",  # then the connection closes
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 7\r\n\r\n12345",
    b"HTTP/1.1 200 OK\r\n" + b"x-long: " + b"a" * 200_000 + b"\r\n\r\n",
    b"",  # closed before a byte
]


@pytest.mark.parametrize("raw", BROKEN, ids=range(len(BROKEN)))
def test_a_broken_response_is_an_error_not_a_hang(raw: bytes) -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(raw)
        await w.drain()

    async def main() -> None:
        server, url = await _serve(script)
        async with server:
            try:
                status, _, body = await _fetch(url)
            except UpstreamError:
                return
            # what httptools reads as a whole response must be one (a lenient but complete read)
            assert status == 200 and raw.endswith(body), (status, body)

    run(main())


def test_a_large_body_streams_in_bounded_chunks() -> None:
    body = b"x" * (8 << 20)

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 1 << 16):
            w.write(body[i:i + (1 << 16)])
            await w.drain()

    async def main() -> int:
        server, url = await _serve(script)
        async with server, HTTPUpstream(url) as up, up.stream("POST", {}, b"{}", timeout=5) as resp:
            total = 0
            async for c in resp.chunks():
                total += len(c)
                await asyncio.sleep(0)
            return total

    assert run(main()) == len(body)


def test_a_header_that_would_split_the_request_is_refused() -> None:
    async def main() -> None:
        up = HTTPUpstream("http://127.0.0.1:9/mcp")
        with pytest.raises(UpstreamError):
            up._head("POST", {"mcp-session-id": "a\r\nx-injected: 1"}, 0)  # noqa: SLF001 - the request head is the unit

    run(main())


def test_an_upstream_that_is_down_is_an_error() -> None:
    async def main() -> None:
        server, url = await _serve(lambda r, w: asyncio.sleep(0))
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError):
            await _fetch(url)

    run(main())
