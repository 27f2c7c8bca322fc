"""``sturdyrpc check`` on servers built on popular third-party libraries (tests/servers/check_thirdparty/):
what it finds there still holds, as docs/CHECK_FINDINGS.md records it, for the pinned versions."""

from __future__ import annotations

import re
import sys
from importlib import metadata

import pytest
from support import ROOT, SERVERS
from support.check import describe, not_passed

from sturdyrpc.check import Config, run_checks

THIRD = SERVERS / "check_thirdparty"
PY = sys.executable

pytestmark = pytest.mark.timeout(240)

FINDINGS = ROOT / "docs" / "CHECK_FINDINGS.md"

THIRD_PARTY = {
    "jsonrpcserver": ([PY, str(THIRD / "jsonrpcserver_server.py")], {"echo_method": "echo", "slow": "sleep", "leak_probe": "fail", "mcp": False}),
    "json-rpc": ([PY, str(THIRD / "jsonrpc_server.py")], {"echo_method": "echo", "slow": "sleep", "leak_probe": "fail", "mcp": False}),
    "mcp": ([PY, str(THIRD / "mcp_sdk_server.py")], {"slow": "sleep", "leak_probe": "fail", "call_tools": {"*"}}),
}


def documented_findings() -> dict[str, tuple[str, dict[str, str]]]:
    """``{distribution: (version, {check id: status})}`` parsed from the table in docs/CHECK_FINDINGS.md."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for line in FINDINGS.read_text().splitlines():
        m = re.match(r"\|\s*`([\w.-]+)`\s+([\w.]+)\s*\|\s*`(\S+)`\s*\|\s*(FAIL|WARN)\s*\|", line)
        if m:
            dist, version, check_id, status = m.groups()
            out.setdefault(dist, (version, {}))[1][check_id] = status.lower()
    return out


@pytest.mark.parametrize("dist", sorted(THIRD_PARTY))
def test_thirdparty_findings_still_hold(dist: str) -> None:
    documented = documented_findings()
    assert dist in documented, f"{dist} has no rows in {FINDINGS}"
    version, expected = documented[dist]
    assert metadata.version(dist) == version, f"{FINDINGS} documents {dist} {version}; installed is {metadata.version(dist)}: re-run and update"
    cmd, opts = THIRD_PARTY[dist]
    report = run_checks(Config(cmd, **opts))  # type: ignore[arg-type]
    assert not_passed(report) == expected, describe(report)
