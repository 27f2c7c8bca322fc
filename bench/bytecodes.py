"""Bytecodes executed per request, by function: where a path's instructions come from.

Instructions per request (``instructions.py``, ``instructions_stdio.py``) say how much a path
costs; this says which functions spend it, counted exactly with ``sys.settrace`` opcode events
(each bytecode is ~27 machine instructions in CPython 3.11's loop, and about half a branch
mispredict). Two runs of ``LOW`` and ``HIGH`` requests, their difference per request: set-up
excluded. Slow (tracing), exact, and the same on a loaded machine.

    .venv/bin/python bench/bytecodes.py http-session-json     # an in-process scenario of instructions.py
    .venv/bin/python bench/bytecodes.py demo                  # sturdyrpc demo over pipes, 64 in flight
    .venv/bin/python bench/bytecodes.py demo-mcp              # sturdyrpc demo --mcp, the same
    PYTHONPATH=/other/checkout/src .venv/bin/python bench/bytecodes.py demo   # another checkout's
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LOW, HIGH = 1000, 3000
TOP = 40

#: Run as the child of a ``demo`` measurement: trace the server, write the counts at exit.
_CHILD = """
import collections, json, os, sys
counts = collections.Counter()
def tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    if event == "opcode":
        c = frame.f_code
        counts[c.co_filename + ":" + str(c.co_firstlineno) + " " + c.co_name] += 1
    return tracer
def dump():
    sys.settrace(None)
    with open(os.environ["STURDYRPC_BYTECODES_OUT"], "w") as f:
        json.dump(counts, f)
real_exit = os._exit
def exit_after_dump(code):
    dump()
    real_exit(code)
os._exit = exit_after_dump  # the demo leaves with os._exit once its output is flushed
sys.settrace(tracer)
from sturdyrpc.cli import main
sys.argv = ["sturdyrpc"] + os.environ["STURDYRPC_BYTECODES_ARGS"].split()
try:
    main()
finally:
    dump()
"""


def _short(key: str) -> str:
    path, _, rest = key.partition(":")
    for cut in ("/src/", "python3.11/"):
        if cut in path:
            path = path.split(cut)[-1]
    return f"{path}:{rest}"


def _in_process(name: str, n: int) -> dict[str, int]:
    import instructions

    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            c = frame.f_code
            counts[f"{c.co_filename}:{c.co_firstlineno} {c.co_name}"] += 1
        return tracer

    sys.settrace(tracer)
    try:
        instructions.SCENARIOS[name][0](n)
    finally:
        sys.settrace(None)
    return dict(counts)


def _demo(args: str, n: int) -> dict[str, int]:
    import bench_mcp
    import bench_stdio

    with tempfile.TemporaryDirectory(prefix="sturdyrpc-bytecodes-") as tmp:
        out = os.path.join(tmp, "counts.json")
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(_CHILD)
        os.environ["STURDYRPC_BYTECODES_OUT"] = out
        os.environ["STURDYRPC_BYTECODES_ARGS"] = args
        cmd = [sys.executable, script]
        if "--mcp" in args:
            bench_mcp.load(cmd, n, warmup=10)
        else:
            bench_stdio.load(cmd, n=n, warmup=10)
        with open(out) as f:
            return dict(json.load(f))


def per_request(name: str) -> list[tuple[float, str]]:
    """(bytecodes per request, function) for ``name``, most first."""
    if name in ("demo", "demo-mcp"):
        args = "demo --mcp" if name == "demo-mcp" else "demo"
        a, b = _demo(args, LOW), _demo(args, HIGH)
    else:
        _in_process(name, 20)  # imports and first-call set-up out of the way
        a, b = _in_process(name, LOW), _in_process(name, HIGH)
    rows = [((b.get(k, 0) - a.get(k, 0)) / (HIGH - LOW), _short(k)) for k in set(a) | set(b)]
    return sorted((r for r in rows if r[0] > 0), reverse=True)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        rows = per_request(name)
        print(f"{name}: {sum(v for v, _ in rows):,.0f} bytecodes per request")
        for v, where in rows[:TOP]:
            if v >= 0.5:
                print(f"  {v:8.1f}  {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
