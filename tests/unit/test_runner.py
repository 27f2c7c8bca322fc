"""The asyncio Runner with a fake ``send``: concurrency, threads, batches, backpressure, cancel."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any

import msgspec
import pytest

from sturdyrpc import Dispatcher, Limits
from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.framing import BadHeader, FrameTooLarge
from sturdyrpc.runner import Runner

pytestmark = pytest.mark.timeout(20)


def req(method: str, params: Any = None, id: Any = 1) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        msg["params"] = params
    return msgspec.json.encode(msg)


def note(method: str, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msgspec.json.encode(msg)


class Sent:
    """A fake ``send`` that records replies and when they left."""

    def __init__(self) -> None:
        self.items: list[tuple[float, Any]] = []
        self.t0 = time.monotonic()

    def __call__(self, payload: bytes) -> None:
        assert type(payload) is bytes
        self.items.append((time.monotonic() - self.t0, msgspec.json.decode(payload)))

    @property
    def values(self) -> list[Any]:
        return [v for _, v in self.items]

    def ids(self) -> list[Any]:
        return [v["id"] for v in self.values]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def test_slow_async_request_does_not_block_fast_one() -> None:
    async def main() -> Sent:
        sent = Sent()
        r = Runner(make_demo(), sent)
        r.feed(req("sleep", {"seconds": 0.4, "value": "slow"}, "slow"))
        r.feed(req("sleep", {"seconds": 0.05, "value": "fast"}, "fast"))
        r.feed(req("echo", ["now"], "now"))
        assert r.in_flight == 2
        assert await r.drain(5)
        r.close()
        return sent

    sent = run(main())
    assert sent.ids() == ["now", "fast", "slow"]  # completion order, not arrival order
    assert [v["result"] for v in sent.values] == ["now", "fast", "slow"]


def test_sync_handlers_run_in_threads_and_do_not_block_the_loop() -> None:
    rpc = Dispatcher()
    main_thread = threading.get_ident()
    seen_threads: list[int] = []

    spans: list[tuple[float, float]] = []

    @rpc.method
    def block(seconds: float) -> str:
        seen_threads.append(threading.get_ident())
        start = time.monotonic()
        time.sleep(seconds)
        spans.append((start, time.monotonic()))
        return "done"

    @rpc.method
    async def quick() -> str:
        return "quick"

    async def main() -> tuple[Sent, float]:
        sent = Sent()
        r = Runner(rpc, sent)
        r.feed(req("block", [0.6], 1))
        r.feed(req("block", [0.6], 2))
        t0 = time.monotonic()
        await asyncio.sleep(0.05)  # the loop keeps running while threads block
        loop_lag = time.monotonic() - t0
        r.feed(req("quick", None, 3))
        assert await r.drain(5)
        r.close()
        return sent, loop_lag

    sent, loop_lag = run(main())
    assert loop_lag < 0.5  # blocked by a handler it would be >= 0.6
    assert sent.ids()[0] == 3
    assert sorted(sent.ids()[1:]) == [1, 2]
    (s1, e1), (s2, e2) = spans
    assert s2 < e1 and s1 < e2, "two blocking handlers should have run at the same time, in two threads"
    assert len(set(seen_threads)) == 2
    assert seen_threads and main_thread not in seen_threads


def test_batch_elements_run_concurrently_and_reply_once() -> None:
    async def main() -> tuple[Sent, float]:
        sent = Sent()
        r = Runner(make_demo(), sent)  # sleep: the demo's async handler
        batch = b"[" + b",".join(req("sleep", {"seconds": 0.3, "value": i}, i) for i in range(3)) + b","
        batch += note("record", [1]) + b"," + req("nope", None, "x") + b"]"
        t0 = time.monotonic()
        r.feed(batch)
        await asyncio.sleep(0.15)
        assert sent.items == [], "no part of a batch reply goes out before all elements are done"
        assert await r.drain(5)
        r.close()
        return sent, time.monotonic() - t0

    sent, elapsed = run(main())
    assert elapsed < 0.8  # one after another: >= 0.9
    assert len(sent.items) == 1
    reply = sent.values[0]
    assert isinstance(reply, list) and len(reply) == 4
    assert sorted(e["id"] for e in reply if e["id"] != "x") == [0, 1, 2]
    assert [e["error"]["code"] for e in reply if e["id"] == "x"] == [-32601]


def test_batch_with_sync_threaded_elements_concurrent() -> None:
    rpc = Dispatcher()

    active = [0, 0]  # running now, most at once
    lock = threading.Lock()

    @rpc.method
    def block(i: int) -> int:
        with lock:
            active[0] += 1
            active[1] = max(active)
        time.sleep(0.3)
        with lock:
            active[0] -= 1
        return i

    async def main() -> tuple[Sent, float]:
        sent = Sent()
        r = Runner(rpc, sent)
        t0 = time.monotonic()
        r.feed(b"[" + b",".join(req("block", [i], i) for i in range(3)) + b"]")
        assert await r.drain(5)
        r.close()
        return sent, time.monotonic() - t0

    sent, elapsed = run(main())
    assert active[1] == 3, "batch elements ran one after another"
    assert elapsed < 0.8
    assert len(sent.items) == 1 and sorted(e["result"] for e in sent.values[0]) == [0, 1, 2]


def test_all_notification_batch_sends_nothing() -> None:
    async def main() -> Sent:
        sent = Sent()
        r = Runner(make_demo(), sent)
        r.feed(b"[" + note("sleep", {"seconds": 0.01}) + b"," + note("record", [1]) + b"]")
        r.feed(note("sleep", {"seconds": 0.01}))
        r.feed(note("fail"))
        r.feed(note("nope"))
        assert await r.drain(5)
        r.close()
        return sent

    assert run(main()).items == []


def test_backpressure_on_and_off() -> None:
    events: list[tuple[bool, int]] = []

    async def main() -> Sent:
        sent = Sent()
        r: Runner

        def on_pressure(on: bool) -> None:
            events.append((on, r.in_flight))

        r = Runner(make_demo(Limits(max_in_flight=3)), sent, on_pressure=on_pressure)
        r.feed(req("sleep", {"seconds": 0.1}, 1))
        r.feed(req("sleep", {"seconds": 0.1}, 2))
        assert events == []
        r.feed(req("sleep", {"seconds": 0.2}, 3))
        assert events == [(True, 3)]
        assert await r.drain(5)
        r.close()
        return sent

    sent = run(main())
    assert events[0] == (True, 3)
    assert events[1][0] is False and events[1][1] < 3
    assert len(events) == 2
    assert sorted(sent.ids()) == [1, 2, 3]


def test_cancel_means_no_reply() -> None:
    async def main() -> tuple[Sent, bool, bool]:
        sent = Sent()
        r = Runner(make_demo(), sent)
        r.feed(req("sleep", {"seconds": 0.3, "value": "a"}, "a"))
        r.feed(req("sleep", {"seconds": 0.1, "value": 7}, 7))
        await asyncio.sleep(0.01)
        assert r.is_running("a") and r.is_running(7) and not r.is_running("7")
        assert not r.cancel("7")  # type matters: "7" is not 7
        ok = r.cancel("a")
        again = r.cancel("a")
        assert await r.drain(5)
        await asyncio.sleep(0.35)
        r.close()
        return sent, ok, again

    sent, ok, again = run(main())
    assert ok and not again
    assert sent.ids() == [7]


def test_cancel_all_and_drain_timeout() -> None:
    async def main() -> Sent:
        sent = Sent()
        r = Runner(make_demo(), sent)
        r.feed(req("sleep", {"seconds": 5}, 1))
        assert not await r.drain(0.05)
        r.cancel_all()
        assert await r.drain(1)
        r.close()
        return sent

    assert run(main()).items == []


def test_errors_and_frame_events() -> None:
    async def main() -> Sent:
        sent = Sent()
        r = Runner(make_demo(), sent)
        r.feed(b"{bad json")
        r.feed(FrameTooLarge(100))
        r.feed(BadHeader("invalid Content-Length"))
        r.feed(req("fail", None, 9))
        r.feed(b'{"jsonrpc":"2.0","result":1,"id":1}')  # a response: not answered
        assert await r.drain(5)
        r.close()
        return sent

    sent = run(main())
    codes = [(v["error"]["code"], v["id"]) for v in sent.values]
    assert codes == [(-32700, None), (-32600, None), (-32700, None), (-32603, 9)]
    assert b"SECRET" not in msgspec.json.encode(sent.values)


def test_async_handler_exception_leaks_nothing() -> None:
    rpc = Dispatcher()

    @rpc.method
    async def boom() -> None:
        await asyncio.sleep(0)
        raise ValueError("SECRET-TOKEN-42 /etc/shadow")

    async def main() -> Sent:
        sent = Sent()
        r = Runner(rpc, sent)
        r.feed(req("boom", None, 1))
        assert await r.drain(5)
        r.close()
        return sent

    sent = run(main())
    text = msgspec.json.encode(sent.values).decode()
    assert sent.values[0]["error"]["code"] == -32603
    for needle in ("SECRET", "ValueError", "/", ".py"):
        assert needle not in text


def test_sys_exit_in_any_kind_of_handler_is_answered_and_loop_survives() -> None:
    import sys

    rpc = Dispatcher()

    @rpc.method
    def in_thread() -> None:
        sys.exit(2)

    @rpc.method
    async def in_task() -> None:
        await asyncio.sleep(0)
        sys.exit(2)

    @rpc.method(blocking=False)
    def inline() -> None:
        sys.exit(2)

    async def main() -> Sent:
        sent = Sent()
        r = Runner(rpc, sent)
        r.feed(req("in_thread", None, 1))
        r.feed(req("in_task", None, 2))
        r.feed(req("inline", None, 3))
        r.feed(b"[" + req("in_thread", None, 4) + b"," + req("in_task", None, 5) + b"]")
        assert await r.drain(5)
        r.close()
        return sent

    sent = run(main())
    flat = [e for v in sent.values for e in (v if isinstance(v, list) else [v])]
    assert sorted(e["id"] for e in flat) == [1, 2, 3, 4, 5]
    assert all(e["error"]["code"] == -32603 for e in flat)


def test_cancelled_handler_that_swallows_cancellation_still_gets_no_reply() -> None:
    rpc = Dispatcher()

    @rpc.method
    async def stubborn() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "answered anyway"
        return "finished"

    async def main() -> Sent:
        sent = Sent()
        r = Runner(rpc, sent)
        r.feed(req("stubborn", None, 1))
        await asyncio.sleep(0.02)
        assert r.cancel(1)
        assert await r.drain(5)
        r.close()
        return sent

    assert run(main()).items == []
