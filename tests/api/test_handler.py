"""The data plane's one handler, which both HTTP edges call. The edge's promises that are not
its transport's are kept here once, and tested here once: the caller's credentials, the body's
JSON, the gateway's reply, and every refusal in the caller's dialect with nothing leaked."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from llmgw.api.handler import Head, answer, credentials
from llmgw.core import tracing
from llmgw.core.errors import RateLimited
from llmgw.gateway.service import Gateway
from llmgw.gateway.wire.dialect import Api
from llmgw.store.store import Store
from tests.fakes.provider import ANSWER, FakeProvider, GatewayRig


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[GatewayRig]:
    provider = await FakeProvider().start()
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    r = await GatewayRig(provider, store).start()
    yield r
    await r.close()
    await provider.close()
    store.close()


def gateway(rig: GatewayRig) -> Gateway:
    assert rig.gateway is not None
    return rig.gateway


def chat(stream: bool = False) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                         "stream": stream})


def head(rig: GatewayRig, api: Api = Api.CHAT, *, anthropic: bool = False,
         key: str | None = "") -> Head:
    """A head as an edge reads it, with the rig's key unless `key` says otherwise."""
    authorization = f"Bearer {rig.plaintext}" if key == "" else key
    path = "/v1/messages" if anthropic else "/v1/chat/completions"
    return Head(api, path, authorization, None, anthropic, "req-1", time.monotonic())


def test_the_authorization_header_wins_over_anthropics_x_api_key() -> None:
    assert credentials("Bearer sk-a", "sk-b") == "Bearer sk-a"
    assert credentials(None, "sk-b") == "Bearer sk-b"
    assert credentials(None, None) is None


async def test_a_chat_request_is_answered_whole_and_streamed(rig: GatewayRig) -> None:
    reply = await answer(gateway(rig), head(rig), chat())
    assert reply.status == 200 and reply.stream is None
    assert orjson.loads(reply.body)["choices"][0]["message"]["content"] == ANSWER
    streamed = await answer(gateway(rig), head(rig), chat(stream=True))
    assert streamed.stream is not None
    text = b"".join([c async for c in streamed.stream.chunks])
    await streamed.stream.close(True)
    assert text.endswith(b"data: [DONE]\n\n")


async def test_anthropics_x_api_key_is_a_key_too(rig: GatewayRig) -> None:
    h = replace(head(rig, key=None), api_key=rig.plaintext)
    assert (await answer(gateway(rig), h, chat())).status == 200


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'{"model": "m", "model": "n"}'])
async def test_a_body_that_is_no_json_object_is_a_400_in_openais_shape(
        rig: GatewayRig, body: bytes) -> None:
    reply = await answer(gateway(rig), head(rig), body)
    error = orjson.loads(reply.body)["error"]
    assert reply.status == 400 and error["type"] == "invalid_request_error"
    assert b"not json" not in reply.body  # the request's bytes are never echoed


async def test_a_refusal_on_anthropics_path_is_in_anthropics_shape(rig: GatewayRig) -> None:
    reply = await answer(gateway(rig), head(rig, Api.MESSAGES, anthropic=True), b"[]")
    error = orjson.loads(reply.body)
    assert reply.status == 400 and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("key", [None, "Bearer sk-llmgw-nosuchkey", "Basic abc"])
async def test_a_caller_without_a_valid_key_is_a_401_and_its_body_is_never_read(
        rig: GatewayRig, key: str | None) -> None:
    async def body() -> bytes:
        raise AssertionError("the body of a caller without a key was read")

    reply = await answer(gateway(rig), head(rig, key=key), body)
    assert reply.status == 401 and orjson.loads(reply.body)["error"]["type"]


async def test_a_refusal_carries_its_retry_after(rig: GatewayRig,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    async def limited(*args: object) -> None:
        raise RateLimited("rate limit of 1 request per minute reached", code="rate_limit_rpm",
                          retry_after_s=17)

    monkeypatch.setattr(gateway(rig), "forward", limited)
    reply = await answer(gateway(rig), head(rig), chat())
    assert (reply.status, reply.headers) == (429, {"Retry-After": "17"})
    assert orjson.loads(reply.body)["error"]["code"] == "rate_limit_rpm"


async def test_a_fault_of_llmgws_own_is_a_500_that_says_nothing_of_it(
        rig: GatewayRig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(*args: object) -> None:
        raise KeyError("/srv/secret/path sk-llmgw-secret")

    monkeypatch.setattr(gateway(rig), "forward", broken)
    for anthropic in (False, True):
        with caplog.at_level(logging.ERROR, "llmgw.api.handler"):
            reply = await answer(gateway(rig), head(rig, anthropic=anthropic), chat())
        assert reply.status == 500 and b"secret" not in reply.body
        body = orjson.loads(reply.body)
        error = body["error"]
        assert (body["type"] == "error") if anthropic else (error["code"] == "internal_error")
        assert error["message"] == "Internal server error"
    assert caplog.records[-1].exc_info is not None  # the log has the traceback, the client none


async def test_a_client_that_left_while_its_body_was_read_gets_no_reply(rig: GatewayRig) -> None:
    async def body() -> bytes:
        raise ConnectionResetError("gone")

    with pytest.raises(ConnectionResetError):
        await answer(gateway(rig), head(rig), body)


async def test_a_traced_refusal_ends_its_span_failed_with_the_errors_code(rig: GatewayRig) -> None:
    span = RecordingSpan()
    with tracing.active(span):
        reply = await answer(gateway(rig), head(rig), b"{")
    assert reply.status == 400
    assert span.attributes["http.response.status_code"] == 400 and span.failed == "InvalidRequest"


class RecordingSpan(tracing.NoopSpan):
    """A span that keeps what it is told."""

    recording = True

    def __init__(self) -> None:
        self.attributes: dict[str, tracing.Value] = {}
        self.failed = ""

    def set(self, key: str, value: tracing.Value) -> None:
        self.attributes[key] = value

    def fail(self, error_type: str, message: str = "") -> None:
        self.failed = error_type
