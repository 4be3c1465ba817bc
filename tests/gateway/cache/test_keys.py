"""Which requests the cache may answer, and the keys it keeps them under."""

from __future__ import annotations

from typing import Any

import pytest

from llmgw.core.cache import CacheWhen
from llmgw.gateway.cache.keys import NONE_SAID, OFF, bucket_key, cache_key, directives, eligible
from llmgw.gateway.wire.dialect import Api

ASK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "temperature": 0}


def key(payload: dict[str, Any], scope: str = "team:a", guard: str = "", api: Api = Api.CHAT) -> str:
    return cache_key(api, payload, scope, guard)


def test_how_an_answer_is_delivered_and_who_asked_are_not_the_key() -> None:
    same = [ASK, {**ASK, "stream": True, "stream_options": {"include_usage": True}},
            {**ASK, "user": "alice"}, dict(reversed(list(ASK.items())))]
    assert len({key(p) for p in same}) == 1


@pytest.mark.parametrize("change", [
    {"temperature": 0.0001}, {"max_tokens": 5}, {"model": "n"}, {"seed": 1},
    {"messages": [{"role": "user", "content": "hi!"}]}, {"response_format": {"type": "json_object"}},
])
def test_a_field_that_changes_the_answer_is_another_key(change: dict[str, Any]) -> None:
    assert key({**ASK, **change}) != key(ASK)


def test_another_tenant_another_dialect_or_another_output_guard_is_another_key() -> None:
    assert len({key(ASK), key(ASK, scope="team:b"), key(ASK, scope="key:k1"),
                key(ASK, guard="p1"), key(ASK, api=Api.MESSAGES)}) == 5


@pytest.mark.parametrize(("payload", "when", "ok"), [
    (ASK, CacheWhen.DETERMINISTIC, True),
    ({**ASK, "temperature": 0.5}, CacheWhen.DETERMINISTIC, False),
    ({**ASK, "temperature": 0.5, "seed": 7}, CacheWhen.DETERMINISTIC, True),
    ({**ASK, "temperature": 0.5, "seed": True}, CacheWhen.DETERMINISTIC, False),
    ({"model": "m", "messages": []}, CacheWhen.DETERMINISTIC, False),
    ({"model": "m", "messages": []}, CacheWhen.ALWAYS, True),
    ({**ASK, "n": 2}, CacheWhen.ALWAYS, False),
    ({**ASK, "logprobs": True}, CacheWhen.ALWAYS, False),
])
def test_which_requests_are_cached(payload: dict[str, Any], when: CacheWhen, ok: bool) -> None:
    assert eligible(Api.CHAT, payload, when, NONE_SAID) is ok


def test_embeddings_and_counts_are_not_cached() -> None:
    for api in (Api.EMBEDDINGS, Api.COUNT_TOKENS, Api.COMPLETIONS, Api.RERANK):
        assert not eligible(api, ASK, CacheWhen.ALWAYS, NONE_SAID)


def test_what_the_client_says() -> None:
    assert directives(None, "off") == OFF
    assert directives("no-cache", None).lookup is False
    assert directives("No-Store, max-age=0", None).store is False
    asked = directives(None, "on")
    assert asked.asked and eligible(Api.CHAT, {**ASK, "temperature": 1}, CacheWhen.DETERMINISTIC,
                                    asked)


def bucket(api: Api, payload: dict[str, Any], turns: list[tuple[str, str]]) -> str:
    return bucket_key(api, payload, turns, len(turns) - 1, "team:a", "")


IMAGE_A = {"type": "base64", "media_type": "image/png", "data": "AAAA"}
IMAGE_B = {**IMAGE_A, "data": "BBBB"}


def messages(text: str, image: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request about `image`."""
    return {"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"type": "image", "source": image},
                                                      {"type": "text", "text": text}]}]}


def responses(text: str, url: str) -> dict[str, Any]:
    """A Responses request about the file at `url`."""
    return {"model": "m", "instructions": "Be brief.", "input": [{
        "type": "message", "role": "user", "content": [
            {"type": "input_text", "text": text}, {"type": "input_file", "file_url": url}]}]}


def test_a_bucket_holds_every_part_that_is_not_text_in_each_dialect() -> None:
    turns = [("system", "Be brief."), ("user", "What is it?")]
    worded = [("system", "Be brief."), ("user", "what IS it")]
    assert bucket(Api.MESSAGES, messages("What is it?", IMAGE_A), turns) \
        == bucket(Api.MESSAGES, messages("what IS it", IMAGE_A), worded)
    assert bucket(Api.MESSAGES, messages("What is it?", IMAGE_A), turns) \
        != bucket(Api.MESSAGES, messages("What is it?", IMAGE_B), turns)
    assert bucket(Api.RESPONSES, responses("What is it?", "https://x/a.pdf"), turns) \
        == bucket(Api.RESPONSES, responses("what IS it", "https://x/a.pdf"), worded)
    assert bucket(Api.RESPONSES, responses("What is it?", "https://x/a.pdf"), turns) \
        != bucket(Api.RESPONSES, responses("What is it?", "https://x/b.pdf"), turns)


def test_text_is_one_bucket_however_it_is_put() -> None:
    turns = [("user", "hi")]
    plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    parts = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}
    assert bucket(Api.CHAT, plain, turns) == bucket(Api.CHAT, parts, turns)
