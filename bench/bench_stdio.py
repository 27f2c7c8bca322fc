"""``sturdyrpc demo`` over real pipes, against a bare loop, in the same run.

A load generator keeps ``IN_FLIGHT`` (64) ``echo`` requests in flight for ``N_REQUESTS`` (30,000)
requests against each server (a subprocess; stdin/stdout are OS pipes), and measures:

- throughput (req/s) and latency p50/p99 as the client sees it;
- CPU time per request of the server process (``/proc/PID/task/*/schedstat``, ns),
  counted from after a warm-up to the last reply;
- peak RSS of the server (``VmHWM`` in ``/proc/PID/status``).

Servers: ``sturdyrpc demo``, and ``bench/bare_server.py`` (reads a line, decodes, looks
the method up in a dict, encodes, writes and flushes; no validation). For reference the
bare loop also runs in a "chunked" variant (one read and one write per pipe chunk).
Servers are run alternately ``ROUNDS`` times; the median round is reported with the
spread (min..max), and the ratio ours/bare is taken within each round.

Also: start-up to first reply (spawn -> the reply to a request written at once;
median of ``STARTUP_RUNS``) and the idle RSS (``VmRSS``) of ``sturdyrpc demo``.

Targets: throughput ours/bare >= 0.7 (issue 9; 0.5 in issue 2); start-up < 150 ms; idle RSS
< 30 MiB.

Run alone: ``.venv/bin/python bench/bench_stdio.py [n_requests]``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
IN_FLIGHT = 64
N_REQUESTS = 30_000
WARMUP = 2_000
ROUNDS = 5
STARTUP_RUNS = 10
TARGET_RATIO = 0.7
TARGET_STARTUP_MS = 150.0
TARGET_IDLE_MIB = 30.0


def demo_command() -> list[str]:
    exe = Path(sys.executable).with_name("sturdyrpc")
    if exe.exists():
        return [str(exe), "demo"]
    found = shutil.which("sturdyrpc")
    if found:
        return [found, "demo"]
    return [sys.executable, "-m", "sturdyrpc", "demo"]


def servers() -> dict[str, list[str]]:
    return {
        "sturdyrpc demo": demo_command(),
        "bare loop": [sys.executable, str(HERE / "bare_server.py")],
        "bare loop (chunked)": [sys.executable, str(HERE / "bare_server.py"), "--chunked"],
    }


# ------------------------------------------------------------------ /proc readings


def cpu_ns(pid: int) -> int:
    """CPU time (ns) of all threads of ``pid`` so far."""
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


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------------- load


def _requests(n: int) -> list[bytes]:
    return [b'{"jsonrpc":"2.0","method":"echo","params":{"value":"hello"},"id":%d}\n' % i for i in range(n)]


def load(cmd: list[str], n: int = N_REQUESTS, in_flight: int = IN_FLIGHT, warmup: int = WARMUP) -> dict[str, Any]:
    """Run ``n`` requests (after ``warmup`` more) with ``in_flight`` outstanding against ``cmd``."""
    total = n + warmup
    reqs = _requests(total)
    sent_at = [0] * total
    lat: list[int] = []
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    wfd = proc.stdin.fileno()
    rfd = proc.stdout.fileno()
    decode = msgspec.json.Decoder().decode
    clock = time.perf_counter_ns
    next_id = 0
    done = 0
    bad = 0
    rest = b""
    t_start = 0
    cpu_start = 0

    def send(k: int) -> None:
        nonlocal next_id
        k = min(k, total - next_id)
        if k <= 0:
            return
        now = clock()
        for i in range(next_id, next_id + k):
            sent_at[i] = now
        os.write(wfd, b"".join(reqs[next_id : next_id + k]))
        next_id += k

    send(in_flight)
    while done < total:
        data = os.read(rfd, 1 << 16)
        if not data:
            raise RuntimeError(f"{cmd!r} closed its stdout after {done} replies")
        now = clock()
        lines = (rest + data).split(b"\n") if rest else data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            msg = decode(line)
            i = msg.get("id")
            if type(i) is not int or msg.get("result") != "hello":
                bad += 1
                continue
            if i >= warmup:
                lat.append(now - sent_at[i])
            done += 1
            if done == warmup:
                t_start = now
                cpu_start = cpu_ns(proc.pid)
        send(len(lines))
    t_end = clock()
    cpu_end = cpu_ns(proc.pid)
    hwm = status_kib(proc.pid, "VmHWM")
    proc.stdin.close()
    proc.wait(10)
    proc.stdout.close()
    lat.sort()
    secs = (t_end - t_start) / 1e9
    return {
        "requests": n,
        "in_flight": in_flight,
        "seconds": secs,
        "req_per_s": n / secs,
        "p50_us": lat[len(lat) // 2] / 1e3,
        "p99_us": lat[int(len(lat) * 0.99)] / 1e3,
        "cpu_us_per_req": (cpu_end - cpu_start) / n / 1e3,
        "peak_rss_mib": hwm / 1024,
        "bad_replies": bad,
        "exit_code": proc.returncode,
    }


# ------------------------------------------------------------------- start-up


def startup(cmd: list[str], runs: int = STARTUP_RUNS) -> dict[str, Any]:
    """Spawn -> first reply to a request written at once; and idle RSS after it."""
    times = []
    cpu = []
    rss = []
    req = b'{"jsonrpc":"2.0","method":"echo","params":["hi"],"id":1}\n'
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(req)
        line = proc.stdout.readline()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append(cpu_ns(proc.pid) / 1e6)  # CPU the server used until then: what a busy machine cannot inflate
        if not line.startswith(b'{"jsonrpc":"2.0","result":"hi"'):
            raise RuntimeError(f"unexpected first reply {line!r}")
        time.sleep(0.2)
        rss.append(status_kib(proc.pid, "VmRSS") / 1024)
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()
    return {
        "startup_ms_median": statistics.median(times),
        "startup_ms_min": min(times),
        "startup_ms_max": max(times),
        "startup_cpu_ms_median": statistics.median(cpu),
        "idle_rss_mib": statistics.median(rss),
    }


# ----------------------------------------------------------------------- main


def main(n: int = N_REQUESTS, rounds: int = ROUNDS) -> dict[str, Any]:
    cmds = servers()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in cmds}
    ratios: list[float] = []
    ratios_chunked: list[float] = []
    for _ in range(rounds):
        for name, cmd in cmds.items():
            results[name].append(load(cmd, n))
        ours = results["sturdyrpc demo"][-1]["req_per_s"]
        ratios.append(ours / results["bare loop"][-1]["req_per_s"])
        ratios_chunked.append(ours / results["bare loop (chunked)"][-1]["req_per_s"])
    st = startup(cmds["sturdyrpc demo"])
    st_bare = startup(cmds["bare loop"], runs=5)  # the floor: Python + msgspec, no asyncio

    def med(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[name]))

    def rng(name: str, key: str, fmt: str) -> str:
        vals = [r[key] for r in results[name]]
        return f"{fmt.format(min(vals))}..{fmt.format(max(vals))}"

    metrics: list[dict[str, Any]] = []
    for name in cmds:
        metrics.append(
            {
                "name": f"{name}: throughput",
                "value": round(med(name, "req_per_s")),
                "unit": "req/s",
                "extra": f"range {rng(name, 'req_per_s', '{:.0f}')}",
                "target": None,
                "ok": None,
            }
        )
        metrics.append(
            {
                "name": f"{name}: latency p50 / p99",
                "value": round(med(name, "p50_us")),
                "unit": "us",
                "extra": f"p99 {med(name, 'p99_us'):.0f} us",
                "target": None,
                "ok": None,
            }
        )
        metrics.append(
            {
                "name": f"{name}: server CPU per request",
                "value": round(med(name, "cpu_us_per_req"), 2),
                "unit": "us",
                "extra": f"range {rng(name, 'cpu_us_per_req', '{:.2f}')}",
                "target": None,
                "ok": None,
            }
        )
        metrics.append(
            {
                "name": f"{name}: server peak RSS",
                "value": round(med(name, "peak_rss_mib"), 1),
                "unit": "MiB",
                "extra": "VmHWM",
                "target": None,
                "ok": None,
            }
        )
    r = statistics.median(ratios)
    cpu_ratios = [b["cpu_us_per_req"] / o["cpu_us_per_req"] for o, b in zip(results["sturdyrpc demo"], results["bare loop"], strict=True)]
    metrics.append(
        {
            "name": "server CPU per request, bare loop / ours",
            "value": round(statistics.median(cpu_ratios), 2),
            "unit": "x",
            "extra": f"per round {', '.join(f'{x:.2f}' for x in cpu_ratios)} (steadier than req/s)",
            "target": None,
            "ok": None,
        }
    )
    metrics.append(
        {
            "name": "throughput ratio ours / bare loop",
            "value": round(r, 2),
            "unit": "x",
            "extra": f"per round {', '.join(f'{x:.2f}' for x in ratios)}",
            "target": f">= {TARGET_RATIO}",
            "ok": r >= TARGET_RATIO,
        }
    )
    metrics.append(
        {
            "name": "throughput ratio ours / bare (chunked)",
            "value": round(statistics.median(ratios_chunked), 2),
            "unit": "x",
            "extra": f"per round {', '.join(f'{x:.2f}' for x in ratios_chunked)}",
            "target": None,
            "ok": None,
        }
    )
    metrics.append(
        {
            "name": "sturdyrpc demo: start-up to first reply",
            "value": round(st["startup_ms_median"], 1),
            "unit": "ms",
            "extra": f"median of {STARTUP_RUNS}, range {st['startup_ms_min']:.0f}..{st['startup_ms_max']:.0f}; CPU {st['startup_cpu_ms_median']:.0f} ms",
            "target": f"< {TARGET_STARTUP_MS:.0f} ms",
            "ok": st["startup_ms_median"] < TARGET_STARTUP_MS,
        }
    )
    metrics.append(
        {
            "name": "bare loop: start-up to first reply",
            "value": round(st_bare["startup_ms_median"], 1),
            "unit": "ms",
            "extra": f"median of 5; CPU {st_bare['startup_cpu_ms_median']:.0f} ms; idle RSS {st_bare['idle_rss_mib']:.1f} MiB",
            "target": None,
            "ok": None,
        }
    )
    metrics.append(
        {
            "name": "sturdyrpc demo: idle RSS",
            "value": round(st["idle_rss_mib"], 1),
            "unit": "MiB",
            "extra": "VmRSS after the first reply",
            "target": f"< {TARGET_IDLE_MIB:.0f} MiB",
            "ok": st["idle_rss_mib"] < TARGET_IDLE_MIB,
        }
    )
    return {
        "title": f"stdio: {n} echo requests, {IN_FLIGHT} in flight, real pipes ({rounds} rounds, median)",
        "metrics": metrics,
        "rounds": results,
        "startup": st,
        "startup_bare": st_bare,
        "commands": cmds,
    }


if __name__ == "__main__":
    res = main(int(sys.argv[1]) if len(sys.argv) > 1 else N_REQUESTS)
    for m in res["metrics"]:
        status = "" if m["ok"] is None else ("PASS" if m["ok"] else "MISS")
        print(f"{m['name']:44s} {m['value']:>10} {m['unit']:6s} {m['extra']:40s} {m['target'] or ''} {status}")
