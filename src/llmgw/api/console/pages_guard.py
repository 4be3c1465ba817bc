"""The guard page: switches, policies (view, edit as JSON, remove), judge status, the verdict
log with filters, and a judgment on demand."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from llmgw.api.admin.guard import (
    DELETE_POLICY,
    GET_POLICY,
    GUARD_OVERVIEW,
    JUDGMENT,
    LIST_JUDGES,
    LIST_VERDICTS,
    PUT_POLICY,
    SET_SWITCHES,
)
from llmgw.api.console import data, forms, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint
from llmgw.core.errors import InvalidRequest

HERE = "/ui/guard"
SWITCHES = ("guard_enabled", "log_prompts")
FILTERS = ("policy", "judge", "outcome")
OUTCOMES = ("safe", "unsafe", "failed_timeout", "failed_shed", "failed_unparseable", "failed_error")
# What the policy editor leaves out: the name is the URL's, the rest the server's to fill in.
NOT_EDITED = ("name", "by", "updated_at")


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


async def guard(request: web.Request) -> web.Response:
    """Switches, policies, judges, the latest verdicts and the judgment form."""
    overview = await _call(request, GUARD_OVERVIEW)
    judges = (await _call(request, LIST_JUDGES))["data"]
    verdicts = (await _call(request, LIST_VERDICTS, query={"limit": "20"}))["data"]
    return render.page(request, "guard.html", switches={s: overview.get(s) for s in SWITCHES},
                       policies=overview["policies"], judges=judges, verdicts=verdicts)


async def switch(request: web.Request) -> web.Response:
    """Turn the guard, or prompt logging, on or off."""
    form = await forms.read(request)
    name = forms.text(form, "switch", required=True)
    if name not in SWITCHES:
        raise InvalidRequest("unknown switch", param="switch")
    await _call(request, SET_SWITCHES, body={name: form.get("on") == "true"})
    return render.done(request, HERE)


def _editable(policy: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in policy.items() if k not in NOT_EDITED}, indent=2)


async def policy(request: web.Request) -> web.Response:
    """One policy as JSON in an editor."""
    name = request.match_info["name"]
    found = await _call(request, GET_POLICY, params={"name": name})
    return render.page(request, "policy.html", name=name, text=_editable(found), new=False)


async def new_policy(request: web.Request) -> web.Response:
    """The editor for a new policy, with a template to start from."""
    start = {"models": ["*"], "keys": ["*"], "tools": [], "input": True, "output": False,
             "judges": [], "on_failure": "closed"}
    return render.page(request, "policy.html", name="", text=json.dumps(start, indent=2), new=True)


async def save_policy(request: web.Request) -> web.Response:
    """Create or replace a policy from the editor's JSON."""
    form = await forms.read(request)
    name = forms.text(form, "name", required=True) or ""
    try:
        body = json.loads(str(form.get("policy", "")))
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the policy is not valid JSON: {exc.msg} (line {exc.lineno})",
                             param="policy") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the policy must be a JSON object", param="policy")
    await _call(request, PUT_POLICY, params={"name": name}, body=body)
    return render.done(request, HERE)


async def remove_policy(request: web.Request) -> web.Response:
    """Remove a policy (the page asks to confirm first)."""
    await _call(request, DELETE_POLICY, params={"name": request.match_info["name"]})
    return render.done(request, HERE)


async def verdicts(request: web.Request) -> web.Response:
    """The verdict log, filtered by policy, judge and outcome."""
    chosen = {f: request.query[f] for f in FILTERS if request.query.get(f)}
    found = (await _call(request, LIST_VERDICTS, query={**chosen, "limit": "200"}))["data"]
    judges = (await _call(request, LIST_JUDGES))["data"]
    overview = await _call(request, GUARD_OVERVIEW)
    return render.page(request, "verdicts.html", verdicts=found, chosen=chosen, outcomes=OUTCOMES,
                       policies=[p["name"] for p in overview["policies"]],
                       judges=[j["judge"] for j in judges])


async def judgment(request: web.Request) -> web.Response:
    """One judgment on demand: the verdict and how long it took, as a fragment."""
    form = await forms.read(request)
    body = forms.given(judge=forms.text(form, "judge", required=True),
                       text=forms.text(form, "text", required=True),
                       direction=forms.text(form, "direction"))
    answer = await _call(request, JUDGMENT, body=body)
    return render.page(request, "judgment.html", answer=answer)
