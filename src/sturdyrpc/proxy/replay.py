"""Re-running a recorded session (``sturdyrpc trace --log``), sans I/O.

:func:`load_session` reads the NDJSON log; a :class:`Replay` then says what to send to the
server next, one client message after another: it sends everything up to the next request, waits
for that request's reply, and compares it with the recorded one. Requests the server makes are
answered with the client's recorded reply to the same request of the recording (matched by method
and order, the id mapped to the server's new id). Ids are never compared; fields named with
``ignore`` are left out of the comparison. A log written with its secrets redacted
(:func:`recorded_redacted`) holds ``"[REDACTED]"`` where they were: the server's replies are
compared after the same redaction, so a secret the server sends again is no difference.

A log of the HTTP guard (``guard --url --log``: its header says ``"transport": "http"``) holds
the sessions of many clients, each record marked with its ``"session"`` (:func:`recorded_sessions`);
:func:`load_session` with ``session`` reads one of them as a stdio log is read. The upstream's
messages are read under the ids the client knew them by (``"client_id"``: guard's own ids are
the upstream's business), a reply guard did not hand to the client is left out, and guard's own
answers (``g2c``) are too: what is replayed is the client's conversation with the server, the
JSON-RPC messages alone (no HTTP header was recorded), so a stdio server of the same app can be
its replay.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..check.config import id_key
from ..codec import DecodeFailure, decode, encode
from .redact import redact

__all__ = ["Record", "Difference", "Replay", "load_session", "recorded_framing", "recorded_redacted", "recorded_sessions",
           "strip_ignored", "diff_text", "ALL_SESSIONS", "STATELESS"]

#: ``load_session(session=...)``: every record, whichever session it belongs to (the default).
ALL_SESSIONS: Any = object()
#: What the sessionless 2026-07-28 requests of an HTTP log (``"session": null``) are called for ``replay --session``.
STATELESS = "stateless"
_LEAVE_OUT: Any = object()


@dataclass(frozen=True)
class Record:
    """One message of the log: ``dir`` ``c2s``/``s2c``, the decoded message (None for non-JSON)."""

    dir: str
    msg: Any
    t: float


@dataclass
class Difference:
    """A reply that differs from the recorded one."""

    method: str
    id: Any
    expected: Any
    got: Any
    diff: str


def _records(lines: Iterable[bytes | str]) -> Iterable[Any]:
    for n, line in enumerate(lines, 1):
        if isinstance(line, str):
            line = line.encode()
        if not line.strip():
            continue
        try:
            yield decode(line)
        except DecodeFailure as exc:
            raise ValueError(f"line {n} of the log is not JSON: {exc.reason}") from None


def load_session(lines: Iterable[bytes | str], session: Any = ALL_SESSIONS) -> list[Record]:
    """The messages of a trace log, in order (records without a JSON message are left out);
    ``session``: of an HTTP guard's log, only that session's (None: the 2026-07-28 requests)."""
    out = []
    for rec in _records(lines):
        if type(rec) is dict and rec.get("dir") in ("c2s", "s2c") and "msg" in rec:
            msg = rec["msg"]
            if "session" in rec:  # the HTTP guard's
                if session is not ALL_SESSIONS and rec["session"] != session:
                    continue
                if rec["dir"] == "s2c" and (msg := _as_the_client_saw(msg, rec.get("client_id"))) is _LEAVE_OUT:
                    continue
            out.append(Record(rec["dir"], msg, float(rec.get("t", 0.0))))
    return out


def _as_the_client_saw(msg: Any, client_id: Any) -> Any:
    """A message of the upstream under the id the client knew it by; a reply the client never
    got (no ``client_id``: late, or to guard's own message) is left out."""
    if type(msg) is list:
        ids = client_id if type(client_id) is list and len(client_id) == len(msg) else [None] * len(msg)
        kept = [m for m in map(_as_the_client_saw, msg, ids) if m is not _LEAVE_OUT]
        return kept or _LEAVE_OUT
    if type(msg) is not dict or "id" not in msg:
        return msg
    if client_id is None:
        return _LEAVE_OUT if _is_response(msg) else msg
    return {**msg, "id": client_id}


def recorded_sessions(lines: list[bytes]) -> list[str | None] | None:
    """The sessions of an HTTP guard's log, in the order they first appear (None for the
    2026-07-28 requests, which have none); None for a stdio log, which has no sessions."""
    try:
        head = decode(lines[0]) if lines else None
    except DecodeFailure:
        head = None
    if type(head) is not dict or head.get("transport") != "http":
        return None
    seen: dict[str | None, None] = {}
    for rec in _records(lines[1:]):
        if type(rec) is dict and rec.get("dir") in ("c2s", "s2c", "g2c") and "session" in rec:
            seen.setdefault(rec["session"])
    return list(seen)


def recorded_framing(lines: list[bytes]) -> str:
    """The framing named in the log's header record (``line`` when there is none)."""
    for line in lines[:1]:
        try:
            head = decode(line)
        except DecodeFailure:
            break
        if type(head) is dict and head.get("framing") in ("line", "content-length"):
            return str(head["framing"])
    return "line"


def recorded_redacted(lines: list[bytes]) -> bool:
    """Whether the log's header record says its secrets were redacted (False for a log
    without the mark: written with ``--no-redact``, or before redaction existed)."""
    for line in lines[:1]:
        try:
            head = decode(line)
        except DecodeFailure:
            break
        return type(head) is dict and head.get("redacted") is True
    return False


def _is_request(m: Any) -> bool:
    return type(m) is dict and "method" in m and "id" in m


def _is_response(m: Any) -> bool:
    return type(m) is dict and "method" not in m and ("result" in m or "error" in m)


def strip_ignored(value: Any, paths: Iterable[str]) -> Any:
    """``value`` without the members at ``paths``: dotted paths from the reply (``result.meta.time``),
    ``*`` for any key or index; a path without a dot names that key at any depth."""
    out = json.loads(json.dumps(value))  # a deep copy in plain JSON types
    for path in paths:
        parts = path.split(".")
        if len(parts) == 1:
            _drop_everywhere(out, parts[0])
        else:
            _drop_path(out, parts)
    return out


def _drop_everywhere(v: Any, key: str) -> None:
    if type(v) is dict:
        v.pop(key, None)
        for x in v.values():
            _drop_everywhere(x, key)
    elif type(v) is list:
        for x in v:
            _drop_everywhere(x, key)


def _drop_path(v: Any, parts: list[str]) -> None:
    head, rest = parts[0], parts[1:]
    if type(v) is dict:
        keys = list(v) if head == "*" else [head] if head in v else []
        for k in keys:
            if rest:
                _drop_path(v[k], rest)
            else:
                del v[k]
    elif type(v) is list:
        idx = range(len(v)) if head == "*" else [int(head)] if head.isdigit() and int(head) < len(v) else []
        for i in sorted(idx, reverse=True):
            if rest:
                _drop_path(v[i], rest)
            else:
                del v[i]


def diff_text(expected: Any, got: Any) -> str:
    """A unified diff of two JSON values, pretty-printed with sorted keys."""
    a = json.dumps(expected, indent=2, sort_keys=True).splitlines()
    b = json.dumps(got, indent=2, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, "recorded", "replayed", lineterm=""))


