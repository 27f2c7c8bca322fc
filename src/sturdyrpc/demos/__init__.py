"""Demo servers and the conformance-suite client, at the edge of the library.

Nothing in the library imports this package but the ``sturdyrpc demo`` command; each module
imports the library only through its public API.

- :mod:`.jsonrpc`: ``make_demo()``, the plain JSON-RPC demo (``sturdyrpc demo``);
- :mod:`.mcp`: ``make_mcp_demo()``, the MCP demo (``sturdyrpc demo --mcp``);
- :mod:`.mcp_http`: the MCP demo over Streamable HTTP (``sturdyrpc demo --mcp --http``), and a
  stateless one for several workers (``uvicorn --factory sturdyrpc.demos.mcp_http:make_stateless_demo_app``);
- :mod:`.conformance_server`: the conformance fixture server, the MCP demo plus every fixture the
  newest official conformance suite calls (``sturdyrpc demo --conformance [--http HOST:PORT]``);
- :mod:`.http`: serving either demo over HTTP on uvicorn (``sturdyrpc demo --http``);
- :mod:`.conformance_client`: the client the official MCP conformance suite drives
  (``python -m sturdyrpc.demos.conformance_client URL``).
"""
