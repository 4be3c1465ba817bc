"""The OpenAPI document: valid OpenAPI 3.1, and exactly the routes the app serves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import schemathesis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import OpenAPIV31SpecValidator

from llmgw.api.registry import ENDPOINTS, spec
from llmgw.store.store import Store
from tests.api.conftest import make_install

METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
PUBLIC = {("get", "/health"), ("get", "/openapi.json")}


def build(data_dir: Path) -> tuple[web.Application, Store, str]:
    """The real app on a fresh install (no models, guard off)."""
    install = make_install(data_dir)
    return install.app(), install.store, install.admin_key


@pytest.fixture
def app(tmp_path: Path) -> Iterator[web.Application]:
    app, store, _ = build(tmp_path / "data")
    try:
        yield app
    finally:
        store.close()  # the app never started, so its cleanup never runs


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], str]]:
    app, _, key = build(tmp_path / "data")
    async with TestClient(TestServer(app)) as client:
        yield client, key


def operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, item in doc["paths"].items() for method in item
            if method in METHODS}


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = spec()
    assert doc["openapi"].startswith("3.1.")
    errors = [str(e) for e in OpenAPIV31SpecValidator(doc).iter_errors()]  # $refs resolved
    assert errors == []
    # schemathesis reads it too, operation by operation.
    loaded = schemathesis.openapi.from_dict(doc)
    ops = [r.ok() for r in loaded.get_all_operations()]
    assert len(ops) == len(operations(doc))


def test_every_route_is_documented_and_every_documented_operation_is_a_route(
    app: web.Application,
) -> None:
    routes = set()
    for route in app.router.routes():
        if route.method == "HEAD":  # aiohttp adds one beside each GET
            continue
        assert route.resource is not None
        # The console's pages, and `/`, which sends a browser there: not the API.
        if route.resource.canonical.startswith("/ui") or route.resource.canonical == "/":
            continue
        routes.add((route.method.lower(), route.resource.canonical))
    documented = operations(spec())
    assert routes - documented == set(), "routes missing from the document"
    assert documented - routes == set(), "documented operations the app does not serve"


def test_path_parameters_are_declared_for_every_template() -> None:
    for path, item in spec()["paths"].items():
        declared = {p["name"] for p in item.get("parameters", []) if p["in"] == "path"}
        in_path = {part[1:-1] for part in path.split("/") if part.startswith("{")}
        assert declared == in_path, path


def test_every_operation_answers_errors_in_openai_shape_and_says_how_it_is_authenticated() -> None:
    doc = spec()
    error = doc["components"]["responses"]["Error"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/Error"}
    assert doc["components"]["schemas"]["Error"]["properties"]["error"]["required"] == [
        "message", "type", "param", "code"]
    assert doc["security"] == [{"bearer": []}]
    assert doc["components"]["securitySchemes"]["bearer"] == {
        **doc["components"]["securitySchemes"]["bearer"], "type": "http", "scheme": "bearer"}
    for method, path in operations(doc):
        op = doc["paths"][path][method]
        # Anthropic's clients read Anthropic's errors, MCP's JSON-RPC's: their paths answer so.
        errors = "AnthropicError" if path.startswith("/v1/messages") else \
            "JsonRpcError" if path.startswith("/mcp") else "Error"
        for status in ("4XX", "5XX"):
            assert op["responses"][status] == {"$ref": f"#/components/responses/{errors}"}, (method, path)
        assert (op.get("security") == []) == ((method, path) in PUBLIC), (method, path)


def test_admin_bodies_come_from_the_models_the_handlers_validate_with() -> None:
    doc = spec()
    schemas = doc["components"]["schemas"]
    body = doc["paths"]["/admin/v1/models"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/Model"}
    assert schemas["Model"]["required"] == ["name", "source"]
    assert schemas["HubSource"]["required"][0] == "kind"  # the discriminator must be sent
    assert "name" not in schemas["PolicyBody"]["required"]  # the path names the policy
    assert schemas["ScaleRequest"]["additionalProperties"] is False
    for name in ("Policy", "ServeRequest", "KeyRequest", "Limits", "EnableJudge", "JudgmentRequest"):
        assert schemas[name]["type"] == "object", name
    chat = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
    assert chat["schema"]["required"] == ["model", "messages"]
    assert chat["schema"]["properties"]["max_tokens"]["minimum"] == 1


async def test_the_route_serves_the_document_without_a_key(
    client: tuple[TestClient[Any, Any], str],
) -> None:
    http, _ = client
    resp = await http.get("/openapi.json")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert orjson.loads(await resp.read()) == spec()
    again = await http.get("/openapi.json")
    assert await again.read() == await resp.read()  # built once


def test_every_operation_is_named_once_after_its_endpoint() -> None:
    ids = [op["operationId"] for path in spec()["paths"].values() for method, op in path.items()
           if method in METHODS]
    assert sorted(ids) == sorted(ep.name for ep in ENDPOINTS)
    assert len(set(ids)) == len(ids)


def test_answers_and_queries_come_from_the_protocol_models() -> None:
    doc = spec()
    schemas = doc["components"]["schemas"]
    keys = doc["paths"]["/admin/v1/keys"]["get"]["responses"]["200"]["content"]["application/json"]
    listed = schemas[keys["schema"]["$ref"].rsplit("/", 1)[1]]
    key = schemas[listed["properties"]["data"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert "hash" not in key["properties"] and "label" in key["required"]
    job = doc["paths"]["/admin/v1/jobs/{id}"]["get"]["responses"]["200"]["content"]["application/json"]
    assert "model" in schemas[job["schema"]["$ref"].rsplit("/", 1)[1]]["properties"]
    verdicts = {p["name"]: p for p in doc["paths"]["/admin/v1/guard/verdicts"]["get"]["parameters"]}
    assert set(verdicts) == {"since", "policy", "judge", "outcome", "request_id", "limit"}
    assert not any(p["required"] for p in verdicts.values())
    assert verdicts["outcome"]["schema"] == {"$ref": "#/components/schemas/Outcome"}
