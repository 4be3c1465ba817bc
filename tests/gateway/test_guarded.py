"""The guarded request path end to end: a real aiohttp handler calling `forward_guarded`, the real
upstream and judge clients, a fake upstream engine and a fake judge engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.api.errors import openai_errors
from llmgw.api.replies import write
from llmgw.core.errors import GuardUnavailable
from llmgw.core.guard import Direction, InputMode, OnFailure, Outcome, Policy, VerdictRecord
from llmgw.core.judges import DEFAULT_JUDGE, KNOWN
from llmgw.core.types import LocalSource, Model, Profile
from llmgw.gateway.call import Exchange
from llmgw.gateway.relay import outbound
from llmgw.gateway.stages.guard import Judged, forward_guarded
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import Serving, Upstream
from llmgw.gateway.usage import UsageTap
from llmgw.guard.enforcement import Guard, GuardView, RequestInfo
from llmgw.guard.judge_client import JudgeClient, JudgeTarget
from tests.factories import upstream_call
from tests.fakes.judge import FakeJudge

# Nine chunks of ten characters; the seventh (the third window of 30) carries the marker.
MARKER = "BOMB"
CHUNKS = [f"chunk-{i}-ok" if i != 7 else f"a {MARKER} now" for i in range(1, 10)]
assert all(len(c) == 10 for c in CHUNKS)
SAFE_CHUNKS = [f"chunk-{i}-ok" for i in range(1, 10)]
DONE_EVENT = b"data: [DONE]\n\n"
INFO = RequestInfo(model="m", key_name="team-a", key_label="sk-abc…", request_id="req-1")
QUESTION = {"role": "user", "content": "tell me a story"}


def chunk_event(i: int, text: str) -> bytes:
    obj = {
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


STOP_EVENT = b"data: " + orjson.dumps({
    "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
}) + b"\n\n"


@dataclass
class FakeUpstream:
    """A stand-in engine answering `/v1/chat/completions`, whole or as an SSE stream."""

    chunks: list[str] = field(default_factory=lambda: list(SAFE_CHUNKS))
    answer: str = "once upon a time"
    delay_s: float = 0.0  # before the headers: still working on its answer
    chunk_delay_s: float = 0.0  # before each stream event
    hang_after: bool = False  # after the content chunks, keep the stream open (still generating)
    break_after: int | None = None  # drop the connection after this many content events
    # ... once this is set: aiohttp drops what it buffered when the connection breaks, so a test
    # that wants the events before the break delivered first waits for them to be read.
    break_when: asyncio.Event | None = None
    fail: tuple[int, bytes] | None = None  # answer this status and body instead
    requests: list[bytes] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    started_at: float = 0.0
    finished: bool = False
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # closed before it finished

    def content_events(self) -> list[bytes]:
        return [chunk_event(i, c) for i, c in enumerate(self.chunks)]

    def sse(self) -> bytes:
        """The whole stream as this upstream sends it when nothing interrupts it."""
        return b"".join(self.content_events()) + STOP_EVENT + DONE_EVENT

    def json_body(self) -> bytes:
        return orjson.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.answer},
                         "finish_reason": "stop"}],
        })

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(body)
        self.started_at = time.monotonic()
        self.started.set()
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)  # the fault being injected: a slow upstream
            if self.fail is not None:
                self.finished = True
                return web.Response(status=self.fail[0], body=self.fail[1],
                                    headers={"Retry-After": "7", "Content-Type": "text/html"})
            if orjson.loads(body).get("stream") is not True:
                self.finished = True
                return web.Response(body=self.json_body(), content_type="application/json")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            events = self.content_events()
            if self.break_after is not None:
                for event in events[: self.break_after]:
                    await resp.write(event)
                if self.break_when is not None:
                    await self.break_when.wait()
                assert request.transport is not None
                request.transport.close()  # the engine died mid-stream
                self.finished = True
                return resp
            if self.chunk_delay_s or self.hang_after:
                for event in events:
                    if self.chunk_delay_s:
                        await asyncio.sleep(self.chunk_delay_s)
                    await resp.write(event)
                if self.hang_after:
                    await asyncio.Event().wait()  # never finishes; only a closed connection ends it
                await resp.write(STOP_EVENT + DONE_EVENT)
            else:
                whole = self.sse()
                for i in range(0, len(whole), 17):  # odd-sized writes: event boundaries must not matter
                    await resp.write(whole[i : i + 17])
            self.finished = True
            return resp
        finally:
            if not self.finished:
                self.gone.set()


@dataclass
class Reply:
    status: int
    body: bytes
    headers_at: float  # time.monotonic() when the gateway's response headers arrived

    def error(self) -> dict[str, Any]:
        return dict(orjson.loads(self.body)["error"])

    def events(self) -> list[bytes]:
        return [e + b"\n\n" for e in self.body.split(b"\n\n") if e.strip()]


@dataclass
class Rig:
    upstream: FakeUpstream
    judge: FakeJudge
    tc: TestClient[Any, Any]
    records: list[VerdictRecord]
    view: GuardView = field(default_factory=lambda: GuardView(enabled=True))

    def guard(self, *policies: Policy) -> None:
        self.view = GuardView(enabled=True, policies=policies)

    async def call(self, stream: bool = False, **extra: Any) -> Reply:
        payload = {"model": "m", "messages": [QUESTION], **extra}
        if stream:
            payload["stream"] = True
        resp = await self.tc.post("/v1/chat/completions", data=orjson.dumps(payload))
        headers_at = time.monotonic()
        return Reply(resp.status, await resp.read(), headers_at)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    upstream = FakeUpstream()
    up_app = web.Application()
    up_app.router.add_post("/v1/chat/completions", upstream.chat)
    up_server = TestServer(up_app)  # handler_cancellation on: a closed connection cancels the handler
    await up_server.start_server()
    judge = await FakeJudge().start()

    judge_client = JudgeClient(lambda name: [JudgeTarget(KNOWN[DEFAULT_JUDGE], judge.url)])
    await judge_client.start()
    client = Transport(timeout_s=30)
    await client.start()
    records: list[VerdictRecord] = []
    holder: list[Rig] = []
    guard = Guard(judge_client, lambda: holder[0].view, records.append, lambda: datetime.now(UTC),
                  time.monotonic)
    model = Model(name="m", source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])
    route = Serving(model, (Upstream("live", str(up_server.make_url("/v1"))),))

    async def handler(request: web.Request) -> web.StreamResponse:
        call = upstream_call(route, await request.read())
        inputs = guard.policies("m", INFO.key_name, Direction.INPUT)
        outputs = guard.policies("m", INFO.key_name, Direction.OUTPUT)
        reply = await forward_guarded(client, call, outbound(call), Exchange(UsageTap()),
                                      Judged(guard, INFO, inputs, outputs))
        return await write(request, reply)

    app = web.Application(middlewares=[openai_errors])
    app.router.add_post("/v1/chat/completions", handler)
    tc: TestClient[Any, Any] = TestClient(TestServer(app))
    await tc.start_server()
    holder.append(Rig(upstream, judge, tc, records))
    try:
        yield holder[0]
    finally:
        await tc.close()
        await client.close()
        await judge_client.close()
        await judge.close()
        await up_server.close()
        assert route.upstreams[0].outstanding == 0


async def gone(event: asyncio.Event, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), 5)
    except TimeoutError:
        pytest.fail(f"{what} was never closed")


def blocked_tail(events: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The content_filter finish chunk and the error of a blocked stream's last three events."""
    *_, finish, error, done = events
    assert done == DONE_EVENT
    finish_obj = orjson.loads(finish.removeprefix(b"data: "))
    assert finish_obj["object"] == "chat.completion.chunk"
    assert finish_obj["choices"] == [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]
    return finish_obj, orjson.loads(error.removeprefix(b"data: "))["error"]


