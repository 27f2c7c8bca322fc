"""What ``sturdyrpc guard`` lets through, sans I/O.

:class:`GuardCore` is fed the client's frames, the server's frames, clock ticks and the server's
death; it answers with what to write to each side and what to log.

The client's messages are read as a correct server reads them: by the core's one decode
(:func:`sturdyrpc.envelope.read`) and admission (:meth:`sturdyrpc.dispatch.Dispatcher.accept`),
under the protocol's profile (:class:`~sturdyrpc.mcp.profile.MCPProfile` with the negotiated
version's rules, or plain JSON-RPC). What a correct server would refuse is answered by guard with
the error that server would send; only valid messages reach the server. A batch reaches the
server as single messages, and their replies go back as one array.

Every request reaches the server under a small integer id of guard's own (and a progress token
of guard's own), so the server never sees an id it could mangle; the reply goes back with the
client's id exactly as it came. Requests of the server to the client are mapped the same way.

The server's frames are judged by a :class:`~.monitor.Monitor` (the rules of ``check``): what
must not reach the client is dropped, a malformed reply is replaced by an error, an error (or a
failed tool's result) that reveals the server's insides is replaced by a plain one with an
incident id. Requests the server leaves past the deadline, or pending when it dies, are answered
by guard. :attr:`GuardCore.contained` counts what was contained, by the rule ``check`` names.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ..check.verdicts import Envelope as Wire
from ..check.verdicts import show
from ..codec import DecodeFailure, decode, encode
from ..dispatch import NOTIFICATION, BatchJob, Call, Dispatcher
from ..envelope import UNSET, Envelope, read, unreadable_frame_error
from ..errors import InvalidRequest
from ..framing import BadHeader, Frame, FrameTooLarge
from ..limits import DEFAULT_LIMITS, Limits
from ..mcp.profile import MCPProfile, speaks_mcp
from ..mcp.versions import RULES
from ..messages import ErrorResponse, InvalidMessage, Response
from ..profile import JSONRPCProfile, Profile
from .monitor import C2S, CANCEL_METHODS, EVENTFUL, NAMED, S2C, Event, Key, Monitor, Pending, key_of
from .scrub import plain_error, plain_tool_result, rule_of

__all__ = ["Actions", "GuardCore", "DEADLINE_CODE", "SERVER_GONE_CODE", "INVALID_REPLY_CODE"]

#: Error codes of the replies guard writes itself (JSON-RPC's implementation-defined server range).
DEADLINE_CODE = -32001
SERVER_GONE_CODE = -32002
INVALID_REPLY_CODE = -32003
_GIVEN_UP_KEEP = 4096
#: Requests to the client the server may have open at once (bounded memory).
_S2C_KEEP = 4096
_DUPLICATE = InvalidRequest("Invalid Request", {"reason": "duplicate id of a request in flight"})
_ABSENT: Any = object()

Protocol = Literal["auto", "mcp", "jsonrpc"]
_CANCELLERS: dict[str, Profile] = {"mcp": MCPProfile(), "lsp": JSONRPCProfile()}


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


class _Batch:
    """A client's batch whose requests are in flight one by one."""

    __slots__ = ("job", "open")

    def __init__(self, job: BatchJob, open: int) -> None:
        self.job = job
        self.open = open


class _Forwarded(msgspec.Struct, gc=False):
    """A client request under guard's id: whom to answer, and how. (A struct made in C: one is
    made per request.)"""

    client_id: Any
    key: Key  # key_of(client_id)
    method: str
    started: float
    message: Wire | Envelope  # what the server gets (kept while it waits for a slot)
    token: Any = UNSET  # the client's progress token, when it sent one
    batch: _Batch | None = None
    sent: bool = False
    #: How its reply is answered: 0, as the envelope read, under the client's id; 1, the same unless
    #: the result says ``isError`` (tools/call); 2, from the result (a batch's element, an odd id).
    look: int = 0


#: Guard's own messages (requests under its ids, replies under the client's) are encoded by
#: msgspec directly from the envelope the monitor judges: their params and results were read by
#: the strict decoder, so they hold no NaN or infinity for the codec's check to find.
_encode_wire = msgspec.json.Encoder().encode


def _forwarded(params: Any, ctx: Any) -> None:
    """The gate's fallback entry: never run (guard forwards the call instead)."""


