"""The two-way Peer, one behaviour at a time, with the other side scripted on the raw wire."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from support.peer import Raw, aio, settle

from sturdyrpc import ApplicationError, Dispatcher, Limits, MethodNotFound, RPCError
from sturdyrpc.framing import BadHeader, FrameTooLarge
from sturdyrpc.peer import ConnectionClosed, InvalidReply, Peer, PeerContext, RequestTimeout
from sturdyrpc.profile import JSONRPCProfile, Profile
from sturdyrpc.transports.memory import memory_pair

pytestmark = pytest.mark.timeout(20)


def make_rpc(limits: Limits | None = None) -> Dispatcher:
    rpc = Dispatcher(limits) if limits is not None else Dispatcher()
    events: list[Any] = []
    rpc.events = events  # type: ignore[attr-defined]

    @rpc.method(blocking=False)
    def add(a: int, b: int) -> int:
        return a + b

    @rpc.method
    async def sleep(seconds: float, value: Any = None) -> Any:
        events.append(("start", seconds))
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            events.append(("cancelled", seconds))
            raise
        return value

    @rpc.method
    async def work(steps: int, ctx: PeerContext) -> str:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
            await asyncio.sleep(0.01)
        return "done"

    @rpc.method
    async def ask_back(ctx: PeerContext) -> Any:
        return await ctx.request("add", [20, 22])

    @rpc.method(blocking=False)
    def boom() -> None:
        raise ApplicationError(7, "custom", {"why": "because"})

    return rpc


async def peer_and_raw(rpc: Dispatcher | None = None, **kw: Any) -> tuple[Peer, Raw]:
    a, b = memory_pair()
    p = Peer(a, rpc, **kw)
    await p.start()
    return p, Raw(b)


async def two_peers(**kw: Any) -> tuple[Peer, Peer]:
    a, b = memory_pair()
    pa = Peer(a, make_rpc(), name="A", **kw)
    pb = Peer(b, make_rpc(), name="B", **kw)
    await pa.start()
    await pb.start()
    return pa, pb


# ------------------------------------------------------------------ results and errors


@aio
async def test_request_result_and_typed_errors() -> None:
    pa, pb = await two_peers()
    assert await pa.request("add", [1, 2]) == 3
    assert await pa.request("add", {"a": 5, "b": 6}) == 11
    with pytest.raises(MethodNotFound) as e:
        await pa.request("missing")
    assert e.value.code == -32601
    with pytest.raises(RPCError) as e2:  # an application code arrives as the base class
        await pb.request("boom")
    assert (e2.value.code, e2.value.message, e2.value.data) == (7, "custom", {"why": "because"})
    assert pa.pending() == [] and pb.pending() == []
    await pa.close()
    await pb.wait_closed()


@aio
async def test_wire_format_and_ids_unique() -> None:
    p, raw = await peer_and_raw()
    t1 = asyncio.create_task(p.request("m", [1]))
    t2 = asyncio.create_task(p.request("m"))
    t3 = asyncio.create_task(p.request("m", {"k": 1}, id="x-1"))
    m1, m2, m3 = await raw.recv(), await raw.recv(), await raw.recv()
    assert m1 == {"jsonrpc": "2.0", "method": "m", "params": [1], "id": 1}
    assert m2 == {"jsonrpc": "2.0", "method": "m", "id": 2}
    assert m3["id"] == "x-1"
    # Replies in reverse order each reach their own caller.
    await raw.send({"jsonrpc": "2.0", "result": "three", "id": "x-1"})
    await raw.send({"jsonrpc": "2.0", "result": "two", "id": 2})
    await raw.send({"jsonrpc": "2.0", "result": "one", "id": 1})
    assert await asyncio.gather(t1, t2, t3) == ["one", "two", "three"]
    with pytest.raises(ValueError):
        await p.request("m", id="x-1")  # never reused
    with pytest.raises(ValueError):
        await p.request("m", id=2)  # an automatic id already used
    t4 = asyncio.create_task(p.request("m", id=5))
    assert (await raw.recv())["id"] == 5
    t5 = asyncio.create_task(p.request("m"))
    t6 = asyncio.create_task(p.request("m"))
    ids = [(await raw.recv())["id"], (await raw.recv())["id"]]
    assert ids == [3, 4]
    t7 = asyncio.create_task(p.request("m"))
    assert (await raw.recv())["id"] == 6  # 5 was taken by the caller
    for t in (t4, t5, t6, t7):
        t.cancel()
    await p.close(0.1)


@aio
async def test_exact_id_matching() -> None:
    p, raw = await peer_and_raw()
    t = asyncio.create_task(p.request("m", id=7))
    await raw.recv()
    await raw.send({"jsonrpc": "2.0", "result": "wrong", "id": "7"})
    await raw.send({"jsonrpc": "2.0", "result": "wrong", "id": 7.0})
    await settle()
    assert not t.done()
    assert p.stats["unmatched_replies"] == 2
    t2 = asyncio.create_task(p.request("m", id=1))
    await raw.recv()
    await raw.send(b'{"jsonrpc":"2.0","result":"wrong","id":true}')
    await settle()
    assert not t2.done()
    await raw.send({"jsonrpc": "2.0", "result": "right", "id": 7})
    await raw.send({"jsonrpc": "2.0", "result": "right1", "id": 1})
    assert await t == "right"
    assert await t2 == "right1"
    await p.close(0.1)


@aio
async def test_unmatched_duplicate_and_malformed_replies_are_counted() -> None:
    p, raw = await peer_and_raw()
    t = asyncio.create_task(p.request("m"))
    assert (await raw.recv())["id"] == 1
    await raw.send({"jsonrpc": "2.0", "result": 1, "id": 1})
    assert await t == 1
    await raw.send({"jsonrpc": "2.0", "result": 1, "id": 1})  # duplicate
    await raw.send({"jsonrpc": "2.0", "result": 1, "id": 999})  # unknown
    await raw.send({"jsonrpc": "2.0", "result": 1})  # no id
    await raw.send({"jsonrpc": "2.0", "error": {"code": "x"}, "id": 998})  # malformed, unknown id
    await raw.send(b"[]")
    await raw.send(b"not json")
    # the garbage got error replies (it was not a reply); the peer is still alive
    errs = [await raw.recv(), await raw.recv()]
    assert sorted(e["error"]["code"] for e in errs) == [-32700, -32600]
    # A malformed reply naming a pending call fails that call at once (never another one).
    t_other = asyncio.create_task(p.request("m"))
    t_bad = asyncio.create_task(p.request("m"))
    await raw.recv(), await raw.recv()
    await raw.send({"jsonrpc": "2.0", "result": 1, "error": {"code": 1, "message": "x"}, "id": 3})
    with pytest.raises(InvalidReply):
        await t_bad
    assert not t_other.done()
    await raw.send({"jsonrpc": "2.0", "result": "ok", "id": 2})
    assert await t_other == "ok"
    s = p.stats
    assert s["duplicate_replies"] == 1
    assert s["unmatched_replies"] == 1
    assert s["malformed_replies"] == 3
    await p.close(0.1)


@aio
async def test_framing_events_are_answered() -> None:
    a, b = memory_pair()
    p = Peer(a)
    await p.start()
    a.inject(FrameTooLarge(10))
    a.inject(BadHeader("bad"))
    raw = Raw(b)
    r1, r2 = await raw.recv(), await raw.recv()
    assert r1["error"]["code"] == -32600 and r2["error"]["code"] == -32700
    await p.close(0.1)


# ------------------------------------------------------------------ timeouts and cancellation


@aio
async def test_timeout_sends_cancel_and_ignores_late_reply() -> None:
    p, raw = await peer_and_raw(default_timeout=0.05)
    with pytest.raises(RequestTimeout) as e:
        await p.request("slow")
    assert e.value.id == 1 and e.value.method == "slow"
    assert (await raw.recv())["id"] == 1
    assert await raw.recv() == {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}
    await raw.send({"jsonrpc": "2.0", "result": "late", "id": 1})
    await settle()
    assert p.stats["late_replies"] == 1 and p.stats["timeouts"] == 1
    assert p.pending() == []
    # per-call timeout overrides the default; None means no timeout, max_timeout caps both
    t = asyncio.create_task(p.request("slow", timeout=None))
    await asyncio.sleep(0.1)
    assert not t.done()
    t.cancel()
    await p.close(0.1)
    p2, raw2 = await peer_and_raw(default_timeout=None, max_timeout=0.05)
    with pytest.raises(RequestTimeout):
        await p2.request("slow", timeout=10)
    await p2.close(0.1)


@aio
async def test_caller_cancellation_sends_cancel() -> None:
    p, raw = await peer_and_raw()
    t = asyncio.create_task(p.request("slow"))
    assert (await raw.recv())["id"] == 1
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert await raw.recv() == {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}
    assert p.stats["caller_cancels"] == 1
    await raw.send({"jsonrpc": "2.0", "result": "late", "id": 1})
    await settle()
    assert p.stats["late_replies"] == 1
    # cancelling after the reply arrived sends no cancel
    t = asyncio.create_task(p.request("fast"))
    m = await raw.recv()
    await raw.send({"jsonrpc": "2.0", "result": "r", "id": m["id"]})
    assert await t == "r"
    await raw.nothing()
    await p.close(0.1)


@aio
async def test_incoming_cancel_stops_handler_and_sends_no_reply() -> None:
    rpc = make_rpc()
    p, raw = await peer_and_raw(rpc)
    await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 5}, "id": 1})
    await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.05, "value": "v"}, "id": "1"})
    await asyncio.sleep(0.01)
    assert sorted(map(str, p.running_ids())) == ["1", "1"]
    await raw.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}})
    await raw.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 12345}})  # unknown: ignored
    await raw.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"nothing": 1}})  # malformed: ignored
    # only the string-id request answers; the cancelled one never does
    assert await raw.recv() == {"jsonrpc": "2.0", "result": "v", "id": "1"}
    await raw.nothing(0.1)
    assert ("cancelled", 5) in rpc.events  # type: ignore[attr-defined]
    assert p.stats["cancels_received"] == 3 and p.stats["cancels_ignored"] == 2
    # cancelling something finished is ignored
    await raw.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "1"}})
    await raw.nothing()
    await p.close(0.1)


# ------------------------------------------------------------------ progress


@aio
async def test_progress_roundtrip_and_ordering() -> None:
    pa, pb = await two_peers()
    seen: list[tuple[float, float | None, str | None]] = []
    assert await pa.request("work", {"steps": 4}, on_progress=lambda p, t, m: seen.append((p, t, m))) == "done"
    assert seen == [(1.0, 4.0, "step 1"), (2.0, 4.0, "step 2"), (3.0, 4.0, "step 3"), (4.0, 4.0, "step 4")]
    # async callbacks are fine too, and run in order
    seen2: list[float] = []

    async def cb(p: float, t: float | None, m: str | None) -> None:
        await asyncio.sleep(0.001)
        seen2.append(p)

    assert await pa.request("work", {"steps": 3}, on_progress=cb) == "done"
    await asyncio.sleep(0.05)
    assert seen2 == [1.0, 2.0, 3.0]
    # without a callback no token is sent and the handler's report is a no-op
    assert await pa.request("work", {"steps": 2}) == "done"
    assert pa.stats["progress_received"] == 7
    await pa.close()


@aio
async def test_progress_wire_and_guards() -> None:
    p, raw = await peer_and_raw()
    seen: list[float] = []
    t = asyncio.create_task(p.request("m", {"x": 1}, on_progress=lambda a, b, c: seen.append(a)))
    msg = await raw.recv()
    assert msg["params"] == {"x": 1, "workDoneToken": 1}
    for v in (1, 2, 2, 1.5, 3):  # non-increasing values are dropped
        await raw.send({"jsonrpc": "2.0", "method": "$/progress", "params": {"token": 1, "value": {"progress": v}}})
    await raw.send({"jsonrpc": "2.0", "method": "$/progress", "params": {"token": 99, "value": {"progress": 1}}})
    await raw.send({"jsonrpc": "2.0", "method": "$/progress", "params": {"bad": 1}})
    await settle(10)
    assert seen == [1.0, 2.0, 3.0]
    await raw.send({"jsonrpc": "2.0", "result": 0, "id": 1})
    await t
    await raw.send({"jsonrpc": "2.0", "method": "$/progress", "params": {"token": 1, "value": {"progress": 9}}})
    await settle()
    assert seen == [1.0, 2.0, 3.0]
    assert p.stats["progress_ignored"] == 5
    with pytest.raises(ValueError):
        await p.request("m", [1], on_progress=lambda a, b, c: None)  # LSP tokens need named params
    await p.close(0.1)


@aio
async def test_handler_progress_must_increase_and_stops_after_reply() -> None:
    rpc = Dispatcher()
    kept: list[PeerContext] = []

    @rpc.method
    async def bad(ctx: PeerContext) -> str:
        await ctx.report_progress(2)
        with pytest.raises(ValueError):
            await ctx.report_progress(2)
        kept.append(ctx)
        return "ok"

    p, raw = await peer_and_raw(rpc)
    await raw.send({"jsonrpc": "2.0", "method": "bad", "params": {"workDoneToken": "tok"}, "id": 1})
    assert (await raw.recv())["params"] == {"token": "tok", "value": {"progress": 2}}
    assert await raw.recv() == {"jsonrpc": "2.0", "result": "ok", "id": 1}
    await kept[0].report_progress(10)  # after the reply: not sent
    await raw.nothing()
    await p.close(0.1)


@aio
async def test_progress_resets_timeout_up_to_hard_max() -> None:
    p, raw = await peer_and_raw(default_timeout=0.1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    t = asyncio.create_task(p.request("m", {}, on_progress=lambda *a: None, reset_timeout_on_progress=True, max_timeout=0.35))
    await raw.recv()
    for i in range(1, 20):
        await asyncio.sleep(0.05)
        if t.done():
            break
        await raw.send({"jsonrpc": "2.0", "method": "$/progress", "params": {"token": 1, "value": {"progress": i}}})
    with pytest.raises(RequestTimeout):
        await t
    elapsed = loop.time() - start
    assert 0.3 <= elapsed < 0.6, elapsed  # kept alive past 0.1 s by progress, stopped at the hard max
    await p.close(0.1)


# ------------------------------------------------------------------ both directions


@aio
async def test_handler_calls_back_without_deadlock() -> None:
    pa, pb = await two_peers()
    assert await pa.request("ask_back") == 42
    results = await asyncio.gather(*(pa.request("ask_back") for _ in range(50)), *(pb.request("ask_back") for _ in range(50)))
    assert results == [42] * 100
    await pa.close()


@aio
async def test_callbacks_work_at_the_in_flight_cap() -> None:
    # B serves at most 2 requests at once; each handler calls back into A. Replies to those
    # callbacks must still be read while B holds further requests (no deadlock).
    a, b = memory_pair()
    pa = Peer(a, make_rpc(), name="A")
    pb = Peer(b, make_rpc(Limits(max_in_flight=2)), name="B")
    await pa.start()
    await pb.start()
    out = await asyncio.wait_for(asyncio.gather(*(pa.request("ask_back") for _ in range(30))), 10)
    assert out == [42] * 30
    assert pb.stats["held_requests"] > 0
    await pa.close()


@aio
async def test_incoming_backpressure_is_bounded() -> None:
    rpc = make_rpc(Limits(max_in_flight=3))
    a, b = memory_pair(maxsize=4)
    p = Peer(a, rpc, max_held=3)
    await p.start()
    raw = Raw(b)

    async def send_all() -> None:
        for i in range(40):
            await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.02, "value": i}, "id": i})

    sender = asyncio.create_task(send_all())
    peak = 0
    got: list[int] = []
    while len(got) < 40:
        peak = max(peak, p.incoming_in_flight)
        assert len(p._held) <= 3
        m = await raw.recv(5)
        got.append(m.get("result", m))
    await sender
    assert sorted(got) == list(range(40))
    assert peak <= 3
    await p.close(0.1)


@aio
async def test_outgoing_cap_waits_politely() -> None:
    p, raw = await peer_and_raw(max_outgoing=2)
    tasks = [asyncio.create_task(p.request("m", [i])) for i in range(5)]
    await settle(10)
    assert len(p.pending()) == 2
    for _ in range(5):
        m = await raw.recv()
        await raw.send({"jsonrpc": "2.0", "result": m["params"][0], "id": m["id"]})
    assert await asyncio.gather(*tasks) == [0, 1, 2, 3, 4]
    await p.close(0.1)


@aio
async def test_pending_lists_ages() -> None:
    p, raw = await peer_and_raw()
    t = asyncio.create_task(p.request("a"))
    await asyncio.sleep(0.05)
    t2 = asyncio.create_task(p.request("b"))
    await settle()
    pend = p.pending()
    assert [(c.id, c.method) for c in pend] == [(1, "a"), (2, "b")]
    assert pend[0].age >= 0.04 and pend[0].age > pend[1].age
    t.cancel()
    t2.cancel()
    await p.close(0.1)


# ------------------------------------------------------------------ notify, batch, profiles


@aio
async def test_notify_and_batch() -> None:
    p, raw = await peer_and_raw()
    await p.notify("hello", {"x": 1})
    assert await raw.recv() == {"jsonrpc": "2.0", "method": "hello", "params": {"x": 1}}
    t = asyncio.create_task(p.batch([("a", [1], False), ("n", None, True), ("b", None, False)]))
    batch = await raw.recv()
    assert batch == [
        {"jsonrpc": "2.0", "method": "a", "params": [1], "id": 1},
        {"jsonrpc": "2.0", "method": "n"},
        {"jsonrpc": "2.0", "method": "b", "id": 2},
    ]
    await raw.send([{"jsonrpc": "2.0", "error": {"code": -32601, "message": "nope"}, "id": 2}, {"jsonrpc": "2.0", "result": "A", "id": 1}])
    res = await t
    assert res[0] == "A" and res[1] is None and isinstance(res[2], MethodNotFound)

    class NoBatch(JSONRPCProfile):
        def batches_allowed(self) -> bool:
            return False

    p.profile = NoBatch()
    with pytest.raises(ValueError):
        await p.batch([("a", None, False)])
    await p.close(0.1)


@aio
async def test_profile_switch_at_runtime() -> None:
    class Custom(Profile):
        cancel_method = "notifications/cancelled"

        def cancel_notification(self, id_: Any, reason: str | None) -> tuple[str, Any]:
            return "notifications/cancelled", {"requestId": id_, "reason": reason}

        def read_cancel(self, params: Any) -> Any:
            return params["requestId"]

    rpc = make_rpc()
    p, raw = await peer_and_raw(rpc, default_timeout=0.05)
    p.profile = Custom()
    with pytest.raises(RequestTimeout):
        await p.request("x")
    await raw.recv()
    assert await raw.recv() == {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "timed out"}}
    await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 5}, "id": 1})
    await asyncio.sleep(0.01)
    await raw.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}})  # old profile's name: not a cancel
    await asyncio.sleep(0.01)
    assert p.running_ids() == [1]
    await raw.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    await asyncio.sleep(0.01)
    assert p.running_ids() == []
    await raw.nothing()
    await p.close(0.1)


# ------------------------------------------------------------------ closing


@aio
async def test_transport_end_fails_pending_at_once() -> None:
    p, raw = await peer_and_raw(default_timeout=None)
    tasks = [asyncio.create_task(p.request("m")) for _ in range(10)]
    await settle()
    await raw.t.close()
    res = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 1)
    assert all(isinstance(r, ConnectionClosed) for r in res)
    await asyncio.wait_for(p.wait_closed(), 6)
    with pytest.raises(ConnectionClosed):
        await p.request("m")
    with pytest.raises(ConnectionClosed):
        await p.notify("m")


@aio
async def test_close_drains_running_handlers_and_flushes() -> None:
    rpc = make_rpc()
    p, raw = await peer_and_raw(rpc)
    await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.05, "value": "kept"}, "id": 1})
    await asyncio.sleep(0.01)
    await p.close(2.0)
    assert await raw.recv() == {"jsonrpc": "2.0", "result": "kept", "id": 1}
    assert await raw.recv() is None
    assert p.closed.is_set()


@aio
async def test_close_deadline_fails_the_rest() -> None:
    rpc = make_rpc()
    p, raw = await peer_and_raw(rpc, default_timeout=None)
    await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 30}, "id": 1})
    out = asyncio.create_task(p.request("never"))
    await raw.recv()
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await p.close(0.2)
    assert loop.time() - start < 1.0
    with pytest.raises(ConnectionClosed):
        await out
    assert ("cancelled", 30) in rpc.events  # type: ignore[attr-defined]
    assert await raw.recv() is None  # the cancelled handler was not answered


@aio
async def test_requests_while_closing_are_refused() -> None:
    rpc = make_rpc()
    p, raw = await peer_and_raw(rpc, default_timeout=None)
    out = asyncio.create_task(p.request("pending"))
    await raw.recv()
    closing = asyncio.create_task(p.close(1.0))
    await settle()
    await raw.send({"jsonrpc": "2.0", "method": "add", "params": [1, 2], "id": 9})
    reply = await raw.recv()
    assert reply["id"] == 9 and reply["error"]["code"] == -32000
    # the reply to our own pending call is still taken while closing
    await raw.send({"jsonrpc": "2.0", "result": "late but fine", "id": 1})
    assert await out == "late but fine"
    await closing


@aio
async def test_send_failure_closes() -> None:
    class Broken:
        def __init__(self) -> None:
            self.q: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def send(self, data: bytes) -> None:
            raise BrokenPipeError("gone")

        async def receive(self) -> bytes | None:
            return await self.q.get()

        async def close(self) -> None:
            self.q.put_nowait(None)

    p = Peer(Broken(), default_timeout=None)
    await p.start()
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(p.request("m"), 2)
    await asyncio.wait_for(p.wait_closed(), 2)


@aio
async def test_close_is_idempotent_and_context_manager() -> None:
    a, b = memory_pair()
    async with Peer(a) as p:
        assert repr(p).startswith("<Peer peer open")
    assert p.closed.is_set()
    await p.close()
    await asyncio.gather(p.close(), p.close())
    q = Peer(b)
    await q.close()  # never started
    assert q.closed.is_set()


@aio
async def test_no_leaks_after_many_calls() -> None:
    pa, pb = await two_peers()
    for _ in range(3):
        await asyncio.gather(*(pa.request("add", [i, 1]) for i in range(2000)))
    assert pa._pending == {} and pa._runner.in_flight == 0 and pb._runner.in_flight == 0
    await pa.close()
    await pb.wait_closed()
    gc.collect()
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftovers == []


@aio
async def test_send_cancel_false_and_default_hard_max() -> None:
    p, raw = await peer_and_raw(default_timeout=0.05)
    with pytest.raises(RequestTimeout):
        await p.request("initialize", send_cancel=False)
    assert (await raw.recv())["method"] == "initialize"
    await raw.nothing()  # no cancel for this one
    # reset on progress with no maximum configured: capped at 10x the timeout
    loop = asyncio.get_running_loop()
    start = loop.time()
    t = asyncio.create_task(p.request("m", {}, timeout=0.03, on_progress=lambda *a: None, reset_timeout_on_progress=True))
    msg = await raw.recv()
    i = 0
    while not t.done():
        i += 1
        await raw.send({"jsonrpc": "2.0", "method": "$/progress", "params": {"token": msg["id"], "value": {"progress": i}}})
        await asyncio.sleep(0.01)
    with pytest.raises(RequestTimeout):
        await t
    assert 0.25 <= loop.time() - start < 0.6
    await p.close(0.1)


@aio
async def test_close_from_a_handler() -> None:
    rpc = Dispatcher()

    @rpc.method
    async def shutdown(ctx: PeerContext) -> str:
        await ctx.peer.close(5.0)
        return "bye"

    p, raw = await peer_and_raw(rpc)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await raw.send({"jsonrpc": "2.0", "method": "shutdown", "id": 1})
    assert await raw.recv() == {"jsonrpc": "2.0", "result": "bye", "id": 1}
    assert await raw.recv() is None
    await p.wait_closed()
    assert loop.time() - start < 1.0


@aio
async def test_half_close_serves_what_was_received() -> None:
    # The other side sends more requests than may run at once, then closes its sending side
    # (a client closing a server's stdin): everything received is still answered.
    rpc = make_rpc(Limits(max_in_flight=2))
    a, b = memory_pair()
    p = Peer(a, rpc, default_timeout=None)
    await p.start()
    raw = Raw(b)
    for i in range(6):
        await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.02, "value": i}, "id": i})
    pending_call = asyncio.create_task(p.request("never_answered"))
    b.close_write()
    got = []
    while True:
        m = await raw.recv()
        if m is None:
            break
        if "method" in m:
            continue  # our peer's own request
        got.append(m.get("result", m))
    assert sorted(got, key=str) == list(range(6)), got
    with pytest.raises(ConnectionClosed):
        await pending_call
    await p.wait_closed()
