"""The official MCP conformance suite's client authorization scenarios (``auth/*``) against our
OAuth client, driven through ``python -m sturdyrpc.demos.conformance_client`` as in
test_conformance.py (the suite's helpers: tests/support/conformance.py). Every scenario that is
neither draft nor an extension must pass with at least one SUCCESS check and no FAILURE or WARNING.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.conformance import env, suite, verdict

pytestmark = pytest.mark.timeout(280)

#: What the suite (0.1.16) lists as neither draft nor extension, 2025-03-26 back-compat included.
SCENARIOS = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
]


def _auth_scenarios(command_line: list[str]) -> list[str]:
    out = subprocess.run(command_line + ["list", "--client"], capture_output=True, text=True, timeout=60, env=env()).stdout
    names = []
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("- auth/"):
            continue
        name, _, tags = line[2:].partition(" [")
        if "draft" in tags or "extension" in tags:
            continue
        names.append(name.strip())
    return names


def _checks(out_dir: Path) -> list[dict[str, Any]]:
    found = list(out_dir.rglob("checks.json"))  # auth/x results are in auth/x-<time>/
    assert len(found) == 1, found
    result: list[dict[str, Any]] = json.loads(found[0].read_text())
    return result


def test_the_suite_lists_exactly_these_auth_scenarios() -> None:
    assert sorted(_auth_scenarios(suite())) == sorted(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_auth_scenario(scenario: str, tmp_path: Path) -> None:
    command = f"{sys.executable} -m sturdyrpc.demos.conformance_client"
    r = subprocess.run(
        suite() + ["client", "--command", command, "--scenario", scenario, "-o", str(tmp_path), "--timeout", "30000"],
        capture_output=True, text=True, timeout=120, env=env(),
    )
    checks = _checks(tmp_path)
    ok, bad = verdict(checks)
    assert ok > 0 and not bad, f"{ok} succeeded; {bad}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    assert r.returncode == 0, r.stdout[-3000:]
