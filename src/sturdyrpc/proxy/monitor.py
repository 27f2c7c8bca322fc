"""Watching a JSON-RPC conversation, sans I/O: what each frame is, which request a reply settles,
and which rules of ``check`` it breaks.

A :class:`Monitor` is fed every frame that passes between a client and a server, with the side
it came from and a clock value; it answers with an :class:`Event`. It keeps the requests in
flight both ways (MCP servers send requests too), the MCP version negotiated, progress per
token, and the summary. The rules are those of :mod:`sturdyrpc.check.verdicts`, the same
predicates ``sturdyrpc check`` uses.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ..check.config import MODERN_VERSION, id_key
from ..check.model import CheckSpec, Level
from ..check.verdicts import (
    SPECS,
    UNSET,
    Envelope,
    decode_envelope,
    initialize_result_problems,
    jsonrpc_code_problem,
    mcp_error_code_problems,
    message_problems,
    progress_problem,
    response_problems,
    show,
)
from ..codec import DecodeFailure, decode

__all__ = ["C2S", "S2C", "Direction", "EVENTFUL", "NAMED", "Pending", "Violation", "Event", "Summary", "Monitor", "Key", "key_of"]

Direction = Literal["c2s", "s2c"]
C2S: Direction = "c2s"
S2C: Direction = "s2c"
_OTHER: dict[str, Direction] = {C2S: S2C, S2C: C2S}
_SIDE = {C2S: "client", S2C: "server"}
#: Settled ids remembered to tell a duplicate reply from an unknown one (bounded memory).
_DONE_KEEP = 4096
_SLOWEST_KEEP = 5
_VIOLATIONS_KEEP = 1000
#: Cancel notifications by protocol: MCP's, and LSP's (the Content-Length world).
CANCEL_METHODS = {"notifications/cancelled": "requestId", "$/cancelRequest": "id"}
#: MCP methods whose live view and summary show what they name (the member that names it).
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
#: Methods that change what the monitor knows (MCP detected, the handshake, progress, cancels):
#: never judged by :meth:`Monitor.feed_plain`, never handed to :meth:`Monitor.expect`.
EVENTFUL = frozenset({"initialize", "server/discover", "notifications/initialized", "notifications/progress", *CANCEL_METHODS})
_STOP = ""
#: For feed_plain, one lookup: the member a method names (NAMED), or _STOP (EVENTFUL).
_SPECIAL: dict[str, str] = {**NAMED, **dict.fromkeys(EVENTFUL, _STOP)}


#: A dict key for a JSON-RPC id (see :func:`key_of`).
Key = Any


def key_of(id: Any) -> Key:
    """A dict key for a JSON-RPC id that tells ``"7"``, ``7``, ``7.0`` and ``True`` apart: the id
    itself when it is an integer or a string (they never compare equal to one another), else a
    tuple that names its type."""
    t = type(id)
    return id if t is int or t is str else id_key(id)


class Pending(msgspec.Struct, gc=False):
    """A request in flight. ``dir`` is the direction the request travelled. (A struct made in C:
    one is made per request.)"""

    id: Any
    method: str
    dir: Direction
    started: float
    token: Any = None  # MCP progressToken
    progress: list[Any] | None = None
    name: str | None = None  # what a tools/call, prompts/get or resources/read is about
    cancelled: bool = False

    @property
    def label(self) -> str:
        """The method, with the tool, prompt or resource it names."""
        return self.method if self.name is None else f"{self.method} {self.name}"


@dataclass(frozen=True)
class Violation:
    """A rule broken by one side, seen at monotonic time ``at``."""

    spec: CheckSpec
    detail: str
    side: str  # "server" or "client"
    at: float
    level: Level

    def line(self) -> str:
        return f"[{self.level.value}] {self.side}: {self.spec.id}: {self.detail}"


_NONE: tuple[()] = ()
_ABSENT: Any = object()
_NO_FLOOR = float("-inf")
#: What decode_envelope raises for a frame that is not a plain envelope (or not bytes at all).
_NOT_AN_ENVELOPE = (msgspec.MsgspecError, RecursionError, ValueError, TypeError)


class Event:
    """What one frame (or one element of a batch) was.

    ``kind``: ``request``, ``notification``, ``response``, ``batch`` (see ``parts``), ``junk``
    (not JSON), ``invalid`` (JSON, but no JSON-RPC message) or ``unreadable`` (a frame the framer
    could not read; ``value`` says why). ``settled`` is the request a
    response answered (``duration`` seconds after it was sent); ``unmatched`` is true for a
    response that answers nothing in flight (unknown id, duplicate, reply to a notification).
    """

    # Class-level defaults: one is made per message, so only what differs is set.
    method: str | None = None
    id: Any = None
    settled: Pending | None = None
    duration: float | None = None
    unmatched: bool = False
    violations: Sequence[Violation] = _NONE
    parts: Sequence[Event] = _NONE

    def __init__(self, dir: Direction, kind: str, value: Any = None, method: str | None = None, id: Any = None) -> None:
        self.dir = dir
        self.kind = kind
        self.value = value
        if method is not None:
            self.method = method
        if id is not None:
            self.id = id

    def all_violations(self) -> list[Violation]:
        return [*self.violations, *(v for p in self.parts for v in p.violations)]


@dataclass
class Summary:
    """The closing report of a conversation."""

    unanswered: list[tuple[Pending, float]]  # (request, age in seconds)
    slowest: list[tuple[float, str, Any]]  # (seconds, method and what it names, id), slowest first
    by_method: dict[str, dict[str, int]]  # method -> {"requests", "errors", "notifications"}
    violations: list[Violation]
    violation_count: int
    mcp_version: str | None


def _plainly_valid_result(v: dict[str, Any]) -> bool:
    # A success response that response_problems would certainly pass.
    rid = v.get("id", v)
    return len(v) == 3 and v.get("jsonrpc") == "2.0" and "result" in v and (type(rid) is int or type(rid) is str)


class Monitor:
    """The state of one conversation; :meth:`feed` every frame, both ways, in order."""

    def __init__(self, *, mcp: bool | None = None) -> None:
        #: True once the traffic shows MCP (an initialize with protocolVersion, server/discover...).
        self.mcp = bool(mcp)
        self.version: str | None = None
        self._offered: str | None = None
        self._initialized = False  # notifications/initialized seen (handshake era)
        self._init_answered = False
        self.pending: dict[Direction, dict[Key, Pending]] = {C2S: {}, S2C: {}}
        # Settled requests by the direction they travelled, newest last: a list to append to (one
        # cheap operation per reply), made a dict of id -> method only when a reply must be told
        # a duplicate or unknown (see _done). At least the newest _DONE_KEEP are kept.
        self._answered: dict[Direction, list[Pending]] = {C2S: [], S2C: []}
        self._done_ids: dict[Direction, dict[Key, str]] = {C2S: {}, S2C: {}}
        self._tokens: dict[Key, Pending] = {}
        self._finished_tokens: OrderedDict[Key, str] = OrderedDict()
        self._abandoned: OrderedDict[Key, str] = OrderedDict()  # see forget()
        # Messages a peer could not read are answered with id null: expected, not a violation.
        self._unreadable: dict[Direction, int] = {C2S: 0, S2C: 0}
        self._notified: dict[Direction, str | None] = {C2S: None, S2C: None}
        # (duration, sequence, method, id): the sequence keeps ids of different types from being compared.
        self._slowest: list[tuple[float, int, str, Any]] = []
        self._settled = 0
        self.counts: dict[str, dict[str, int]] = {}
        self.violations: list[Violation] = []
        self.violation_count = 0

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, dir: Direction, frame: bytes, now: float) -> Event:
        """Judge one frame that travelled ``dir``."""
        try:
            value = decode(frame)
        except DecodeFailure as exc:
            self._unreadable[_OTHER[dir]] += 1
            ev = Event(dir, "junk", frame)
            if dir == S2C:
                self._flag(ev, "framing.stdout-only-jsonrpc", f"not JSON ({exc.reason}): {show(frame.decode('utf-8', 'replace'), 160)}", now)
            return ev
        if type(value) is dict:  # the everyday case, one call less
            if "method" in value:
                return self._call(dir, value, now)
            if "result" in value or "error" in value or "id" in value:
                return self._response(dir, value, now)
        return self.feed_value(dir, value, now)

    def feed_plain(self, dir: Direction, frames: Sequence[object], now: float, start: int = 0, max_requests: int = -1,
                   seen: list[Envelope] | None = None) -> int:
        """Judge ``frames[start:]`` (that travelled ``dir``) for as long as each is plain, without
        making an :class:`Event`; the index of the first frame left for :meth:`feed` (``len(frames)``
        when none is). At most ``max_requests`` requests (-1: any number).

        A frame is bytes, or an :class:`~sturdyrpc.check.verdicts.Envelope` its sender already
        holds (a proxy's own message: judged as the bytes it encodes to, without decoding them
        again). ``seen``: a list the envelope of each frame read is appended to, in order (its
        first ``returned - start`` entries are the plain frames': a caller that acts on them reads
        them there instead of decoding the frames again).

        Plain: a request or notification the rules pass (an
        :class:`~sturdyrpc.check.verdicts.Envelope` with a method and neither result nor error),
        that the lifecycle allows, of a method that changes nothing here (not initialize,
        progress, a cancel...), without ``_meta``; or a success reply the rules pass (an
        envelope with a result and an id, without method, params or error) to a request in
        flight. The state afterwards is the one :meth:`feed` leaves; only what it would have said
        about these frames (nothing to report) is not said. Anything else stops the run, and
        :meth:`feed` judges it with the full predicates (decoding it again: rare).
        """
        if start >= len(frames):
            return start
        asked: dict[str, int] = {}  # requests by method, added to the counts at the end
        i = self._walk_plain(dir, frames, now, start, max_requests, asked, seen)
        settled = self._answered[_OTHER[dir]]
        if len(settled) > 2 * _DONE_KEEP:
            del settled[:-_DONE_KEEP]
        self._count_requests(asked)
        return i

    def expect(self, dir: Direction, requests: Sequence[object], start: int, now: float) -> int:
        """Requests a proxy writes itself (``dir``: the way they travel), each the
        :class:`Pending` it is to be kept as: ``requests[start:]`` for as long as they are
        Pendings, in flight from now and counted, with no envelope to judge; the index of the
        first that is not one.

        Each was made from a message the proxy admitted by the rules a server applies, without
        ``_meta``, of a method that changes nothing here (not in :data:`EVENTFUL`), under an id
        of the proxy's own that no request in flight has, its ``name`` set (:data:`NAMED`). What
        the lifecycle says of such requests is said as :meth:`feed` says it."""
        ours = self.pending[dir]
        # Nothing here changes the lifecycle state: asked once (and of each only when it objects).
        objects = self.mcp and self._lifecycle_problem(dir, "", True) is not None
        asked: dict[str, int] = {}
        # Counted in runs of one method, as _walk_plain counts, inline in both loops: a call (or a
        # dict update) per request costs more than the loop's own work (bench/instructions.py guard).
        last: Any = None  # the method of the latest requests, ``k`` of them in a row (not yet in asked)
        k = 0
        n = len(requests)
        for i in range(start, n):  # noqa: B007 - i is the answer when the loop stops early
            p: Any = requests[i]
            if type(p) is not Pending:
                break
            ours[p.id] = p
            method = p.method
            if method == last:
                k += 1
            else:
                if k:
                    asked[last] = asked.get(last, 0) + k
                last, k = method, 1
            if objects:
                problem = self._lifecycle_problem(dir, method, True)
                if problem is not None:
                    self._flag(Event(dir, "request", None, method, p.id), "mcp.lifecycle", problem[1], now, problem[0])
        else:
            i = n
        if k:
            asked[last] = asked.get(last, 0) + k
        self._count_requests(asked)
        return i

    def feed_written(self, dir: Direction, items: Sequence[object], frames: Sequence[bytes], start: int, now: float) -> None:
        """What a proxy wrote, in order, toward the peer (``dir``): ``frames[start + i]`` the
        bytes of ``items[i]``, which is how the proxy shows them: the :class:`Pending` of a request
        it made (:meth:`expect`), the envelope it encoded (:meth:`feed_plain`), or the bytes."""
        i, n = 0, len(items)
        while i < n:
            if type(items[i]) is Pending:
                i = self.expect(dir, items, i, now)
                continue
            i = self.feed_plain(dir, items, now, i)
            if i < n and type(items[i]) is not Pending:
                self.feed(dir, frames[start + i], now)
                i += 1

    def _count_requests(self, asked: Mapping[str, int]) -> None:
        counts = self.counts
        for method, k in asked.items():
            c = counts.get(method)
            if c is None:
                c = counts[method] = {"requests": 0}
            c["requests"] = c.get("requests", 0) + k

    def _walk_plain(self, dir: Direction, frames: Sequence[object], now: float, start: int, max_requests: int, asked: dict[str, int],
                    seen: list[Envelope] | None) -> int:
        """:meth:`feed_plain`'s walk over the frames: each plain one has its effect on the tables
        of requests in flight (requests this side sends, replies to those it answers) and on
        the counts of notifications; the requests, by method, are added to ``asked``."""
        n = len(frames)
        ours = self.pending[dir]  # the requests this side sends
        theirs = self.pending[_OTHER[dir]]  # the requests this side answers
        settled = self._answered[_OTHER[dir]]
        mcp = self.mcp
        # Nothing in a run changes the lifecycle state (the methods that do stop it): ask once.
        requests_ok = not mcp or self._lifecycle_problem(dir, "", True) is None
        slowest = self._slowest
        floor = slowest[0][0] if len(slowest) >= _SLOWEST_KEEP else _NO_FLOOR
        last: Any = None  # the method of the latest requests, ``k`` of them in a row (not yet in asked)
        k = 0
        special = _SPECIAL.get
        method: Any
        for i in range(start, n):  # noqa: B007 - i is the answer when the loop stops early
            e: Any = frames[i]
            if type(e) is not Envelope:
                try:
                    e = decode_envelope(e)  # not bytes: TypeError
                except _NOT_AN_ENVELOPE:
                    break
            if seen is not None:
                seen.append(e)
            method = e.method
            if method is UNSET:  # a success reply, if it has a result and nothing a reply must not
                if e.result is UNSET or e.error is not UNSET or e.params is not UNSET:
                    break
                rid = e.id  # an integer or a string, its own key (UNSET: in no dict)
                p = theirs.get(rid)
                if p is None or p.token is not None or p.method == "initialize":
                    break
                del theirs[rid]
                settled.append(p)
                d = now - p.started
                if d > floor:
                    self._note_duration(d, p)
                    floor = slowest[0][0] if len(slowest) >= _SLOWEST_KEEP else _NO_FLOOR
                continue
            if e.result is not UNSET or e.error is not UNSET:
                break
            named = special(method)
            if named is _STOP:
                break
            params = e.params
            if type(params) is dict:
                if "_meta" in params:
                    break
            elif mcp and params is not UNSET:
                break  # MCP params must be an object
            rid = e.id
            if rid is UNSET:
                self._count(method, "notifications")
                self._notified[dir] = method
                continue
            if not requests_ok or max_requests == 0:
                break
            max_requests -= 1
            if method == last:
                k += 1
            else:
                if k:
                    asked[last] = asked.get(last, 0) + k
                last, k = method, 1
            p = Pending(rid, method, dir, now)
            if named is not None and type(params) is dict:
                name = params.get(named)
                if type(name) is str:
                    p.name = name[:80]
            if rid in ours:
                del ours[rid]  # an id reused while in flight: the newer one, at the end
            ours[rid] = p
        else:
            i = n
        if k:
            asked[last] = asked.get(last, 0) + k
        return i

    def feed_unreadable(self, dir: Direction, detail: str, now: float) -> Event:
        """A frame the framer could not read (a bad ``Content-Length`` header, a frame too large)."""
        self._unreadable[_OTHER[dir]] += 1
        ev = Event(dir, "unreadable", detail)
        if dir == S2C:
            self._flag(ev, "framing.stdout-only-jsonrpc", f"an unreadable frame: {detail}", now)
        return ev

    def feed_value(self, dir: Direction, value: Any, now: float) -> Event:
        """Judge one decoded message (or batch) that travelled ``dir``."""
        if type(value) is dict:
            return self._call(dir, value, now) if "method" in value else self._one(dir, value, now)
        if type(value) is list:
            ev = Event(dir, "batch", value)
            if not value:
                if dir == S2C:
                    self._flag(ev, "messages.response-shape", "an empty array (nothing to say must be sent as nothing)", now)
                else:
                    self._unreadable[S2C] += 1  # answered with one -32600, id null
            ev.parts = [self._one(dir, v, now) if type(v) is dict else self._invalid(dir, v, now) for v in value]
            return ev
        return self._invalid(dir, value, now)

    def _invalid(self, dir: Direction, value: Any, now: float) -> Event:
        ev = Event(dir, "invalid", value)
        self._unreadable[_OTHER[dir]] += 1
        self._flag(ev, "messages.invalid-message", f"a bare JSON {type(value).__name__} is no JSON-RPC message: {show(value, 80)}", now)
        return ev

    def _one(self, dir: Direction, v: dict[str, Any], now: float) -> Event:
        if "method" in v:
            return self._call(dir, v, now)
        if "result" in v or "error" in v or "id" in v:
            return self._response(dir, v, now)
        ev = Event(dir, "invalid", v)
        self._unreadable[_OTHER[dir]] += 1
        self._flag(ev, "messages.invalid-message", f"neither a request nor a response: {show(v, 120)}", now)
        return ev

    def _call(self, dir: Direction, v: dict[str, Any], now: float) -> Event:
        method = v["method"]
        params = v.get("params", _ABSENT)
        rid = v.get("id", _ABSENT)
        is_request = rid is not _ABSENT
        # The shared predicate judges anything but the everyday shape, which it would pass.
        plain = (
            type(method) is str and type(params) is dict and v.get("jsonrpc") == "2.0"
            and (type(rid) is int or type(rid) is str or not is_request) and len(v) == 3 + is_request
        )
        if type(method) is not str:
            method = show(method, 40)
        if dir == C2S and (
            method == "initialize" or method == "server/discover" or (not self.mcp and type(params) is dict and "_meta" in params)
        ):
            self._note_mcp_start(method, params)
        ev = Event(dir, "request" if is_request else "notification", v, method, rid if is_request else None)
        if not plain:
            problems = message_problems(v, mcp=self.mcp)
            if problems:
                # Still tracked: a server answers an invalid request with its id when it can read it.
                self._flag(ev, "messages.invalid-message", "; ".join(problems), now)
        if self.mcp:
            self._lifecycle(ev, dir, method, is_request, now)
        if not is_request:
            self._count(method, "notifications")
            self._notified[dir] = method
            self._notification(ev, dir, method, params, now)
            return ev
        counts = self.counts.get(method)
        if counts is None:
            counts = self.counts[method] = {"requests": 0}
        counts["requests"] = counts.get("requests", 0) + 1
        p = Pending(rid, method, dir, now)
        if type(params) is dict:
            if method in NAMED:
                named = params.get(NAMED[method])
                if type(named) is str:
                    p.name = named[:80]
            meta = params.get("_meta")
            if type(meta) is dict and "progressToken" in meta:
                p.token = meta["progressToken"]
                self._tokens[key_of(p.token)] = p
        t = type(rid)
        key = rid if t is int or t is str else id_key(rid)
        pending = self.pending[dir]
        if key in pending:
            del pending[key]  # an id reused while in flight: the newer one, at the end (arrival order)
        pending[key] = p
        return ev

    def _note_mcp_start(self, method: str, params: Any) -> None:
        if method == "initialize" and type(params) is dict and type(params.get("protocolVersion")) is str:
            self.mcp = True
            self._offered = params["protocolVersion"]
        elif method == "server/discover":
            self.mcp = True
        elif type(params) is dict and type(params.get("_meta")) is dict:
            meta = params["_meta"]
            if type(meta.get("io.modelcontextprotocol/protocolVersion")) is str:
                self.mcp = True

    def _lifecycle(self, ev: Event, dir: Direction, method: str, is_request: bool, now: float) -> None:
        if dir == C2S and not self._init_answered and type(ev.value.get("params")) is dict:
            # Without a handshake (2026-07-28) each request names its version: the latest counts.
            meta = ev.value["params"].get("_meta")
            if type(meta) is dict and type(meta.get("io.modelcontextprotocol/protocolVersion")) is str:
                self.version = meta["io.modelcontextprotocol/protocolVersion"]
        if dir == C2S and method == "notifications/initialized" and self.version != MODERN_VERSION and self._offered is not None:
            self._initialized = True
        problem = self._lifecycle_problem(dir, method, is_request)
        if problem is not None:
            self._flag(ev, "mcp.lifecycle", problem[1], now, problem[0])

    def _lifecycle_problem(self, dir: Direction, method: str, is_request: bool) -> tuple[Level, str] | None:
        """What the lifecycle of the negotiated version says about a call (MCP), now."""
        if self.version == MODERN_VERSION:
            if dir == S2C and is_request:
                return Level.MUST, f"the server sent a request ({method}); in {MODERN_VERSION} servers MUST NOT initiate requests"
            return None
        if self._offered is None or not is_request:
            return None
        if dir == C2S:
            if not self._init_answered and method not in ("initialize", "ping"):
                return Level.SHOULD, f"the client sent {method} before initialize was answered"
        elif not self._initialized and method != "ping":
            return Level.SHOULD, f"the server sent the request {method} before notifications/initialized"
        return None

    def _notification(self, ev: Event, dir: Direction, method: str, params: Any, now: float) -> None:
        if method in CANCEL_METHODS and type(params) is dict:
            p = self.pending[_OTHER[dir]].get(key_of(params.get(CANCEL_METHODS[method])))
            if p is not None:
                p.cancelled = True
            return
        if method != "notifications/progress" or type(params) is not dict:
            return
        key = key_of(params.get("progressToken"))
        p = self._tokens.get(key)
        if p is None:
            finished = self._finished_tokens.get(key)
            if finished is not None:
                self._flag(ev, "mcp.progress", f"progress for token {show(params.get('progressToken'), 40)} arrived after the reply to {finished}", now)
            else:
                self._flag(ev, "mcp.progress", f"progress carries a token no request in flight sent: {show(params.get('progressToken'), 40)}", now)
            return
        if p.progress is None:
            p.progress = []
        p.progress.append(params.get("progress"))
        problem = progress_problem(p.progress[-2:])
        if problem:
            self._flag(ev, "mcp.progress", f"{p.method} (id {show(p.id, 40)}): {problem}", now)

    def _response(self, dir: Direction, v: dict[str, Any], now: float) -> Event:
        rid = v.get("id")
        t = type(rid)
        if (t is int or t is str) and len(v) == 3 and "result" in v and v.get("jsonrpc") == "2.0":
            # The everyday case: a well-formed success answering a request in flight.
            key = rid
            p = self.pending[_OTHER[dir]].pop(key, None)
            if p is not None:
                ev = Event(dir, "response", v, p.method, rid)
                if p.token is not None or p.method == "initialize":
                    return self._settle(ev, p, v, now)
                ev.settled = p
                ev.duration = d = now - p.started
                self._remember(p)
                self._note_duration(d, p)
                return ev
        ev = Event(dir, "response", v, id=v.get("id"))
        problems = None if _plainly_valid_result(v) else response_problems(v, id_may_be_omitted=self.mcp)
        if problems:
            self._flag(ev, "messages.response-shape", "; ".join(problems) + f": {show(v, 120)}", now)
        rid = v.get("id")
        key = key_of(rid)
        asked = _OTHER[dir]
        p = self.pending[asked].pop(key, None) if rid is not None else None
        err = v.get("error")
        if type(err) is dict and type(err.get("code")) is int:
            self._error_code(ev, err, now)
        if p is not None:
            return self._settle(ev, p, v, now)
        ev.unmatched = True
        if rid is None:
            if type(err) is dict and self._unreadable[dir] > 0:
                self._unreadable[dir] -= 1  # the answer to a message the peer could not read
                ev.unmatched = False
                return ev
            notified = self._notified[asked]
            if notified is not None:
                self._flag(ev, "messages.notification-silent", f"a reply after the notification {notified}: {show(v, 120)}", now)
                return ev
        if key in self._abandoned:
            del self._abandoned[key]  # answered late, after guard gave up on it
            return ev
        done = self._done(asked)
        if key in done:
            self._flag(ev, "ids.duplicate-reply", f"a second reply to {done[key]} (id {show(rid, 40)}): {show(v, 120)}", now)
        elif not problems:
            self._flag(ev, "ids.unknown-reply", f"a reply with the id {show(rid, 40)}, which no request in flight has: {show(v, 120)}", now)
        return ev

    def _settle(self, ev: Event, p: Pending, v: dict[str, Any], now: float) -> Event:
        ev.settled = p
        ev.method = p.method
        ev.duration = now - p.started
        self._remember(p)
        if "error" in v:
            self._count(p.method, "errors")
        if p.token is not None:
            tk = key_of(p.token)
            self._tokens.pop(tk, None)
            self._finished_tokens[tk] = f"{p.method} (id {show(p.id, 40)})"
            if len(self._finished_tokens) > _DONE_KEEP:
                self._finished_tokens.popitem(last=False)
        self._note_duration(ev.duration, p)
        if p.method == "initialize" and p.dir == C2S and self._offered is not None:
            self._init_answered = True
            result = v.get("result")
            if type(result) is dict:
                problems = initialize_result_problems(result, self._offered)
                if problems:
                    self._flag(ev, "mcp.initialize", "; ".join(problems), now)
                elif type(result.get("protocolVersion")) is str:
                    self.version = result["protocolVersion"]
        return ev

    def _note_duration(self, duration: float, p: Pending) -> None:
        self._settled += 1
        slowest = self._slowest
        if len(slowest) < _SLOWEST_KEEP:
            heapq.heappush(slowest, (duration, self._settled, p.label, p.id))
        elif duration > slowest[0][0]:
            heapq.heapreplace(slowest, (duration, self._settled, p.label, p.id))

    def _error_code(self, ev: Event, err: dict[str, Any], now: float) -> None:
        code = err["code"]
        problem = jsonrpc_code_problem(code)
        if problem:
            self._flag(ev, "errors.code-range", problem, now)
        if self.mcp:
            for level, detail in mcp_error_code_problems(code, err.get("data"), self.version):
                self._flag(ev, "mcp.error-codes", detail, now, level)

    # -- bookkeeping -----------------------------------------------------------------------------

    def _remember(self, p: Pending) -> None:
        settled = self._answered[p.dir]
        settled.append(p)
        if len(settled) > 2 * _DONE_KEEP:
            del settled[:-_DONE_KEEP]

    def _done(self, dir: Direction) -> dict[Key, str]:
        """The ids settled of the requests that travelled ``dir`` (at least the newest
        :data:`_DONE_KEEP`), with their methods."""
        done = self._done_ids[dir]
        settled = self._answered[dir]
        if settled:
            for p in settled:
                done[key_of(p.id)] = p.method
            settled.clear()
            if len(done) > 2 * _DONE_KEEP:
                for key in list(itertools.islice(done, len(done) - _DONE_KEEP)):
                    del done[key]
        return done

    def _count(self, method: str, what: str) -> None:
        c = self.counts.get(method)
        if c is None:
            c = self.counts[method] = {}
        c[what] = c.get(what, 0) + 1

    def _flag(self, ev: Event, rule: str, detail: str, now: float, level: Level | None = None) -> None:
        spec = SPECS[rule]
        viol = Violation(spec, detail, _SIDE[ev.dir], now, level or spec.level)
        ev.violations = [*ev.violations, viol]
        self.violation_count += 1
        if len(self.violations) < _VIOLATIONS_KEEP:
            self.violations.append(viol)

    def forget(self, dir: Direction, id: Any) -> Pending | None:
        """Stop tracking the request ``id`` that travelled ``dir`` (answered by someone else: guard).
        A late reply to it is then unmatched but no violation (it may cross the cancel)."""
        key = key_of(id)
        p = self.pending[dir].pop(key, None)
        if p is not None:
            self._abandoned[key] = p.method
            if len(self._abandoned) > _DONE_KEEP:
                self._abandoned.popitem(last=False)
        return p

    def summary(self, now: float) -> Summary:
        """Requests never answered (oldest first), the slowest, counts by method, violations."""
        unanswered = [(p, now - p.started) for d in (C2S, S2C) for p in self.pending[d].values()]
        unanswered.sort(key=lambda pa: -pa[1])
        return Summary(
            unanswered,
            [(d, m, i) for d, _, m, i in sorted(self._slowest, reverse=True)],
            {m: dict(c) for m, c in sorted(self.counts.items())},
            list(self.violations),
            self.violation_count,
            self.version,
        )
