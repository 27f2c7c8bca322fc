"""tests/servers/mcp_py_sdk_server.py (the official Python SDK's server) with the OpenTelemetry SDK
configured globally: each finished span is appended as a JSON line to OTEL_TEST_SPANS."""

from __future__ import annotations

import json
import os
import runpy
from collections.abc import Sequence
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class JSONLinesExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(os.environ["OTEL_TEST_SPANS"], "a") as f:
            for s in spans:
                f.write(json.dumps(json.loads(s.to_json())) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JSONLinesExporter()))
trace.set_tracer_provider(provider)
runpy.run_path(str(Path(__file__).with_name("mcp_py_sdk_server.py")), run_name="__main__")
