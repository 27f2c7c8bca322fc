"""HTTP servers under a native load generator: sturdyrpc against a bare ASGI app and the official SDK.

The load comes from ``wrk`` (C, one thread, ``CLIENTS`` = 64 keep-alive connections), driven by a
generated Lua script that gives every request a fresh JSON-RPC id and, for MCP sessions, the
session headers (one of ``CLIENTS`` sessions set up beforehand, round robin). The Lua
``response`` hook counts every reply that is not 200 with a ``"result"`` in it: a bench of
errors reports them instead of a throughput. wrk's own CPU time is measured too and reported
beside the server's, to show that the generator is not what limits the figures.

Servers, all on uvicorn, one worker, 127.0.0.1, started once and measured in interleaved rounds
(each round measures every server once, so they share the machine's state of the moment):

- ``bare``: ``bench/http_servers.py bare`` -- an ASGI app that reads the body, msgspec-decodes it
  and encodes a tools/call-shaped result, on the same uvicorn settings as ours: the limit;
- ``bare-2026`` (informative): the same bare app fed the 2026-07-28 request (three more headers,
  the ``_meta`` envelope): what uvicorn's share of that request costs, so that
  ``mcp-2026 / bare-2026`` is the cost of our own code on it. Targets stay against ``bare``;
- ``plain``: ``sturdyrpc demo --http`` (plain JSON-RPC, method ``echo``);
- ``mcp-sse``: ``sturdyrpc demo --mcp --http``, 2025-11-25 sessions, ``tools/call echo``
  answered as an SSE stream (the default);
- ``mcp-json``: the same demo with ``json_response=True`` (``bench/http_servers.py mcp-json``);
- ``mcp-2026``: ``sturdyrpc demo --mcp --http``, 2026-07-28 (no session; the header rules);
- ``python-sdk``: ``tests/servers/mcp_py_sdk_http_server.py`` (the official SDK, same echo tool,
  2025-11-25 sessions, its SSE default), when the ``mcp`` package is installed.

Per server: requests/s, latency p50/p99 (wrk's), server CPU per request (user+system of the
server process from /proc, all threads, over the measured run), peak RSS (VmHWM), and the
throughput ratio to ``bare`` taken within each round (median over rounds). With two or more
CPUs the servers run pinned to one CPU and wrk to another, so that the two never take turns on
one core. Every server is single-threaded and CPU-bound here, so on a machine shared with other
work the CPU ratio (``bare``'s CPU per request / the server's, per round, median) is the steadier
figure: it is what the throughput ratio would be with a core to itself. Targets are judged on
the throughput ratio, as asked; both are printed.

``wrk`` is looked up on PATH; missing, it is installed with ``apt-get install -y wrk`` when this
runs as root with apt-get available; otherwise the bench says so and measures nothing.

Run alone: ``.venv/bin/python bench/bench_http.py [seconds] [rounds] [--against DIR]``. With
``--against DIR`` (another checkout of sturdyrpc, e.g. a ``git worktree`` of an older commit) each
of our servers runs a second time from ``DIR/src`` in the same rounds (``plain@against`` and so
on), and the bench prints each one's server CPU per request against its twin: a before/after
measured on the same machine in the same minutes.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLIENTS = 64
SECONDS = 4.0
WARMUP_S = 1.0
ROUNDS = 5
SESSION_VERSION = "2025-11-25"
MODERN = "2026-07-28"

#: Targets of issue 10: throughput ratio to the bare ASGI app, same run.
RATIO_TARGETS = {"plain": 0.85, "mcp-sse": 0.70, "mcp-2026": 0.75}
SDK_TARGET = 15.0  # mcp-sse / python-sdk
RSS_TARGET_MIB = 60.0

NAMES = ["bare", "bare-2026", "plain", "mcp-sse", "mcp-json", "mcp-2026", "python-sdk"]
LABELS = {
    "bare": "bare ASGI app (decode, encode a tools/call result)",
    "bare-2026": f"the same bare app fed the {MODERN} request (informative)",
    "plain": "sturdyrpc demo --http (plain JSON-RPC echo)",
    "mcp-sse": f"sturdyrpc demo --mcp --http, {SESSION_VERSION} session, SSE reply",
    "mcp-json": f"same, json_response=True, {SESSION_VERSION} session",
    "mcp-2026": f"sturdyrpc demo --mcp --http, {MODERN}",
    "python-sdk": f"official Python SDK server, {SESSION_VERSION} session, SSE reply",
}


# ------------------------------------------------------------------------------ finding wrk


def find_wrk() -> tuple[str | None, str]:
    """(path to wrk or None, what was done to get it)."""
    found = shutil.which("wrk")
    if found:
        return found, f"wrk found at {found}"
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench_http: wrk not found; installing it with apt-get install -y wrk", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        r = subprocess.run(["apt-get", "install", "-y", "wrk"], capture_output=True, text=True, env=env)
        if r.returncode != 0:  # the package lists may be missing on a fresh machine
            subprocess.run(["apt-get", "update"], capture_output=True, env=env)
            r = subprocess.run(["apt-get", "install", "-y", "wrk"], capture_output=True, text=True, env=env)
        found = shutil.which("wrk")
        if found:
            return found, f"wrk installed with apt-get ({found})"
        return None, f"wrk is not installed and apt-get could not install it: {r.stderr.strip()[-300:]}"
    return None, "wrk is not installed (Debian/Ubuntu: apt-get install wrk; macOS: brew install wrk); not measured"


# ------------------------------------------------------------------------------ servers


#: Suffix of a server run from the ``--against`` checkout (same command, its ``src`` first on the path).
AGAINST = "@against"


def kind_of(name: str) -> str:
    """The server kind of ``name`` (``plain@against`` is a ``plain``)."""
    return name.removesuffix(AGAINST)


def server_command(name: str, port: int) -> list[str] | None:
    name = kind_of(name)
    py = sys.executable
    addr = f"127.0.0.1:{port}"
    if name in ("bare", "bare-2026"):
        return [py, str(HERE / "http_servers.py"), "bare", str(port)]
    if name == "plain":
        return [py, "-m", "sturdyrpc", "demo", "--http", addr]
    if name in ("mcp-sse", "mcp-2026"):
        return [py, "-m", "sturdyrpc", "demo", "--mcp", "--http", addr]
    if name == "mcp-json":
        return [py, str(HERE / "http_servers.py"), "mcp-json", str(port)]
    if name == "python-sdk":
        try:
            import mcp  # noqa: F401
        except ImportError:
            return None
        return [py, str(ROOT / "tests" / "servers" / "mcp_py_sdk_http_server.py"), str(port)]
    raise ValueError(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/mcp", body, {"content-type": "application/json",
                                          "accept": "application/json, text/event-stream", **headers})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def open_sessions(port: int, n: int) -> list[str]:
    """``n`` initialized 2025-11-25 sessions (initialize + notifications/initialized each)."""
    out = []
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": SESSION_VERSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}).encode()
    for _ in range(n):
        st, h, data = _post(port, init, {})
        if st != 200 or "mcp-session-id" not in h:
            raise RuntimeError(f"initialize failed: {st} {data[:200]!r}")
        sid = h["mcp-session-id"]
        st, _, data = _post(port, b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                            {"mcp-session-id": sid, "mcp-protocol-version": SESSION_VERSION})
        if st != 202:
            raise RuntimeError(f"notifications/initialized: {st} {data[:200]!r}")
        out.append(sid)
    return out


class Server:
    def __init__(self, name: str, against: str | None = None) -> None:
        self.name = name
        self.port = free_port()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if name.endswith(AGAINST):
            assert against is not None
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(against) / "src"), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(server_command(name, self.port) or [], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                                     preexec_fn=pin(SERVER_CPU))
        self.script = ""
        try:
            wait_port(self.port, self.proc)
            self.sessions = open_sessions(self.port, CLIENTS) if kind_of(name) in ("mcp-sse", "mcp-json", "python-sdk") else []
            self.script = self._write_script()
        except BaseException:
            self.stop()  # never leave a server behind
            raise

    def _write_script(self) -> str:
        lua = lua_script(kind_of(self.name), self.sessions)
        fd, path = tempfile.mkstemp(prefix=f"bench_http_{kind_of(self.name)}_", suffix=".lua")
        with os.fdopen(fd, "w") as f:
            f.write(lua)
        return path

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.script:
            os.unlink(self.script)


# ------------------------------------------------------------------------------ the wrk script

#: The ``tools/call`` of the MCP session benchmarks: ``echo``, answered on its own turn.
ECHO = '"name":"echo","arguments":{"text":"hello"}'


def lua_script(name: str, sessions: list[str], tool: str = ECHO) -> str:
    """The wrk script for server ``name``: a fresh id per request, session headers round robin;
    ``tool``: the ``tools/call`` params of a session request (name and arguments, JSON)."""
    if name == "plain":
        path, body = "/", '{"jsonrpc":"2.0","id":%d,"method":"echo","params":{"value":"hello"}}'
        headers = {"Content-Type": "application/json"}
    elif name in ("mcp-2026", "bare-2026"):
        path = "/mcp" if name == "mcp-2026" else "/"
        body = ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},'
                '"_meta":{"io.modelcontextprotocol/protocolVersion":"' + MODERN + '",'
                '"io.modelcontextprotocol/clientCapabilities":{}}}}')
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    else:
        path = "/" if name == "bare" else "/mcp"
        body = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{' + tool + '}}'
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if sessions:
            headers["MCP-Protocol-Version"] = SESSION_VERSION

    def lua_table(h: dict[str, str]) -> str:
        return "{" + ", ".join(f'["{k}"] = "{v}"' for k, v in h.items()) + "}"

    return f"""
