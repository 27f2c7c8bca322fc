"""The calls a peer makes: ids, the table of calls waiting for their replies, timeouts (one timer
for all), progress received for them, the cancels it sends, and batches."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .. import codec
from ..dispatch import Call
from ..errors import InternalError, RPCError
from ..flag import Flag
from ..messages import ErrorResponse, Id, InvalidMessage, Message, Response
from ..profile import Profile
from ..request_context import current_call
from .protocols import ProgressCallback, Settings, id_key

log = logging.getLogger("sturdyrpc.peer")
#: The empty table every idle one shares until its first element (an empty set is 216 bytes).
_NONE: frozenset[Any] = frozenset()


class RequestTimeout(Exception):
    """An outgoing request got no reply in time; the cancel notification has been sent."""

    __module__ = "sturdyrpc.peer"  # its public name, as telemetry records it (``error.type``)

    def __init__(self, method: str, id: Id, timeout: float) -> None:
        super().__init__(f"request {id!r} ({method}) timed out after {timeout:g} s")
        self.method = method
        self.id = id
        self.timeout = timeout


class ConnectionClosed(Exception):
    """The connection ended (or was closed) before the request was answered."""

    __module__ = "sturdyrpc.peer"


class InvalidReply(InternalError):
    """The reply to this request was malformed (e.g. both ``result`` and ``error``).

    Raised to the caller instead of letting it wait for a timeout; ``data`` holds the reason.
    Caller cancellation is plain ``asyncio.CancelledError`` (re-raised after the cancel
    notification is sent); there is no separate exception for it.
    """

    __module__ = "sturdyrpc.peer"
    default_message = "Invalid reply"


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A snapshot of one outgoing request waiting for its reply."""

    id: Id
    method: str
    age: float
    progress: float | None
    total: float | None


# Whose handler the current task is running: the outgoing side of that peer (set when the
# handler's context is made). Calls made by a handler on behalf of the other side skip the
# outgoing cap: they are already bounded by the incoming cap, and waiting for a slot held by
# our own calls (which wait for the other side's handlers, which wait for theirs...) could
# deadlock both ends.
handler_of: contextvars.ContextVar[Outgoing | None] = contextvars.ContextVar("sturdyrpc_handler_of", default=None)


class _Out:
    """Bookkeeping of one outgoing request."""

    __slots__ = (
        "id",
        "method",
        "future",
        "started",
        "timeout",
        "deadline",
        "hard_deadline",
        "on_progress",
        "reset_on_progress",
        "progress",
        "total",
        "progress_task",
        "send_cancel",
    )

    def __init__(self, id_: Id, method: str, future: asyncio.Future[Any], started: float) -> None:
        self.id = id_
        self.method = method
        self.future = future
        self.started = started
        self.timeout: float | None = None
        self.deadline: float | None = None
        self.hard_deadline: float | None = None
        self.on_progress: ProgressCallback | None = None
        self.reset_on_progress = False
        self.progress: float | None = None
        self.total: float | None = None
        self.progress_task: asyncio.Task[None] | None = None
        self.send_cancel = True


