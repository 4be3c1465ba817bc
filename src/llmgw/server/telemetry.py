"""Traces through the OpenTelemetry SDK: the `core.tracing` seam backed by a tracer provider, a
batch span processor and the OTLP/HTTP exporter, made only when `[telemetry] otlp_endpoint` is
set (`tracer` answers the no-op tracer otherwise, and the SDK is never imported).

The provider is this server's own, never OpenTelemetry's global one: two servers in one process
(the tests) keep their spans apart, and no library instrumented on its own sends spans to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llmgw.core.settings import TelemetrySettings
from llmgw.core.tracing import Attributes, Kind, Span, Value

_KINDS = {Kind.INTERNAL: SpanKind.INTERNAL, Kind.SERVER: SpanKind.SERVER, Kind.CLIENT: SpanKind.CLIENT}
_W3C = TraceContextTextMapPropagator()
# How long one export may take: a collector that does not answer costs spans, never requests.
EXPORT_TIMEOUT_S = 10.0


def _version() -> str:
    try:
        return metadata.version("llmgw")
    except metadata.PackageNotFoundError:
        return "0"


class OtelSpan:
    """One OpenTelemetry span behind the seam."""

    __slots__ = ("_span", "_tracer", "_ended")

    def __init__(self, span: trace.Span, tracer: trace.Tracer) -> None:
        self._span = span
        self._tracer = tracer
        self._ended = False

    @property
    def recording(self) -> bool:
        return self._span.is_recording()

    @property
    def context(self) -> trace.SpanContext:
        return self._span.get_span_context()

    def set(self, key: str, value: Value) -> None:
        self._span.set_attribute(key, value)

    def update(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    def event(self, name: str, attributes: Attributes | None = None, at_ns: int | None = None) -> None:
        self._span.add_event(name, attributes, timestamp=at_ns)

    def fail(self, error_type: str, message: str = "") -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, message or None))

    def child(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None) -> Span:
        parent = trace.set_span_in_context(self._span, Context())
        return OtelSpan(self._tracer.start_span(name, parent, _KINDS[kind], attributes), self._tracer)

    def inject(self, headers: dict[str, str]) -> None:
        _W3C.inject(headers, trace.set_span_in_context(self._span, Context()))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()


class OtelTracer:
    """Root spans from this server's own tracer provider, exported in batches over OTLP/HTTP."""

    enabled = True

    def __init__(self, settings: TelemetrySettings, exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({"service.name": settings.service_name,
                                    "service.version": _version()})
        # A caller's sampling decision is followed; new traces keep `sample_ratio` of them.
        sampler = ParentBased(TraceIdRatioBased(settings.sample_ratio))
        self._provider = TracerProvider(sampler=sampler, resource=resource, shutdown_on_exit=False)
        self._provider.add_span_processor(BatchSpanProcessor(
            exporter or OTLPSpanExporter(endpoint=settings.traces_url, timeout=EXPORT_TIMEOUT_S)))
        self._tracer = self._provider.get_tracer("llmgw", _version())

    def root(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None,
             carrier: Mapping[str, str] | None = None) -> Span:
        # An empty context, not OpenTelemetry's current one: a parent comes only from `carrier`.
        parent = _W3C.extract(carrier) if carrier is not None else Context()
        return OtelSpan(self._tracer.start_span(name, parent, _KINDS[kind], attributes), self._tracer)

    def close(self) -> None:
        """Export what is buffered (blocking, up to the export timeout) and stop the exporter."""
        self._provider.shutdown()