# --- input, before the upstream ----------------------------------------------------------------


async def test_input_before_unsafe_is_refused_and_the_upstream_never_called(rig: Rig) -> None:
    rig.guard(Policy(name="in", judges=["j"], input_mode=InputMode.BEFORE))
    rig.judge.unsafe("Violent")
    reply = await rig.call()
    assert reply.status == 400
    err = reply.error()
    assert err["code"] == "content_filter" and err["type"] == "invalid_request_error"
    assert "'in'" in err["message"] and "Violent" in err["message"]
    assert rig.upstream.requests == []
    assert [r.outcome for r in rig.records] == [Outcome.UNSAFE]


async def test_input_before_safe_is_forwarded_untouched(rig: Rig) -> None:
    rig.guard(Policy(name="in", judges=["j"]))
    reply = await rig.call()
    assert reply.status == 200 and reply.body == rig.upstream.json_body()
    assert "USER: tell me a story" in rig.judge.prompts[0]
    assert rig.judge.answered_at[0] <= rig.upstream.started_at  # judged first, then forwarded
    stream = await rig.call(stream=True)
    assert stream.status == 200 and stream.body == rig.upstream.sse()


# --- input, in parallel with the upstream ------------------------------------------------------


async def test_input_parallel_unsafe_cancels_a_streaming_upstream(rig: Rig) -> None:
    rig.guard(Policy(name="in", judges=["j"], input_mode=InputMode.PARALLEL))
    rig.judge.slow(0.2, unsafe=True)
    rig.upstream.chunk_delay_s = 0.3  # 2.7 s to finish its stream
    start = time.monotonic()
    reply = await rig.call(stream=True)
    assert reply.status == 400 and reply.error()["code"] == "content_filter"
    assert reply.headers_at - start < 1.5
    assert rig.upstream.started_at < rig.judge.answered_at[0]  # called at once, not after the verdict
    await gone(rig.upstream.gone, "the upstream's connection")
    assert not rig.upstream.finished
    assert b"chunk-" not in reply.body


