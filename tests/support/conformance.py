"""The official MCP conformance suite (@modelcontextprotocol/conformance, on Node 22), installed
by ``scripts/install_conformance.sh`` into ``$STURDYRPC_CACHE/conformance`` (``make peers``):
running it, listing its scenarios, and reading its verdicts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from support.thirdparty import CACHE, PINNED_NODE, missing_peer

BASE = CACHE / "conformance"
SUITE = BASE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def suite() -> list[str]:
    """The command that runs the suite (a failure in CI, a skip elsewhere when it is missing)."""
    if not (PINNED_NODE.exists() and SUITE.exists()):
        missing_peer(f"conformance suite not installed in {BASE} (run scripts/install_conformance.sh)")
    return [str(PINNED_NODE), str(SUITE)]


def env() -> dict[str, str]:
    """The environment the suite runs in: its Node first on PATH, no colours."""
    out = dict(os.environ)
    out["PATH"] = f"{PINNED_NODE.parent}{os.pathsep}{out.get('PATH', '')}"
    out.setdefault("NO_COLOR", "1")
    return out


def scenarios(suite: list[str], kind: str) -> list[str]:
    """The names of the suite's ``kind`` (``server`` or ``client``) scenarios."""
    out = subprocess.run(suite + ["list", f"--{kind}"], capture_output=True, text=True, timeout=60, env=env()).stdout
    names = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("- "):
            names.append(line[2:].split(" [", 1)[0].strip())
    return names


def results(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The checks of every scenario the suite wrote under ``out_dir``, by result folder."""
    found: dict[str, list[dict[str, Any]]] = {}
    for checks in out_dir.glob("*/checks.json"):
        found[checks.parent.name] = json.loads(checks.read_text())
    return found


def verdict(checks: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """How many checks succeeded, and each that failed or warned."""
    ok = sum(1 for c in checks if c.get("status") == "SUCCESS")
    bad = [f"{c.get('id')}: {c.get('status')} {c.get('errorMessage') or ''}" for c in checks if c.get("status") in ("FAILURE", "WARNING")]
    return ok, bad


def assert_server_scenarios_pass(url: str, out_dir: Path, expected: list[str]) -> None:
    """Run every server scenario of the suite against ``url``; each of ``expected`` must have
    a result with at least one success and no failure or warning."""
    r = subprocess.run(suite() + ["server", "--url", url, "--suite", "all", "-o", str(out_dir)],
                       capture_output=True, text=True, timeout=240, env=env())
    found = results(out_dir)
    problems = []
    for name in expected:
        runs = [v for k, v in found.items() if k.startswith(f"server-{name}-")]
        if not runs:
            problems.append(f"{name}: no result")
            continue
        ok, bad = verdict(runs[0])
        if ok == 0 or bad:
            problems.append(f"{name}: {ok} succeeded; {bad}")
    assert not problems, "\n".join(problems) + "\n" + r.stdout[-3000:]
    assert r.returncode == 0, r.stdout[-3000:]
