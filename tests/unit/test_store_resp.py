"""The pipelined Redis client (sturdyrpc.store.resp): its reply parser fed hostile and huge
replies, and the client on a real redis-server, under asyncio and under uvloop."""

from __future__ import annotations

import asyncio
import sys
import tracemalloc
from typing import Any

import pytest
from support.loops import run_on
from support.redis import RedisServer, unique_prefix

from sturdyrpc.store import StoreUnavailable, open_store
from sturdyrpc.store.resp import MAX_DEPTH, RespError, _Conn


def nested(depth: int, leaf: bytes = b":1\r\n") -> bytes:
    return b"*1\r\n" * depth + leaf


def feed(chunks: list[bytes], waiters: int) -> tuple[_Conn, list[Any]]:
    """Feed ``chunks`` to a connection with ``waiters`` commands waiting; what each got."""

    async def go() -> tuple[_Conn, list[Any]]:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        futs = [loop.create_future() for _ in range(waiters)]
        conn.waiters.extend(futs)
        for chunk in chunks:
            conn.data_received(chunk)  # raises nothing, whatever the bytes
        out: list[Any] = []
        for f in futs:
            if not f.done():
                out.append("waiting")
            elif f.exception() is not None:
                exc = f.exception()
                # a ConnectionError: what the store reports as StoreUnavailable
                out.append(("dropped" if isinstance(exc, ConnectionError) else type(exc).__name__, str(exc)))
            else:
                out.append(f.result())
        return conn, out

    return asyncio.run(go())


def splits(data: bytes) -> list[list[bytes]]:
    """``data`` in two pieces at every byte boundary, and byte by byte."""
    return [[data[:i], data[i:]] for i in range(len(data) + 1)] + [[data[i:i + 1] for i in range(len(data))]]


def deep_value(depth: int, leaf: Any = 1) -> Any:
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


ADVERSARIAL = [
    (b"$4\r\n\r\n\r\n\r\n", b"\r\n\r\n"),  # CRLF inside a bulk string
    (b"$6\r\n*1\r\n:1\r\n", b"*1\r\n:1"),  # a reply inside a bulk string is data
    (b"*3\r\n$-1\r\n*-1\r\n*0\r\n", [None, None, []]),
    (b"*2\r\n-ERR inside\r\n:-7\r\n", ["error", -7]),
    (b":123456789012345678901234567890\r\n", 123456789012345678901234567890),
    (b"$0\r\n\r\n", b""),
    (b"$3\r\n\x00\xff\r\r\n", b"\x00\xff\r"),
    (b"+\r\n", b""),
    (b"*2\r\n*0\r\n*2\r\n*1\r\n*0\r\n$1\r\nx\r\n", [[], [[[]], b"x"]]),
    (nested(MAX_DEPTH), deep_value(MAX_DEPTH)),  # the deepest reply accepted
    (nested(MAX_DEPTH - 1, b"*2\r\n*0\r\n:2\r\n")[4:], deep_value(MAX_DEPTH - 2, [[], 2])),
]


def _plain(value: Any) -> Any:
    if isinstance(value, RespError):
        return "error"
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def test_adversarial_replies_split_at_every_byte_boundary() -> None:
    stream = b"".join(r for r, _ in ADVERSARIAL)
    expected = [v for _, v in ADVERSARIAL]
    for chunks in splits(stream):
        conn, got = feed(chunks, len(ADVERSARIAL))
        assert [_plain(g) for g in got] == expected and not conn.lost


def test_a_reply_nested_too_deep_fails_its_command_and_drops_the_connection() -> None:
    # Far beyond the recursion limit (the parser has none to hit) and one past the bound.
    for depth in (100_000, MAX_DEPTH + 1):
        before = b"+OK\r\n"
        for chunks in ([before + nested(depth) + b":2\r\n"], [before, nested(depth)[:7], nested(depth)[7:]]):
            conn, got = feed(chunks, 3)
            assert got[0] == b"OK"  # what was complete before the bad reply is answered
            assert got[1] == ("dropped", f"reply from Redis nested deeper than {MAX_DEPTH} arrays")
            assert got[2][0] == "dropped" and conn.lost and not conn.waiters
    for chunks in splits(b":1\r\n" + nested(MAX_DEPTH + 1)):
        _, got = feed(chunks, 2)
        assert got == [1, ("dropped", f"reply from Redis nested deeper than {MAX_DEPTH} arrays")]


