"""What one session request costs in Redis, counted by Redis itself (``INFO commandstats`` and
``total_reads_processed``), on two workers sharing a real redis-server, on each event loop.

Steady state: the session is known to both workers, every request goes to the next worker on a
new connection. A tool answered on its own turn (``echo``) costs one command; a tool that runs
past it (``test_simple_text``, an ``async def``: its reply streamed with a priming event) costs
three: the session lookup, its stream's events as one entry, and that entry's expiry. Keys
that belong to a session or a request expire: a finished stream's within the replay window.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis
from support.loops import loop_env
from support.redis import RedisServer
from support.workers import Client, cluster

N = 40
#: Seconds between a worker's liveness writes (sturdyrpc.mcp_http.shared._BEAT), counted apart.
BEAT = 1.5
#: The replay window of a finished stream (the default of sturdyrpc.mcp_http.events.REPLAY_WINDOW).
REPLAY_WINDOW_MS = 30_000

# (tool call, the commands per request, the most reads Redis processes per request)
CASES = [
    ({"name": "echo", "arguments": {"text": "hi"}}, {"getex": 1}, 1),
    ({"name": "test_simple_text"}, {"getex": 1, "xadd": 1, "pexpire": 1}, 2),
]


def counts(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    out = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    out["reads"] = int(r.info("stats")["total_reads_processed"])
    return out


@pytest.mark.parametrize(("call", "per_request", "reads"), CASES, ids=["inline", "streamed"])
def test_commands_per_session_request(redis_server: RedisServer, loop_name: str, call: dict[str, Any],
                                      per_request: dict[str, int], reads: int) -> None:
    r = redis.Redis(port=redis_server.port)
    r.flushall()
    with cluster(redis_server, 2, env=loop_env(loop_name)) as ws:
        c = Client(ws)
        c.initialize(on=0)
        for _ in range(6):  # both workers hold the session
            c.request("tools/call", call)
        time.sleep(0.2)  # the writes after the last response have landed
        before, t0 = counts(r), time.monotonic()
        for _ in range(N):
            assert "result" in c.request("tools/call", call)
        time.sleep(0.2)
        after, elapsed = counts(r), time.monotonic() - t0
        delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        beats = 2 * (int(elapsed / BEAT) + 1)  # each worker's liveness SET, and Redis's read of it
        assert delta.pop("set", 0) <= beats, delta
        delta.pop("info", None)  # ours, above
        got_reads = delta.pop("reads")
        assert delta == {k: n * N for k, n in per_request.items()}, delta
        assert got_reads <= reads * N + beats + 2, (got_reads, N)

        # Every key a session or a request left expires; a finished stream's within the replay window.
        for key in r.scan_iter("sturdyrpc:*"):
            name = key.decode()
            if name == "sturdyrpc:request-state-keys":
                continue  # the server's signing keys: one for all sessions
            ttl = r.pttl(key)
            assert ttl > 0, name
            if name.startswith("sturdyrpc:ev:"):
                assert ttl <= REPLAY_WINDOW_MS, (name, ttl)


def _caller(c: Client, calls: int, call: dict[str, Any], first: int) -> None:
    """``calls`` requests of the session, alternating between the workers on two kept-alive
    connections (a load balancer's): ids ``first``, ``first + 1``, ..."""
    with httpx.Client(timeout=20) as http:
        for i in range(calls):
            msg = {"jsonrpc": "2.0", "id": first + i, "method": "tools/call", "params": call}
            r = http.post(c.workers[i % 2].url, content=json.dumps(msg), headers={**c.headers(), "connection": "keep-alive"})
            assert r.status_code == 200 and '"result"' in r.text, (r.status_code, r.text)


def test_streamed_replies_under_load_share_the_round_trip(redis_server: RedisServer, loop_name: str) -> None:
    """Under load, the events a finished stream leaves for a resume wait (up to the event store's
    write delay) for the worker's next command and go with it: a streamed call costs Redis about
    one read, not the two it costs a worker that gets no other request within that delay."""
    r = redis.Redis(port=redis_server.port)
    r.flushall()
    call = {"name": "test_simple_text"}
    threads, per_thread = 4, 60
    with cluster(redis_server, 2, env=loop_env(loop_name)) as ws:
        c = Client(ws)
        c.initialize(on=0)
        for _ in range(6):
            c.request("tools/call", call)
        time.sleep(0.2)
        before, t0 = counts(r), time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            for f in [pool.submit(_caller, c, per_thread, call, 1000 * (k + 1)) for k in range(threads)]:
                f.result()
        time.sleep(0.2)
        after, elapsed = counts(r), time.monotonic() - t0
    n = threads * per_thread
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    beats = 2 * (int(elapsed / BEAT) + 1)
    assert delta.get("getex") == n, delta
    # Each worker's last write of the run waits out the delay alone; so may one now and then.
    assert delta["reads"] <= 1.1 * n + beats + 4, (delta, n, elapsed)
