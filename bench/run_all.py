"""Run every benchmark module under bench/, print one table, write bench/results/latest.json.

A benchmark module is a file ``bench/bench_<name>.py`` with a ``main() -> dict`` that returns:

    {
        "title": "what was measured, in one line",
        "metrics": [
            {"name": ..., "value": number, "unit": "us/op",
             "extra": "free text shown beside the value (ratio, spread...)",
             "target": "<= 2.0x raw" or None,      # the figure the issue asks for, as text
             "ok": True / False / None},           # None: reported, no target
            ...
        ],
        ...anything else: stored as it is in latest.json
    }

Modules run in name order, each in this process; one that fails is reported and the others
still run. Benchmarks report, they do not fail CI: the exit code is 0 unless the runner itself
breaks. Targets are printed PASS / MISS.

    .venv/bin/python bench/run_all.py              # all modules
    .venv/bin/python bench/run_all.py dispatch     # only bench_dispatch.py (names may be repeated)
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "latest.json"


def discover(only: list[str]) -> list[Path]:
    files = sorted(HERE.glob("bench_*.py"))
    if only:
        wanted = {o.removeprefix("bench_").removesuffix(".py") for o in only}
        files = [f for f in files if f.stem.removeprefix("bench_") in wanted]
    return files


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"sturdyrpc_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(HERE))  # modules may import their helpers from bench/
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(HERE))
    return mod


def fmt_value(v: Any) -> str:
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.1f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def status(m: dict[str, Any]) -> str:
    ok = m.get("ok")
    return "" if ok is None else ("PASS" if ok else "MISS")


def print_section(name: str, res: dict[str, Any], seconds: float) -> None:
    print(f"\n== {name}: {res.get('title', '')}  ({seconds:.1f} s)")
    metrics = res.get("metrics", [])
    if not metrics:
        print("   (no metrics)")
        return
    w = max(len(str(m.get("name", ""))) for m in metrics)
    for m in metrics:
        val = f"{fmt_value(m.get('value'))} {m.get('unit', '')}"
        target = m.get("target") or ""
        st = status(m)
        line = f"   {str(m.get('name', '')):<{w}}  {val:>16}  {str(m.get('extra', '')):<44}"
        if target:
            line += f"  target {target:<14} {st}"
        print(line.rstrip())


def environment() -> dict[str, Any]:
    try:
        load1, load5, _ = os.getloadavg()
    except OSError:
        load1 = load5 = -1.0
    try:
        from importlib.metadata import version

        msgspec_version = version("msgspec")
    except Exception:
        msgspec_version = "?"
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "loadavg_1m_5m_at_start": [round(load1, 2), round(load5, 2)],
        "msgspec": msgspec_version,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str]) -> int:
    files = discover(argv)
    env = environment()
    print(
        f"sturdyrpc benchmarks: Python {env['python']}, {env['cpus']} CPUs, load {env['loadavg_1m_5m_at_start'][0]} "
        f"(ratios are measured within one run; absolute figures move with the machine's load)"
    )
    out: dict[str, Any] = {"environment": env, "benchmarks": {}}
    targets: list[tuple[str, dict[str, Any]]] = []
    t_all = time.perf_counter()
    for path in files:
        name = path.stem.removeprefix("bench_")
        t0 = time.perf_counter()
        try:
            res = load(path).main()
        except Exception as exc:
            traceback.print_exc()
            res = {"title": "FAILED", "error": f"{type(exc).__name__}: {exc}", "metrics": []}
            print(f"\n== {name}: FAILED ({type(exc).__name__}: {exc})")
            out["benchmarks"][name] = res
            continue
        seconds = time.perf_counter() - t0
        res["seconds"] = round(seconds, 2)
        out["benchmarks"][name] = res
        print_section(name, res, seconds)
        targets += [(name, m) for m in res.get("metrics", []) if m.get("ok") is not None]
    if targets:
        print("\n== targets")
        for name, m in targets:
            print(f"   {status(m):4s}  {name}: {m['name']} = {fmt_value(m['value'])} {m.get('unit', '')} (target {m['target']})")
    print(f"\nall benchmarks: {time.perf_counter() - t_all:.1f} s")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2, default=str) + "\n")
    try:
        shown = RESULTS.relative_to(Path.cwd())
    except ValueError:
        shown = RESULTS
    print(f"written: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
