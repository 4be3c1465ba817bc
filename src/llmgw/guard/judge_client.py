"""Asking one judge for a verdict: exact prompt, tight grammar, bounded output, hard deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from llmgw.core import tracing
from llmgw.core.errors import LlmgwError, UpstreamError
from llmgw.core.guard import Direction, JudgeFormat, JudgeSpec, Verdict
from llmgw.guard import grammars, prompts, verdicts
from llmgw.guard.prompts import Turn


@dataclass(frozen=True)
class JudgeTarget:
    """Where a judge answers: a ready replica's root URL (llama-server's `/completion` lives there)."""

    spec: JudgeSpec
    base_url: str
    headers: dict[str, str] = field(default_factory=dict)


# Finds a ready replica of a judge; raises (NoReadyReplica, ModelNotFound) when there is none.
Locate = Callable[[str], JudgeTarget]


def defuse(fmt: JudgeFormat, text: str) -> str:
    """`text` with the format's turn tokens broken up, so a message cannot end its own turn.

    llama-server parses special tokens anywhere in a /completion prompt; a zero-width space after
    the token's first character makes it plain text to the tokenizer and changes nothing a judge
    needs to read.
    """
    for token in prompts.control_tokens_in(fmt, text):
        text = text.replace(token, token[0] + "\u200b" + token[1:])
    return text


def completion_body(spec: JudgeSpec, direction: Direction, turns: list[Turn]) -> dict[str, Any]:
    """llama-server `/completion` request for one judgment."""
    safe_turns = [Turn(t.role, defuse(spec.format, t.content)) for t in turns]
    return {
        "prompt": prompts.render(spec.format, direction, safe_turns,
                                 llama_guard_categories=spec.categories),
        "grammar": grammars.grammar(spec.format, direction, llama_guard_categories=spec.categories),
        "n_predict": grammars.n_predict(spec.format, direction),
        "temperature": 0,
        # The fixed policy text comes first in every prompt, so the engine reuses its KV cache.
        "cache_prompt": True,
        "stream": False,
    }


class JudgeClient:
    """Sends judgments to judge replicas over one pooled HTTP session."""

    def __init__(self, locate: Locate) -> None:
        self._locate = locate
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def judge(
        self, judge: str, direction: Direction, turns: list[Turn], timeout_s: float
    ) -> Verdict:
        """The judge's verdict within `timeout_s`; TimeoutError when it takes longer.

        On timeout the request is cancelled, which closes its connection: llama-server stops a
        generation whose client is gone, and `n_predict` bounds it in any case.
        """
        assert self._session is not None, "JudgeClient.start() was not called"
        target = self._locate(judge)
        body = orjson.dumps(completion_body(target.spec, direction, turns))
        headers = {"Content-Type": "application/json", **target.headers}
        tracing.current().inject(headers)  # the judgment's span, when the request is traced
        async with asyncio.timeout(timeout_s):
            try:
                async with self._session.post(
                    target.base_url + "/completion",
                    data=body,
                    headers=headers,
                ) as resp:
                    raw = await resp.read()
                    if resp.status != 200:
                        raise UpstreamError(f"judge {judge} answered {resp.status}")
            except LlmgwError:
                raise
            except aiohttp.ClientError as exc:
                raise UpstreamError(f"judge {judge} failed: {type(exc).__name__}") from exc
        try:
            content = orjson.loads(raw)["content"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise UpstreamError(f"judge {judge} answered something other than a completion") from exc
        return verdicts.parse(target.spec.format, direction, str(content),
                              llama_guard_categories=target.spec.categories)
