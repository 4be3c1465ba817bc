"""The real app on a fresh install, driven as a browser would drive the console: cookies kept by
the test client, CSRF tokens read from the pages."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.settings import ServerSettings
from llmgw.store.store import Store
from tests.api.conftest import make_install

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = _CSRF.search(html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


@dataclass
class Browser:
    """A test client with its own cookie jar, like one browser."""

    client: TestClient[Any, Any]

    async def get(self, path: str, **kw: Any) -> ClientResponse:
        return await self.client.get(path, allow_redirects=False, **kw)

    async def post(self, path: str, data: dict[str, str] | None = None, **kw: Any) -> ClientResponse:
        return await self.client.post(path, data=data, allow_redirects=False, **kw)

    def set_cookie(self, name: str, value: str) -> None:
        """Put a cookie in this browser's jar as the console would have set it (Path=/ui)."""
        jar = self.client.session.cookie_jar
        jar.clear(lambda c: c.key == name)
        jar.update_cookies({name: value}, response_url=self.client.make_url("/ui/"))

    async def signin(self, key: str) -> ClientResponse:
        form = await self.get("/ui/signin")
        token = csrf_of(await form.text())
        return await self.post("/ui/signin", {"key": key, "csrf_token": token})

    async def csrf(self, path: str = "/ui/") -> str:
        """The CSRF token of this browser's session, read from a page."""
        resp = await self.get(path)
        assert resp.status == 200, await resp.text()
        return csrf_of(await resp.text())


@dataclass
class Install:
    """The app under test, its admin key, and a way to open more browsers against it."""

    server: TestServer
    settings: ServerSettings
    store: Store
    admin: str
    browser: Browser
    data: Path  # the install's data directory
    _opened: list[TestClient[Any, Any]]

    async def new_browser(self) -> Browser:
        client: TestClient[Any, Any] = TestClient(self.server)
        await client.start_server()
        self._opened.append(client)
        return Browser(client)

    async def api(self, method: str, path: str, body: Any = None, key: str | None = None
                  ) -> tuple[int, Any]:
        resp = await self.browser.client.request(
            method, path, json=body, headers={"Authorization": f"Bearer {key or self.admin}"})
        return resp.status, await resp.json()

    async def mint(self, name: str, key: str | None = None, **fields: Any) -> dict[str, Any]:
        status, body = await self.api("POST", "/admin/v1/keys", {"name": name, **fields}, key)
        assert status == 201, body
        return body  # type: ignore[no-any-return]


async def open_install(tmp_path: Path, **settings: Any) -> tuple[TestServer, ServerSettings, str, Store]:
    install = make_install(tmp_path / "data", **settings)
    return TestServer(install.app()), install.settings, install.admin_key, install.store


@pytest.fixture
async def install(tmp_path: Path) -> AsyncIterator[Install]:
    server, settings, admin, store = await open_install(tmp_path)
    opened: list[TestClient[Any, Any]] = []
    async with TestClient(server) as client:
        yield Install(server, settings, store, admin, Browser(client), tmp_path / "data", opened)
        for other in opened:
            await other.close()
