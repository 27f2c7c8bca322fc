#!/usr/bin/env bash
# Run `sturdyrpc check` against the demo servers and show the reports (part of `make demo`).
# Usage: scripts/check_demo.sh [PYTHON]   (default: .venv/bin/python)
# Exit code: non-zero when a MUST-level check fails on either demo server.
set -u
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
REPORTS="${STURDYRPC_CHECK_REPORTS:-.cache/check}"
mkdir -p "$REPORTS"
status=0

echo "== sturdyrpc check -- sturdyrpc demo"
"$PY" -m sturdyrpc check --no-mcp --echo-method echo --slow sleep --leak-probe fail \
    --json "$REPORTS/demo.json" --junit "$REPORTS/demo.xml" -- "$PY" -m sturdyrpc demo || status=1

echo
echo "== sturdyrpc check --mcp -- sturdyrpc demo --mcp"
"$PY" -m sturdyrpc check --mcp --slow slow --leak-probe fail --call-tools echo,add,fail \
    --json "$REPORTS/demo-mcp.json" --junit "$REPORTS/demo-mcp.xml" -- "$PY" -m sturdyrpc demo --mcp || status=1

# The MCP demo speaks both eras: the run above used 2026-07-28 (no handshake); check the
# handshake era's lifecycle (initialize, negotiation, ping, batches) too.
echo
echo "== sturdyrpc check --mcp --protocol 2025-11-25 --area mcp -- sturdyrpc demo --mcp"
"$PY" -m sturdyrpc check --mcp --protocol 2025-11-25 --area mcp --slow slow --leak-probe fail --call-tools echo,add,fail \
    --json "$REPORTS/demo-mcp-2025-11-25.json" -- "$PY" -m sturdyrpc demo --mcp || status=1


# The same MCP demo over Streamable HTTP, checked through --url.
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PY" -m sturdyrpc demo --mcp --http "127.0.0.1:$port" 2>"$REPORTS/demo-mcp-http.stderr" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 100); do
    "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
    sleep 0.1
done
echo
echo "== sturdyrpc check --mcp --url http://127.0.0.1:$port/mcp   (sturdyrpc demo --mcp --http)"
"$PY" -m sturdyrpc check --mcp --slow slow --leak-probe fail --call-tools echo,add,fail \
    --json "$REPORTS/demo-mcp-http.json" --url "http://127.0.0.1:$port/mcp" || status=1
kill $server 2>/dev/null

echo
echo "reports: $REPORTS/demo*.json, $REPORTS/demo*.xml"
exit $status
