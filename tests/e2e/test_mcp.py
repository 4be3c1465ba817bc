"""`/mcp` end to end: the official `mcp` client against a real llmgw server (the default
install's workers) in front of real upstream MCP servers (the SDK's, `tests/support/mcp_upstream`).

Servers and grants are written to the store directly, as the admin API writes them
(`mcp_servers` rows, `api_keys.tools`, the revision bumped), which also lets a test give a server
what ctl would refuse; `test_mcp_seams.py` sets up through ctl."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import insert, update

from llmgw.core.mcp import McpCredential, McpServer, McpTransport
from llmgw.store.db import bump_revision
from llmgw.store.schema import api_keys, mcp_servers
from llmgw.store.store import Store
from tests.support.mcp_upstream import INJECTED, TOKEN, RunningUpstream
from tests.support.server_process import LlmgwServer, wait_for

HANG_S = 2.0
HUGE_BYTES = 100_000


def _store(server: LlmgwServer) -> Store:
    return Store.open(f"sqlite:///{server.data_dir / 'llmgw.db'}", migrate_schema=False)


def add_servers(server: LlmgwServer, *specs: McpServer) -> None:
    """The catalog's rows for `specs`, as the admin API writes them."""
    store, now = _store(server), datetime.now(UTC)
    with store.engine.begin() as conn:
        for s in specs:
            spec = s.model_dump(mode="json", exclude={"name", "by", "created_at", "updated_at"})
            conn.execute(insert(mcp_servers).values(name=s.name, spec=spec, by="test",
                                                    created_at=now, updated_at=now))
        bump_revision(conn)
    store.close()


def grant(server: LlmgwServer, key_name: str, allow: list[str], deny: list[str] = ()) -> None:  # type: ignore[assignment]
    store = _store(server)
    with store.engine.begin() as conn:
        conn.execute(update(api_keys).where(api_keys.c.name == key_name)
                     .values(tools={"allow": allow, "deny": list(deny)}))
        bump_revision(conn)
    store.close()


