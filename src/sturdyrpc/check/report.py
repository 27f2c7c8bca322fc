"""Reports: a table for a person (rich; colour only on a terminal), JSON and JUnit XML for machines."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from typing import IO, Any

from .model import AREAS, Outcome, Report, Status

__all__ = ["print_report", "text_report", "problem_lines", "write_json", "write_junit", "ProgressLine"]

_STYLE = {
    Status.PASS: ("PASS", "green"),
    Status.FAIL: ("FAIL", "bold red"),
    Status.WARN: ("WARN", "yellow"),
    Status.SKIP: ("skip", "dim"),
    Status.ERROR: ("ERROR", "bold magenta"),
}


class ProgressLine:
    """A one-line live progress indicator on stderr, shown only when stderr is a terminal."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.failed = 0

    def __call__(self, done: int, total: int, check_id: str) -> None:
        if not self.enabled:
            return
        line = f"\rsturdyrpc check: [{done}/{total}] {check_id}"
        self.stream.write(line[:100].ljust(100))
        self.stream.flush()

    def clear(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


def print_report(report: Report, stream: IO[str] | None = None, *, verbose: bool = False) -> None:
    """Print the table grouped by area, then each failure and warning in detail, then the summary."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    out = stream or sys.stdout
    tty = out.isatty()
    console = Console(file=out, highlight=False, no_color=not tty, width=None if tty else 120, soft_wrap=not tty)
    head = f"sturdyrpc check: {' '.join(report.command)}"
    console.print(escape(head), style="bold")
    for note in report.notes:
        console.print(f"  {escape(note)}", style="dim")
    if report.server_info:
        console.print(f"  server: {escape(json.dumps(report.server_info, ensure_ascii=False))}", style="dim")

    table = Table(box=box.SIMPLE_HEAD, show_header=True, header_style="bold", show_lines=False, pad_edge=False, expand=False)
    table.add_column("area")
    table.add_column("result")
    table.add_column("level")
    table.add_column("check")
    table.add_column("what it checks / why skipped", overflow="fold")
    order = {a: i for i, a in enumerate(AREAS)}
    by_area: dict[str, list[Outcome]] = {}
    for o in sorted(report.outcomes, key=lambda o: order.get(o.spec.area, 99)):
        by_area.setdefault(o.spec.area, []).append(o)
    for n, (area, items) in enumerate(by_area.items()):
        if n:
            table.add_section()
        reasons = {o.detail for o in items}
        if not verbose and len(items) > 1 and all(o.status is Status.SKIP for o in items) and len(reasons) == 1:
            # A whole area that does not apply (e.g. MCP on a plain JSON-RPC server) is one row.
            table.add_row(area, "[dim]skip[/]", "", f"{len(items)} checks", escape(reasons.pop()))
            continue
        for i, o in enumerate(items):
            label, style = _STYLE[o.status]
            text = o.spec.title if o.status is not Status.SKIP else f"{o.spec.title} ({o.detail})"
            table.add_row(area if i == 0 else "", f"[{style}]{label}[/]", (o.level or o.spec.level).value, escape(o.spec.id), escape(text))
    console.print(table)

    problems = [o for o in report.outcomes if o.status in (Status.FAIL, Status.WARN, Status.ERROR)]
    for o in problems:
        _print_problem(console, o)
    console.print(f"({report.duration:.1f}s)", style="dim")
    console.file.flush()
    # The summary is written plainly so that scripts can grep the exact line.
    print(report.summary(), file=out, flush=True)


def problem_lines(o: Outcome) -> list[tuple[str, str]]:
    """One failure or warning as ``(text, rich style)`` lines: what was found, the rule, the fix,
    what was sent and received, the server's last stderr lines. Both the table report and
    :func:`text_report` write these."""
    label, style = _STYLE[o.status]
    level = (o.level or o.spec.level).value
    lines = [
        (f"{label} {o.spec.id} ({level}): {o.spec.title}", f"bold {style}"),
        (f"  found: {o.detail}", ""),
        (f"  rule:  {o.spec.rule}", ""),
        (f"  fix:   {o.spec.hint}", ""),
    ]
    lines += [(f"  sent:     {s}", "cyan") for s in o.sent]
    lines += [(f"  received: {r}", "cyan") for r in o.received] or [("  received: (nothing)", "cyan")]
    if o.stderr_tail.strip():
        lines.append(("  server stderr (last lines):", "dim"))
        lines += [(f"    {line[:200]}", "dim") for line in o.stderr_tail.rstrip().splitlines()[-8:]]
    return lines


def _print_problem(console: Any, o: Outcome) -> None:
    from rich.markup import escape

    console.print()
    for text, style in problem_lines(o):
        console.print(escape(text), style=style or None)


def text_report(report: Report) -> str:
    """The report as plain text without the table: the command, each failure and warning in
    detail, the summary line (for a test failure, a log; needs no ``rich``)."""
    out = [f"sturdyrpc check: {' '.join(report.command)}", *(f"  {note}" for note in report.notes)]
    for o in report.outcomes:
        if o.status in (Status.FAIL, Status.WARN, Status.ERROR):
            out += ["", *(text for text, _ in problem_lines(o))]
    out += ["", report.summary()]
    return "\n".join(out)


def write_json(report: Report, path: str) -> None:
    """The JSON report (see :meth:`Report.to_dict`)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report.to_dict(), f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_junit(report: Report, path: str) -> None:
    """JUnit XML: one testsuite per area, one testcase per check. MUST failures and checker
    errors are failures/errors; SHOULD/quality warnings pass with a note in system-out."""
    root = ET.Element("testsuites", name="sturdyrpc check", tests=str(len(report.outcomes)))
    by_area: dict[str, list[Outcome]] = {}
    for o in report.outcomes:
        by_area.setdefault(o.spec.area, []).append(o)
    total_fail = total_err = total_skip = 0
    for area in sorted(by_area, key=lambda a: AREAS.index(a) if a in AREAS else 99):
        items = by_area[area]
        fails = sum(o.status is Status.FAIL for o in items)
        errs = sum(o.status is Status.ERROR for o in items)
        skips = sum(o.status is Status.SKIP for o in items)
        total_fail, total_err, total_skip = total_fail + fails, total_err + errs, total_skip + skips
        suite = ET.SubElement(
            root, "testsuite", name=f"sturdyrpc.check.{area}", tests=str(len(items)),
            failures=str(fails), errors=str(errs), skipped=str(skips),
            time=f"{sum(o.duration for o in items):.3f}",
        )
        for o in items:
            case = ET.SubElement(suite, "testcase", name=o.spec.id, classname=f"sturdyrpc.check.{area}", time=f"{o.duration:.3f}")
            body = _details(o)
            if o.status is Status.FAIL:
                ET.SubElement(case, "failure", message=o.detail[:500], type=(o.level or o.spec.level).value).text = body
            elif o.status is Status.ERROR:
                ET.SubElement(case, "error", message=o.detail[:500], type="checker").text = body
            elif o.status is Status.SKIP:
                ET.SubElement(case, "skipped", message=o.detail[:500])
            elif o.status is Status.WARN:
                ET.SubElement(case, "system-out").text = f"WARNING ({(o.level or o.spec.level).value}): {body}"
    root.set("failures", str(total_fail))
    root.set("errors", str(total_err))
    root.set("skipped", str(total_skip))
    root.set("time", f"{report.duration:.3f}")
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _details(o: Outcome) -> str:
    lines = [o.detail, f"rule: {o.spec.rule}", f"fix: {o.spec.hint}"]
    lines += [f"sent: {s}" for s in o.sent] + [f"received: {r}" for r in o.received]
    if o.stderr_tail.strip():
        lines.append("server stderr:\n" + o.stderr_tail.rstrip()[-1500:])
    # XML 1.0 cannot carry most control characters.
    return "".join(ch if ch in "\n\t" or ord(ch) >= 0x20 else f"\\x{ord(ch):02x}" for ch in "\n".join(lines))
