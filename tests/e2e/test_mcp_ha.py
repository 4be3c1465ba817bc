"""`/mcp` on an HA install: two servers on one PostgreSQL database serve each other's MCP
sessions with no sticky routing (the session is sealed in its id), and refuse them to any other
key on either server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2

from tests.support.cluster import Cluster
from tests.support.mcp_upstream import RunningUpstream
from tests.support.pg import fresh_database
from tests.support.server_process import wait_for

ACCEPT = "application/json, text/event-stream"


def rpc(url: str, key: str, method: str, params: dict[str, Any],
        session: str | None = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}", "Accept": ACCEPT}
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
    return httpx2.post(url + "/mcp", headers=headers, timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def test_a_session_opened_on_one_server_is_served_by_the_other_and_only_for_its_key(
        tmp_path: Path, postgres_url: str, mcp_upstreams: dict[str, RunningUpstream]) -> None:
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2) as c:
        one, two = c.servers
        one.ctl("mcp", "add", "up", "--url", mcp_upstreams["http-json"].url)
        key = json.loads(one.ctl("--json", "key", "create", "agent", "--tools-allow", "up")
                         .stdout)["key"]
        other = json.loads(one.ctl("--json", "key", "create", "other", "--tools-allow", "up")
                           .stdout)["key"]

        opened = rpc(one.url, key, "initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "ha", "version": "1"}})
        assert opened.status_code == 200, opened.text
        session = opened.headers["Mcp-Session-Id"]

        def called_on_two() -> httpx2.Response | None:
            answer = rpc(two.url, key, "tools/call",
                         {"name": "up__echo", "arguments": {"text": "on the other server"}},
                         session)
            # Until server two's snapshot has the server and the key (a refresh away).
            return answer if answer.status_code == 200 and "result" in answer.json() else None

        answer = wait_for("server two to serve server one's session", called_on_two, 30)
        assert answer.json()["result"]["content"][0]["text"] == "on the other server"
        for server in (one, two):
            replayed = rpc(server.url, other, "tools/list", {}, session)
            assert replayed.status_code == 404 and "error" in replayed.json()
