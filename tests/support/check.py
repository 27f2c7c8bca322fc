"""Reading ``sturdyrpc check`` reports in the tests: what did not pass, and a failure's details."""

from __future__ import annotations

from sturdyrpc.check import Report, Status


def not_passed(report: Report) -> dict[str, str]:
    """``{check id: status}`` for every check that did not pass (skips excluded)."""
    return {o.spec.id: o.status.value for o in report.outcomes if o.status not in (Status.PASS, Status.SKIP)}


def describe(report: Report) -> str:
    """Every check that did not pass, with what it sent, what came back and the stderr tail."""
    lines = []
    for o in report.outcomes:
        if o.status not in (Status.PASS, Status.SKIP):
            lines.append(f"{o.spec.id} {o.status.value}: {o.detail}\n   sent={o.sent[:2]}\n   recv={o.received[:2]}\n   stderr={o.stderr_tail[-300:]!r}")
    return "\n".join(lines)