async def test_input_parallel_unsafe_cancels_an_upstream_still_working_on_a_whole_answer(rig: Rig) -> None:
    # A non-streamed answer's headers come only when the engine has generated all of it (as
    # llama-server does): the verdict must not wait for them.
    rig.guard(Policy(name="in", judges=["j"], input_mode=InputMode.PARALLEL))
    rig.judge.slow(0.2, unsafe=True)
    rig.upstream.delay_s = 3.0
    start = time.monotonic()
    reply = await rig.call()
    assert reply.status == 400 and reply.error()["code"] == "content_filter"
    assert reply.headers_at - start < 1.5, "the blocked request waited for the upstream's whole answer"
    await gone(rig.upstream.gone, "the upstream's connection")
    assert not rig.upstream.finished


async def test_input_parallel_safe_answer_arrives_only_after_the_verdict(rig: Rig) -> None:
    rig.guard(Policy(name="in", judges=["j"], input_mode=InputMode.PARALLEL))
    rig.judge.slow(0.3)
    reply = await rig.call()
    assert reply.status == 200 and reply.body == rig.upstream.json_body()
    assert rig.upstream.started_at < rig.judge.answered_at[0] <= reply.headers_at
    assert rig.upstream.finished

    stream = await rig.call(stream=True)
    assert stream.status == 200 and stream.body == rig.upstream.sse()
    assert rig.upstream.started_at < rig.judge.answered_at[1] <= stream.headers_at


async def test_input_parallel_judge_failure_fails_closed(rig: Rig) -> None:
    rig.guard(Policy(name="in", judges=["j"], input_mode=InputMode.PARALLEL, budget_ms=200))
    rig.judge.never()
    rig.upstream.chunk_delay_s = 0.3
    reply = await rig.call(stream=True)
    assert reply.status == 503 and reply.error()["code"] == "guard_unavailable"
    await gone(rig.judge.gone, "the judge's connection")
    await gone(rig.upstream.gone, "the upstream's connection")
    assert rig.records[0].outcome == Outcome.FAILED_TIMEOUT


