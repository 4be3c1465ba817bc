"""One record per API llmgw serves: where clients call it, where an upstream answers it, which
dialect reads it, what traces call it, whether the cache keeps its answers, whose error shape its
callers get and whether the hot edge answers it. The edges, the service, traces, translation and
the cache all read it here."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.gateway.wire import anthropic_messages, openai_chat, openai_responses
from llmgw.gateway.wire.dialect import Api, Wire


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API, as every layer of the data plane sees it."""

    path: str  # where clients call it
    upstream_path: str  # where it lives under an upstream's base URL (`…/v1`)
    wire: Wire  # the dialect that reads its requests
    operation: str  # `gen_ai.operation.name` (the conventions' well-known names where there is one)
    cacheable: bool  # whether the response cache keeps its answers (generation, in every dialect it replays)
    anthropic: bool  # whether its callers speak Anthropic's dialect (errors in Anthropic's shape)
    hot: bool  # whether the hot edge answers it (`api/hot_edge.py`)


APIS: dict[Api, ApiSpec] = {
    Api.CHAT: ApiSpec("/v1/chat/completions", "/chat/completions", openai_chat.CHAT, "chat",
                      cacheable=True, anthropic=False, hot=True),
    Api.COMPLETIONS: ApiSpec("/v1/completions", "/completions", openai_chat.COMPLETIONS,
                             "text_completion", cacheable=False, anthropic=False, hot=True),
    Api.EMBEDDINGS: ApiSpec("/v1/embeddings", "/embeddings", openai_chat.EMBEDDINGS, "embeddings",
                            cacheable=False, anthropic=False, hot=True),
    Api.RESPONSES: ApiSpec("/v1/responses", "/responses", openai_responses.WIRE, "chat",
                           cacheable=True, anthropic=False, hot=True),
    Api.MESSAGES: ApiSpec("/v1/messages", "/messages", anthropic_messages.WIRE, "chat",
                          cacheable=True, anthropic=True, hot=True),
    Api.COUNT_TOKENS: ApiSpec("/v1/messages/count_tokens", "/messages/count_tokens",
                              anthropic_messages.COUNT_TOKENS, "count_tokens", cacheable=False,
                              anthropic=True, hot=False),
    Api.RERANK: ApiSpec("/v1/rerank", "/rerank", openai_chat.RERANK, "rerank", cacheable=False,
                        anthropic=False, hot=False),
}
