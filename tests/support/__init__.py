"""Helpers shared by the test modules, one module per job (test modules never import each other):

- ``process``: a server subprocess driven over real pipes (stdio);
- ``http``: free ports, HTTP server subprocesses, uvicorn in a thread or in the loop, MCP sessions;
- ``mcp``: the official MCP schemas, wire recording and validation, an in-process MCP wire;
- ``peer``: async tests, and a raw wire end to script the other side of a peer;
- ``redis``: a real redis-server (and its per-module fixture);
- ``workers``: MCP demo workers sharing a redis-server, and a client that spreads requests;
- ``auth``, ``oauth``: an identity provider, an authorization server and a protected MCP server;
- ``thirdparty``: where the third-party peers are installed, and what a missing one means;
- ``conformance``: the official MCP conformance suite;
- ``sdk``: sessions of the official Python SDK client, the checks several modules run on them;
- ``otel``: the OpenTelemetry SDK's in-memory exporter and reader;
- ``check``: reading ``sturdyrpc check`` reports.

The scripts the tests start as subprocesses (or serve in process) live in :data:`SERVERS`.
"""

from __future__ import annotations

from pathlib import Path

#: The tests' folder, the repository's root, the server scripts and the data files.
TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
SERVERS = TESTS / "servers"
DATA = TESTS / "data"
