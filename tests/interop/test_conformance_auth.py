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


#: ``sturdyrpc mcp tools --url`` with the options of each grant without a user, from the
#: scenario's context (credentials, keys and tokens written to files as a user would keep them).
CLI_WRAPPER = r'''
import json, os, pathlib, sys
ctx = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
scenario = os.environ["MCP_CONFORMANCE_SCENARIO"]
here = pathlib.Path(sys.argv[1])
def keep(name, text):
    p = here / name
    p.write_text(text)
    return str(p)
os.environ["CONF_SECRET"] = ctx.get("client_secret", "")
opts = {
    "auth/client-credentials-basic": ["--client-credentials", "--client-id", ctx.get("client_id", ""), "--client-secret-env", "CONF_SECRET"],
    "auth/client-credentials-jwt": ["--client-credentials", "--client-id", ctx.get("client_id", ""),
                                    "--private-key", keep("key.pem", ctx.get("private_key_pem", ""))],
    "auth/wif-jwt-bearer": ["--assertion-file", keep("workload.jwt", ctx.get("valid_jwt", "")), "--client-id", ctx.get("client_id", "")],
    "auth/enterprise-managed-authorization": [
        "--idp-token-endpoint", ctx.get("idp_token_endpoint", ""), "--id-token-file", keep("id.jwt", ctx.get("idp_id_token", "")),
        "--idp-client-id", ctx.get("idp_client_id", ""), "--client-id", ctx.get("client_id", ""), "--client-secret-env", "CONF_SECRET"],
}[scenario]
os.execv(sys.executable, [sys.executable, "-m", "sturdyrpc", "mcp", "tools", "--no-token-store", "--url", sys.argv[-1], *opts])
'''

CLI_SCENARIOS = ["auth/client-credentials-basic", "auth/client-credentials-jwt", "auth/wif-jwt-bearer",
                 "auth/enterprise-managed-authorization"]


@pytest.mark.parametrize("scenario", CLI_SCENARIOS)
def test_cli_grants_without_a_user(scenario: str, tmp_path: Path) -> None:
    wrapper = tmp_path / "cli.py"
    wrapper.write_text(CLI_WRAPPER)
    out = tmp_path / "out"
    command = f"{sys.executable} {wrapper} {tmp_path}"
    r = subprocess.run(
        suite("next") + ["client", "--command", command, "--scenario", scenario, "-o", str(out), "--timeout", "30000"],
        capture_output=True, text=True, timeout=120, env=env(),
    )
    checks = _checks(out)
    ok, bad = verdict(checks)
    assert ok > 0 and not bad, f"{ok} succeeded; {bad}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    # the CLI got through: its tools/list answered (the suite logs its exchanges), with a token the grant obtained
    assert "Sent 200 response for POST /mcp (method: tools/list)" in r.stdout + r.stderr, r.stderr[-3000:]
    assert any(c.get("id") == "token-request" for c in checks), checks
    assert r.returncode == 0, r.stdout[-3000:]
