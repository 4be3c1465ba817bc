"""Traces: a guarded streamed request exported over OTLP/HTTP to a collector (a real aiohttp
server decoding the official protobuf messages), continuing the client's trace and passing it on
to the upstream and the judge; and an install without telemetry, which creates no exporter."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from llmgw.core.guard import Policy, VerdictRecord
from llmgw.core.judges import DEFAULT_JUDGE, KNOWN
from llmgw.core.settings import TelemetrySettings, load
from llmgw.core.tracing import NOOP_TRACER, Kind
from llmgw.gateway.traced import FIRST_TOKEN
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.guard.enforcement import Guard, GuardView
from llmgw.guard.judge_client import JudgeClient, JudgeTarget
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.server.telemetry import OtelTracer
from llmgw.store.store import Store
from tests.fakes.judge import FakeJudge
from tests.fakes.otlp import OtlpReceiver, ReceivedSpan
from tests.fakes.provider import FakeProvider, GatewayRig

# The client's own span: the request continues its trace.
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
PROMPT = "tell me about the sea"
ANSWER_PIECE = "sea"  # a word of the fake provider's answer


@dataclass
class Traced:
    rig: GatewayRig
    provider: FakeProvider
    judge: FakeJudge
    receiver: OtlpReceiver
    tracer: OtelTracer
    view: list[GuardView]

    async def stream(self) -> bytes:
        """A streamed chat completion under the client's trace; the whole body read."""
        async with self.rig.openai() as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": PROMPT}], stream=True,
                max_tokens=16, extra_headers={"traceparent": TRACEPARENT})
            body = b""
            async for chunk in raw.http_response.aiter_bytes():
                body += chunk
            return body

    async def exported(self) -> list[ReceivedSpan]:
        """Every span, once the server is stopped and the tracer has flushed."""
        await self.rig.close()
        await asyncio.to_thread(self.tracer.close)
        return self.receiver.spans


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[Traced]:
    async with OtlpReceiver() as receiver:
        provider = await FakeProvider().start()
        judge = await FakeJudge().start()
        judge_client = JudgeClient(lambda _name: [JudgeTarget(KNOWN[DEFAULT_JUDGE], judge.url)])
        await judge_client.start()
        view = [GuardView(enabled=True, policies=(
            Policy(name="both", judges=["j"], input=True, output=True, stream_window_chars=10_000),
        ))]
        records: list[VerdictRecord] = []
        guard = Guard(judge_client, lambda: view[0], records.append, lambda: datetime.now(UTC),
                      time.monotonic)
        tracer = OtelTracer(TelemetrySettings(otlp_endpoint=receiver.url, service_name="llmgw-test"))
        store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
        rig = await GatewayRig(provider, store, guard=guard, tracer=tracer).start()
        try:
            yield Traced(rig, provider, judge, receiver, tracer, view)
        finally:
            await rig.close()
            tracer.close()
            await judge_client.close()
            await judge.close()
            await provider.close()
            store.close()


def _children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_id == parent.span_id]


async def test_a_guarded_stream_is_one_trace_continuing_the_clients(traced: Traced) -> None:
    body = await traced.stream()
    assert b"[DONE]" in body
    spans = await traced.exported()

    root = traced.receiver.one("chat m")
    # The client's trace goes on: its span is the request's parent.
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}
    assert root.parent_id == CLIENT_SPAN and root.kind == "server"
    assert root.service == "llmgw-test"
    a = root.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "m"
    assert a["gen_ai.request.max_tokens"] == 16
    assert a["gen_ai.usage.input_tokens"] == 9 and a["gen_ai.usage.output_tokens"] == 5
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["server.address"] == "127.0.0.1" and a["http.response.status_code"] == 200
    assert not root.error
    # The first token's moment is an event inside the request.
    [(name, at)] = root.events
    assert name == FIRST_TOKEN and root.start_ns < at < root.end_ns

    # Under the request: a judgment each way and the one upstream attempt.
    judgments = [s for s in _children(spans, root) if s.name == "judge j"]
    assert sorted(s.attributes["llmgw.guard.direction"] for s in judgments) == ["input", "output"]
    for j in judgments:
        assert j.kind == "client" and j.attributes["llmgw.guard.outcome"] == "safe"
        assert j.attributes["llmgw.guard.policy"] == "both"
        assert j.attributes["llmgw.guard.budget_ms"] == 5000
        assert root.start_ns <= j.start_ns and j.end_ns <= root.end_ns
    [upstream] = [s for s in _children(spans, root) if s.kind == "client" and s not in judgments]
    assert upstream.attributes["llmgw.upstream"] == "replica-1"
    assert upstream.attributes["http.response.status_code"] == 200
    assert upstream.attributes["server.address"] == "127.0.0.1"
    assert upstream.attributes["llmgw.retry"] == 0
    input_judgment = next(j for j in judgments if j.attributes["llmgw.guard.direction"] == "input")
    assert input_judgment.end_ns <= upstream.start_ns  # judged before it was forwarded
    assert len(spans) == 4

    # The trace went on to the upstream and the judge, each as the child span that called it.
    assert traced.provider.traceparents == [f"00-{CLIENT_TRACE}-{upstream.span_id}-01"]
    assert sorted(traced.judge.traceparents) == sorted(
        f"00-{CLIENT_TRACE}-{j.span_id}-01" for j in judgments)

    # log_prompts is off: neither the prompt nor the answer is anywhere in a span.
    everything = repr([(s.name, s.attributes, s.events) for s in spans])
    assert PROMPT not in everything and ANSWER_PIECE not in everything


