"""One admission point: every request that runs, alone or as a batch element, takes one slot of
``Limits.max_in_flight`` before its handler starts, on the runner and through the peer."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from support.peer import aio

from sturdyrpc import Dispatcher, Limits
from sturdyrpc.admission import Admission
from sturdyrpc.peer import Peer, PeerContext
from sturdyrpc.runner import Runner
from sturdyrpc.transports.memory import memory_pair


def counting_rpc(limits: Limits, stats: dict[str, int], delay: float = 0.001) -> Dispatcher:
    rpc = Dispatcher(limits)

    @rpc.method
    async def slow(i: int) -> int:
        stats["now"] += 1
        stats["peak"] = max(stats["peak"], stats["now"])
        try:
            await asyncio.sleep(delay)
        finally:
            stats["now"] -= 1
        return i

    @rpc.method
    def slow_sync(i: int) -> int:
        return i

    @rpc.method(blocking=False)
    def quick(i: int) -> int:
        return i

    return rpc


def batch(n: int, method: str = "slow", notify_every: int = 0) -> bytes:
    items: list[dict[str, Any]] = []
    for i in range(n):
        m: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": [i]}
        if not (notify_every and i % notify_every == 0):
            m["id"] = i
        items.append(m)
    return msgspec.json.encode(items)


def test_one_batch_of_5000_slow_requests_never_runs_more_than_max_in_flight_on_the_runner() -> None:
    stats = {"now": 0, "peak": 0}
    pressure: list[bool] = []

    async def main() -> list[Any]:
        sent: list[bytes] = []
        # 20 ms each, 64 at a time: the batch runs for about 1.6 s, so the check below sees it
        # running even on a loaded machine
        r = Runner(counting_rpc(Limits(max_in_flight=64, max_batch=5000), stats, delay=0.02), sent.append,
                   on_pressure=pressure.append)
        r.feed(batch(5000, notify_every=10))
        await asyncio.sleep(0.01)
        assert not r.accepting and r.in_flight == 64
        assert await r.drain(60)
        assert r.accepting and r.in_flight == 0 and r.admission.in_use == 0
        return [msgspec.json.decode(s) for s in sent]

    replies = asyncio.run(main())
    assert len(replies) == 1
    assert sorted(m["result"] for m in replies[0]) == [i for i in range(5000) if i % 10]
    assert 0 < stats["peak"] <= 64, stats
    assert pressure[0] is True and pressure[-1] is False


def test_single_requests_fed_past_the_limit_wait_for_a_slot_instead_of_running() -> None:
    # A transport that keeps feeding after on_pressure(True) (the rest of a chunk it has read)
    # must not push the runner past max_in_flight; it can ask Runner.accepting first.
    stats = {"now": 0, "peak": 0}

    async def main() -> list[Any]:
        sent: list[bytes] = []
        r = Runner(counting_rpc(Limits(max_in_flight=8), stats), sent.append)
        accepting = []
        for i in range(100):
            accepting.append(r.accepting)
            r.feed(msgspec.json.encode({"jsonrpc": "2.0", "method": "slow", "params": [i], "id": i}))
        assert accepting[:8] == [True] * 8 and not any(accepting[8:])
        r.feed(msgspec.json.encode({"jsonrpc": "2.0", "method": "quick", "params": [-1], "id": -1}))
        assert msgspec.json.decode(sent[0]) == {"jsonrpc": "2.0", "result": -1, "id": -1}  # inline: no slot needed
        assert await r.drain(30)
        return [msgspec.json.decode(s) for s in sent]

    replies = asyncio.run(main())
    assert sorted(m["id"] for m in replies) == list(range(-1, 100))
    assert stats["peak"] <= 8


def test_batch_elements_wait_for_slots_in_order_and_sync_blocking_elements_count_too() -> None:
    started: list[int] = []

    async def main() -> None:
        rpc = Dispatcher(Limits(max_in_flight=2))

        @rpc.method
        async def step(i: int) -> int:
            started.append(i)
            await asyncio.sleep(0.01 * (3 - i % 3))
            return i

        sent: list[bytes] = []
        r = Runner(rpc, sent.append)
        r.feed(batch(12, "step"))
        assert await r.drain(10)
        assert sorted(m["id"] for m in msgspec.json.decode(sent[0])) == list(range(12))

    asyncio.run(main())
    assert started == list(range(12))


def test_cancelling_requests_that_wait_for_a_slot_gives_no_reply_and_leaks_no_slot() -> None:
    async def main() -> list[bytes]:
        stats = {"now": 0, "peak": 0}
        sent: list[bytes] = []
        r = Runner(counting_rpc(Limits(max_in_flight=2), stats, delay=0.05), sent.append)
        for i in range(6):
            r.feed(msgspec.json.encode({"jsonrpc": "2.0", "method": "slow", "params": [i], "id": i}))
        assert r.cancel(4) and r.cancel(0)
        assert await r.drain(10)
        assert r.admission.in_use == 0 and r.accepting
        return sent

    ids = sorted(msgspec.json.decode(s)["id"] for s in asyncio.run(main()))
    assert ids == [1, 2, 3, 5]


@aio
async def test_one_batch_of_5000_slow_requests_through_a_peer_never_runs_more_than_max_in_flight() -> None:
    stats = {"now": 0, "peak": 0}
    a, b = memory_pair()
    server = Peer(a, counting_rpc(Limits(max_in_flight=64, max_batch=5000), stats), name="server")
    client = Peer(b, Dispatcher(Limits(max_batch=5000)), name="client")  # reads the 5,000 replies as one batch
    await server.start()
    await client.start()
    try:
        items = [("slow", [i], False) for i in range(5000)]
        out = await asyncio.wait_for(client.batch(items, timeout=60), 90)
        assert out == list(range(5000))
        # Requests sent meanwhile wait too, and are all answered.
        more = await asyncio.wait_for(asyncio.gather(*(client.request("slow", [i]) for i in range(300))), 60)
        assert more == list(range(300))
    finally:
        await client.close()
        await server.close()
    assert 0 < stats["peak"] <= 64, stats


@aio
async def test_peer_handlers_parked_on_a_call_back_give_their_slot_to_others() -> None:
    # B serves one request at a time; its handler calls back into A, whose handler calls
    # back into B again. Without parking, B's only slot would be held by the first handler
    # while the nested request waits for it: a deadlock.
    rpc_a = Dispatcher()
    rpc_b = Dispatcher(Limits(max_in_flight=1))

    @rpc_b.method
    async def outer(ctx: PeerContext) -> Any:
        return await ctx.request("middle")

    @rpc_a.method
    async def middle(ctx: PeerContext) -> Any:
        return await ctx.request("inner")

    @rpc_b.method
    async def inner() -> str:
        return "deep"

    a, b = memory_pair()
    pa, pb = Peer(a, rpc_a, name="A"), Peer(b, rpc_b, name="B")
    await pa.start()
    await pb.start()
    try:
        assert await asyncio.wait_for(pa.request("outer"), 10) == "deep"
        assert await asyncio.wait_for(asyncio.gather(*(pa.request("outer") for _ in range(20))), 20) == ["deep"] * 20
    finally:
        await pa.close()
        await pb.close()
    assert pb.incoming_in_flight == 0


def test_admission_counts_hands_over_in_order_and_can_pass_the_limit_for_a_returning_holder() -> None:
    events: list[bool] = []

    async def main() -> None:
        adm = Admission(2, on_pressure=events.append)
        assert adm.try_acquire() and adm.try_acquire()
        assert adm.full and not adm.try_acquire()
        order: list[int] = []

        async def waiter(i: int) -> None:
            await adm.acquire()
            order.append(i)

        tasks = [asyncio.ensure_future(waiter(i)) for i in range(3)]
        await asyncio.sleep(0)
        adm.release()
        adm.release()
        await asyncio.sleep(0)
        assert order == [0, 1] and adm.in_use == 2
        adm.force_acquire()  # a parked handler comes back
        assert adm.in_use == 3
        adm.release()  # over the limit: this slot is not handed over
        await asyncio.sleep(0)
        assert order == [0, 1] and adm.in_use == 2
        adm.release()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2]
        adm.release()
        adm.release()
        assert adm.in_use == 0 and not adm.full

    asyncio.run(main())
    assert events == [True, False]


def test_limits_validate_max_server_in_flight() -> None:
    assert Limits().max_server_in_flight == 1024
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            Limits(max_server_in_flight=bad)  # type: ignore[arg-type]
