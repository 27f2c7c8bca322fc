"""The one executor: running the dispatcher's calls on asyncio, for every transport.

A :class:`Runner` is fed whole frames (:meth:`Runner.feed`, synchronously, straight from a
transport's reader) or messages read already (:meth:`Runner.feed_envelope`, the HTTP apps), and
hands each reply to its destination as soon as it is ready, so replies leave in completion order
and a slow request never blocks a fast one. Stdio, TCP, the peer (and so MCP sessions on stdio,
on Streamable HTTP and the test client), plain JSON-RPC over HTTP and 2026-07-28 stateless
requests all run their calls here.

How a call runs is its entry's plan (:data:`sturdyrpc.dispatch.Plan`, worked out once):

- ``INLINE``: called on the feeding turn; the reply is handed on before :meth:`feed` returns;
- ``NOW``: started on the feeding turn with its context (and the middleware chain); answered
  before :meth:`feed` returns unless the chain suspends, then finished in a task;
- ``TASK``: a task (async handlers on the loop, blocking ones on the process's bounded pool of
  daemon threads, ``Limits.max_threads``).

Every call that runs as a task, alone or as a batch element, takes one slot of the connection's
``max_in_flight`` (:attr:`Runner.admission`) before its handler starts; batch elements beyond the
free slots wait for one, in order. While no slot is free the runner asks its transport to stop
reading (``on_pressure(True)``) and to resume once one is (:attr:`Runner.accepting` says the same),
so the input is never buffered without bound and never dropped. A batch's reply is sent when all
its elements are done.

A reply goes to the call's *origin* when the transport gave one (:class:`Origin`: the HTTP POST
that carried the request), else to the connection's ``send``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

from .admission import Admission
from .dispatch import INLINE, NOW, BatchJob, Call, Context, Dispatcher
from .envelope import Envelope, read, unreadable_frame_error
from .errors import InvalidRequest
from .execute import Outcome, Pending, run_call, run_call_now, shared_pool
from .framing import BadHeader, FrameTooLarge
from .invoke import answer_now, call_now
from .messages import Id, InvalidMessage, Message
from .profile import Profile
from .request_context import current_call

__all__ = ["Runner", "Origin", "current_call"]  # current_call: re-exported from request_context

log = logging.getLogger("sturdyrpc")


def _key(id_: Id) -> tuple[type, Any]:
    # 1, 1.0 and True are equal as dict keys; ids must stay apart by type.
    return (type(id_), id_)


class Origin(Protocol):
    """Where the reply of one request (or batch) goes, when it is not the connection's ``send``."""

    def reply(self, data: bytes | None) -> None:
        """The reply, once (None: the call is done and nothing is to be answered: a notification).
        Never called for a cancelled call."""


#: The empty table every idle one shares until its first element (an empty set is 216 bytes).
_NONE: frozenset[Any] = frozenset()
_DUPLICATE = InvalidRequest("Invalid Request", {"reason": "duplicate id of a request in flight"})


