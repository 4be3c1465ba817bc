"""End to end: agents' APIs on the real llama-server demo model behind `server run`, through the
official `anthropic` SDK (Messages) and `openai`'s `client.responses`, natively and translated
through remote models that speak only Messages or only chat completions (llmgw proxying to itself).

The demo model is tiny and answers nonsense: these tests assert shapes and counts, never content.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import DEMO
from tests.support.server_process import LlmgwServer, wait_for

pytestmark = pytest.mark.e2e

HELLO = "Write one short sentence about the sea."
TURNS: list[Any] = [
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Name another one."},
]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
FUNCTION_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
FUNCTION_ROUND_TRIP: Any = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C."},
]
VIA_MESSAGES = "remote-messages"  # a remote model whose provider speaks only Anthropic's Messages
VIA_CHAT = "remote-chat"  # a remote model whose provider speaks only chat completions


@pytest.fixture
def claude(demo_server: LlmgwServer) -> anthropic.Anthropic:
    """The official Anthropic client pointed at llmgw with the admin key (sent as `x-api-key`)."""
    return anthropic.Anthropic(base_url=demo_server.url, api_key=demo_server.admin_key,
                               max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def remote_models(demo_server: LlmgwServer) -> Iterator[None]:
    """Two remote models on the demo server pointing at itself: one over Messages, one over chat."""
    for name, api in ((VIA_MESSAGES, "anthropic"), (VIA_CHAT, "openai")):
        demo_server.ctl("model", "add", name, "--base-url", demo_server.url + "/v1", "--api", api,
                        "--api-key-env", "LLMGW_PROVIDER_TEST_KEY", "--upstream-model", DEMO)
    try:
        wait_for("the remote models to be listed", lambda: {VIA_MESSAGES, VIA_CHAT} <= {
            m["id"] for m in demo_server.get("/v1/models")["data"]}, 30)
        yield
    finally:
        for name in (VIA_MESSAGES, VIA_CHAT):
            demo_server.ctl("model", "remove", name)


def text_of(message: anthropic.types.Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def prompt_tokens(message: anthropic.types.Message) -> int:
    """All the prompt's tokens: Anthropic's input_tokens leave out those read from a cache."""
    u = message.usage
    return u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)


def post(server: LlmgwServer, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


# --- Anthropic Messages, native on llama-server ---------------------------------------------------


def test_message_answers_with_text_stop_reason_and_usage(claude: anthropic.Anthropic) -> None:
    msg = claude.messages.create(model=DEMO, max_tokens=16,
                                 messages=[{"role": "user", "content": HELLO}])
    assert msg.type == "message" and msg.role == "assistant"
    assert text_of(msg).strip()
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0
    assert msg.stop_reason == ("max_tokens" if msg.usage.output_tokens >= 16 else "end_turn")
    assert msg.model == DEMO  # the catalog name, not the engine's file path
    assert msg.id.startswith("msg_")  # Anthropic's, not llama-server's `chatcmpl-…`


def raw_event_types(stream: Any) -> list[str]:
    """The types of a Messages stream's events as sent (the SDK's own helper events left out)."""
    helpers = {"text", "input_json", "citation", "thinking", "signature"}
    return [e.type for e in stream if e.type not in helpers]


def assert_messages_sequence(types: list[str]) -> None:
    """Anthropic's event order: start, blocks (start, deltas, stop), delta, stop; pings anywhere."""
    types = [t for t in types if t != "ping"]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    blocks = types[1:-2]
    assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop"
    assert set(blocks) == {"content_block_start", "content_block_delta", "content_block_stop"}


def test_message_stream_arrives_in_several_deltas(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model=DEMO, max_tokens=16,
                                messages=[{"role": "user", "content": HELLO}]) as stream:
        pieces = [t for t in stream.text_stream if t]
        final = stream.get_final_message()
    assert len(pieces) >= 3
    assert text_of(final) == "".join(pieces)
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    assert final.model == DEMO and final.id.startswith("msg_")


def test_message_stream_events_come_in_anthropics_order(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model=DEMO, max_tokens=8,
                                messages=[{"role": "user", "content": HELLO}]) as stream:
        assert_messages_sequence(raw_event_types(stream))


def test_system_prompt_and_several_turns(claude: anthropic.Anthropic) -> None:
    short = claude.messages.count_tokens(model=DEMO, messages=TURNS[:1])
    msg = claude.messages.create(model=DEMO, max_tokens=8, system="You answer in one word.",
                                 messages=TURNS)
    assert text_of(msg).strip()
    # The system prompt and every turn reached the engine.
    assert prompt_tokens(msg) > short.input_tokens + 5


