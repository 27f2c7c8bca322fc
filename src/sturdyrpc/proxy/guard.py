"""What ``sturdyrpc guard`` lets through, sans I/O.

:class:`GuardCore` is fed the client's frames, the server's frames, clock ticks and the server's
death; it answers with what to write to each side and what to log. It uses a
:class:`~.monitor.Monitor` to know what each frame is, and adds the guard's own decisions: drop
what must not reach the client, answer requests the server left too long (and cancel them on the
server), hold requests beyond ``max_in_flight`` in arrival order, answer everything pending when
the server dies.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from ..check.verdicts import show
from ..codec import DecodeFailure, decode, encode
from ..framing import Frame
from .monitor import C2S, CANCEL_METHODS, S2C, Direction, Event, Key, Monitor, key_of

__all__ = ["Actions", "GuardCore", "DEADLINE_CODE", "SERVER_GONE_CODE", "INVALID_REPLY_CODE"]

#: Error codes of the replies guard writes itself (JSON-RPC's implementation-defined server range).
DEADLINE_CODE = -32001
SERVER_GONE_CODE = -32002
INVALID_REPLY_CODE = -32003
_GIVEN_UP_KEEP = 4096


@dataclass
class Actions:
    """Payloads (no framing) to write to each side, and lines for stderr."""

    to_server: list[bytes] = field(default_factory=list)
    to_client: list[bytes] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def extend(self, other: Actions) -> None:
        self.to_server += other.to_server
        self.to_client += other.to_client
        self.log += other.log


@dataclass
class _Waiting:
    payload: bytes
    value: Any  # the payload decoded
    requests: list[tuple[Any, str]]  # (id, method) of the requests it holds
    arrived: float


class GuardCore:
    """The guard's decisions for one conversation.

    ``deadline``: seconds a request may wait for its reply (from when the client sent it), or
    None. ``max_in_flight``: requests passed to the server at once, or None. ``cancel``: the
    protocol's cancel notification to send for a request given up (``"mcp"``, ``"lsp"``,
    ``"none"``, or ``"auto"``: MCP when the traffic shows MCP, LSP with Content-Length framing).
    """

    def __init__(
        self,
        *,
        deadline: float | None = None,
        max_in_flight: int | None = None,
        cancel: str = "auto",
        content_length: bool = False,
        monitor: Monitor | None = None,
    ) -> None:
        self.deadline = deadline
        self.max_in_flight = max_in_flight
        self.cancel = cancel
        self.content_length = content_length
        self.monitor = monitor or Monitor()
        # Answered by guard at their deadline: a late reply is dropped quietly (the newest kept).
        self._given_up: OrderedDict[Key, None] = OrderedDict()
        self._queue: deque[_Waiting] = deque()
        # The client's requests passed to the server and not settled are the monitor's pending
        # ones, in arrival order (the queue is first in, first out), each started when it arrived.
        self._sent = self.monitor.pending[C2S]

    # -- runs of plain frames ----------------------------------------------------------------------

    def passes_on(self, requests: int) -> bool:
        """Whether :meth:`from_client` passes frames holding at most ``requests`` requests on to
        the server as they are, whatever they hold: nothing is held back and none of them would
        wait for ``max_in_flight``. Then it adds exactly those frames, in order, to ``to_server``
        (and nothing else anywhere), so the proxy may write them before the decisions are made."""
        return not self._queue and (self.max_in_flight is None or len(self._sent) + requests <= self.max_in_flight)


    def pass_plain(self, dir: Direction, frames: list[Frame], start: int, now: float, out: Actions) -> int:
        """Pass on ``frames[start:]`` (from the side ``dir`` names) for as long as the monitor finds
        them plain (:meth:`Monitor.feed_plain`: nothing in them for guard to drop or replace) and
        none has to wait for ``max_in_flight``; the index of the first frame left for
        :meth:`from_client` / :meth:`from_server` (``len(frames)`` when none is)."""
        if dir == C2S:
            if self._queue:
                return start  # held requests go first, in order
            room = -1 if self.max_in_flight is None else max(self.max_in_flight - len(self._sent), 0)
            end = self.monitor.feed_plain(C2S, frames, now, start, room)
            if end > start:
                out.to_server += frames[start:end]  # type: ignore[arg-type]  # plain frames are bytes
            return end
        end = self.monitor.feed_plain(S2C, frames, now, start)
        if end > start:
            out.to_client += frames[start:end]  # type: ignore[arg-type]
            self._release(now, out)
        return end

    # -- the client's frames ---------------------------------------------------------------------

    def from_client(self, frame: bytes, now: float, out: Actions | None = None) -> Actions:
        """A frame the client wrote; what to do is added to ``out`` (a new one by default)."""
        out = Actions() if out is None else out
        try:
            value = decode(frame)
        except DecodeFailure:
            out.to_server.append(frame)  # the server answers it (parse error): not guard's job
            self.monitor.feed(C2S, frame, now)
            return out
        requests = self._requests_in(value)
        if requests and (self._queue or not self._fits(len(requests))):
            self._queue.append(_Waiting(frame, value, requests, now))
            return out
        if self._queue and type(value) is dict and value.get("method") in CANCEL_METHODS and self._withdraw(value, out):
            return out
        self._send(frame, value, now, out)
        return out

    def _withdraw(self, cancel: dict[str, Any], out: Actions) -> bool:
        """The client cancels a request still held back: it never reaches the server (nor does the cancel)."""
        params = cancel.get("params")
        if type(params) is not dict:
            return False
        key = key_of(params.get(CANCEL_METHODS[cancel["method"]]))
        for w in self._queue:
            if len(w.requests) == 1 and key_of(w.requests[0][0]) == key:
                self._queue.remove(w)
                out.log.append(f"guard: {w.requests[0][1]} (id {show(w.requests[0][0], 40)}) was cancelled while held back: not sent")
                return True
        return False

    @staticmethod
    def _requests_in(value: Any) -> list[tuple[Any, str]]:
        if type(value) is dict:  # the everyday case, without building a list to scan
            return [(value["id"], value["method"] if type(value["method"]) is str else "?")] if "id" in value and "method" in value else []
        items = value if type(value) is list else [value]
        return [
            (m["id"], m["method"] if type(m["method"]) is str else "?")
            for m in items
            if type(m) is dict and "method" in m and "id" in m
        ]

    def _fits(self, n: int) -> bool:
        if self.max_in_flight is None:
            return True
        # A batch larger than the limit goes alone, or it would wait forever.
        in_flight = len(self._sent)
        return in_flight + n <= self.max_in_flight or in_flight == 0

    def _send(self, frame: bytes, value: Any, arrived: float, out: Actions) -> None:
        self.monitor.feed_value(C2S, value, arrived)  # pending from ``arrived``: deadlines count from there
        out.to_server.append(frame)

    def _release(self, now: float, out: Actions) -> None:
        while self._queue and self._fits(len(self._queue[0].requests)):
            w = self._queue.popleft()
            self._send(w.payload, w.value, w.arrived, out)

    # -- the server's frames ---------------------------------------------------------------------

    def from_server(self, frame: bytes, now: float, out: Actions | None = None) -> Actions:
        """A frame the server wrote: passed on, or dropped (and logged), or replaced; added to ``out``."""
        out = Actions() if out is None else out
        ev = self.monitor.feed(S2C, frame, now)
        if ev.kind == "batch":
            kept = [p.value for p in ev.parts if self._keep(p, out)]
            if len(kept) == len(ev.parts) and ev.parts:
                out.to_client.append(frame)
            elif kept:
                out.to_client.append(encode(kept))
        elif self._keep(ev, out):
            out.to_client.append(frame)
        self._release(now, out)
        return out

    def _keep(self, ev: Event, out: Actions) -> bool:
        for v in ev.violations:
            out.log.append(v.line())
        if ev.kind == "junk":
            # The line itself, as the server wrote it (bounded): usually a log line meant for stderr.
            out.log.append("guard: server stdout (not JSON-RPC): " + bytes(ev.value[:4096]).decode("utf-8", "replace"))
            return False
        if ev.kind == "invalid":
            out.log.append("guard: dropped a message that is no JSON-RPC message: " + show(ev.value, 200))
            return False
        if ev.kind != "response":
            for v in ev.violations:
                # A malformed request or notification would confuse the client; progress that
                # breaks the rules (after the reply, unknown token, not increasing) too.
                if v.spec.id in ("messages.invalid-message", "mcp.progress"):
                    out.log.append(f"guard: dropped a {ev.kind} of the server that breaks {v.spec.id}: {show(ev.value, 200)}")
                    return False
            return True
        if ev.settled is not None and ev.settled.dir == C2S:
            if ev.violations and any(v.spec.id == "messages.response-shape" for v in ev.violations):
                out.to_client.append(self._error(ev.settled.id, INVALID_REPLY_CODE, "sturdyrpc guard: the server's reply was not a valid JSON-RPC response"))
                out.log.append(f"guard: answered {ev.settled.method} (id {show(ev.settled.id, 40)}) with an error: its reply was malformed")
                return False
            return True
        if ev.unmatched:
            key = key_of(ev.id)
            if key in self._given_up:
                del self._given_up[key]
                out.log.append(f"guard: dropped the late reply to id {show(ev.id, 40)} (already answered at its deadline)")
            else:
                out.log.append(f"guard: dropped a reply the client cannot expect: {show(ev.value, 200)}")
            return False
        if any(v.spec.id == "messages.response-shape" for v in ev.violations):
            out.log.append("guard: dropped a malformed response: " + show(ev.value, 200))
            return False
        return True  # the answer to a message the client could not have matched anyway (id null)

    # -- time and death --------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The monotonic time of the next deadline, or None."""
        if self.deadline is None:
            return None
        # The oldest request in flight arrived before everything held in the queue.
        for p in self._sent.values():
            return p.started + self.deadline
        return self._queue[0].arrived + self.deadline if self._queue else None

    def tick(self, now: float) -> Actions:
        """Answer the requests whose deadline has passed; cancel them on the server."""
        out = Actions()
        if self.deadline is None:
            return out
        limit = now - self.deadline
        message = f"sturdyrpc guard: no reply within the deadline of {self.deadline:g} s"
        expired = []
        for p in self._sent.values():
            if p.started > limit:
                break  # arrival order: the rest are younger
            expired.append(p)
        for p in expired:
            self.monitor.forget(C2S, p.id)
            self._given_up[key_of(p.id)] = None
            if len(self._given_up) > _GIVEN_UP_KEEP:
                self._given_up.popitem(last=False)
            out.to_client.append(self._error(p.id, DEADLINE_CODE, message))
            cancel = self._cancel_notification(p.id)
            if cancel is not None:
                out.to_server.append(cancel)
            out.log.append(f"guard: {p.method} (id {show(p.id, 40)}) got no reply within {self.deadline:g} s: answered with {DEADLINE_CODE}"
                           + (", cancelled on the server" if cancel is not None else ""))
        while self._queue and self._queue[0].arrived <= limit:
            w = self._queue.popleft()
            for rid, method in w.requests:
                out.to_client.append(self._error(rid, DEADLINE_CODE, message))
                out.log.append(f"guard: {method} (id {show(rid, 40)}) waited for a free slot past the deadline: answered with {DEADLINE_CODE}")
        self._release(now, out)
        return out

    def server_gone(self, code: int | None) -> Actions:
        """The server exited (``code``) or closed its stdout: answer everything pending now."""
        out = Actions()
        why = f"sturdyrpc guard: the server exited (code {code})" if code is not None else "sturdyrpc guard: the server closed its output"
        pending = list(self.monitor.pending[C2S].values())
        for p in pending:
            self.monitor.forget(C2S, p.id)
            out.to_client.append(self._error(p.id, SERVER_GONE_CODE, why))
        for w in self._queue:
            for rid, _ in w.requests:
                out.to_client.append(self._error(rid, SERVER_GONE_CODE, why))
        n = len(pending) + sum(len(w.requests) for w in self._queue)
        self._queue.clear()
        if n:
            out.log.append(f"guard: the server is gone; answered {n} pending request(s) with {SERVER_GONE_CODE}")
        return out

    @property
    def waiting(self) -> int:
        """Requests held back by ``max_in_flight``."""
        return sum(len(w.requests) for w in self._queue)

    @property
    def in_flight(self) -> int:
        """Client requests passed to the server and not settled."""
        return len(self._sent)

    # -- messages guard writes -------------------------------------------------------------------

    @staticmethod
    def _error(id: Any, code: int, message: str) -> bytes:
        if type(id) not in (str, int, float):
            id = None  # a request id JSON-RPC does not allow: answered as unreadable (§5)
        return encode({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})

    def _cancel_notification(self, id: Any) -> bytes | None:
        kind = self.cancel
        if kind == "auto":
            kind = "mcp" if self.monitor.mcp else "lsp" if self.content_length else "none"
        if kind == "mcp":
            return encode({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": id, "reason": f"sturdyrpc guard: deadline of {self.deadline:g} s"}})
        if kind == "lsp":
            return encode({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}})
        return None
