"""End to end: the real llama-server on the demo GGUF behind llmgw, through the openai client."""

from __future__ import annotations

import os
import signal

import openai
import pytest

from tests.conftest import DEMO
from tests.support.server_process import LlmgwServer, wait_for

HELLO = [{"role": "user", "content": "Write one short sentence about the sea."}]


def test_chat_answers_with_content_and_usage(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=DEMO, messages=HELLO, max_tokens=16, temperature=0)
    assert resp.choices[0].message.content
    assert resp.model == DEMO  # the engine answers under the catalog name, not its file path
    assert resp.usage is not None and resp.usage.completion_tokens > 0


def test_chat_streams_in_several_chunks(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=DEMO, messages=HELLO, max_tokens=16, temperature=0, stream=True
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 3
    assert "".join(pieces).strip()


def test_completions_pass_through(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=DEMO, prompt="The capital of France is", max_tokens=4)
    assert resp.choices[0].text


def test_tools_and_unknown_fields_reach_the_engine(client: openai.OpenAI) -> None:
    # The gateway forwards the body untouched: the engine, not llmgw, judges these fields.
    resp = client.chat.completions.create(
        model=DEMO,
        messages=HELLO,
        max_tokens=4,
        extra_body={"seed": 7, "n_probs": 0},
    )
    assert resp.choices[0].finish_reason in {"length", "stop"}


def test_models_lists_the_demo_model(client: openai.OpenAI) -> None:
    assert DEMO in [m.id for m in client.models.list()]


def test_unknown_model_is_404_in_openai_shape(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=HELLO)
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"
    assert "no-such-model" in info.value.message


def test_bad_key_is_401(demo_server: LlmgwServer) -> None:
    bad = openai.OpenAI(base_url=demo_server.url + "/v1", api_key="sk-llmgw-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model=DEMO, messages=HELLO)
    assert info.value.code == "invalid_api_key"


def test_missing_messages_is_400_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=DEMO, messages=[])
    assert info.value.code is None or isinstance(info.value.code, str)
    assert "messages" in info.value.message


def test_remote_model_is_proxied_with_its_own_key(
    demo_server: LlmgwServer, client: openai.OpenAI
) -> None:
    # A remote OpenAI-compatible provider: llmgw itself, reached over HTTP with a key the
    # server reads from its environment (LLMGW_PROVIDER_TEST_KEY, set to the admin key at start).
    demo_server.ctl(
        "model", "add", "remote-gemma",
        "--base-url", demo_server.url + "/v1",
        "--api-key-env", "LLMGW_PROVIDER_TEST_KEY",
        "--upstream-model", DEMO,
    )
    try:
        def answered() -> bool:
            r = client.chat.completions.create(model="remote-gemma", messages=HELLO, max_tokens=4)
            return bool(r.choices[0].message.content)

        wait_for("the remote model to answer", answered, 30)
    finally:
        demo_server.ctl("model", "remove", "remote-gemma")


def test_killed_engine_comes_back(demo_server: LlmgwServer, client: openai.OpenAI) -> None:
    before = demo_server.wait_ready(DEMO)
    os.kill(before["pid"], signal.SIGKILL)

    def restarted() -> bool:
        now = demo_server.wait_ready(DEMO)
        return bool(now["restarts"] > before["restarts"] and now["pid"] != before["pid"])

    wait_for("the replica to be restarted", restarted, 180, every_s=0.5)
    resp = client.chat.completions.create(model=DEMO, messages=HELLO, max_tokens=8)
    assert resp.choices[0].message.content


def test_embeddings_from_a_model_served_with_embeddings_on(
    demo_server: LlmgwServer, client: openai.OpenAI
) -> None:
    gguf = demo_server.get("/admin/v1/models/" + DEMO)["source"]["path"]
    # 0 cores: the demo model and the demo judge hold both cores of a 2-core machine.
    demo_server.ctl("model", "add", "gemma-embed", "--path", gguf, "--cores", "0",
                    "--args", "--embeddings --pooling mean --ctx-size 512")
    try:
        demo_server.wait_ready("gemma-embed")
        resp = client.embeddings.create(model="gemma-embed", input=["the sea", "the sky"])
        assert len(resp.data) == 2 and len(resp.data[0].embedding) > 16
    finally:
        demo_server.ctl("model", "remove", "gemma-embed")
