"""Upstream MCP servers in a real server's admin API, and tool grants on keys and teams: no
answer holds a credential, refusals say in words what is wrong, and a minted or team key never
gets more tools than its minter or team has."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from llmgw.core.mcp import McpUsageRow
from llmgw.store.schema import mcp_usage
from tests.api.conftest import FreshInstall, MakeInstall, call

GITHUB = {"name": "github", "url": "https://mcp.example.com/mcp?api_key=sk-in-the-url",
          "credential": {"env": "GITHUB_PAT"}, "bundles": ["dev"], "max_concurrency": 4}
FILES = {"name": "files", "command": ["npx", "server-fs", "/srv"],
         "env": {"LOG": "debug", "FS_TOKEN": "tok-secret", "GH_PAT": "pat-secret"}}


@dataclass
class Api:
    client: TestClient[Any, Any]
    install: FreshInstall

    async def call(self, method: str, path: str, body: Any = None,
                   as_: dict[str, str] | None = None) -> tuple[int, Any]:
        return await call(self.client, method, path, body, as_ or self.install.admin)

    async def key(self, body: dict[str, Any], as_: dict[str, str] | None = None
                  ) -> tuple[dict[str, str], dict[str, Any]]:
        status, made = await self.call("POST", "/admin/v1/keys", body, as_)
        assert status == 201, made
        return {"Authorization": f"Bearer {made['key']}"}, made


@pytest.fixture
async def api(fresh_install: MakeInstall) -> AsyncIterator[Api]:
    install = fresh_install(embedded_node=False)
    async with install.serve() as client:
        yield Api(client, install)


async def test_servers_are_added_shown_changed_and_removed_without_a_credential_value(
        api: Api) -> None:
    status, made = await api.call("POST", "/admin/v1/mcp/servers", GITHUB)
    assert status == 201, made
    assert made["credential"] == {"env": "GITHUB_PAT", "file": None, "header": "Authorization",
                                  "scheme": "Bearer"}
    status, stdio = await api.call("POST", "/admin/v1/mcp/servers", FILES)
    assert status == 201 and stdio["transport"] == "stdio"  # a command and no url: stdio

    status, listed = await api.call("GET", "/admin/v1/mcp/servers")
    assert [s["name"] for s in listed["data"]] == ["files", "github"]
    status, shown = await api.call("PATCH", "/admin/v1/mcp/servers/github",
                                   {"enabled": False, "cost_per_call": 0.01})
    assert status == 200, shown
    assert not shown["enabled"] and shown["cost_per_call"] == 0.01 and shown["bundles"] == ["dev"]
    _, audit = await api.call("GET", "/admin/v1/audit?kind=mcp")
    assert [(e["action"], e["target"]) for e in audit["data"]] == [
        ("set", "github"), ("add", "files"), ("add", "github")]
    # A URL's query values and a secret-named env variable's value never come back, in any
    # answer or in the audit log.
    answers = repr((made, stdio, listed, shown, audit))
    assert "sk-in-the-url" not in answers and "tok-secret" not in answers
    assert "pat-secret" not in answers
    assert stdio["env"] == {"LOG": "debug", "FS_TOKEN": "***", "GH_PAT": "***"}

    assert (await api.call("DELETE", "/admin/v1/mcp/servers/files"))[0] == 200
    status, gone = await api.call("GET", "/admin/v1/mcp/servers/files")
    assert status == 404 and "does not exist" in gone["error"]["message"]
    assert (await api.call("POST", "/admin/v1/mcp/servers", GITHUB))[0] == 409


async def test_an_env_sent_back_as_it_was_shown_keeps_its_hidden_values(api: Api) -> None:
    await api.call("POST", "/admin/v1/mcp/servers", FILES)
    _, shown = await api.call("GET", "/admin/v1/mcp/servers/files")
    env = {**shown["env"], "LOG": "info", "NEW_TOKEN": "new-secret"}
    status, changed = await api.call("PATCH", "/admin/v1/mcp/servers/files", {"env": env})
    assert status == 200, changed
    assert changed["env"] == {"LOG": "info", "FS_TOKEN": "***", "GH_PAT": "***", "NEW_TOKEN": "***"}
    # What the server is run with: the hidden values as they were, not `***`.
    assert api.install.store.mcp.get("files").env == {
        "LOG": "info", "FS_TOKEN": "tok-secret", "GH_PAT": "pat-secret", "NEW_TOKEN": "new-secret"}


@pytest.mark.parametrize(("body", "words"), [
    ({"name": "files", "transport": "stdio"}, "a stdio server needs a command"),
    ({"name": "gh", "url": "https://me:pw@mcp.example.com/"},
     "put credentials in `credential` (env or file), not in the url"),
    ({"name": "gh"}, "an http server needs a url"),
    ({"name": "gh", "url": "ftp://mcp.example.com/"}, "the url must be http:// or https://"),
    ({"name": "my_tools", "url": "https://mcp.example.com/"}, "name: an MCP server's name is"),
    ({"name": "gh", "url": "https://mcp.example.com/", "command": ["x"]},
     "command, env and node are for stdio servers"),
    ({"name": "gh", "url": "https://mcp.example.com/", "credential": {"env": "A", "file": "/a"}},
     "credential: a credential comes from exactly one of env or file"),
])
async def test_a_server_llmgw_cannot_reach_is_refused_in_words(
        api: Api, body: dict[str, Any], words: str) -> None:
    status, refused = await api.call("POST", "/admin/v1/mcp/servers", body)
    assert status == 400 and words in refused["error"]["message"], refused
    assert "Value error" not in refused["error"]["message"]
    assert "me:pw" not in repr(refused)


async def test_a_change_that_breaks_a_server_is_refused_and_changes_nothing(api: Api) -> None:
    assert (await api.call("POST", "/admin/v1/mcp/servers", GITHUB))[0] == 201
    status, refused = await api.call("PATCH", "/admin/v1/mcp/servers/github",
                                     {"transport": "stdio"})
    assert status == 400 and "a stdio server needs a command" in refused["error"]["message"]
    assert (await api.call("GET", "/admin/v1/mcp/servers/github"))[1]["transport"] == "http"


async def test_only_admin_keys_reach_the_mcp_catalog(api: Api) -> None:
    user, _ = await api.key({"name": "someone", "tools": {"allow": ["*"]}})
    for method, path, body in [("GET", "/admin/v1/mcp/servers", None),
                               ("POST", "/admin/v1/mcp/servers", GITHUB),
                               ("GET", "/admin/v1/mcp/usage", None)]:
        assert (await api.call(method, path, body, user))[0] == 403


async def test_a_server_shows_the_keys_and_teams_granted_its_tools(api: Api) -> None:
    assert (await api.call("POST", "/admin/v1/mcp/servers", GITHUB))[0] == 201
    assert (await api.call("POST", "/admin/v1/teams", {
        "name": "research", "tools": {"allow": ["github/search_*"]}}))[0] == 201
    await api.key({"name": "reader", "tools": {"allow": ["*/read_*"]}})
    await api.key({"name": "denied", "tools": {"allow": ["*"], "deny": ["github"]}})
    await api.key({"name": "nothing"})
    await api.key({"name": "member", "team": "research"})  # the team's allow is its
    _, shown = await api.call("GET", "/admin/v1/mcp/servers/github")
    assert shown["keys"] == ["member", "reader"] and shown["teams"] == ["research"]
    _, team = await api.call("GET", "/admin/v1/teams/research")
    assert team["tools"] == {"allow": ["github/search_*"], "deny": []}


async def test_a_minted_key_never_gets_more_tools_than_its_minter(api: Api) -> None:
    minter, _ = await api.key({"name": "agent", "tools": {"allow": ["github/*"],
                                                         "deny": ["github/delete_*"]}})
    for asked in (["*"], ["files/read"], ["github/*", "slack"], ["git*/search"]):
        status, refused = await api.call("POST", "/admin/v1/keys", {
            "name": "child", "tools": {"allow": asked}}, minter)
        assert status == 403 and "may not grant tools" in refused["error"]["message"], asked
    _, child = await api.key({"name": "child", "tools": {"allow": ["github/search"]}}, minter)
    assert child["tools"] == {"allow": ["github/search"], "deny": ["github/delete_*"]}
    _, heir = await api.key({"name": "heir"}, minter)  # none asked: the minter's, and its denies
    assert heir["tools"] == {"allow": ["github/*"], "deny": ["github/delete_*"]}
    _, listed = await api.call("GET", "/admin/v1/keys")
    assert {k["name"]: k["tools"]["allow"] for k in listed["data"]}["child"] == ["github/search"]

    # A key with no tools of its own (and no team's) grants none.
    bare, _ = await api.key({"name": "bare"})
    status, refused = await api.call("POST", "/admin/v1/keys", {
        "name": "more", "tools": {"allow": ["github/search"]}}, bare)
    assert status == 403, refused


async def test_a_team_key_never_gets_more_tools_than_its_team(api: Api) -> None:
    assert (await api.call("POST", "/admin/v1/teams", {
        "name": "research", "tools": {"allow": ["github"]}}))[0] == 201
    status, refused = await api.call("POST", "/admin/v1/keys", {
        "name": "wide", "team": "research", "tools": {"allow": ["slack/*"]}})
    assert status == 400 and "team research may not use tools slack/*" in \
        refused["error"]["message"]
    lead, _ = await api.key({"name": "lead", "team": "research", "team_admin": True})
    status, refused = await api.call("POST", "/admin/v1/keys", {
        "name": "wide", "tools": {"allow": ["*"]}}, lead)
    assert status == 403, refused
    _, member = await api.key({"name": "narrow", "tools": {"allow": ["github/search"]}}, lead)
    assert member["tools"]["allow"] == ["github/search"] and member["team"] == "research"


async def test_a_node_key_takes_no_tools(api: Api) -> None:
    status, refused = await api.call("POST", "/admin/v1/keys", {
        "name": "n", "scope": "node", "tools": {"allow": ["*"]}})
    assert status == 400 and "takes no tools" in refused["error"]["message"]


async def test_usage_reads_the_last_seven_days_of_tool_calls_with_key_names(api: Api) -> None:
    _, made = await api.key({"name": "agent"})
    rows = [McpUsageRow(key_id=made["id"], server="github", tool="search", day="2020-01-01",
                        calls=9),
            McpUsageRow(key_id=made["id"], server="github", tool="search", day="2099-01-01",
                        calls=2, errors=1)]
    with api.install.store.engine.begin() as conn:
        conn.execute(mcp_usage.insert(), [r.model_dump() for r in rows])
    _, recent = await api.call("GET", "/admin/v1/mcp/usage")
    assert [(r["day"], r["calls"], r["key_name"]) for r in recent["data"]] == [
        ("2099-01-01", 2, "agent")]
    _, since = await api.call("GET", "/admin/v1/mcp/usage?since=2019-12-31&server=github")
    assert [r["calls"] for r in since["data"]] == [9, 2]
