"""Running the dispatcher's calls on asyncio: the bridge between the sans-I/O core and transports.

A :class:`Runner` is fed whole frames (synchronously, straight from a protocol's
``data_received``) and sends each reply through a callback as soon as it is ready,
so replies leave in completion order and a slow request never blocks a fast one.

- async handlers run as tasks on the loop;
- sync handlers run in a bounded thread pool (``Limits.max_threads``), unless
  registered with ``blocking=False``, in which case they run inline;
- batch elements run concurrently and the batch reply is sent when all are done;
- at ``Limits.max_in_flight`` running requests the runner asks its transport to
  stop reading (``on_pressure(True)``) and to resume once below the cap, so the
  input is never buffered without bound and never dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
from collections.abc import Callable
from typing import Any

from .dispatch import HANDLER_ERRORS, BatchJob, Call, Context, Dispatcher
from .errors import InvalidRequest, ParseError
from .framing import BadHeader, FrameTooLarge
from .messages import Id, InvalidMessage, Message
from .profile import Profile

__all__ = ["Runner", "current_call"]

log = logging.getLogger("sturdyrpc")

#: The call whose handler is running in this task (None outside handlers). Transports that route
#: messages by the request they belong to (Streamable HTTP puts a request's progress and
#: notifications on that request's own response stream) read it when a message is sent.
current_call: contextvars.ContextVar[Call | None] = contextvars.ContextVar("sturdyrpc_current_call", default=None)


def _key(id_: Id) -> tuple[type, Any]:
    # 1, 1.0 and True are equal as dict keys; ids must stay apart by type.
    return (type(id_), id_)


class Runner:
    """Executes incoming messages for one connection."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        send: Callable[[bytes], None],
        *,
        executor: concurrent.futures.Executor | None = None,
        on_response: Callable[[Message | InvalidMessage], None] | None = None,
        on_pressure: Callable[[bool], None] | None = None,
        context_factory: Callable[[Call], Context] | None = None,
        profile: Profile | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.send = send
        self.on_response = on_response
        self.on_pressure = on_pressure
        self.context_factory = context_factory
        self.profile = profile
        self.max_in_flight = dispatcher.limits.max_in_flight
        self._own_executor = executor is None
        self._executor = executor
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_id: dict[tuple[type, Any], asyncio.Task[None]] = {}
        self._suppressed: set[asyncio.Task[None]] = set()
        self._pressed = False
        self._idle: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        """Requests (and batches) running now."""
        return len(self._tasks)

    def running_ids(self) -> list[Id]:
        """Ids of the requests running now."""
        return [k[1] for k in self._by_id]

    def is_running(self, id_: Id) -> bool:
        """Whether a request with exactly this id (type and value) is running."""
        return _key(id_) in self._by_id

    # ------------------------------------------------------------------ input

    def feed(self, frame: bytes | FrameTooLarge | BadHeader) -> None:
        """Handle one frame from the framer. Never raises for bad input."""
        if type(frame) is not bytes:
            omit = self.profile is not None and self.profile.omit_unreadable_id()
            if isinstance(frame, FrameTooLarge):
                err = self.dispatcher.error_reply(
                    InvalidRequest("Message too large", {"limit": "max_message_bytes", "max": frame.limit}), omit_id=omit
                )
            else:
                err = self.dispatcher.error_reply(
                    ParseError("Parse error", {"reason": getattr(frame, "reason", "bad frame")}), omit_id=omit
                )
            self.send(err)
            return
        if self.profile is None:
            # Requests for inline handlers run right there: their reply comes back as bytes.
            todo = self.dispatcher.receive_and_run(frame, self.on_response)
        else:
            todo = self.dispatcher.receive(frame, self.on_response, self.profile)
        if todo is None:
            return
        t = type(todo)
        if t is bytes:
            self.send(todo)  # type: ignore[arg-type]
            return
        if t is Call:
            call: Call = todo  # type: ignore[assignment]
            if self.profile is not None and self.profile.refuse_duplicate_ids and not call.is_notification and _key(call.id) in self._by_id:
                self.send(self.dispatcher.error_reply(InvalidRequest("Invalid Request", {"reason": "duplicate id of a request in flight"}), call.id))
                return
            entry = call.entry
            # Inline unless the handler needs a context from the factory (only made when asked for).
            if not entry.is_async and not entry.blocking and (self.context_factory is None or entry.binder.context_name is None):
                reply = self.dispatcher.run_inline(call)
                if reply is not None:
                    self.send(reply)
                return
            task = self._start(self._run_call(call))
            if not call.is_notification:
                key = _key(call.id)
                self._by_id[key] = task
                task.add_done_callback(functools.partial(self._forget, key))
            return
        job: BatchJob = todo  # type: ignore[assignment]
        # Elements for inline handlers run now, as they would alone: a batch of notifications
        # has taken effect before the next message is read. The others run as one task.
        factory = self.context_factory
        waiting: list[Call] = []
        seen: set[tuple[type, Any]] | None = set() if self.profile is not None and self.profile.refuse_duplicate_ids else None
        for c in job.calls:
            if seen is not None and not c.is_notification:
                k = _key(c.id)
                if k in seen or k in self._by_id:  # same rule as for a single request: -32600, nothing runs
                    self.dispatcher.failure(c, InvalidRequest("Invalid Request", {"reason": "duplicate id of a request in flight"}))
                    continue
                seen.add(k)
            e = c.entry
            if not e.is_async and not e.blocking and (factory is None or e.binder.context_name is None):
                self.dispatcher.run_inline(c)
            else:
                waiting.append(c)
        job.calls = waiting
        if not waiting:
            reply = job.finish()
            if reply is not None:
                self.send(reply)
            return
        self._start(self._run_batch(job))

    def _forget(self, key: tuple[type, Any], task: asyncio.Task[None]) -> None:
        if self._by_id.get(key) is task:
            del self._by_id[key]

    def _start(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        if not self._pressed and len(self._tasks) >= self.max_in_flight and self.on_pressure is not None:
            self._pressed = True
            self.on_pressure(True)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._suppressed.discard(task)
        if self._pressed and len(self._tasks) < self.max_in_flight:
            self._pressed = False
            if self.on_pressure is not None:
                self.on_pressure(False)
        if not self._tasks and self._idle is not None:
            self._idle.set()
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:  # a bug of ours: log it, never let it pass silently
                log.error("runner task failed", exc_info=exc)

    # -------------------------------------------------------------- execution

    async def _invoke(self, call: Call) -> Any:
        factory = self.context_factory
        ctx = factory(call) if factory is not None and call.entry.binder.context_name is not None else None
        entry = call.entry
        if entry.is_async:
            return await call.invoke(ctx)
        if entry.blocking:
            loop = asyncio.get_running_loop()
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.dispatcher.limits.max_threads, thread_name_prefix="sturdyrpc"
                )
            cvctx = contextvars.copy_context()
            return await loop.run_in_executor(self._executor, cvctx.run, call.invoke, ctx)
        return call.invoke(ctx)

    async def _run_call(self, call: Call) -> None:
        current_call.set(call)  # each task has its own context copy: this never leaks across calls
        try:
            value = await self._invoke(call)
        except asyncio.CancelledError:
            return  # cancelled requests are not answered
        except HANDLER_ERRORS as exc:  # sys.exit() in a handler (argparse...) must not stop the server
            reply = self.dispatcher.failure(call, exc)
        else:
            reply = self.dispatcher.result(call, value)
        task = asyncio.current_task()
        if reply is not None and task not in self._suppressed:
            self.send(reply)

    async def _run_element(self, call: Call) -> None:
        current_call.set(call)
        try:
            value = await self._invoke(call)
        except asyncio.CancelledError:
            raise
        except HANDLER_ERRORS as exc:
            self.dispatcher.failure(call, exc)
        else:
            self.dispatcher.result(call, value)

    async def _run_batch(self, job: BatchJob) -> None:
        try:
            if len(job.calls) == 1:
                await self._run_element(job.calls[0])
            else:
                await asyncio.gather(*(self._run_element(c) for c in job.calls))
        except asyncio.CancelledError:
            return
        reply = job.finish()
        if reply is not None:
            self.send(reply)

    # ---------------------------------------------------------------- control

    def cancel(self, id_: Id) -> bool:
        """Cancel the running request ``id_``; its reply is never sent. False if unknown."""
        task = self._by_id.pop(_key(id_), None)
        if task is None or task.done():
            return False
        self._suppressed.add(task)
        task.cancel()
        return True

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            self._suppressed.add(task)
            task.cancel()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing runs (True) or ``timeout`` passes (False)."""
        if not self._tasks:
            return True
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._idle = None
        return True

    def close(self) -> None:
        """Release the thread pool (threads still running finish on their own)."""
        if self._own_executor and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
