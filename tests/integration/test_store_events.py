"""SSE events on a shared store (sturdyrpc.mcp_http.store_events): a POST stream's events
written together as one store entry, replayed and followed from any event id, written at once
when a connection leaves an open stream, and kept for the replay window only once finished.
Against the in-memory store and a real redis-server (on asyncio and on uvloop)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.loops import LOOP_NAMES, run_on
from support.redis import unique_prefix

from sturdyrpc.mcp_http.store_events import BUNDLE_MAX, StoreEventStore, events_key
from sturdyrpc.store import MemoryStore, Store, open_store

KINDS = [("memory", "asyncio")] + [("redis", name) for name in LOOP_NAMES]
SID = "s1"


@pytest.fixture(params=KINDS, ids=["-".join(k) for k in KINDS])
def backend(request: Any) -> tuple[Any, str]:
    kind, loop = request.param
    if kind == "memory":
        return MemoryStore, loop
    srv = request.getfixturevalue("redis_server")
    prefix = unique_prefix()
    return (lambda: open_store(srv.url, prefix=prefix)), loop


def run(backend: tuple[Any, str], body: Any) -> None:
    make, loop = backend

    async def go() -> None:
        store: Store = make()
        try:
            await body(store)
        finally:
            await store.aclose()

    run_on(loop, go())


def msg(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":%d}}' % i


@pytest.mark.parametrize("n", [1, 3, BUNDLE_MAX - 1, BUNDLE_MAX, BUNDLE_MAX + 1, 3 * BUNDLE_MAX + 2])
def test_a_quick_stream_replays_from_each_of_its_event_ids(backend: tuple[Any, str], n: int) -> None:
    async def body(store: Store) -> None:
        ev = StoreEventStore(store, write_delay=5.0)  # only the end of the stream starts the write
        ids = [ev.store_nowait(SID, "p1", None)] + [ev.store_nowait(SID, "p1", msg(i)) for i in range(n)]
        assert await store.last_id(events_key(SID, "p1")) is None  # nothing written while it runs
        ev.end_stream(SID, "p1")
        await ev.flush()
        entries = await store.read_after(events_key(SID, "p1"), None)
        events = n + 2  # the priming event and the end marker too
        assert len(entries) == -(-events // BUNDLE_MAX)  # one store entry per BUNDLE_MAX events
        for k, eid in enumerate(ids):
            assert eid is not None
            found = await ev.replay_after(SID, eid)
            assert found == ("p1", [(ids[j + 1], msg(j)) for j in range(k, n)]), (k, eid)
        assert await ev.replay_after(SID, "p9." + store.entry_id(1)) is None  # a stream it never had

    run(backend, body)


def test_following_from_an_id_inside_a_bundle_gives_the_later_events_then_the_end(backend: tuple[Any, str]) -> None:
    async def body(store: Store) -> None:
        ev = StoreEventStore(store, write_delay=5.0)
        ids = [ev.store_nowait(SID, "p2", None)] + [ev.store_nowait(SID, "p2", msg(i)) for i in range(4)]
        await ev.flush()  # the first four events in one entry, the stream still open
        got: list[tuple[str, bytes | None]] = []

        async def follow() -> None:
            assert ids[2] is not None
            async for item in ev.follow(SID, "p2", ids[2].partition(".")[2]):
                got.append(item)

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.05)
        later = ev.store_nowait(SID, "p2", msg(4))
        ev.end_stream(SID, "p2")
        await ev.flush()
        await asyncio.wait_for(task, 5)
        assert [m for _, m in got] == [msg(2), msg(3), msg(4), None]
        assert [i for i, _ in got[:3]] == [ids[3], ids[4], later]

    run(backend, body)


def test_an_open_stream_waits_for_the_write_delay_unless_a_connection_leaves_it(backend: tuple[Any, str]) -> None:
    async def body(store: Store) -> None:
        key = events_key(SID, "p3")
        ev = StoreEventStore(store, write_delay=0.2)
        ev.store_nowait(SID, "p3", None)
        await asyncio.sleep(0.05)
        assert await store.last_id(key) is None  # within the delay: waiting for more of the stream
        await asyncio.sleep(0.3)
        assert await store.last_id(key) is not None  # the delay passed: written although still open
        ev.store_nowait(SID, "p3", msg(1))
        ev.detached(SID, "p3")  # the client left: a resume may follow on another worker at once
        for _ in range(20):
            await asyncio.sleep(0.005)
            if len(await store.read_after(key, None)) == 2:
                break
        assert len(await store.read_after(key, None)) == 2, "not written at once when the connection left"
        ev.end_stream(SID, "p3")  # nothing open any more: written without waiting
        for _ in range(20):
            await asyncio.sleep(0.005)
            if len(await store.read_after(key, None)) == 3:
                break
        assert len(await store.read_after(key, None)) == 3

    run(backend, body)


def test_a_finished_stream_is_kept_for_the_replay_window_only(redis_server: Any, loop_name: str) -> None:
    import redis

    prefix = unique_prefix()

    async def body() -> None:
        store = open_store(redis_server.url, prefix=prefix)
        try:
            ev = StoreEventStore(store, ttl=600.0, replay_window=3.0, write_delay=0.01)
            ev.store_nowait(SID, "p4", None)
            await asyncio.sleep(0.1)  # written while open: lives as long as the session may
            assert redis.Redis(port=redis_server.port).pttl(prefix + events_key(SID, "p4")) > 500_000
            ev.store_nowait(SID, "p4", msg(1))
            ev.end_stream(SID, "p4")
            await ev.flush()
            assert 0 < redis.Redis(port=redis_server.port).pttl(prefix + events_key(SID, "p4")) <= 3000
        finally:
            await store.aclose()

    run_on(loop_name, body())


def test_served_again_on_a_new_loop_the_writes_go_on() -> None:
    store = MemoryStore()
    ev = StoreEventStore(store, write_delay=0.05)

    async def first() -> None:
        ev.store_nowait(SID, "p5", None)  # its write is due after the delay: the loop ends before

    async def second() -> int:
        ev.store_nowait(SID, "p6", msg(1))
        await asyncio.sleep(0.3)
        return len(await store.read_after(events_key(SID, "p5"), None)) + len(await store.read_after(events_key(SID, "p6"), None))

    asyncio.run(first())
    assert asyncio.run(second()) == 2  # the old loop's timer went with it; this loop's writes
