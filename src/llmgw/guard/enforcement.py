"""Enforcing guard policies: which apply, asking their judges within budget, deciding.

A request is blocked when any judge of any applying policy finds it unsafe (Controversial counts
as unsafe under `controversial: strict`; only `block_categories` block when the policy lists
some). A judge that cannot answer within the policy's `budget_ms` (timeout, garbage, no replica)
is a failure, and so is one shed because its judge could not have answered in time (its slots
busy, the queue ahead too long: `admission`); the policy's `on_failure` decides: `closed`
refuses, `open` lets through. Every judgment goes to the verdict log, off the request path,
under the judge that answered.

A judge that needs a GPU and has no ready replica (the cluster has no GPU, or its replica is not
up yet) is stood in for by the default judge, which the judge keeper serves in that case, as long
as the default judge has a ready replica.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from llmgw.core import tracing
from llmgw.core.errors import (
    GuardBlocked,
    GuardUnavailable,
    JudgeShed,
    JudgeUnparseable,
    LlmgwError,
    ModerationUnavailable,
)
from llmgw.core.guard import (
    Controversial,
    Direction,
    JudgeSpec,
    OnFailure,
    Outcome,
    Policy,
    Safety,
    Verdict,
    VerdictRecord,
)
from llmgw.core.judges import DEFAULT_JUDGE
from llmgw.core.tracing import Kind
from llmgw.core.types import tool_matches
from llmgw.guard.judge_client import JudgeClient
from llmgw.guard.prompts import Turn

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuardView:
    """The guard's configuration as the request path sees it (rebuilt on revision changes)."""

    enabled: bool = False
    log_prompts: bool = False
    policies: tuple[Policy, ...] = ()
    judges: dict[str, JudgeSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestInfo:
    """What the verdict log says about the request a judgment was for."""

    model: str
    key_name: str
    key_label: str
    request_id: str = ""


def applying(view: GuardView, model: str, key_name: str, direction: Direction) -> list[Policy]:
    """Enabled policies covering this model and key that check this direction."""
    return _covering(view, key_name, direction,
                     lambda p: any(fnmatch.fnmatchcase(model, pat) for pat in p.models))


def applying_tools(
    view: GuardView, server: str, tool: str, key_name: str, direction: Direction
) -> list[Policy]:
    """Enabled policies covering this MCP tool (`Policy.tools`, over `SERVER/TOOL`) and key that
    check this direction: input judges a call's arguments, output its result. A policy's
    `models` say nothing about tools, and one that names no tools covers none."""
    return _covering(view, key_name, direction, lambda p: tool_matches(p.tools, server, tool))


def _covering(view: GuardView, key_name: str, direction: Direction,
              covers: Callable[[Policy], bool]) -> list[Policy]:
    """Enabled policies that `covers` the call, name the key and check this direction."""
    if not view.enabled:
        return []
    return [
        p
        for p in view.policies
        if p.enabled
        and (p.input if direction == Direction.INPUT else p.output)
        and covers(p)
        and any(fnmatch.fnmatchcase(key_name, pat) for pat in p.keys)
    ]


# What a judgment is about, in the words a refusal uses: (input, output).
_CHAT_SUBJECTS = ("request", "response")
_TOOL_SUBJECTS = ("tool call", "tool's result")


def unsafe_categories(policy: Policy, verdict: Verdict) -> list[str] | None:
    """The categories that block under `policy`, or None when the verdict lets it pass."""
    if verdict.safety == Safety.SAFE:
        return None
    if verdict.safety == Safety.CONTROVERSIAL and policy.controversial == Controversial.LOOSE:
        return None
    cats = verdict.categories or [verdict.safety.value]
    if not policy.block_categories:
        return cats
    wanted = {c.lower() for c in policy.block_categories}
    hit = [c for c in cats if c.lower() in wanted]
    return hit or None


@dataclass(frozen=True)
class Answer:
    judge: str
    outcome: Outcome
    latency_ms: float
    verdict: Verdict | None = None
    error: str = ""
    # Shed: how long until a judgment like it would likely be let in (ms).
    retry_after_ms: float | None = None


class Guard:
    """Judges requests and responses for the gateway."""

    def __init__(
        self,
        client: JudgeClient,
        view: Callable[[], GuardView],
        record: Callable[[VerdictRecord], None],
        now: Callable[[], datetime],
        monotonic: Callable[[], float],
        ready: Callable[[str], bool] = lambda _judge: True,
    ) -> None:
        self._client = client
        self._view = view
        self._record = record
        self._now = now
        self._monotonic = monotonic
        self._ready = ready  # whether a judge has a ready replica right now

    def policies(self, model: str, key_name: str, direction: Direction) -> list[Policy]:
        return applying(self._view(), model, key_name, direction)

    def tool_policies(self, server: str, tool: str, key_name: str, direction: Direction) -> list[Policy]:
        """The policies covering an MCP tool call (`applying_tools`)."""
        return applying_tools(self._view(), server, tool, key_name, direction)

    async def check(
        self, policies: list[Policy], direction: Direction, turns: list[Turn], info: RequestInfo,
        *, tool: bool = False,
    ) -> bool:
        """Return when every policy lets the turns through; raise GuardBlocked or GuardUnavailable.
        True when each judge of each policy gave a verdict; False when a policy let the turns
        through without one (`on_failure: open`): a pass the judges never gave. `tool`: the
        turns are an MCP tool call's (`prompts.tool_turns`), judged with the tool prompt."""
        if not policies:
            return True
        results = await asyncio.gather(*(self._policy(p, direction, turns, info, tool)
                                         for p in policies))
        for blocked, _ in results:
            if blocked is not None:
                raise blocked
        return all(judged for _, judged in results)

    def moderation_judges(self, key_name: str) -> tuple[list[str], int]:
        """The judges of the input policies covering this key (any model), and the tightest
        budget among them; ModerationUnavailable (400) when no policy names one."""
        view = self._view()
        policies = [
            p for p in view.policies
            if view.enabled and p.enabled and p.input
            and any(fnmatch.fnmatchcase(key_name, k) for k in p.keys)
        ]
        judges = sorted({j for p in policies for j in p.judges})
        if not judges:
            raise ModerationUnavailable(
                "no enabled guard policy names a judge for this key: set one with "
                "`llmgw ctl guard policy set`"
            )
        return judges, min(p.budget_ms for p in policies)

    async def moderate(self, judges: list[str], text: str, budget_ms: int) -> list[Answer]:
        """Ask each judge (or its stand-in) about `text` as a user prompt (for /v1/moderations)."""
        turns = [Turn("user", text)]
        return list(
            await asyncio.gather(*(self.ask(j, Direction.INPUT, turns, budget_ms)
                                   for j in self._answering(judges)))
        )

    def answering(self, judge: str) -> str:
        """The judge that answers for `judge`: itself, or the default judge while `judge` needs
        a GPU and has no ready replica and the default judge has one."""
        spec = self._view().judges.get(judge)
        if (spec is not None and spec.gpu and judge != DEFAULT_JUDGE and not self._ready(judge)
                and self._ready(DEFAULT_JUDGE)):
            return DEFAULT_JUDGE
        return judge

    def _answering(self, judges: list[str]) -> list[str]:
        # One question per answering judge: two judges stood in for by one are asked once.
        return list(dict.fromkeys(self.answering(j) for j in judges))

    async def _policy(
        self, policy: Policy, direction: Direction, turns: list[Turn], info: RequestInfo,
        tool: bool,
    ) -> tuple[LlmgwError | None, bool]:
        """What `policy` makes of the turns: the error that refuses them (None: they pass), and
        whether every judge gave a verdict."""
        answers = await asyncio.gather(
            *(self.ask(j, direction, turns, policy.budget_ms, policy.name, tool=tool)
              for j in self._answering(policy.judges))
        )
        subject = (_TOOL_SUBJECTS if tool else _CHAT_SUBJECTS)[direction == Direction.OUTPUT]
        blocked: GuardBlocked | None = None
        failed: Answer | None = None
        for a in answers:
            cats = unsafe_categories(policy, a.verdict) if a.verdict is not None else None
            if a.verdict is None:
                failed = failed or a
            elif cats is not None and blocked is None:
                blocked = GuardBlocked(
                    f"the {subject} was blocked by guard policy '{policy.name}': judge {a.judge} "
                    f"found it unsafe ({', '.join(cats)})",
                    param="messages" if direction == Direction.INPUT else None,
                )
        let_through = blocked is None and failed is not None and policy.on_failure == OnFailure.OPEN
        text = _joined(turns) if self._view().log_prompts else None
        for a in answers:
            outcome = a.outcome
            if a.verdict is not None:  # the policy decides whether Controversial was unsafe
                unsafe = unsafe_categories(policy, a.verdict) is not None
                outcome = Outcome.UNSAFE if unsafe else Outcome.SAFE
            self._record(
                VerdictRecord(
                    at=self._now(), policy=policy.name, judge=a.judge, direction=direction,
                    outcome=outcome, categories=a.verdict.categories if a.verdict else [],
                    let_through=let_through and a.verdict is None, latency_ms=round(a.latency_ms, 1),
                    model=info.model, key=info.key_label, request_id=info.request_id, text=text,
                )
            )
        if blocked is not None:
            return blocked, failed is None
        if failed is not None and policy.on_failure == OnFailure.CLOSED:
            refused = GuardUnavailable(
                f"guard policy '{policy.name}' could not judge the {subject} within "
                f"{policy.budget_ms} ms (judge {failed.judge}: {failed.error}); it fails closed"
            )
            if failed.retry_after_ms is not None:  # shed: the client is told when to come back
                refused.retry_after_s = max(1, math.ceil(failed.retry_after_ms / 1000))
            return refused, False
        return None, failed is None

    async def ask(self, judge: str, direction: Direction, turns: list[Turn], budget_ms: int,
                  policy: str = "", *, tool: bool = False) -> Answer:
        """One judge's answer within `budget_ms`, failures included (never raises for them),
        under a span of its own (the judged text in it only when `log_prompts` is on).

        Every judgment goes through here: a policy's, a stream window's, a moderation's, an
        operator's (`ctl guard eval`). A judgment the judge could not answer in time is not sent
        and fails as `failed_shed` at once (see `admission`)."""
        attributes = {"llmgw.guard.judge": judge, "llmgw.guard.direction": direction.value,
                      "llmgw.guard.budget_ms": budget_ms, "llmgw.guard.policy": policy}
        with tracing.spanned(f"judge {judge}", Kind.CLIENT, attributes) as span:
            answer = await self._ask(judge, direction, turns, budget_ms, tool)
            if span.recording:
                span.update({"llmgw.guard.outcome": answer.outcome.value,
                             "llmgw.guard.latency_ms": round(answer.latency_ms, 1)})
                if answer.verdict is not None and answer.verdict.categories:
                    span.set("llmgw.guard.categories", answer.verdict.categories)
                if answer.error:
                    span.fail(answer.outcome.value)
                if self._view().log_prompts:
                    span.set("llmgw.guard.text", _joined(turns))
            return answer

    async def _ask(self, judge: str, direction: Direction, turns: list[Turn], budget_ms: int,
                   tool: bool) -> Answer:
        start = self._monotonic()

        def took() -> float:
            return (self._monotonic() - start) * 1000

        try:
            verdict = await self._client.judge(judge, direction, turns, budget_ms / 1000, tool=tool)
        except TimeoutError:
            return Answer(judge, Outcome.FAILED_TIMEOUT, took(), error="timed out")
        except JudgeShed as exc:
            return Answer(judge, Outcome.FAILED_SHED, took(), error=exc.message,
                          retry_after_ms=round(exc.come_back_s * 1000, 1))
        except JudgeUnparseable as exc:
            return Answer(judge, Outcome.FAILED_UNPARSEABLE, took(), error=exc.message)
        except LlmgwError as exc:  # no ready replica, unknown judge
            return Answer(judge, Outcome.FAILED_ERROR, took(), error=exc.message)
        outcome = Outcome.SAFE if verdict.safety == Safety.SAFE else Outcome.UNSAFE
        return Answer(judge, outcome, took(), verdict=verdict)


def _joined(turns: list[Turn]) -> str:
    return "\n".join(f"{t.role}: {t.content}" for t in turns)
