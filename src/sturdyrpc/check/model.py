"""What a check is, what it found, and the report that collects the findings."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "AREAS",
    "Level",
    "Status",
    "CheckSpec",
    "Check",
    "CheckFailed",
    "ServerStopped",
    "CheckSkipped",
    "Outcome",
    "Report",
]

#: Areas in the order the report lists them.
AREAS = ("framing", "messages", "ids", "batches", "errors", "robustness", "concurrency", "lifecycle", "mcp", "http")


class Level(StrEnum):
    """How binding the rule behind a check is."""

    MUST = "MUST"
    SHOULD = "SHOULD"
    QUALITY = "quality"


class Status(StrEnum):
    """The verdict of one check."""

    PASS = "pass"
    FAIL = "fail"  # a MUST-level rule was broken
    WARN = "warn"  # a SHOULD-level rule or a quality goal was missed
    SKIP = "skip"  # not applicable to this server or these options
    ERROR = "error"  # the checker itself could not complete the check


@dataclass(frozen=True)
class CheckSpec:
    """The description of a check: everything the report shows besides the findings."""

    id: str
    area: str
    level: Level
    title: str
    rule: str
    hint: str


@dataclass(frozen=True)
class Check:
    """A runnable check.

    ``group`` names the server process it runs on: checks of one group share a process
    and run one after another (the process is replaced after one dies or stops
    answering); ``"fresh"`` gets a process of its own. ``handshake`` is false for MCP
    checks that must see the server before ``initialize``. ``applies`` returns the
    reason to skip, or ``None``.
    """

    spec: CheckSpec
    run: Callable[[Any], None]  # takes a :class:`~.probe.Probe` (not imported: modules import one way)
    group: str = "fresh"
    handshake: bool = True
    applies: Callable[[Any], str | None] | None = None
    budget: float = 1.0  # multiples of the per-read timeout this check may take in total
    stdio_only: str = ""  # why the check means nothing over HTTP (skipped with --url); empty: any transport


class CheckFailed(Exception):
    """Raised by a check: the server broke the rule. ``level`` lowers the severity when
    only a SHOULD-level part of a MUST check was missed."""

    def __init__(self, detail: str, *, level: Level | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.level = level


class ServerStopped(CheckFailed):
    """The server exited, closed its output or stopped answering after the check's input.

    Always a MUST-level failure, whatever the level of the check that sent the input: a
    server that dies on a message it could have refused is broken, not merely impolite.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail, level=Level.MUST)


class CheckSkipped(Exception):
    """Raised by a check that cannot run against this server (the reason is shown)."""


@dataclass
class Outcome:
    """What one check found."""

    spec: CheckSpec
    status: Status
    detail: str = ""
    level: Level | None = None  # the effective level of a failure (may be lower than the spec's)
    sent: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)
    stderr_tail: str = ""
    duration: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "id": self.spec.id,
            "area": self.spec.area,
            "level": (self.level or self.spec.level).value,
            "title": self.spec.title,
            "status": self.status.value,
            "detail": self.detail,
            "rule": self.spec.rule,
            "hint": self.spec.hint,
            "sent": self.sent,
            "received": self.received,
            "stderr_tail": self.stderr_tail,
            "duration_s": round(self.duration, 3),
        }


@dataclass
class Report:
    """All outcomes of one run, plus what was learnt about the server."""

    command: list[str]
    outcomes: list[Outcome] = field(default_factory=list)
    mcp: bool = False
    protocol: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    duration: float = 0.0

    def count(self, status: Status) -> int:
        """How many outcomes have ``status``."""
        return sum(1 for o in self.outcomes if o.status is status)

    @property
    def passed(self) -> int:
        return self.count(Status.PASS)

    @property
    def failed(self) -> int:
        """Failures, counting checker errors too: a check that could not complete proves nothing."""
        return self.count(Status.FAIL) + self.count(Status.ERROR)

    @property
    def warnings(self) -> int:
        return self.count(Status.WARN)

    def summary(self) -> str:
        """The last line of the report: ``N passed, M failed`` (and ``, K warnings``)."""
        line = f"{self.passed} passed, {self.failed} failed"
        if self.warnings:
            line += f", {self.warnings} warnings"
        return line

    def exit_code(self, strict: bool = False) -> int:
        """0 when no MUST-level check failed; with ``strict``, SHOULD-level warnings fail too."""
        if self.failed:
            return 1
        if strict and any(o.status is Status.WARN and o.level is Level.SHOULD for o in self.outcomes):
            return 1
        return 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        return {
            "tool": "sturdyrpc check",
            "command": self.command,
            "mcp": self.mcp,
            "protocol": self.protocol,
            "server_info": self.server_info,
            "notes": self.notes,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round(self.duration, 3),
            "summary": {
                "passed": self.passed,
                "failed": self.failed,
                "warnings": self.warnings,
                "skipped": self.count(Status.SKIP),
            },
            "checks": [o.to_dict() for o in self.outcomes],
        }
