"""Property tests through the seeded fault-injecting transport, and a 100,000-call leak test.

Random call/notify/cancel/close schedules run between two peers whose links delay, reorder,
duplicate and drop messages and may be cut. Whatever happens:

- every call settles exactly once, with its own result or a proper failure, and in bounded time;
- no reply is ever sent for a request whose handler was cancelled;
- outgoing ids are never reused;
- nothing is left behind: no pending calls, running handlers or tasks.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import time
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.peer import aio

from sturdyrpc import Dispatcher, RPCError
from sturdyrpc.peer import ConnectionClosed, InvalidReply, Peer, RequestTimeout
from sturdyrpc.transports.memory import FaultyTransport, memory_pair

pytestmark = pytest.mark.timeout(120)

_dec = msgspec.json.Decoder()

#: Outcomes seen across all schedules (to check that the faults reach every path).
SEEN: collections.Counter[str] = collections.Counter()


class Tap:
    """Records what a peer hands to its transport (before any fault is applied)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[Any] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(_dec.decode(data))
        await self.inner.send(data)

    async def receive(self) -> Any:
        return await self.inner.receive()

    async def close(self) -> None:
        await self.inner.close()


def server_rpc(events: list[tuple[str, Any]]) -> Dispatcher:
    rpc = Dispatcher()

    @rpc.method
    async def work(ms: int, token: int, ctx: Any = None) -> int:
        try:
            await asyncio.sleep(ms / 1000)
        except asyncio.CancelledError:
            events.append(("cancelled", token))
            raise
        return token

    @rpc.method(blocking=False)
    def echo(token: int) -> int:
        return token

    @rpc.method(blocking=False)
    def fail(token: int) -> None:
        raise RPCError("nope", {"token": token}, code=-32050)

    @rpc.method(blocking=False)
    def note(token: int) -> None:
        events.append(("note", token))

    return rpc


op = st.one_of(
    st.tuples(st.just("work"), st.integers(0, 60), st.integers(0, 30)),
    st.tuples(st.just("echo"), st.integers(0, 0), st.integers(0, 30)),
    st.tuples(st.just("fail"), st.integers(0, 0), st.integers(0, 30)),
    st.tuples(st.just("notify"), st.integers(0, 0), st.integers(0, 30)),
    st.tuples(st.just("cancel"), st.integers(0, 60), st.integers(0, 30)),
)

faults = st.fixed_dictionaries(
    {
        "drop": st.sampled_from([0.0, 0.0, 0.05, 0.2]),
        "reorder": st.sampled_from([0.0, 0.2, 0.5]),
        "delay": st.sampled_from([0.0, 0.2]),
        "cut_after": st.one_of(st.none(), st.none(), st.integers(0, 40)),
    }
)


async def run_schedule(seed: int, ops: list[tuple[str, int, int]], f_ab: dict[str, Any], f_ba: dict[str, Any], dup_ba: float, close_at: int | None) -> None:
    a_end, b_end = memory_pair()
    events: list[tuple[str, Any]] = []
    tap_a = Tap(FaultyTransport(a_end, seed, **f_ab))  # requests never duplicated: each id runs at most once
    tap_b = Tap(FaultyTransport(b_end, seed + 1, duplicate=dup_ba, **f_ba))
    pa = Peer(tap_a, None, name="A", default_timeout=0.25)
    pb = Peer(tap_b, server_rpc(events), name="B", default_timeout=0.25, close_deadline=0.2)
    await pa.start()
    await pb.start()
    outcomes: dict[int, list[str]] = {}

    async def call(i: int, kind: str, ms: int, at: int) -> None:
        await asyncio.sleep(at / 1000)
        outcomes[i] = []
        try:
            if kind == "notify":
                await pa.notify("note", {"token": i})
                outcomes[i].append("sent")
                return
            method = "work" if kind in ("work", "cancel") else kind
            params = {"ms": ms, "token": i} if method == "work" else {"token": i}
            if kind == "cancel":
                inner = asyncio.ensure_future(pa.request(method, params))
                await asyncio.sleep(ms / 2000)
                inner.cancel()
                r = await inner
            else:
                r = await pa.request(method, params)
            assert r == i, f"call {i} got another call's result {r!r}"
            outcomes[i].append("result")
        except asyncio.CancelledError:
            outcomes[i].append("cancelled")
        except RequestTimeout:
            outcomes[i].append("timeout")
        except ConnectionClosed:
            outcomes[i].append("closed")
        except InvalidReply:
            outcomes[i].append("invalid")
        except RPCError as exc:
            if exc.code == -32000 and exc.message == "Connection closing":
                outcomes[i].append("refused")  # the other side was closing
                return
            assert kind == "fail" and exc.code == -32050 and exc.data == {"token": i}
            outcomes[i].append("error")

    tasks = [asyncio.ensure_future(call(i, k, ms, at)) for i, (k, ms, at) in enumerate(ops)]
    if close_at is not None:
        await asyncio.sleep(close_at / 1000)
        await (pa if close_at % 2 else pb).close(0.05)
    done, not_done = await asyncio.wait(tasks, timeout=3.0)
    assert not not_done, "a call did not settle"
    for t in done:
        t.result()
    await pa.close(0.1)
    await pb.close(0.1)
    await asyncio.wait_for(asyncio.gather(pa.wait_closed(), pb.wait_closed()), 3)

    # every call settled exactly once
    assert sorted(outcomes) == list(range(len(ops)))
    assert all(len(v) == 1 for v in outcomes.values()), outcomes
    for v in outcomes.values():
        SEEN[v[0]] += 1
    SEEN["handler_cancelled"] += sum(1 for what, _ in events if what == "cancelled")
    # ids never reused
    ids = [m["id"] for m in _flat(tap_a.sent) if "method" in m and "id" in m]
    assert len(ids) == len(set(ids))
    # no reply for a request whose handler was cancelled
    cancelled_tokens = {tok for what, tok in events if what == "cancelled"}
    replied = {m.get("result") for m in _flat(tap_b.sent) if "result" in m}
    assert not (cancelled_tokens & replied), (cancelled_tokens & replied)
    # nothing left behind
    for p in (pa, pb):
        assert p._pending == {} and p.incoming_in_flight == 0 and not p._bg
    await asyncio.sleep(0.01)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert left == [], left


