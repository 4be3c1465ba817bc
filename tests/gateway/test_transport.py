"""The transport to upstreams: retry on a refused connection, byte-exact streams, clear failures,
compressed answers decoded, upstream errors in OpenAI's shape."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.api.replies import write
from llmgw.core.errors import LlmgwError
from llmgw.core.types import LocalSource, Model, Profile
from llmgw.gateway import transport
from llmgw.gateway.call import Exchange
from llmgw.gateway.relay import outbound, send
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import Serving, Upstream
from llmgw.gateway.usage import UsageTap
from llmgw.gateway.wire import openai_chat
from llmgw.store.store import Store
from tests.factories import upstream_call
from tests.fakes.provider import ANSWER, FakeProvider, GatewayRig

SEEN = web.AppKey("seen", list[bytes])
SSE = b"".join(b'data: {"i": %d}\n\n' % i for i in range(20)) + b"data: [DONE]\n\n"


def dead_port() -> int:
    """A port with nothing listening: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def upstream() -> AsyncIterator[TestServer]:
    """A stand-in engine: JSON for plain requests, 20 SSE events for streams."""
    seen: list[bytes] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append(body)
        if b'"stream": true' in body or b'"stream":true' in body:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(0, len(SSE), 17):  # odd-sized writes: chunking must not matter
                await resp.write(SSE[i : i + 17])
            return resp
        return web.json_response({"object": "chat.completion", "echo": body.decode()})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app[SEEN] = seen
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
async def gateway_client() -> AsyncIterator[tuple[Transport, list[Any]]]:
    client = Transport(timeout_s=10)
    await client.start()
    yield client, []
    await client.close()


def local_model() -> Model:
    return Model(name="m", source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])


async def through(
    client: Transport, route: Serving, body: bytes, stream: bool = False
) -> tuple[int, bytes]:
    """Send a chat call from inside a real aiohttp handler and return what its client got."""
    errors: list[LlmgwError] = []
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    call = upstream_call(route, body, payload=payload, ask=openai_chat.read_chat(payload))

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            reply = await send(client, call, outbound(call), Exchange(UsageTap()))
            return await write(request, reply)
        except LlmgwError as exc:
            errors.append(exc)
            return web.Response(status=exc.status, text=exc.message)

    app = web.Application()
    app.router.add_post("/", handler)
    async with TestClient(TestServer(app)) as tc:
        resp = await tc.post("/", data=body)
        return resp.status, await resp.read()


async def test_a_refused_replica_is_skipped_and_the_other_answers(
    upstream: TestServer, gateway_client: Any
) -> None:
    client, _ = gateway_client
    dead = Upstream("dead", f"http://127.0.0.1:{dead_port()}/v1")
    live = Upstream("live", str(upstream.make_url("/v1")))
    # Each call builds a fresh table whose first pick is the second upstream: the dead one.
    route = Serving(local_model(), (live, dead))
    for _ in range(4):
        status, body = await through(client, route, b'{"model": "m"}')
        assert status == 200 and b"chat.completion" in body
    assert dead.outstanding == 0 and live.outstanding == 0
    # Until the routing table learns the replica is gone, it goes last: no request waits on it.
    assert dead.down_until > time.monotonic()


async def test_two_refusals_are_a_502(gateway_client: Any) -> None:
    client, _ = gateway_client
    route = Serving(
        local_model(),
        (
            Upstream("a", f"http://127.0.0.1:{dead_port()}/v1"),
            Upstream("b", f"http://127.0.0.1:{dead_port()}/v1"),
        ),
    )
    status, body = await through(client, route, b'{"model": "m"}')
    assert status == 502 and b"could not connect" in body


async def test_a_stream_arrives_byte_for_byte(upstream: TestServer, gateway_client: Any) -> None:
    client, _ = gateway_client
    route = Serving(local_model(), (Upstream("live", str(upstream.make_url("/v1"))),))
    status, body = await through(client, route, b'{"model": "m", "stream": true}', stream=True)
    assert status == 200 and body == SSE


async def test_the_body_is_forwarded_untouched(upstream: TestServer, gateway_client: Any) -> None:
    client, _ = gateway_client
    route = Serving(local_model(), (Upstream("live", str(upstream.make_url("/v1"))),))
    raw = b'{"model": "m", "tools": [{"type": "function"}], "x_custom": 1}'
    await through(client, route, raw)
    assert upstream.app[SEEN] == [raw]


# --- what providers really send: compressed answers, errors of their own ------------------------


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    p = await FakeProvider().start()
    yield p
    await p.close()


