"""An install with `[sso]` pointed at a real OpenID provider (`tests/support/oidc_provider.py`), and a
browser that signs in through the provider's own pages: the console's half in the test client,
the provider's half in the provider's `Browser` (each keeps its own cookies, as one browser
keeps each site's)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.clock import FakeClock
from llmgw.core.settings import SsoSettings
from tests.api.conftest import make_install
from tests.api.console.conftest import Browser, Install
from tests.support.oidc_provider import ADMIN, Account, OidcProvider
from tests.support.oidc_provider import Browser as ProviderBrowser

# The install's mapping from the provider's groups to roles.
ROLES = {"llmgw-admins": "admin", "llmgw-ops": "operator", "llmgw-users": "viewer",
         "team-research": "team-admin:research"}
OPERATOR = Account("olga", "olga-password", "olga@example.test", "Olga Ops", ("llmgw-ops",))
VIEWER = Account("bob", "bob-password", "bob@example.test", "Bob User", ("llmgw-users",))
TEAM_ADMIN = Account("tara", "tara-password", "tara@example.test", "Tara Team", ("team-research",))
NOBODY = Account("nina", "nina-password", "nina@example.test", "Nina New", ("elsewhere",))
ACCOUNTS = {a.sub: a for a in (ADMIN, OPERATOR, VIEWER, TEAM_ADMIN, NOBODY)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Person:
    """One browser of one person: the console's cookies and the provider's."""

    console: Browser
    provider: ProviderBrowser
    account: Account
    opened: list[TestClient[Any, Any]] = field(default_factory=list)

    async def follow_to_provider(self, response: ClientResponse) -> ClientResponse:
        """Take the console's redirect to the provider, sign in there if asked, and bring the
        provider's answer back to the console's callback."""
        assert response.status == 303, await response.text()
        url = response.headers["Location"]

        def at_provider() -> str:
            page = self.provider.sign_in(url, self.account.sub, self.account.password)
            assert page.is_redirect, f"the provider kept the browser: {page.text[:300]}"
            return str(page.headers["location"])

        back = urlsplit(await asyncio.to_thread(at_provider))
        return await self.console.get(f"{back.path}?{back.query}")

    async def sign_in(self, return_to: str | None = None) -> ClientResponse:
        """Start at the console, sign in at the provider, land on the callback's onward page."""
        query = {"return_to": return_to} if return_to else None
        return await self.follow_to_provider(await self.console.get("/ui/sso/start", params=query))


@dataclass
class SsoInstall:
    install: Install
    provider: OidcProvider
    clock: FakeClock
    settings: SsoSettings

    async def person(self, account: Account) -> Person:
        """A fresh browser for `account`, not signed in anywhere yet."""
        browser = ProviderBrowser(self.provider)
        self._browsers.append(browser)
        return Person(await self.install.new_browser(), browser, account)

    async def signed_in(self, account: Account) -> Person:
        person = await self.person(account)
        onward = await person.sign_in()
        assert onward.status == 200, await onward.text()
        return person

    _browsers: list[ProviderBrowser] = field(default_factory=list)


async def open_sso_install(tmp_path: Path, provider: OidcProvider, port: int,
                           **sso: Any) -> AsyncIterator[SsoInstall]:
    secret = tmp_path / "client-secret"
    secret.write_text(provider.client_secret + "\n")
    settings = SsoSettings.model_validate({
        "issuer": provider.issuer, "client_id": provider.client_id,
        "client_secret_file": str(secret),
        "redirect_url": f"http://127.0.0.1:{port}/ui/sso/callback", "roles": ROLES,
        # Small, so a burst test reaches it.
        "signin_per_minute": 10,
        "scopes": ["openid", "email", "profile", "groups"], **sso})
    fresh = make_install(tmp_path / "data", sso=settings)
    clock = FakeClock()
    server = TestServer(fresh.app(clock=clock), port=port)
    opened: list[TestClient[Any, Any]] = []
    async with TestClient(server) as client:
        install = Install(server, fresh.settings, fresh.store, fresh.admin_key, Browser(client),
                          tmp_path / "data", opened)
        sso_install = SsoInstall(install, provider, clock, settings)
        yield sso_install
        for browser in sso_install._browsers:
            browser.close()
        for other in opened:
            await other.close()


@pytest.fixture
def sso_port() -> int:
    return free_port()


@pytest.fixture
def provider(tmp_path: Path, sso_port: int) -> Any:
    from tests.support.oidc_provider import running_provider

    with running_provider(tmp_path / "oidc", accounts=dict(ACCOUNTS),
                          redirect_uris=(f"http://127.0.0.1:{sso_port}/ui/sso/callback",)) as p:
        yield p


@pytest.fixture
async def sso(tmp_path: Path, provider: OidcProvider, sso_port: int) -> AsyncIterator[SsoInstall]:
    """An install whose console signs people in through a real provider."""
    async for found in open_sso_install(tmp_path, provider, sso_port):
        yield found
