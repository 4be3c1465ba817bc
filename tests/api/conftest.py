"""The server under test for the HTTP layer's tests: the real app on a fresh install.

`fresh_install(**settings)` runs `server init` (guard off) in the test's `tmp_path / "data"`,
loads its config with `settings` changed and opens its store; `.app()` builds the real app on it
and `.serve()` starts it behind a test client:

    install = fresh_install(embedded_node=False)
    async with install.serve() as client:
        await client.get("/admin/v1/models", headers=install.admin)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.settings import ServerSettings, load
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.store.store import Store


@dataclass
class FreshInstall:
    """A fresh install: its data directory, its settings as the test changed them, its open
    store and the admin key `server init` printed."""

    data: Path
    settings: ServerSettings
    store: Store
    admin_key: str

    @property
    def admin(self) -> dict[str, str]:
        """The admin key's headers."""
        return {"Authorization": f"Bearer {self.admin_key}"}

    def app(self, **server: Any) -> web.Application:
        """The real app on this install (`server`: `Server`'s other fields, e.g. a clock)."""
        return Server(self.data, self.settings, self.store, **server).build_app()

    @asynccontextmanager
    async def serve(self, **server: Any) -> AsyncIterator[TestClient[Any, Any]]:
        """The real app, started (its start-up runs, as in `server run`), and a client to it."""
        async with TestClient(TestServer(self.app(**server))) as client:
            yield client


def make_install(data: Path, *, database: str = "", **settings: Any) -> FreshInstall:
    """`server init` in `data` (guard off; on `database`, else SQLite), its config loaded with
    `settings` changed, and its store opened."""
    result = init(data, database=database, guard=False)
    assert result.admin_key
    config = load(data).model_copy(update=settings)
    return FreshInstall(data, config, Store.open(config.database_url(data)), result.admin_key)


async def call(client: TestClient[Any, Any], method: str, path: str, body: Any,
               headers: dict[str, str]) -> tuple[int, Any]:
    """One JSON request to the app under test: the status and the decoded answer."""
    resp = await client.request(method, path, json=body, headers=headers)
    return resp.status, await resp.json()


async def add_remote_models(client: TestClient[Any, Any], headers: dict[str, str], base_url: str,
                            *names: str) -> None:
    """Catalog models served by the provider at `base_url` (a fake one, usually)."""
    for name in names:
        status, made = await call(client, "POST", "/admin/v1/models", {
            "name": name, "source": {"kind": "remote", "base_url": base_url}}, headers)
        assert status == 201, made


class MakeInstall(Protocol):
    def __call__(self, *, database: str = "", **settings: Any) -> FreshInstall: ...


@pytest.fixture
def fresh_install(tmp_path: Path) -> MakeInstall:
    """Makes the server under test: a fresh install in `tmp_path / "data"` (see `make_install`)."""

    def make(*, database: str = "", **settings: Any) -> FreshInstall:
        return make_install(tmp_path / "data", database=database, **settings)

    return make