@pytest.fixture
async def rig(provider: FakeProvider, tmp_path: Path) -> AsyncIterator[GatewayRig]:
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    r = await GatewayRig(provider, store).start()
    yield r
    await r.close()
    store.close()


async def usage_rows(rig: GatewayRig) -> list[tuple[int, int, int, int]]:
    """(requests, prompt, completion, errors) per row, once the meter wrote them."""
    assert rig.meter is not None
    await rig.meter.flush()
    return [(r.requests, r.prompt_tokens, r.completion_tokens, r.errors)
            for r in rig.store.usage.usage()]


async def chat(rig: GatewayRig, stream: bool = False) -> tuple[str, int | None]:
    """The answer's text and total tokens, as the official client reads them."""
    async with rig.openai() as client:
        if not stream:
            answer = await client.chat.completions.create(model="m", messages=[QUESTION])
            return answer.choices[0].message.content or "", answer.usage and answer.usage.total_tokens
        parts, total = [], None
        events = await client.chat.completions.create(model="m", messages=[QUESTION], stream=True)
        async for event in events:
            parts += [c.delta.content or "" for c in event.choices]
            total = event.usage.total_tokens if event.usage else total
        return "".join(parts), total


QUESTION: Any = {"role": "user", "content": "how wide is the sea?"}


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_provider_that_compresses_anyway_is_decoded_for_the_client_and_counted(
    provider: FakeProvider, rig: GatewayRig, encoding: str, stream: bool
) -> None:
    provider.compress = encoding  # whatever llmgw asks for, as some providers do
    assert await chat(rig, stream) == (ANSWER, 14)
    assert provider.accept_encodings == ["identity"]
    assert await usage_rows(rig) == [(1, 9, 5, 0)]


async def test_an_answer_that_inflates_beyond_the_bound_is_a_502_not_held_in_memory(
    provider: FakeProvider, rig: GatewayRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1_000_000)
    provider.compress = "gzip"
    provider.body = b'{"pad": "' + b"0" * 20_000_000 + b'"}'  # gzip makes it about 20 KB
    with pytest.raises(openai.InternalServerError) as err:
        await chat(rig)
    assert err.value.status_code == 502 and "MiB" in error_of(err.value)["message"]


async def test_an_answer_beyond_the_bound_that_arrived_whole_is_a_502(
    provider: FakeProvider, rig: GatewayRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small enough to be all here when it is read (no reads past the first): the bound holds
    # for an answer taken whole as for one read block by block.
    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1_000)
    provider.body = b'{"pad": "' + b"0" * 5_000 + b'"}'
    with pytest.raises(openai.InternalServerError) as err:
        await chat(rig)
    assert err.value.status_code == 502 and "MiB" in error_of(err.value)["message"]


