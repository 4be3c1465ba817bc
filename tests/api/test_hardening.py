"""Bad input never crashes the gateway: limits on nesting, size, types and slow bodies."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp.test_utils import TestClient

from llmgw.api import body as body_module
from tests.api.conftest import FreshInstall, MakeInstall
from tests.support.pg import fresh_database


@asynccontextmanager
async def serving(install: FreshInstall,
                  ) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str]]]:
    """A fresh install's app and its admin key's headers."""
    async with install.serve() as client:
        yield client, install.admin
    install.store.close()


@pytest.fixture
async def api(fresh_install: MakeInstall,
              ) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str]]]:
    async with serving(fresh_install()) as served:
        yield served


@pytest.fixture(params=["sqlite", "postgresql"])
async def any_api(request: pytest.FixtureRequest, fresh_install: MakeInstall,
                  ) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str]]]:
    """`api` on SQLite, then on a real PostgreSQL."""
    database = ""
    if request.param == "postgresql":
        database = fresh_database(request.getfixturevalue("postgres_url"))
    async with serving(fresh_install(database=database)) as served:
        yield served


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("payload", "fragment", "param"),
    [
        (chat(max_tokens=10**12), "max_tokens", "max_tokens"),
        (chat(max_tokens=0), "max_tokens", "max_tokens"),
        (chat(max_tokens="ten"), "max_tokens", "max_tokens"),
        (chat(max_tokens=True), "max_tokens", "max_tokens"),
        (chat(max_completion_tokens=-1), "max_completion_tokens", "max_completion_tokens"),
        (chat(tools=nested(100)), "nested deeper than 64", None),
        ({"model": ["m"], "messages": [{"role": "user", "content": "x"}]}, "'model' must be a string",
         "model"),
        ({"model": "m", "messages": "hello"}, "'messages' must be an array", "messages"),
    ],
)
async def test_wrong_shapes_are_400_naming_what_is_wrong(
    api: Any, payload: dict[str, Any], fragment: str, param: str | None
) -> None:
    client, headers = api
    resp = await client.post("/v1/chat/completions", data=json.dumps(payload), headers=headers)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert fragment in error["message"] and error["param"] == param


async def test_too_many_values_are_refused(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    client, headers = api
    monkeypatch.setattr(body_module, "MAX_ITEMS", 1000)
    payload = chat(stop=["x"] * 2000)
    resp = await client.post("/v1/chat/completions", data=json.dumps(payload), headers=headers)
    assert resp.status == 400
    assert "more than 1000 values" in (await resp.json())["error"]["message"]


@pytest.mark.parametrize("raw", [b'{"model": "\xff\xfe", "messages": []}', b"\xef\xbb\xbf{}", b"{\"a\": 1,}"])
async def test_malformed_utf8_and_json_are_400(api: Any, raw: bytes) -> None:
    client, headers = api
    resp = await client.post("/v1/chat/completions", data=raw, headers=headers)
    assert resp.status == 400
    assert (await resp.json())["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "allowed", "model": "forbidden", "messages": []}',
        # The same key spelled with an escape: still the same key to every JSON parser.
        b'{"model": "allowed", "mod\\u0065l": "forbidden", "messages": []}',
        b'{"messages": [], "max_tokens": 1, "model": "m", "max_tokens": 100000}',
        b'{"model": "allowed", "user": "user", "model"\n\t : "forbidden", "messages": []}',
    ],
)
async def test_a_repeated_top_level_key_is_refused(api: Any, raw: bytes) -> None:
    # The gateway would check the last value and forward bytes an upstream may read as the first.
    client, headers = api
    resp = await client.post("/v1/chat/completions", data=raw, headers=headers)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert "repeats a top-level key" in error["message"] and "forbidden" not in error["message"]


async def test_a_key_name_seen_again_as_a_value_or_nested_is_fine(api: Any) -> None:
    client, headers = api
    payload = {"model": "model", "user": "u1", "stream": False,
               "messages": [{"role": "user", "content": "\u00e9 \\/ the model", "model": 1}]}
    resp = await client.post("/v1/chat/completions", data=json.dumps(payload), headers=headers)
    assert resp.status == 404  # past the body checks: the model does not exist


async def test_a_slow_body_is_cut_off(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    client, headers = api
    monkeypatch.setattr(body_module, "BODY_TIMEOUT_S", 0.3)
    sent_first = asyncio.Event()

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"model": "m", '
        sent_first.set()
        await asyncio.sleep(30)  # the fault: a client that stops sending
        yield b"}"

    resp = await client.post("/v1/chat/completions", data=trickle(), headers=headers)
    assert sent_first.is_set()
    assert resp.status == 400
    assert "did not arrive within" in (await resp.json())["error"]["message"]


async def test_every_response_carries_a_request_id(api: Any) -> None:
    client, headers = api
    resp = await client.get("/v1/models", headers={**headers, "X-Request-Id": "trace-42"})
    assert resp.headers["X-Request-Id"] == "trace-42"
    resp = await client.get("/v1/nope", headers={"X-Request-Id": "bad id with spaces"})
    assert resp.headers["X-Request-Id"].startswith("req-")


async def test_admin_endpoints_refuse_a_user_key(api: Any) -> None:
    client, headers = api
    made = await client.post("/admin/v1/keys", json={"name": "u"}, headers=headers)
    user = {"Authorization": f"Bearer {(await made.json())['key']}"}
    # Keys and usage answer a user key too, limited to its own (tests/api/test_keys.py).
    for method, path in [("GET", "/admin/v1/models"), ("PUT", "/admin/v1/limits/default"),
                         ("POST", "/admin/v1/guard/switches"), ("GET", "/admin/v1/nodes"),
                         ("POST", "/admin/v1/keys/u/rotate")]:
        resp = await client.request(method, path, headers=user, json={})
        assert resp.status == 403, path
        assert (await resp.json())["error"]["code"] == "forbidden"


async def test_cors_is_off(api: Any) -> None:
    client, headers = api
    resp = await client.options("/v1/chat/completions", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_metrics_count_requests_by_model_status_and_key_prefix(api: Any) -> None:
    client, headers = api
    await client.post("/admin/v1/models", headers=headers, json={
        "name": "far", "source": {"kind": "remote", "base_url": "http://127.0.0.1:9/v1"}})
    resp = await client.post("/v1/chat/completions", json=chat(model="far"), headers=headers)
    assert resp.status == 502
    text = await (await client.get("/metrics", headers=headers)).text()
    prefix = headers["Authorization"].split()[1][:13]
    assert (f'llmgw_requests_total{{api="chat_completions",key="{prefix}",model="far",status="502"}} 1.0'
            in text)
    assert 'llmgw_upstream_errors_total{code="upstream_error",model="far"} 1.0' in text
    assert 'llmgw_replicas_ready{model="far"} 1.0' in text
    assert "llmgw_gateway_added_seconds_bucket" in text


async def test_metrics_need_an_admin_or_metrics_key_unless_public(api: Any) -> None:
    client, headers = api
    assert (await client.get("/metrics")).status == 401
    made = await client.post("/admin/v1/keys", json={"name": "u"}, headers=headers)
    user = {"Authorization": f"Bearer {(await made.json())['key']}"}
    resp = await client.get("/metrics", headers=user)
    assert resp.status == 403 and "metrics" in (await resp.json())["error"]["message"]
    made = await client.post("/admin/v1/keys", json={"name": "prom", "scope": "metrics"},
                             headers=headers)
    assert made.status == 201
    scraper = {"Authorization": f"Bearer {(await made.json())['key']}"}
    for who in (headers, scraper):
        resp = await client.get("/metrics", headers=who)
        assert resp.status == 200 and "llmgw_" in await resp.text()


async def test_public_metrics_take_no_key(fresh_install: MakeInstall) -> None:
    async with fresh_install(metrics_public=True).serve() as client:
        assert (await client.get("/metrics")).status == 200


async def test_a_metrics_key_reaches_nothing_but_metrics(api: Any) -> None:
    client, headers = api
    made = await client.post("/admin/v1/keys", json={"name": "prom", "scope": "metrics"},
                             headers=headers)
    scraper = {"Authorization": f"Bearer {(await made.json())['key']}"}
    # Every route the app serves, with the metrics key: refused wherever a key is asked for.
    checked = 0
    for route in client.server.app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        # The console reads no Authorization header (its session is a cookie that a metrics key
        # cannot get: tests/api/console/test_pages_signin.py); `/` serves nothing but where to go.
        if route.method == "HEAD" or path in ("/", "/metrics", "/health", "/openapi.json") \
                or path.startswith("/ui"):
            continue
        url = path.replace("{", "").replace("}", "")  # any value for a path parameter
        resp = await client.request(route.method, url, headers=scraper, json={"model": "m"})
        assert resp.status == 403, (route.method, path, resp.status)
        checked += 1
    assert checked > 20
    # Nor can an admin mint it a model list that would say otherwise, nor can it mint.
    resp = await client.post("/admin/v1/keys", headers=headers,
                             json={"name": "p2", "scope": "metrics", "models": ["m"]})
    assert resp.status == 400


# The calendar's edges with a zone: in UTC, a day before year 1 and a day after year 9999.
EDGES = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]


@pytest.mark.parametrize("edge", EDGES)
async def test_a_time_past_the_calendars_edge_in_utc_is_a_400_naming_it(api: Any, edge: str) -> None:
    client, headers = api
    resp = await client.post("/admin/v1/keys", json={"name": "u"}, headers=headers)
    user = {"Authorization": f"Bearer {(await resp.json())['key']}"}
    since = quote(edge)
    for who, method, path, body, param in [
        (headers, "GET", f"/admin/v1/audit?since={since}", None, "since"),
        (headers, "GET", f"/admin/v1/guard/verdicts?since={since}", None, "since"),
        (user, "GET", f"/admin/v1/usage?since={since}", None, "since"),
        (user, "POST", "/admin/v1/keys", {"name": "k", "expires_at": edge}, "expires_at"),
    ]:
        resp = await client.request(method, path, json=body, headers=who)
        assert resp.status == 400, (path, await resp.text())
        error = (await resp.json())["error"]
        assert error["param"] == param, (path, error)


@pytest.mark.parametrize("field", ["name", "note"])
async def test_nul_in_a_new_keys_text_is_a_400_and_no_store_error_logs_the_key(
        any_api: Any, field: str, caplog: pytest.LogCaptureFixture) -> None:
    """PostgreSQL cannot store NUL: refused at the wire, before the key is made, and had a write
    failed, its error would carry no bound value (the new key's hash among them)."""
    client, headers = any_api
    body = {"name": "ok", field: "a\x00b"}
    with caplog.at_level(logging.DEBUG):
        resp = await client.post("/admin/v1/keys", json=body, headers=headers)
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["param"] == field and "NUL" in error["message"]
    resp = await client.get("/admin/v1/keys", headers=headers)
    assert [k["name"] for k in (await resp.json())["data"]] == ["admin"]
    assert "INSERT" not in caplog.text


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/admin/v1/keys", {"name": "bell\x07"}, "name"),
    ("/admin/v1/keys", {"name": "k", "note": "esc\x1b[31m"}, "note"),
    ("/admin/v1/models", {"name": "m", "source": {"kind": "remote",
                                                  "base_url": "https://a.example/v1\x7f"}},
     "source.base_url"),
    ("/admin/v1/teams", {"name": "red", "limits": {"rpm": 1, "\x01": 1}}, "limits"),
])
async def test_control_characters_in_stored_text_are_a_400_naming_the_field(
        api: Any, path: str, body: dict[str, Any], param: str) -> None:
    client, headers = api
    resp = await client.post(path, json=body, headers=headers)
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["param"] == param and "control characters" in error["message"]


async def test_a_note_may_hold_tabs_and_line_breaks(api: Any) -> None:
    client, headers = api
    resp = await client.post("/admin/v1/keys", json={"name": "k", "note": "a\tb\r\nc"},
                             headers=headers)
    assert resp.status == 201, await resp.text()
