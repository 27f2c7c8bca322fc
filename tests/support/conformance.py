"""The official MCP conformance suite (@modelcontextprotocol/conformance, on Node 22), installed
by ``scripts/install_conformance.sh`` (``make peers``): the pinned release into
``$STURDYRPC_CACHE/conformance``, the newest one (its version named in that script only) into
``$STURDYRPC_CACHE/conformance-next``: running either, listing its scenarios, reading its verdicts."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from support.thirdparty import CACHE, PINNED_NODE, missing_peer

BASE = CACHE / "conformance"
#: Where the newest release of the suite is installed.
NEXT_BASE = CACHE / "conformance-next"
_ENTRY = ("node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
SUITE = BASE.joinpath(*_ENTRY)
NEXT_SUITE = NEXT_BASE.joinpath(*_ENTRY)


def suite(which: str = "pinned") -> list[str]:
    """The command that runs the suite, ``"pinned"`` (0.1.16) or ``"next"`` (the newest release);
    a failure in CI, a skip elsewhere when it is missing."""
    base, entry = (BASE, SUITE) if which == "pinned" else (NEXT_BASE, NEXT_SUITE)
    if not (PINNED_NODE.exists() and entry.exists()):
        missing_peer(f"conformance suite not installed in {base} (run scripts/install_conformance.sh)")
    return [str(PINNED_NODE), str(entry)]


def suite_version(which: str) -> str:
    """The version of the installed suite ``which`` (as its package.json says)."""
    entry = SUITE if which == "pinned" else NEXT_SUITE
    return str(json.loads((entry.parent.parent / "package.json").read_text())["version"])


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


def run_server_scenarios(url: str, out_dir: Path, which: str = "pinned") -> tuple[subprocess.CompletedProcess[str], dict[str, list[dict[str, Any]]]]:
    """Run every server scenario (``--suite all``) of suite ``which`` against ``url``: the run, and
    the checks of each scenario by name."""
    r = subprocess.run(suite(which) + ["server", "--url", url, "--suite", "all", "-o", str(out_dir)],
                       capture_output=True, text=True, timeout=400, env=env())
    by_name: dict[str, list[dict[str, Any]]] = {}
    for folder, checks in results(out_dir).items():
        # folders are named server-<scenario>-<ISO time>: the scenario is what precedes the time
        m = re.match(r"server-(.+)-\d{4}-\d{2}-\d{2}T", folder)
        by_name[m.group(1) if m else folder] = checks
    return r, by_name


def assert_server_scenarios_pass(url: str, out_dir: Path, expected: list[str], which: str = "pinned",
                                 exempt: frozenset[str] = frozenset()) -> dict[str, list[dict[str, Any]]]:
    """Run every server scenario of suite ``which`` against ``url``; each of ``expected`` but
    ``exempt`` must have a result with at least one success and no failure or warning. Returns
    the checks by scenario (the caller looks at the exempt ones)."""
    r, found = run_server_scenarios(url, out_dir, which)
    problems = []
    for name in expected:
        if name in exempt:
            continue
        if name not in found:
            problems.append(f"{name}: no result")
            continue
        ok, bad = verdict(found[name])
        if ok == 0 or bad:
            problems.append(f"{name}: {ok} succeeded; {bad}")
    assert not problems, "\n".join(problems) + "\n" + r.stdout[-3000:]
    if not exempt:
        assert r.returncode == 0, r.stdout[-3000:]
    return found
