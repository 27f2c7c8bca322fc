"""The OpenTelemetry SDK for the telemetry tests: an in-memory span exporter and metric reader
private to one test, and what must never reach telemetry. Import it after
``pytest.importorskip("opentelemetry.sdk")``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

SECRET = "hunter2-s3cr3t"  # in exception texts and arguments: must appear in no span or metric


class Telemetry:
    """An SDK tracer provider and meter provider, private to one test (the globals stay unset)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    @property
    def providers(self) -> dict[str, Any]:
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self, name: str, kind: SpanKind, **attrs: Any) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name and s.kind == kind
                 and all((s.attributes or {}).get(k) == v for k, v in attrs.items())]
        assert len(found) == 1, f"{len(found)} spans {name!r} {kind} {attrs}: {[(s.name, s.kind) for s in self.spans()]}"
        return found[0]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        for rm in data.resource_metrics if data is not None else []:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        out.extend(m.data.data_points)
        return out


def no_secret_in(spans: list[Any]) -> None:
    text = json.dumps([json.loads(s.to_json()) if isinstance(s, ReadableSpan) else s for s in spans])
    assert SECRET not in text
    assert "Traceback" not in text
    for s in spans:
        if isinstance(s, ReadableSpan):
            assert not s.events, "no exception events (they would hold the text and the traceback)"


def sha(session_id: str) -> str:
    """The ``mcp.session.id`` attribute of a session: a hash, never the id itself."""
    return hashlib.sha256(session_id.encode()).hexdigest()[:32]
