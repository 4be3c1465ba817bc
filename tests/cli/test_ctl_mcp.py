"""`llmgw ctl mcp …` against a running server (add by URL and by command, list, show, remove,
errors in words), tool grants through `ctl key create` and `ctl team create`, and `ctl mcp tools`
against a stub answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cli.conftest import OfflineCtl
from tests.cli.test_ctl_guard import flat, row
from tests.support.server_process import LlmgwServer


def ctl_json(server: LlmgwServer, *args: str) -> Any:
    return json.loads(server.ctl("--json", *args).stdout)


def test_mcp_add_list_show_and_remove(bare_server: LlmgwServer) -> None:
    out = bare_server.ctl("mcp", "add", "github", "--url", "https://mcp.example.com/mcp",
                          "--credential-env", "GITHUB_PAT", "--bundle", "dev", "--bundle", "ops",
                          "--max-concurrency", "8", "--cost-per-call", "0.002", "--timeout",
                          "30").stdout
    said = flat(out)
    assert "MCP server github (http, enabled): https://mcp.example.com/mcp" in said
    assert "credential: env GITHUB_PAT as Authorization: Bearer …" in said
    assert "bundles: dev, ops; at most 8 calls in flight, timeout 30s" in said
    made = ctl_json(bare_server, "mcp", "add", "files", "--env", "LOG=debug", "--node", "local",
                    "--", "npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv")
    assert made["transport"] == "stdio" and made["command"][0] == "npx"
    assert made["env"] == {"LOG": "debug"} and made["node"] == "local"
    shell = ctl_json(bare_server, "mcp", "add", "shell", "--command", "uvx 'my server' --stdio")
    assert shell["command"] == ["uvx", "my server", "--stdio"]

    table = bare_server.ctl("mcp", "list").stdout
    assert row(table, "github")[1:6] == ["http", "https://mcp.example.com/mcp", "-", "dev,ops",
                                         "yes"]
    assert row(table, "files")[1] == "stdio"
    assert "runs on node local; env: LOG=debug" in flat(bare_server.ctl("mcp", "show",
                                                                        "files").stdout)
    for name in ("github", "files", "shell"):
        assert f"removed MCP server {name}" in bare_server.ctl("mcp", "remove", name).stdout
    assert ctl_json(bare_server, "mcp", "list") == {"data": []}


@pytest.mark.parametrize(("args", "said"), [
    (["mcp", "add", "files", "--transport", "stdio"], "a stdio server needs a command"),
    (["mcp", "add", "gh", "--url", "https://me:pw@mcp.example.com/"],
     "put credentials in `credential` (env or file), not in the url"),
    (["mcp", "add", "gh", "--url", "https://x.example.com/", "--credential-env", "A",
      "--credential-file", "/f"], "exactly one of env or file"),
    (["mcp", "add", "gh", "--url", "https://x.example.com/", "--credential-env", "NOT OK"],
     "--credential-env"),
    (["mcp", "add", "x", "--command", "a", "--", "b"], "either as --command or after --"),
    (["mcp", "show", "ghost"], "404"),
])
def test_mcp_errors_are_one_clear_line(bare_server: LlmgwServer, args: list[str],
                                       said: str) -> None:
    proc = bare_server.ctl(*args, check=False)
    assert proc.returncode in (1, 2)
    assert said in flat(proc.stderr) and "Traceback" not in proc.stderr
    assert "me:pw" not in proc.stderr


def test_key_and_team_create_grant_tools_shown_in_lists(bare_server: LlmgwServer) -> None:
    bare_server.ctl("team", "create", "agents", "--tools-allow", "github", "--tools-deny",
                    "github/delete_*")
    assert row(bare_server.ctl("team", "list").stdout, "agents")[-1] == "github, -github/delete_*"
    made = ctl_json(bare_server, "key", "create", "bot", "--team", "agents", "--tools-allow",
                    "github/search", "--tools-allow", "github/read_*")
    assert made["tools"] == {"allow": ["github/search", "github/read_*"], "deny": []}
    assert "github/search, github/read_*" in flat(bare_server.ctl("key", "show", "bot").stdout)
    proc = bare_server.ctl("key", "create", "wide", "--team", "agents", "--tools-allow", "slack",
                           check=False)
    assert proc.returncode == 1 and "team agents may not use tools slack" in flat(proc.stderr)


def test_mcp_tools_prints_each_tools_name_and_description(offline_ctl: OfflineCtl) -> None:
    # No server on this branch lists an upstream's tools yet: the answer is a stub's.
    out = offline_ctl({"/admin/v1/mcp/servers/github/tools": {"data": [
        {"name": "github__search_code", "description": "Search code", "inputSchema": {}},
        {"name": "github__get_issue"}]}}, "mcp", "tools", "github", columns=120)
    assert row(out, "github__search_code") == ["github__search_code", "Search code"]
    assert row(out, "github__get_issue") == ["github__get_issue", ""]