@pytest.mark.parametrize("encoding", ["br", "zstd", "x-compress"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_encoding_llmgw_cannot_decode_is_a_502_not_bytes_labelled_json(
    provider: FakeProvider, rig: GatewayRig, encoding: str, stream: bool
) -> None:
    provider.compress = encoding
    with pytest.raises(openai.InternalServerError) as err:
        await chat(rig, stream)
    assert err.value.status_code == 502
    assert error_of(err.value)["code"] == "upstream_error"
    assert await usage_rows(rig) == [(1, 0, 0, 1)]


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    """The `error` object of the answer, which must be exactly OpenAI's four fields."""
    body = exc.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


TRACE = b"<html><body><pre>Traceback (most recent call last):\n  File \"/srv/app.py\"</pre></html>"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("status", "body", "content_type"), [
    (500, TRACE, "text/html"),
    (503, b'{"error": {"message": "overloaded: /srv/models/secret.gguf", "type": "server_error"}}',
     "application/json"),
    (404, b"404 page not found", "text/plain"),
    (400, b"not json at all", "application/json"),
    # The provider refused llmgw's own credentials: the client's request is not at fault, and
    # OpenAI's message shows part of the provider key.
    (401, b'{"error": {"message": "Incorrect API key provided: sk-proj-****wxyz", '
          b'"type": "invalid_request_error", "code": "invalid_api_key"}}', "application/json"),
    (302, b"", "text/html"),
])
async def test_an_upstream_error_that_is_not_the_clients_is_a_502_without_its_body(
    provider: FakeProvider, rig: GatewayRig, stream: bool, status: int, body: bytes,
    content_type: str
) -> None:
    provider.status, provider.error_body = status, body
    provider.error_headers = {"Content-Type": content_type, "Location": "http://127.0.0.1:9/steal"}
    with pytest.raises(openai.APIStatusError) as err:
        await chat(rig, stream)
    assert err.value.status_code == 502
    error = error_of(err.value)
    assert error["code"] == "upstream_error" and error["type"] == "server_error"
    text = err.value.response.text
    for leaked in ("Traceback", "secret.gguf", "page not found", "sk-proj", "wxyz", "steal"):
        assert leaked not in text
    assert len(provider.accept_encodings) == 1  # a redirect is not followed
    assert await usage_rows(rig) == [(1, 0, 0, 1)]


PORTAL = b"<!doctype html><html><body><h1>Sign in to the portal</h1><form action=/login></form></html>"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("path", "question"), [
    ("/v1/chat/completions", {"messages": [QUESTION]}),  # passed through as it came
    ("/v1/messages", {"messages": [QUESTION], "max_tokens": 16}),  # passed through (llama.cpp's)
    ("/v1/responses", {"input": "how wide is the sea?"}),  # translated to chat completions
], ids=["chat", "messages", "responses"])
async def test_a_200_that_is_an_html_page_is_a_502_in_the_callers_dialect(
    provider: FakeProvider, rig: GatewayRig, stream: bool, path: str, question: dict[str, Any]
) -> None:
    provider.page = PORTAL  # a login portal, or a web UI at the wrong port, answering 200
    async with aiohttp.ClientSession() as session, session.post(
            rig.url + path, json={"model": "m", "stream": stream, **question},
            headers={"Authorization": f"Bearer {rig.plaintext}"}) as resp:
        status, content_type, body = resp.status, resp.content_type, await resp.read()
    assert (status, content_type) == (502, "application/json")
    error = orjson.loads(body)
    if path == "/v1/messages":
        assert error["type"] == "error" and error["error"]["type"] == "api_error"
    else:
        assert error["error"]["code"] == "upstream_error"
    assert b"portal" not in body and b"<" not in body
    assert len(provider.requests) == 1
    assert [(n, errors) for n, _, _, errors in await usage_rows(rig)] == [(1, 1)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("sent", "passed_on"), [
    ("30", "30"), ("999999999", "3600"), ("0", "1"), (None, "1"), ("soon", "1"),
])
async def test_an_upstream_429_keeps_its_retry_after_within_bounds(
    provider: FakeProvider, rig: GatewayRig, stream: bool, sent: str | None, passed_on: str
) -> None:
    provider.status = 429
    provider.error_body = b"<html>slow down</html>"
    provider.error_headers = {"Retry-After": sent} if sent is not None else {}
    with pytest.raises(openai.RateLimitError) as err:
        await chat(rig, stream)
    assert err.value.response.headers["Retry-After"] == passed_on
    error = error_of(err.value)
    assert error["type"] == "rate_limit_error" and error["code"] == "upstream_rate_limited"
    assert "slow down" not in err.value.response.text


async def test_an_http_date_retry_after_becomes_seconds(
    provider: FakeProvider, rig: GatewayRig
) -> None:
    provider.status = 429
    provider.error_headers = {"Retry-After": format_datetime(datetime.now(UTC) + timedelta(seconds=90),
                                                             usegmt=True)}
    with pytest.raises(openai.RateLimitError) as err:
        await chat(rig)
    assert 85 <= int(err.value.response.headers["Retry-After"]) <= 91


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_openai_shaped_client_error_keeps_its_fields_but_not_its_words(
    provider: FakeProvider, rig: GatewayRig, stream: bool
) -> None:
    provider.status = 400
    provider.error_body = orjson.dumps({"error": {
        "message": "Invalid value for 'messages[0].content': how wide is the sea? is too long",
        "type": "invalid_request_error", "param": "messages[0].content",
        "code": "context_length_exceeded", "internal_trace": "/srv/app.py line 3",
    }})
    with pytest.raises(openai.BadRequestError) as err:
        await chat(rig, stream)
    error = error_of(err.value)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[0].content"
    assert error["code"] == "context_length_exceeded"
    assert "sea" not in error["message"] and "context_length_exceeded" in error["message"]
    assert "/srv/app.py" not in err.value.response.text


async def test_odd_fields_of_an_openai_shaped_error_are_dropped(
    provider: FakeProvider, rig: GatewayRig
) -> None:
    # llama-server's own shape: an integer code, a type of its own.
    provider.status = 400
    provider.error_body = orjson.dumps({"error": {
        "code": 400, "message": "the request exceeds the available context size",
        "type": "exceed_context_size_error", "param": "<script>alert(1)</script>",
    }})
    with pytest.raises(openai.BadRequestError) as err:
        await chat(rig)
    error = error_of(err.value)
    assert (error["type"], error["param"], error["code"]) == ("exceed_context_size_error", None,
                                                              "upstream_refused")
