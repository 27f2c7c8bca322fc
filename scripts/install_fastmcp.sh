#!/usr/bin/env bash
# FastMCP 4.1.6 (PyPI package `fastmcp`, pinned) for the proxy tests, whose upstream is a FastMCP
# server: a venv of its own in $STURDYRPC_CACHE/servers/fastmcp-venv (its python runs
# tests/servers/fastmcp_upstream_server.py). Idempotent: does nothing when it is there.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${STURDYRPC_CACHE:-$ROOT/.cache}"
DEST="$CACHE/servers/fastmcp-venv"
VERSION="4.1.6"
if [ -x "$DEST/bin/python" ] && "$DEST/bin/python" -c "import fastmcp, sys; sys.exit(fastmcp.__version__ != '$VERSION')" 2>/dev/null; then
    exit 0
fi
PY="$(command -v python3)"
echo "install_fastmcp: fastmcp==$VERSION into $DEST" >&2
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
"$PY" -m venv "$DEST"
"$DEST/bin/python" -m pip install -q --disable-pip-version-check "fastmcp==$VERSION" >&2
"$DEST/bin/python" -c "import fastmcp" >/dev/null