TOOL_ROUND_TRIP: Any = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C."},
    ]},
]


def test_tool_use_and_tool_result_round_trip(claude: anthropic.Anthropic) -> None:
    msg = claude.messages.create(model=DEMO, max_tokens=16, tools=[WEATHER_TOOL],  # type: ignore[list-item]
                                 messages=TOOL_ROUND_TRIP)
    assert msg.type == "message" and msg.content
    assert msg.stop_reason in {"end_turn", "max_tokens", "tool_use"}
    assert msg.usage.input_tokens > 0


def test_tool_round_trip_streamed(claude: anthropic.Anthropic) -> None:
    # What Claude Code sends after running a tool: tools on, streamed.
    with claude.messages.stream(model=DEMO, max_tokens=16, tools=[WEATHER_TOOL],  # type: ignore[list-item]
                                messages=TOOL_ROUND_TRIP) as stream:
        final = stream.get_final_message()
    assert final.content and final.usage.output_tokens > 0


def test_beta_messages_as_claude_code_sends_them(claude: anthropic.Anthropic) -> None:
    # Claude Code uses the SDK's beta client: `?beta=true` and an `anthropic-beta` header.
    msg = claude.beta.messages.create(
        model=DEMO, max_tokens=8, betas=["fine-grained-tool-streaming-2025-05-14"],
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        messages=[{"role": "user", "content": [{"type": "text", "text": HELLO}]}],
    )
    assert msg.content and msg.usage.output_tokens > 0
    counted = claude.beta.messages.count_tokens(model=DEMO, messages=[{"role": "user", "content": HELLO}])
    assert counted.input_tokens > 0


def test_stop_sequence_ends_the_answer(claude: anthropic.Anthropic) -> None:
    # This SDK has no `temperature`: greedy decoding goes in the body as another client's would.
    ask: Any = {"model": DEMO, "max_tokens": 24, "extra_body": {"temperature": 0},
                "messages": [{"role": "user", "content": HELLO}]}
    words = re.findall(r"[A-Za-z]{3,}", text_of(claude.messages.create(**ask)))
    assert len(words) >= 2, "the engine's answer has too few words to pick a stop sequence from"
    stop = words[1]  # greedy decoding says the same again: it stops on this word
    msg = claude.messages.create(**ask, stop_sequences=[stop])
    assert msg.stop_sequence == stop
    assert stop not in text_of(msg)
    # llama-server says "end_turn" here where Anthropic says "stop_sequence": llmgw passes the
    # engine's native answer as it is, so only the stop_sequence field is asserted.
    assert msg.stop_reason in {"stop_sequence", "end_turn"}


def test_count_tokens_grows_with_the_prompt(claude: anthropic.Anthropic) -> None:
    short = claude.messages.count_tokens(model=DEMO, messages=[{"role": "user", "content": "Hi."}])
    long = claude.messages.count_tokens(model=DEMO, messages=[{"role": "user", "content": HELLO * 10}])
    assert short.input_tokens > 0
    assert long.input_tokens > short.input_tokens + 50


