"""Running the checks: processes, grouping, parallelism and time limits.

Checks of one group share a server process and run in order; the process is replaced
whenever it dies or stops answering (a reply that never came leaves it in an unknown state). Groups run in parallel. A watchdog kills the process of a check that
overruns its time budget, which ends every wait of that check at once, so nothing the
server does can hang the checker.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from . import http, jsonrpc, mcp, robustness, tasks
from .config import Config, is_local_url
from .connect import new_probe
from .driver import Frame
from .model import AREAS, Check, CheckFailed, CheckSkipped, Level, Outcome, Report, Status
from .probe import Probe
from .rules import REGISTRY

__all__ = ["run_checks", "all_checks", "Progress"]

#: ``progress(done, total, check_id)`` after each check.
Progress = Callable[[int, int, str], None]


def all_checks() -> list[Check]:
    """Every registered check, in report order (by area, then definition order)."""
    order = {a: i for i, a in enumerate(AREAS)}
    _ = (jsonrpc, robustness, mcp, http, tasks)  # importing them registers their checks
    return sorted(REGISTRY, key=lambda c: order.get(c.spec.area, len(order)))


def _select(checks: list[Check], areas: Iterable[str] | None, only: Iterable[str] | None) -> list[Check]:
    areas = set(areas or ())
    only = set(only or ())
    out = []
    for c in checks:
        if areas and c.spec.area not in areas:
            continue
        if only and not any(c.spec.id == o or c.spec.id.startswith(o.rstrip("*")) and o.endswith("*") for o in only):
            continue
        out.append(c)
    return out


class _Run:
    def __init__(self, cfg: Config, total: int, progress: Progress | None) -> None:
        self.cfg = cfg
        self.total = total
        self.progress = progress
        self.done = 0
        self.lock = threading.Lock()
        self.outcomes: dict[str, Outcome] = {}
        self.frames: list[tuple[str, Frame]] = []  # every stdout line of every process, for the hygiene check

    def finished(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes[outcome.spec.id] = outcome
            self.done += 1
            done = self.done
        if self.progress:
            self.progress(done, self.total, outcome.spec.id)

    def collect_frames(self, probe: Probe, start: int, label: str) -> None:
        frames = probe.proc.frames[start:]
        with self.lock:
            self.frames.extend((label, f) for f in frames)

    def judge_exit(self, outcome: Outcome, probe: Probe) -> None:
        """A server that exits after a check's input, which the checker did not end, fails that check
        at MUST level whatever its own level (a crash is never a style issue)."""
        if self.cfg.url or probe.proc.ended_by_checker() or outcome.status not in (Status.PASS, Status.WARN, Status.SKIP):
            return
        if probe.proc.alive() and not probe.proc.stdout_closed.is_set():
            return
        code = probe.proc.wait(0.5)
        how = f"exited with code {code}" if code is not None else "closed its stdout"
        was = f" (the check itself: {outcome.status.value}{': ' + outcome.detail if outcome.detail else ''})"
        outcome.status, outcome.level = Status.FAIL, Level.MUST
        outcome.detail = f"the server crashed: it {how} after this check's input{was}"
        outcome.stderr_tail = probe.proc.stderr_tail(1500)

    def run_group(self, checks: list[Check]) -> None:
        probe: Probe | None = None
        # An outcome is reported once the next check starts: a crash that comes a moment after a
        # check's last exchange is still blamed on that check's input.
        held: Outcome | None = None
        try:
            for c in checks:
                if held is not None and probe is not None:
                    self.judge_exit(held, probe)
                if held is not None:
                    self.finished(held)
                    held = None
                if probe is not None and (probe.spoiled or not probe.proc.alive() or probe.proc.stdout_closed.is_set()):
                    probe.close()
                    probe = None
                if probe is None:
                    t0 = time.monotonic()
                    try:
                        probe = new_probe(self.cfg, handshake=c.handshake)
                    except CheckFailed as exc:
                        self.finished(Outcome(c.spec, Status.ERROR, f"could not start the server: {exc.detail}", duration=time.monotonic() - t0))
                        continue
                    except OSError as exc:
                        self.finished(Outcome(c.spec, Status.ERROR, f"could not start the server: {exc}", duration=time.monotonic() - t0))
                        continue
                    self.collect_frames(probe, 0, "startup")
                outcome = self.run_one(c, probe)
                if outcome.status is Status.ERROR:
                    probe.spoiled = True
                # Otherwise the process is reused: every exchange ends with a sentinel that the
                # server answered, so it is known to be responsive with nothing outstanding.
                # A probe that timed out, died or could not be written to is marked spoiled
                # by the probe itself and replaced before the next check.
                held = outcome
        finally:
            if held is not None and probe is not None:
                self.judge_exit(held, probe)
            if probe is not None:
                probe.close()
            if held is not None:
                self.finished(held)

    def run_one(self, c: Check, probe: Probe) -> Outcome:
        probe.mark()
        start_frame = len(probe.proc.frames)
        budget = c.budget * max(self.cfg.timeout, 5.0) + 10.0
        if not c.handshake:
            budget += self.cfg.startup_timeout  # its first read also waits for the server to start
        overran = threading.Event()

        def watchdog() -> None:
            overran.set()
            probe.proc.stop()

        timer = threading.Timer(budget, watchdog)
        timer.daemon = True
        timer.start()
        t0 = time.monotonic()
        status, detail, level = Status.PASS, "", None
        try:
            c.run(probe)
        except CheckFailed as exc:
            level = exc.level or c.spec.level
            status = Status.FAIL if level is Level.MUST else Status.WARN
            detail = exc.detail
        except CheckSkipped as exc:
            status, detail = Status.SKIP, str(exc)
        except Exception as exc:  # a bug in a check must not stop the run
            status, detail = Status.ERROR, f"checker error: {type(exc).__name__}: {exc}"
        finally:
            timer.cancel()
        if overran.is_set():
            status, detail = Status.ERROR, f"the check overran its time budget of {budget:.0f}s; the server was killed. {detail}"
        sent, received = probe.window()
        self.collect_frames(probe, start_frame, c.spec.id)
        out = Outcome(c.spec, status, detail, level, sent, received, duration=time.monotonic() - t0)
        if status not in (Status.PASS, Status.SKIP):
            out.stderr_tail = probe.proc.stderr_tail(1500)
        return out


def run_checks(
    cfg: Config,
    *,
    areas: Iterable[str] | None = None,
    only: Iterable[str] | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Report:
    """Check the server ``cfg.command`` and return the report (never raises for server behaviour)."""
    t0 = time.monotonic()
    report = Report(list(cfg.command) or [cfg.url or ""])
    if cfg.url:
        cfg.startup_timeout = min(cfg.startup_timeout, cfg.timeout)  # a running server: nothing starts
        if not is_local_url(cfg.url):
            report.notes.append("the URL is not on this machine: the checks send it malformed and oversized requests")
    if cfg.mcp is not False:
        mcp.detect(cfg, report)
    report.mcp = cfg.is_mcp
    report.protocol = cfg.version
    report.server_info = cfg.server_info
    selected = _select(all_checks(), areas, only)
    run = _Run(cfg, len(selected), progress)

    runnable: dict[str, list[Check]] = {}
    final: list[Check] = []
    for c in selected:
        reason = f"stdio only: {c.stdio_only}" if cfg.url and c.stdio_only else None
        reason = reason or (c.applies(cfg) if c.applies else None)
        if reason:
            run.finished(Outcome(c.spec, Status.SKIP, reason))
            continue
        if c.group == "final":
            final.append(c)
        elif c.group == "fresh":
            runnable[f"fresh:{c.spec.id}"] = [c]
        else:
            runnable.setdefault(c.group, []).append(c)

    # Long groups first, so that the pool is not left waiting on one at the end.
    groups = sorted(runnable.values(), key=lambda g: -sum(c.budget for c in g))
    # Each group keeps a server process busy; a server that is slow to start (over 0.5 s to
    # its first reply, typically heavy imports) gets one process per core, not two.
    cpus = os.cpu_count() or 2
    n_workers = workers or (max(2, min(8, 2 * cpus)) if cfg.startup_seconds < 0.5 else max(2, min(8, cpus)))
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="check") as pool:
        for fut in [pool.submit(run.run_group, g) for g in groups]:
            fut.result()

    for c in final:
        _run_stdout_check(run, c)

    report.outcomes = [run.outcomes[c.spec.id] for c in selected if c.spec.id in run.outcomes]
    report.duration = time.monotonic() - t0
    return report


def _run_stdout_check(run: _Run, c: Check) -> None:
    """Run the stdout-hygiene check on a fresh process, then judge every line any process wrote."""
    t0 = time.monotonic()
    try:
        probe = new_probe(run.cfg, handshake=c.handshake)
    except (CheckFailed, OSError) as exc:
        run.finished(Outcome(c.spec, Status.ERROR, f"could not start the server: {exc}"))
        return
    run.collect_frames(probe, 0, "startup")
    outcome = run.run_one(c, probe)
    probe.close()
    verdict = robustness.stdout_verdict(run.frames)
    outcome.duration = time.monotonic() - t0
    if outcome.status is Status.ERROR and "checker error" in outcome.detail:
        pass  # keep the checker's own error visible rather than a verdict on partial data
    elif verdict:
        outcome.status, outcome.detail, outcome.level = Status.FAIL, verdict, Level.MUST
        outcome.stderr_tail = probe.proc.stderr_tail(1500)
    else:
        outcome.status, outcome.detail = Status.PASS, f"{len(run.frames)} lines checked"
    run.finished(outcome)
