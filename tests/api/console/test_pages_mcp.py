"""The MCP page through the real app: servers with where they are, their bundles and who may use
them, and the last 7 days' tool calls; no credential value; admins only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from llmgw.api.admin.mcp import LIST_MCP_SERVERS, MCP_USAGE
from llmgw.api.endpoints import invoke
from llmgw.core.errors import Forbidden
from llmgw.core.mcp import McpUsageRow
from llmgw.core.users import Role
from llmgw.store.schema import mcp_usage
from tests.api.console.conftest import Install
from tests.api.console.test_pages_teams import person
from tests.support.mcp_upstream import RunningUpstream

HERE = "/ui/mcp"


def row(page: str, attr: str, name: str) -> str:
    return page.split(f'<tr data-{attr}="{name}">', 1)[1].split("</tr>", 1)[0]


async def test_an_admin_sees_servers_who_may_use_them_and_recent_calls(install: Install) -> None:
    for server in ({"name": "github", "url": "https://mcp.example.com/mcp?sig=sk-in-url",
                    "credential": {"env": "GITHUB_PAT"}, "bundles": ["dev"]},
                   {"name": "files", "command": ["npx", "server-fs", "/srv"], "node": "gpu-1",
                    "enabled": False}):
        status, made = await install.api("POST", "/admin/v1/mcp/servers", server)
        assert status == 201, made
    status, _ = await install.api("POST", "/admin/v1/teams", {
        "name": "research", "tools": {"allow": ["files/read_*"]}})
    assert status == 201
    agent = await install.mint("agent", tools={"allow": ["github"]})
    today = datetime.now(UTC).date()
    rows = [McpUsageRow(key_id=agent["id"], server="github", tool="search", day=today.isoformat(),
                        calls=5, errors=1, cost=0.01),
            McpUsageRow(key_id=agent["id"], server="github", tool="search",
                        day=(today - timedelta(days=1)).isoformat(), calls=2, blocked=1),
            McpUsageRow(key_id=agent["id"], server="github", tool="old",
                        day=(today - timedelta(days=30)).isoformat(), calls=99)]
    with install.store.engine.begin() as conn:
        conn.execute(mcp_usage.insert(), [r.model_dump() for r in rows])

    await install.browser.signin(install.admin)
    resp = await install.browser.get(HERE)
    assert resp.status == 200
    page = await resp.text()
    assert 'href="/ui/mcp"' in page
    github = row(page, "server", "github")
    assert "https://mcp.example.com/mcp?sig=***" in github and "env GITHUB_PAT" in github
    assert "<td class=\"wrap\">dev</td>" in github and "<td>yes</td>" in github and "agent" in github
    files = row(page, "server", "files")
    assert "npx server-fs /srv" in files and "gpu-1" in files and "<td>no</td>" in files
    assert "research" in files and "agent" not in files
    search = row(page, "tool", "github/search")
    assert "<td>7</td><td>1</td><td>1</td>" in search and "0.0100" in search and "agent" in search
    assert 'data-tool="github/old"' not in page  # a month ago: not in the last 7 days
    assert "sk-in-url" not in page


async def test_a_user_key_is_refused_the_page(install: Install) -> None:
    user = await install.mint("alice", tools={"allow": ["*"]})
    await install.browser.signin(user["key"])
    assert (await install.browser.get(HERE)).status == 403
    assert 'href="/ui/mcp"' not in await (await install.browser.get("/ui/keys")).text()


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.VIEWER])
async def test_only_admins_read_the_mcp_catalog_on_the_server(install: Install, role: Role) -> None:
    app = install.server.app
    for ep in (LIST_MCP_SERVERS, MCP_USAGE):
        with pytest.raises(Forbidden):
            await invoke(ep, app, person(role))
    assert (await invoke(LIST_MCP_SERVERS, app, person(Role.ADMIN))).data == []


async def test_the_team_and_key_forms_grant_tools_and_a_minted_key_stays_within(
        install: Install) -> None:
    await install.browser.signin(install.admin)
    token = await install.browser.csrf("/ui/teams")
    resp = await install.browser.post("/ui/teams", {
        "csrf_token": token, "name": "research", "tools_allow": "github, files/read_*",
        "tools_deny": "github/delete_*"})
    assert resp.status == 303
    teams = await (await install.browser.get("/ui/teams")).text()
    assert "github, files/read_*; not github/delete_*" in teams
    status, team = await install.api("GET", "/admin/v1/teams/research")
    assert team["tools"] == {"allow": ["github", "files/read_*"], "deny": ["github/delete_*"]}

    agent = await install.mint("agent", tools={"allow": ["github/search"]})
    browser = await install.new_browser()
    await browser.signin(agent["key"])
    token = await browser.csrf("/ui/keys")
    refused = await browser.post("/ui/keys", {"csrf_token": token, "name": "wider",
                                              "tools_allow": "github/*"})
    assert refused.status == 403 and "may not grant tools github/*" in await refused.text()
    made = await browser.post("/ui/keys", {"csrf_token": token, "name": "narrow",
                                           "tools_allow": "github/search"})
    assert made.status == 200
    status, keys = await install.api("GET", "/admin/v1/keys")
    assert {k["name"]: k["tools"]["allow"] for k in keys["data"]}["narrow"] == ["github/search"]


async def test_a_servers_tools_page_shows_what_it_lists_now_and_how_agents_name_them(
        install: Install, mcp_upstreams: dict[str, RunningUpstream]) -> None:
    status, made = await install.api("POST", "/admin/v1/mcp/servers", {
        "name": "up", "url": mcp_upstreams["http-json"].url})
    assert status == 201, made
    await install.browser.signin(install.admin)
    assert 'href="/ui/mcp/up/tools"' in await (await install.browser.get(HERE)).text()
    resp = await install.browser.get("/ui/mcp/up/tools")
    assert resp.status == 200
    page = await resp.text()
    echo = row(page, "tool", "echo")
    assert "<code>up__echo</code>" in echo and "text" in echo  # its argument
    assert (await install.browser.get("/ui/mcp/nothing/tools")).status == 404