def new_key(server: LlmgwServer, purpose: str) -> tuple[str, str]:
    """A new user key: (name, secret)."""
    name = f"mcp-{purpose}-{uuid.uuid4().hex[:6]}"
    created = json.loads(server.ctl("--json", "key", "create", name).stdout)
    return name, str(created["key"])


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory,
               mcp_upstreams: dict[str, RunningUpstream]) -> Iterator[LlmgwServer]:
    """A bare llmgw (no model, no guard) with the test upstreams in its catalog, on its default
    workers."""
    server = LlmgwServer.init(tmp_path_factory.mktemp("mcp") / "data", "--no-demo", "--no-guard")
    server.env["MCP_TEST_TOKEN"] = TOKEN
    upstreams = {name: mcp_upstreams[kind].url for name, kind in
                 (("up", "http"), ("js", "http-json"), ("html", "html"), ("br", "brotli"))}
    add_servers(
        server,
        McpServer(name="up", url=upstreams["up"], credential=McpCredential(env="MCP_TEST_TOKEN"),
                  timeout_s=HANG_S, max_result_bytes=HUGE_BYTES, bundles=["web"]),
        McpServer(name="js", url=upstreams["js"]),
        McpServer(name="html", url=upstreams["html"]),
        McpServer(name="br", url=upstreams["br"]),
        McpServer(name="old", transport=McpTransport.SSE, url=mcp_upstreams["sse"].url),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def connect(url: str, key: str) -> AsyncIterator[Client]:
    """The official client, connected (its default: probe, then the initialize handshake)."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)


async def test_an_admin_key_lists_and_calls_every_servers_tools(mcp_server: LlmgwServer) -> None:
    async with connect(mcp_server.url + "/mcp", mcp_server.admin_key) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"up__echo", "up__inject", "up__hang", "js__echo", "js__huge"} <= names
        # Upstreams that answer no MCP are left out; the list still answers.
        assert not any(n.startswith(("html__", "br__")) for n in names)
        result = await client.call_tool("up__echo", {"text": "hello through llmgw"})
        assert not result.is_error and _text(result) == "hello through llmgw"
        assert "old__echo" in names
        old = await client.call_tool("old__echo", {"text": "over HTTP+SSE"})
        assert _text(old) == "over HTTP+SSE"
        result = await client.call_tool("js__inject", {})
        assert _text(result) == INJECTED  # no guard policy covers it: passed on untouched
        failed = await client.call_tool("up__fail", {})
        assert failed.is_error and "failed on purpose" in _text(failed)


async def test_prompts_and_resources_come_through_under_their_servers_names(
        mcp_server: LlmgwServer) -> None:
    async with connect(mcp_server.url + "/mcp", mcp_server.admin_key) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert {"up__greet", "js__greet"} <= prompts
        got = await client.get_prompt("up__greet", {"name": "Ada"})
        assert "Say hello to Ada." in json.dumps(got.model_dump(mode="json"))
        uris = {r.uri for r in (await client.list_resources()).resources}
        assert "llmgw+up:docs://readme" in uris
        read = await client.read_resource("llmgw+up:docs://readme")
        assert read.contents[0].text == "llmgw test readme"  # type: ignore[union-attr]
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "llmgw+js:docs://pages/{page}" in templates
        page = await client.read_resource("llmgw+js:docs://pages/intro")
        assert page.contents[0].text == "page intro"  # type: ignore[union-attr]


async def test_a_bundle_serves_only_its_servers(mcp_server: LlmgwServer) -> None:
    async with connect(mcp_server.url + "/mcp/web", mcp_server.admin_key) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names and all(n.startswith("up__") for n in names)
        await refused(client, "js__echo")


async def test_a_key_without_grants_sees_and_calls_nothing(mcp_server: LlmgwServer) -> None:
    _, secret = new_key(mcp_server, "none")
    async with connect(mcp_server.url + "/mcp", secret) as client:
        assert (await client.list_tools()).tools == []
        assert (await client.list_prompts()).prompts == []
        assert (await client.list_resources()).resources == []
        await refused(client, "up__echo")


async def test_a_key_sees_and_calls_only_what_it_is_granted(mcp_server: LlmgwServer) -> None:
    name, secret = new_key(mcp_server, "some")
    grant(mcp_server, name, allow=["up/echo", "js"], deny=["js/huge"])
    async with connect(mcp_server.url + "/mcp", secret) as client:
        names: set[str] = set()
        deadline = time.monotonic() + 20
        while "up__echo" not in names and time.monotonic() < deadline:  # the grant's revision
            names = {t.name for t in (await client.list_tools()).tools}
        assert "up__echo" in names and "js__echo" in names
        assert "up__fail" not in names and "js__huge" not in names
        ok = await client.call_tool("up__echo", {"text": "allowed"})
        assert _text(ok) == "allowed"
        # A tool it may not use is refused as one that does not exist is.
        await refused(client, "js__huge")
        await refused(client, "up__fail")
        await refused(client, "up__no_such_tool")


async def refused(client: Client, name: str) -> None:
    """`name` is refused with JSON-RPC's -32602 and words that say only that it is unknown."""
    with pytest.raises(MCPError) as caught:
        await client.call_tool(name, {})
    assert caught.value.error.code == -32602
    assert caught.value.error.message == f"Unknown tool: {name}"


def _post(server: LlmgwServer, key: str, body: dict[str, Any], session: str | None = None,
          path: str = "/mcp") -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx2.post(server.url + path, json=body, headers=headers, timeout=30)


def _session(server: LlmgwServer, key: str, path: str = "/mcp") -> str:
    init = _post(server, key, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}, path=path)
    assert init.status_code == 200, init.text
    assert init.json()["result"]["protocolVersion"] == "2025-06-18"
    return init.headers["Mcp-Session-Id"]


LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def test_a_session_replayed_by_another_key_or_forged_is_refused(mcp_server: LlmgwServer) -> None:
    sid = _session(mcp_server, mcp_server.admin_key)
    assert _post(mcp_server, mcp_server.admin_key, LIST, sid).status_code == 200
    _, other = new_key(mcp_server, "replay")
    replayed = _post(mcp_server, other, LIST, sid)
    assert replayed.status_code == 404 and "error" in replayed.json()
    version, payload, mac = sid.split(".")
    forged = f"{version}.{payload}.{mac[:-2]}{'AA' if mac[-2:] != 'AA' else 'BB'}"
    assert _post(mcp_server, mcp_server.admin_key, LIST, forged).status_code == 404
    assert _post(mcp_server, mcp_server.admin_key, LIST, "made-up").status_code == 404
    # A session opened on /mcp is not one of /mcp/web's.
    assert _post(mcp_server, mcp_server.admin_key, LIST, sid, "/mcp/web").status_code == 404
    missing = _post(mcp_server, mcp_server.admin_key, LIST)
    assert missing.status_code == 400 and missing.json()["error"]["code"] == -32600