async def test_with_log_prompts_on_the_judged_text_is_in_its_judgment(traced: Traced) -> None:
    traced.view[0] = GuardView(enabled=True, log_prompts=True, policies=traced.view[0].policies)
    await traced.stream()
    spans = await traced.exported()

    texts = {s.attributes["llmgw.guard.direction"]: s.attributes["llmgw.guard.text"]
             for s in spans if s.name == "judge j"}
    assert PROMPT in texts["input"] and PROMPT in texts["output"]
    assert ANSWER_PIECE in texts["output"]
    root = traced.receiver.one("chat m")
    assert PROMPT not in repr(root.attributes)  # the request's own span stays free of text


async def test_a_blocked_request_is_a_failed_span_with_the_judgment_that_blocked_it(
    traced: Traced,
) -> None:
    traced.judge.unsafe("Violent")
    async with traced.rig.openai() as client:
        with pytest.raises(Exception, match="blocked by guard policy"):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": PROMPT}], stream=True,
                extra_headers={"traceparent": TRACEPARENT})
    spans = await traced.exported()

    root = traced.receiver.one("chat m")
    assert root.error and root.attributes["error.type"] == "content_filter"
    assert root.attributes["http.response.status_code"] == 400
    [judgment] = _children(spans, root)
    assert judgment.attributes["llmgw.guard.outcome"] == "unsafe"
    assert judgment.attributes["llmgw.guard.categories"] == ["Violent"]
    assert traced.provider.requests == []  # and nothing went upstream


async def test_with_telemetry_off_no_exporter_or_sdk_provider_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Any] = []
    original = OTLPSpanExporter.__init__

    def counting(self: OTLPSpanExporter, *args: Any, **kwargs: Any) -> None:
        made.append(kwargs.get("endpoint"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(OTLPSpanExporter, "__init__", counting)
    init(tmp_path / "data", guard=False)
    settings = load(tmp_path / "data")
    assert not settings.telemetry.enabled  # the default

    off = Server(tmp_path / "data", settings, Store.open(settings.database_url(tmp_path / "data")))
    off.build_app()
    assert off.tracer is NOOP_TRACER and made == []

    on_settings = settings.model_copy(update={"telemetry": TelemetrySettings(
        otlp_endpoint="http://collector.invalid:4318")})
    on = Server(tmp_path / "data", on_settings, off.store)
    on.build_app()
    assert made == ["http://collector.invalid:4318/v1/traces"]
    on.tracer.close()
    off.store.close()


async def test_a_trace_the_client_did_not_sample_is_not_exported_but_still_passed_on(
    traced: Traced,
) -> None:
    unsampled = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"
    async with traced.rig.openai() as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": PROMPT}],
            extra_headers={"traceparent": unsampled, "tracestate": "vendor=1"})
    assert await traced.exported() == []
    # The upstream and the judges see the caller's trace and its decision, not a new trace.
    assert traced.provider.traceparents == [unsampled]
    assert set(traced.judge.traceparents) == {unsampled}


@pytest.mark.parametrize("header", [
    "",
    "not a traceparent",
    f"00-{'0' * 32}-{CLIENT_SPAN}-01",  # an all-zero trace id
    f"00-{CLIENT_TRACE}-{'0' * 16}-01",  # an all-zero span id
    f"ff-{CLIENT_TRACE}-{CLIENT_SPAN}-01",  # the version W3C forbids
    f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01-extra",  # version 00 has nothing after the flags
])
async def test_a_broken_traceparent_starts_a_new_trace(traced: Traced, header: str) -> None:
    async with traced.rig.openai() as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": PROMPT}],
            extra_headers={"traceparent": header})
    await traced.exported()
    root = traced.receiver.one("chat m")
    assert root.parent_id == "" and root.trace_id != CLIENT_TRACE and root.trace_id != "0" * 32
    assert traced.provider.traceparents[0].startswith(f"00-{root.trace_id}-")


