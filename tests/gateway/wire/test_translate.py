"""Which upstream path serves a call, and what its answer goes through on the way back."""

from __future__ import annotations

from llmgw.core.types import ProviderApi
from llmgw.gateway.wire.dialect import Api
from llmgw.gateway.wire.translate import plan
from tests.factories import gemma_model, remote_model


def test_llama_servers_own_messages_answers_go_back_with_anthropics_ids() -> None:
    path, translation = plan(Api.MESSAGES, gemma_model())
    assert path == "/messages" and translation is not None and translation.upstream == Api.MESSAGES
    asked = {"model": "gemma3-270m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    assert translation.request(asked, "gemma3-270m") == asked  # the request goes as it was
    answer = {"id": "chatcmpl-OXIG8", "type": "message", "content": [], "model": "m.gguf"}
    assert translation.answer(answer, "gemma3-270m") == {**answer, "id": "msg_OXIG8"}


def test_answers_that_need_no_touch_pass_as_they_came() -> None:
    claude = remote_model("claude", api=ProviderApi.ANTHROPIC)
    for api, model in ((Api.MESSAGES, claude), (Api.COUNT_TOKENS, gemma_model()), (Api.CHAT, gemma_model())):
        assert plan(api, model)[1] is None, (api, model.name)