@dataclass
class Replay:
    """Drives one replay; feed it the server's messages, send what it returns."""

    records: list[Record]
    ignore: tuple[str, ...] = ()
    #: The log's secrets are redacted: so are the replies before they are compared.
    redacted: bool = False
    differences: list[Difference] = field(default_factory=list)
    compared: int = 0
    _pos: int = 0
    _waiting: Any = None  # the recorded request whose reply we wait for
    _waiting_reply: Any = None  # and its recorded reply
    # By the position of the request's record: an id may come again once its request is
    # answered (each 2026-07-28 request of an HTTP log is a conversation of its own, often id 1).
    _expected: dict[int, Any] = field(default_factory=dict)
    _server_requests: dict[str, list[Any]] = field(default_factory=dict)  # method -> recorded ids, in order
    _client_answers: dict[tuple[str, Any], Any] = field(default_factory=dict)  # recorded server id -> client reply
    _end: int = 0  # one past the last record to send

    def __post_init__(self) -> None:
        sendable = [i for i, r in enumerate(self.records) if r.dir == "c2s" and not _is_response(r.msg)]
        self._end = sendable[-1] + 1 if sendable else 0
        unanswered: dict[tuple[str, Any], int] = {}  # a request's id -> its record's position, until its reply
        for i, r in enumerate(self.records):
            if r.dir == "c2s" and _is_request(r.msg):
                unanswered[id_key(r.msg["id"])] = i
            elif r.dir == "s2c" and _is_response(r.msg) and id_key(r.msg.get("id")) in unanswered:
                self._expected[unanswered.pop(id_key(r.msg["id"]))] = r.msg
            elif r.dir == "s2c" and _is_request(r.msg):
                self._server_requests.setdefault(r.msg["method"], []).append(r.msg["id"])
            elif r.dir == "c2s" and _is_response(r.msg):
                self._client_answers[id_key(r.msg.get("id"))] = r.msg

    @property
    def waiting_for(self) -> Any:
        """The recorded request whose reply is awaited, or None."""
        return self._waiting

    @property
    def done(self) -> bool:
        return self._waiting is None and self._pos >= self._end

    def next_messages(self) -> list[bytes]:
        """Client messages to send now: up to and including the next request that has a recorded reply."""
        out = []
        while self._waiting is None and self._pos < self._end:
            r = self.records[self._pos]
            self._pos += 1
            if r.dir != "c2s" or _is_response(r.msg):
                continue  # the client's replies are sent when the server asks again
            out.append(encode(r.msg))
            if _is_request(r.msg) and self._pos - 1 in self._expected:
                self._waiting, self._waiting_reply = r.msg, self._expected[self._pos - 1]
        return out

    def from_server(self, msg: Any) -> list[bytes]:
        """A message from the server; returns what to send back (a recorded client reply)."""
        if _is_request(msg):
            queue = self._server_requests.get(msg["method"])
            if queue:
                recorded_id = queue.pop(0)
                answer = self._client_answers.get(id_key(recorded_id))
                if answer is not None:
                    return [encode({**answer, "id": msg["id"]})]
            return []
        if self._waiting is None or not _is_response(msg) or id_key(msg.get("id")) != id_key(self._waiting["id"]):
            return []
        self._compare(self._waiting, self._waiting_reply, msg)
        self._waiting = None
        return []

    def missing_reply(self) -> None:
        """The reply to the awaited request did not come (timeout, or the server ended)."""
        if self._waiting is not None:
            self._compare(self._waiting, self._waiting_reply, None)
            self._waiting = None

    def _compare(self, request: Any, expected: Any, got: Any) -> None:
        self.compared += 1
        if got is not None and self.redacted:
            got = redact(got)
        a = strip_ignored({k: v for k, v in expected.items() if k != "id"}, self.ignore)
        b = None if got is None else strip_ignored({k: v for k, v in got.items() if k != "id"}, self.ignore)
        if a != b or (b is not None and json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True)):
            self.differences.append(Difference(request["method"], request["id"], a, b, diff_text(a, b)))
