"""People signed in through SSO in the playground: each sends as its role allows, never with the
admin-scoped acting key the admin API knows them by. A team admin sends as its team (the team's
models, limits and budget, its use charged to the team), an admin or operator within the
install's playground limits, a viewer not at all."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.api.appkeys import GATEWAY
from llmgw.core.settings import PLAYGROUND_LIMITS, SsoSettings
from tests.api.console.conftest import Install
from tests.api.console.sso import (
    OPERATOR,
    TEAM_ADMIN,
    VIEWER,
    Person,
    SsoInstall,
    open_sso_install,
    provider,
    sso_port,
)
from tests.support.oidc_provider import ADMIN, OidcProvider

__all__ = ["provider", "sso_port"]  # fixtures

# What the provider says each answer used: 4 + 8 tokens.
USAGE = {"prompt_tokens": 4, "completion_tokens": 8, "total_tokens": 12}


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    """A provider that streams one answer and says what it used."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in ({"choices": [{"index": 0, "delta": {"content": "hi"}}]},
                      {"choices": [], "usage": USAGE}):
            await resp.write(f"data: {json.dumps({'object': 'chat.completion.chunk', **event})}\n\n"
                             .encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    server = TestServer(app)
    await server.start_server()
    yield str(server.make_url("/v1"))
    await server.close()


async def _catalog(install: Install, upstream: str) -> None:
    for name in ("m", "other"):
        status, body = await install.api("POST", "/admin/v1/models", {
            "name": name, "source": {"kind": "remote", "base_url": upstream},
            "profiles": [{"engine": "remote", "cpu_cores": 0, "min_memory_gb": 0}]})
        assert status == 201, body


@pytest.fixture
async def sso(tmp_path: Path, provider: OidcProvider, sso_port: int,
              upstream: str) -> AsyncIterator[SsoInstall]:
    """An SSO install with two remote models, and team research that may use only `m`."""
    async for found in open_sso_install(tmp_path, provider, sso_port,
                                        playground_rpm=2):
        await _catalog(found.install, upstream)
        yield found


async def _team(install: Install, **limits: int) -> None:
    status, body = await install.api("POST", "/admin/v1/teams",
                                     {"name": "research", "models": ["m"], "limits": limits})
    assert status == 201, body


async def _try(person: Person, model: str = "m", token: str | None = None) -> tuple[int, str]:
    """One try in the playground, read to its end (a stream settles its use when it closes)."""
    token = token or await person.console.csrf("/ui/playground")
    resp = await person.console.client.post(
        "/ui/playground/chat", headers={"X-CSRF-Token": token},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}]})
    return resp.status, await resp.text()


async def _burst(person: Person, n: int) -> list[int]:
    token = await person.console.csrf("/ui/playground")
    answers = await asyncio.gather(*(_try(person, token=token) for _ in range(n)))
    return sorted(status for status, _ in answers)


async def _synced(install: Install) -> None:
    """The server's usage flush and limit sync, as its loop runs them every second."""
    gateway = install.server.app[GATEWAY]
    assert gateway.limiter is not None and gateway.meter is not None
    await gateway.limiter.sync(gateway.meter.flush)


