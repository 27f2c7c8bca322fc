"""MCP ``tools/call echo`` over Streamable HTTP: our server against the official Python SDK's, same run.

Both servers run on uvicorn with one worker, on 127.0.0.1, as subprocesses:

- ours: ``sturdyrpc demo --mcp --http`` (sessions, SSE responses: the defaults);
- theirs: ``tests/mcp_py_sdk_http_server.py`` (the SDK's ``MCPServer`` with the same ``echo``
  tool, ``streamable_http_app()`` defaults: sessions, SSE responses).

A load generator (a separate process speaking raw HTTP/1.1 over keep-alive connections, so that
it costs far less than either server) opens ``CLIENTS`` (64) MCP sessions (initialize +
initialized), then each client loops ``tools/call echo`` for ``SECONDS`` after a warm-up.
Measured: throughput (calls/s), latency p50/p99 as the client sees it, and the server's peak
RSS (``VmHWM``). Servers are run alternately ``ROUNDS`` times; the median round is reported and
the throughput ratio is taken within each round.

Target (issue 6): ours / SDK >= 10x.

Run alone: ``.venv/bin/python bench/bench_http.py [seconds]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLIENTS = 64
SECONDS = 4.0
WARMUP_S = 1.0
ROUNDS = 3
TARGET_RATIO = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def servers(port: int) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "sturdyrpc": [py, "-m", "sturdyrpc", "demo", "--mcp", "--http", f"127.0.0.1:{port}"],
        "python-sdk": [py, str(ROOT / "tests" / "mcp_py_sdk_http_server.py"), str(port)],
    }


def peak_rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError("server did not start")


# ------------------------------------------------------------------ the load generator (own process)


class Conn:
    """One keep-alive HTTP/1.1 connection with just enough parsing for these servers' replies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: bytes) -> None:
        self.r, self.w, self.host = reader, writer, host

    async def post(self, path: bytes, body: bytes, headers: dict[bytes, bytes]) -> tuple[int, dict[bytes, bytes], bytes]:
        head = [b"POST " + path + b" HTTP/1.1", b"host: " + self.host, b"content-type: application/json",
                b"accept: application/json, text/event-stream", b"content-length: " + str(len(body)).encode()]
        head += [k + b": " + v for k, v in headers.items()]
        self.w.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        status_line = await self.r.readline()
        status = int(status_line.split(b" ", 2)[1])
        hdrs: dict[bytes, bytes] = {}
        while True:
            line = await self.r.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.partition(b":")
            hdrs[k.strip().lower()] = v.strip()
        if b"content-length" in hdrs:
            n = int(hdrs[b"content-length"])
            data = await self.r.readexactly(n) if n else b""
        elif hdrs.get(b"transfer-encoding", b"").lower() == b"chunked":
            parts = []
            while True:
                size = int((await self.r.readline()).split(b";")[0], 16)
                if size == 0:
                    await self.r.readline()
                    break
                parts.append(await self.r.readexactly(size))
                await self.r.readexactly(2)
            data = b"".join(parts)
        else:
            data = b""
        return status, hdrs, data


def _last_json(data: bytes, ctype: bytes) -> Any:
    if ctype.startswith(b"text/event-stream"):
        msgs = [json.loads(line[5:]) for line in data.split(b"\n") if line.startswith(b"data:") and line[5:].strip()]
        return msgs[-1]
    return json.loads(data)


async def _client(port: int, stop_at: float, warm_until: float, lat: list[float], counts: list[int]) -> None:
    # counts: [calls after the warm-up, all calls, sessions]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    c = Conn(reader, writer, f"127.0.0.1:{port}".encode())
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}).encode()
    st, h, data = await c.post(b"/mcp", init, {})
    assert st == 200, (st, data[:200])
    sid = h[b"mcp-session-id"]
    hdrs = {b"mcp-session-id": sid, b"mcp-protocol-version": b"2025-11-25"}
    st, _, _ = await c.post(b"/mcp", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', hdrs)
    assert st == 202, st
    counts[2] += 1
    i = 0
    while True:
        now = time.perf_counter()
        if now >= stop_at:
            break
        i += 1
        body = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}' % i
        t0 = time.perf_counter()
        st, h, data = await c.post(b"/mcp", body, hdrs)
        t1 = time.perf_counter()
        if st != 200:
            raise RuntimeError(f"HTTP {st}: {data[:200]!r}")
        reply = _last_json(data, h.get(b"content-type", b""))
        if reply.get("id") != i or "result" not in reply:
            raise RuntimeError(f"bad reply {reply}")
        counts[1] += 1
        if t0 >= warm_until:
            lat.append(t1 - t0)
            counts[0] += 1
    writer.close()


