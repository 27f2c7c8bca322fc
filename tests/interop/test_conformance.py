"""The official MCP conformance suite (@modelcontextprotocol/conformance, on Node 22) against our
Streamable HTTP server and our HTTP client: the pinned release (0.1.16) against the MCP demo
(``sturdyrpc demo --mcp --http``) and the conformance fixture server (``sturdyrpc demo
--conformance --http``), the newest release (``--suite all``: the 2026-07-28 scenarios and the
extensions) against the fixture server.

Installed by ``scripts/install_conformance.sh`` into ``$STURDYRPC_CACHE/conformance`` and
``$STURDYRPC_CACHE/conformance-next`` (``make peers``). Missing: a failure in CI, a skip
elsewhere. Every scenario must pass with at least one SUCCESS check and no FAILURE or WARNING,
so that nothing passes vacuously; the few the newest suite cannot pass yet (:data:`NOT_YET`)
are held to exactly the state written there, so that a change either way fails the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.conformance import assert_server_scenarios_pass, env, results, scenarios, suite, verdict
from support.http import demo_http_cmd, free_port, server_process

pytestmark = pytest.mark.timeout(280)

#: Client scenarios that need no OAuth (all ``auth/*`` ones do).
CLIENT_SCENARIOS = ["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"]


#: Server scenarios of the newest suite that cannot pass yet, and why; each must stay exactly as
#: described (``expect``: the ids of the checks that do not succeed, and their status).
NOT_YET: dict[str, dict[str, object]] = {
    # the suite itself skips it (its harness awaits a rewrite for the subscriptions/listen stream)
    "tasks-status-notifications": {"expect": {"tasks-status-notifications": "SKIPPED"}, "successes": 0},
}

#: (suite, server, fewest scenarios the suite must list): the pinned suite against the plain MCP
#: demo and the fixture server, the newest suite against the fixture server.
RUNS = [("pinned", "mcp", 30), ("pinned", "conformance", 30), ("next", "conformance", 60)]


@pytest.mark.parametrize(("which", "server", "fewest"), RUNS, ids=[f"{w}-{s}" for w, s, _ in RUNS])
def test_all_server_scenarios(which: str, server: str, fewest: int, tmp_path: Path) -> None:
    expected = scenarios(suite(which), "server")
    assert len(expected) >= fewest, expected
    exempt = frozenset(NOT_YET) if which == "next" else frozenset()
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True, conformance=server == "conformance"), port):
        found = assert_server_scenarios_pass(f"http://127.0.0.1:{port}/mcp", tmp_path, expected, which, exempt)
    for name in exempt:
        assert name in found, f"{name}: no result"
        checks = found[name]
        ok = sum(1 for c in checks if c.get("status") == "SUCCESS")
        not_ok = {str(c.get("id")): str(c.get("status")) for c in checks if c.get("status") not in ("SUCCESS", "INFO")}
        assert (not_ok, ok) == (NOT_YET[name]["expect"], NOT_YET[name]["successes"]), (name, checks)


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


#: Every client scenario the newest suite lists (``conformance list --client``).
NEXT_CLIENT_SCENARIOS = [
    "initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry", "request-metadata",
    "auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2", "auth/metadata-var3", "auth/basic-cimd",
    "auth/scope-from-www-authenticate", "auth/scope-from-scopes-supported", "auth/scope-omitted-when-undefined",
    "auth/scope-step-up", "auth/scope-retry-limit", "auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none", "auth/pre-registration", "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback", "auth/resource-mismatch", "auth/offline-access-scope",
    "auth/offline-access-not-supported", "auth/authorization-server-migration", "auth/iss-supported",
    "auth/iss-not-advertised", "auth/iss-supported-missing", "auth/iss-wrong-issuer", "auth/iss-unexpected",
    "auth/iss-normalized", "auth/metadata-issuer-mismatch", "auth/client-credentials-jwt", "auth/client-credentials-basic",
    "auth/enterprise-managed-authorization", "auth/dpop", "auth/dpop-nonce", "auth/wif-jwt-bearer",
    "sep-2322-client-request-state", "http-standard-headers", "http-custom-headers", "http-invalid-tool-headers",
    "json-schema-ref-no-deref", "json-schema-2020-12-preservation", "sep-2640-client-no-prefetch",
    "sep-2640-client-verify-digest", "sep-2640-client-verify-size", "sep-2640-client-verify-frontmatter",
]

#: Client scenarios of the newest suite our client cannot pass yet, and why. Each is held to that
#: state: the grant scenarios must still fail (when one passes, move it out of here), every
#: check of the skills ones must still be skipped.
NEXT_CLIENT_NOT_YET: dict[str, str] = {}


def test_the_newest_suite_lists_exactly_these_client_scenarios() -> None:
    assert scenarios(suite("next"), "client") == NEXT_CLIENT_SCENARIOS


@pytest.mark.parametrize("scenario", NEXT_CLIENT_SCENARIOS)
def test_newest_client_scenario(scenario: str, tmp_path: Path) -> None:
    command = f"{sys.executable} -m sturdyrpc.demos.conformance_client"
    r = subprocess.run(
        suite("next") + ["client", "--command", command, "--scenario", scenario, "-o", str(tmp_path), "--timeout", "30000"],
        capture_output=True, text=True, timeout=120, env=env(),
    )
    found = list(tmp_path.rglob("checks.json"))  # auth/x results are in auth/x-<time>/
    assert len(found) == 1, r.stdout[-3000:] + r.stderr[-2000:]
    checks = json.loads(found[0].read_text())
    ok, bad = verdict(checks)
    state = NEXT_CLIENT_NOT_YET.get(scenario)
    if state == "fails":
        assert bad, f"{scenario} passes now: take it out of NEXT_CLIENT_NOT_YET"
    elif state == "skipped":
        assert checks and all(c.get("status") == "SKIPPED" for c in checks), checks
    else:
        assert ok > 0 and not bad, f"{ok} succeeded; {bad}\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
        assert r.returncode == 0, r.stdout[-3000:]


#: The fixtures the newest suite's server scenarios call by name (beyond the MCP demo's).
NEWEST_FIXTURES = [
    "test_input_required_result_elicitation", "test_input_required_result_sampling", "test_input_required_result_list_roots",
    "test_input_required_result_request_state", "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round", "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities", "greet", "slow_compute", "failing_job", "protocol_error_job",
    "confirm_delete", "multi_input", "test_tool_with_task", "test_missing_capability", "test_streaming_elicitation",
    "test_logging_tool", "test_trigger_tool_change", "test_trigger_prompt_change", "test_custom_headers",
]


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_fixture_server_over_stdio(protocol: str) -> None:
    """``sturdyrpc demo --conformance`` (stdio) has every fixture, the plain ``demo --mcp`` none of them."""
    import asyncio

    from sturdyrpc.mcp.client import connect

    async def main() -> None:
        async with connect([sys.executable, "-m", "sturdyrpc", "demo", "--conformance"], protocol) as client:
            names = {t["name"] for t in await client.list_tools()}
            assert set(NEWEST_FIXTURES) <= names, set(NEWEST_FIXTURES) - names
            assert (await client.call_tool("greet", {"name": "stdio"}))["content"][0]["text"] == "Hello, stdio!"
            prompts = {p["name"] for p in await client.list_prompts()}
            assert "test_input_required_result_prompt" in prompts
        async with connect([sys.executable, "-m", "sturdyrpc", "demo", "--mcp"], protocol) as client:
            assert not set(NEWEST_FIXTURES) & {t["name"] for t in await client.list_tools()}

    asyncio.run(main())
