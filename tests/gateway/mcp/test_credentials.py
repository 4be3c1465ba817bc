"""An upstream MCP server's credential: read when a call is made, never shown when it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.core.errors import UpstreamUnreachable
from llmgw.core.mcp import McpCredential, McpServer
from llmgw.gateway.mcp.credentials import credential_header


def _server(cred: McpCredential) -> McpServer:
    return McpServer(name="s", url="http://127.0.0.1:9/mcp", credential=cred)


def test_a_file_credential_is_read_at_each_call_in_its_header(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("first\n")
    server = _server(McpCredential(file=str(secret), header="X-Api-Key", scheme=""))
    assert credential_header(server) == {"X-Api-Key": "first"}
    secret.write_text("rotated\n")  # a rotated file is used at once
    assert credential_header(server) == {"X-Api-Key": "rotated"}


def test_a_missing_credential_names_where_it_was_looked_for(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_CRED_TEST", raising=False)
    for cred, where in ((McpCredential(env="MCP_CRED_TEST"), "MCP_CRED_TEST"),
                        (McpCredential(file=str(tmp_path / "nope")), str(tmp_path / "nope"))):
        with pytest.raises(UpstreamUnreachable, match="is not set") as caught:
            credential_header(_server(cred))
        assert where in caught.value.message
    monkeypatch.setenv("MCP_CRED_TEST", "v")
    assert credential_header(_server(McpCredential(env="MCP_CRED_TEST"))) == {
        "Authorization": "Bearer v"}
