"""The store interface: every behaviour against the in-memory store and a real redis-server
(the Redis store on asyncio and on uvloop: its connections are the event loop's transports)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.loops import LOOP_NAMES, run_on
from support.redis import RedisServer, unique_prefix

from sturdyrpc.store import MemoryStore, Store, StoreUnavailable, open_store

#: (store, event loop): the memory store does no I/O, so one loop is enough for it.
KINDS = [("memory", "asyncio")] + [("redis", name) for name in LOOP_NAMES]


class Maker:
    """Makes the store under test; ``loop`` is the event loop it is run on."""

    def __init__(self, make: Any, loop: str) -> None:
        self.make, self.loop = make, loop

    def __call__(self) -> Store:
        return self.make()  # type: ignore[no-any-return]


@pytest.fixture(params=KINDS, ids=["-".join(k) for k in KINDS])
def make_store(request: Any) -> Maker:
    kind, loop = request.param
    if kind == "memory":
        return Maker(MemoryStore, loop)
    srv = request.getfixturevalue("redis_server")
    prefix = unique_prefix()
    return Maker(lambda: open_store(srv.url, prefix=prefix), loop)


def run(make_store: Maker, body: Any) -> None:
    async def go() -> None:
        store = make_store()
        try:
            await body(store)
        finally:
            await store.aclose()

    run_on(make_store.loop, go())


def test_records_ttl_and_delete(make_store: Any) -> None:
    async def body(s: Store) -> None:
        assert await s.get("a") is None
        await s.set("a", b"1")
        await s.set("b", b"2", ttl=0.05)
        assert await s.get("a") == b"1"
        assert await s.get_touch("b", 10) == b"2"  # renewed: survives its first TTL
        await asyncio.sleep(0.1)
        assert await s.get("b") == b"2"
        await s.set("c", b"3", ttl=0.05)
        await asyncio.sleep(0.15)
        assert await s.get("c") is None
        assert await s.touch("c", 1) is False
        assert await s.delete("a", "zz") == 1
        assert await s.get("a") is None

    run(make_store, body)


def test_compare_and_set(make_store: Any) -> None:
    async def body(s: Store) -> None:
        assert await s.compare_and_set("k", None, b"v1")
        assert not await s.compare_and_set("k", None, b"other")  # present: an absent-expectation fails
        assert not await s.compare_and_set("k", b"wrong", b"v2")
        assert await s.get("k") == b"v1"
        assert await s.compare_and_set("k", b"v1", b"v2", ttl=5)
        assert await s.get("k") == b"v2"
        assert await s.compare_and_set("k", b"v2", None)
        assert await s.get("k") is None

    run(make_store, body)


def test_incr(make_store: Any) -> None:
    async def body(s: Store) -> None:
        assert await s.incr("n") == 1
        assert await s.incr("n", ttl=5) == 2

    run(make_store, body)


def test_streams_bounded_read_after_and_follow(make_store: Any) -> None:
    async def body(s: Store) -> None:
        ids = [await s.append("st", f"e{i}".encode(), maxlen=3, ttl=30) for i in range(5)]
        got = await s.read_after("st", None)
        assert [d for _, d in got] == [b"e2", b"e3", b"e4"]  # bounded: the oldest went first
        assert [i for i, _ in got] == ids[2:]
        assert await s.read_after("st", ids[3]) == [(ids[4], b"e4")]
        assert await s.last_id("st") == ids[4]
        seen: list[bytes] = []

        async def follower() -> None:
            async for _eid, data in s.follow("st", ids[3]):
                seen.append(data)
                if len(seen) == 3:
                    return

        task = asyncio.create_task(follower())
        await asyncio.sleep(0.05)
        await s.append("st", b"live1", maxlen=3)
        await s.append("st", b"live2", maxlen=3)
        await asyncio.wait_for(task, 5)
        assert seen == [b"e4", b"live1", b"live2"]  # what was missed, then live, in order
        await s.drop_stream("st")
        assert await s.read_after("st", None) == []

    run(make_store, body)


def test_follow_from_now_misses_nothing_later(make_store: Any) -> None:
    async def body(s: Store) -> None:
        await s.append("f", b"old")
        seen: list[bytes] = []

        async def follower() -> None:
            async for _eid, data in s.follow("f", None):
                seen.append(data)
                if len(seen) == 2:
                    return

        task = asyncio.create_task(follower())
        await asyncio.sleep(0.05)
        await s.append("f", b"n1")
        await s.append("f", b"n2")
        await asyncio.wait_for(task, 5)
        assert seen == [b"n1", b"n2"]

    run(make_store, body)


@pytest.mark.parametrize(("kind", "loop"), KINDS, ids=["-".join(k) for k in KINDS])
def test_publish_subscribe(kind: str, loop: str, request: Any) -> None:
    if kind == "memory":
        def factory() -> Store:
            return MemoryStore()
    else:
        srv = request.getfixturevalue("redis_server")
        prefix = unique_prefix()

        def factory() -> Store:
            return open_store(srv.url, prefix=prefix)

    async def go() -> None:
        a = factory()
        b = a if kind == "memory" else factory()  # two "workers" on redis
        try:
            sub = await a.subscribe("ch")
            other = await a.subscribe("other")
            await asyncio.sleep(0.05)
            got: list[bytes] = []

            async def read() -> None:
                async for m in sub:
                    got.append(m)
                    if len(got) == 2:
                        return

            task = asyncio.create_task(read())
            assert await b.publish("ch", b"one") >= 1
            await b.publish("ch", b"two")
            await asyncio.wait_for(task, 5)
            assert got == [b"one", b"two"]
            await sub.aclose()
            await other.aclose()
            assert await b.publish("ch", b"nobody") == 0
        finally:
            await a.aclose()
            if b is not a:
                await b.aclose()

    run_on(loop, go())


def test_redis_down_is_unavailable_fast_and_recovers(redis_server: RedisServer, loop_name: str) -> None:
    async def go() -> None:
        s = open_store(redis_server.url, prefix=unique_prefix(), op_timeout=1.0)
        try:
            await s.set("x", b"1")
            redis_server.stop()
            with pytest.raises(StoreUnavailable) as info:
                await asyncio.wait_for(s.get("x"), 5)  # never a hang: bounded by op_timeout
            assert info.value.store == redis_server.url
            redis_server.start()
            for _ in range(50):  # the next calls reconnect by themselves
                try:
                    await s.set("x", b"2")
                    break
                except StoreUnavailable:
                    await asyncio.sleep(0.1)
            assert await s.get("x") == b"2"
        finally:
            if redis_server.proc is None:
                redis_server.start()
            await s.aclose()

    run_on(loop_name, go())


def test_open_store_by_url() -> None:
    assert isinstance(open_store("memory"), MemoryStore)
    assert isinstance(open_store(None), MemoryStore)
    with pytest.raises(ValueError):
        open_store("mongodb://x")
    s = open_store("redis://user:secret@127.0.0.1:1/0")
    assert "secret" not in s.name and s.shared


def test_resp_replies_split_anywhere_are_matched_in_order() -> None:
    from sturdyrpc.store.resp import RespError, _Conn

    replies = (b"$5\r\nhello\r\n" b"$-1\r\n" b":42\r\n" b"+OK\r\n" b"-ERR wrong\r\n"
               b"*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nd\r\n$2\r\nab\r\n*0\r\n" b"$0\r\n\r\n")

    async def go(step: int) -> list[object]:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        futs = [loop.create_future() for _ in range(7)]
        conn.waiters.extend(futs)
        for i in range(0, len(replies), step):  # every split point, for step 1
            conn.data_received(replies[i:i + step])
        out: list[object] = []
        for f in futs:
            try:
                out.append(f.result())
            except RespError as exc:
                out.append(("error", str(exc)))
        return out

    for step in (1, 2, 3, 7, len(replies)):
        assert asyncio.run(go(step)) == [b"hello", None, 42, b"OK", ("error", "ERR wrong"),
                                         [[b"1-0", [b"d", b"ab"]], []], b""]


def test_redis_url_with_password_and_database() -> None:
    import redis as redis_py

    srv = RedisServer("--requirepass", "s3cret")
    srv.start()
    try:
        async def go() -> None:
            s = open_store(f"redis://:s3cret@127.0.0.1:{srv.port}/3", prefix="p:")
            try:
                await s.set("k", b"v")
                assert await s.get("k") == b"v"
                assert "s3cret" not in s.name
            finally:
                await s.aclose()
            bad = open_store(f"redis://:wrong@127.0.0.1:{srv.port}/3", op_timeout=1.0)
            try:
                with pytest.raises(StoreUnavailable):
                    await bad.get("k")
            finally:
                await bad.aclose()

        asyncio.run(go())
        r = redis_py.Redis(port=srv.port, password="s3cret", db=3)
        assert r.get("p:k") == b"v"  # in database 3, under the prefix
        assert redis_py.Redis(port=srv.port, password="s3cret", db=0).get("p:k") is None
    finally:
        srv.stop()


def test_store_warnings_are_one_line_per_kind_per_interval_counting_the_ones_left_out(caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import time

    from sturdyrpc.store.notices import NoticeLimiter

    log = logging.getLogger("sturdyrpc.test-notices")
    limiter = NoticeLimiter(interval=0.3)
    with caplog.at_level(logging.WARNING, logger="sturdyrpc.test-notices"):
        sent = [limiter.warning(log, "down", "store %s down: %s", "redis://h:1/0", n) for n in range(50)]
        assert limiter.warning(log, "other", "another kind")  # each kind has its own interval
        assert sent[0] and not any(sent[1:])
        time.sleep(0.35)
        assert limiter.warning(log, "down", "store %s down: %s", "redis://h:1/0", 50)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["store redis://h:1/0 down: 0", "another kind",
                     lines[2]] and lines[2].startswith("store redis://h:1/0 down: 50 (49 more like this suppressed in the last")
