"""The official MCP Python SDK's client, with the OpenTelemetry SDK configured globally, calling
tests/servers/otel_stdio_server.py once; prints its finished spans as JSON lines on stdout (for
tests/interop/test_otel.py: its CLIENT span must be the parent of our SERVER span). argv: python, mode."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


async def main() -> None:
    server = StdioServerParameters(command=sys.executable, args=[str(Path(__file__).with_name("otel_stdio_server.py"))],
                                    env=dict(os.environ))
    async with Client(server, mode=sys.argv[1], read_timeout_seconds=20) as c:
        await c.call_tool("echo", {"text": "hi"})


asyncio.run(main())
for span in exporter.get_finished_spans():
    print(json.dumps(json.loads(span.to_json())))
