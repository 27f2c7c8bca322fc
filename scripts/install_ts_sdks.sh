#!/usr/bin/env bash
# Install the official MCP TypeScript SDK clients for the interop tests:
#   @modelcontextprotocol/sdk 1.32.2 (1.x) and @modelcontextprotocol/client 2.4.0 (2.x), pinned: the
#   interop tests record what these exact versions do
# into $STURDYRPC_CACHE/ts-sdks/{v1,v2}. Idempotent: does nothing when both are there.
set -euo pipefail
CACHE="${STURDYRPC_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache}"
DEST="$CACHE/ts-sdks"
if ! command -v npm >/dev/null 2>&1; then
    echo "install_ts_sdks: npm not found; the TypeScript SDK interop tests will be skipped (failed in CI)" >&2
    exit 0
fi
install_one() {  # dir package spec marker
    local dir="$DEST/$1" spec="$2" marker="$DEST/$1/node_modules/$3/package.json"
    if [ -f "$marker" ]; then
        return 0
    fi
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"private": true, "type": "module"}' > "$dir/package.json"
    echo "install_ts_sdks: npm install $spec into $dir" >&2
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$spec" >&2
}
install_one v1 "@modelcontextprotocol/sdk@1.32.2" "@modelcontextprotocol/sdk"
install_one v2 "@modelcontextprotocol/client@2.4.0" "@modelcontextprotocol/client"
