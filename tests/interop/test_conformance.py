"""The official MCP conformance suite (@modelcontextprotocol/conformance, on Node 22) against our
Streamable HTTP server (``sturdyrpc demo --mcp --http``) and our HTTP client.

Installed by ``scripts/install_conformance.sh`` into ``$STURDYRPC_CACHE/conformance`` (``make peers``).
Missing: a failure in CI, a skip elsewhere. Every scenario must pass with at least one SUCCESS
check and no FAILURE or WARNING, so that nothing passes vacuously.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.conformance import assert_server_scenarios_pass, env, results, scenarios, suite, verdict
from support.http import demo_http_cmd, free_port, server_process

pytestmark = pytest.mark.timeout(280)

#: Client scenarios that need no OAuth (all ``auth/*`` ones do).
CLIENT_SCENARIOS = ["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"]


def test_all_server_scenarios(tmp_path: Path) -> None:
    expected = scenarios(suite(), "server")
    assert len(expected) >= 30, expected
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port):
        assert_server_scenarios_pass(f"http://127.0.0.1:{port}/mcp", tmp_path, expected)


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_client_scenario(scenario: str, tmp_path: Path) -> None:
    command_line = suite()
    assert scenario in scenarios(command_line, "client")
    command = f"{sys.executable} -m sturdyrpc.demos.conformance_client"
    r = subprocess.run(
        command_line + ["client", "--command", command, "--scenario", scenario, "-o", str(tmp_path), "--timeout", "30000"],
        capture_output=True, text=True, timeout=120, env=env(),
    )
    found = results(tmp_path)
    assert found, r.stdout[-3000:] + r.stderr[-2000:]
    checks = next(iter(found.values()))
    ok, bad = verdict(checks)
    assert ok > 0 and not bad, f"{ok} succeeded; {bad}\n{r.stdout[-3000:]}"
    assert r.returncode == 0, r.stdout[-3000:]
