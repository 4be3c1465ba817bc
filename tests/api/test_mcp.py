"""`/mcp` on bad input: every refusal in JSON-RPC's shape with the right status, and no
message is answered without its session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from tests.api.conftest import MakeInstall

ACCEPT = "application/json, text/event-stream"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}}}


@pytest.fixture
async def api(fresh_install: MakeInstall) -> AsyncIterator[tuple[TestClient[Any, Any], str]]:
    """The real app on a fresh install with a small body bound, and its admin key."""
    install = fresh_install(max_body_bytes=4096)
    async with install.serve() as client:
        yield client, install.admin_key


async def post(api: tuple[TestClient[Any, Any], str], data: bytes,
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    client, admin = api
    resp = await client.post("/mcp", data=data, headers={
        "Authorization": f"Bearer {admin}", "Accept": ACCEPT, **(headers or {})})
    return resp.status, await resp.json()


def assert_jsonrpc_error(body: dict[str, Any], code: int) -> None:
    assert set(body) == {"jsonrpc", "id", "error"} and body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code and body["error"]["message"]


@pytest.mark.parametrize(("data", "status", "code"), [
    (b"{not json", 400, -32700),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', 400, -32600),  # a batch
    (b'{"id": 1, "method": "ping"}', 400, -32600),  # no jsonrpc
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', 400, -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"p": "' + b"a" * 5000 + b'"}}',
     413, -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"a": ' + b"[" * 100 + b"]" * 100
     + b"}}", 400, -32600),  # nested past the bound
])
async def test_a_body_that_is_no_message_is_refused_in_json_rpc_shape(
        api: tuple[TestClient[Any, Any], str], data: bytes, status: int, code: int) -> None:
    got, body = await post(api, data)
    assert got == status, body
    assert_jsonrpc_error(body, code)
    assert b"aaaa" not in orjson.dumps(body)  # never the request's bytes


async def test_a_message_needs_its_session_and_a_version_llmgw_speaks(
        api: tuple[TestClient[Any, Any], str]) -> None:
    client, admin = api
    resp = await client.post("/mcp", json=INIT, headers={"Authorization": f"Bearer {admin}",
                                                         "Accept": ACCEPT})
    assert resp.status == 200
    sid = resp.headers["Mcp-Session-Id"]
    assert (await resp.json())["result"]["protocolVersion"] == "2025-03-26"
    ping = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    status, body = await post(api, ping)
    assert status == 400 and body["id"] == 2
    status, body = await post(api, ping, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "1999-01-01"})
    assert status == 400
    assert_jsonrpc_error(body, -32600)
    status, body = await post(api, ping, {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-03-26"})
    assert status == 200 and body == {"jsonrpc": "2.0", "id": 2, "result": {}}
    note = await client.post("/mcp", headers={"Authorization": f"Bearer {admin}", "Accept": ACCEPT,
                                              "Mcp-Session-Id": sid},
                             data=orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    assert note.status == 202


async def test_a_client_that_takes_neither_json_nor_events_is_told_so(
        api: tuple[TestClient[Any, Any], str]) -> None:
    status, body = await post(api, orjson.dumps(INIT), {"Accept": "text/html"})
    assert status == 406
    assert_jsonrpc_error(body, -32600)


async def test_a_node_token_reaches_no_tools(api: tuple[TestClient[Any, Any], str]) -> None:
    client, admin = api
    made = await client.post("/admin/v1/keys", json={"name": "node", "scope": "node"},
                             headers={"Authorization": f"Bearer {admin}"})
    node = (await made.json())["key"]
    resp = await client.post("/mcp", json=INIT, headers={"Authorization": f"Bearer {node}",
                                                         "Accept": ACCEPT})
    assert resp.status == 403
    assert_jsonrpc_error(await resp.json(), -32600)


@pytest.mark.parametrize(("origin", "allowed"), [
    ("http://evil.example.com", False),  # a rebound name's page
    ("https://inspector.example.com", True),  # in [server] mcp_origins
    ("https://inspector.example.com.evil.example.com", False),
    ("http://localhost:8080", True),  # this machine's own pages
    ("http://127.0.0.1:9", True),
    ("null", False),  # a sandboxed page or a file
])
async def test_a_web_page_of_an_origin_not_allowed_is_refused(
        fresh_install: MakeInstall, origin: str, allowed: bool) -> None:
    install = fresh_install(mcp_origins=["https://inspector.example.com/"])
    async with install.serve() as client:
        resp = await client.post("/mcp", data=orjson.dumps(INIT), headers={
            "Authorization": f"Bearer {install.admin_key}", "Accept": ACCEPT, "Origin": origin})
        body = await resp.json()
        if allowed:
            assert resp.status == 200 and "result" in body, body
        else:
            assert resp.status == 403
            assert_jsonrpc_error(body, -32600)
