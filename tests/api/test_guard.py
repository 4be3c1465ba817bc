"""Guard administration in the admin API: what a judge enabled by repo may be."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.api.conftest import MakeInstall


@pytest.fixture
async def api(fresh_install: MakeInstall,
              ) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str]]]:
    install = fresh_install()
    async with install.serve() as client:
        yield client, install.admin


@pytest.mark.parametrize(
    ("repo", "file", "name", "param"),
    [
        ("../x", "../../y", "evil", "repo"),
        ("acme/../../etc", "g.gguf", "evil", "repo"),
        ("acme guard", "g.gguf", "evil", "repo"),
        ("acme/guard\n", "g.gguf", "evil", "repo"),
        ("acme/guard", "../../y.gguf", "evil", "file"),
        ("acme/guard", "a/../../etc/passwd", "evil", "file"),
        ("acme/guard", "/etc/passwd", "evil", "file"),
        ("acme/guard", "g\x00.gguf", "evil", "file"),
        ("acme/guard", "sub\\g.gguf", "evil", "file"),
        ("acme/guard", "g.gguf", "../evil", "name"),
        ("acme/guard", "g .gguf", None, "file"),
        ("acme/guard", "g.gguf", "a//b", "name"),
    ],
)
async def test_a_judge_that_could_not_be_fetched_safely_is_refused_and_not_stored(
    api: Any, repo: str, file: str, name: str | None, param: str
) -> None:
    client, headers = api
    body = {"repo": repo, "file": file, "name": name}
    resp = await client.post("/admin/v1/guard/judges", data=json.dumps(body), headers=headers)

    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert file not in error["message"] and repo not in error["message"]
    judges = await (await client.get("/admin/v1/guard/judges", headers=headers)).json()
    assert [j["judge"] for j in judges["data"] if j["source"] == "enabled"] == []


async def test_a_judge_with_a_hub_repo_and_file_is_enabled(api: Any) -> None:
    client, headers = api
    body = {"repo": "acme/Guard-GGUF", "file": "q4/guard.Q4_K_M.gguf"}
    resp = await client.post("/admin/v1/guard/judges", data=json.dumps(body), headers=headers)

    assert resp.status == 201
    assert (await resp.json())["name"] == "guard.q4_k_m"
