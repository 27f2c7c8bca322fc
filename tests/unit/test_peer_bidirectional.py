"""Both directions at once: two peers calling each other concurrently, replies in random order."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import pytest
from support.peer import aio

from sturdyrpc import Dispatcher
from sturdyrpc.peer import Peer, PeerContext
from sturdyrpc.transports.memory import FaultyTransport, memory_pair

pytestmark = pytest.mark.timeout(90)

_dec = msgspec.json.Decoder()


class ReplyOrder:
    """Wraps a transport and records the ids of the replies it sends, in order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reply_ids: list[Any] = []

    async def send(self, data: bytes) -> None:
        if b'"result"' in data:
            self.reply_ids.append(_dec.decode(data)["id"])
        await self.inner.send(data)

    async def receive(self) -> Any:
        return await self.inner.receive()

    async def close(self) -> None:
        await self.inner.close()


def make_side(name: str, seed: int) -> Dispatcher:
    rng = random.Random(seed)
    rpc = Dispatcher()

    @rpc.method
    async def square(n: int) -> dict[str, Any]:
        # A random number of loop turns: replies leave in an order unrelated to arrival.
        for _ in range(rng.randrange(0, 8)):
            await asyncio.sleep(0)
        return {"by": name, "n": n, "sq": n * n}

    @rpc.method
    async def relay(n: int, ctx: PeerContext) -> int:
        # Calls back to the side that asked, while that side is itself busy calling us.
        back = await ctx.request("square", {"n": n})
        return int(back["sq"]) + 1

    return rpc


def _inversions(ids: list[int]) -> int:
    return sum(1 for x, y in zip(ids, ids[1:], strict=False) if y < x)


@aio
async def test_ten_thousand_calls_each_way() -> None:
    a_end, b_end = memory_pair()
    ta = ReplyOrder(FaultyTransport(a_end, 11, reorder=0.05, hold=4))
    tb = ReplyOrder(FaultyTransport(b_end, 12, reorder=0.05, hold=4))
    pa = Peer(ta, make_side("A", 1), name="A", default_timeout=30)
    pb = Peer(tb, make_side("B", 2), name="B", default_timeout=30)
    await pa.start()
    await pb.start()
    n_calls = 10_000
    in_flight = 64

    async def caller(peer: Peer, expect_by: str, start: int) -> None:
        for n in range(start, n_calls, in_flight):
            r = await peer.request("square", {"n": n})
            assert r == {"by": expect_by, "n": n, "sq": n * n}

    await asyncio.gather(
        *(caller(pa, "B", k) for k in range(in_flight)),
        *(caller(pb, "A", k) for k in range(in_flight)),
    )
    assert pa.stats["replies"] == n_calls and pb.stats["replies"] == n_calls
    for p in (pa, pb):
        s = p.stats
        assert s["unmatched_replies"] == s["duplicate_replies"] == s["late_replies"] == s["malformed_replies"] == 0
        assert p.pending() == [] and p.incoming_in_flight == 0
    # the replies really left in an order different from the requests'
    assert _inversions(ta.reply_ids) > 500 and _inversions(tb.reply_ids) > 500
    await pa.close()
    await pb.wait_closed()


@aio
async def test_nested_calls_both_ways() -> None:
    a_end, b_end = memory_pair()
    pa = Peer(a_end, make_side("A", 3), name="A")
    pb = Peer(b_end, make_side("B", 4), name="B")
    await pa.start()
    await pb.start()
    # Each relay call makes the other side call back into the caller: 2,000 nested round trips
    # in flight in both directions at once.
    res = await asyncio.gather(*(pa.request("relay", {"n": n}) for n in range(500)), *(pb.request("relay", {"n": n}) for n in range(500)))
    assert res == [n * n + 1 for n in range(500)] * 2
    await pa.close()
    await pb.wait_closed()
