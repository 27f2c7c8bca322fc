#!/usr/bin/env bash
# uv 0.13.9 (PyPI package `uv`, pinned) for the test of `sturdyrpc install --with PACKAGE`, whose
# entry starts the server with `uv run --with PACKAGE`: into $STURDYRPC_CACHE/uv (the binary in
# $STURDYRPC_CACHE/uv/bin/uv). Idempotent: does nothing when it is there.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${STURDYRPC_CACHE:-$ROOT/.cache}"
DEST="$CACHE/uv"
VERSION="0.13.9"
if [ -x "$DEST/bin/uv" ] && "$DEST/bin/uv" --version 2>/dev/null | grep -q " $VERSION"; then
    exit 0
fi
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
echo "install_uv: pip install uv==$VERSION into $DEST" >&2
rm -rf "$DEST"
"$PY" -m pip install -q --disable-pip-version-check --target "$DEST" "uv==$VERSION" >&2
"$DEST/bin/uv" --version >/dev/null
