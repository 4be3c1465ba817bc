"""The keys page through the real app: a new key's secret shown once, and a user key seeing and
touching only itself and the keys it minted."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from llmgw.core.types import UsageRow
from tests.api.console.conftest import Browser, Install


def key_names(page: str) -> set[str]:
    return set(re.findall(r'<tr data-key-name="([^"]+)"', page))


def secret_in(page: str) -> str | None:
    found = re.search(r'<code id="key-secret">([^<]+)</code>', page)
    return found.group(1) if found else None


async def create(browser: Browser, **fields: str) -> tuple[int, str]:
    token = await browser.csrf("/ui/keys")
    resp = await browser.post("/ui/keys", {"csrf_token": token, **fields})
    return resp.status, await resp.text()


async def test_a_new_keys_secret_is_shown_once_and_works(install: Install) -> None:
    await install.browser.signin(install.admin)
    status, page = await create(install.browser, name="ci", rpm="60")
    assert status == 200
    secret = secret_in(page)
    assert secret and 'id="key-copy"' in page
    assert "ci" in key_names(page)
    status, listed = await install.api("GET", "/admin/v1/models", key=secret)
    assert status == 403  # a user key: it works, and is refused the admin API
    again = await (await install.browser.get("/ui/keys")).text()
    assert "ci" in key_names(again) and secret not in again and secret_in(again) is None


async def test_a_user_key_sees_only_itself_and_the_keys_it_minted(install: Install) -> None:
    alice = await install.mint("alice")
    await install.mint("bob")
    child = await install.mint("alice-ci", alice["key"])
    await install.browser.signin(alice["key"])
    page = await (await install.browser.get("/ui/keys")).text()
    assert key_names(page) == {"alice", "alice-ci"}
    assert 'class="rotate-key' not in page  # rotating is the admin's
    admin_id = next(k["id"] for k in (await install.api("GET", "/admin/v1/keys"))[1]["data"]
                    if k["scope"] == "admin")
    assert admin_id not in page  # alice was minted by the admin: the page names no key it cannot see
    status, page = await create(install.browser, name="alice-2", scope="admin")
    assert status == 403  # a user key mints user keys only
    status, page = await create(install.browser, name="alice-2")
    assert status == 200 and secret_in(page)
    assert key_names(page) == {"alice", "alice-ci", "alice-2"}
    assert child["id"]


async def test_a_user_key_cannot_revoke_another_keys_key(install: Install) -> None:
    alice = await install.mint("alice")
    bob = await install.mint("bob")
    child = await install.mint("alice-ci", alice["key"])
    await install.browser.signin(alice["key"])
    token = await install.browser.csrf("/ui/keys")
    for target in (bob["id"], "key-does-not-exist"):
        resp = await install.browser.post(f"/ui/keys/{target}/revoke", {"csrf_token": token})
        assert resp.status == 404  # the same answer whether it exists or not
        assert "There is no such key." in await resp.text() and target not in await resp.text()
    status, listed = await install.api("GET", "/admin/v1/keys")
    assert not next(k for k in listed["data"] if k["id"] == bob["id"])["revoked"]
    resp = await install.browser.post(f"/ui/keys/{child['id']}/revoke", {"csrf_token": token})
    assert resp.status == 303 and resp.headers["Location"] == "/ui/keys"
    status, listed = await install.api("GET", "/admin/v1/keys")
    assert next(k for k in listed["data"] if k["id"] == child["id"])["revoked"]


async def test_an_admin_rotates_a_key_and_sees_the_new_secret_once(install: Install) -> None:
    alice = await install.mint("alice")
    await install.browser.signin(install.admin)
    token = await install.browser.csrf("/ui/keys")
    resp = await install.browser.post(f"/ui/keys/{alice['id']}/rotate", {"csrf_token": token})
    assert resp.status == 200
    secret = secret_in(await resp.text())
    assert secret and secret != alice["key"]
    assert (await install.api("GET", "/v1/models", key=secret))[0] == 200
    assert (await install.api("GET", "/v1/models", key=alice["key"]))[0] == 401


async def test_a_user_sees_only_its_familys_usage(install: Install) -> None:
    alice = await install.mint("alice")
    bob = await install.mint("bob")
    today = datetime.now(UTC).date().isoformat()
    install.store.usage.add_usage([UsageRow(key_id=key["id"], model="m", day=today, requests=1,
                                            prompt_tokens=5) for key in (alice, bob)])
    await install.browser.signin(alice["key"])
    page = await (await install.browser.get("/ui/usage")).text()
    assert 'id="usage-chart"' in page and 'id="usage"' in page
    assert 'data-key-name="alice"' in page and "bob" not in page
    assert "not set: the install's default applies" in page  # a user key is not shown the defaults


async def test_an_admin_sees_its_limits_beside_the_installs_defaults(install: Install) -> None:
    status, _ = await install.api("PUT", "/admin/v1/limits/default", {"rpm": 77})
    assert status == 200
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/usage")).text()
    limits = page.split('id="limits"', 1)[1]
    assert "the install's default, 77" in limits.split('data-limit="rpm"', 1)[1].split("</tr>", 1)[0]
    assert "none" in limits.split('data-limit="tpm"', 1)[1].split("</tr>", 1)[0]


async def test_the_keys_page_shows_what_each_key_uses_now(install: Install) -> None:
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/keys")).text()
    # Every live key has its line, as this server counts (the install has no Redis).
    row = re.search(r'<tr data-key-name="admin".*?</tr>', page, re.DOTALL)
    assert row is not None
    assert re.search(r'title="counted by this server">\d+ req, [\d,]+ tok this min · \d+ in flight · '
                     r'[\d,]+ tok today', row.group(0)), row.group(0)


def row(page: str, name: str) -> str:
    found = re.search(rf'<tr data-key-name="{re.escape(name)}".*?</tr>', page, re.S)
    assert found, f"no row for key {name}"
    return found.group(0)


async def test_the_keys_team_its_team_admins_and_the_models_its_team_allows_are_shown(
        install: Install) -> None:
    status, body = await install.api("POST", "/admin/v1/teams",
                                     {"name": "research", "models": ["gemma*"]})
    assert status == 201, body
    await install.mint("lead", team="research", team_admin=True)
    await install.mint("member", team="research")
    await install.mint("narrow", team="research", models=["gemma3-270m"])
    await install.mint("loner")
    await install.browser.signin(install.admin)
    page = await (await install.browser.get("/ui/keys")).text()
    lead, member = row(page, "lead"), row(page, "member")
    assert '<td class="team">research <span class="badge">team admin</span></td>' in lead
    assert '<td class="team">research</td>' in member
    # A key with no list of its own may call its team's models, not "any".
    assert "gemma* (team research&#39;s)" in member
    assert '<td class="wrap models">gemma3-270m</td>' in row(page, "narrow")
    assert '<td class="wrap models">any</td>' in row(page, "loner")
