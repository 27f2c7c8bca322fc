"""Running the dispatcher's calls on asyncio: the bridge between the sans-I/O core and transports.

A :class:`Runner` is fed whole frames (synchronously, straight from a protocol's
``data_received``) and sends each reply through a callback as soon as it is ready,
so replies leave in completion order and a slow request never blocks a fast one.

- handlers run through :func:`sturdyrpc.execute.execute` (one error policy for every path):
  async handlers as tasks on the loop, sync handlers on the process's bounded pool of daemon
  threads (``Limits.max_threads``), sync handlers registered with ``blocking=False`` inline;
- every request that runs as a task, alone or as a batch element, takes one slot of
  ``Limits.max_in_flight`` (:attr:`Runner.admission`) before its handler starts; batch
  elements beyond the free slots wait for one, in order. Inline handlers, which finish on
  the spot, need none;
- the batch reply is sent when all its elements are done;
- while no slot is free the runner asks its transport to stop reading
  (``on_pressure(True)``) and to resume once one is (:attr:`Runner.accepting` says the
  same, for a transport that must decide whether to feed the rest of a chunk it has read),
  so the input is never buffered without bound and never dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
from collections.abc import Callable
from typing import Any

from .admission import Admission
from .dispatch import HANDLER_ERRORS, BatchJob, Call, Context, Dispatcher
from .errors import InvalidRequest, ParseError
from .execute import Outcome, Pending, execute, run_call, run_call_now, shared_pool
from .framing import BadHeader, FrameTooLarge
from .messages import Id, InvalidMessage, Message
from .profile import Profile
from .request_context import current_call

__all__ = ["Runner", "current_call"]  # current_call: re-exported from request_context

log = logging.getLogger("sturdyrpc")



def _key(id_: Id) -> tuple[type, Any]:
    # 1, 1.0 and True are equal as dict keys; ids must stay apart by type.
    return (type(id_), id_)


#: What :meth:`Runner.run_now` returns for a call whose chain suspended (its reply comes later).
STARTED = b""


class Runner:
    """Executes incoming messages for one connection.

    ``executor`` (optional) runs blocking sync handlers instead of the shared daemon pool of
    ``Limits.max_threads``; it stays the caller's to shut down.
    """

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
        #: The slots of ``max_in_flight``: one per request whose handler runs (or is about to).
        self.admission = Admission(self.max_in_flight, on_pressure=self._pressure)
        self._pool: concurrent.futures.Executor = executor if executor is not None else shared_pool(dispatcher.limits.max_threads)
        self._tasks: set[asyncio.Task[None]] = set()
        self._call_of: dict[asyncio.Task[None], Call] = {}  # tasks whose call may hold a slot
        self._by_id: dict[tuple[type, Any], asyncio.Task[None]] = {}
        self._suppressed: set[asyncio.Task[None]] = set()
        # Calls holding a slot -> how many calls back to the other side they are parked on
        # (a parked call has given its slot back; see park()).
        self._holding: dict[Call, int] = {}
        self._parked = 0
        self._idle: asyncio.Event | None = None

    def _pressure(self, on: bool) -> None:
        cb = self.on_pressure
        if cb is not None:
            cb(on)

    @property
    def accepting(self) -> bool:
        """True while a new request could start without waiting for a slot.

        A stream transport that has read a chunk of several frames stops feeding the rest
        while this is False (and resumes on ``on_pressure(False)``), so no more than
        ``max_in_flight`` handlers ever run for one connection.
        """
        return not self.admission.full

    @property
    def in_flight(self) -> int:
        """Requests whose handlers are running now (each batch element counts)."""
        return self.admission.in_use + self._parked

    def running_ids(self) -> list[Id]:
        """Ids of the requests running now."""
        return [k[1] for k in self._by_id]

    def is_running(self, id_: Id) -> bool:
        """Whether a request with exactly this id (type and value) is running."""
        by_id = self._by_id
        if not by_id:
            return False  # the common case on a busy connection of inline calls: no key to build
        return (type(id_), id_) in by_id  # _key(id_), without the call

    def owns(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` is one of the tasks running this connection's handlers."""
        return task in self._tasks

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
            if not entry.is_async and not entry.blocking:
                if not self.dispatcher.middleware_chain:
                    # Inline unless the handler needs a context from the factory (only made when asked for).
                    if self.context_factory is None or entry.binder.context_name is None:
                        reply = self.dispatcher.run_inline(call)
                        if reply is not None:
                            self.send(reply)
                        return
                elif self.dispatcher.eager_chain:
                    reply = self.run_now(call)
                    if reply:
                        self.send(reply)
                    return
            # A slot now if one is free (the transport learns at once that it must stop
            # reading); otherwise the task waits for one, behind those already waiting.
            admitted = self.admission.try_acquire()
            if admitted:
                self._holding[call] = 0
            task = self._start(self._run_call(call, admitted), call)
            if not call.is_notification:
                key = _key(call.id)
                self._by_id[key] = task
                task.add_done_callback(functools.partial(self._forget, key))
            return
        job: BatchJob = todo  # type: ignore[assignment]
        # Elements for inline handlers run now, as they would alone: a batch of notifications
        # has taken effect before the next message is read. The others run in order as slots allow.
        factory = self.context_factory
        chain = self.dispatcher.middleware_chain
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
            if not e.is_async and not e.blocking and (factory is None or e.binder.context_name is None) and not chain:
                self.dispatcher.run_inline(c)
            else:
                waiting.append(c)
        job.calls = waiting
        if not waiting:
            reply = job.finish()
            if reply is not None:
                self.send(reply)
            return
        self._start(self._run_batch(job), None)

    def run_now(self, call: Call, cv: contextvars.Context | None = None) -> bytes | None:
        """``call`` (a sync ``blocking=False`` handler) through the middleware chain, started on
        this turn (:func:`run_call_now`) in ``cv`` (default: a copy of the current context).

        Returns the reply (None: a notification's, nothing), or :data:`STARTED` when the chain
        suspended: a task finishes it like any other request (holding a slot from now on) and
        sends its reply."""
        if cv is None:
            cv = contextvars.copy_context()
        ok, value = cv.run(self._context, call)
        if ok:
            outcome = run_call_now(self.dispatcher, call, value, cv)
            if type(outcome) is not tuple:
                assert isinstance(outcome, Pending)
                self.admission.force_acquire()  # already running: over the limit for a moment at most
                self._holding[call] = 0
                task = self._start(self._finish(call, outcome), call, outcome.context)
                if not call.is_notification:
                    key = _key(call.id)
                    self._by_id[key] = task
                    task.add_done_callback(functools.partial(self._forget, key))
                return STARTED
            ok, value = outcome
        return self.dispatcher.result(call, value) if ok else self.dispatcher.failure(call, value)

    async def _finish(self, call: Call, pending: Pending) -> None:
        try:
            ok, value = await pending
        except asyncio.CancelledError:
            return  # cancelled requests are not answered
        reply = self.dispatcher.result(call, value) if ok else self.dispatcher.failure(call, value)
        if reply is not None and asyncio.current_task() not in self._suppressed:
            self.send(reply)

    def _forget(self, key: tuple[type, Any], task: asyncio.Task[None]) -> None:
        if self._by_id.get(key) is task:
            del self._by_id[key]

    def _start(self, coro: Any, call: Call | None, context: contextvars.Context | None = None) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, context=context)
        self._tasks.add(task)
        if call is not None:
            self._call_of[task] = call
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._suppressed.discard(task)
        # The slot comes back here, not in a finally: a task cancelled before its first step
        # never runs its body.
        call = self._call_of.pop(task, None)
        if call is not None:
            depth = self._holding.pop(call, None)
            if depth is not None:  # None: it never got a slot (cancelled while waiting for one)
                if depth:
                    self._parked -= 1  # its slot went back when it parked
                else:
                    self.admission.release()
        if not self._tasks and self._idle is not None:
            self._idle.set()
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:  # a bug of ours: log it, never let it pass silently
                log.error("runner task failed", exc_info=exc)

    # ------------------------------------------------------------------ parking

    def park(self, call: Call) -> None:
        """``call``'s handler waits on a call back to the other side: its slot serves others.

        Otherwise two busy peers calling each other could each hold the very slots the other
        is waiting for. Pair every :meth:`park` with :meth:`unpark`; calls that hold no slot
        (inline, finished, or another runner's) are ignored.
        """
        depth = self._holding.get(call)
        if depth is None:
            return
        self._holding[call] = depth + 1
        if depth == 0:
            self._parked += 1
            self.admission.release()

    def unpark(self, call: Call) -> None:
        """The call back is answered: ``call``'s handler runs again and takes a slot back at once
        (possibly over the limit for a moment; no new request starts until it is below)."""
        depth = self._holding.get(call)
        if not depth:
            return
        self._holding[call] = depth - 1
        if depth == 1:
            self._parked -= 1
            self.admission.force_acquire()

    # -------------------------------------------------------------- execution

    def _arguments(self, call: Call) -> Outcome:
        """``(True, (args, kwargs))`` for ``call``, with the factory's context where the handler
        takes one; ``(False, exc)`` when making the context failed."""
        current_call.set(call)  # each task has its own context copy: this never leaks across calls
        factory = self.context_factory
        if factory is not None and call.entry.binder.context_name is not None:
            try:
                return True, call.arguments(factory(call))
            except HANDLER_ERRORS as exc:
                return False, exc
        return True, call.arguments()

    def _context(self, call: Call) -> Outcome:
        """``(True, context or None)`` for ``call`` run through the middleware chain (the factory's
        context, which the chain and the handler share); ``(False, exc)`` when making it failed."""
        current_call.set(call)
        factory = self.context_factory
        if factory is None:
            return True, None
        try:
            return True, factory(call)
        except HANDLER_ERRORS as exc:
            return False, exc

    async def _execute(self, call: Call) -> Outcome:
        if self.dispatcher.middleware_chain:
            ok, ctx = self._context(call)
            return await run_call(self.dispatcher, call, ctx, self._pool) if ok else (ok, ctx)
        ok, bound = self._arguments(call)
        if not ok:
            return ok, bound
        entry = call.entry
        return await execute(entry.fn, bound[0], bound[1], is_async=entry.is_async, blocking=entry.blocking, pool=self._pool)

    async def _run_call(self, call: Call, admitted: bool) -> None:
        try:
            if not admitted:
                await self.admission.acquire()
                self._holding[call] = 0
            if self.dispatcher.middleware_chain:
                ok, value = await self._execute(call)
            else:
                ok, value = self._arguments(call)
                if ok:  # execute() awaited here, not through _execute(): one coroutine less per request
                    entry = call.entry
                    ok, value = await execute(entry.fn, value[0], value[1], is_async=entry.is_async, blocking=entry.blocking,
                                              pool=self._pool)
        except asyncio.CancelledError:
            return  # cancelled requests are not answered
        reply = self.dispatcher.result(call, value) if ok else self.dispatcher.failure(call, value)
        task = asyncio.current_task()
        if reply is not None and task not in self._suppressed:
            self.send(reply)

    async def _run_element(self, call: Call) -> None:
        ok, value = await self._execute(call)
        if ok:
            self.dispatcher.result(call, value)
        else:
            self.dispatcher.failure(call, value)

    async def _run_batch(self, job: BatchJob) -> None:
        elements: list[asyncio.Task[None]] = []
        admission = self.admission
        try:
            for c in job.calls:
                await admission.acquire()  # in order: element n+1 never starts before element n
                self._holding[c] = 0
                elements.append(self._start(self._run_element(c), c))
            await asyncio.gather(*elements)
        except asyncio.CancelledError:
            for t in elements:
                t.cancel()
            return
        reply = job.finish()
        if reply is not None and asyncio.current_task() not in self._suppressed:
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
        """Kept for compatibility: the shared pool outlives the connection (an executor passed
        in stays the caller's), so there is nothing to release."""
