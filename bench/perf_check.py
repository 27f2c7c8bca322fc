"""``make perf-check``: instructions per request of every path, against a committed baseline.

Runs every scenario of ``bench/instructions.py`` under callgrind (instruction counts repeat on a
loaded machine, unlike wall-clock ratios) and compares each with the baseline committed for this
machine kind and Python minor version, ``bench/baselines/instructions-<machine>-py<X.Y>.json``.
A figure more than ``--tolerance`` (default 3%) above its baseline fails the check, so a slower
path cannot land unnoticed; one more than the tolerance below says so (update the baseline to
keep the gain). With no baseline for this kind of machine it prints the figures and passes.

    .venv/bin/python bench/perf_check.py                # compare (what CI runs)
    .venv/bin/python bench/perf_check.py --update       # measure and write the baseline
    .venv/bin/python bench/perf_check.py --jobs 2       # scenarios in parallel (one per core)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import instructions  # noqa: E402  (bench/ is not a package: its sibling by path)

BASELINES = Path(__file__).resolve().parent / "baselines"


def baseline_path() -> Path:
    """The baseline file for this machine kind and Python minor version."""
    return BASELINES / f"instructions-{platform.machine()}-py{sys.version_info[0]}.{sys.version_info[1]}.json"


def measure(names: list[str], jobs: int) -> dict[str, float]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        figures = dict(zip(names, pool.map(instructions.per_request, names), strict=True))
    return figures


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write the baseline for this machine kind instead of comparing")
    ap.add_argument("--tolerance", type=float, default=0.03, help="relative rise that fails (default 0.03)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="scenarios measured at once")
    ap.add_argument("scenarios", nargs="*", help="some scenarios only (default: all)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("perf-check: valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    names = args.scenarios or list(instructions.SCENARIOS)
    unknown = [n for n in names if n not in instructions.SCENARIOS]
    if unknown:
        print(f"perf-check: unknown scenario(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    figures = measure(names, max(1, args.jobs))
    path = baseline_path()
    if args.update:
        old = json.loads(path.read_text())["per_request"] if path.exists() else {}
        old.update({n: round(v) for n, v in figures.items()})
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"machine": platform.machine(), "python": platform.python_version(),
                                    "per_request": old}, indent=2, sort_keys=True) + "\n")
        print(f"perf-check: wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    base = json.loads(path.read_text())["per_request"] if path.exists() else {}
    failed = []
    print(f"{'scenario':24s} {'instructions/request':>20s} {'baseline':>10s} {'change':>8s}  bare baseline of the same run")
    for name in names:
        v = figures[name]
        bare = instructions.SCENARIOS[name][1]
        against = f"{v / figures[bare]:5.2f}x {bare}" if bare in figures else ""
        b = base.get(name)
        if b is None:
            print(f"{name:24s} {v:20,.0f} {'-':>10s} {'-':>8s}  {against}")
            continue
        change = v / b - 1
        mark = "  RISE" if change > args.tolerance else "  (lower: update the baseline)" if change < -args.tolerance else ""
        print(f"{name:24s} {v:20,.0f} {b:10,.0f} {change:+7.1%}  {against}{mark}")
        if change > args.tolerance:
            failed.append(name)
    if not base:
        print(f"perf-check: no baseline for this machine kind ({path.name}): figures shown, nothing compared")
        return 0
    if failed:
        print(f"perf-check: {len(failed)} path(s) rose more than {args.tolerance:.0%} over {path.name}: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"perf-check: every path within {args.tolerance:.0%} of {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
