"""A stand-in OpenTelemetry collector: OTLP over HTTP (`POST /v1/traces`, protobuf), decoded with
the official `opentelemetry-proto` messages into plain spans a test can read.

`async with OtlpReceiver() as receiver:` serves on `receiver.url`; `receiver.spans` holds every
span received, in arrival order, and `receiver.posts` how many export requests came.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {1: "internal", 2: "server", 3: "client"}


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids as hex as W3C headers write them."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, int]]  # (name, time in ns)
    event_attributes: list[tuple[str, dict[str, Any]]]  # (name, attributes)
    start_ns: int
    end_ns: int
    error: bool
    service: str


@dataclass
class OtlpReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    posts: int = 0
    _server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the receiver is not started"
        return str(self._server.make_url("")).rstrip("/")

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReceivedSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r} in {[s.name for s in self.spans]}"
        return found[0]

    async def _traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(await request.read())
        self.posts += 1
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        name=s.name, kind=KINDS.get(s.kind, str(s.kind)), trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(), parent_id=s.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        events=[(e.name, e.time_unix_nano) for e in s.events],
                        event_attributes=[(e.name, {a.key: _value(a.value) for a in e.attributes})
                                          for e in s.events],
                        start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                        error=s.status.code == 2, service=str(resource.get("service.name")),
                    ))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def __aenter__(self) -> OtlpReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._server = TestServer(app)
        await self._server.start_server()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._server is not None:
            await self._server.close()
