"""Guard administration in the admin API: `/admin/v1/guard/*`."""

from __future__ import annotations

from typing import Any

from llmgw.api.admin.models import by
from llmgw.api.appkeys import GUARD, GUARD_ADMIN, JUDGE_STATUS
from llmgw.api.endpoints import Call, Endpoint
from llmgw.api.openapi import POLICY_BODY
from llmgw.core.guard import Direction, JudgeSpec, Policy, VerdictRecord
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.guard import (
    EnableJudge,
    GuardOut,
    JudgeStatusOut,
    JudgmentRequest,
    SwitchesOut,
    SwitchRequest,
    VerdictOut,
    VerdictQuery,
)
from llmgw.guard.prompts import Turn

TAG = "guard"


def _policy_body(payload: dict[str, Any], params: Any) -> dict[str, Any]:
    """A policy body takes its name from the path; the server sets who and when."""
    body = {k: v for k, v in payload.items() if k not in ("by", "updated_at")}
    return {**body, "name": params["name"]}


async def overview(call: Call[None, None]) -> GuardOut:
    ga = call.app[GUARD_ADMIN]
    return GuardOut(**await ga.switches(), policies=await ga.policies())


async def set_switches(call: Call[SwitchRequest, None]) -> SwitchesOut:
    ga = call.app[GUARD_ADMIN]
    for name, value in call.body.model_dump(exclude_none=True).items():
        await ga.set_switch(name, value)
    return SwitchesOut(**await ga.switches())


async def list_policies(call: Call[None, None]) -> DataList[Policy]:
    return DataList(data=await call.app[GUARD_ADMIN].policies())


async def get_policy(call: Call[None, None]) -> Policy:
    return await call.app[GUARD_ADMIN].policy(call.params["name"])


async def put_policy(call: Call[Policy, None]) -> Policy:
    return await call.app[GUARD_ADMIN].set_policy(call.body, by(call.key))


async def delete_policy(call: Call[None, None]) -> Removed:
    name = call.params["name"]
    await call.app[GUARD_ADMIN].remove_policy(name)
    return Removed(name=name)


async def judges(call: Call[None, None]) -> DataList[JudgeStatusOut]:
    return DataList(data=await call.app[JUDGE_STATUS]())


async def enable_judge(call: Call[EnableJudge, None]) -> JudgeSpec:
    req = call.body
    name = req.name or req.file.rsplit("/", 1)[-1].removesuffix(".gguf").lower()
    spec = JudgeSpec(name=name, repo=req.repo, file=req.file, size_gb=req.size_gb, gpu=req.gpu,
                     format=req.format)
    await call.app[GUARD_ADMIN].enable_judge(spec, by(call.key))
    return spec


async def verdicts(call: Call[None, VerdictQuery]) -> DataList[VerdictRecord]:
    q = call.query
    records = await call.app[GUARD_ADMIN].verdicts(
        since=q.since, policy=q.policy, judge=q.judge, outcome=q.outcome, request_id=q.request_id,
        limit=max(1, min(q.limit, 10_000)),
    )
    return DataList(data=records)


async def judgment(call: Call[JudgmentRequest, None]) -> VerdictOut:
    """One judgment on demand (for `ctl guard eval`): the verdict and how long it took."""
    req = call.body
    turns = [Turn("user", req.text)] if req.direction == Direction.INPUT else [
        Turn("user", ""), Turn("assistant", req.text)]
    answer = await call.app[GUARD].ask(req.judge, req.direction, turns, req.budget_ms)
    return VerdictOut(judge=answer.judge, outcome=answer.outcome, verdict=answer.verdict,
                      error=answer.error or None, latency_ms=round(answer.latency_ms, 1),
                      retry_after_ms=answer.retry_after_ms)


GUARD_OVERVIEW = Endpoint("guard_overview", "GET", "/admin/v1/guard", "Guard switches and policies",
                          TAG, overview, returns=GuardOut)
SET_SWITCHES = Endpoint("set_switches", "POST", "/admin/v1/guard/switches", "Set guard switches", TAG,
                        set_switches, body=SwitchRequest, returns=SwitchesOut)
LIST_POLICIES = Endpoint("list_policies", "GET", "/admin/v1/guard/policies", "List policies", TAG,
                         list_policies, returns=DataList[Policy])
GET_POLICY = Endpoint("get_policy", "GET", "/admin/v1/guard/policies/{name}", "Show a policy", TAG,
                      get_policy, returns=Policy)
PUT_POLICY = Endpoint("put_policy", "PUT", "/admin/v1/guard/policies/{name}",
                      "Create or replace a policy", TAG, put_policy, body=Policy, shape=_policy_body,
                      body_schema=POLICY_BODY, returns=Policy)
DELETE_POLICY = Endpoint("delete_policy", "DELETE", "/admin/v1/guard/policies/{name}",
                         "Remove a policy", TAG, delete_policy, returns=Removed)
LIST_JUDGES = Endpoint("list_judges", "GET", "/admin/v1/guard/judges", "Judge status", TAG, judges,
                       returns=DataList[JudgeStatusOut])
ENABLE_JUDGE = Endpoint("enable_judge", "POST", "/admin/v1/guard/judges", "Enable a judge", TAG,
                        enable_judge, body=EnableJudge, returns=JudgeSpec, status=201)
LIST_VERDICTS = Endpoint("list_verdicts", "GET", "/admin/v1/guard/verdicts", "The verdict log", TAG,
                         verdicts, query=VerdictQuery, returns=DataList[VerdictRecord])
JUDGMENT = Endpoint("judgment", "POST", "/admin/v1/guard/judgments", "One judgment on demand", TAG,
                    judgment, body=JudgmentRequest, returns=VerdictOut)

ENDPOINTS: list[Endpoint[Any, Any]] = [
    GUARD_OVERVIEW, SET_SWITCHES, LIST_POLICIES, GET_POLICY, PUT_POLICY, DELETE_POLICY, LIST_JUDGES,
    ENABLE_JUDGE, LIST_VERDICTS, JUDGMENT,
]
