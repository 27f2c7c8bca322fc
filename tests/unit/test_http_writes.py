"""HeadHeldForBody: uvicorn's response head waits for the body's first write, so that a whole
response leaves in one write; a head whose body is not written in the same turn of the loop
still leaves in that turn. On each event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.loops import run_on

pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

from sturdyrpc.transports.http_protocol import HeadHeldForBody  # noqa: E402

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


class Recording(asyncio.Transport):
    """What the wrapped transport was asked to do, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Any] = []

    def write(self, data: Any) -> None:
        self.calls.append(bytes(data))

    def close(self) -> None:
        self.calls.append("close")

    def write_eof(self) -> None:
        self.calls.append("eof")

    def can_write_eof(self) -> bool:
        return True

    def abort(self) -> None:
        self.calls.append("abort")


def wrapped() -> tuple[HeadHeldForBody, Recording]:
    inner = Recording()
    return HeadHeldForBody(inner, asyncio.get_running_loop()), inner


def test_a_head_and_its_body_leave_in_one_write(loop_name: str) -> None:
    async def go() -> None:
        t, inner = wrapped()
        t.write(HEAD)
        assert inner.calls == []
        t.write(b"{}")
        assert inner.calls == [HEAD + b"{}"]
        await asyncio.sleep(0)
        t.write(b"more")  # not a head: at once
        assert inner.calls == [HEAD + b"{}", b"more"]

    run_on(loop_name, go())


def test_a_head_alone_leaves_in_the_same_turn_of_the_loop(loop_name: str) -> None:
    async def go() -> None:
        t, inner = wrapped()
        t.write(HEAD)
        await asyncio.sleep(0)
        assert inner.calls == [HEAD]
        t.write(b"data: {}\n\n")
        assert inner.calls == [HEAD, b"data: {}\n\n"]
        await asyncio.sleep(0)
        assert inner.calls == [HEAD, b"data: {}\n\n"]  # the turn's flush finds nothing left

    run_on(loop_name, go())


def test_a_held_head_goes_before_close_and_eof_and_is_dropped_by_abort(loop_name: str) -> None:
    async def go() -> None:
        t, inner = wrapped()
        t.write(HEAD)
        t.close()
        assert inner.calls == [HEAD, "close"]
        t, inner = wrapped()
        t.write(HEAD)
        t.write_eof()
        assert inner.calls == [HEAD, "eof"]
        t, inner = wrapped()
        t.write(HEAD)
        t.abort()
        await asyncio.sleep(0)
        assert inner.calls == ["abort"]

    run_on(loop_name, go())


def test_body_bytes_that_look_like_a_head_are_held_only_when_nothing_is(loop_name: str) -> None:
    async def go() -> None:
        t, inner = wrapped()
        t.write(HEAD)
        t.write(HEAD)  # a body that happens to read like a head: it completes the held one
        assert inner.calls == [HEAD + HEAD]

    run_on(loop_name, go())