@pytest.mark.parametrize("garbage", [b"?what\r\n", b"$x\r\n", b"*1_\r\n", b"$3\r\nabcdef\r\n", b"\r\n", b":" + b"9" * 5000 + b"\r\n"])
def test_bytes_that_are_no_reply_fail_cleanly(garbage: bytes) -> None:
    conn, got = feed([garbage], 1)
    assert got[0][0] == "dropped" and conn.lost
    conn, got = feed([b"*2\r\n:1\r\n", garbage], 1)  # inside an open array too
    assert got[0][0] == "dropped" and conn.lost


def test_a_reply_no_command_asked_for_drops_the_connection() -> None:
    conn, got = feed([b":1\r\n:2\r\n"], 1)
    assert got == [1] and conn.lost


def _profile_events(chunks: list[bytes], waiters: int) -> tuple[int, list[Any]]:
    """How many Python and C function calls feeding ``chunks`` takes (a count, not a clock)."""

    async def go() -> tuple[int, list[Any]]:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        futs = [loop.create_future() for _ in range(waiters)]
        conn.waiters.extend(futs)
        calls = 0

        def count(frame: Any, event: str, arg: Any) -> None:
            nonlocal calls
            if event in ("call", "c_call"):
                calls += 1

        sys.setprofile(count)
        try:
            for chunk in chunks:
                conn.data_received(chunk)
        finally:
            sys.setprofile(None)
        return calls, [f.result() for f in futs]

    return asyncio.run(go())


def _xrange_reply(entries: int, size: int) -> tuple[bytes, list[Any]]:
    rows = [[b"%d-0" % i, [b"d", b"%0*d" % (size, i)]] for i in range(entries)]
    head = b"*%d\r\n" % entries
    body = b"".join(b"*2\r\n$%d\r\n%s\r\n*2\r\n$1\r\nd\r\n$%d\r\n%s\r\n" % (len(r[0]), r[0], size, r[1][1]) for r in rows)
    return head + body, rows


def test_work_is_linear_in_the_reply_size_whatever_the_reads() -> None:
    # An XRANGE-like reply of many entries arriving in 4 KiB reads: doubling the reply must about
    # double the calls made (a parser that starts over on every read makes four times as many).
    counts = []
    for entries in (2000, 4000):
        data, rows = _xrange_reply(entries, 100)
        chunks = [data[i:i + 4096] for i in range(0, len(data), 4096)]
        calls, got = _profile_events(chunks, 1)
        assert got == [rows]
        counts.append(calls)
    assert counts[1] < 2.3 * counts[0], counts


def test_huge_bulk_strings_in_small_reads_are_copied_once() -> None:
    # Two 2 MiB bulk strings in one reply, in 16 KiB reads: what the parser allocates over all
    # the reads stays a small multiple of the reply (tracemalloc's peak, reset before each read),
    # not the reply times the number of reads.
    big = 2 * 1024 * 1024
    data = b"*2\r\n" + (b"$%d\r\n" % big + b"a" * big + b"\r\n") + (b"$%d\r\n" % big + b"b" * big + b"\r\n")
    chunks = [data[i:i + 16384] for i in range(0, len(data), 16384)]

    async def go() -> tuple[int, Any]:
        loop = asyncio.get_running_loop()
        conn = _Conn()
        fut = loop.create_future()
        conn.waiters.append(fut)
        allocated = 0
        tracemalloc.start()
        try:
            for chunk in chunks:
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                conn.data_received(chunk)
                allocated += tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        return allocated, fut.result()

    allocated, value = asyncio.run(go())
    assert value == [b"a" * big, b"b" * big]
    assert allocated < 4 * len(data), allocated


