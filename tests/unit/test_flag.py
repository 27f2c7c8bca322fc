"""sturdyrpc.flag.Flag: asyncio.Event's behaviour, on each event loop."""

from __future__ import annotations

import asyncio

import pytest
from support.loops import run_on

from sturdyrpc.flag import Flag


def test_wait_returns_at_once_when_set_and_blocks_when_clear(loop_name: str) -> None:
    async def go() -> None:
        f = Flag(True)
        assert f.is_set() and await f.wait() is True
        f.clear()
        assert not f.is_set()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(f.wait(), 0.05)

    run_on(loop_name, go())


def test_set_wakes_every_waiter_even_if_cleared_before_they_run(loop_name: str) -> None:
    async def go() -> None:
        f = Flag()
        waiters = [asyncio.ensure_future(f.wait()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        f.set()
        f.clear()  # as with asyncio.Event: those woken return True all the same
        assert await asyncio.gather(*waiters) == [True, True, True]
        late = asyncio.ensure_future(f.wait())  # cleared: a new wait waits
        await asyncio.sleep(0.01)
        assert not late.done()
        f.set()
        assert await late is True

    run_on(loop_name, go())


def test_a_cancelled_waiter_is_not_kept_and_the_others_still_wake(loop_name: str) -> None:
    async def go() -> None:
        f = Flag()
        gone = asyncio.ensure_future(f.wait())
        stays = asyncio.ensure_future(f.wait())
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert "1 waiter" in _waiters(f)
        f.set()
        assert await stays is True
        assert _waiters(f) == "none"

    run_on(loop_name, go())


def _waiters(f: Flag) -> str:
    # What the flag still holds, seen the way a leak would show: through gc's referents.
    import gc

    lists = [r for r in gc.get_referents(f) if isinstance(r, list)]
    return f"{len(lists[0])} waiter" if lists else "none"


def test_when_set_calls_back_once_in_the_context_given(loop_name: str) -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")

    async def main() -> list[str]:
        seen: list[str] = []
        f = Flag()
        var.set("the caller's")
        f.when_set(lambda: seen.append(var.get()), context=contextvars.Context())  # a context of its own
        f.when_set(lambda: seen.append("default: " + var.get()))  # a copy of the caller's
        await asyncio.sleep(0)
        assert seen == []  # not before it is set
        f.set()
        await asyncio.sleep(0)
        f.when_set(lambda: seen.append("already set"))
        await asyncio.sleep(0)
        f.clear()
        f.set()
        await asyncio.sleep(0)
        return seen

    assert run_on(loop_name, main()) == ["none", "default: the caller's", "already set"]  # each once


def test_a_callback_of_a_closed_loop_is_let_go_and_one_of_a_running_loop_still_runs(loop_name: str) -> None:
    # What a task waiting on a loop that closes does: it is cancelled with the loop, and a later
    # set() (from another loop, say at shutdown) must neither run it nor fail.
    f = Flag()
    seen: list[str] = []

    async def register(name: str) -> None:
        f.when_set(lambda: seen.append(name))

    run_on(loop_name, register("on the closed loop"))

    async def main() -> None:
        await register("on the running loop")
        f.set()
        await asyncio.sleep(0)

    run_on(loop_name, main())
    assert seen == ["on the running loop"]
