"""What ``trace`` and ``guard`` show on stderr: a line per settled request, notification,
violation and junk line as they happen, and the closing summary. Colour (and ``rich`` for the
summary) only on a terminal; plain lines otherwise, cheap enough to keep up with the traffic."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import IO, Any

from ..check.verdicts import show
from .monitor import C2S, Event, Summary

__all__ = ["LiveView", "format_summary", "report_contained"]

_RED, _YELLOW, _DIM, _GREEN, _RESET = "\x1b[31m", "\x1b[33m", "\x1b[2m", "\x1b[32m", "\x1b[0m"


class LiveView:
    """Writes the live lines to ``out`` (stderr). ``colour`` (a terminal): coloured, through
    ``rich`` when it is installed (wrapped to the terminal's width), else with ANSI codes.
    ``redact``: applied to every line before it is written (``trace`` hides secrets with it)."""

    def __init__(self, out: IO[str], *, colour: bool = False, prefix: str = "trace", traffic: bool = True,
                 redact: Callable[[str], str] | None = None) -> None:
        self.out = out
        self.traffic = traffic  # False: only violations, junk and the proxy's own lines
        self.colour = colour
        self.prefix = prefix
        self._write: Callable[[str], Any] = out.write
        if colour:
            try:
                from rich.console import Console
                from rich.text import Text
            except ModuleNotFoundError:
                pass
            else:
                console = Console(file=out, highlight=False, soft_wrap=False)

                def write(lines: str) -> None:
                    for line in lines.splitlines():
                        console.print(Text.from_ansi(line))

                self._write = write
        if redact is not None:
            write_plain = self._write
            self._write = lambda lines: write_plain(redact(lines))

    def _c(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.colour else text

    def event(self, ev: Event) -> None:
        """One judged frame."""
        if not self.traffic and not ev.violations and not ev.parts and ev.kind != "junk":
            return
        lines: list[str] = []
        self._lines(ev, lines)
        if lines:
            self._write("".join(lines))

    def _lines(self, ev: Event, lines: list[str]) -> None:
        p = self.prefix
        arrow = "->" if ev.dir == C2S else "<-"
        if ev.kind == "batch":
            if self.traffic:
                lines.append(f"{p}: {arrow} batch of {len(ev.parts)}\n")
            for part in ev.parts:
                self._lines(part, lines)
            return
        if not self.traffic:
            pass
        elif ev.kind == "response" and ev.settled is not None:
            ms = (ev.duration or 0.0) * 1000
            who = "" if ev.settled.dir == C2S else " (server's request)"
            value: Any = ev.value
            err = value.get("error") if type(value) is dict else None
            if type(err) is dict:
                status = self._c(_RED, f"error {err.get('code')} {show(err.get('message'), 80)}")
            else:
                status = self._c(_GREEN, "ok")
            cancelled = " (cancelled)" if ev.settled.cancelled else ""
            lines.append(f"{p}: {ev.settled.label} id={show(ev.settled.id, 40)} {ms:.1f} ms {status}{cancelled}{who}\n")
        elif ev.kind == "notification":
            lines.append(self._c(_DIM, f"{p}: {arrow} {ev.method}") + "\n")
        if ev.kind == "junk":
            lines.append(self._c(_RED, f"{p}: {arrow} non-JSON: {show(bytes(ev.value).decode('utf-8', 'replace'), 160)}") + "\n")
        for v in ev.violations:
            lines.append(self._c(_RED if v.level.value == "MUST" else _YELLOW, f"{p}: VIOLATION {v.line()}") + "\n")

    def text(self, line: str, *, warn: bool = False) -> None:
        """A line of the proxy's own (guard's decisions)."""
        self._write((self._c(_YELLOW, line) if warn else line) + "\n")


def format_summary(s: Summary, *, title: str = "trace summary", code: int | None = None) -> str:
    """The closing summary as plain text."""
    lines = [f"== {title} =="]
    if code is not None:
        lines.append(f"server exit status: {code}")
    if s.mcp_version:
        lines.append(f"MCP version: {s.mcp_version}")
    lines.append(f"requests never answered: {len(s.unanswered)}")
    for p, age in s.unanswered[:20]:
        who = "client" if p.dir == C2S else "server"
        lines.append(f"  {p.label} id={show(p.id, 40)} (sent by the {who}) waited {age:.2f} s")
    if len(s.unanswered) > 20:
        lines.append(f"  ... and {len(s.unanswered) - 20} more")
    if s.slowest:
        lines.append("slowest requests:")
        for secs, method, rid in s.slowest:
            lines.append(f"  {secs * 1000:.1f} ms  {method} id={show(rid, 40)}")
    if s.by_method:
        lines.append("by method (requests / errors / notifications):")
        for m, c in s.by_method.items():
            lines.append(f"  {m}: {c.get('requests', 0)} / {c.get('errors', 0)} / {c.get('notifications', 0)}")
    lines.append(f"violations: {s.violation_count}")
    for v in s.violations[:50]:
        lines.append(f"  {v.line()}")
        lines.append(f"      rule: {v.spec.rule}; fix: {v.spec.hint}")
    if s.violation_count > 50:
        lines.append(f"  ... and {s.violation_count - 50} more")
    return "\n".join(lines) + "\n"


def print_summary(out: IO[str], s: Summary, *, title: str, code: int | None, terminal: bool,
                  redact: Callable[[str], str] | None = None) -> None:
    """The summary on ``out``: with ``rich`` on a terminal when it is installed, plain otherwise
    (``redact``: applied to its text first)."""
    text = format_summary(s, title=title, code=code)
    if redact is not None:
        text = redact(text)
    if terminal:
        try:
            from rich.console import Console
            from rich.text import Text
        except ModuleNotFoundError:
            pass
        else:
            console = Console(file=out, highlight=False)
            for line in text.splitlines():
                style = "bold" if line.startswith("==") else "red" if "[MUST]" in line else "yellow" if "[SHOULD]" in line else None
                console.print(Text(line, style=style or ""))
            return
    out.write(text)


def report_contained(out: IO[str], contained: Mapping[str, int], report: str | None, **fields: Any) -> None:
    """What guard contained, by the rule ``check`` names: one line on ``out``, and (``report``: a
    path) the same counts as JSON with ``fields`` beside them."""
    counts = dict(sorted(contained.items()))
    if counts:
        out.write("guard contained (by rule, as check names them): " + ", ".join(f"{rule} x{n}" for rule, n in counts.items()) + "\n")
    else:
        out.write("guard contained nothing: every message was valid\n")
    if report is not None:
        with open(report, "w", encoding="utf-8") as f:
            json.dump({"sturdyrpc": "guard", **fields, "contained": counts}, f, indent=2)
            f.write("\n")