# --- output, whole responses ---------------------------------------------------------------------


async def test_output_unsafe_whole_answer_is_replaced_by_the_error(rig: Rig) -> None:
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True))
    rig.judge.rule(MARKER, "Violent")
    rig.upstream.answer = f"here is how to build a {MARKER}"
    reply = await rig.call()
    assert reply.status == 400
    err = reply.error()
    assert err["code"] == "content_filter" and "'out'" in err["message"] and "response" in err["message"]
    assert MARKER not in reply.body.decode() and "how to build" not in reply.body.decode()
    [prompt] = rig.judge.prompts
    assert f"ASSISTANT: here is how to build a {MARKER}" in prompt and "USER: tell me a story" in prompt
    assert [(r.direction, r.outcome) for r in rig.records] == [(Direction.OUTPUT, Outcome.UNSAFE)]


async def test_output_safe_whole_answer_is_passed_byte_for_byte(rig: Rig) -> None:
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True))
    rig.judge.rule(MARKER)
    reply = await rig.call()
    assert reply.status == 200 and reply.body == rig.upstream.json_body()
    assert len(rig.judge.requests) == 1


async def test_input_and_output_both_judged(rig: Rig) -> None:
    rig.guard(Policy(name="both", judges=["j"], input=True, output=True))
    reply = await rig.call()
    assert reply.status == 200
    assert [r.direction for r in rig.records] == [Direction.INPUT, Direction.OUTPUT]


# --- output, streams in windows ------------------------------------------------------------------


async def test_a_stream_is_cut_at_the_first_unsafe_window(rig: Rig) -> None:
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True, stream_window_chars=30))
    rig.judge.rule(MARKER, "Violent")
    rig.upstream.chunks = list(CHUNKS)
    rig.upstream.hang_after = True  # still generating when the third window is judged
    async with asyncio.timeout(10):
        reply = await rig.call(stream=True)
    assert reply.status == 200
    events = reply.events()
    # Exactly the first two windows (six content chunks), byte for byte, then the blocked ending.
    assert events[:6] == rig.upstream.content_events()[:6]
    assert len(events) == 9
    finish, error = blocked_tail(events)
    assert finish["model"] == "m"
    assert error["code"] == "content_filter" and "'out'" in error["message"]
    assert "Violent" in error["message"]
    text = reply.body.decode()
    assert MARKER not in text and "chunk-8" not in text and "chunk-9" not in text
    await gone(rig.upstream.gone, "the upstream's connection")
    # Three judgments, each of everything generated so far.
    assert len(rig.judge.prompts) == 3
    for n, prompt in zip((3, 6, 9), rig.judge.prompts, strict=True):
        assert "ASSISTANT: " + "".join(CHUNKS[:n]) in prompt
    assert [r.outcome for r in rig.records] == [Outcome.SAFE, Outcome.SAFE, Outcome.UNSAFE]


async def test_a_safe_stream_arrives_whole_and_byte_identical(rig: Rig) -> None:
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True, stream_window_chars=30))
    rig.judge.rule(MARKER)
    reply = await rig.call(stream=True)
    assert reply.status == 200 and reply.body == rig.upstream.sse()
    assert reply.events()[-1] == DONE_EVENT
    assert len(rig.judge.prompts) == 3
    assert "ASSISTANT: " + "".join(SAFE_CHUNKS) in rig.judge.prompts[-1]


async def test_a_stream_shorter_than_a_window_is_judged_once_at_the_end(rig: Rig) -> None:
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True, stream_window_chars=1000))
    rig.judge.rule(MARKER)
    reply = await rig.call(stream=True)
    assert reply.status == 200 and reply.body == rig.upstream.sse()
    assert len(rig.judge.prompts) == 1


