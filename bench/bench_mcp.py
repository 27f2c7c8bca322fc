"""MCP over stdio: ``tools/call echo`` with 64 calls in flight, ours vs the official Python SDK.

Servers, in the same run, over real pipes:

- ``sturdyrpc demo --mcp`` (our MCP demo server),
- the official Python SDK's ``MCPServer`` with the same tools (``tests/servers/mcp_py_sdk_server.py``),
- ``bench/bare_server.py`` (the core's bare-loop baseline: plain JSON-RPC echo, no MCP),
- ``bench/mcp_floor_server.py`` (for reference: the same Peer, transport and MCP profile with a
  trivial inline ``tools/call``: what the connection layer costs before any server logic).

Each MCP server is initialized (``initialize`` 2025-11-25 + ``notifications/initialized``),
then gets ``n`` ``tools/call echo`` requests with 64 outstanding. Also: start-up to the
``initialize`` reply (spawn -> reply), and RSS after 10,000 calls.

Targets: ours >= 50x the SDK's throughput (issue 4); ours >= 0.6x the bare loop (issue 9: the
one ``tools/call`` path, decoded once); start-up < 200 ms; RSS after 10,000 calls < 40 MiB.

Run alone: ``.venv/bin/python bench/bench_mcp.py [n_calls]``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IN_FLIGHT = 64
N_CALLS = 20_000
N_SDK_CALLS = 2_000
WARMUP = 500
ROUNDS = 5
STARTUP_RUNS = 9
TARGET_VS_SDK = 50.0
TARGET_VS_BARE = 0.6
TARGET_STARTUP_MS = 200.0
TARGET_RSS_MIB = 40.0

INIT = b'{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}\n'
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'


def our_command() -> list[str]:
    exe = Path(sys.executable).with_name("sturdyrpc")
    if exe.exists():
        return [str(exe), "demo", "--mcp"]
    found = shutil.which("sturdyrpc")
    if found:
        return [found, "demo", "--mcp"]
    return [sys.executable, "-m", "sturdyrpc", "demo", "--mcp"]


def sdk_command() -> list[str] | None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, str(ROOT / "tests" / "servers" / "mcp_py_sdk_server.py")]


def status_kib(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ns(pid: int) -> int:
    """CPU time (ns) of all threads of ``pid`` so far (robust to other load on the machine)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def _mcp_request(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}\n' % i


def _mcp_ok(msg: Any) -> bool:
    r = msg.get("result")
    return type(r) is dict and not r.get("isError") and r.get("content", [{}])[0].get("text") == "hello"


