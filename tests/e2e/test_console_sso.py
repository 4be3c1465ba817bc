"""Headless Chromium signs in to a running `server run` (the default install: a worker per core)
through a real OpenID provider's own login and consent pages, once for each role, and each role
sees and may do what it should; sign-out ends the session for any copy of its cookie."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from llmgw.core import settings
from llmgw.core.settings import SsoSettings
from tests.api.console.sso import ACCOUNTS, OPERATOR, ROLES, TEAM_ADMIN, VIEWER
from tests.fakes.provider import FakeProvider
from tests.support.browser import DESKTOP, chrome, console_errors, cookies, find, text, wait_until
from tests.support.oidc_provider import ADMIN, Account, OidcProvider, running_provider
from tests.support.server_process import LlmgwServer

SESSION = "llmgw_console"
KEY_RE = re.compile(r"sk-llmgw-[A-Za-z0-9_-]{20,}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlmgwServer, OidcProvider]]:
    """`server init` + `server run` with `[sso]` pointed at a provider that knows its callback."""
    root = tmp_path_factory.mktemp("sso")
    srv = LlmgwServer.init(root / "data", "--no-demo", "--no-guard")
    callback = f"{srv.url}/ui/sso/callback"
    with running_provider(root / "oidc", accounts=dict(ACCOUNTS),
                          redirect_uris=(callback,)) as provider:
        secret = root / "client-secret"
        secret.write_text(provider.client_secret + "\n")
        config = settings.load(srv.data_dir)
        sso = SsoSettings(issuer=provider.issuer, client_id=provider.client_id,
                          client_secret_file=str(secret), redirect_url=callback, roles=ROLES)
        (srv.data_dir / settings.CONFIG_FILE).write_text(
            settings.dump(config.model_copy(update={"sso": sso})))
        with srv.running():
            srv.call("POST", "/admin/v1/teams", {"name": "research", "limits": {"rpm": 100}})
            yield srv, provider


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """A fresh browser per test: signed in nowhere, at the console or at the provider."""
    driver = chrome(tmp_path / "chromium", DESKTOP)
    yield driver
    assert not console_errors(driver)
    driver.quit()


def sign_in(driver: webdriver.Chrome, srv: LlmgwServer, account: Account) -> None:
    """Through the console's button, the provider's login and consent pages, and back."""
    driver.get(srv.url + "/ui/")
    find(driver, "#sso-start").click()
    find(driver, 'input[name="login"]').send_keys(account.sub)
    find(driver, 'input[name="password"]').send_keys(account.password)
    find(driver, "#sign-in").click()
    find(driver, "#consent").click()
    wait_until(driver, "the console after sign-in",
               lambda d: d.current_url.rstrip("/").endswith("/ui") and d.find_elements(By.ID, "whoami"))


def nav(driver: webdriver.Chrome) -> set[str]:
    return {str(a.get_attribute("pathname")) for a in driver.find_elements(By.CSS_SELECTOR, "nav#nav a")}


def forged_post(driver: webdriver.Chrome, path: str, form: dict[str, str]) -> tuple[int, str]:
    """A POST the page never offered, made from the page with its CSRF token: only the server's
    check stands in its way."""
    result = driver.execute_async_script("""
        const [path, form, done] = arguments;
        const token = document.querySelector('meta[name="csrf-token"]').content;
        const body = new URLSearchParams({...form, csrf_token: token});
        fetch(path, {method: 'POST', body, redirect: 'manual'})
          .then(async r => done([r.status, await r.text()]));
    """, path, form)
    return int(result[0]), str(result[1])


def test_an_admin_signs_in_and_manages_people(
        browser: webdriver.Chrome, server: tuple[LlmgwServer, OidcProvider]) -> None:
    srv, _ = server
    sign_in(browser, srv, ADMIN)
    assert "alice@example.test" in text(browser, "#whoami") and "admin" in text(browser, "#whoami")
    assert {"/ui/models", "/ui/keys", "/ui/users"} <= nav(browser)
    browser.get(srv.url + "/ui/users")
    assert "alice@example.test" in text(browser, "main")


def test_an_operator_runs_the_install_but_never_sees_keys(
        browser: webdriver.Chrome, server: tuple[LlmgwServer, OidcProvider]) -> None:
    srv, _ = server
    sign_in(browser, srv, OPERATOR)
    assert "operator" in text(browser, "#whoami")
    shown = nav(browser)
    assert "/ui/models" in shown and "/ui/keys" not in shown and "/ui/users" not in shown
    status, body = forged_post(browser, "/ui/keys", {"name": "sneaky"})
    assert status == 403 and "does not see keys" in body


def test_a_viewers_forged_form_is_refused_by_the_server(
        browser: webdriver.Chrome, server: tuple[LlmgwServer, OidcProvider]) -> None:
    srv, _ = server
    sign_in(browser, srv, VIEWER)
    assert "viewer" in text(browser, "#whoami")
    browser.get(srv.url + "/ui/models")
    status, body = forged_post(browser, "/ui/keys", {"name": "sneaky"})
    assert status == 403
    status, body = forged_post(browser, "/ui/models/add", {"name": "x", "kind": "remote"})
    assert status == 403 and "A viewer changes nothing." in body
    assert all(k["name"] != "sneaky" for k in srv.get("/admin/v1/keys")["data"])


def test_a_team_admin_creates_a_key_for_its_team_shown_once(
        browser: webdriver.Chrome, server: tuple[LlmgwServer, OidcProvider]) -> None:
    srv, _ = server
    sign_in(browser, srv, TEAM_ADMIN)
    assert "team-admin:research" in text(browser, "#whoami")
    browser.get(srv.url + "/ui/keys")
    find(browser, 'form#key-create-form input[name="name"]').send_keys("research-bot")
    find(browser, "form#key-create-form button[type=submit]").click()
    secret = wait_until(browser, "the new key's secret",
                        lambda d: (m := KEY_RE.search(d.page_source)) and m.group(0))
    browser.get(srv.url + "/ui/keys")
    assert secret not in browser.page_source  # shown once
    [key] = [k for k in srv.get("/admin/v1/keys")["data"] if k["name"] == "research-bot"]
    assert key["team"] == "research"
    status, _ = forged_post(browser, "/ui/models/add", {"name": "x"})
    assert status == 403


def test_sign_out_ends_the_session_for_every_copy_of_its_cookie(
        browser: webdriver.Chrome, server: tuple[LlmgwServer, OidcProvider]) -> None:
    srv, _ = server
    sign_in(browser, srv, ADMIN)
    stolen = cookies(browser)[SESSION]
    find(browser, "#signout-submit").click()
    find(browser, "form#signin")
    browser.add_cookie({"name": SESSION, "value": stolen["value"], "path": "/ui"})
    browser.get(srv.url + "/ui/models")
    find(browser, "#sso-start")
    assert browser.current_url.endswith("/ui/signin")


async def _minute_start() -> None:
    """A burst well inside one clock minute: limits count clock minutes."""
    second = time.time() % 60
    if second > 45:
        await asyncio.sleep(61 - second)


async def test_a_team_admins_playground_burst_gets_exactly_the_teams_rpm_in_the_default_install(
        browser: webdriver.Chrome, server: tuple[LlmgwServer, OidcProvider]) -> None:
    """The default install runs a worker per core. A team admin signed in through the provider
    bursts the playground, each request on a new connection (so landing on any worker): exactly
    the team's rpm is answered, the rest 429. Every console request is relayed to the main
    process, so the playground's admissions are one process's."""
    srv, _ = server
    provider = await FakeProvider().start()
    await asyncio.to_thread(srv.call, "PUT", "/admin/v1/teams/research",
                            {"name": "research", "limits": {"rpm": 3}})
    try:
        # After the team's change: a worker that knows the model knows the team's new rpm.
        await asyncio.to_thread(srv.call, "POST", "/admin/v1/models", {
            "name": "burst", "source": {"kind": "remote", "base_url": provider.url}})
        await asyncio.to_thread(sign_in, browser, srv, TEAM_ADMIN)
        await asyncio.to_thread(browser.get, srv.url + "/ui/playground")
        token = await asyncio.to_thread(
            lambda: find(browser, 'meta[name="csrf-token"]').get_attribute("content"))
        session = (await asyncio.to_thread(browser.get_cookie, SESSION) or {})["value"]
        headers = {"Cookie": f"{SESSION}={session}", "X-CSRF-Token": str(token)}

        async def fresh(method: str, path: str, **kw: Any) -> tuple[int, str]:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
                    s.request(method, srv.url + path, headers=headers, **kw) as resp:
                return resp.status, await resp.text()

        # Every worker has the model: the page (which no limit counts) offers it 20 times in a
        # row on new connections.
        deadline, good = time.monotonic() + 15, 0
        while good < 20:
            assert time.monotonic() < deadline, "the model never reached every worker"
            good = good + 1 if 'value="burst"' in (await fresh("GET", "/ui/playground"))[1] else 0
        await _minute_start()
        answers = await asyncio.gather(*(fresh("POST", "/ui/playground/chat", json={
            "model": "burst", "messages": [{"role": "user", "content": "hi"}]}) for _ in range(8)))
        assert sorted(status for status, _ in answers) == [200] * 3 + [429] * 5
    finally:
        await asyncio.to_thread(srv.call, "PUT", "/admin/v1/teams/research",
                                {"name": "research", "limits": {"rpm": 100}})
        await provider.close()
