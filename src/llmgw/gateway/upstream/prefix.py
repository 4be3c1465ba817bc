"""Prefix-aware choice: send a conversation where its earlier turns went, without asking anyone.

llama-server keeps what it has read in its slots and prompt cache, so a conversation's next turn
costs almost nothing on the replica that served its last one and the whole prompt again on any
other. Every turn of a conversation repeats its head (the system prompt, the tools, and the
messages up to its first user message), so the head names the conversation. Its hash ranks a
model's replicas by rendezvous (highest random weight) hashing: a pure function of the head and
the replicas' ids, so every worker and every server ranks them alike with no shared state, and a
replica gone or added moves only the conversations that ranked it first. Load is weighed in with
a bound (consistent hashing with bounded loads): a replica holding more than
ceil((1 + ε) · average) + a slack of 2 of the requests in flight is passed over for the next in
its ranking, so a popular head spreads instead of piling on one replica.

A client may name its session instead (`X-Llmgw-Session`, OpenAI's `prompt_cache_key`,
Anthropic's `metadata.user_id`): its name is hashed in place of the head.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from llmgw.gateway.upstream.table import Upstream

# Characters of rendered prompt per block (about 256 tokens): a text prompt's head is its first
# whole blocks, and the reason of a choice counts a head's blocks.
BLOCK_CHARS = 1024
# A prompt that is one string (text completions) has no first user message: its first blocks
# stand for its head, at most this many.
TEXT_HEAD_BLOCKS = 4
# How far above the average load a replica may go before the next in the ranking takes over:
# (1 + EPSILON) times the average, plus SLACK requests. Moving a request costs its whole prompt
# again (seconds on a CPU), waiting costs a request or two ahead of it: without the slack, two
# replicas at 4 requests in flight moved a conversation whenever 3 of the 4 were its replica's
# (measured: 5 of 40 later turns moved, each read in full).
EPSILON = 0.25
SLACK = 2
# The fields before the messages, in the order engines' chat templates render them.
_PREAMBLE = ("system", "instructions", "tools")


@dataclass(frozen=True, slots=True)
class Affinity:
    """What ranks a request's replicas: the hash of its conversation's head (or its session)."""

    key: bytes
    blocks: int  # how many blocks the head has (0: the key is a session's name)

    @property
    def source(self) -> str:
        """Words for what the key was made of, for the choice's reason."""
        return "session" if self.blocks == 0 else f"prefix of {self.blocks} blocks"


def session_of(payload: Mapping[str, Any], header: str | None) -> str | None:
    """The session the request names: the `X-Llmgw-Session` header, else OpenAI's
    `prompt_cache_key`, else Anthropic's `metadata.user_id`; None when it names none."""
    if header:
        return header
    key = payload.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key
    metadata = payload.get("metadata")
    if isinstance(metadata, dict):
        user = metadata.get("user_id")
        if isinstance(user, str) and user:
            return user
    return None


def head_text(payload: Mapping[str, Any]) -> bytes:
    """The conversation's head as canonical JSON (keys sorted): the preamble fields, then the
    messages up to and including the first user message (chat, Anthropic Messages, Responses'
    `input`); for a plain text prompt, its first whole blocks. Empty when the request has none,
    or holds what JSON cannot carry back out (an integer past 64 bits)."""
    parts: list[Any] = [[name, payload[name]] for name in _PREAMBLE if name in payload]
    messages = payload.get("messages", payload.get("input"))
    if isinstance(messages, list):
        for message in messages:
            parts.append(message)
            if isinstance(message, dict) and message.get("role") == "user":
                break
    else:
        text = messages if isinstance(messages, str) else payload.get("prompt")
        if isinstance(text, str):
            whole = min(len(text) // BLOCK_CHARS, TEXT_HEAD_BLOCKS) * BLOCK_CHARS
            parts.append(text[:whole] if whole else text)
    if not parts:
        return b""
    try:
        return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return b""


def affinity(payload: Mapping[str, Any], session: str | None = None) -> Affinity | None:
    """The request's affinity: its session's when it names one (`session_of`), else its head's;
    None when it has neither (nothing to keep together)."""
    named = session_of(payload, session)
    if named is not None:
        return Affinity(hashlib.blake2b(named.encode(), digest_size=16).digest(), 0)
    head = head_text(payload)
    if not head:
        return None
    # One hash of the whole head: the head is what every turn repeats whole, so hashing it in
    # blocks would add nothing but cost (a 6 KB head: 3 µs to render, a few to hash).
    return Affinity(hashlib.blake2b(head, digest_size=16).digest(), -(-len(head) // BLOCK_CHARS))


def rank(key: bytes, upstreams: tuple[Upstream, ...]) -> list[Upstream]:
    """The upstreams in `key`'s rendezvous order, first preferred: each scored by a hash of the
    key and its id, so removing one leaves the others' order as it was."""
    return sorted(upstreams, reverse=True, key=lambda up: hashlib.blake2b(
        key + up.id.encode(), digest_size=8).digest())


def near(upstreams: tuple[Upstream, ...], exclude: frozenset[str], found: Affinity,
         now: float, epsilon: float = EPSILON) -> tuple[Upstream, str] | None:
    """The first upstream in `found`'s ranking whose requests in flight are under the bound
    ceil((1 + ε) · (all in flight + 1) / replicas) + SLACK, with the reason of the choice; one recently
    refused only when no other is left; None when every upstream is excluded."""
    left = [up for up in upstreams if up.id not in exclude]
    if not left:
        return None
    live = [up for up in left if up.down_until <= now] or left
    bound = math.ceil((1 + epsilon) * (sum(up.outstanding for up in live) + 1) / len(live)) + SLACK
    ranked = rank(found.key, tuple(live))
    for place, up in enumerate(ranked):
        if up.outstanding + 1 <= bound:
            why = f"{found.source} → {up.id} (rendezvous), load {up.outstanding} < bound {bound}"
            if place:
                first = ranked[0]
                why += f"; {first.id} first but at load {first.outstanding}"
            return up, why
    # Unreachable: the least busy replica is at or under the average. Kept total all the same.
    up = min(ranked, key=lambda u: u.outstanding)
    return up, f"{found.source} → {up.id} (least outstanding: every replica at its bound)"
