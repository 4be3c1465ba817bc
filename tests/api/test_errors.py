"""The HTTP surface on bad input: every error in OpenAI's shape with the right status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.api.conftest import MakeInstall
from tests.fakes.gguf_files import write_gguf


@pytest.fixture
async def api(fresh_install: MakeInstall) -> AsyncIterator[tuple[TestClient[Any, Any], str]]:
    """The real app on a fresh install with no models, and its admin key."""
    install = fresh_install(max_body_bytes=4096)
    async with install.serve() as client:
        yield client, install.admin_key


def assert_openai_error(body: dict[str, Any], code: str | None = None) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code


async def post(api: tuple[TestClient[Any, Any], str], path: str, data: bytes,
               key: str | None = None) -> tuple[int, dict[str, Any]]:
    client, admin = api
    resp = await client.post(path, data=data, headers={"Authorization": f"Bearer {key or admin}"})
    return resp.status, await resp.json()


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b"", 400, "empty"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400, "'model'"),
        (b'{"model": "m"}', 400, "'messages'"),
        (b'{"model": 5, "messages": []}', 400, "'model' must be a string"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400, "stream"),
        (b'{"model": "ghost", "messages": [{"role": "user", "content": "x"}]}', 404, "ghost"),
    ],
)
async def test_bad_chat_requests(api: Any, body: bytes, status: int, fragment: str) -> None:
    got, data = await post(api, "/v1/chat/completions", body)
    assert got == status
    assert_openai_error(data)
    assert fragment in data["error"]["message"]


async def test_a_body_over_the_limit_is_413_even_without_content_length(api: Any) -> None:
    client, key = api

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 1024  # chunked: no Content-Length to trust

    resp = await client.post("/v1/chat/completions", data=chunks(),
                             headers={"Authorization": f"Bearer {key}"})
    assert resp.status == 413
    assert_openai_error(await resp.json(), "request_too_large")


async def test_unknown_path_and_wrong_method_are_openai_errors(api: Any) -> None:
    client, key = api
    resp = await client.get("/v1/nope", headers={"Authorization": f"Bearer {key}"})
    assert resp.status == 404
    assert_openai_error(await resp.json())
    resp = await client.get("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"})
    assert resp.status == 405
    assert_openai_error(await resp.json())


async def test_missing_key_is_401(api: Any) -> None:
    client, _ = api
    resp = await client.post("/v1/chat/completions", data=b"{}")
    assert resp.status == 401
    assert_openai_error(await resp.json(), "missing_api_key")


async def test_a_model_with_no_ready_replica_is_503_saying_why(api: Any, tmp_path: Path) -> None:
    client, key = api
    headers = {"Authorization": f"Bearer {key}"}
    gguf = write_gguf(tmp_path / "data" / "models" / "m.gguf")
    model = {"name": "huge", "source": {"kind": "local", "path": str(gguf)},
             "profiles": [{"name": "cpu", "cpu_cores": 1024, "min_memory_gb": 1}]}
    resp = await client.post("/admin/v1/models", json=model, headers=headers)
    assert resp.status == 201
    chat = {"model": "huge", "messages": [{"role": "user", "content": "x"}]}

    # The model resolves as soon as the add returns; the keeper records why it cannot be
    # placed a moment later, so poll for that with a deadline.
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        r = await client.post("/v1/chat/completions", json=chat, headers=headers)
        assert r.status == 503
        data = await r.json()
        if "needs 1024 cores" in data["error"]["message"]:
            break
        assert asyncio.get_running_loop().time() < deadline, data
        await asyncio.sleep(0.05)
    assert_openai_error(data, "no_ready_replica")


async def test_admin_validation_errors_name_the_field(api: Any) -> None:
    client, key = api
    headers = {"Authorization": f"Bearer {key}"}
    bad = {"name": "x", "source": {"kind": "remote", "base_url": "ftp://nope"}}
    resp = await client.post("/admin/v1/models", json=bad, headers=headers)
    assert resp.status == 400
    data = await resp.json()
    assert_openai_error(data)
    assert "base_url" in data["error"]["message"]
    resp = await client.post("/admin/v1/models/ghost/scale", json={"min": 1}, headers=headers)
    assert resp.status == 404
