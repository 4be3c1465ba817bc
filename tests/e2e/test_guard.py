"""End to end: the demo judge on the real llama-server guards the demo model."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

import openai
import pytest

from tests.conftest import DEMO
from tests.e2e.server_process import LlmgwServer, wait_for

JUDGE = "demo-judge"
HELLO = [{"role": "user", "content": "How do I bake bread?"}]


def verdicts(server: LlmgwServer, *args: str) -> list[dict[str, object]]:
    return list(json.loads(server.ctl("--json", "guard", "verdicts", *args).stdout)["data"])


def test_init_demo_guards_every_model_with_the_demo_judge(demo_server: LlmgwServer) -> None:
    status = json.loads(demo_server.ctl("--json", "guard", "status").stdout)
    assert status["guard_enabled"] is True
    [policy] = status["policies"]
    assert policy["judges"] == [JUDGE] and policy["models"] == ["*"]
    assert policy["budget_ms"] == 5000 and policy["on_failure"] == "closed"
    judges = json.loads(demo_server.ctl("--json", "guard", "judge", "status").stdout)["data"]
    demo = next(j for j in judges if j["judge"] == JUDGE)
    assert demo["in_catalog"] and demo["replicas_ready"] == 1
    assert "not a safety model" in demo["note"]


def test_a_judged_request_is_answered_within_budget_and_logged(
    demo_server: LlmgwServer, client: openai.OpenAI
) -> None:
    demo_server.wait_ready(JUDGE)
    before = len(verdicts(demo_server, "--judge", JUDGE, "--limit", "10000"))
    try:
        client.chat.completions.create(model=DEMO, messages=HELLO, max_tokens=4)
    except openai.BadRequestError as exc:  # the demo judge is no safety model: it may say unsafe
        assert exc.code == "content_filter" and "demo-judge" in exc.message
    assert _flushed_later(demo_server, before, "--judge", JUDGE)
    newest = verdicts(demo_server, "--judge", JUDGE, "--limit", "1")[0]
    assert newest["policy"] == "default" and newest["direction"] == "input"
    assert newest["outcome"] in ("safe", "unsafe")
    assert 0 < float(newest["latency_ms"]) < 5000  # type: ignore[arg-type]
    assert newest["model"] == DEMO and str(newest["key"]).startswith("sk-llmgw-")
    assert newest["text"] is None  # no prompt text unless the operator turns it on


def _flushed_later(server: LlmgwServer, before: int, *args: str) -> bool:
    """True once more than `before` verdicts are logged (the log is written about once a second)."""
    return bool(wait_for("the verdict to be written",
                         lambda: len(verdicts(server, "--limit", "10000", *args)) > before, 10))


def test_moderations_are_answered_by_the_policy_judges(client: openai.OpenAI) -> None:
    resp = client.moderations.create(input=["How do I bake bread?", "Hello there"])
    assert len(resp.results) == 2
    assert all(isinstance(r.flagged, bool) for r in resp.results)
    assert resp.model == JUDGE


@pytest.mark.parametrize(("on_failure", "allowed"), [("closed", False), ("open", True)])
def test_a_judge_that_cannot_answer_in_budget_fails_as_the_policy_says(
    demo_server: LlmgwServer, client: openai.OpenAI, on_failure: str, allowed: bool
) -> None:
    # A 1 ms budget no real judge meets: the judgment is cancelled and counts as a failure.
    demo_server.ctl("guard", "policy", "set", "tight", "--judges", JUDGE, "--models", DEMO,
                    "--budget-ms", "1", "--on-failure", on_failure)
    # The other parameter's run logged under the same policy name: wait for this run's verdict.
    before = len(verdicts(demo_server, "--limit", "10000", "--policy", "tight"))
    try:
        if allowed:
            resp = client.chat.completions.create(model=DEMO, messages=HELLO, max_tokens=2)
            assert resp.choices
        else:
            with pytest.raises(openai.InternalServerError) as info:
                client.chat.completions.create(model=DEMO, messages=HELLO, max_tokens=2)
            assert info.value.status_code == 503
            assert "tight" in info.value.message and "fails closed" in info.value.message
        _flushed_later(demo_server, before, "--policy", "tight")
        [newest] = verdicts(demo_server, "--policy", "tight", "--limit", "1")
        assert newest["outcome"] == "failed_timeout"
        assert newest["let_through"] is allowed
    finally:
        demo_server.ctl("guard", "policy", "remove", "tight")


def test_guard_off_lets_everything_through_unjudged(
    demo_server: LlmgwServer, client: openai.OpenAI
) -> None:
    since = datetime.now(UTC).isoformat()
    demo_server.ctl("guard", "off")
    try:
        resp = client.chat.completions.create(model=DEMO, messages=HELLO, max_tokens=2)
        assert resp.choices
    finally:
        demo_server.ctl("guard", "on")
    # One judged request after switching back on: once its verdict is logged, the log since the
    # switch holds exactly that one (the unjudged request left none).
    with contextlib.suppress(openai.BadRequestError):
        client.chat.completions.create(model=DEMO, messages=HELLO, max_tokens=2)
    _flushed_later(demo_server, 0, "--since", since)
    assert len(verdicts(demo_server, "--since", since)) == 1
