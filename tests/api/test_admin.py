"""What the admin API accepts into the catalog: model names, local files, Hub names, key variables."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from llmgw.core.types import STORED, Model
from llmgw.store.store import Store
from tests.api.conftest import MakeInstall
from tests.fakes.gguf_files import write_gguf


@dataclass
class Api:
    client: TestClient[Any, Any]
    headers: dict[str, str]
    data: Path  # the data dir
    extra_root: Path  # listed in config.toml's model_roots
    store: Store

    async def post(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        resp = await self.client.post(path, json=body, headers=self.headers)
        return resp.status, await resp.json()

    async def names(self) -> set[str]:
        resp = await self.client.get("/admin/v1/models", headers=self.headers)
        return {m["name"] for m in (await resp.json())["data"]}


@pytest.fixture
async def api(tmp_path: Path, fresh_install: MakeInstall) -> AsyncIterator[Api]:
    extra = tmp_path / "shared-models"
    extra.mkdir()
    install = fresh_install(model_roots=[str(extra)], provider_key_env=["OPENAI_API_KEY"])
    async with install.serve() as client:
        yield Api(client, install.admin, install.data, extra, install.store)


def remote(name: str, variable: str) -> dict[str, Any]:
    return {"name": name, "source": {"kind": "remote", "base_url": "https://api.example.com/v1",
                                     "api_key_env": variable}}


def local(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "source": {"kind": "local", "path": path},
            "profiles": [{"name": "cpu", "cpu_cores": 1024}], "scaling": {"min": 0, "max": 1}}


def local_job(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "source": {"kind": "local", "path": path}}


def hub_job(name: str = "tiny", repo: str = "acme/tiny-GGUF", file: str = "tiny.gguf",
            revision: str = "main") -> dict[str, Any]:
    return {"name": name, "source": {"kind": "hf", "repo": repo, "file": file,
                                     "revision": revision}}


# --- api_key_env -------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["PATH", "HOME", "LLMGW_PROVIDER_", "OPENAI_API_KEY_2",
                                      "LLMGW_PROVIDER_X=1", "llmgw_provider_x"])
async def test_a_remote_model_may_not_read_its_key_from_any_variable(api: Api, variable: str) -> None:
    status, body = await api.post("/admin/v1/models", remote("m", variable))
    assert status == 400
    assert body["error"]["param"] == "source.api_key_env"
    assert "LLMGW_PROVIDER_" in body["error"]["message"]
    assert os.environ["PATH"] not in str(body) and os.environ["HOME"] not in str(body)
    assert "m" not in await api.names()


async def test_the_prefix_and_the_variables_config_lists_are_accepted(api: Api) -> None:
    status, _ = await api.post("/admin/v1/models", remote("a", "LLMGW_PROVIDER_OPENAI"))
    assert status == 201
    status, _ = await api.post("/admin/v1/models", remote("b", "OPENAI_API_KEY"))
    assert status == 201
    status, _ = await api.post("/admin/v1/models", remote("c", None))  # type: ignore[arg-type]
    assert status == 201
    assert {"a", "b", "c"} <= await api.names()


# --- the dialect a remote provider speaks -------------------------------------------------------


async def test_a_remote_model_speaks_openai_unless_told_otherwise(api: Api) -> None:
    status, body = await api.post("/admin/v1/models", remote("gpt", "LLMGW_PROVIDER_OPENAI"))
    assert status == 201 and body["source"]["api"] == "openai"
    claude = remote("claude", "LLMGW_PROVIDER_ANTHROPIC")
    claude["source"] |= {"base_url": "https://api.anthropic.com/v1", "api": "anthropic"}
    status, body = await api.post("/admin/v1/models", claude)
    assert status == 201 and body["source"]["api"] == "anthropic"
    resp = await api.client.get("/admin/v1/models/claude", headers=api.headers)
    assert (await resp.json())["source"]["api"] == "anthropic"


@pytest.mark.parametrize("value", ["gemini", "Anthropic ", "", 1, None])
async def test_an_unknown_dialect_is_a_400_naming_the_field(api: Api, value: Any) -> None:
    body = remote("m", "LLMGW_PROVIDER_X")
    body["source"]["api"] = value
    status, answer = await api.post("/admin/v1/models", body)
    assert status == 400
    assert answer["error"]["param"].startswith("source.") and answer["error"]["param"].endswith(".api")
    assert "'openai' or 'anthropic'" in answer["error"]["message"]
    assert "m" not in await api.names()


async def test_a_dialect_is_for_remote_sources_only(api: Api) -> None:
    body = local("m", str(api.extra_root / "m.gguf"))
    body["source"]["api"] = "anthropic"
    status, answer = await api.post("/admin/v1/models", body)
    assert status == 400 and answer["error"]["param"].endswith("api")
    assert "m" not in await api.names()


# --- local files -------------------------------------------------------------------------------


def refused_paths(api: Api, tmp_path: Path) -> list[str]:
    """Paths that exist and paths that do not, outside the roots or not GGUF files. (A path with
    NUL is refused before any look at the disk, as every text with NUL is: `test_hardening`.)"""
    models = api.data / "models"
    models.mkdir(exist_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    write_gguf(outside / "real.gguf")
    (models / "text.gguf").write_bytes(b"hello")
    (models / "link.gguf").symlink_to(outside / "real.gguf")
    return ["/etc/passwd", "/etc/no-such-file", str(outside / "real.gguf"),
            str(outside / "missing.gguf"), str(models / "text.gguf"), str(models / "missing.gguf"),
            str(models / "link.gguf"), str(models / ".." / ".." / "outside" / "real.gguf"),
            "models/tiny.gguf", "tiny.gguf"]


async def test_model_add_answers_the_same_for_every_refused_path(api: Api, tmp_path: Path) -> None:
    answers = set()
    for i, path in enumerate(refused_paths(api, tmp_path)):
        status, body = await api.post("/admin/v1/models", local(f"m{i}", path))
        assert "/etc" not in body["error"]["message"]  # the path is not echoed
        answers.add((status, repr(body)))
    assert len(answers) == 1, answers
    [(status, body)] = answers
    assert status == 400 and "source.path" in body
    assert await api.names() == set()


async def test_local_serve_jobs_answer_the_same_whether_the_file_exists_or_not(
    api: Api, tmp_path: Path
) -> None:
    answers = set()
    for path in refused_paths(api, tmp_path):
        status, body = await api.post("/admin/v1/jobs", local_job("j", path))
        answers.add((status, repr(body)))
    assert len(answers) == 1, answers
    assert next(iter(answers))[0] == 400
    resp = await api.client.get("/admin/v1/jobs", headers=api.headers)
    assert (await resp.json())["data"] == []


async def test_a_gguf_inside_a_model_root_is_added_by_its_canonical_path(
    api: Api, tmp_path: Path
) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    (tmp_path / "via-link").symlink_to(api.data / "models")
    status, body = await api.post("/admin/v1/models", local("tiny", str(tmp_path / "via-link" /
                                                                        "tiny.gguf")))
    assert status == 201
    assert body["source"]["path"] == str(gguf.resolve())
    shared = write_gguf(api.extra_root / "shared.gguf")
    status, body = await api.post("/admin/v1/models", local("shared", str(shared)))
    assert status == 201 and body["source"]["path"] == str(shared.resolve())


# --- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a/../b", "../b", "a/./b", "a//b", "a/", "/a", "a/.b", "-a",
                                  "a\x00b", "a b", "x" * 129])
async def test_traversal_like_model_names_are_refused_by_add_and_serve(
    api: Api, name: str, tmp_path: Path
) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    status, body = await api.post("/admin/v1/models", local(name, str(gguf)))
    assert status == 400 and body["error"]["param"] == "name"
    status, body = await api.post("/admin/v1/jobs", local_job(name, str(gguf)))
    assert status == 400 and body["error"]["param"] == "name"
    status, body = await api.post("/admin/v1/jobs", hub_job(name=name))
    assert status == 400 and body["error"]["param"] == "name"
    resp = await api.client.get("/admin/v1/jobs", headers=api.headers)
    assert (await resp.json())["data"] == []


@pytest.mark.parametrize("name", ["gemma3-270m", "org/model", "qwen3:0.6b", "a.b_c-d/e:f"])
async def test_ordinary_model_names_are_accepted(api: Api, name: str) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    status, _ = await api.post("/admin/v1/models", local(name, str(gguf)))
    assert status == 201


@pytest.mark.parametrize(
    ("field", "source"),
    [
        ("file", hub_job(file="tiny\x00.gguf")),
        ("file", hub_job(file="../tiny.gguf")),
        ("file", hub_job(file="/etc/passwd")),
        ("file", hub_job(file="sub\\tiny.gguf")),
        ("file", hub_job(file="x" * 600)),
        ("repo", hub_job(repo="acme/../x")),
        ("repo", hub_job(repo="acme/x\x00")),
        ("revision", hub_job(revision="main/../../x")),
        ("revision", hub_job(revision="ma\x00in")),
    ],
)
async def test_bad_hub_names_are_a_clear_400_before_any_job_exists(
    api: Api, field: str, source: dict[str, Any]
) -> None:
    status, body = await api.post("/admin/v1/jobs", source)
    assert status == 400
    assert body["error"]["param"].endswith(field) and field in body["error"]["message"]
    assert "internal error" not in str(body)
    resp = await api.client.get("/admin/v1/jobs", headers=api.headers)
    assert (await resp.json())["data"] == []


# --- scaling and on-demand state ---------------------------------------------------------------


async def test_scale_to_zero_with_an_idle_time_and_the_idle_time_kept_until_changed(api: Api) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    await api.post("/admin/v1/models", local("tiny", str(gguf)))

    status, body = await api.post("/admin/v1/models/tiny/scale", {"min": 0, "max": 2, "idle_s": 600})
    assert status == 200 and body["scaling"] == {"min": 0, "max": 2, "idle_s": 600}

    _, body = await api.post("/admin/v1/models/tiny/scale", {"min": 0, "max": 3})
    assert body["scaling"]["idle_s"] == 600  # left out: unchanged

    _, body = await api.post("/admin/v1/models/tiny/scale", {"min": 0, "idle_s": None})
    assert body["scaling"] == {"min": 0, "max": 3, "idle_s": None}  # null: replicas above min stay


@pytest.mark.parametrize("idle", [0, -5, "10m", 31 * 86400])
async def test_a_bad_idle_time_is_a_400_naming_the_field(api: Api, idle: Any) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    await api.post("/admin/v1/models", local("tiny", str(gguf)))
    status, body = await api.post("/admin/v1/models/tiny/scale", {"min": 0, "idle_s": idle})
    assert status == 400 and body["error"]["param"] == "idle_s"


async def test_the_model_list_says_an_on_demand_model_nobody_asked_for_is_cold(api: Api) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    await api.post("/admin/v1/models", local("tiny", str(gguf)))
    resp = await api.client.get("/admin/v1/models", headers=api.headers)
    [tiny] = [m for m in (await resp.json())["data"] if m["name"] == "tiny"]
    assert tiny["state"] == "cold"


async def test_scaling_min_down_without_max_scales_down_unless_an_autoscaling_range_was_set(
    api: Api,
) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    await api.post("/admin/v1/models", local("tiny", str(gguf)))
    scale = "/admin/v1/models/tiny/scale"

    await api.post(scale, {"min": 3, "max": 3})
    _, body = await api.post(scale, {"min": 1})
    assert (body["scaling"]["min"], body["scaling"]["max"]) == (1, 1)  # one replica, not three
    _, body = await api.post(scale, {"min": 0})
    assert (body["scaling"]["min"], body["scaling"]["max"]) == (0, 1)  # on demand, can still start

    await api.post(scale, {"min": 0, "max": 4})
    _, body = await api.post(scale, {"min": 1})
    assert (body["scaling"]["min"], body["scaling"]["max"]) == (1, 4)  # the range stays


async def test_a_judge_cannot_be_scaled_to_zero(api: Api) -> None:
    gguf = write_gguf(api.data / "models" / "tiny.gguf")
    await api.post("/admin/v1/models", {**local("judge", str(gguf)), "guard": True})
    status, body = await api.post("/admin/v1/models/judge/scale", {"min": 0, "max": 1})
    assert status == 400 and body["error"]["param"] == "min"
    assert "judge" in body["error"]["message"]


SECRET_URL = "https://alice:pw-s3cret@api.example.com/v1?api-version=2024&api_key=sk-q-s3cret"
SHOWN_URL = "https://***@api.example.com/v1?api-version=***&api_key=***"


async def test_no_catalog_read_shows_a_provider_urls_credentials(api: Api) -> None:
    """A remote model's `user:password@` and query values are the provider's credentials: no
    answer of the admin API shows them (ctl and the console read these answers)."""
    status, added = await api.post("/admin/v1/models", {
        "name": "r", "source": {"kind": "remote", "base_url": SECRET_URL}})
    assert status == 201, added
    answers = [added]
    for method, path, body in [("GET", "/admin/v1/models", None), ("GET", "/admin/v1/models/r", None),
                               ("GET", "/admin/v1/models/r/resources", None),
                               ("POST", "/admin/v1/models/r/scale", {"min": 0, "max": 1}),
                               ("PUT", "/admin/v1/models/r/cache", {"cache": None})]:
        resp = await api.client.request(method, path, json=body, headers=api.headers)
        assert resp.status == 200, await resp.text()
        answers.append(await resp.json())
    for answer in answers:
        assert "s3cret" not in str(answer)
    assert added["source"]["base_url"] == SHOWN_URL
    # The catalog itself keeps the URL whole: the upstream call needs it.
    source = api.store.catalog.get("r").source
    assert getattr(source, "base_url", None) == SECRET_URL


@pytest.mark.parametrize("port", ["99999", "abc", "0", "-1"])
async def test_a_base_url_whose_port_does_not_parse_is_a_400_naming_the_field(
        api: Api, port: str) -> None:
    status, body = await api.post("/admin/v1/models", {
        "name": "r", "source": {"kind": "remote", "base_url": f"https://u:pw@api.example.com:{port}/v1"}})
    assert status == 400, body
    assert body["error"]["param"] == "source.remote.base_url"
    assert "port" in body["error"]["message"] and "pw" not in body["error"]["message"]
    assert await api.names() == set()


async def test_an_entry_stored_with_a_port_that_does_not_parse_stays_readable_and_answers_a_502(
        api: Api) -> None:
    """Stored by a version that took such URLs: listed (hidden as ever), its requests the
    upstream's 502 rather than a 500, and removable."""
    old = Model.model_validate({"name": "old", "source": {
        "kind": "remote", "base_url": "https://u:pw-s3cret@api.example.com:99999/v1"}}, context=STORED)
    api.store.catalog.add(old, "an earlier version", datetime.now(UTC))
    status, body = await api.post("/admin/v1/models", remote("new", "LLMGW_PROVIDER_X"))
    assert status == 201, body  # a change through the API: the data plane reads the catalog again
    resp = await api.client.get("/admin/v1/models", headers=api.headers)
    listed = {m["name"]: m for m in (await resp.json())["data"]}
    assert listed["old"]["source"]["base_url"] == "https://***@api.example.com:99999/v1"
    status, answer = await api.post("/v1/chat/completions", {
        "model": "old", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 502 and answer["error"]["code"] == "upstream_error", answer
    assert "s3cret" not in str(answer)
    resp = await api.client.delete("/admin/v1/models/old", headers=api.headers)
    assert resp.status == 200
    assert await api.names() == {"new"}
