"""The route seam: `invoke` (the console's way in) checks access and validates exactly as HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.api import data_plane
from llmgw.api.admin import keys, models
from llmgw.api.appkeys import KEYS
from llmgw.api.endpoints import invoke
from llmgw.core.errors import Forbidden, InvalidRequest, NotFound
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.keys import KeyOut, KeyRequest
from llmgw.core.protocol.models import ScaleRequest
from llmgw.core.types import ApiKey
from tests.api.test_openapi import build


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[web.Application]:
    app, _, _ = build(tmp_path / "data")
    async with TestClient(TestServer(app)):  # runs the app's start-up, as `server run` does
        yield app


async def admin_key(app: web.Application) -> ApiKey:
    return await app[KEYS].find("admin")


async def user_key(app: web.Application, name: str, minter: ApiKey | None = None) -> ApiKey:
    key, _ = await app[KEYS].create(KeyRequest(name=name), minter or await admin_key(app))
    return key


async def test_a_user_key_cannot_invoke_an_admin_endpoint(app: web.Application) -> None:
    with pytest.raises(Forbidden):
        await invoke(models.LIST_MODELS, app, await user_key(app, "u"))


async def test_invoke_answers_the_protocol_model(app: web.Application) -> None:
    listed = await invoke(keys.LIST_KEYS, app, await admin_key(app))
    assert isinstance(listed, DataList) and all(isinstance(k, KeyOut) for k in listed.data)
    assert [k.name for k in listed.data] == ["admin"]


async def test_invoke_validates_a_body_as_http_does_naming_the_field(app: web.Application) -> None:
    model = {"name": "m", "source": {"kind": "remote", "base_url": "http://127.0.0.1:9/v1"}}
    root = await admin_key(app)
    await invoke(models.ADD_MODEL, app, root, body=model)
    with pytest.raises(InvalidRequest) as bad:
        await invoke(models.SCALE_MODEL, app, root, body={"min": -1}, params={"name": "m"})
    assert bad.value.param == "min"
    # A model's unset fields stay unset: leaving out idle_s leaves it as it was.
    await invoke(models.SCALE_MODEL, app, root, body=ScaleRequest(min=0, idle_s=60), params={"name": "m"})
    scaled = await invoke(models.SCALE_MODEL, app, root, body=ScaleRequest(min=0, max=2),
                          params={"name": "m"})
    assert scaled.scaling.idle_s == 60 and scaled.scaling.max == 2


async def test_invoke_hides_another_familys_key_as_http_does(app: web.Application) -> None:
    alice, bob = await user_key(app, "alice"), await user_key(app, "bob")
    child = await user_key(app, "alice-ci", alice)
    assert (await invoke(keys.GET_KEY, app, alice, params={"id": child.id})).id == child.id
    for ref in (bob.id, "bob", (await admin_key(app)).id):
        with pytest.raises(NotFound) as hidden:
            await invoke(keys.GET_KEY, app, alice, params={"id": ref})
        assert hidden.value.message == f"key {ref!r} does not exist"


async def test_a_query_is_validated_too(app: web.Application) -> None:
    root = await admin_key(app)
    with pytest.raises(InvalidRequest) as bad:
        await invoke(keys.USAGE, app, root, query={"since": "yesterday"})
    assert bad.value.param == "since"


async def test_the_data_plane_is_not_invoked_around_http(app: web.Application) -> None:
    with pytest.raises(InvalidRequest):
        await invoke(data_plane.CHAT, app, await admin_key(app), body={"model": "m", "messages": []})
