"""Which upstream path serves a call, and the translation between dialects when the upstream does
not speak the client's: requests, whole answers and streams, composed when it takes two steps
(Responses → chat completions → Messages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from llmgw.core.errors import InvalidRequest
from llmgw.core.types import Model, ProviderApi, RemoteSource
from llmgw.gateway.wire import anthropic_messages, messages_chat, openai_chat, responses_chat
from llmgw.gateway.wire.apis import APIS
from llmgw.gateway.wire.dialect import Api, Wire

# Where each API lives under an upstream's base URL (`…/v1`).
PATHS = {api: spec.upstream_path for api, spec in APIS.items()}

# What each kind of upstream answers natively. llama-server answers every API llmgw serves, but
# its Responses stream lacks the sequence numbers and indexes the openai SDK's stream helper needs:
# llmgw serves Responses from chat completions everywhere, one translation it controls.
SPEAKS: dict[ProviderApi | None, frozenset[Api]] = {
    None: frozenset(Api) - {Api.RESPONSES},
    ProviderApi.OPENAI: frozenset({Api.CHAT, Api.COMPLETIONS, Api.EMBEDDINGS, Api.RERANK}),
    ProviderApi.ANTHROPIC: frozenset({Api.MESSAGES, Api.COUNT_TOKENS}),
}


class StreamTranslator(Protocol):
    """Turns one dialect's SSE events into another's."""

    def feed(self, event: bytes) -> list[bytes]:
        """One event in (without its blank line); whole events out (blank lines included)."""
        ...

    def end(self) -> list[bytes]:
        """The upstream's stream ended: what the client's stream still needs to be complete."""
        ...


@dataclass(frozen=True)
class Translation:
    """From the client's dialect to the upstream's, and the answer back."""

    upstream: Api  # the API called on the upstream
    wire: Wire  # the upstream's dialect: where its answers carry usage and text
    # (client payload, upstream model name) → upstream payload
    request: Callable[[dict[str, Any], str], dict[str, Any]]
    # (upstream answer, catalog model name) → client answer
    answer: Callable[[dict[str, Any], str], dict[str, Any]]
    # catalog model name → a translator for one stream
    stream: Callable[[str], StreamTranslator]


class _Chained:
    """Two stream translators one after the other."""

    def __init__(self, first: StreamTranslator, second: StreamTranslator) -> None:
        self._first, self._second = first, second

    def feed(self, event: bytes) -> list[bytes]:
        return [out for mid in self._first.feed(event) for out in self._second.feed(_bare(mid))]

    def end(self) -> list[bytes]:
        out = [o for mid in self._first.end() for o in self._second.feed(_bare(mid))]
        return out + self._second.end()


def _bare(event: bytes) -> bytes:
    return event.rstrip(b"\n")


def chain(outer: Translation, inner: Translation) -> Translation:
    """`outer` (client → middle) then `inner` (middle → upstream)."""
    return Translation(
        upstream=inner.upstream,
        wire=inner.wire,
        request=lambda payload, model: inner.request(outer.request(payload, model), model),
        answer=lambda answer, model: outer.answer(inner.answer(answer, model), model),
        stream=lambda model: _Chained(inner.stream(model), outer.stream(model)),
    )


_MESSAGES_OVER_CHAT = Translation(Api.CHAT, openai_chat.CHAT, messages_chat.messages_to_chat,
                                  messages_chat.chat_answer_as_message, messages_chat.ChatStreamAsMessages)
_CHAT_OVER_MESSAGES = Translation(Api.MESSAGES, anthropic_messages.WIRE, messages_chat.chat_to_messages,
                                  messages_chat.message_answer_as_chat, messages_chat.MessagesStreamAsChat)
_RESPONSES_OVER_CHAT = Translation(Api.CHAT, openai_chat.CHAT, responses_chat.responses_to_chat,
                                   responses_chat.chat_answer_as_response,
                                   responses_chat.ChatStreamAsResponses)


def _as_asked(payload: dict[str, Any], model: str) -> dict[str, Any]:
    return {**payload, "model": model}


# llama-server answers Messages itself but names each answer as a chat completion (`chatcmpl-…`),
# where Anthropic's are `msg_…` (clients and their logs read the id): only the id is changed.
_MESSAGES_RENAMED = Translation(Api.MESSAGES, anthropic_messages.WIRE, _as_asked,
                                messages_chat.renamed_message, messages_chat.MessageIdStream)

# Native answers that are touched on their way back all the same: (client API, provider) → how.
RENAMED: dict[tuple[Api, ProviderApi | None], Translation] = {(Api.MESSAGES, None): _MESSAGES_RENAMED}

# (client API, upstream's provider API; None for llama-server) → translation.
TRANSLATIONS: dict[tuple[Api, ProviderApi | None], Translation] = {
    (Api.MESSAGES, ProviderApi.OPENAI): _MESSAGES_OVER_CHAT,
    (Api.CHAT, ProviderApi.ANTHROPIC): _CHAT_OVER_MESSAGES,
    (Api.RESPONSES, None): _RESPONSES_OVER_CHAT,
    (Api.RESPONSES, ProviderApi.OPENAI): _RESPONSES_OVER_CHAT,
    (Api.RESPONSES, ProviderApi.ANTHROPIC): chain(_RESPONSES_OVER_CHAT, _CHAT_OVER_MESSAGES),
}


def speaks(model: Model) -> ProviderApi | None:
    """The provider API of a remote model; None for a model llmgw serves itself."""
    return model.source.api if isinstance(model.source, RemoteSource) else None


def plan(api: Api, model: Model) -> tuple[str, Translation | None]:
    """The upstream path for `api` on `model`, and the translation it needs (None: the answer
    passes as it came)."""
    provider = speaks(model)
    if api in SPEAKS[provider]:
        return PATHS[api], RENAMED.get((api, provider))
    translation = TRANSLATIONS.get((api, provider))
    if translation is None:
        spoken = provider.value if provider is not None else "its engine's"
        raise InvalidRequest(
            f"model '{model.name}' is served by a provider that speaks the {spoken} API only, and "
            f"llmgw does not translate {api.value} requests to it", param="model")
    return PATHS[translation.upstream], translation


def from_chat(api: Api) -> Translation | None:
    """How an answer made as a chat completion reaches a client of `api` (None: as it is): as it
    would from an upstream that speaks chat completions only. The cache replays through it."""
    return None if api == Api.CHAT else TRANSLATIONS.get((api, ProviderApi.OPENAI))
