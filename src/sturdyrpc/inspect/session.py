"""The inspector's record of one conversation, sans I/O: every message both ways, judged.

A :class:`Session` is fed each frame that passes between the inspector (the client) and the
server, with its direction and a monotonic clock value, exactly as ``trace`` feeds its
:class:`~sturdyrpc.proxy.monitor.Monitor`: the same monitor judges it, so a message breaks the
same rules, named the same way, as under ``trace`` and ``check``. Each frame becomes an entry
(a dict ready for JSON): requests are paired with their replies (``pair``: the other's ``seq``;
``ms``: the latency), and every rule the message breaks is on the entry itself, with the rule's
id, title, text and hint from :data:`~sturdyrpc.check.verdicts.SPECS`. The same frames are
written as a ``trace --log`` file by :class:`~sturdyrpc.proxy.tracelog.TraceLog` (what
:meth:`Session.export` returns), which ``sturdyrpc replay`` accepts.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

from ..check.config import MODERN_VERSION
from ..check.verdicts import SPECS, tool_result_problems
from ..framing import BadHeader, FrameTooLarge
from ..proxy.monitor import C2S, S2C, Direction, Event, Key, Monitor, Violation, key_of
from ..proxy.tracelog import TraceLog

__all__ = ["Session", "Frame", "violation_json", "C2S", "S2C"]

#: What a transport hands over: a whole message, or a frame its framer could not read.
Frame = bytes | FrameTooLarge | BadHeader
#: The members of a request's params that name what it is about (the timeline's label).
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def violation_json(v: Violation) -> dict[str, Any]:
    """A violation as the front end shows it: the rule ``check`` names, its text and the fix."""
    s = v.spec
    return {"rule": s.id, "title": s.title, "level": v.level.value, "side": v.side, "detail": v.detail, "text": s.rule, "hint": s.hint}


class Session:
    """The timeline of one conversation (see the module docstring).

    ``command``: what was started (or the URL), for the log's header; ``redact``: the log hides
    the values of secret-looking keys, as ``trace --log`` does by default. ``on_entry`` is called
    with each new entry (the app wakes its live timeline with it).
    """

    def __init__(self, command: list[str], *, framing: str = "line", redact: bool = True,
                 on_entry: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.monitor = Monitor(mcp=True)
        self.entries: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.on_entry = on_entry
        self._log_file = io.BytesIO()
        self._log = TraceLog(self._log_file, command, framing, redact=redact)
        # Requests in flight by (direction travelled, id): the seq of their entry.
        self._open: dict[tuple[Direction, Key], int] = {}
        self._extra = 0  # violations found here, beyond the monitor's (tool results)

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, dir: Direction, frame: Frame, now: float | None = None) -> list[dict[str, Any]]:
        """Judge and record one frame that travelled ``dir``; the entries it made (one, or one per
        element of a batch)."""
        now = time.monotonic() if now is None else now
        if not isinstance(frame, bytes):
            what, detail = ("too-large", f"a frame over {frame.limit} bytes") if isinstance(frame, FrameTooLarge) else ("bad-header", frame.reason)
            ev = self.monitor.feed_unreadable(dir, detail, now)
            self._log.event(dir, what, detail, now)
            return [self._add(ev, now, raw=detail)]
        ev = self.monitor.feed(dir, frame, now)
        records: list[bytes] = []
        self._log.message(records, self._log.head(dir, now), frame, ev)
        self._log.write(records)
        if ev.kind == "batch":
            batch = len(self.entries)
            made = [self._add(part, now, batch=batch) for part in ev.parts]
            if not made or ev.violations:  # an empty batch: one entry carries what it broke
                made.append(self._add(ev, now, batch=batch))
            return made
        raw = bytes(frame).decode("utf-8", "replace") if ev.kind == "junk" else None
        return [self._add(ev, now, raw=raw)]

    def _add(self, ev: Event, now: float, *, raw: str | None = None, batch: int | None = None) -> dict[str, Any]:
        seq = len(self.entries)
        e: dict[str, Any] = {"seq": seq, "dir": ev.dir, "t": round(now - self.started, 6), "kind": ev.kind,
                             "method": ev.method, "id": ev.id, "msg": None if raw is not None else ev.value,
                             "violations": [violation_json(v) for v in ev.violations]}
        if raw is not None:
            e["raw"] = raw
        if batch is not None:
            e["batch"] = batch
        if ev.kind == "request":
            e["label"] = self._label(ev)
            self._open[(ev.dir, key_of(ev.id))] = seq
        elif ev.kind == "response":
            self._settle(e, ev, now)
        self.entries.append(e)
        if self.on_entry is not None:
            self.on_entry(e)
        return e

    @staticmethod
    def _label(ev: Event) -> str:
        method = ev.method or "?"
        v = ev.value
        params = v.get("params") if type(v) is dict else None
        if method in _NAMED and type(params) is dict and type(params.get(_NAMED[method])) is str:
            return f"{method} {params[_NAMED[method]][:80]}"
        return method

    def _settle(self, e: dict[str, Any], ev: Event, now: float) -> None:
        v = ev.value
        e["error"] = type(v) is dict and "error" in v
        result = v.get("result") if type(v) is dict else None
        if type(result) is dict and type(result.get("resultType")) is str and result["resultType"] != "complete":
            e["result_type"] = result["resultType"]  # input_required, task: the request is not done
        p = ev.settled
        if p is None:
            return
        req = self._open.pop((p.dir, key_of(p.id)), None)
        ms = round((ev.duration or 0.0) * 1000, 3)
        e["label"] = p.label
        e["ms"] = ms
        if p.cancelled:
            e["cancelled"] = True
        if req is not None:
            e["pair"] = req
            request = self.entries[req]
            request["pair"] = e["seq"]
            request["ms"] = ms
        if p.method == "tools/call" and p.dir == C2S and type(v) is dict and "result" in v:
            # Beyond the monitor (which judges every reply's envelope): the result of a tool call, as check judges it.
            problems = tool_result_problems(v["result"], modern=self.monitor.version == MODERN_VERSION)
            if problems:
                spec = SPECS["mcp.call-tools"]
                self._extra += 1
                e["violations"].append(violation_json(Violation(spec, f"tool {p.name!r}: " + "; ".join(problems), "server", now, spec.level)))

    # -- reading ---------------------------------------------------------------------------------

    def since(self, seq: int) -> list[dict[str, Any]]:
        """The entries from ``seq`` on."""
        return self.entries[max(0, seq):]

    def summary(self, now: float | None = None, *, deadline: float = 10.0) -> dict[str, Any]:
        """Counts, the requests never answered (``overdue``: those older than ``deadline``
        seconds), the slowest, and the violations by rule."""
        now = time.monotonic() if now is None else now
        s = self.monitor.summary(now)
        by_rule: dict[str, dict[str, Any]] = {}
        for e in self.entries:
            for v in e["violations"]:
                r = by_rule.setdefault(v["rule"], {"rule": v["rule"], "title": v["title"], "level": v["level"], "count": 0, "first": e["seq"]})
                r["count"] += 1
        unanswered = []
        for p, age in s.unanswered:
            seq = self._open.get((p.dir, key_of(p.id)))
            unanswered.append({"seq": seq, "label": p.label, "id": p.id, "dir": p.dir, "age": round(age, 3), "overdue": age > deadline})
        return {
            "messages": len(self.entries),
            "mcp_version": s.mcp_version,
            "by_method": s.by_method,
            "unanswered": unanswered,
            "slowest": [{"ms": round(d * 1000, 3), "label": m, "id": i} for d, m, i in s.slowest],
            "violation_count": s.violation_count + self._extra,
            "by_rule": sorted(by_rule.values(), key=lambda r: r["first"]),
        }

    def export(self) -> bytes:
        """The session as a ``trace --log`` file (NDJSON), for ``sturdyrpc replay``."""
        return self._log_file.getvalue()

