"""The data plane's one handler, which both HTTP edges call: the caller's credentials, the body's
JSON, the gateway's reply."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from llmgw.api.handler import DataRequest, credentials, handle
from llmgw.core.errors import InvalidRequest
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


def chat(stream: bool = False) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                         "stream": stream})


def test_the_authorization_header_wins_over_anthropics_x_api_key() -> None:
    assert credentials("Bearer sk-a", "sk-b") == "Bearer sk-a"
    assert credentials(None, "sk-b") == "Bearer sk-b"
    assert credentials(None, None) is None


async def test_a_chat_request_is_answered_whole_and_streamed(rig: GatewayRig) -> None:
    assert rig.gateway is not None and rig.key is not None
    reply = await handle(rig.gateway, DataRequest(Api.CHAT, rig.key, chat(), "req-1",
                                                  time.monotonic()))
    assert reply.status == 200 and reply.stream is None
    assert orjson.loads(reply.body)["choices"][0]["message"]["content"] == ANSWER
    streamed = await handle(rig.gateway, DataRequest(Api.CHAT, rig.key, chat(stream=True),
                                                     "req-2", time.monotonic()))
    assert streamed.stream is not None
    text = b"".join([c async for c in streamed.stream.chunks])
    await streamed.stream.close(True)
    assert text.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'{"model": "m", "model": "n"}'])
async def test_a_body_that_is_no_json_object_is_a_400(rig: GatewayRig, body: bytes) -> None:
    assert rig.gateway is not None and rig.key is not None
    with pytest.raises(InvalidRequest):
        await handle(rig.gateway, DataRequest(Api.CHAT, rig.key, body, "req-3", None))