def _loop_errors(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    return seen


def _nest_script(depth: int) -> str:
    return f"local t = 1; for i = 1, {depth} do t = {{t}} end; return t"


def test_a_deep_reply_from_a_real_redis_is_store_unavailable_and_the_next_call_reconnects(redis_server: RedisServer,
                                                                                          loop_name: str) -> None:
    async def go() -> None:
        errors = _loop_errors(asyncio.get_running_loop())
        s = open_store(redis_server.url, prefix=unique_prefix())
        try:
            await s.set("k", b"v")
            assert await s.bounded(s.raw.call("EVAL", _nest_script(MAX_DEPTH - 1), 0)) == deep_value(MAX_DEPTH - 1)
            with pytest.raises(StoreUnavailable) as info:
                await s.bounded(s.raw.call("EVAL", _nest_script(5000), 0))
            assert "nested deeper" in info.value.reason
            assert await s.get("k") == b"v"  # a new connection
            assert errors == []  # nothing escaped into the event loop
        finally:
            await s.aclose()

    run_on(loop_name, go())


def test_the_store_works_on_each_loop(redis_server: RedisServer, loop_name: str) -> None:
    # uvloop's transports are no asyncio.Transport subclasses: the client must need nothing more than write/abort.
    async def go() -> None:
        errors = _loop_errors(asyncio.get_running_loop())
        s = open_store(redis_server.url, prefix=unique_prefix(), op_timeout=2.0)
        try:
            await s.set("a", b"1", ttl=30)
            assert await s.get("a") == b"1"
            assert await s.incr("n") == 1 and await s.incr("n", ttl=30) == 2
            assert await s.compare_and_set("a", b"1", b"2")
            ids = await s.append_batch([("st", None, b"x"), ("st", None, b"y")])
            assert [d for _, d in await s.read_after("st", None)] == [b"x", b"y"] and await s.last_id("st") == ids[-1]
            sub = await s.subscribe("ch")
            assert await s.publish("ch", b"hello") == 1
            it = sub.__aiter__()
            assert await asyncio.wait_for(it.__anext__(), 5) == b"hello"
            await sub.aclose()
            with pytest.raises(StoreUnavailable):
                await s.bounded(s.raw.call("EVAL", _nest_script(5000), 0))
            assert await s.get("a") == b"2"
            assert errors == []
        finally:
            await s.aclose()

    run_on(loop_name, go())



# ------------------------------------------------------------- property-based: any reply, any bytes

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sturdyrpc.store.resp import ReplyParser  # noqa: E402

_leaves = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: (b":%d\r\n" % n, n)),
    st.binary(max_size=300).map(lambda b: (b"$%d\r\n%s\r\n" % (len(b), b), b)),
    st.binary(max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b).map(lambda b: (b"+" + b + b"\r\n", b)),
    st.text(max_size=40).filter(lambda t: "\r" not in t and "\n" not in t).map(lambda t: (b"-" + t.encode() + b"\r\n", ("error", t))),
    st.just((b"$-1\r\n", None)),
    st.just((b"*-1\r\n", None)),
)


def _array(children: list[tuple[bytes, Any]]) -> tuple[bytes, Any]:
    return b"*%d\r\n" % len(children) + b"".join(c[0] for c in children), [c[1] for c in children]


#: (the bytes of a reply, the value it stands for), arrays nested up to a few levels.
replies = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=6).map(_array), max_leaves=40)


def _value(v: Any) -> Any:
    if isinstance(v, RespError):
        return ("error", str(v))
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _outcome(parser: ReplyParser, chunks: list[bytes]) -> tuple[list[Any], str | None]:
    got: list[Any] = []
    for chunk in chunks:
        got.extend(_value(v) for v in parser.feed(chunk))
    return got, None if parser.error is None else str(parser.error)


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(st.lists(replies, min_size=1, max_size=5), st.lists(st.integers(min_value=0), max_size=12))
def test_any_replies_in_any_reads_parse_to_their_values(items: list[tuple[bytes, Any]], cuts: list[int]) -> None:
    data = b"".join(raw for raw, _ in items)
    got, error = _outcome(ReplyParser(), _chunked(data, cuts))
    assert error is None and got == [value for _, value in items]


@given(st.binary(max_size=400), st.lists(st.integers(min_value=0), max_size=12))
def test_any_bytes_in_any_reads_give_what_they_give_at_once(data: bytes, cuts: list[int]) -> None:
    # Malformed or not: never an exception out of feed, and the reads' sizes change nothing
    # (the same replies, the same error), which a parser that starts over would not guarantee.
    whole = _outcome(ReplyParser(), [data])
    assert _outcome(ReplyParser(), _chunked(data, cuts)) == whole


@given(replies, st.binary(min_size=1, max_size=60), st.integers(min_value=0))
def test_a_reply_with_bytes_changed_never_escapes_as_an_exception(item: tuple[bytes, Any], noise: bytes, at: int) -> None:
    raw = item[0]
    i = at % len(raw)
    broken = raw[:i] + noise + raw[i + len(noise):]
    conn, got = feed(_chunked(broken, [at, at * 7]), 4)
    # Each command answered (a value, or an error reply), failed as a dropped connection (what
    # the store reports as unavailable), or still waiting for more bytes: no other exception.
    failures = {g[0] for g in got if isinstance(g, tuple)}
    assert failures <= {"dropped", "RespError"}, got
    if conn.parser.error is not None or "dropped" in failures:
        assert conn.lost and not conn.waiters and "waiting" not in got