class Runner:
    """Executes incoming messages for one connection (or, for HTTP, one app).

    ``send(bytes)`` takes the replies of calls without an origin. ``max_in_flight``: the
    connection's bound of calls running as tasks (default ``Limits.max_in_flight``; None: no
    bound of its own, where the transport bounds them itself, as HTTP does server-wide).
    ``executor`` (optional) runs blocking sync handlers instead of the shared daemon pool of
    ``Limits.max_threads``; it stays the caller's to shut down. ``context_factory(call)`` makes
    the context of a call whose handler (or the middleware chain) takes one. ``deliver(origin,
    reply)`` hands a reply to its origin (default: ``origin.reply(reply)``).
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
        max_in_flight: int | None = -1,
        deliver: Callable[[Origin, bytes | None], None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.send = send
        # The dispatcher's answers of an INLINE call, bound once (one bound method less per call).
        self._result = dispatcher.result
        self._failure = dispatcher.failure
        #: ``deliver(origin, reply)``: how a reply reaches its origin (default: ``origin.reply``);
        #: a peer keeps it in order with what it sends itself.
        self._deliver = deliver
        self.on_response = on_response
        self.on_pressure = on_pressure
        self.context_factory = context_factory
        self.profile = profile
        if max_in_flight == -1:
            max_in_flight = dispatcher.limits.max_in_flight
        self.max_in_flight = max_in_flight
        #: The slots of ``max_in_flight``: one per call that runs as a task (or is about to).
        self.admission = Admission(max_in_flight if max_in_flight is not None else 2**62, on_pressure=self._pressure)
        self._pool: concurrent.futures.Executor = executor if executor is not None else shared_pool(dispatcher.limits.max_threads)
        self._tasks: set[asyncio.Task[None]] | frozenset[asyncio.Task[None]] = _NONE  # made with the first
        self._call_of: dict[asyncio.Task[None], Call] = {}  # tasks whose call may hold a slot
        self._by_id: dict[tuple[type, Any], asyncio.Task[None]] = {}
        self._suppressed: set[asyncio.Task[None]] | frozenset[asyncio.Task[None]] = _NONE  # made with the first
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
        return (type(id_), id_) in by_id

    def owns(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` is one of the tasks running this connection's handlers."""
        return task in self._tasks

    # ------------------------------------------------------------------ input

    def feed(self, frame: bytes | FrameTooLarge | BadHeader) -> None:
        """Handle one frame from the framer. Never raises for bad input."""
        d = self.dispatcher
        if type(frame) is bytes:
            got = read(frame, d.limits)  # Dispatcher.receive's two steps, one call less per frame
            todo = d.accept(got, self.profile, self.on_response) if type(got) is Envelope else d.accept_read(got, self.profile, self.on_response)
            if type(todo) is Call:
                self._start_call(todo, None)
                return
        else:
            omit = self.profile is not None and self.profile.omit_unreadable_id()
            todo = d.error_reply(unreadable_frame_error(frame), omit_id=omit)  # type: ignore[arg-type]  # not bytes
        if todo is not None:
            self.start(todo, None)

    def feed_envelope(self, got: Any, origin: Origin | None = None) -> asyncio.Task[None] | None:
        """Handle a message read already (anything :func:`sturdyrpc.envelope.read` returns);
        its reply goes to ``origin`` (None: ``send``). ``origin`` hears ``reply(None)`` when
        nothing is to be answered. Returns the task finishing it, or None when it is done."""
        d = self.dispatcher
        profile = self.profile
        todo = d.accept(got, profile, self.on_response) if type(got) is Envelope else d.accept_read(got, profile, self.on_response)
        if type(todo) is Call:
            return self._start_call(todo, origin)
        if todo is None:
            if origin is not None:
                origin.reply(None)
            return None
        return self.start(todo, origin)

    def start(self, todo: bytes | Call | BatchJob, origin: Origin | None = None) -> asyncio.Task[None] | None:
        """Run what the dispatcher made of a message: reply bytes, a :class:`Call` or a
        :class:`BatchJob`. Returns the task that finishes it, or None when it is done already
        (its reply handed on)."""
        t = type(todo)
        if t is bytes:
            self._reply(origin, todo)  # type: ignore[arg-type]
            return None
        if t is Call:
            return self._start_call(todo, origin)  # type: ignore[arg-type]
        job: BatchJob = todo  # type: ignore[assignment]
        job.origin = origin
        return self._start_batch(job)

    def _reply(self, origin: Origin | None, data: bytes | None) -> None:
        if origin is not None:
            deliver = self._deliver
            if deliver is None:
                origin.reply(data)
            else:
                deliver(origin, data)
        elif data is not None:
            self.send(data)

    def _start_call(self, call: Call, origin: Origin | None) -> asyncio.Task[None] | None:
        """The one place that decides how a call runs: by its entry's plan."""
        if origin is not None:
            call.origin = origin
        by_id = self._by_id
        if by_id:
            profile = self.profile
            if profile is not None and profile.refuse_duplicate_ids and not call.is_notification and _key(call.id) in by_id:
                self._reply(origin, self.dispatcher.failure(call, _DUPLICATE))
                return None
        entry = call.entry
        plan = entry.plan
        if plan is INLINE:  # answered on this turn: the reply is handed on before feeding returns
            reply = answer_now(entry.fn, call.args, call.kwargs, call, self._result, self._failure)
            if origin is not None:
                self._reply(origin, reply)
            elif reply is not None:
                self.send(reply)
            return None
        if plan is NOW:
            return self._run_now(call)
        # A slot now if one is free (the transport learns at once that it must stop reading);
        # otherwise the task waits for one, behind those already waiting.
        admitted = self.admission.try_acquire()
        if admitted:
            self._holding[call] = 0
        task = self._start(self._run_call(call, admitted), call)
        self._track(call, task)
        return task

    def _track(self, call: Call, task: asyncio.Task[None]) -> None:
        if not call.is_notification:
            key = _key(call.id)
            self._by_id[key] = task
            task.add_done_callback(functools.partial(self._forget, key))

    def _start_batch(self, job: BatchJob) -> asyncio.Task[None] | None:
        # Elements that run inline run now, as they would alone: a batch of notifications has
        # taken effect before the next message is read. The others run in order as slots allow.
        d = self.dispatcher
        profile = self.profile
        waiting: list[Call] = []
        seen: set[tuple[type, Any]] | None = set() if profile is not None and profile.refuse_duplicate_ids else None
        for c in job.calls:
            if seen is not None and not c.is_notification:
                k = _key(c.id)
                if k in seen or k in self._by_id:  # same rule as for a single request: -32600, nothing runs
                    d.failure(c, _DUPLICATE)
                    continue
                seen.add(k)
            if c.entry.plan is INLINE:
                d.run_inline(c)
            else:
                waiting.append(c)
        job.calls = waiting
        if not waiting:
            self._reply(job.origin, job.finish())
            return None
        # The first element's slot now if one is free, as for a single request (an HTTP app that
        # refuses when its slots are full sees this batch at once); the others wait in order.
        first = [self.admission.try_acquire()]
        task = self._start(self._run_batch(job, first), None)
        if first[0]:
            task.add_done_callback(functools.partial(self._release_unused, first))
        return task

    def _release_unused(self, first: list[bool], _task: asyncio.Task[None]) -> None:
        if first[0]:  # the batch ended (or was cancelled) before its first element started
            first[0] = False
            self.admission.release()

    def _run_now(self, call: Call) -> asyncio.Task[None] | None:
        """A ``NOW`` call: started on this turn in a copy of the current context; answered now
        unless its chain suspends, then a task finishes it (holding a slot from then on)."""
        cv = contextvars.copy_context()
        ok, value = cv.run(self._context, call)
        if ok:
            outcome = run_call_now(self.dispatcher, call, value, cv)
            if type(outcome) is not tuple:
                assert isinstance(outcome, Pending)
                self.admission.force_acquire()  # already running: over the limit for a moment at most
                self._holding[call] = 0
                task = self._start(self._finish(call, outcome), call, outcome.context)
                self._track(call, task)
                return task
            ok, value = outcome
        self._reply(call.origin, self.dispatcher.answer(call, ok, value))
        return None

    async def _finish(self, call: Call, pending: Pending) -> None:
        try:
            ok, value = await pending
        except asyncio.CancelledError:
            return  # cancelled requests are not answered
        reply = self.dispatcher.answer(call, ok, value)
        if asyncio.current_task() not in self._suppressed:
            self._reply(call.origin, reply)

    def _forget(self, key: tuple[type, Any], task: asyncio.Task[None]) -> None:
        if self._by_id.get(key) is task:
            del self._by_id[key]

    def _start(self, coro: Any, call: Call | None, context: contextvars.Context | None = None) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, context=context)
        tasks = self._tasks
        if not isinstance(tasks, set):
            tasks = self._tasks = set()
        tasks.add(task)
        if call is not None:
            self._call_of[task] = call
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)  # type: ignore[union-attr]  # it ran as one: a set
        if self._suppressed:
            self._suppressed.discard(task)  # type: ignore[union-attr]  # not empty: a set
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

    def _context(self, call: Call) -> Outcome:
        """``(True, context or None)`` for ``call`` (the factory's context when the handler or the
        chain takes one; the chain and the handler share it); ``(False, exc)`` when making it
        failed. Sets :data:`current_call` in the running context (each call runs in its own)."""
        current_call.set(call)
        factory = self.context_factory
        if factory is None or not (call.entry.takes_context or self.dispatcher.middleware_chain):
            return True, None
        return call_now(factory, (call,), {})

    async def _execute(self, call: Call) -> Outcome:
        ok, ctx = self._context(call)
        if not ok:
            return ok, ctx
        return await run_call(self.dispatcher, call, ctx, self._pool)

    async def _run_call(self, call: Call, admitted: bool) -> None:
        try:
            if not admitted:
                await self.admission.acquire()
                self._holding[call] = 0
            ok, value = self._context(call)
            if ok:  # _execute's steps, one coroutine less per request
                ok, value = await run_call(self.dispatcher, call, value, self._pool)
        except asyncio.CancelledError:
            return  # cancelled requests are not answered
        reply = self.dispatcher.answer(call, ok, value)
        if asyncio.current_task() not in self._suppressed:
            self._reply(call.origin, reply)

    async def _run_element(self, call: Call) -> None:
        ok, value = await self._execute(call)
        self.dispatcher.answer(call, ok, value)

    async def _run_batch(self, job: BatchJob, first: list[bool]) -> None:
        elements: list[asyncio.Task[None]] = []
        admission = self.admission
        try:
            for c in job.calls:
                if first[0]:
                    first[0] = False  # the slot taken when the batch was started
                else:
                    await admission.acquire()  # in order: element n+1 never starts before element n
                self._holding[c] = 0
                elements.append(self._start(self._run_element(c), c))
            await asyncio.gather(*elements)
        except asyncio.CancelledError:
            for t in elements:
                t.cancel()
            return
        reply = job.finish()
        if asyncio.current_task() not in self._suppressed:
            self._reply(job.origin, reply)

    # ---------------------------------------------------------------- control

    def cancel(self, id_: Id) -> bool:
        """Cancel the running request ``id_``; its reply is never sent. False if unknown."""
        task = self._by_id.pop(_key(id_), None)
        if task is None or task.done():
            return False
        self._suppress(task)
        task.cancel()
        return True

    def _suppress(self, task: asyncio.Task[None]) -> None:
        """``task`` is cancelled by us: its reply is never sent."""
        s = self._suppressed
        if not isinstance(s, set):
            s = self._suppressed = set()
        s.add(task)

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            self._suppress(task)
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
