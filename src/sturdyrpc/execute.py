"""Running one handler: the only place in sturdyrpc where user code is invoked.

Every path that runs a handler (the stdio/TCP runner, the peer, plain JSON-RPC over HTTP,
stateless MCP, MCP tools, resources and prompts) goes through :func:`execute`, so they share
one policy; the runner, plain HTTP and stateless MCP enter it through :func:`run_call`, which
awaits the dispatcher's middleware chain around it when there is one, or :func:`run_call_now`,
its first step taken on the caller's turn (a chain that does not suspend needs no task):

- async handlers are awaited on the running loop;
- blocking sync handlers run on the one bounded pool of daemon threads for their
  ``Limits.max_threads`` (daemons: a handler stuck in ``time.sleep`` never holds the process
  open after SIGTERM);
- non-blocking sync handlers are called right here;
- anything the handler raises, ``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit``
  included, comes back as a failed :data:`Outcome` instead of propagating: an asyncio task
  that lets ``SystemExit`` out stops the event loop, and with it the server. Turning the
  exception into a reply (-32603 with an incident id, an MCP ``isError`` result) is the
  caller's protocol's business; only ``asyncio.CancelledError`` passes through, because a
  cancelled request is never answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import queue
import threading
from asyncio.tasks import _enter_task, _leave_task
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from .errors import HANDLER_ERRORS
from .invoke import Outcome, call_async, call_now

if TYPE_CHECKING:
    from .dispatch import Call, Context, Dispatcher

__all__ = ["HANDLER_ERRORS", "DaemonThreadPool", "Outcome", "Pending", "call_now", "execute", "run_call", "run_call_now", "shared_pool"]


class DaemonThreadPool(concurrent.futures.Executor):
    """A bounded thread pool whose threads are daemons, for sync handlers.

    The stdlib pool (and ``asyncio.to_thread``) joins its threads at interpreter exit, so one
    handler stuck in a slow call would hold the process open after SIGTERM. Daemon threads
    let the process exit promptly; on EOF the servers still wait for running requests.
    """

    def __init__(self, max_workers: int, name: str = "sturdyrpc") -> None:
        self._max = max_workers
        self._name = name
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shutdown = False

    @property
    def max_workers(self) -> int:
        return self._max

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._queue.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max:
                t = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
            return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to the awaiting task, like the stdlib pool
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._threads:
                self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()


_pools: dict[int, DaemonThreadPool] = {}
_pools_lock = threading.Lock()


def shared_pool(max_threads: int) -> DaemonThreadPool:
    """The process's one pool of ``max_threads`` daemon threads (made on first use).

    Every server with the same ``Limits.max_threads`` shares it, so the bound holds for the
    process and not once per connection, request or transport.
    """
    pool = _pools.get(max_threads)
    if pool is None:
        with _pools_lock:
            pool = _pools.get(max_threads)
            if pool is None:
                pool = _pools[max_threads] = DaemonThreadPool(max_threads)
    return pool


async def execute(
    fn: Callable[..., Any],
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    *,
    is_async: bool,
    blocking: bool,
    pool: concurrent.futures.Executor | None,
) -> Outcome:
    """Run ``fn(*args, **kwargs)`` as its kind requires and return its :data:`Outcome`.

    ``blocking`` sync handlers go to ``pool`` (the caller's, normally :func:`shared_pool`);
    the thread sees the caller's context variables. Raises only ``asyncio.CancelledError``.
    """
    if blocking and not is_async and pool is not None:
        # The outcome is made in the thread: an exception crossing into the task would be
        # thrown in by the event loop, and a GeneratorExit thrown into a coroutine chain lands
        # in the outermost frame (the caller's), past any handler in here.
        cv = contextvars.copy_context()
        try:
            future = pool.submit(cv.run, call_now, fn, args, kwargs)
        except RuntimeError as exc:  # the pool was shut down
            return False, exc
        outcome: Outcome = await asyncio.wrap_future(future)
        return outcome
    if is_async:
        return await call_async(fn, args, kwargs)
    return call_now(fn, args, kwargs)


class Pending:
    """A call whose middleware chain suspended in its first step (see :func:`run_call_now`).

    Await it in a task started with ``context=pending.context`` (the request's context
    variables, where the first step ran): it resumes the partly run chain, passing the results
    and exceptions of what it awaits through, and returns the call's :data:`Outcome`. Raises
    only ``asyncio.CancelledError``. Await it once.
    """

    __slots__ = ("_coro", "_yielded", "context")

    def __init__(self, coro: Coroutine[Any, Any, Outcome] | None, yielded: Any, context: contextvars.Context) -> None:
        self._coro = coro  # None: the first step raised asyncio.CancelledError
        self._yielded = yielded
        #: The context the first step ran in: the continuation must run in it too.
        self.context = context

    def __await__(self) -> Generator[Any, Any, Outcome]:
        coro = self._coro
        if coro is None:
            raise asyncio.CancelledError
        self._coro = None
        yielded = self._yielded
        self._yielded = None
        # What `yield from coro` would do, picked up after its first step.
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # thrown in by the task (cancellation): into the chain
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                continue
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


def run_call_now(dispatcher: Dispatcher, call: Call, context: Context | None, cv: contextvars.Context | None = None) -> Outcome | Pending | None:
    """:func:`run_call` started now, for a sync ``blocking=False`` handler; None for the others
    (then await :func:`run_call` in a task).

    Without middleware the handler is called right here, without a coroutine. With middleware
    the chain is driven eagerly on the caller's turn: a chain that does not suspend (the usual
    case: middleware that only wrap ``call_next``) finishes here and its outcome is returned,
    with no task; one that suspends comes back as a :class:`Pending` for the caller to finish
    in a task. The chain runs in ``cv`` (the request's context variables: a copy of the
    caller's when not given), so whatever it sets stays the request's.

    Until the chain first suspends it runs outside any task: ``asyncio.current_task()`` is
    None there (the reader's task, when there is one, is left for that step) and so
    ``asyncio.timeout()`` cannot be entered before a middleware's first real suspension. A
    dispatcher whose middleware need a task from their first line sets
    ``Dispatcher.eager_chain = False``: its chains then always run in a task (None here).
    """
    entry = call.entry
    if entry.is_async or entry.blocking:
        return None
    if not dispatcher.middleware_chain:
        args, kwargs = call.arguments(context)
        return call_now(entry.fn, args, kwargs)
    if not dispatcher.eager_chain:
        return None
    if cv is None:
        cv = contextvars.copy_context()
    coro = _chain(dispatcher, call, context, None)
    loop = asyncio.get_running_loop()
    reader = asyncio.current_task(loop)
    if reader is not None:
        _leave_task(loop, reader)
    try:
        yielded = cv.run(coro.send, None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except asyncio.CancelledError:
        return Pending(None, None, cv)  # raises it when awaited: the request is not answered
    finally:
        if reader is not None:
            _enter_task(loop, reader)
    return Pending(coro, yielded, cv)


async def run_call(dispatcher: Dispatcher, call: Call, context: Context | None, pool: concurrent.futures.Executor | None) -> Outcome:
    """Run ``call``'s handler through ``dispatcher``'s middleware chain and return its outcome.

    The one call path of the runner, plain HTTP and stateless MCP (:func:`run_call_now` is its
    first step, taken on the caller's turn). ``context`` is the request's context when the
    caller made one (a peer's); with middleware one is always made, so the chain and the
    handler see the same object. An exception escaping a middleware becomes a failed outcome
    exactly like a handler's; only ``asyncio.CancelledError`` passes through.
    """
    entry = call.entry
    if not dispatcher.middleware_chain:
        args, kwargs = call.arguments(context)
        if entry.is_async:  # execute()'s first case, one coroutine less per request
            return await call_async(entry.fn, args, kwargs)
        return await execute(entry.fn, args, kwargs, is_async=False, blocking=entry.blocking, pool=pool)
    return await _chain(dispatcher, call, context, pool)


async def _chain(dispatcher: Dispatcher, call: Call, context: Context | None, pool: concurrent.futures.Executor | None) -> Outcome:
    """``call`` through the middleware chain, as an :data:`Outcome` (raises only ``CancelledError``)."""
    entry = call.entry
    ctx = context if context is not None else call.make_context()

    async def endpoint(c: Context) -> Any:
        args, kwargs = call.arguments(c)
        ok, value = await execute(entry.fn, args, kwargs, is_async=entry.is_async, blocking=entry.blocking, pool=pool)
        if ok:
            return value
        raise value

    ok, value = call_now(dispatcher.prepare_context, (ctx,), {})
    if not ok:
        return ok, value
    return await call_async(dispatcher.run_chain, (ctx, endpoint), {})