def _bare_request(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","method":"echo","params":{"value":"hello"},"id":%d}\n' % i


def _bare_ok(msg: Any) -> bool:
    return bool(msg.get("result") == "hello")


def _read_line(rfd: int, buf: bytearray, timeout: float = 20.0) -> bytes:
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        if time.monotonic() > deadline:
            raise RuntimeError("no reply")
        data = os.read(rfd, 1 << 16)
        if not data:
            raise RuntimeError("server closed stdout")
        buf += data
    i = buf.index(b"\n")
    line = bytes(buf[:i])
    del buf[: i + 1]
    return line


def load(
    cmd: list[str], n: int, *, mcp: bool = True, in_flight: int = IN_FLIGHT, warmup: int = WARMUP
) -> dict[str, Any]:
    """``n`` calls (after ``warmup`` more) with ``in_flight`` outstanding; RSS read at the end."""
    make: Callable[[int], bytes] = _mcp_request if mcp else _bare_request
    ok: Callable[[Any], bool] = _mcp_ok if mcp else _bare_ok
    total = n + warmup
    reqs = [make(i) for i in range(total)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    wfd, rfd = proc.stdin.fileno(), proc.stdout.fileno()
    decode = msgspec.json.Decoder().decode
    buf = bytearray()
    if mcp:
        os.write(wfd, INIT)
        _read_line(rfd, buf)
        os.write(wfd, INITIALIZED)
    next_id = 0
    done = bad = 0
    t_start = time.perf_counter()
    cpu_start = cpu_ns(proc.pid)

    def send(k: int) -> None:
        nonlocal next_id
        k = min(k, total - next_id)
        if k > 0:
            os.write(wfd, b"".join(reqs[next_id : next_id + k]))
            next_id += k

    send(in_flight)
    rest = bytes(buf)
    while done < total:
        data = os.read(rfd, 1 << 16)
        if not data:
            raise RuntimeError(f"{cmd!r} closed its stdout after {done} replies")
        lines = (rest + data).split(b"\n") if rest else data.split(b"\n")
        rest = lines.pop()
        got = 0
        for line in lines:
            msg = decode(line)
            if "id" not in msg:
                continue  # a notification
            got += 1
            if not ok(msg):
                bad += 1
            done += 1
            if done == warmup:
                t_start = time.perf_counter()
                cpu_start = cpu_ns(proc.pid)
        send(got)
    secs = time.perf_counter() - t_start
    cpu_us = (cpu_ns(proc.pid) - cpu_start) / n / 1e3
    rss = status_kib(proc.pid, "VmRSS") / 1024
    hwm = status_kib(proc.pid, "VmHWM") / 1024
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    proc.stdout.close()
    return {"calls": n, "seconds": secs, "req_per_s": n / secs, "cpu_us_per_call": cpu_us, "rss_mib": rss, "peak_rss_mib": hwm, "bad_replies": bad}


def _compile_package() -> None:
    """Write the package's byte code first: with PYTHONDONTWRITEBYTECODE set (as in some CI and
    sandbox environments) every start would otherwise recompile changed modules, which measures
    the compiler, not the server. An installed package has its byte code."""
    import compileall

    import sturdyrpc

    compileall.compile_dir(str(Path(sturdyrpc.__file__).parent), quiet=1)


def startup(cmd: list[str], runs: int = STARTUP_RUNS) -> dict[str, float]:
    """Spawn -> ``initialize`` answered (the request is written at once)."""
    _compile_package()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(INIT)
        line = proc.stdout.readline()
        times.append((time.perf_counter() - t0) * 1e3)
        if b'"protocolVersion"' not in line:
            raise RuntimeError(f"unexpected first reply {line[:200]!r}")
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def main(n: int = N_CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    ours_cmd = our_command()
    sdk_cmd = sdk_command()
    bare_cmd = [sys.executable, str(HERE / "bare_server.py")]
    ours: list[dict[str, Any]] = []
    bare: list[dict[str, Any]] = []
    sdk: list[dict[str, Any]] = []
    floor: list[dict[str, Any]] = []
    vs_bare: list[float] = []
    floor_cmd = [sys.executable, str(HERE / "mcp_floor_server.py")]
    for _ in range(rounds):
        ours.append(load(ours_cmd, n))
        floor.append(load(floor_cmd, n))
        if bare_cmd and (HERE / "bare_server.py").exists():
            bare.append(load(bare_cmd, n, mcp=False))
            vs_bare.append(ours[-1]["req_per_s"] / bare[-1]["req_per_s"])
    if sdk_cmd is not None:
        sdk.append(load(sdk_cmd, N_SDK_CALLS, warmup=200))
    st_ours = startup(ours_cmd)
    st_sdk = startup(sdk_cmd, 3) if sdk_cmd is not None else None

    def med(rs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rs)

    ours_rps = med(ours, "req_per_s")
    metrics: list[dict[str, Any]] = [
        {"name": "sturdyrpc MCP: tools/call echo", "value": round(ours_rps), "unit": "req/s",
         "extra": f"{n} calls, {IN_FLIGHT} in flight, median of {rounds} rounds, best {max(r['req_per_s'] for r in ours):.0f}",
         "target": None, "ok": None},
    ]
    if sdk:
        sdk_rps = med(sdk, "req_per_s")
        ratio = ours_rps / sdk_rps
        metrics.append({"name": "Python SDK MCPServer: tools/call echo", "value": round(sdk_rps), "unit": "req/s",
                        "extra": f"{N_SDK_CALLS} calls, {IN_FLIGHT} in flight", "target": None, "ok": None})
        metrics.append({"name": "throughput ratio ours / Python SDK", "value": round(ratio, 1), "unit": "x",
                        "extra": "", "target": f">= {TARGET_VS_SDK:.0f}", "ok": ratio >= TARGET_VS_SDK})
    metrics.append({"name": "peer floor: trivial inline tools/call", "value": round(med(floor, "req_per_s")), "unit": "req/s",
                    "extra": f"ours/floor {ours_rps / med(floor, 'req_per_s'):.2f}; cpu/call ours {med(ours, 'cpu_us_per_call'):.1f} us, "
                    f"floor {med(floor, 'cpu_us_per_call'):.1f} us", "target": None, "ok": None})
    if vs_bare:
        r = statistics.median(vs_bare)
        metrics.append({"name": "bare loop (plain JSON-RPC echo)", "value": round(med(bare, "req_per_s")), "unit": "req/s",
                        "extra": f"bench/bare_server.py; cpu/call {med(bare, 'cpu_us_per_call'):.1f} us", "target": None, "ok": None})
        metrics.append({"name": "throughput ratio ours MCP / bare loop", "value": round(r, 2), "unit": "x",
                        "extra": f"per round {', '.join(f'{x:.2f}' for x in vs_bare)} (median; the machine's other load moves it)",
                        "target": f">= {TARGET_VS_BARE}",
                        "ok": r >= TARGET_VS_BARE})
    metrics.append({"name": "sturdyrpc MCP: start-up to initialize answered", "value": round(st_ours["median"], 1), "unit": "ms",
                    "extra": f"median of {STARTUP_RUNS}, range {st_ours['min']:.0f}..{st_ours['max']:.0f}",
                    "target": f"< {TARGET_STARTUP_MS:.0f} ms", "ok": st_ours["median"] < TARGET_STARTUP_MS})
    if st_sdk is not None:
        metrics.append({"name": "Python SDK MCPServer: start-up to initialize answered", "value": round(st_sdk["median"], 1),
                        "unit": "ms", "extra": "median of 3", "target": None, "ok": None})
    rss = max(r["rss_mib"] for r in ours)
    metrics.append({"name": f"sturdyrpc MCP: RSS after {n + WARMUP:,} calls", "value": round(rss, 1), "unit": "MiB",
                    "extra": f"VmRSS (peak {max(r['peak_rss_mib'] for r in ours):.1f})", "target": f"< {TARGET_RSS_MIB:.0f} MiB",
                    "ok": rss < TARGET_RSS_MIB})
    if sdk:
        metrics.append({"name": "Python SDK MCPServer: RSS after its calls", "value": round(sdk[0]["rss_mib"], 1), "unit": "MiB",
                        "extra": f"after {N_SDK_CALLS + 200} calls", "target": None, "ok": None})
    bad = sum(r["bad_replies"] for r in ours + sdk + bare)
    metrics.append({"name": "bad replies", "value": bad, "unit": "", "extra": "", "target": "0", "ok": bad == 0})
    return {
        "title": f"MCP stdio: tools/call echo, {IN_FLIGHT} in flight, ours vs the official Python SDK",
        "metrics": metrics,
        "rounds": {"ours": ours, "sdk": sdk, "bare": bare, "floor": floor},
        "startup": {"ours": st_ours, "sdk": st_sdk},
        "commands": {"ours": ours_cmd, "sdk": sdk_cmd, "bare": bare_cmd},
    }


if __name__ == "__main__":
    res = main(int(sys.argv[1]) if len(sys.argv) > 1 else N_CALLS)
    for m in res["metrics"]:
        status = "" if m["ok"] is None else ("PASS" if m["ok"] else "MISS")
        print(f"{m['name']:52s} {m['value']:>10} {m['unit']:6s} {m['extra']:40s} {m['target'] or ''} {status}")
