"""A stdio JSON-RPC server whose traffic carries secrets, for the trace redaction tests.

Every request is answered with ``{"echo": <its params>, "access_token": <new random value>,
"usage": {"total_tokens": 12}}``, preceded by a debugging line on stdout that is not JSON and
names an API key. Its command-line arguments are ignored (the tests pass secrets there).
"""

from __future__ import annotations

import json
import secrets
import sys

for raw in sys.stdin:
    try:
        msg = json.loads(raw)
    except ValueError:
        continue
    if type(msg) is dict and "id" in msg and "method" in msg:
        sys.stdout.write("debug: api_key=sk-live-from-stdout connecting\n")
        result = {"echo": msg.get("params"), "access_token": secrets.token_hex(8), "usage": {"total_tokens": 12}}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
        sys.stdout.flush()
