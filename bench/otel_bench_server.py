"""The MCP demo server over stdio (as ``sturdyrpc demo --mcp``), with or without telemetry.

``OTEL_BENCH_MODE``:

- ``off``: no instrumentation call at all (the baseline);
- ``api``: ``instrument_server(server)`` with the OpenTelemetry API installed and no provider
  configured (it installs nothing; the cost asked to be nil);
- ``sdk``: the SDK configured globally with a BatchSpanProcessor around an exporter that drops
  everything and a meter provider whose reader is never read (the cost of recording itself);
- ``sdk-sampled-off``: as ``sdk`` with the ``always_off`` sampler (spans are not recorded,
  the middleware and the histograms still run);
- ``middleware``: no telemetry, one pass-through middleware (what any middleware costs: the
  chain around the inline tool, started by the early answer).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sturdyrpc.demos.mcp import make_mcp_demo
from sturdyrpc.mcp.stdio import run_mcp_stdio

MODE = os.environ.get("OTEL_BENCH_MODE", "off")


def configure_sdk(sampler: Any = None) -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def main() -> None:
    server = make_mcp_demo()
    if MODE == "middleware":

        @server.middleware
        async def pass_through(ctx: Any, call_next: Any) -> Any:
            return await call_next(ctx)

    elif MODE != "off":
        if MODE == "sdk":
            configure_sdk()
        elif MODE == "sdk-sampled-off":
            from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

            configure_sdk(ALWAYS_OFF)
        from sturdyrpc.otel import instrument_server

        installed = instrument_server(server)
        if (installed is None) != (MODE == "api"):
            raise SystemExit(f"mode {MODE}: instrument_server returned {installed!r}")
    run_mcp_stdio(server)


if __name__ == "__main__":
    main()