async def _chat(install: Install, key: str) -> int:
    resp = await install.browser.client.post(
        "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    await resp.read()
    return resp.status


async def test_a_team_admins_burst_gets_exactly_the_teams_rpm(sso: SsoInstall) -> None:
    install = sso.install
    await _team(install, rpm=3)
    member = await install.mint("r1", team="research")
    person = await sso.signed_in(TEAM_ADMIN)
    assert await _burst(person, 8) == [200] * 3 + [429] * 5
    # The team's minute is spent for its keys too: the team admin's tries were the team's.
    assert await _chat(install, member["key"]) == 429
    status, refused = await _try(person)
    assert status == 429 and "team research" in refused, refused[-600:]


async def test_a_team_admins_use_is_held_to_the_teams_budget_and_charged_to_it(
        sso: SsoInstall) -> None:
    install = sso.install
    # Today, as the usage page (which reads the wall clock) sees it.
    sso.clock.advance((datetime.now(UTC) - sso.clock.now()).total_seconds())
    await _team(install, tokens_per_day=50)
    member = await install.mint("r1", team="research")
    person = await sso.signed_in(TEAM_ADMIN)
    statuses = [(await _try(person))[0] for _ in range(6)]
    # 12 tokens each: past the point where estimates fit, one at a time on what is left.
    assert statuses == [200] * 5 + [429]
    await _synced(install)
    _, usage = await install.api("GET", "/admin/v1/usage?team=research")
    assert sum(r["prompt_tokens"] + r["completion_tokens"] for r in usage["data"]) == 60
    _, team = await install.api("GET", "/admin/v1/teams/research")
    assert {r["key_id"] for r in usage["data"]} == {f"team:{team['id']}"}
    # After the sync the team's spend is read back from the usage table: every key of the team
    # is refused, and so is its admin.
    assert await _chat(install, member["key"]) == 429
    assert (await _try(person))[0] == 429
    # The team admin sees the team's use on the usage page, named as the playground's.
    page = await (await person.console.get("/ui/usage")).text()
    assert "team research (playground)" in page


async def test_a_team_admin_tries_only_the_teams_models(sso: SsoInstall) -> None:
    await _team(sso.install)
    person = await sso.signed_in(TEAM_ADMIN)
    page = await (await person.console.get("/ui/playground")).text()
    assert '<option value="m"' in page and '<option value="other"' not in page
    assert (await _try(person, "other"))[0] == 404
    assert (await _try(person, "m"))[0] == 200


@pytest.mark.parametrize("account", [ADMIN, OPERATOR], ids=["admin", "operator"])
async def test_an_admin_or_operator_tries_any_model_within_the_playground_limits(
        sso: SsoInstall, account: Any) -> None:
    person = await sso.signed_in(account)
    page = await (await person.console.get("/ui/playground")).text()
    assert '<option value="m"' in page and '<option value="other"' in page
    assert await _burst(person, 5) == [200] * 2 + [429] * 3  # `[sso] playground_rpm`
    await _synced(sso.install)
    [user] = [u for u in sso.install.store.users.list() if u.subject == account.sub]
    rows = sso.install.store.usage.usage(key_id=user.id)
    assert sum(r.requests for r in rows) == 2  # counted as the person, not as an admin key


async def test_a_viewer_is_refused_the_playground_by_the_server(sso: SsoInstall) -> None:
    person = await sso.signed_in(VIEWER)
    assert (await person.console.get("/ui/playground")).status == 403
    token = await person.console.csrf("/ui/models")
    assert (await _try(person, token=token))[0] == 403
    assert sso.install.store.usage.usage() == []


async def test_a_team_admin_whose_team_is_gone_sends_nothing(sso: SsoInstall) -> None:
    person = await sso.signed_in(TEAM_ADMIN)  # team research was never made
    assert (await person.console.get("/ui/playground")).status == 403
    assert (await _try(person, token=await person.console.csrf()))[0] == 403


async def test_a_key_signed_in_sends_as_that_key(sso: SsoInstall) -> None:
    install = sso.install
    await _team(install, rpm=1)
    member = await install.mint("r1", team="research")
    await install.browser.signin(member["key"])
    token = await install.browser.csrf("/ui/playground")
    for expected in (200, 429):  # the team's rpm holds for its key in the console too
        resp = await install.browser.client.post(
            "/ui/playground/chat", headers={"X-CSRF-Token": token},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        await resp.read()
        assert resp.status == expected


def test_people_are_never_unlimited_by_default() -> None:
    limits = SsoSettings().playground_limits
    assert limits == PLAYGROUND_LIMITS
    assert None not in (limits.rpm, limits.concurrent, limits.tokens_per_day)
