"""``Runner.is_running`` and ``Peer.accepts_id``: the public checks of whether a request id is in
flight, for whoever would answer under that id (exact ids: ``1``, ``1.0``, ``True`` and ``"1"``
are different requests)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from support.peer import aio

from sturdyrpc import Dispatcher
from sturdyrpc.peer import Peer
from sturdyrpc.runner import Runner
from sturdyrpc.transports.memory import memory_pair

pytestmark = pytest.mark.timeout(20)


def req(method: str, id_: Any) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "method": method, "id": id_})


def gated() -> tuple[Dispatcher, asyncio.Event]:
    d = Dispatcher()
    gate = asyncio.Event()

    @d.method()
    async def wait() -> str:
        await gate.wait()
        return "done"

    return d, gate


@aio
async def test_is_running_tells_ids_apart_by_type_and_value_and_is_false_when_nothing_runs() -> None:
    d, gate = gated()
    r = Runner(d, lambda data: None)
    for id_ in (1, "1", 1.0, True, None, 0, ""):
        assert not r.is_running(id_)  # nothing runs
    r.feed(req("wait", 1))
    r.feed(req("wait", "x"))
    await asyncio.sleep(0)
    assert r.is_running(1) and r.is_running("x")
    for id_ in ("1", 1.0, True, 2, "X", None):
        assert not r.is_running(id_), id_
    gate.set()
    await r.drain(5)
    assert not r.is_running(1) and not r.is_running("x")


@aio
async def test_peer_accepts_id_is_false_for_a_running_id_and_for_every_id_once_closing() -> None:
    d, gate = gated()
    client, end = memory_pair()
    peer = Peer(end, d)
    await peer.start()
    try:
        assert peer.accepts_id(1) and peer.accepts_id("1")
        await client.send(req("wait", 1))
        for _ in range(20):
            if peer.is_running(1):
                break
            await asyncio.sleep(0.01)
        assert peer.is_running(1) and not peer.accepts_id(1)
        assert peer.accepts_id("1") and peer.accepts_id(True) and peer.accepts_id(2)
        gate.set()
        assert msgspec.json.decode(await asyncio.wait_for(client.receive(), 3))["result"] == "done"
        await asyncio.sleep(0)
        assert peer.accepts_id(1)
        peer.abort("test: closing")
        assert peer.is_closing
        assert not peer.accepts_id(1) and not peer.accepts_id("other")
    finally:
        await client.close()
        await peer.close(1.0)