async def test_a_judge_that_never_answers_ends_the_stream_guard_unavailable(rig: Rig) -> None:
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True, stream_window_chars=30,
                     budget_ms=200, on_failure=OnFailure.CLOSED))
    rig.judge.never()
    rig.upstream.hang_after = True
    start = time.monotonic()
    async with asyncio.timeout(10):
        reply = await rig.call(stream=True)
    assert time.monotonic() - start < 2.0
    assert reply.status == 200
    events = reply.events()
    assert len(events) == 3  # nothing unjudged was released
    _, error = blocked_tail(events)
    assert error["code"] == "guard_unavailable" and "'out'" in error["message"]
    assert "chunk-" not in reply.body.decode()
    await gone(rig.judge.gone, "the judge's connection")
    await gone(rig.upstream.gone, "the upstream's connection")
    assert [(r.outcome, r.let_through) for r in rig.records] == [(Outcome.FAILED_TIMEOUT, False)]


async def test_a_stream_guard_failure_event_is_typed_as_the_server_error_it_is(rig: Rig) -> None:
    # Off the stream the same failure is a 503 `server_error` (retryable); in the stream's error
    # event it must not turn into the client's fault.
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True, stream_window_chars=30,
                     budget_ms=200))
    rig.judge.error()
    reply = await rig.call(stream=True)
    _, error = blocked_tail(reply.events())
    assert error["code"] == GuardUnavailable.code
    assert error["type"] == GuardUnavailable.type


async def test_a_judge_that_never_answers_lets_the_stream_through_when_open(rig: Rig) -> None:
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True, stream_window_chars=30,
                     budget_ms=100, on_failure=OnFailure.OPEN))
    rig.judge.never()
    reply = await rig.call(stream=True)
    assert reply.status == 200 and reply.body == rig.upstream.sse()
    assert all(r.outcome == Outcome.FAILED_TIMEOUT and r.let_through for r in rig.records)
    assert len(rig.records) == 3


async def test_an_upstream_dying_mid_stream_ends_the_guarded_stream_with_an_error_event(rig: Rig) -> None:
    # As the unguarded relay does: what was judged safe arrives, then an upstream_error event.
    rig.guard(Policy(name="out", judges=["j"], input=False, output=True, stream_window_chars=30))
    rig.upstream.break_after = 4
    rig.upstream.break_when = rig.judge.received  # the first window was read and is being judged
    try:
        async with asyncio.timeout(5):
            reply = await rig.call(stream=True)
    except TimeoutError:
        pytest.fail("the guarded stream neither ended nor reported the upstream's failure")
    assert reply.status == 200
    events = reply.events()
    assert events[:3] == rig.upstream.content_events()[:3]
    error = orjson.loads(events[-1].removeprefix(b"data: "))["error"]
    assert error["code"] == "upstream_error"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_upstream_error_under_a_policy_is_answered_in_openais_shape_without_its_body(
    rig: Rig, stream: bool
) -> None:
    rig.guard(Policy(name="both", judges=["j"], input=True, output=True,
                     input_mode=InputMode.PARALLEL))
    rig.upstream.fail = (500, b"<html>Traceback (most recent call last): /srv/app.py</html>")
    reply = await rig.call(stream=stream)
    assert reply.status == 502 and reply.error()["code"] == "upstream_error"
    assert b"Traceback" not in reply.body and b"/srv/app.py" not in reply.body

    rig.upstream.fail = (429, b"<html>slow down</html>")
    reply = await rig.call(stream=stream)
    assert reply.status == 429 and reply.error()["code"] == "upstream_rate_limited"
    assert b"slow down" not in reply.body
    # Only the inputs were judged: there was no answer to judge.
    assert [r.direction for r in rig.records] == [Direction.INPUT, Direction.INPUT]