def test_bad_key_is_anthropics_authentication_error(demo_server: LlmgwServer) -> None:
    bad = anthropic.Anthropic(base_url=demo_server.url, api_key="sk-llmgw-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as info:
        bad.messages.create(model=DEMO, max_tokens=4, messages=[{"role": "user", "content": HELLO}])
    assert info.value.status_code == 401
    assert isinstance(info.value.body, dict)
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "authentication_error"


def test_unknown_model_is_not_found(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.create(model="no-such-model", max_tokens=4,
                               messages=[{"role": "user", "content": HELLO}])
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == "not_found_error"
    assert "no-such-model" in info.value.message


def test_max_tokens_is_required(claude: anthropic.Anthropic) -> None:
    # The SDK's types require max_tokens: send the request without them, as another client might.
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.post("/v1/messages", cast_to=object,
                    body={"model": DEMO, "messages": [{"role": "user", "content": HELLO}]})
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in info.value.message


@pytest.mark.parametrize("auth", ["x-api-key", "Authorization"])
def test_key_in_either_header(demo_server: LlmgwServer, auth: str) -> None:
    key = demo_server.admin_key if auth == "x-api-key" else "Bearer " + demo_server.admin_key
    status, body = post(demo_server, "/v1/messages",
                        {"model": DEMO, "max_tokens": 4, "messages": [{"role": "user", "content": HELLO}]},
                        {auth: key, "anthropic-version": "2023-06-01"})
    assert status == 200, body
    assert body["type"] == "message" and body["usage"]["output_tokens"] > 0


def test_models_list_in_anthropics_shape(claude: anthropic.Anthropic) -> None:
    models = list(claude.models.list())
    assert DEMO in [m.id for m in models]
    assert all(m.type == "model" for m in models)


# --- OpenAI Responses (served from chat completions on llama-server) ------------------------------


def test_response_has_output_text_and_usage(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=DEMO, input=HELLO, max_output_tokens=16, temperature=0)
    assert resp.output_text.strip()
    assert resp.model == DEMO
    assert resp.usage is not None
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    if resp.usage.output_tokens >= 16:
        assert resp.status == "incomplete"
        assert resp.incomplete_details is not None
        assert resp.incomplete_details.reason == "max_output_tokens"
    else:
        assert resp.status == "completed"


def test_instructions_and_input_items(client: openai.OpenAI) -> None:
    bare = client.responses.create(model=DEMO, input="Name a colour.", max_output_tokens=8)
    resp = client.responses.create(model=DEMO, instructions="You answer in one word.",
                                   input=TURNS, max_output_tokens=8)
    assert resp.output_text.strip()
    assert resp.usage is not None and bare.usage is not None
    # The instructions and every item reached the engine.
    assert resp.usage.input_tokens > bare.usage.input_tokens + 5


def streamed_response(stream: Any) -> tuple[list[str], Any]:
    """The text deltas of a Responses stream and the response its last event carries."""
    events = list(stream)
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    ending = events[-1]
    assert ending.type in {"response.completed", "response.incomplete"}
    if ending.type == "response.completed":
        return deltas, stream.get_final_response()
    # The SDK's get_final_response() wants response.completed; OpenAI ends a response cut short
    # by max_output_tokens with response.incomplete, which carries the response instead.
    assert ending.response.incomplete_details.reason == "max_output_tokens"
    return deltas, ending.response


def test_response_stream_sends_deltas_then_its_ending(client: openai.OpenAI) -> None:
    with client.responses.stream(model=DEMO, input=HELLO, max_output_tokens=16, temperature=0) as stream:
        deltas, final = streamed_response(stream)
    assert len(deltas) >= 3
    assert final.output_text == "".join(deltas)
    assert final.status in {"completed", "incomplete"}
    assert final.usage is not None and final.usage.output_tokens > 0


def test_function_call_round_trip(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=DEMO, input=FUNCTION_ROUND_TRIP, tools=[FUNCTION_TOOL],
                                   max_output_tokens=16)
    assert resp.status in {"completed", "incomplete"}
    assert resp.output
    assert resp.usage is not None and resp.usage.input_tokens > 0


def test_a_request_as_codex_sends_it(client: openai.OpenAI) -> None:
    # Codex streams, stores nothing, and sends its tools and input as typed items.
    with client.responses.stream(
        model=DEMO, store=False, tools=[FUNCTION_TOOL], tool_choice="auto", parallel_tool_calls=False,
        instructions="You are a coding agent.", max_output_tokens=16,
        input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": HELLO}]}],
    ) as stream:
        deltas, final = streamed_response(stream)
    assert deltas and final.usage is not None and final.usage.input_tokens > 0


def test_previous_response_id_is_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=DEMO, input=HELLO, previous_response_id="resp_1")
    assert "previous_response_id" in info.value.message
    assert info.value.param == "previous_response_id"


def test_response_for_an_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input=HELLO)