class GuardCore:
    """The guard's decisions for one conversation.

    ``deadline``: seconds a request may wait for its reply (from when the client sent it), or
    None. ``max_in_flight``: requests passed to the server at once, or None. ``cancel``: the
    protocol's cancel notification to send for a request given up (``"mcp"``, ``"lsp"``,
    ``"none"``, or ``"auto"``: MCP when the traffic shows MCP, LSP with Content-Length framing).
    ``protocol``: the rules the client's messages are read by (``"auto"``: MCP when the first
    message is MCP's, else plain JSON-RPC). ``keep_tool_errors``: pass failed tools' results
    as they are, even when they reveal the server's insides.
    """

    def __init__(
        self,
        *,
        deadline: float | None = None,
        max_in_flight: int | None = None,
        cancel: str = "auto",
        content_length: bool = False,
        monitor: Monitor | None = None,
        protocol: Protocol = "auto",
        limits: Limits = DEFAULT_LIMITS,
        keep_tool_errors: bool = False,
    ) -> None:
        self.deadline = deadline
        self.max_in_flight = max_in_flight
        self.cancel = cancel
        self.content_length = content_length
        self.monitor = monitor or Monitor()
        self.keep_tool_errors = keep_tool_errors
        #: What guard answered for the server or repaired, by the rule ``check`` names.
        self.contained: Counter[str] = Counter()
        # The gate admits what a correct server admits; every method is the server's to know.
        self.gate = Dispatcher(limits)
        self.gate.fallback = self.gate.make_entry(_forwarded, "*", raw=True)
        self.profile: Profile | None = MCPProfile() if protocol == "mcp" else Profile() if protocol == "jsonrpc" else None
        self._mcp = protocol == "mcp"  # the profile is MCP's (kept with it)
        self._next_id = 0
        self._replies: list[Any] = []  # what Dispatcher.accept hands to on_response
        self._on_reply = self._replies.append
        # What this call wrote to the server, as the monitor is shown it (one entry per payload of
        # out.to_server from the call's mark: the Pending of an everyday request, the envelope
        # guard encoded another request from, or the bytes).
        self._judged: list[Pending | Wire | Envelope | bytes] = []
        self._seen: list[Wire] = []  # the envelopes of a run of the server's plain frames
        # The client's requests under guard's ids, in arrival order (deadlines count from there):
        # sent to the server, or waiting for a slot (``_queue``, first in, first out).
        self._inflight: dict[int, _Forwarded] = {}
        self._by_client: dict[Key, int] = {}
        self._queue: deque[int] = deque()  # (the rest of _inflight went to the server)
        # Answered by guard (deadline): a late reply is dropped quietly (the newest kept).
        self._given_up: OrderedDict[int, None] = OrderedDict()
        # The server's requests to the client: guard's id toward the client -> the server's id.
        self._s2c: OrderedDict[int, Any] = OrderedDict()
        self._s2c_by_server: dict[Key, int] = {}
        self._next_s2c = 0

    # -- the client's frames ---------------------------------------------------------------------

    def from_client(self, frame: bytes, now: float, out: Actions | None = None) -> Actions:
        """A frame the client wrote; what to do is added to ``out`` (a new one by default)."""
        return self.from_client_frames([frame], now, out)

    def from_client_frames(self, frames: Sequence[Frame], now: float, out: Actions | None = None) -> Actions:
        """Frames the client wrote, in order (unreadable ones as the framer reports them)."""
        out = Actions() if out is None else out
        mark = len(out.to_server)
        self._judged.clear()
        # One frame's decisions, inline (a call per frame costs more than the loop's work).
        gate = self.gate
        limits = gate.limits
        accept = gate.accept
        forward = self._forward
        profile = self.profile
        # The client's replies (to the server's requests) are collected, then mapped back.
        replies = self._replies
        on_reply = self._on_reply
        for frame in frames:
            if type(frame) is not bytes:
                self._unreadable(frame, out)  # type: ignore[arg-type]  # not bytes
                continue
            got = read(frame, limits)
            if profile is None:
                self._choose_profile(got)
                profile = self.profile
            received = accept(got, profile, on_reply) if type(got) is Envelope else gate.accept_read(got, profile, on_reply)
            t = type(received)
            if t is Call:
                forward(received, frame, got, now, out)  # type: ignore[arg-type]
            elif t is bytes:
                out.to_client.append(received)  # type: ignore[arg-type]
                self._refused(received, out)  # type: ignore[arg-type]
            elif t is BatchJob:
                self._forward_batch(received, now, out)  # type: ignore[arg-type]
            if replies:
                for r in replies:
                    self._client_reply(r, now, out)
                replies.clear()
        self._judge_sent(out.to_server, mark, now)
        return out

    def _unreadable(self, frame: FrameTooLarge | BadHeader, out: Actions) -> None:
        """A frame of the client's the framer could not read: answered as a server answers it."""
        omit = self.profile is not None and self.profile.omit_unreadable_id()
        reply = self.gate.error_reply(unreadable_frame_error(frame), omit_id=omit)
        out.to_client.append(reply)
        self._refused(reply, out)

    def _to_server(self, out: Actions, payload: bytes, judged: Pending | Wire | Envelope | bytes) -> None:
        out.to_server.append(payload)
        self._judged.append(judged)

    def _judge_sent(self, sent: list[bytes], start: int, now: float) -> None:
        """Show the monitor what went to the server (``sent[start:]``), each payload as
        :attr:`_judged` holds it: guard's everyday requests as the requests in flight they are,
        its other requests as the envelopes they were encoded from, the rest as bytes."""
        assert len(self._judged) == len(sent) - start
        self.monitor.feed_written(C2S, self._judged, sent, start, now)
        self._judged.clear()

    def _choose_profile(self, got: Any) -> None:
        first = got[0] if type(got) is list and got else got
        if type(first) is not Envelope or first.method is UNSET:
            return  # decided by the first message that names a method
        mcp = speaks_mcp(first.method, first.params)  # type: ignore[arg-type]  # a method: checked above
        self.profile = MCPProfile() if mcp else Profile()
        self._mcp = mcp

    def _refused(self, reply: bytes, out: Actions) -> None:
        """Count (and log) a message guard answered because the server must not see it."""
        try:
            value = decode(reply)
        except DecodeFailure:  # pragma: no cover - guard's own replies are JSON
            return
        for v in value if type(value) is list else [value]:
            err = v.get("error") if type(v) is dict else None
            if type(err) is dict:
                rule = rule_of(err)
                self.contained[rule] += 1
                out.log.append(f"guard: answered for the server ({rule}): {show(v, 160)}")

    def _forward(self, call: Call, frame: bytes | None, env: Envelope | None, now: float, out: Actions) -> None:
        # frame, env: the client's message as it came and as read (None for a batch's element).
        cid = call.id
        if cid is NOTIFICATION:
            self._forward_notification(call, frame, out)
            return
        t = type(cid)
        if t is int or t is str:
            key, look = cid, 0
        else:
            key, look = key_of(cid), 2
        by_client = self._by_client
        profile = self.profile
        if key in by_client and profile is not None and profile.refuse_duplicate_ids:
            reply = self.gate.failure(call, _DUPLICATE)
            if reply is not None:
                out.to_client.append(reply)
            self.contained["mcp.duplicate-id"] += 1
            out.log.append(f"guard: refused a second request with the id {show(call.id, 40)} while the first is in flight")
            return
        gid = self._next_id = self._next_id + 1
        params = call.params
        token: Any = UNSET
        # Handed to the monitor as the Pending it keeps (Monitor.expect), but for params it has
        # something to say about: _meta (a version, a progress token), an array (MCP's rules).
        handed = True
        if params is None:
            params = UNSET
        elif type(params) is not dict:
            handed = False
        elif "_meta" in params:
            handed = False
            meta = params["_meta"]
            if type(meta) is dict and "progressToken" in meta:
                token = meta["progressToken"]
                params = {**params, "_meta": {**meta, "progressToken": gid}}
        method = call.method
        if method == "tools/call" and not look:
            look = 1
        handed = handed and method not in EVENTFUL
        message: Wire | Envelope
        if handed and env is not None:
            # The envelope read goes on under guard's id (a request's: jsonrpc, method, params, id).
            env.id = gid
            message = env
        else:
            message = Wire("2.0", method, gid, params)
        job = call.job
        batch = None
        if job is not None:  # a batch's element: job.origin is its _Batch (set by _forward_batch)
            batch, look = job.origin, 2
        mif = self.max_in_flight
        inflight = self._inflight
        # In flight at the server: len(inflight) - len(queue); with a queue, the new one waits too.
        held = True if self._queue else mif is not None and len(inflight) >= mif
        inflight[gid] = _Forwarded(cid, key, method, now, message, token, batch, not held, look)
        by_client[key] = gid
        if held:
            self._queue.append(gid)
            return
        out.to_server.append(_encode_wire(message))
        if handed:
            p = Pending(gid, method, C2S, now)
            if method in NAMED and type(params) is dict:
                name = params.get(NAMED[method])
                if type(name) is str:
                    p.name = name[:80]
            self._judged.append(p)
        else:
            self._judged.append(message)

    def _send(self, f: _Forwarded, out: Actions) -> None:
        f.sent = True
        self._to_server(out, _encode_wire(f.message), f.message)

    def _forward_notification(self, call: Call, frame: bytes | None, out: Actions) -> None:
        method = call.method
        if method in CANCEL_METHODS and type(call.params) is dict:
            member = CANCEL_METHODS[method]
            gid = self._by_client.get(key_of(call.params.get(member)), 0)
            f = self._inflight.get(gid)  # guard's ids start at 1
            if f is None:
                out.log.append(f"guard: a cancel for no request in flight ({show(call.params.get(member), 40)}): not sent")
                return
            if not f.sent:
                self._queue.remove(gid)
                self._drop(gid, f)
                out.log.append(f"guard: {f.method} (id {show(f.client_id, 40)}) was cancelled while held back: not sent")
                return
            cancel = encode({"jsonrpc": "2.0", "method": method, "params": {**call.params, member: gid}})
            self._to_server(out, cancel, cancel)
            # The client expects no reply now (MCP: it ignores one): a reply that comes anyway is
            # dropped quietly, as after a deadline.
            self._drop(gid, f)
            self._give_up(gid)
            return
        if frame is None:
            msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
            if call.params is not None:
                msg["params"] = call.params
            frame = encode(msg)
        self._to_server(out, frame, frame)

    def _forward_batch(self, job: BatchJob, now: float, out: Actions) -> None:
        requests = sum(1 for c in job.calls if not c.is_notification)
        batch = _Batch(job, requests)
        job.origin = batch
        for c in job.calls:
            self._forward(c, None, None, now, out)
        # Refused as duplicates, answered in the job at once: no longer open.
        batch.open = sum(1 for f in self._inflight.values() if f.batch is batch)
        if batch.open == 0:
            reply = job.finish()
            if reply is not None:
                out.to_client.append(reply)

    def _client_reply(self, msg: Response | ErrorResponse | InvalidMessage, now: float, out: Actions) -> None:
        """The client answered a request of the server's: back to the server under its own id."""
        if type(msg) is InvalidMessage:
            out.log.append("guard: dropped a malformed response of the client")
            return
        sid = self._s2c.pop(msg.id, _ABSENT) if type(msg.id) is int else _ABSENT
        if sid is _ABSENT:
            out.log.append(f"guard: dropped a reply of the client to no request of the server's (id {show(msg.id, 40)})")
            return
        self._s2c_by_server.pop(key_of(sid), None)
        if type(msg) is Response:
            back: dict[str, Any] = {"jsonrpc": "2.0", "id": sid, "result": msg.result}
        else:
            back = {"jsonrpc": "2.0", "id": sid, "error": msg.error.to_dict()}  # type: ignore[union-attr]
        payload = encode(back)
        self._to_server(out, payload, payload)

    # -- the server's frames ---------------------------------------------------------------------

    def from_server(self, frame: bytes, now: float, out: Actions | None = None) -> Actions:
        """A frame the server wrote: passed on (mapped to the client's ids), dropped (and logged),
        or replaced; added to ``out``."""
        return self.from_server_frames([frame], now, out)

    def from_server_frames(self, frames: Sequence[Frame], now: float, out: Actions | None = None) -> Actions:
        """Frames the server wrote, in order (unreadable ones as the framer reports them)."""
        out = Actions() if out is None else out
        mark = len(out.to_server)
        self._judged.clear()
        monitor = self.monitor
        seen = self._seen
        i, n = 0, len(frames)
        while i < n:
            # The everyday replies in runs: the monitor settles them; each is then only mapped,
            # from the envelope the monitor read.
            seen.clear()
            end = monitor.feed_plain(S2C, frames, now, i, -1, seen)
            if end > i:
                self._plain_replies(seen, frames, i, end, out)
            if end == n:
                break
            frame = frames[end]
            i = end + 1
            if type(frame) is not bytes:
                what = f"over {frame.limit} bytes" if isinstance(frame, FrameTooLarge) else frame.reason if isinstance(frame, BadHeader) else "?"
                for v in monitor.feed_unreadable(S2C, what, now).violations:
                    self.contained[v.spec.id] += 1
                    out.log.append(v.line())
                out.log.append(f"guard: dropped an unreadable frame from the server ({what})")
                continue
            ev = monitor.feed(S2C, frame, now)
            if ev.kind == "batch":
                for p in ev.parts:
                    self._server_message(p, None, out)
            else:
                self._server_message(ev, frame, out)
        self._release(now, out)
        self._judge_sent(out.to_server, mark, now)
        return out

    def _plain_replies(self, seen: list[Wire], frames: Sequence[Frame], start: int, end: int, out: Actions) -> None:
        """``frames[start:end]``, found plain by the monitor and read as ``seen`` (in order). A
        success reply to a request in flight under guard's id: the client gets it under its own id."""
        inflight = self._inflight
        by_client = self._by_client
        to_client = out.to_client
        # Every 2026-07-28 result names its type: asked once (only an initialize reply, never
        # plain, changes the version).
        modern = self._mcp and self._modern()
        for k, reply in zip(range(start, end), seen, strict=False):  # seen may hold one more
            if reply.method is not UNSET:  # a request or notification of the server's
                frame: bytes = frames[k]  # type: ignore[assignment]  # plain frames are bytes
                value = decode(frame)
                self._server_message(Event(S2C, "request" if "id" in value else "notification", value), frame, out)
                continue
            gid: int = reply.id  # type: ignore[assignment]  # plain: it settled a request under guard's id
            f = inflight.pop(gid)  # plain: a reply to a request sent
            newer = by_client.pop(f.key, gid)
            if newer != gid:  # plain JSON-RPC: a newer request took the client's id meanwhile
                by_client[f.key] = newer
            result = reply.result
            look = f.look
            if look and (look == 2 or type(result) is dict and "isError" in result) or (
                    modern and type(result) is dict and "resultType" not in result):
                self._settle(f, result, out)  # the rare cases: the result is looked at
                continue
            # The envelope read is the reply the client gets, under the client's id (plain: it
            # holds jsonrpc, the id and the result, nothing else).
            reply.id = f.client_id
            to_client.append(_encode_wire(reply))

    def _server_message(self, ev: Event, frame: bytes | None, out: Actions) -> None:
        for v in ev.violations:
            self.contained[v.spec.id] += 1
            out.log.append(v.line())
        kind = ev.kind
        if kind == "junk":
            # The line itself, as the server wrote it (bounded): usually a log line meant for stderr.
            out.log.append("guard: server stdout (not JSON-RPC): " + bytes(ev.value[:4096]).decode("utf-8", "replace"))
            return
        if kind == "invalid":
            out.log.append("guard: dropped a message that is no JSON-RPC message: " + show(ev.value, 200))
            return
        if kind == "response":
            self._server_response(ev, out)
            return
        for v in ev.violations:
            # A malformed request or notification would confuse the client; progress that
            # breaks the rules (after the reply, unknown token, not increasing) too.
            if v.spec.id in ("messages.invalid-message", "mcp.progress"):
                out.log.append(f"guard: dropped a {kind} of the server that breaks {v.spec.id}: {show(ev.value, 200)}")
                return
        value: dict[str, Any] = ev.value
        if kind == "request":
            if len(self._s2c) >= _S2C_KEEP:
                old, sid = self._s2c.popitem(last=False)
                self._s2c_by_server.pop(key_of(sid), None)
            self._next_s2c += 1
            cid = self._next_s2c
            self._s2c[cid] = value["id"]
            self._s2c_by_server[key_of(value["id"])] = cid
            out.to_client.append(encode({**value, "id": cid}))
            return
        params = value.get("params")
        method = value.get("method")
        if method == "notifications/progress" and type(params) is dict:
            t = params.get("progressToken")
            f = self._inflight.get(t) if type(t) is int else None
            if f is None or f.token is UNSET:
                out.log.append(f"guard: dropped progress for a token of no request in flight: {show(value, 200)}")
                return
            out.to_client.append(encode({**value, "params": {**params, "progressToken": f.token}}))
            return
        if method in CANCEL_METHODS and type(params) is dict:
            member = CANCEL_METHODS[method]  # the server gives up a request of its own
            cid2 = self._s2c_by_server.pop(key_of(params.get(member)), None)
            if cid2 is None:
                out.log.append(f"guard: dropped a cancel of the server for no request of its own: {show(value, 200)}")
                return
            self._s2c.pop(cid2, None)
            out.to_client.append(encode({**value, "params": {**params, member: cid2}}))
            return
        out.to_client.append(frame if frame is not None else encode(value))

    def _server_response(self, ev: Event, out: Actions) -> None:
        settled = ev.settled
        if settled is None or settled.dir != C2S or type(settled.id) is not int:
            key = ev.id
            if type(key) is int and key in self._given_up:
                del self._given_up[key]
                out.log.append(f"guard: dropped the late reply to id {key} (already answered at its deadline)")
            else:
                out.log.append(f"guard: dropped a reply the client cannot expect: {show(ev.value, 200)}")
            return
        gid = settled.id
        f = self._inflight.get(gid)
        if f is None:
            return
        self._drop(gid, f)
        value: dict[str, Any] = ev.value
        if any(v.spec.id == "messages.response-shape" for v in ev.violations):
            self._answer(f, "error", {"code": INVALID_REPLY_CODE, "message": "sturdyrpc guard: the server's reply was not a valid JSON-RPC response"}, out)
            out.log.append(f"guard: answered {f.method} (id {show(f.client_id, 40)}) with an error: its reply was malformed")
            return
        if "error" in value:
            self._answer(f, "error", self._plain_error(value["error"], f, out), out)
            return
        self._settle(f, value.get("result"), out)

    def _settle(self, f: _Forwarded, result: Any, out: Actions) -> None:
        """Answer the client's request ``f`` with the server's ``result`` (repaired where needed)."""
        if f.method == "initialize" and type(result) is dict and isinstance(self.profile, MCPProfile):
            version = result.get("protocolVersion")
            if type(version) is str and version in RULES:  # the version the server chose
                self.profile.set_version(version)
        elif type(result) is dict and "resultType" not in result and self._modern():
            # Every 2026-07-28 result names its type; one without is a complete one.
            result = {**result, "resultType": "complete"}
            self.contained["mcp.result-type"] += 1
        if f.method == "tools/call" and not self.keep_tool_errors and type(result) is dict and result.get("isError") is True:
            result = self._plain_tool_error(result, f, out)
        self._answer(f, "result", result, out)

    def _modern(self) -> bool:
        profile = self.profile
        if not isinstance(profile, MCPProfile) or profile.version is None:
            return False
        return RULES[profile.version].result_type

    def _plain_error(self, err: Any, f: _Forwarded, out: Actions) -> Any:
        what = f"the server's error to {f.method} (id {show(f.client_id, 40)})"
        return self._made_plain(err, plain_error(err), "errors.no-leak-probe", what, out)

    def _plain_tool_error(self, result: dict[str, Any], f: _Forwarded, out: Actions) -> Any:
        what = f"the failed tool's result (id {show(f.client_id, 40)})"
        return self._made_plain(result, plain_tool_result(result), "mcp.tool-fail-no-leak", what, out)

    def _made_plain(self, value: Any, plain: Any, rule: str, what: str, out: Actions) -> Any:
        if plain is None:
            return value
        self.contained[rule] += 1
        out.log.append(f"guard: incident {plain.incident}: {what} revealed {'; '.join(plain.found)}; the client got a plain one. "
                       f"The original: {show(value, 2000)}")
        return plain.value

    def _answer(self, f: _Forwarded, member: str, value: Any, out: Actions) -> None:
        answer = {"jsonrpc": "2.0", "id": f.client_id, member: value}
        batch = f.batch
        if batch is None:
            out.to_client.append(encode(answer))
            return
        batch.job.add_answer(answer)
        batch.open -= 1
        if batch.open == 0:
            reply = batch.job.finish()
            if reply is not None:
                out.to_client.append(reply)

    def _drop(self, gid: int, f: _Forwarded) -> None:
        del self._inflight[gid]
        if self._by_client.get(f.key) == gid:
            del self._by_client[f.key]

    def _give_up(self, gid: int) -> None:
        """The request ``gid`` is settled by guard: its reply, if it comes, is dropped quietly."""
        self.monitor.forget(C2S, gid)
        self._given_up[gid] = None
        if len(self._given_up) > _GIVEN_UP_KEEP:
            self._given_up.popitem(last=False)

    def _release(self, now: float, out: Actions) -> None:
        queue = self._queue
        while queue and (self.max_in_flight is None or len(self._inflight) - len(queue) < self.max_in_flight):
            self._send(self._inflight[queue.popleft()], out)

    # -- time and death --------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The monotonic time of the next deadline, or None."""
        if self.deadline is None:
            return None
        for f in self._inflight.values():  # arrival order: the oldest first
            return f.started + self.deadline
        return None

    def tick(self, now: float) -> Actions:
        """Answer the requests whose deadline has passed; cancel them on the server."""
        out = Actions()
        if self.deadline is None:
            return out
        self._judged.clear()
        limit = now - self.deadline
        message = f"sturdyrpc guard: no reply within the deadline of {self.deadline:g} s"
        expired = []
        for gid, f in self._inflight.items():
            if f.started > limit:
                break  # arrival order: the rest are younger
            expired.append((gid, f))
        for gid, f in expired:
            sent = f.sent
            if not sent:
                self._queue.remove(gid)
            self._drop(gid, f)
            self._answer(f, "error", {"code": DEADLINE_CODE, "message": message}, out)
            if not sent:
                out.log.append(f"guard: {f.method} (id {show(f.client_id, 40)}) waited for a free slot past the deadline: answered with {DEADLINE_CODE}")
                continue
            self._give_up(gid)
            cancel = self._cancel_notification(gid)
            if cancel is not None:
                self._to_server(out, cancel, cancel)
            out.log.append(f"guard: {f.method} (id {show(f.client_id, 40)}) got no reply within {self.deadline:g} s: answered with {DEADLINE_CODE}"
                           + (", cancelled on the server" if cancel is not None else ""))
        self._release(now, out)
        self._judge_sent(out.to_server, 0, now)
        return out

    def server_gone(self, code: int | None) -> Actions:
        """The server exited (``code``) or closed its stdout: answer everything pending now."""
        out = Actions()
        why = f"sturdyrpc guard: the server exited (code {code})" if code is not None else "sturdyrpc guard: the server closed its output"
        pending = list(self._inflight.items())
        self._queue.clear()
        for gid, f in pending:
            if f.sent:
                self.monitor.forget(C2S, gid)
            self._drop(gid, f)
            self._answer(f, "error", {"code": SERVER_GONE_CODE, "message": why}, out)
        if pending:
            out.log.append(f"guard: the server is gone; answered {len(pending)} pending request(s) with {SERVER_GONE_CODE}")
        return out

    @property
    def waiting(self) -> int:
        """Requests held back by ``max_in_flight``."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Client requests passed to the server and not settled."""
        return len(self._inflight) - len(self._queue)

    @property
    def open(self) -> int:
        """Client requests not answered yet (in flight or held back)."""
        return len(self._inflight)

    def client_id(self, msg: Any) -> Any:
        """The id the client knows the server's message ``msg`` by (None: none): for a reply, asked
        before it is fed to :meth:`from_server`, the id of the client's request; for a request
        of the server, asked after, guard's id for it toward the client (``guard --log`` on HTTP)."""
        if type(msg) is not dict or "id" not in msg:
            return None
        if "method" in msg:
            return self._s2c_by_server.get(key_of(msg["id"]))
        f = self._inflight.get(msg["id"]) if type(msg["id"]) is int else None
        return None if f is None else f.client_id

    # -- messages guard writes -------------------------------------------------------------------

    def _cancel_notification(self, gid: int) -> bytes | None:
        kind = self.cancel
        if kind == "auto":
            kind = "mcp" if isinstance(self.profile, MCPProfile) or self.monitor.mcp else "lsp" if self.content_length else "none"
        protocol = _CANCELLERS.get(kind)  # the protocol's own cancel (LSP's has no reason)
        made = None if protocol is None else protocol.cancel_notification(gid, f"sturdyrpc guard: deadline of {self.deadline:g} s")
        return None if made is None else encode({"jsonrpc": "2.0", "method": made[0], "params": made[1]})
