#!/usr/bin/env bash
# Install the TypeScript "everything" server, @modelcontextprotocol/server-everything 2026.8.31 (npm;
# stdio and streamableHttp modes), that `sturdyrpc guard` is tested in front of, into
# $STURDYRPC_CACHE/servers/everything. Pinned: the tests record what this exact version does.
# (FastMCP, the other third-party server of those tests, is scripts/install_fastmcp.sh's.)
# Idempotent: does nothing when it is there.
set -euo pipefail
CACHE="${STURDYRPC_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache}"
VERSION=2026.8.31
DEST="$CACHE/servers/everything"
PKG="$DEST/node_modules/@modelcontextprotocol/server-everything/package.json"
if [ -f "$PKG" ] && grep -q "\"version\": \"$VERSION\"" "$PKG"; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "install_everything: npm not found; the tests in front of server-everything will be skipped (failed in CI)" >&2
    exit 0
fi
mkdir -p "$DEST"
[ -f "$DEST/package.json" ] || echo '{"private": true}' > "$DEST/package.json"
echo "install_everything: npm install @modelcontextprotocol/server-everything@$VERSION into $DEST" >&2
npm install --prefix "$DEST" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/server-everything@$VERSION" >&2
