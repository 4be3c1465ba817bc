"""The playground through the real app: the answer streams from the model through the gateway's
own path with the visitor's key, and an admin sees that request's verdicts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestServer

from llmgw.core.guard import Direction, Outcome, VerdictRecord
from tests.api.console.conftest import Install

PIECES = ["Hel", "lo ", "there"]


@pytest.fixture
async def upstream() -> AsyncIterator[dict[str, Any]]:
    """A provider that streams PIECES as chat completion chunks; `seen` holds what it was sent."""
    seen: dict[str, Any] = {}

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.update(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in PIECES:
            chunk = {"object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"content": piece}}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app)
    await server.start_server()
    yield {"url": str(server.make_url("/v1")), "seen": seen}
    await server.close()


@pytest.fixture
async def with_model(install: Install, upstream: dict[str, Any]) -> Install:
    for name in ("m", "other"):
        status, body = await install.api("POST", "/admin/v1/models", {
            "name": name, "source": {"kind": "remote", "base_url": upstream["url"]},
            "profiles": [{"engine": "remote", "cpu_cores": 0, "min_memory_gb": 0}]})
        assert status == 201, body
    return install


async def chat(install: Install, model: str, token: str | None) -> ClientResponse:
    headers = {"X-CSRF-Token": token} if token else {}
    return await install.browser.client.post(
        "/ui/playground/chat", headers=headers,
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


async def test_the_answer_streams_through_the_gateway_with_the_visitors_key(
        with_model: Install, upstream: dict[str, Any]) -> None:
    user = await with_model.mint("alice", models=["m"])
    await with_model.browser.signin(user["key"])
    page = await (await with_model.browser.get("/ui/playground")).text()
    assert '<option value="m" selected>' in page and '<option value="other"' not in page
    assert 'id="pg-verdicts"' not in page  # verdicts are the admin's to see
    resp = await chat(with_model, "m", await with_model.browser.csrf("/ui/playground"))
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert resp.headers["X-Request-Id"]
    body = (await resp.read()).decode()
    pieces = [json.loads(line[5:])["choices"][0]["delta"].get("content", "")
              for line in body.splitlines() if line.startswith("data: {")]
    assert "".join(pieces) == "".join(PIECES)
    assert upstream["seen"]["stream"] is True and upstream["seen"]["messages"][-1]["content"] == "hi"


async def test_a_model_the_key_may_not_use_is_an_html_error_as_for_a_missing_one(with_model: Install) -> None:
    user = await with_model.mint("alice", models=["m"])
    await with_model.browser.signin(user["key"])
    token = await with_model.browser.csrf("/ui/playground")
    for model in ("other", "missing"):
        resp = await chat(with_model, model, token)
        assert resp.status == 404
        assert resp.headers["Content-Type"].startswith("text/html")
        assert f"The model &#39;{model}&#39; does not exist" in await resp.text()


async def test_a_chat_without_the_csrf_header_is_refused(with_model: Install) -> None:
    await with_model.browser.signin(with_model.admin)
    resp = await chat(with_model, "m", None)
    assert resp.status == 403


async def test_a_bad_request_is_told_what_is_missing(with_model: Install) -> None:
    await with_model.browser.signin(with_model.admin)
    token = await with_model.browser.csrf("/ui/playground")
    resp = await with_model.browser.client.post("/ui/playground/chat", headers={"X-CSRF-Token": token},
                                                json={"model": "m", "messages": []})
    assert resp.status == 400
    assert "Write a message first." in await resp.text()


async def test_an_admin_sees_the_verdicts_of_one_request_only(install: Install) -> None:
    def record(request_id: str) -> VerdictRecord:
        return VerdictRecord(at=datetime.now(UTC), policy="default", judge="j", direction=Direction.INPUT,
                             outcome=Outcome.SAFE, latency_ms=12.0, model="m", key="sk…abcd",
                             request_id=request_id)

    # A busy install: the request's verdict is older than a thousand others (found all the same).
    install.store.guard.add_verdicts([record("req-1"), *(record(f"other-{i}") for i in range(1000)),
                                      record("req-2")])
    await install.browser.signin(install.admin)
    text = await (await install.browser.get("/ui/playground/verdicts?request_id=req-1")).text()
    assert 'data-request-id="req-1"' in text and 'data-request-id="req-2"' not in text
    assert text.count('class="verdict"') == 1
    text = await (await install.browser.get("/ui/playground/verdicts?request_id=")).text()
    assert 'class="verdict"' not in text


async def chat_with(install: Install, token: str, **payload: Any) -> ClientResponse:
    return await install.browser.client.post(
        "/ui/playground/chat", headers={"X-CSRF-Token": token},
        json={"messages": [{"role": "user", "content": "hi"}], **payload})


async def test_the_answers_length_is_64_tokens_unless_the_form_says_otherwise(
        with_model: Install, upstream: dict[str, Any]) -> None:
    await with_model.browser.signin(with_model.admin)
    page = await (await with_model.browser.get("/ui/playground")).text()
    assert 'id="pg-max-tokens" name="max_tokens" type="number" min="1" max="512" value="64"' in page
    token = await with_model.browser.csrf("/ui/playground")
    for given, sent in ((None, 64), (200, 200)):
        extra = {} if given is None else {"max_tokens": given}
        resp = await chat_with(with_model, token, model="m", **extra)
        assert resp.status == 200
        await resp.read()
        assert upstream["seen"]["max_tokens"] == sent
    for bad in (0, 513, "64", True):
        resp = await chat_with(with_model, token, model="m", max_tokens=bad)
        assert resp.status == 400
        assert "Max tokens must be a whole number from 1 to 512." in await resp.text()


async def test_routes_are_offered_beside_models(with_model: Install, upstream: dict[str, Any]) -> None:
    status, body = await with_model.api("POST", "/admin/v1/routes",
                                        {"name": "chat", "targets": [{"model": "m"}]})
    assert status == 201, body
    await with_model.browser.signin(with_model.admin)
    page = await (await with_model.browser.get("/ui/playground")).text()
    routes = page.split('<optgroup label="Routes">', 1)[1].split("</optgroup>", 1)[0]
    assert '<option value="chat">chat</option>' in routes
    resp = await chat_with(with_model, await with_model.browser.csrf("/ui/playground"), model="chat")
    assert resp.status == 200
    await resp.read()
    assert upstream["seen"]["messages"][-1]["content"] == "hi"


async def test_the_model_chosen_first_is_one_that_answers(with_model: Install) -> None:
    status, body = await with_model.api("POST", "/admin/v1/models", {
        "name": "a-dead", "source": {"kind": "remote", "base_url": "http://127.0.0.1:9/v1"}})
    assert status == 201, body
    status, _ = await with_model.api("POST", "/v1/chat/completions", {
        "model": "a-dead", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 502  # it refuses connections: first by name, yet not chosen
    await with_model.browser.signin(with_model.admin)
    page = await (await with_model.browser.get("/ui/playground")).text()
    assert '<option value="a-dead">a-dead (not ready)</option>' in page
    assert '<option value="m" selected>m</option>' in page
