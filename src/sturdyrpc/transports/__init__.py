"""Transports: thin I/O layers that move frames between the outside world and the core.

- ``fd``: raw file-descriptor reading and writing on the loop (under ``stdio``);
- ``stdio``: the one stdio transport (:class:`~sturdyrpc.transports.stdio.StdioTransport`, this
  process's stdin/stdout, framing by argument, fed to the peer as chunks arrive) and the plain
  stdio server on it (``serve_stdio``/``run_stdio``);
- ``streams``: asyncio streams (a subprocess's pipes, TCP, Unix sockets), same framers;
- ``memory``: in-memory pairs and fault injection for tests;
- ``asgi``, ``http_layer``, ``http``, ``http_protocol``, ``serve_http``: HTTP (the security
  settings and refusals, the one HTTP layer both HTTP apps are built from, plain JSON-RPC over
  HTTP, uvicorn's bounded protocol, serving).
"""
