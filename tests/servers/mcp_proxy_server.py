"""``sturdyrpc run tests/servers/mcp_proxy_server.py:proxy``: a proxy of the server that
``PROXY_TARGET`` names (a URL, or a JSON list: a stdio command line)."""

from __future__ import annotations

import json
import os

from sturdyrpc.mcp import create_proxy

_target = os.environ["PROXY_TARGET"]
proxy = create_proxy(json.loads(_target) if _target.startswith("[") else _target, name="test-proxy")
