"""MCP's JSON-RPC on the wire: the versions llmgw speaks, error codes, and the messages it
writes and reads (as plain JSON: llmgw passes tools' schemas and results on as they came)."""

from __future__ import annotations

from typing import Any

import orjson

# The initialize handshake's versions, oldest first (the 2026-07-28 era's stateless
# `server/discover` is not spoken: a client that probes it is told the method is unknown, and
# falls back to the handshake, as the official SDKs do).
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST = VERSIONS[-1]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

Id = str | int | None


def negotiate(asked: object) -> str:
    """The version to speak: the client's when llmgw speaks it, else the latest (the client
    then decides whether it can go on)."""
    return asked if isinstance(asked, str) and asked in VERSIONS else LATEST


def result(id_: Id, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": value}


def error(id_: Id, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def request(id_: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        msg["params"] = params
    return orjson.dumps(msg)


def notification(method: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": method})


def sse_events(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """Each whole event at the start of `buffer` (removed from it) as (event name, data); what
    is left is an event still arriving. Lines end with LF, CRLF or CR (the SSE spec); an event
    without a name is a `message`."""
    if b"\r" in buffer:
        buffer[:] = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    out: list[tuple[bytes, bytes]] = []
    while (end := buffer.find(b"\n\n")) >= 0:
        block = bytes(buffer[:end])
        del buffer[:end + 2]
        name, data = b"message", []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
            elif line.startswith(b"event:"):
                name = line[6:].strip()
        if data:
            out.append((name, b"\n".join(data)))
    return out
