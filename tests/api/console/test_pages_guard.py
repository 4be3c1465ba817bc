"""The guard page through the real app: switches, policies edited as JSON, the verdict log's
filters, and a judgment's error shown as a page."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from llmgw.core.guard import Direction, Outcome, VerdictRecord
from tests.api.console.conftest import Install

POLICY = {"models": ["*"], "keys": ["*"], "input": True, "judges": ["qwen3guard-0.6b"],
          "on_failure": "open"}


async def guard(install: Install) -> dict[str, Any]:
    status, body = await install.api("GET", "/admin/v1/guard")
    assert status == 200
    return body  # type: ignore[no-any-return]


async def test_switches_turn_the_guard_and_prompt_logging_on_and_off(install: Install) -> None:
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/guard")).text()
    assert 'id="guard-switches"' in page
    token = await install.browser.csrf("/ui/guard")
    before = (await guard(install))["log_prompts"]
    resp = await install.browser.post("/ui/guard/switches", {"csrf_token": token, "switch": "log_prompts",
                                                             "on": "false" if before else "true"})
    assert resp.status == 303
    assert (await guard(install))["log_prompts"] is (not before)
    resp = await install.browser.post("/ui/guard/switches",
                                      {"csrf_token": token, "switch": "nope", "on": "true"})
    assert resp.status == 400
    # The console's change is in the audit log under the signed-in key, once; the refused one not.
    status, log = await install.api("GET", "/admin/v1/audit")
    assert status == 200
    assert [(e["kind"], e["action"], e["target"], e["after"]) for e in log["data"]] == [
        ("switch", "set", "log_prompts", {"on": not before})]
    assert log["data"][0]["by"].startswith("admin (")


async def test_a_policy_is_created_edited_and_removed_as_json(install: Install) -> None:
    await install.browser.signin(install.admin)
    token = await install.browser.csrf("/ui/guard")
    resp = await install.browser.post("/ui/guard/policies", {"csrf_token": token, "name": "strict",
                                                             "policy": json.dumps(POLICY)})
    assert resp.status == 303, await resp.text()
    page = await (await install.browser.get("/ui/guard")).text()
    assert '<tr data-policy="strict">' in page
    editor = await (await install.browser.get("/ui/guard/policies/strict")).text()
    assert "&#34;on_failure&#34;: &#34;open&#34;" in editor
    resp = await install.browser.post("/ui/guard/policies", {"csrf_token": token, "name": "strict",
                                                             "policy": "{not json"})
    assert resp.status == 400
    assert "not valid JSON" in await resp.text()
    resp = await install.browser.post("/ui/guard/policies", {"csrf_token": token, "name": "strict",
                                                             "policy": json.dumps({**POLICY, "judges": []})})
    assert resp.status == 400
    assert "judges" in await resp.text()
    resp = await install.browser.post("/ui/guard/policies/strict/remove", {"csrf_token": token})
    assert resp.status == 303
    assert all(p["name"] != "strict" for p in (await guard(install))["policies"])


async def test_the_verdict_log_filters_by_outcome(install: Install) -> None:
    def record(request_id: str, outcome: Outcome) -> VerdictRecord:
        return VerdictRecord(at=datetime.now(UTC), policy="default", judge="j", direction=Direction.INPUT,
                             outcome=outcome, latency_ms=5.0, request_id=request_id)

    install.store.guard.add_verdicts([record("req-safe", Outcome.SAFE), record("req-bad", Outcome.UNSAFE)])
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/guard/verdicts")).text()
    assert 'data-request-id="req-safe"' in page and 'data-request-id="req-bad"' in page
    page = await (await install.browser.get("/ui/guard/verdicts?outcome=unsafe")).text()
    assert 'data-request-id="req-safe"' not in page and 'data-request-id="req-bad"' in page
    page = await (await install.browser.get("/ui/guard")).text()
    assert '<tr class="verdict" data-request-id="req-bad">' in page


async def test_a_judgment_names_its_outcome_and_why_it_failed(install: Install) -> None:
    await install.browser.signin(install.admin)
    token = await install.browser.csrf("/ui/guard")
    resp = await install.browser.post("/ui/guard/judgment", {"csrf_token": token, "judge": "nobody",
                                                             "text": "hello"})
    assert resp.status == 200
    fragment = await resp.text()
    assert 'data-outcome="failed_error"' in fragment and "not known" in fragment
    assert "<html" not in fragment  # swapped into #judgment-result
    resp = await install.browser.post("/ui/guard/judgment", {"csrf_token": token, "judge": "nobody"})
    assert resp.status == 400
    assert "&#39;text&#39; is required" in await resp.text()


async def test_the_guard_page_shows_which_tools_a_policy_covers_and_tool_verdicts(
    install: Install,
) -> None:
    install.store.guard.add_verdicts([VerdictRecord(
        at=datetime.now(UTC), policy="tools", judge="j", direction=Direction.OUTPUT,
        outcome=Outcome.UNSAFE, latency_ms=5.0, model="mcp:github/get_issue", request_id="req-tool")])
    await install.browser.signin(install.admin)
    token = await install.browser.csrf("/ui/guard")
    tools = {**POLICY, "tools": ["github", "web/fetch*"]}
    resp = await install.browser.post("/ui/guard/policies", {"csrf_token": token, "name": "tools",
                                                             "policy": json.dumps(tools)})
    assert resp.status == 303, await resp.text()
    page = await (await install.browser.get("/ui/guard")).text()
    row = page.split('<tr data-policy="tools">')[1].split("</tr>")[0]
    assert "<td class=\"wrap\">github, web/fetch*</td>" in row
    assert "<td>mcp:github/get_issue</td>" in page
    editor = await (await install.browser.get("/ui/guard/new-policy")).text()
    assert "&#34;tools&#34;: []" in editor
