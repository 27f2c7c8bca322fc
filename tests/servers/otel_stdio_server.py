"""An MCP stdio server with the OpenTelemetry SDK configured globally, for tests/interop/test_otel.py.

Each finished span is written as one JSON line (the SDK's own ``to_json``) to the file named by
OTEL_TEST_SPANS, as it ends (SimpleSpanProcessor), so the test reads them after the process exits.
The server is instrumented through the global provider (no provider passed): the path an
application takes after configuring the SDK; with OTEL_AUTO=1 it is not instrumented by hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp.stdio import run_mcp_stdio
from sturdyrpc.otel import instrument_server


class JSONLinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as f:
            for s in spans:
                f.write(json.dumps(json.loads(s.to_json())) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JSONLinesExporter(os.environ["OTEL_TEST_SPANS"])))
trace.set_tracer_provider(provider)

server = MCPServer("otel-stdio", "1.0")


# echo and boom are inline (sync, blocking=False): answered on the reader's turn, their chain (the
# telemetry middleware) started there too.
@server.tool(blocking=False)
def echo(text: str) -> str:
    """Echo the text."""
    return text


@server.tool(blocking=False)
def boom(token: str) -> str:
    """Fail with the token in the exception's text (which must not reach telemetry)."""
    raise RuntimeError(f"database password is {token}")


@server.tool()
async def nested(text: str) -> str:
    """Make a span of its own: it must be the child of this request's server span."""
    with trace.get_tracer("app").start_as_current_span("app work"):
        return text.upper()


# OTEL_AUTO=1: no call at all, the SDK configured before serving is enough (serving turns it on)
if not os.environ.get("OTEL_AUTO") and instrument_server(server) is None:
    raise SystemExit("instrument_server installed nothing although a provider is configured")

if __name__ == "__main__":
    run_mcp_stdio(server)
