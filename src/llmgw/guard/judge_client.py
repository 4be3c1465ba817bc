"""Asking one judge for a verdict: exact prompt, tight grammar, bounded output, hard deadline,
on a slot of one of its replicas that the judge's queue in this gateway hands out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson

from llmgw.core import judges, tracing
from llmgw.core.errors import LlmgwError, NoReadyReplica, UpstreamError
from llmgw.core.guard import Direction, JudgeFormat, JudgeLoad, JudgeSpec, Verdict
from llmgw.core.types import Model
from llmgw.engines import llamacpp
from llmgw.guard import grammars, prompts, verdicts
from llmgw.guard.admission import PromptEval
from llmgw.guard.judge_queue import UNSHARED, ClusterSlots, JudgeQueue, SlotLease
from llmgw.guard.prompts import Turn

# Slots assumed for a replica whose profile does not say (`--parallel`): llama-server's own
# choice is not known here, so judgments are not pinned to slots there.
DEFAULT_SLOTS = 1


@dataclass(frozen=True)
class JudgeTarget:
    """Where a judge answers: a ready replica's root URL (llama-server's `/completion` lives there).

    `slots` is the replica's `--parallel`; None when its profile does not say, and then
    judgments are admitted as if it had `DEFAULT_SLOTS` and llama-server picks the slot.
    `lanes` is how many of them it runs at once when fewer (`llamacpp.lanes`); None: all.
    `used` is told when a judgment goes to the replica and when its answer comes back: a judge
    that judges every request is in use, not idle, to the console and to the replica keeper.
    """

    spec: JudgeSpec
    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    id: str = ""
    slots: int | None = None
    lanes: int | None = None
    used: Callable[[], None] = field(default=lambda: None, compare=False, repr=False)


# The ready replicas of a judge; raises (NoReadyReplica, ModelNotFound) when there is none.
Locate = Callable[[str], Sequence[JudgeTarget]]


class JudgeObserver(Protocol):
    """What the client tells the metrics about each judgment a judge answered."""

    def judge_served(self, judge: str, seconds: float) -> None:
        """It answered `seconds` after it was sent (queueing not counted)."""

    def judge_prompt(self, judge: str, evaluated: int, cached: int) -> None:
        """It evaluated `evaluated` prompt tokens and took `cached` from its slot's KV cache."""


class _Unobserved:
    def judge_served(self, judge: str, seconds: float) -> None:
        pass

    def judge_prompt(self, judge: str, evaluated: int, cached: int) -> None:
        pass


def prompt_tokens(answer: Any) -> tuple[int, int] | None:
    """(evaluated, cached) prompt tokens from a llama-server answer's `timings` (`prompt_n`,
    `cache_n`); None when it has none."""
    timings = answer.get("timings") if isinstance(answer, dict) else None
    if not isinstance(timings, dict):
        return None
    evaluated, cached = timings.get("prompt_n"), timings.get("cache_n")
    if not isinstance(evaluated, int) or not isinstance(cached, int):
        return None
    # An engine's numbers are clamped like any upstream's.
    return max(evaluated, 0), max(cached, 0)


def prompt_eval(answer: dict[str, Any]) -> PromptEval | None:
    """What the engine spent on the prompt (`timings.prompt_ms`, `prompt_n`, `cache_n`); None
    when it did not say."""
    tokens = prompt_tokens(answer)
    ms = answer["timings"].get("prompt_ms") if tokens is not None else None
    if tokens is None or not isinstance(ms, int | float):
        return None
    return PromptEval(max(float(ms), 0.0) / 1000, *tokens)


def _completion(judge: str, raw: bytes) -> dict[str, Any]:
    """A llama-server `/completion` answer: an object with a `content`."""
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(f"judge {judge} answered something other than a completion") from exc
    if not isinstance(answer, dict) or "content" not in answer:
        raise UpstreamError(f"judge {judge} answered something other than a completion")
    return answer


def defuse(fmt: JudgeFormat, text: str) -> str:
    """`text` with the format's turn tokens broken up, so a message cannot end its own turn.

    llama-server parses special tokens anywhere in a /completion prompt; a zero-width space after
    the token's first character makes it plain text to the tokenizer and changes nothing a judge
    needs to read.
    """
    for token in prompts.control_tokens_in(fmt, text):
        text = text.replace(token, token[0] + "\u200b" + token[1:])
    return text


def completion_body(spec: JudgeSpec, direction: Direction, turns: list[Turn], *,
                    tool: bool = False) -> dict[str, Any]:
    """llama-server `/completion` request for one judgment (of an MCP tool call: `tool`)."""
    safe_turns = [Turn(t.role, defuse(spec.format, t.content)) for t in turns]
    categories = prompts.tool_categories(spec.categories, tool)
    return {
        "prompt": prompts.render(spec.format, direction, safe_turns,
                                 llama_guard_categories=spec.categories, tool=tool),
        "grammar": grammars.grammar(spec.format, direction, llama_guard_categories=categories),
        "n_predict": grammars.n_predict(spec.format, direction),
        "temperature": 0,
        # The fixed policy text comes first in every prompt, so the engine reuses its KV cache.
        "cache_prompt": True,
        "stream": False,
    }


# What a judge replica is asked before it is ready (`node.supervisor.WarmUp`): an input judgment,
# the direction every policy judges by default, whose fixed head each later one shares.
WARM_UP_TURNS = (Turn("user", "Hello."),)


