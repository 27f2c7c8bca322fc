"""The official Python SDK's server (the demo's four tools, plus test_reconnection) over Streamable HTTP on uvicorn.

Run: ``python tests/servers/mcp_py_sdk_http_server.py PORT [--json] [--stateless]`` (binds 127.0.0.1, path /mcp).
Used by the interop tests (our client against it) and by bench/bench_http.py (the comparison server).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvicorn  # noqa: E402
from mcp_py_sdk_server import server  # noqa: E402


def main() -> None:
    port = int(sys.argv[1])
    app = server.streamable_http_app(
        json_response="--json" in sys.argv,
        stateless_http="--stateless" in sys.argv,
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
