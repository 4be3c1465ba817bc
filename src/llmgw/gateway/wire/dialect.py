"""What every dialect module provides, so guard, limits and usage never read one dialect's JSON.

A dialect module (`openai_chat`, `openai_responses`, `anthropic_messages`) reads a request into an
`Ask`, reads an answer (whole, or one streamed event) into text, says where its usage counts are,
and writes its own errors and blocked ending. It builds one `Wire` value from its functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from llmgw.core.errors import LlmgwError
from llmgw.guard.prompts import Turn


class Api(StrEnum):
    """What a client called: the `api` label of metrics, and which dialect reads the request."""

    CHAT = "chat_completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    RESPONSES = "responses"
    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"
    RERANK = "rerank"


# Not frozen: made on every request, and a frozen dataclass sets each field through
# `object.__setattr__` (five times the cost). Nothing changes one once made but `turns`, which
# replaces how to read the conversation with what it read.
@dataclass(slots=True)
class Ask:
    """What guard, limits and usage need of one request, whatever its dialect."""

    model: str
    # The conversation as judges see it, or how to read it (`turns`): most requests are never
    # judged, so most never need it.
    _turns: list[Turn] | Callable[[], list[Turn]]
    # The most the request lets the model generate; None when it does not say.
    max_tokens: int | None
    stream: bool

    @property
    def turns(self) -> list[Turn]:
        """The conversation as judges see it (system, user and assistant turns; tool results as
        user), read when first asked for."""
        turns = self._turns
        if callable(turns):
            turns = self._turns = turns()
        return turns


# Compared and hashed by identity (one per dialect): the usage tap looks up what it made of a
# format on every request, and a field-by-field hash cost more than the lookup.
@dataclass(frozen=True, eq=False)
class UsageFormat:
    """Where a dialect's answers carry their token counts, as raw JSON bytes."""

    prompt: bytes  # the key of the prompt count, quoted: b'"prompt_tokens"'
    completion: bytes  # b'"completion_tokens"'
    # Markers whose count in a stream is the number of events carrying text (one token each
    # from llama.cpp), written without spaces as engines write them: b'"content":"'.
    text_markers: tuple[bytes, ...]
    # True when a stream says its prompt count in its first event rather than its last.
    prompt_first: bool = False
    # Counts that are part of the prompt too, when present (Anthropic's cached prompt tokens are
    # not in its `input_tokens`).
    prompt_also: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class SentSoFar:
    """What of a stream reached the client before the guard stopped it: a dialect whose events
    are numbered or name their stream (Responses) continues from there."""

    first: bytes = b""  # the first event sent, without its blank line (b"" when none)
    events: int = 0  # how many events were sent


NOTHING_SENT = SentSoFar()


@dataclass(frozen=True)
class Wire:
    """One dialect: its functions, as a value the request path passes around."""

    name: str
    usage: UsageFormat
    # Validate a parsed request body and read what the request path needs; InvalidRequest (400,
    # naming the field) when it is not a request of this dialect.
    read: Callable[[dict[str, Any]], Ask]
    # The generated text of a whole answer body ('' when there is none or it is not readable).
    answer_text: Callable[[bytes], str]
    # The generated text one streamed SSE event carries (without its blank line), '' for none.
    event_text: Callable[[bytes], str]
    # How a stream the guard stopped ends, in this dialect (SSE bytes, blank lines included):
    # arguments are the catalog model name, the GuardBlocked/GuardUnavailable error and what
    # was sent before.
    blocked_ending: Callable[[str, LlmgwError, SentSoFar], bytes]
    # The event that ends a stream whose upstream broke after the first byte.
    stream_broke: Callable[[], bytes]
    # An error response body in this dialect for `error` (status is error.status).
    error_body: Callable[[LlmgwError], bytes]