@given(st.integers(min_value=1, max_value=3), st.integers(min_value=100_000, max_value=1_500_000), st.integers(min_value=512, max_value=65536))
def test_huge_bulk_strings_in_reads_of_any_size(n: int, size: int, read: int) -> None:
    values = [bytes([65 + i]) * (size + i) for i in range(n)]
    data = b"*%d\r\n" % n + b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in values)
    got, error = _outcome(ReplyParser(), [data[i:i + read] for i in range(0, len(data), read)])
    assert error is None and got == [values]


@given(st.integers(min_value=MAX_DEPTH + 1, max_value=50_000), st.integers(min_value=1, max_value=64))
def test_nesting_beyond_the_bound_is_an_error_whatever_the_depth_and_reads(depth: int, read: int) -> None:
    data = nested(depth)
    got, error = _outcome(ReplyParser(), [data[i:i + read] for i in range(0, len(data), read)])
    assert got == [] and error == f"reply from Redis nested deeper than {MAX_DEPTH} arrays"


def test_a_frozen_redis_fails_the_waiting_commands_within_the_reply_timeout(loop_name: str) -> None:
    import os
    import signal
    import time

    from sturdyrpc.store.resp import RespClient

    srv = RedisServer()
    srv.start()
    assert srv.proc is not None

    async def go() -> None:
        c = RespClient(srv.url, reply_timeout=0.4)
        try:
            assert await c.call("SET", "k", "v") == b"OK"
            os.kill(srv.proc.pid, signal.SIGSTOP)  # up, connected, answering nothing
            t0 = time.monotonic()
            results = await asyncio.gather(c.call("GET", "k"), c.pipeline([("GET", "k"), ("PING",)]), return_exceptions=True)
            waited = time.monotonic() - t0
            assert all(isinstance(r, ConnectionError) and "did not answer in time" in str(r) for r in results), results
            assert 0.2 <= waited <= 1.0, waited  # one watchdog for the connection: reply_timeout, not a hang
            os.kill(srv.proc.pid, signal.SIGCONT)
            assert await c.call("GET", "k") == b"v"  # a new connection
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
            c.close()

    try:
        run_on(loop_name, go())
    finally:
        srv.stop()


def test_commands_of_one_turn_leave_in_one_write(redis_server: RedisServer, loop_name: str) -> None:
    import redis

    from sturdyrpc.store.resp import RespClient

    async def go() -> list[Any]:
        c = RespClient(redis_server.url)
        try:
            await c.call("PING")
            r = redis.Redis(port=redis_server.port)
            before = int(r.info("stats")["total_reads_processed"])
            got = await asyncio.gather(*(c.call("ECHO", str(i)) for i in range(50)), c.pipeline([("PING",), ("ECHO", "x")]))
            after = int(r.info("stats")["total_reads_processed"])
            # 52 commands in one write: Redis read them at once (plus the INFO call of this test)
            assert after - before <= 3, after - before
            return got
        finally:
            c.close()

    got = run_on(loop_name, go())
    assert got == [str(i).encode() for i in range(50)] + [[b"PONG", b"x"]]


def test_commands_that_may_wait_leave_with_the_next_command_or_after_their_delay(redis_server: RedisServer, loop_name: str) -> None:
    import time

    import redis

    from sturdyrpc.store.resp import RespClient

    async def go() -> None:
        c = RespClient(redis_server.url)
        r = redis.Redis(port=redis_server.port)
        try:
            await c.call("DEL", "lazy")
            # Waiting for a command to ride with: none comes, so they leave after their delay.
            t0 = time.monotonic()
            assert await c.pipeline([("RPUSH", "lazy", "a"), ("RPUSH", "lazy", "b")], within=0.2) == [1, 2]
            assert time.monotonic() - t0 >= 0.19
            # One comes: both leave at once, in order, in one write (Redis reads them at once).
            before = int(r.info("stats")["total_reads_processed"])
            lazy = asyncio.ensure_future(c.pipeline([("RPUSH", "lazy", "c")], within=5.0))
            await asyncio.sleep(0.05)
            assert not lazy.done() and r.llen("lazy") == 2  # still waiting, nothing sent
            t0 = time.monotonic()
            assert await c.call("LRANGE", "lazy", 0, -1) == [b"a", b"b", b"c"]  # sent after it, answered after it
            assert await lazy == [3] and time.monotonic() - t0 < 1.0
            assert int(r.info("stats")["total_reads_processed"]) - before <= 3  # the two INFO calls and one read
        finally:
            c.close()

    run_on(loop_name, go())