local sessions = {{{", ".join(f'"{s}"' for s in sessions)}}}
local heads = {{}}
if #sessions == 0 then
  heads[1] = {lua_table(headers)}
else
  for i, sid in ipairs(sessions) do
    local h = {lua_table(headers)}
    h["Mcp-Session-Id"] = sid
    heads[i] = h
  end
end
local nheads = #heads
local body = '{body}'
local n = 0
bad = 0
local threads = {{}}

function setup(thread)
  table.insert(threads, thread)
end

function request()
  n = n + 1
  return wrk.format("POST", "{path}", heads[(n % nheads) + 1], string.format(body, n))
end

function response(status, headers, resp)
  if status ~= 200 or not string.find(resp, '"result"', 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + t:get("bad") end
  io.write(string.format('BENCH {{"requests": %d, "duration_us": %d, "bad": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p99_us": %d}}\\n',
    summary.requests, summary.duration, b,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50.0), latency:percentile(99.0)))
end
"""


def pin(cpu: int) -> Any:
    """A ``preexec_fn`` pinning the child (and its threads) to ``cpu``, when there are two CPUs to split."""
    if (os.cpu_count() or 1) < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


SERVER_CPU, WRK_CPU = 1, 0


def run_wrk(wrk: str, srv: Server, seconds: float) -> dict[str, Any]:
    url = f"http://127.0.0.1:{srv.port}"
    cmd = [wrk, "-t1", f"-c{CLIENTS}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", srv.script, url]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = cpu_seconds(srv.proc.pid)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, preexec_fn=pin(WRK_CPU))
    cpu1 = cpu_seconds(srv.proc.pid)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in r.stdout.splitlines() if x.startswith("BENCH ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed against {srv.name}: {r.stdout[-800:]} {r.stderr[-800:]}")
    res: dict[str, Any] = json.loads(line[6:])
    n = max(res["requests"], 1)
    res["req_per_s"] = res["requests"] / (res["duration_us"] / 1e6)
    res["server_cpu_us"] = (cpu1 - cpu0) / n * 1e6
    res["wrk_cpu_us"] = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / n * 1e6
    res["peak_rss_mib"] = peak_rss_mib(srv.proc.pid)
    return res


# ------------------------------------------------------------------------------ driver


def main(seconds: float = SECONDS, rounds: int = ROUNDS, against: str | None = None) -> dict[str, Any]:
    wrk, how = find_wrk()
    if wrk is None:
        print(f"bench_http: {how}", file=sys.stderr)
        return {"title": f"HTTP servers under wrk: NOT MEASURED ({how})", "metrics": [], "wrk": how}
    names = [n for n in NAMES if server_command(n, 0) is not None]
    if against is not None:
        if not (Path(against) / "src" / "sturdyrpc").is_dir():
            raise SystemExit(f"bench_http: --against {against}: no src/sturdyrpc there")
        names += [n + AGAINST for n in ("plain", "mcp-sse", "mcp-json", "mcp-2026")]
    servers: dict[str, Server] = {}
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    cpu_ratios: dict[str, list[float]] = {n: [] for n in names}
    try:
        for n in names:
            servers[n] = Server(n, against)
        for n in names:  # warm-up: imports, caches, the allocator's arenas
            run_wrk(wrk, servers[n], WARMUP_S)
        for _ in range(rounds):
            for n in names:
                results[n].append(run_wrk(wrk, servers[n], seconds))
            for n in names:
                ratios[n].append(results[n][-1]["req_per_s"] / max(results["bare"][-1]["req_per_s"], 1e-9))
                cpu_ratios[n].append(results["bare"][-1]["server_cpu_us"] / max(results[n][-1]["server_cpu_us"], 1e-9))
    finally:
        for s in servers.values():
            s.stop()

    def med(n: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results[n]))

    metrics: list[dict[str, Any]] = []
    table: list[dict[str, Any]] = []
    for n in names:
        bad = sum(r["bad"] + r["socket_errors"] for r in results[n])
        ratio = float(statistics.median(ratios[n]))
        cpu_ratio = float(statistics.median(cpu_ratios[n]))
        rps = [r["req_per_s"] for r in results[n]]
        label = LABELS[kind_of(n)] + (f" (from {against})" if n.endswith(AGAINST) else "")
        row = {"server": n, "label": label, "req_per_s": round(med(n, "req_per_s")),
               "req_per_s_range": [round(min(rps)), round(max(rps))], "ratio_to_bare": round(ratio, 2), "cpu_ratio_to_bare": round(cpu_ratio, 2),
               "ratio_per_round": [round(x, 2) for x in ratios[n]], "p50_ms": round(med(n, "p50_us") / 1000, 2),
               "p99_ms": round(med(n, "p99_us") / 1000, 2), "server_cpu_us": round(med(n, "server_cpu_us"), 1),
               "wrk_cpu_us": round(med(n, "wrk_cpu_us"), 1), "peak_rss_mib": round(max(r["peak_rss_mib"] for r in results[n]), 1),
               "bad_replies": bad}
        table.append(row)
        target = RATIO_TARGETS.get(n)
        metrics.append({"name": f"{n}: req/s (ratio to bare)", "value": row["req_per_s"], "unit": "req/s",
                        "extra": f"{ratio:.2f}x bare (CPU ratio {cpu_ratio:.2f}); rounds {', '.join(f'{x:.2f}' for x in ratios[n])}"
                                 + (f"; {bad} BAD REPLIES" if bad else ""),
                        "target": None, "ok": None})
        if target is not None:
            metrics.append({"name": f"{n}: ratio to bare", "value": round(ratio, 2), "unit": "x",
                            "extra": f"median of per-round ratios; CPU ratio {cpu_ratio:.2f}", "target": f">= {target}",
                            "ok": ratio >= target and not bad})
        metrics.append({"name": f"{n}: latency p50 / p99", "value": row["p50_ms"], "unit": "ms",
                        "extra": f"p99 {row['p99_ms']:.2f} ms", "target": None, "ok": None})
        metrics.append({"name": f"{n}: server CPU per request", "value": row["server_cpu_us"], "unit": "us",
                        "extra": f"wrk's own: {row['wrk_cpu_us']:.1f} us/req", "target": None, "ok": None})
        rss_target = n in ("mcp-sse", "mcp-json", "mcp-2026", "plain")
        metrics.append({"name": f"{n}: server peak RSS", "value": row["peak_rss_mib"], "unit": "MiB",
                        "extra": f"VmHWM, {CLIENTS} clients", "target": f"< {RSS_TARGET_MIB:.0f}" if rss_target else None,
                        "ok": row["peak_rss_mib"] < RSS_TARGET_MIB if rss_target else None})
    if "python-sdk" in results:
        for ours in ("mcp-sse", "mcp-2026"):
            sdk = [a / max(b, 1e-9) for a, b in zip(ratios[ours], ratios["python-sdk"], strict=True)]
            sdk_cpu = [a / max(b, 1e-9) for a, b in zip(cpu_ratios[ours], cpu_ratios["python-sdk"], strict=True)]
            r = float(statistics.median(sdk))
            metrics.append({"name": f"{ours} / python-sdk throughput", "value": round(r, 1), "unit": "x",
                            "extra": f"CPU ratio {statistics.median(sdk_cpu):.1f}; per round {', '.join(f'{x:.1f}' for x in sdk)}",
                            "target": f">= {SDK_TARGET:.0f}" if ours == "mcp-sse" else None,
                            "ok": r >= SDK_TARGET if ours == "mcp-sse" else None})
    if "bare-2026" in results:
        # The 2026-07-28 request has three more headers (MCP-Protocol-Version, Mcp-Method,
        # Mcp-Name) and a longer body (its _meta) than the bare app's: uvicorn's share of that is
        # in both of these, so this ratio is what the server's own code costs on that request.
        same = [a / max(b, 1e-9) for a, b in zip(ratios["mcp-2026"], ratios["bare-2026"], strict=True)]
        same_cpu = [a / max(b, 1e-9) for a, b in zip(cpu_ratios["mcp-2026"], cpu_ratios["bare-2026"], strict=True)]
        metrics.append({"name": "mcp-2026 / bare-2026 (same request)", "value": round(float(statistics.median(same)), 2),
                        "unit": "x", "extra": f"CPU ratio {statistics.median(same_cpu):.2f}; informative (targets: against bare)",
                        "target": None, "ok": None})
    for n in names:
        if n.endswith(AGAINST):
            ours = kind_of(n)
            per_round = [a["server_cpu_us"] / max(b["server_cpu_us"], 1e-9) for a, b in zip(results[ours], results[n], strict=True)]
            metrics.append({"name": f"{ours}: server CPU / the --against checkout's", "value": round(float(statistics.median(per_round)), 2),
                            "unit": "x", "extra": f"per round {', '.join(f'{x:.2f}' for x in per_round)}; below 1: cheaper than it",
                            "target": None, "ok": None})
    gen_limited = [t["server"] for t in table if t["wrk_cpu_us"] >= t["server_cpu_us"]]
    metrics.append({"name": "wrk CPU below every server's", "value": "yes" if not gen_limited else "NO", "unit": "",
                    "extra": "the generator is not the bottleneck" if not gen_limited else f"not for {', '.join(gen_limited)}",
                    "target": None, "ok": None})
    return {
        "title": f"HTTP under wrk: 1 thread, {CLIENTS} connections, fresh id per request, uvicorn 1 worker, "
                 f"{seconds:.0f} s per run, {rounds} interleaved rounds (median); {how}",
        "metrics": metrics,
        "table": table,
        "rounds": results,
        "commands": {n: server_command(n, 0) for n in names},
    }


def markdown(out: dict[str, Any]) -> str:
    """The performance table of one run (docs/reference/performance.md)."""
    lines = ["| server | req/s | vs bare ASGI: req/s (CPU) | p50 / p99 ms | server CPU µs/req | peak RSS MiB |",
             "|---|---|---|---|---|---|"]
    for t in out.get("table", []):
        lines.append(f"| {t['label']} | {t['req_per_s']:,} | {t['ratio_to_bare']:.2f} ({t['cpu_ratio_to_bare']:.2f}) "
                     f"| {t['p50_ms']:.1f} / {t['p99_ms']:.1f} | {t['server_cpu_us']:.0f} | {t['peak_rss_mib']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    other = None
    if "--against" in args:
        i = args.index("--against")
        other = args[i + 1]
        del args[i:i + 2]
    out = main(float(args[0]) if args else SECONDS, int(args[1]) if len(args) > 1 else ROUNDS, other)
    for m in out["metrics"]:
        status = "" if m["ok"] is None else ("PASS" if m["ok"] else "MISS")
        print(f"{m['name']:<40} {m['value']:>10} {m['unit']:<6} {m['extra']} {status}")
    print()
    print(markdown(out))
