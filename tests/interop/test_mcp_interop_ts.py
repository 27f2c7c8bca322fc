"""The official TypeScript SDK clients (npm ``@modelcontextprotocol/sdk`` 1.x and
``@modelcontextprotocol/client`` 2.x, run by Node) against ``sturdyrpc demo --mcp``.

The SDKs are installed by ``scripts/install_ts_sdks.sh`` (``make test`` runs it) into
``$STURDYRPC_CACHE/ts-sdks``. Missing Node or SDKs: skipped locally, a failure in CI.
Every message our server writes is recorded and validated against the official schema.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import SERVERS
from support.mcp import read_lines, recorded_cmd, validate_recording
from support.thirdparty import node, ts_sdk

pytestmark = pytest.mark.timeout(90)

SCRIPT = SERVERS / "ts" / "interop_client.cjs"


@pytest.mark.parametrize("major,mode", [("v1", "legacy"), ("v2", "legacy"), ("v2", "auto")])
def test_ts_sdk_client_against_our_server(tmp_path: Path, major: str, mode: str) -> None:
    exe = node()
    sdk = ts_sdk(major)
    log = tmp_path / "wire"
    p = subprocess.run([exe, str(SCRIPT), str(sdk), major, mode, "--", *recorded_cmd(log)], capture_output=True, text=True, timeout=80)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no report from the node script (rc {p.returncode}); stderr: {p.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert report["ok"], f"{report}\nstderr: {p.stderr[-3000:]}"
    version = report.get("version") or ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert version == ("2026-07-28" if mode == "auto" else version)
    # the wire: three progress notifications sent before the reply, nothing after a cancel
    out = read_lines(Path(str(log) + ".out"))
    progress = [m["params"]["progress"] for m in out if m.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3]
    sent = read_lines(Path(str(log) + ".in"))
    cancelled = {m["params"]["requestId"] for m in sent if isinstance(m, dict) and m.get("method") == "notifications/cancelled"}
    assert cancelled, "the SDK sent no notifications/cancelled"
    answered = {m.get("id") for m in out if "result" in m or "error" in m}
    assert not (cancelled & answered)
    validate_recording(log, version if mode == "auto" else _negotiated(out))


def _negotiated(out: list[dict[str, object]]) -> str:
    for m in out:
        r = m.get("result")
        if isinstance(r, dict) and "protocolVersion" in r:
            return str(r["protocolVersion"])
    raise AssertionError("no initialize result on the wire")