class Outgoing:
    """The calls one peer makes and their replies.

    ``enqueue(bytes)`` queues a message for the writer; senders wait while ``room`` is clear
    (the outgoing queue above its high water). ``park(call)``/``unpark(call)`` give back and
    take again the slot of the handler ``call`` while it waits for a call it made to the other
    side. :attr:`calls`, :attr:`abandoned`, :attr:`user_ids` and :attr:`background` are read
    for introspection only.
    """

    def __init__(
        self,
        settings: Settings,
        stats: dict[str, int],
        *,
        max_outgoing: int,
        enqueue: Callable[[bytes], None],
        room: Flag,
        park: Callable[[Call], None],
        unpark: Callable[[Call], None],
    ) -> None:
        self._settings = settings
        self._stats = stats
        self._enqueue = enqueue
        self._room = room
        self._park = park
        self._unpark = unpark
        #: The calls waiting for their replies, by :func:`~.protocols.id_key` of their ids.
        self.calls: dict[tuple[type, Any], _Out] = {}
        self._next_id = 0
        #: Ids the callers picked (never given again); made with the first.
        self.user_ids: set[tuple[type, Any]] | frozenset[tuple[type, Any]] = _NONE
        #: Recently timed out or cancelled (a late reply to one is counted as late).
        self.abandoned: dict[tuple[type, Any], None] = {}
        self._slots = asyncio.Semaphore(max_outgoing)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        #: Tasks running async progress callbacks; made with the first.
        self.background: set[asyncio.Task[Any]] | frozenset[asyncio.Task[Any]] = _NONE
        self._started = False
        self._closing = False
        self._reason = "connection closed"

    # ------------------------------------------------------------------ open and closed

    def open(self) -> None:
        """The peer has started: calls may be made."""
        self._started = True

    def stop(self, reason: str) -> None:
        """The peer is closing: new calls fail with :class:`ConnectionClosed` (``reason``); calls
        waiting for their replies may still get them until :meth:`fail_all`."""
        self._closing = True
        self._reason = reason

    def check_open(self) -> None:
        """Raise :class:`ConnectionClosed` unless a call may be made now."""
        if self._closing or not self._started:
            raise ConnectionClosed(self._reason if self._closing else "peer not started")

    def fail_all(self, reason: str) -> None:
        """Fail every call waiting for its reply with :class:`ConnectionClosed` (``reason``)."""
        if not self.calls:
            return
        recs = list(self.calls.values())
        self.calls.clear()
        for rec in recs:
            if not rec.future.done():
                rec.future.set_exception(ConnectionClosed(reason))

    def close(self) -> None:
        """The peer is closed: stop the timer and the progress callbacks still running."""
        for t in list(self.background):
            t.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def snapshot(self) -> list[PendingCall]:
        """The calls waiting for their replies, oldest first, with their ages in seconds."""
        now = asyncio.get_running_loop().time()
        recs = sorted(self.calls.values(), key=lambda r: r.started)
        return [PendingCall(r.id, r.method, now - r.started, r.progress, r.total) for r in recs]

    # ------------------------------------------------------------------ ids

    def _new_id(self) -> int:
        n = self._next_id + 1
        if self.user_ids:
            while (int, n) in self.user_ids:
                n += 1
        self._next_id = n
        return n

    def take_id(self, id_: str | int | None) -> tuple[type, Any]:
        """The key of a new call's id: ``id_`` (``ValueError`` if used before) or the next free one."""
        if id_ is None:
            return (int, self._new_id())
        if type(id_) is not str and type(id_) is not int:
            raise TypeError("a request id must be a str or an int")
        key = id_key(id_)
        if key in self.user_ids or (type(id_) is int and 0 < id_ <= self._next_id) or key in self.calls:
            raise ValueError(f"request id {id_!r} was already used on this connection")
        ids = self.user_ids
        if not isinstance(ids, set):
            ids = self.user_ids = set()
        ids.add(key)
        return key

    def _abandon(self, key: tuple[type, Any]) -> None:
        ab = self.abandoned
        ab[key] = None
        if len(ab) > 4096:
            del ab[next(iter(ab))]

    # ------------------------------------------------------------------ requests

    async def send_request(self, method: str, params: Any, key: tuple[type, Any], timeout: float | None, max_timeout: float | None,
                           on_progress: ProgressCallback | None, reset_timeout_on_progress: bool, send_cancel: bool) -> Any:
        """Send a request with the id of ``key`` (from :meth:`take_id`) and return its result
        (see :meth:`Peer.request <sturdyrpc.peer.Peer.request>`)."""
        id_: str | int = key[1]
        if on_progress is not None:
            params = self._settings.profile.put_progress_token(params, id_)  # the token is the request id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        msg["id"] = id_
        data = codec.encode(msg)  # raises TypeError/ValueError before anything is sent

        slots = self._slots
        room = self._room
        nested = handler_of.get() is self
        if nested:
            while not room.is_set() and not self._closing:
                await room.wait()
        elif slots.locked() or not room.is_set():
            await self._wait_send_room(slots)
        else:
            await slots.acquire()  # does not suspend: a slot is free
        try:
            self.check_open()
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[Any] = loop.create_future()
            now = loop.time()
            rec = _Out(id_, method, fut, now)
            if timeout is not None:
                rec.timeout = timeout
                rec.deadline = now + timeout
                if reset_timeout_on_progress:
                    rec.hard_deadline = now + (max_timeout if max_timeout is not None else 10 * timeout)
                self._arm(rec.deadline)
            if on_progress is not None:
                rec.on_progress = on_progress
                rec.reset_on_progress = reset_timeout_on_progress
            rec.send_cancel = send_cancel
            self.calls[key] = rec
            self._stats["requests_sent"] += 1
            self._enqueue(data)
            parked = current_call.get() if nested else None
            if parked is not None:
                # While it waits for the other side, this handler's slot serves others.
                self._park(parked)
            try:
                return await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    fut.exception()  # settled in the same instant: mark it seen, the cancel wins
                if self.calls.pop(key, None) is rec:
                    # Still unanswered: tell the other side to stop, and ignore a late reply.
                    self._stats["caller_cancels"] += 1
                    self._abandon(key)
                    if send_cancel:
                        self.send_cancel(id_, "cancelled by the caller")
                raise
            finally:
                if parked is not None:
                    self._unpark(parked)
                if self.calls.get(key) is rec:
                    del self.calls[key]
        finally:
            if not nested:
                slots.release()

    async def _wait_send_room(self, slots: asyncio.Semaphore) -> None:
        await slots.acquire()
        try:
            room = self._room
            while not room.is_set() and not self._closing:
                await room.wait()
        except BaseException:
            slots.release()
            raise

    async def send_notification(self, method: str, params: Any) -> None:
        """Send a notification (waits while the outgoing queue is above its high water)."""
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        data = codec.encode(msg)
        room = self._room
        while not room.is_set() and not self._closing:
            await room.wait()
        self.check_open()
        self._stats["notifications_sent"] += 1
        self._enqueue(data)

    def send_cancel(self, id_: Id, reason: str) -> None:
        """Tell the other side to stop working on our call ``id_`` (the profile's notification)."""
        settings = self._settings
        note = settings.profile.cancel_notification(id_, reason)
        if note is None or self._closing:
            return
        method, params = note
        hook = settings.notice_hook
        if hook is not None:
            try:
                params = hook(method, params, True)
            except Exception:  # instrumentation never stops a cancellation
                log.exception("%s: notice hook failed", settings.name)
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        try:
            self._enqueue(codec.encode(msg))
        except (TypeError, ValueError):
            log.exception("%s: cancel notification could not be encoded", settings.name)

    # ------------------------------------------------------------------ batches

    async def batch(self, items: list[tuple[str, Any, bool]], timeout: float | None) -> list[Any]:
        """Send ``(method, params, is_notification)`` items as one batch (see :meth:`Peer.batch
        <sturdyrpc.peer.Peer.batch>`): one entry per item, the result, the error or None."""
        keys, data = self._batch_wire(items)
        room = self._room
        while not room.is_set() and not self._closing:
            await room.wait()
        self.check_open()
        recs = self._batch_register(items, keys, timeout)
        self._stats["requests_sent"] += sum(1 for k in keys if k is not None)
        self._enqueue(data)
        futs = [r.future for r in recs if r is not None]
        try:
            if futs:
                await asyncio.wait(futs)
        except asyncio.CancelledError:
            for k, r in zip(keys, recs, strict=True):
                if k is not None and r is not None and self.calls.pop(k, None) is r:
                    self._abandon(k)
                    self.send_cancel(r.id, "cancelled by the caller")
            raise
        finally:
            for k, r in zip(keys, recs, strict=True):
                if k is not None and self.calls.get(k) is r:
                    del self.calls[k]
        return _batch_results(recs)

    def _batch_wire(self, items: list[tuple[str, Any, bool]]) -> tuple[list[tuple[type, Any] | None], bytes]:
        """The keys of the batch's requests (None for a notification) and the batch's bytes."""
        wire: list[dict[str, Any]] = []
        keys: list[tuple[type, Any] | None] = []
        for method, params, is_note in items:
            m: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
            if params is not None:
                m["params"] = params
            if is_note:
                keys.append(None)
            else:
                k = (int, self._new_id())
                m["id"] = k[1]
                keys.append(k)
            wire.append(m)
        return keys, codec.encode(wire)

    def _batch_register(self, items: list[tuple[str, Any, bool]], keys: list[tuple[type, Any] | None],
                        timeout: float | None) -> list[_Out | None]:
        loop = asyncio.get_running_loop()
        now = loop.time()
        recs: list[_Out | None] = []
        for (method, _p, _n), k in zip(items, keys, strict=True):
            if k is None:
                recs.append(None)
                continue
            rec = _Out(k[1], method, loop.create_future(), now)
            if timeout is not None:
                rec.timeout = timeout
                rec.deadline = now + timeout
                self._arm(rec.deadline)
            self.calls[k] = rec
            recs.append(rec)
        return recs

    # ------------------------------------------------------------------ timeouts
    # One timer for all calls, set for the earliest deadline: a call that completes costs no
    # timer operation, and a deadline moved by progress is simply found later on the next scan.

    def _arm(self, deadline: float) -> None:
        h = self._timer
        if h is not None:
            if self._timer_at <= deadline:
                return
            h.cancel()
        self._timer_at = deadline
        self._timer = asyncio.get_running_loop().call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time() + 1e-3  # a timer may fire a hair early
        expired: list[tuple[tuple[type, Any], _Out]] = []
        nxt: float | None = None
        for key, rec in self.calls.items():
            d = rec.deadline
            if d is None:
                continue
            if d <= now:
                expired.append((key, rec))
            elif nxt is None or d < nxt:
                nxt = d
        for key, rec in expired:
            self._expire(key, rec)
        if nxt is not None:
            self._arm(nxt)

    def _expire(self, key: tuple[type, Any], rec: _Out) -> None:
        if self.calls.get(key) is not rec or rec.future.done():
            return
        now = asyncio.get_running_loop().time()
        del self.calls[key]
        self._stats["timeouts"] += 1
        self._abandon(key)
        if rec.send_cancel:
            self.send_cancel(rec.id, "timed out")
        rec.future.set_exception(RequestTimeout(rec.method, rec.id, now - rec.started))

    # ------------------------------------------------------------------ what comes back

    def on_response(self, msg: Message | InvalidMessage) -> None:
        """A reply (or a malformed one) read from the other side: settles the call it names."""
        t = type(msg)
        if t is Response or t is ErrorResponse:
            id_ = msg.id  # type: ignore[union-attr]
            key = (type(id_), id_)
            rec = self.calls.pop(key, None)
            if rec is None:
                self._stray(key, "reply")
                if id_ is None and t is ErrorResponse:
                    self._error_without_id(msg.error)  # type: ignore[union-attr]
                return
            self._stats["replies"] += 1
            fut = rec.future
            if not fut.done():
                if t is Response:
                    fut.set_result(msg.result)  # type: ignore[union-attr]
                else:
                    fut.set_exception(msg.error)  # type: ignore[union-attr]
            return
        assert isinstance(msg, InvalidMessage)
        self._stats["malformed_replies"] += 1
        id_ = msg.id
        key = (type(id_), id_)
        rec = self.calls.pop(key, None) if id_ is not None else None
        name = self._settings.name
        if rec is None:
            log.warning("%s: malformed reply ignored: %s", name, msg.reason)
            return
        # The id names a call we made: fail it now rather than let it wait for a timeout.
        log.warning("%s: malformed reply to %r: %s", name, id_, msg.reason)
        if not rec.future.done():
            rec.future.set_exception(InvalidReply("Invalid reply", {"reason": msg.reason}))

    def _error_without_id(self, error: RPCError) -> None:
        cb = self._settings.on_error_without_id
        if cb is not None:
            try:
                cb(error)
            except Exception:
                log.exception("%s: on_error_without_id failed", self._settings.name)

    def _stray(self, key: tuple[type, Any], what: str) -> None:
        id_ = key[1]
        name = self._settings.name
        if key in self.abandoned:
            self._stats["late_replies"] += 1
            log.debug("%s: late %s to %r (timed out or cancelled) ignored", name, what, id_)
        elif (key[0] is int and 0 < id_ <= self._next_id) or key in self.user_ids:
            self._stats["duplicate_replies"] += 1
            log.warning("%s: duplicate %s to %r ignored", name, what, id_)
        else:
            self._stats["unmatched_replies"] += 1
            log.warning("%s: %s to unknown id %r ignored", name, what, id_)

    def on_progress(self, profile: Profile, params: Any) -> None:
        """A progress notification read from the other side, for one of our calls."""
        stats = self._stats
        stats["progress_received"] += 1
        p = profile.read_progress(params)
        if p is None:
            stats["progress_ignored"] += 1
            return
        token, progress, total, message = p
        rec = self.calls.get(id_key(token))
        if rec is None or rec.on_progress is None or rec.future.done():
            stats["progress_ignored"] += 1
            return
        if rec.progress is not None and not progress > rec.progress:
            stats["progress_ignored"] += 1  # progress must increase; a stale one is dropped
            return
        rec.progress = progress
        rec.total = total
        if rec.reset_on_progress and rec.timeout is not None:
            nd = asyncio.get_running_loop().time() + rec.timeout
            if rec.hard_deadline is not None and nd > rec.hard_deadline:
                nd = rec.hard_deadline
            rec.deadline = nd  # later than before: the shared timer finds it on a later scan
        try:
            res = rec.on_progress(progress, total, message)
        except Exception:
            log.exception("%s: progress callback failed", self._settings.name)
            return
        if inspect.isawaitable(res):
            # Never awaited by the reader; chained so callbacks run in arrival order.
            prev = rec.progress_task
            task = asyncio.get_running_loop().create_task(_after(prev, res))
            rec.progress_task = task
            bg = self.background
            if not isinstance(bg, set):
                bg = self.background = set()
            bg.add(task)
            task.add_done_callback(bg.discard)


def _batch_results(recs: list[_Out | None]) -> list[Any]:
    """One entry per item: the result, the :class:`RPCError` answered, or None (a notification);
    raises the first other failure (a timeout, the connection closing)."""
    out: list[Any] = []
    failure: BaseException | None = None
    for r in recs:
        if r is None:
            out.append(None)
            continue
        exc = r.future.exception()
        if isinstance(exc, RPCError):
            out.append(exc)
        elif exc is not None:
            failure = failure or exc
            out.append(None)
        else:
            out.append(r.future.result())
    if failure is not None:
        raise failure
    return out


async def _after(prev: asyncio.Task[None] | None, aw: Awaitable[None]) -> None:
    if prev is not None and not prev.done():
        try:
            await asyncio.shield(prev)
        except BaseException:
            pass
    try:
        await aw
    except Exception:
        log.exception("progress callback failed")
