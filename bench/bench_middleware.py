"""The middleware chain's cost (issue 11): nothing when empty, < 1 us per middleware per call on stdio.

stdio: ``bench/mw_server.py N`` (the plain ``echo`` of bench_stdio, N pass-through middleware;
with ``--mcp`` the inline ``echo`` tool of bench_mcp, under bench_mcp's load generator)
under bench_stdio's load generator, for N = 0, 1 and 9, alternately for ``ROUNDS`` rounds; the
figure is the server's CPU time per request (steadier than req/s on a shared machine), the
median of the rounds. Per middleware = (CPU(9) - CPU(1)) / 8: the cost each middleware adds.
The first middleware also puts a chain around inline handlers (started on the reader's turn:
no task while it does not suspend); that one-time step, CPU(1) - CPU(0), is reported beside it
without a target.

Empty chain: the only thing an empty chain adds to a call is one test of
``Dispatcher.middleware_chain``; it is timed in process against ``handle_sync`` of the same
request (both measured here), and the stdio throughput with N = 0 is reported against the bare
loop of bench_stdio measured in the same run.

Run alone: ``.venv/bin/python bench/bench_middleware.py [n_requests]``.
"""

from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_mcp import load as load_mcp  # noqa: E402
from bench_stdio import load  # noqa: E402

N_REQUESTS = 10_000
ROUNDS = 3
CHAINS = (0, 1, 9)
TARGET_PER_MW_US = 1.0
REQUEST = b'{"jsonrpc":"2.0","method":"echo","params":{"value":"hello"},"id":1}'


def in_process() -> dict[str, float]:
    from mw_server import make

    out: dict[str, float] = {}
    for n in CHAINS:
        d = make(n)
        handle = d.handle_sync
        assert handle(REQUEST) == b'{"jsonrpc":"2.0","result":"hello","id":1}'
        out[f"handle_sync_{n}"] = min(timeit.repeat(lambda h=handle: h(REQUEST), number=20_000, repeat=5)) / 20_000 * 1e6
    d = make(0)
    # the check as the call paths spell it (`if self.middleware_chain:`), less the loop around it
    out["empty_check"] = min(timeit.repeat("if d.middleware_chain: pass", globals={"d": d}, number=1_000_000, repeat=5)) / 1e6 * 1e6
    out["noop_call"] = min(timeit.repeat("pass", number=1_000_000, repeat=5)) / 1e6 * 1e6
    return out


def main(n: int = N_REQUESTS, rounds: int = ROUNDS) -> dict[str, Any]:
    ip = in_process()
    cmds = {k: [sys.executable, str(HERE / "mw_server.py"), str(k)] for k in CHAINS}
    bare = [sys.executable, str(HERE / "bare_server.py")]
    cpu: dict[int, list[float]] = {k: [] for k in CHAINS}
    ratio0: list[float] = []
    for _ in range(rounds):
        base = load(bare, n)
        for k, cmd in cmds.items():
            r = load(cmd, n)
            cpu[k].append(r["cpu_us_per_req"])
            if k == 0:
                ratio0.append(r["req_per_s"] / base["req_per_s"])
    mcp_cmds = {k: [sys.executable, str(HERE / "mw_server.py"), str(k), "--mcp"] for k in CHAINS}
    mcp_cpu: dict[int, list[float]] = {k: [] for k in CHAINS}
    for _ in range(rounds):
        for k, cmd in mcp_cmds.items():
            mcp_cpu[k].append(load_mcp(cmd, n)["cpu_us_per_call"])
    mmed = {k: statistics.median(v) for k, v in mcp_cpu.items()}
    mcp_per_mw = (mmed[9] - mmed[1]) / 8
    med = {k: statistics.median(v) for k, v in cpu.items()}
    per_mw = (med[9] - med[1]) / 8
    per_mw_rounds = [(c9 - c1) / 8 for c1, c9 in zip(cpu[1], cpu[9], strict=True)]
    empty_ns = (ip["empty_check"] - ip["noop_call"]) * 1e3
    ip_per_mw = (ip["handle_sync_9"] - ip["handle_sync_1"]) / 8
    metrics: list[dict[str, Any]] = [
        {"name": "stdio: per middleware per call (server CPU)", "value": round(per_mw, 3), "unit": "us",
         "extra": f"(CPU(9) - CPU(1)) / 8; per round {', '.join(f'{x:.3f}' for x in per_mw_rounds)}",
         "target": f"< {TARGET_PER_MW_US} us", "ok": per_mw < TARGET_PER_MW_US},
        {"name": "MCP stdio tools/call: per middleware per call", "value": round(mcp_per_mw, 3), "unit": "us",
         "extra": f"CPU per call with 0 / 1 / 9: {mmed[0]:.2f} / {mmed[1]:.2f} / {mmed[9]:.2f} us (the early answer starts the chain)",
         "target": f"< {TARGET_PER_MW_US} us", "ok": mcp_per_mw < TARGET_PER_MW_US},
        {"name": "stdio: server CPU per request, chain of 0 / 1 / 9", "value": round(med[0], 2), "unit": "us",
         "extra": f"1: {med[1]:.2f} us, 9: {med[9]:.2f} us", "target": None, "ok": None},
        {"name": "stdio: first middleware (the chain around inline handlers)", "value": round(med[1] - med[0], 2), "unit": "us",
         "extra": "started on the reader's turn: no task unless it suspends", "target": None, "ok": None},
        {"name": "stdio: empty chain, throughput / bare loop", "value": round(statistics.median(ratio0), 2), "unit": "x",
         "extra": f"per round {', '.join(f'{x:.2f}' for x in ratio0)}; compare bench_stdio's demo ratio", "target": None, "ok": None},
        {"name": "empty chain: the one check per call", "value": round(empty_ns, 1), "unit": "ns",
         "extra": f"vs handle_sync {ip['handle_sync_0'] * 1e3:.0f} ns per call ({empty_ns / (ip['handle_sync_0'] * 1e3) * 100:.1f}%)",
         # one attribute test is as close to nothing as Python gets; 3% leaves room for timer noise
         "target": "nothing (< 3% of a call)", "ok": empty_ns < 0.03 * ip["handle_sync_0"] * 1e3},
        {"name": "in process: per middleware (handle_sync, driven)", "value": round(ip_per_mw, 3), "unit": "us",
         "extra": f"0: {ip['handle_sync_0']:.2f} us, 1: {ip['handle_sync_1']:.2f} us, 9: {ip['handle_sync_9']:.2f} us",
         "target": None, "ok": None},
    ]
    return {"title": "middleware chain cost: empty, per middleware (stdio, in process)", "metrics": metrics,
            "cpu_us_per_req": cpu, "mcp_cpu_us_per_call": mcp_cpu, "in_process_us": ip}


if __name__ == "__main__":
    res = main(int(sys.argv[1]) if len(sys.argv) > 1 else N_REQUESTS)
    for m in res["metrics"]:
        print(f"{m['name']:55} {m['value']:>10} {m['unit']:5} {m.get('target') or '':>12} {m['extra']}")