def warm_up_bodies(spec: JudgeSpec, slots: int | None) -> list[bytes]:
    """The `/completion` bodies that warm a replica of `spec` with `slots` slots: one judgment
    pinned to each slot, so every slot's KV cache holds the judge's fixed prompt; one unpinned
    when the slots are not known (llama-server picks)."""
    body = completion_body(spec, Direction.INPUT, list(WARM_UP_TURNS))
    if slots is None:
        return [orjson.dumps(body)]
    return [orjson.dumps({**body, "id_slot": i}) for i in range(slots)]


def warm_up(
    enabled: Callable[[], Awaitable[list[JudgeSpec]]] | None = None,
) -> Callable[[Model, int | None], Awaitable[list[bytes]]]:
    """The node agent's warm-up of a judge's replica (`node.agent.WarmBodies`), in the judge's
    own prompt format: an enabled judge's (`enabled`, read from the store where there is one)
    wins over the library's, as on the request path. A judge neither knows is warmed in the
    default format: its weights are paged in all the same, though its prompt is not cached."""

    async def bodies(model: Model, slots: int | None) -> list[bytes]:
        spec = next((j for j in await enabled() if j.name == model.name), None) if enabled else None
        spec = spec or judges.KNOWN.get(model.name) or JudgeSpec(name=model.name, repo="", file="",
                                                                 size_gb=0.0)
        return warm_up_bodies(spec, slots)

    return bodies


class JudgeClient:
    """Sends judgments to judge replicas over one pooled HTTP session, each on a slot its
    judge's queue hands out (see `admission` for the rules)."""

    def __init__(
        self, locate: Locate, monotonic: Callable[[], float] = time.monotonic,
        observe: JudgeObserver | None = None, lease: SlotLease = UNSHARED,
        cluster: ClusterSlots | None = None,
    ) -> None:
        self._locate = locate
        self._lease = lease  # the slots this server's other processes hold
        self._cluster = cluster  # the slots the install's other servers hold
        self._monotonic = monotonic
        self._observe = observe or _Unobserved()  # service times and cache use, for the metrics
        self._queues: dict[str, JudgeQueue] = {}
        self._targets: dict[str, dict[str, JudgeTarget]] = {}
        self._session: aiohttp.ClientSession | None = None

    def loads(self) -> dict[str, JudgeLoad]:
        """Each judge's slots, queue and counters in this gateway."""
        return {name: q.load() for name, q in sorted(self._queues.items())}

    def _queue(self, judge: str, targets: Sequence[JudgeTarget]) -> JudgeQueue:
        queue = self._queues.get(judge)
        if queue is None:
            queue = self._queues[judge] = JudgeQueue(judge, self._monotonic,
                                                     self._observe.judge_served, self._lease,
                                                     self._cluster)
        self._targets[judge] = {t.id: t for t in targets}
        queue.sync({t.id: t.slots or DEFAULT_SLOTS for t in targets},
                   {t.id: t.lanes for t in targets if t.lanes is not None})
        return queue

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        )

    async def close(self) -> None:
        for queue in self._queues.values():
            queue.close()
        if self._session is not None:
            await self._session.close()

    async def judge(
        self, judge: str, direction: Direction, turns: list[Turn], timeout_s: float, *,
        tool: bool = False,
    ) -> Verdict:
        """The judge's verdict within `timeout_s`; TimeoutError when it takes longer, JudgeShed
        at once when it could not be answered in time. `tool`: the turns are an MCP tool call's
        (`prompts.tool_turns`), judged with the tool prompt.

        The time waiting for a slot counts against `timeout_s`. On timeout the request is
        cancelled, which closes its connection and frees its slot here at once: llama-server
        stops a generation whose client is gone, and `n_predict` bounds it in any case.
        """
        assert self._session is not None, "JudgeClient.start() was not called"
        targets = self._locate(judge)
        if not targets:
            raise NoReadyReplica(f"judge {judge} has no ready replica")
        request = completion_body(targets[0].spec, direction, turns, tool=tool)
        queue = self._queue(judge, targets)
        headers = {"Content-Type": "application/json"}
        tracing.current().inject(headers)  # the judgment's span, when the request is traced
        async with asyncio.timeout(timeout_s) as budget:
            slot = await queue.acquire(request["prompt"], self._monotonic() + timeout_s)
            sent = self._monotonic()
            served: float | None = None
            spent: PromptEval | None = None
            try:
                target = self._targets[judge].get(slot.replica)
                if target is None:  # the replica left the routing table while this waited
                    raise UpstreamError(f"judge {judge}: its replica is gone")
                if target.slots is not None:
                    # The slot whose KV cache holds the longest part of this prompt.
                    request["id_slot"] = slot.index
                target.used()
                async with self._session.post(
                    target.base_url + llamacpp.COMPLETION_PATH,
                    data=orjson.dumps(request),
                    headers={**headers, **target.headers},
                ) as resp:
                    raw = await resp.read()
                    target.used()
                    if resp.status != 200:
                        raise UpstreamError(f"judge {judge} answered {resp.status}")
                served = self._monotonic() - sent
                answer = _completion(judge, raw)
                spent = prompt_eval(answer)
            except LlmgwError:
                raise
            except aiohttp.ClientError as exc:
                raise UpstreamError(f"judge {judge} failed: {type(exc).__name__}") from exc
            finally:
                # A judge that ran out of budget took at least this long: the shed rule learns
                # a judge slower than the budget from its timeouts too.
                outlasted = self._monotonic() - sent if served is None and budget.expired() else None
                queue.release(slot, served, outlasted, spent)
        content = answer["content"]
        if (tokens := prompt_tokens(answer)) is not None:
            self._observe.judge_prompt(judge, *tokens)
        spec = targets[0].spec
        return verdicts.parse(spec.format, direction, str(content),
                              llama_guard_categories=prompts.tool_categories(spec.categories, tool))