def _flat(msgs: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in msgs:
        out.extend(m if isinstance(m, list) else [m])
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    ops=st.lists(op, min_size=1, max_size=25),
    f_ab=faults,
    f_ba=faults,
    dup_ba=st.sampled_from([0.0, 0.3]),
    close_at=st.one_of(st.none(), st.integers(0, 80)),
)
def test_random_schedules_settle(seed: int, ops: list[tuple[str, int, int]], f_ab: dict[str, Any], f_ba: dict[str, Any], dup_ba: float, close_at: int | None) -> None:
    asyncio.run(run_schedule(seed, ops, f_ab, f_ba, dup_ba, close_at))


@pytest.mark.parametrize("cut", [0, 1, 2, 5, 17])
def test_cut_at_chosen_points(cut: int) -> None:
    ops = [("work", 10, 0), ("echo", 0, 1), ("fail", 0, 2), ("notify", 0, 3), ("cancel", 20, 4)] * 4
    asyncio.run(run_schedule(cut, ops, {"cut_after": cut}, {}, 0.0, None))


def test_fault_transport_is_deterministic() -> None:
    async def decisions(seed: int) -> list[tuple[int, str]]:
        a, b = memory_pair()
        f = FaultyTransport(a, seed, drop=0.2, duplicate=0.2, reorder=0.2, delay=0.2)
        for i in range(200):
            await f.send(b"%d" % i)
        await f.close()
        return f.log

    assert asyncio.run(decisions(42)) == asyncio.run(decisions(42))
    assert asyncio.run(decisions(42)) != asyncio.run(decisions(43))


def test_duplicates_and_drops_counted_not_misrouted() -> None:
    async def main() -> None:
        a, b = memory_pair()
        events: list[tuple[str, Any]] = []
        pa = Peer(a, None, default_timeout=0.2)
        pb = Peer(FaultyTransport(b, 7, duplicate=1.0), server_rpc(events))
        await pa.start()
        await pb.start()
        assert await asyncio.gather(*(pa.request("echo", {"token": i}) for i in range(50))) == list(range(50))
        await asyncio.sleep(0.02)
        assert pa.stats["duplicate_replies"] == 50
        await pa.close()
        await pb.wait_closed()

    asyncio.run(main())


@pytest.mark.timeout(60)
@aio
async def test_no_leak_over_100k_calls() -> None:
    a, b = memory_pair()
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def inc(n: int) -> int:
        return n + 1

    pa = Peer(a, None, name="A")
    pb = Peer(b, rpc, name="B")
    await pa.start()
    await pb.start()

    async def worker(start: int, count: int) -> None:
        for n in range(start, start + count):
            assert await pa.request("inc", [n]) == n + 1

    async def run(total: int) -> None:
        per = total // 50
        await asyncio.gather(*(worker(k * per, per) for k in range(50)))

    await run(10_000)  # warm up caches and free lists
    gc.collect()
    before = len(gc.get_objects())
    t0 = time.perf_counter()
    await run(100_000)
    elapsed = time.perf_counter() - t0
    gc.collect()
    after = len(gc.get_objects())
    assert pa._pending == {} and pa.pending() == []
    assert pb.incoming_in_flight == 0 and not pa._bg and not pb._bg
    assert not pa._abandoned and not pa._user_ids
    assert after - before < 2_000, (before, after)
    assert pa.stats["replies"] == 110_000
    await pa.close()
    await pb.wait_closed()
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert left == []
    print(f"100k calls in {elapsed:.2f} s")


def test_fixed_schedules_reach_every_outcome() -> None:
    """Seeded schedules (no hypothesis) that must exercise every way a call can end."""
    import random

    SEEN.clear()

    async def main() -> None:
        rng = random.Random(1)
        kinds = ["work", "echo", "fail", "notify", "cancel"]
        for seed in range(30):
            ops = [(rng.choice(kinds), rng.randint(0, 60), rng.randint(0, 30)) for _ in range(20)]
            f_ab = {"drop": rng.choice([0, 0.05, 0.2]), "reorder": rng.choice([0, 0.2, 0.5]), "delay": rng.choice([0, 0.2]),
                    "cut_after": rng.choice([None, None, rng.randint(0, 40)])}
            f_ba = {"drop": rng.choice([0, 0.05, 0.2]), "reorder": rng.choice([0, 0.2, 0.5]), "delay": 0.2, "cut_after": None}
            await run_schedule(seed, ops, f_ab, f_ba, rng.choice([0, 0.3]), rng.choice([None, rng.randint(0, 80)]))

    asyncio.run(main())
    for outcome in ("result", "error", "timeout", "cancelled", "closed", "sent", "handler_cancelled"):
        assert SEEN[outcome] > 0, (outcome, SEEN)