def test_a_session_ends_only_for_its_key(mcp_server: LlmgwServer) -> None:
    sid = _session(mcp_server, mcp_server.admin_key)
    _, other = new_key(mcp_server, "end")

    def delete(key: str) -> int:
        return httpx2.delete(mcp_server.url + "/mcp", timeout=30, headers={
            "Authorization": f"Bearer {key}", "Mcp-Session-Id": sid}).status_code

    assert delete(other) == 404
    assert delete(mcp_server.admin_key) == 204


def test_a_client_that_takes_only_events_gets_one_event(mcp_server: LlmgwServer) -> None:
    sid = _session(mcp_server, mcp_server.admin_key)
    answer = httpx2.post(mcp_server.url + "/mcp", json=LIST, timeout=30, headers={
        "Authorization": f"Bearer {mcp_server.admin_key}", "Accept": "text/event-stream",
        "Mcp-Session-Id": sid})
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    event, data = answer.text.split("\n")[:2]
    assert event == "event: message"
    assert json.loads(data.removeprefix("data: "))["id"] == 2


def test_an_admin_reads_a_servers_tools_as_it_lists_them_now(mcp_server: LlmgwServer) -> None:
    listed = mcp_server.get("/admin/v1/mcp/servers/js/tools")
    echo = next(t for t in listed["tools"] if t["name"] == "echo")
    assert echo["description"] == "Echo the text back."
    assert echo["inputSchema"]["properties"]["text"]["type"] == "string"
    _, user = new_key(mcp_server, "admin-tools")
    for path, key, status in (("/admin/v1/mcp/servers/js/tools", user, 403),
                              ("/admin/v1/mcp/servers/nope/tools", mcp_server.admin_key, 404),
                              ("/admin/v1/mcp/servers/html/tools", mcp_server.admin_key, 502)):
        answer = httpx2.get(mcp_server.url + path, headers={"Authorization": f"Bearer {key}"},
                            timeout=30)
        assert answer.status_code == status, (path, answer.text)
        assert "<html>" not in answer.text


def test_no_key_is_a_401_in_json_rpc_shape(mcp_server: LlmgwServer) -> None:
    answer = httpx2.post(mcp_server.url + "/mcp", json=LIST, timeout=30)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["error"]["code"] == -32600
    assert httpx2.get(mcp_server.url + "/mcp", timeout=30).status_code == 405


async def test_a_stalled_upstream_is_a_tool_error_in_time(mcp_server: LlmgwServer) -> None:
    async with connect(mcp_server.url + "/mcp", mcp_server.admin_key) as client:
        started = time.monotonic()
        result = await client.call_tool("up__hang", {})
        took = time.monotonic() - started
    assert result.is_error and "timed out" in _text(result)
    assert HANG_S <= took < HANG_S + 5


async def test_a_result_past_the_bound_is_withheld(mcp_server: LlmgwServer) -> None:
    async with connect(mcp_server.url + "/mcp", mcp_server.admin_key) as client:
        result = await client.call_tool("up__huge", {"size": HUGE_BYTES * 2})
        small = await client.call_tool("up__huge", {"size": 10})
    assert result.is_error and f"larger than {HUGE_BYTES} bytes" in _text(result)
    assert _text(small) == "x" * 10


async def test_upstreams_that_answer_no_mcp_give_clean_errors(mcp_server: LlmgwServer) -> None:
    async with connect(mcp_server.url + "/mcp", mcp_server.admin_key) as client:
        html = await client.call_tool("html__anything", {})
        br = await client.call_tool("br__anything", {})
    assert html.is_error and "MCP server html answered text/html, not MCP" in _text(html)
    assert "<html>" not in _text(html)
    assert br.is_error and "content encoding" in _text(br)


async def test_the_upstreams_credential_arrives_and_is_never_shown(
        mcp_server: LlmgwServer) -> None:
    # The upstream `up` refuses every request without the credential: its tools answer.
    async with connect(mcp_server.url + "/mcp", mcp_server.admin_key) as client:
        said = [await client.list_tools(), await client.call_tool("up__echo", {"text": "c"}),
                await client.call_tool("up__hang", {}), await client.call_tool("html__x", {})]
    assert _text(said[1]) == "c"
    shown = json.dumps([s.model_dump(mode="json") for s in said])
    assert TOKEN not in shown
    wait_for("the server's log", lambda: Path(mcp_server.log_path).exists(), 5)
    assert TOKEN not in mcp_server.log()
