"""A middleware chain around an inline handler is started on the reader's turn (issues 11, 12):
one that does not suspend answers with no task; one that suspends goes on in a task, in the
request's own context; errors and cancellation are handled exactly as on the awaited path."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

import msgspec
import pytest
from support import SERVERS

from sturdyrpc import Context, Dispatcher
from sturdyrpc.execute import Pending, run_call_now
from sturdyrpc.runner import Runner

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="-")


def req(method: str, params: Any = None, id: Any = 1) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        msg["params"] = params
    return msgspec.json.encode(msg)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def make(log: list[Any], *, suspend: bool = False, fail: str | None = None) -> Dispatcher:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def add(a: int, b: int) -> int:
        log.append(("handler", _seen.get()))
        return a + b

    @rpc.method(blocking=False)
    def boom() -> None:
        raise ValueError("secret handler text")

    @rpc.middleware
    async def mw(ctx: Context, call_next: Any) -> Any:
        log.append(("first step task", asyncio.current_task()))
        _seen.set(f"req {ctx.id}")
        if fail == "before":
            raise RuntimeError("secret middleware text")
        if fail == "cancel":
            raise asyncio.CancelledError
        if suspend:
            await asyncio.sleep(0.01)
            log.append(("after suspension task", asyncio.current_task()))
            if fail == "after":
                raise RuntimeError("secret middleware text")
        try:
            return await call_next(ctx)
        except ValueError as exc:
            log.append(("handler raised", type(exc).__name__))
            raise
        finally:
            log.append(("seen after", _seen.get()))

    return rpc


class Sent(list[Any]):
    def __call__(self, payload: bytes) -> None:
        self.append(msgspec.json.decode(payload))


def test_a_chain_that_does_not_suspend_answers_on_the_readers_turn_without_a_task() -> None:
    log: list[Any] = []

    async def main() -> None:
        sent = Sent()
        r = Runner(make(log), sent)
        r.feed(req("add", [1, 2], 1))
        # answered before anything else ran: no task, nothing in flight
        assert sent == [{"jsonrpc": "2.0", "result": 3, "id": 1}]
        assert r.in_flight == 0
        assert _seen.get() == "-"  # what the chain set stayed the request's
        r.close()

    run(main())
    assert log[0] == ("first step task", None)
    assert ("handler", "req 1") in log and ("seen after", "req 1") in log


def test_a_chain_that_suspends_goes_on_in_a_task_in_the_requests_context() -> None:
    log: list[Any] = []

    async def main() -> Sent:
        sent = Sent()
        r = Runner(make(log, suspend=True), sent)
        r.feed(req("add", [1, 2], 1))
        r.feed(req("add", [3, 4], 2))
        assert sent == [] and r.in_flight == 2 and r.is_running(1)
        assert _seen.get() == "-"
        assert await r.drain(5)
        r.close()
        return sent

    sent = run(main())
    assert sorted(sent, key=lambda m: m["id"]) == [{"jsonrpc": "2.0", "result": 3, "id": 1}, {"jsonrpc": "2.0", "result": 7, "id": 2}]
    after = [v for k, v in log if k == "after suspension task"]
    assert len(after) == 2 and all(isinstance(t, asyncio.Task) for t in after)
    assert ("handler", "req 1") in log and ("handler", "req 2") in log  # each request its own context


def test_a_suspended_chain_can_be_cancelled_and_is_not_answered() -> None:
    log: list[Any] = []

    async def main() -> Sent:
        sent = Sent()
        r = Runner(make(log, suspend=True), sent)
        r.feed(req("add", [1, 2], 1))
        assert r.cancel(1)
        assert await r.drain(5)
        await asyncio.sleep(0.03)
        r.close()
        return sent

    assert run(main()) == []
    assert not any(k == "handler" for k, _ in log)


@pytest.mark.parametrize(("suspend", "fail"), [(False, "before"), (False, "handler"), (True, "before"), (True, "after"), (True, "handler")])
def test_failures_are_answered_as_on_the_awaited_path(suspend: bool, fail: str, caplog: pytest.LogCaptureFixture) -> None:
    log: list[Any] = []

    async def main() -> Sent:
        sent = Sent()
        r = Runner(make(log, suspend=suspend, fail=None if fail == "handler" else fail), sent)
        r.feed(req("boom" if fail == "handler" else "add", None if fail == "handler" else [1, 2], 1))
        assert await r.drain(5)
        r.close()
        return sent

    sent = run(main())
    assert len(sent) == 1
    err = sent[0]["error"]
    assert err["code"] == -32603 and set(err["data"]) == {"incident"}
    assert "secret" not in msgspec.json.encode(sent[0]).decode()
    assert err["data"]["incident"] in caplog.text
    if fail == "handler":
        assert ("handler raised", "ValueError") in log  # the middleware saw the handler's exception


def test_cancelled_error_in_the_first_step_means_no_reply() -> None:
    async def main() -> Sent:
        sent = Sent()
        r = Runner(make([], fail="cancel"), sent)
        r.feed(req("add", [1, 2], 1))
        assert await r.drain(5)
        await asyncio.sleep(0.01)
        r.close()
        return sent

    assert run(main()) == []


def test_eager_chain_false_runs_every_chain_in_a_task() -> None:
    log: list[Any] = []

    async def main() -> Sent:
        sent = Sent()
        rpc = make(log)
        rpc.eager_chain = False
        r = Runner(rpc, sent)
        r.feed(req("add", [1, 2], 1))
        assert sent == [] and r.in_flight == 1
        assert await r.drain(5)
        r.close()
        return sent

    assert run(main()) == [{"jsonrpc": "2.0", "result": 3, "id": 1}]
    assert isinstance(log[0][1], asyncio.Task)


def test_the_first_step_leaves_the_readers_task() -> None:
    # a peer reads in a task of its own: the chain's first step must not run as that task (an
    # asyncio.timeout() entered there would cancel the reader when it expired)
    log: list[Any] = []

    async def main() -> None:
        rpc = make(log)
        call = rpc.receive(req("add", [1, 2], 1))
        me = asyncio.current_task()
        outcome = run_call_now(rpc, call, None)  # type: ignore[arg-type]
        assert outcome == (True, 3)
        assert asyncio.current_task() is me

    run(main())
    assert log[0] == ("first step task", None)


def test_pending_passes_results_and_exceptions_of_awaited_futures_through() -> None:
    rpc = Dispatcher()
    got: list[Any] = []

    @rpc.method(blocking=False)
    def echo(x: Any) -> Any:
        return x

    @rpc.middleware
    async def mw(ctx: Context, call_next: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_exception, KeyError("k"))
        try:
            await fut
        except KeyError as exc:
            got.append(exc.args)
        fut2 = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut2.set_result, "r")
        got.append(await fut2)
        await asyncio.sleep(0)  # a bare yield
        return await call_next(ctx)

    async def main() -> Any:
        call = rpc.receive(req("echo", ["v"], 1))
        pending = run_call_now(rpc, call, None)  # type: ignore[arg-type]
        assert isinstance(pending, Pending)
        return await asyncio.get_running_loop().create_task(_await(pending), context=pending.context)

    assert run(main()) == (True, "v")
    assert got == [("k",), "r"]


async def _await(p: Pending) -> Any:
    return await p


# ---------------------------------------------------------------- MCP


def make_mcp(log: list[Any], *, suspend: bool = False) -> Any:
    from sturdyrpc.mcp import MCPServer

    server = MCPServer("same-turn", "1.0")

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        """Echo."""
        log.append(("tool", _seen.get()))
        return text

    @server.tool(blocking=False)
    def boom() -> str:
        """Fail."""
        raise RuntimeError("secret tool text")

    @server.middleware
    async def mw(ctx: Context, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            log.append(("first step task", asyncio.current_task()))
            _seen.set(f"req {ctx.id}")
            if suspend:
                await asyncio.sleep(0.005)
        result = await call_next(ctx)
        if ctx.method == "tools/call":
            log.append(("result", type(result).__name__, ctx.incident))
        return result

    return server


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("suspend", [False, True])
def test_mcp_inline_tools_run_the_chain_on_the_readers_turn(protocol: str, suspend: bool) -> None:
    log: list[Any] = []
    server = make_mcp(log, suspend=suspend)

    async def main() -> None:
        async with server.test_client(protocol) as client:
            assert (await client.call_tool("echo", {"text": "hi"}))["content"][0]["text"] == "hi"
            failed = await client.call_tool("boom", {})
            assert failed["isError"] is True and "secret" not in str(failed)
            incident = failed["content"][0]["text"].split("incident ")[1].rstrip(").")
            # the middleware saw the result as plain data, and the incident id on ctx
            assert [e for e in log if e[0] == "result"] == [("result", "dict", None), ("result", "dict", incident)]

    run(main())
    steps = [t for k, t, *_ in log if k == "first step task"]
    assert len(steps) == 2 and all(t is None for t in steps)  # started on the reader's turn, outside any task
    assert [v for k, v, *_ in log if k == "tool"] == ["req 2"]  # in the context the chain set up


def test_mcp_stateless_request_goes_on_in_a_task_in_the_requests_context_when_the_chain_suspends() -> None:
    import json

    from sturdyrpc.envelope import read

    log: list[Any] = []
    server = make_mcp(log, suspend=True)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}

    async def related(data: bytes) -> None:
        return None

    async def go() -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta}}).encode()
        later = server.serve_stateless(read(body, server.dispatcher.limits), related)
        assert not later.done and later.task is not None
        reply = json.loads(await later.wait() or b"")
        assert reply["result"]["content"][0]["text"] == "hi"
        assert _seen.get() == "-"

    run(go())
    assert ("tool", "req 7") in log  # the tool ran in the context the chain's first step set up


def test_stdio_starts_the_chain_on_the_readers_turn_and_finishes_a_suspended_one_in_a_task() -> None:
    import sys

    from sturdyrpc.mcp.client import connect

    async def go() -> list[Any]:
        async with connect([sys.executable, str(SERVERS / "mcp_middleware_turn_server.py")], protocol="2025-11-25") as client:
            calls = [client.call_tool("wait" if i % 3 == 0 else "echo", {"text": f"t{i}"}) for i in range(30)]
            out = list(await asyncio.gather(*calls))
            out.append(await client.call_tool("boom", {}))
            return out

    out = run(go())
    for i, r in enumerate(out[:30]):
        assert r["content"][0]["text"] == f"t{i} on_readers_turn=True"  # every chain started on the reader's turn
    assert out[30]["isError"] is True and "incident" in out[30]["content"][0]["text"] and "secret" not in str(out[30])