async def _load(port: int, seconds: float, clients: int) -> dict[str, Any]:
    start = time.perf_counter()
    warm_until = start + WARMUP_S + 0.5  # sessions are set up during the first half second
    stop_at = warm_until + seconds
    lat: list[float] = []
    counts = [0, 0, 0]
    await asyncio.gather(*(_client(port, stop_at, warm_until, lat, counts) for _ in range(clients)))
    lat.sort()
    return {
        "calls": counts[0],
        "all_calls": counts[1],
        "sessions": counts[2],
        "req_per_s": counts[0] / seconds,
        "p50_ms": lat[len(lat) // 2] * 1000 if lat else float("nan"),
        "p99_ms": lat[int(len(lat) * 0.99)] * 1000 if lat else float("nan"),
    }


def loadgen_main(port: int, seconds: float, clients: int) -> None:
    print(json.dumps(asyncio.run(_load(port, seconds, clients))))


# ---------------------------------------------------------------------------------------- driver


def run_one(cmd_for: Any, name: str, seconds: float) -> dict[str, Any]:
    port = free_port()
    cmd = cmd_for(port)[name]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        wait_port(port, proc)
        cpu0 = cpu_seconds(proc.pid)
        gen = subprocess.run([sys.executable, __file__, "--loadgen", str(port), str(seconds), str(CLIENTS)],
                             capture_output=True, text=True, timeout=seconds + 120)
        if gen.returncode != 0:
            raise RuntimeError(f"load generator failed against {name}: {gen.stderr[-2000:]}")
        res: dict[str, Any] = json.loads(gen.stdout.strip().splitlines()[-1])
        res["peak_rss_mib"] = peak_rss_mib(proc.pid)
        # session set-up (2 exchanges each) is small next to the calls; it is counted as calls here
        res["cpu_us_per_call"] = (cpu_seconds(proc.pid) - cpu0) / max(res["all_calls"] + 2 * res["sessions"], 1) * 1e6
        return res
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def main(seconds: float = SECONDS, rounds: int = ROUNDS) -> dict[str, Any]:
    names = ["sturdyrpc", "python-sdk"]
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    ratios: list[float] = []
    for _ in range(rounds):
        for n in names:
            results[n].append(run_one(servers, n, seconds))
        ratios.append(results["sturdyrpc"][-1]["req_per_s"] / max(results["python-sdk"][-1]["req_per_s"], 1e-9))

    def med(n: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[n]))

    metrics: list[dict[str, Any]] = []
    for n in names:
        vals = [r["req_per_s"] for r in results[n]]
        metrics.append({"name": f"{n}: throughput", "value": round(med(n, "req_per_s")), "unit": "calls/s",
                        "extra": f"range {min(vals):.0f}..{max(vals):.0f}", "target": None, "ok": None})
        metrics.append({"name": f"{n}: latency p50 / p99", "value": round(med(n, "p50_ms"), 2), "unit": "ms",
                        "extra": f"p99 {med(n, 'p99_ms'):.2f} ms", "target": None, "ok": None})
        metrics.append({"name": f"{n}: server CPU per call", "value": round(med(n, "cpu_us_per_call")), "unit": "us",
                        "extra": "user+system, all threads", "target": None, "ok": None})
        metrics.append({"name": f"{n}: server peak RSS", "value": round(med(n, "peak_rss_mib"), 1), "unit": "MiB",
                        "extra": "VmHWM", "target": None, "ok": None})
    cpu_ratio = med("python-sdk", "cpu_us_per_call") / max(med("sturdyrpc", "cpu_us_per_call"), 1e-9)
    metrics.append({"name": "server CPU per call ratio python-sdk / sturdyrpc", "value": round(cpu_ratio, 1), "unit": "x",
                    "extra": "robust against a busy machine", "target": None, "ok": None})
    r = statistics.median(ratios)
    metrics.append({"name": "throughput ratio sturdyrpc / python-sdk", "value": round(r, 1), "unit": "x",
                    "extra": f"per round {', '.join(f'{x:.1f}' for x in ratios)}", "target": f">= {TARGET_RATIO:.0f}",
                    "ok": r >= TARGET_RATIO})
    return {
        "title": f"Streamable HTTP: tools/call echo, {CLIENTS} concurrent sessions, uvicorn 1 worker, "
                 f"{seconds:.0f} s per run ({rounds} rounds, median)",
        "metrics": metrics,
        "rounds": results,
        "commands": servers(0),
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--loadgen":
        loadgen_main(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    out = main(float(sys.argv[1]) if len(sys.argv) > 1 else SECONDS)
    for m in out["metrics"]:
        status = "" if m["ok"] is None else ("PASS" if m["ok"] else "MISS")
        print(f"{m['name']:<45} {m['value']:>10} {m['unit']:<8} {m['extra']} {status}")
