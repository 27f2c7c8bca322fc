"""One executor: every way of running a handler (Runner, handle_sync, run_inline, call_now) applies
the same error policy, and blocking handlers share the one bounded daemon pool."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import msgspec
import pytest

from sturdyrpc import Dispatcher, Limits
from sturdyrpc.execute import DaemonThreadPool, call_now, execute, shared_pool
from sturdyrpc.runner import Runner

RAISERS: dict[str, BaseException] = {
    "system_exit": SystemExit(3),
    "keyboard_interrupt": KeyboardInterrupt(),
    "generator_exit": GeneratorExit(),
}


def make_rpc(limits: Limits | None = None) -> Dispatcher:
    rpc = Dispatcher(limits or Limits())
    for name, exc in RAISERS.items():

        def sync_raiser(_exc: BaseException = exc) -> None:
            raise _exc

        async def async_raiser(_exc: BaseException = exc) -> None:
            await asyncio.sleep(0)
            raise _exc

        async def async_raiser_now(_exc: BaseException = exc) -> None:
            raise _exc

        rpc.add_method(sync_raiser, f"{name}_blocking")
        rpc.add_method(sync_raiser, f"{name}_inline", blocking=False)
        rpc.add_method(async_raiser, f"{name}_async")
        rpc.add_method(async_raiser_now, f"{name}_async_now")

    @rpc.method(blocking=False)
    def echo(value: Any) -> Any:
        return value

    @rpc.method
    def thread_name() -> str:
        return threading.current_thread().name

    return rpc


def req(method: str, id_: Any = 1, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id_}
    if params is not None:
        msg["params"] = params
    return msgspec.json.encode(msg)


def assert_internal_error(reply: Any, id_: Any = 1) -> None:
    assert reply["id"] == id_
    assert reply["error"]["code"] == -32603
    assert len(reply["error"]["data"]["incident"]) == 8


@pytest.mark.parametrize("kind", sorted(RAISERS))
@pytest.mark.parametrize("how", ["inline", "async_now"])
def test_handle_sync_answers_sys_exit_keyboard_interrupt_and_generator_exit_with_an_incident(kind: str, how: str) -> None:
    rpc = make_rpc()
    out = rpc.handle_sync(req(f"{kind}_{how}"))
    assert out is not None
    assert_internal_error(msgspec.json.decode(out))
    assert msgspec.json.decode(rpc.handle_sync(req("echo", 2, ["still here"])) or b"") == {"jsonrpc": "2.0", "result": "still here", "id": 2}


@pytest.mark.parametrize("kind", sorted(RAISERS))
def test_run_inline_and_the_invoker_agree_on_handler_errors(kind: str) -> None:
    rpc = make_rpc()
    call = rpc.receive(req(f"{kind}_inline"))
    out = rpc.run_inline(call)  # type: ignore[arg-type]
    assert type(out) is bytes
    err = msgspec.json.decode(out)["error"]
    assert err["code"] == -32603 and set(err["data"]) == {"incident"}
    ok, exc = call_now(call.entry.fn, (), {})  # type: ignore[union-attr]
    assert not ok and type(exc) is type(RAISERS[kind])


def test_the_error_policy_has_one_home() -> None:
    """What user code raises is caught in one module (sturdyrpc.invoke) and nowhere else: every
    path (stdio, peer, HTTP, batches, stateless, tools, tasks) reaches user code through it."""
    import pathlib

    import sturdyrpc

    root = pathlib.Path(sturdyrpc.__file__).parent
    sites = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "except HANDLER_ERRORS" in p.read_text())
    assert sites == ["invoke.py"], sites


@pytest.mark.parametrize("kind", sorted(RAISERS))
def test_runner_answers_sys_exit_keyboard_interrupt_and_generator_exit_and_keeps_serving(kind: str) -> None:
    async def main() -> list[Any]:
        sent: list[bytes] = []
        r = Runner(make_rpc(), sent.append)
        for i, how in enumerate(("blocking", "inline", "async", "async_now")):
            r.feed(req(f"{kind}_{how}", i))
        r.feed(msgspec.json.encode([{"jsonrpc": "2.0", "method": f"{kind}_{how}", "id": f"b{how}"}
                                    for how in ("blocking", "inline", "async", "async_now")]))
        assert await r.drain(5)
        r.feed(req("echo", "after", ["ok"]))
        assert await r.drain(5)
        return [msgspec.json.decode(s) for s in sent]

    replies = asyncio.run(main())
    singles = sorted((m for m in replies if type(m) is dict and m["id"] != "after"), key=lambda m: m["id"])
    assert [m["id"] for m in singles] == [0, 1, 2, 3]
    for m in singles:
        assert_internal_error(m, m["id"])
    batch = next(m for m in replies if type(m) is list)
    assert len(batch) == 4
    for m in batch:
        assert_internal_error(m, m["id"])
    assert {"jsonrpc": "2.0", "result": "ok", "id": "after"} in replies


def test_runner_runs_blocking_handlers_on_the_shared_daemon_pool() -> None:
    async def main() -> list[Any]:
        sent: list[bytes] = []
        r = Runner(make_rpc(Limits(max_threads=3)), sent.append)
        for i in range(6):
            r.feed(req("thread_name", i))
        assert await r.drain(5)
        return [msgspec.json.decode(s)["result"] for s in sent]

    names = asyncio.run(main())
    pool = shared_pool(3)
    assert pool is shared_pool(3) and isinstance(pool, DaemonThreadPool)
    assert all(n.startswith("sturdyrpc-") for n in names)
    workers = [t for t in threading.enumerate() if t.name in set(names)]
    assert workers and all(t.daemon for t in workers)
    assert len(set(names)) <= 3


def test_execute_passes_cancellation_through_and_turns_everything_else_into_an_outcome() -> None:
    async def sleeper() -> None:
        await asyncio.sleep(10)

    async def main() -> None:
        for exc in RAISERS.values():

            def boom(_e: BaseException = exc) -> None:
                raise _e

            ok, value = await execute(boom, (), {}, is_async=False, blocking=True, pool=shared_pool(2))
            assert not ok and value is exc
        task = asyncio.ensure_future(execute(sleeper, (), {}, is_async=True, blocking=False, pool=None))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_call_now_and_handle_sync_of_async_handlers() -> None:
    rpc = Dispatcher()

    @rpc.method
    async def quick(x: int) -> int:
        return x + 1

    @rpc.method
    async def suspends() -> None:
        await asyncio.sleep(0)

    assert msgspec.json.decode(rpc.handle_sync(req("quick", 1, [1])) or b"")["result"] == 2
    assert_internal_error(msgspec.json.decode(rpc.handle_sync(req("suspends")) or b""))  # needs a loop: -32603
    ok, err = call_now(sys.exit, (4,), {})
    assert not ok and isinstance(err, SystemExit)
    assert call_now(max, (1, 2), {}) == (True, 2)


def test_daemon_pool_is_bounded() -> None:
    pool = DaemonThreadPool(2, name="bounded-test")
    running = 0
    peak = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    futures = [pool.submit(work) for _ in range(10)]
    for f in futures:
        f.result(5)
    pool.shutdown(wait=True)
    assert peak <= 2