async def test_sample_ratio_zero_keeps_no_new_trace(tmp_path: Path) -> None:
    async with OtlpReceiver() as receiver:
        tracer = OtelTracer(TelemetrySettings(otlp_endpoint=receiver.url, sample_ratio=0.0))
        root = tracer.root("chat", Kind.SERVER)
        child = root.child("upstream", Kind.CLIENT)
        headers: dict[str, str] = {}
        child.inject(headers)
        child.end()
        root.end()
        await asyncio.to_thread(tracer.close)
        assert receiver.spans == [] and not root.recording
        assert headers["traceparent"].endswith("-00")  # the decision travels with the trace


async def test_a_routes_fallback_is_an_event_and_each_target_an_attempt(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on: the first target is down
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    provider = await FakeProvider().start()
    async with OtlpReceiver() as receiver:
        result = init(tmp_path / "data", guard=False)
        settings = load(tmp_path / "data").model_copy(update={
            "embedded_node": False, "telemetry": TelemetrySettings(otlp_endpoint=receiver.url)})
        store = Store.open(settings.database_url(tmp_path / "data"))
        server = Server(tmp_path / "data", settings, store)
        headers = {"Authorization": f"Bearer {result.admin_key}"}
        async with TestClient(TestServer(server.build_app())) as client:
            for name, url in (("down", f"http://127.0.0.1:{dead}/v1"), ("up", provider.url)):
                resp = await client.post("/admin/v1/models", headers=headers, json={
                    "name": name, "source": {"kind": "remote", "base_url": url}})
                assert resp.status == 201
            resp = await client.post("/admin/v1/routes", headers=headers, json={
                "name": "chat", "targets": [{"model": "down"}, {"model": "up"}],
                "fallback": {"cooldown": {"failures": 1}}})
            assert resp.status == 201
            for _ in range(2):  # the second finds `down` cooling down after the first's failure
                resp = await client.post("/v1/chat/completions", headers=headers, json={
                    "model": "chat", "messages": [{"role": "user", "content": PROMPT}]})
                assert resp.status == 200
        await asyncio.to_thread(server.tracer.close)
    await provider.close()

    root, again = receiver.named("chat chat")
    assert dict(again.event_attributes)["llmgw.skipped"] == {
        "llmgw.route": "chat", "llmgw.target": "down", "llmgw.reason": "cooling down after failures"}
    assert root.attributes["llmgw.route"] == "chat" and root.attributes["llmgw.route.target"] == "up"
    assert ("llmgw.fallback" in [name for name, _ in root.events])
    attempts = [s for s in receiver.spans if s.parent_id == root.span_id and s.kind == "client"]
    assert [(a.attributes["llmgw.upstream"], a.error) for a in attempts] == [("down", True), ("up", False)]
    assert attempts[0].attributes["error.type"] == "connect_error"


async def test_the_replica_a_conversation_goes_to_is_explained_in_its_trace(tmp_path: Path) -> None:
    reps = [await FakeProvider().start(), await FakeProvider().start()]
    async with OtlpReceiver() as receiver:
        tracer = OtelTracer(TelemetrySettings(otlp_endpoint=receiver.url, service_name="llmgw-test"))
        store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
        rig = await GatewayRig(reps[0], store, tracer=tracer).start()
        assert rig.refresher is not None
        model = rig.refresher.current.table.routes["m"].model
        ups = (Upstream("rep-a", reps[0].url), Upstream("rep-b", reps[1].url))
        rig.refresher.current = replace(rig.refresher.current,
                                        table=RoutingTable({"m": Serving(model, ups)}))
        try:
            async with rig.openai() as client:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "system", "content": "Rules. " * 300},
                                         {"role": "user", "content": PROMPT}])
        finally:
            await rig.close()
            await asyncio.to_thread(tracer.close)
            store.close()
            for rep in reps:
                await rep.close()
    root = receiver.one("chat m")
    choice = dict(root.event_attributes)["llmgw.choice"]
    went = "rep-a" if reps[0].requests else "rep-b"
    assert choice == {"llmgw.upstream": went,
                      "llmgw.reason": f"prefix of 3 blocks → {went} (rendezvous), load 0 < bound 3"}