def test_response_with_a_bad_key_is_401(demo_server: LlmgwServer) -> None:
    bad = openai.OpenAI(base_url=demo_server.url + "/v1", api_key="sk-llmgw-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.responses.create(model=DEMO, input=HELLO)
    assert info.value.code == "invalid_api_key"


# --- translated: remote providers that speak one dialect only -------------------------------------


@pytest.mark.usefixtures("remote_models")
def test_chat_over_a_messages_only_provider(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=VIA_MESSAGES, max_tokens=16,
                                          messages=[{"role": "user", "content": HELLO}])
    assert resp.choices[0].message.content
    assert resp.choices[0].finish_reason in {"stop", "length"}
    assert resp.model == VIA_MESSAGES
    assert resp.usage is not None
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_chat_stream_over_a_messages_only_provider(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=VIA_MESSAGES, max_tokens=16, stream=True,
                                            stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": HELLO}])
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_responses_over_a_messages_only_provider(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=VIA_MESSAGES, instructions="Be brief.", input=HELLO,
                                   max_output_tokens=16)
    assert resp.output_text.strip()
    assert resp.model == VIA_MESSAGES
    assert resp.usage is not None
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_responses_stream_over_a_messages_only_provider(client: openai.OpenAI) -> None:
    with client.responses.stream(model=VIA_MESSAGES, input=HELLO, max_output_tokens=16) as stream:
        deltas, final = streamed_response(stream)
    assert len(deltas) >= 3
    assert final.output_text == "".join(deltas)
    assert final.status in {"completed", "incomplete"}
    assert final.usage is not None and final.usage.output_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_function_call_round_trip_over_a_messages_only_provider(client: openai.OpenAI) -> None:
    resp = client.responses.create(model=VIA_MESSAGES, input=FUNCTION_ROUND_TRIP, tools=[FUNCTION_TOOL],
                                   max_output_tokens=16)
    assert resp.output
    assert resp.usage is not None and resp.usage.input_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_messages_over_a_chat_only_provider(claude: anthropic.Anthropic) -> None:
    msg = claude.messages.create(model=VIA_CHAT, max_tokens=16, system="Be brief.",
                                 messages=[{"role": "user", "content": HELLO}])
    assert text_of(msg).strip()
    assert msg.model == VIA_CHAT
    assert msg.stop_reason in {"end_turn", "max_tokens"}
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_messages_stream_over_a_chat_only_provider(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model=VIA_CHAT, max_tokens=16,
                                messages=[{"role": "user", "content": HELLO}]) as stream:
        pieces = [t for t in stream.text_stream if t]
        final = stream.get_final_message()
    assert len(pieces) >= 3
    assert text_of(final) == "".join(pieces)
    assert final.usage.output_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_messages_stream_events_over_a_chat_only_provider(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model=VIA_CHAT, max_tokens=8,
                                messages=[{"role": "user", "content": HELLO}]) as stream:
        assert_messages_sequence(raw_event_types(stream))


@pytest.mark.usefixtures("remote_models")
def test_tool_round_trip_over_a_chat_only_provider(claude: anthropic.Anthropic) -> None:
    msg = claude.messages.create(model=VIA_CHAT, max_tokens=16, tools=[WEATHER_TOOL],  # type: ignore[list-item]
                                 messages=TOOL_ROUND_TRIP)
    assert msg.type == "message" and msg.content
    assert msg.usage.input_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_stop_sequences_over_a_chat_only_provider(claude: anthropic.Anthropic) -> None:
    ask: Any = {"model": VIA_CHAT, "max_tokens": 24, "extra_body": {"temperature": 0},
                "messages": [{"role": "user", "content": HELLO}]}
    words = re.findall(r"[A-Za-z]{3,}", text_of(claude.messages.create(**ask)))
    assert len(words) >= 2, "the engine's answer has too few words to pick a stop sequence from"
    msg = claude.messages.create(**ask, stop_sequences=[words[1]])
    # Chat completions' finish_reason "stop" does not say whether a stop sequence ended the answer.
    assert words[1] not in text_of(msg)
    assert msg.stop_reason == "end_turn"


@pytest.mark.usefixtures("remote_models")
def test_count_tokens_on_a_messages_only_provider(claude: anthropic.Anthropic) -> None:
    direct = claude.messages.count_tokens(model=DEMO, messages=[{"role": "user", "content": HELLO}])
    remote = claude.messages.count_tokens(model=VIA_MESSAGES, messages=[{"role": "user", "content": HELLO}])
    assert remote.input_tokens == direct.input_tokens > 0


@pytest.mark.usefixtures("remote_models")
def test_count_tokens_on_a_chat_only_provider_is_an_estimate(claude: anthropic.Anthropic) -> None:
    short = claude.messages.count_tokens(model=VIA_CHAT, messages=[{"role": "user", "content": "Hi."}])
    long = claude.messages.count_tokens(model=VIA_CHAT, messages=[{"role": "user", "content": HELLO * 10}])
    assert 0 < short.input_tokens < long.input_tokens


# --- metrics --------------------------------------------------------------------------------------


def requests_counted(server: LlmgwServer, api: str) -> float:
    """llmgw_requests_total for the demo model and `api`, summed over statuses and keys."""
    req = urllib.request.Request(server.url + "/metrics",
                                 headers={"Authorization": f"Bearer {server.admin_key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("llmgw_requests_total{") and f'api="{api}"' in line \
                and f'model="{DEMO}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_count_messages_and_responses(
    demo_server: LlmgwServer, client: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    before = {api: requests_counted(demo_server, api) for api in ("messages", "responses")}
    claude.messages.create(model=DEMO, max_tokens=4, messages=[{"role": "user", "content": HELLO}])
    client.responses.create(model=DEMO, input=HELLO, max_output_tokens=4)
    client.responses.create(model=DEMO, input=HELLO, max_output_tokens=4)
    assert requests_counted(demo_server, "messages") == before["messages"] + 1
    assert requests_counted(demo_server, "responses") == before["responses"] + 2
