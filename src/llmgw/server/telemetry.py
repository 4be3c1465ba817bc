"""Traces through OpenTelemetry: the `core.tracing` seam exported by the SDK's batch span
processor and OTLP/HTTP exporter, made only when `[telemetry] otlp_endpoint` is set (the server
uses the no-op tracer otherwise and never imports this module).

Spans are recorded here as plain objects and handed to the batch processor as the SDK's own
`ReadableSpan` when they end, rather than made by the SDK's tracer: its spans validate and lock
on every attribute and cost about 20 times as much on the request path (a request's spans:
~230 µs through the SDK's tracer, ~13 µs here, on the bench machine). What the exporter sends is
the same: trace and span ids from the SDK's generator, W3C trace context, the SDK's ratio
sampling rule, resource and instrumentation scope. Encoding and sending happen on the
processor's own thread, in batches.

The provider is this server's own, never OpenTelemetry's global one: two servers in one process
(the tests) keep their spans apart, and no library instrumented on its own sends spans to it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from importlib import metadata

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from llmgw.core.settings import TelemetrySettings
from llmgw.core.tracing import Attributes, Kind, NoopSpan, Span, Value

_KINDS = {Kind.INTERNAL: SpanKind.INTERNAL, Kind.SERVER: SpanKind.SERVER, Kind.CLIENT: SpanKind.CLIENT}
# How long one export may take, retries included: a collector that does not answer costs spans,
# never requests, and holds a clean shutdown at most about this long.
EXPORT_TIMEOUT_S = 5.0
# W3C trace context, version 00 (a later version's header is read as far as 00 defines it).
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_TRACE_ID_LOW = (1 << 64) - 1
_MAX_TRACESTATE = 512


def _version() -> str:
    try:
        return metadata.version("llmgw")
    except metadata.PackageNotFoundError:
        return "0"


def parent_of(carrier: Mapping[str, str]) -> tuple[SpanContext, str] | None:
    """The caller's span named by a valid `traceparent`, and its `tracestate` as it came."""
    header = carrier.get("traceparent")
    found = _TRACEPARENT.match(header.strip().lower()) if header else None
    if found is None or found[1] == "ff" or (found[1] == "00" and found[5]):
        return None
    trace_id, span_id = int(found[2], 16), int(found[3], 16)
    if not trace_id or not span_id:
        return None
    state = (carrier.get("tracestate") or "")[:_MAX_TRACESTATE]
    trace_state = TraceState.from_header([state]) if state else None
    return SpanContext(trace_id, span_id, True, TraceFlags(int(found[4], 16) & 1), trace_state), state


class _Recorder:
    """What every span of one tracer shares: ids, the processor, resource and scope."""

    def __init__(self, processor: BatchSpanProcessor, resource: Resource) -> None:
        self.processor = processor
        self.resource = resource
        self.scope = InstrumentationScope("llmgw", _version())
        self.ids = RandomIdGenerator()


class OtelSpan:
    """One sampled span, exported as a `ReadableSpan` when it ends."""

    __slots__ = ("_rec", "_name", "_kind", "_context", "_parent", "_attributes", "_events",
                 "_status", "_start", "_ended", "_state")
    recording = True

    def __init__(self, rec: _Recorder, name: str, kind: Kind, context: SpanContext,
                 parent: SpanContext | None, attributes: Attributes | None, state: str) -> None:
        self._rec = rec
        self._name = name
        self._kind = kind
        self._context = context
        self._parent = parent
        self._attributes: dict[str, Value] = dict(attributes) if attributes else {}
        self._events: list[Event] = []
        self._status: Status | None = None
        self._start = time.time_ns()
        self._ended = False
        self._state = state  # the incoming tracestate, passed on as it came

    @property
    def context(self) -> SpanContext:
        return self._context

    def set(self, key: str, value: Value) -> None:
        self._attributes[key] = value

    def update(self, attributes: Attributes) -> None:
        self._attributes.update(attributes)

    def rename(self, name: str) -> None:
        self._name = name

    def event(self, name: str, attributes: Attributes | None = None, at_ns: int | None = None) -> None:
        self._events.append(Event(name, attributes, at_ns or time.time_ns()))

    def fail(self, error_type: str, message: str = "") -> None:
        self._attributes["error.type"] = error_type
        self._status = Status(StatusCode.ERROR, message or None)

    def child(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None) -> Span:
        context = SpanContext(self._context.trace_id, self._rec.ids.generate_span_id(), False,
                              _SAMPLED, self._context.trace_state)
        return OtelSpan(self._rec, name, kind, context, self._context, attributes, self._state)

    def inject(self, headers: dict[str, str]) -> None:
        headers["traceparent"] = f"00-{self._context.trace_id:032x}-{self._context.span_id:016x}-01"
        if self._state:
            headers["tracestate"] = self._state

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._rec.processor.on_end(ReadableSpan(
            name=self._name, context=self._context, parent=self._parent,
            resource=self._rec.resource, attributes=self._attributes, events=self._events,
            kind=_KINDS[self._kind], status=self._status or Status(StatusCode.UNSET),
            start_time=self._start, end_time=time.time_ns(), instrumentation_scope=self._rec.scope,
        ))


class _Unsampled(NoopSpan):
    """A trace not kept: nothing recorded, but the caller's trace (and its decision) still
    passes on to upstreams and judges."""

    __slots__ = ("_header", "_state")

    def __init__(self, trace_id: int, span_id: int, state: str) -> None:
        self._header = f"00-{trace_id:032x}-{span_id:016x}-00"
        self._state = state

    def inject(self, headers: dict[str, str]) -> None:
        headers["traceparent"] = self._header
        if self._state:
            headers["tracestate"] = self._state

    def end(self) -> None:
        pass


class OtelTracer:
    """Root spans, sampled as the SDK's `ParentBased(TraceIdRatioBased)` would, exported in
    batches over OTLP/HTTP."""

    enabled = True

    def __init__(self, settings: TelemetrySettings, exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({"service.name": settings.service_name,
                                    "service.version": _version()})
        self._processor = BatchSpanProcessor(
            exporter or OTLPSpanExporter(endpoint=settings.traces_url, timeout=EXPORT_TIMEOUT_S))
        self._rec = _Recorder(self._processor, resource)
        self._bound = TraceIdRatioBased(settings.sample_ratio).bound

    def root(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None,
             carrier: Mapping[str, str] | None = None) -> Span:
        ids = self._rec.ids
        parent = parent_of(carrier) if carrier is not None else None
        if parent is not None:
            caller, state = parent
            if not caller.trace_flags.sampled:  # the caller decided: not kept
                return _Unsampled(caller.trace_id, caller.span_id, state)
            context = SpanContext(caller.trace_id, ids.generate_span_id(), False, _SAMPLED,
                                  caller.trace_state)
            return OtelSpan(self._rec, name, kind, context, caller, attributes, state)
        trace_id, span_id = ids.generate_trace_id(), ids.generate_span_id()
        if trace_id & _TRACE_ID_LOW >= self._bound:
            return _Unsampled(trace_id, span_id, "")
        context = SpanContext(trace_id, span_id, False, _SAMPLED)
        return OtelSpan(self._rec, name, kind, context, None, attributes, "")

    def close(self) -> None:
        """Export what is buffered (blocking, up to about the export timeout) and stop."""
        self._processor.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it untyped
