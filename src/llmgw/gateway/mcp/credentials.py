"""An upstream MCP server's credential, read where its spec says when a request is made."""

from __future__ import annotations

import os
from pathlib import Path

from llmgw.core.errors import UpstreamUnreachable
from llmgw.core.mcp import McpServer


def credential_header(server: McpServer) -> dict[str, str]:
    """The server's credential as a header, read now from where its spec says; {} when it has
    none. UpstreamUnreachable (naming where, never what) when it cannot be read."""
    cred = server.credential
    if cred is None:
        return {}
    if cred.env is not None:
        value = os.environ.get(cred.env, "").strip()
        where = f"environment variable {cred.env}"
    else:
        assert cred.file is not None
        where = f"file {cred.file}"
        try:
            lines = Path(cred.file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            lines = []
        value = lines[0].strip() if lines else ""
    if not value or "\r" in value or "\n" in value:
        raise UpstreamUnreachable(f"MCP server {server.name}: its credential ({where}) is not "
                                  "set on this server")
    return {cred.header: f"{cred.scheme} {value}" if cred.scheme else value}
