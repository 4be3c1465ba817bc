"""Server-sent events as every dialect writes them: cutting a byte stream into events, reading an
event's data, and writing one."""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]"


class SseSplitter:
    """Cuts a byte stream into whole SSE events (each ends with a blank line)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events `chunk` completes, without their blank line."""
        self._buf += chunk.replace(b"\r\n", b"\n")
        *events, self._buf = self._buf.split(b"\n\n")
        return [e for e in events if e.strip()]

    def rest(self) -> list[bytes]:
        """What is left when the stream ends without a final blank line."""
        rest, self._buf = self._buf, b""
        return [rest] if rest.strip() else []


def data_of(event: bytes) -> bytes | None:
    """The `data:` payload of one event (lines joined), or None when it has none."""
    lines = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def json_of(event: bytes) -> dict[str, Any] | None:
    """The event's data as a JSON object, or None (no data, `[DONE]`, not JSON, not an object)."""
    # Most events are one `data:` line: no split and join for them (translators call this on
    # every event of a stream).
    data = event[6:] if event.startswith(b"data: ") and b"\n" not in event else data_of(event)
    if not data or data == b"[DONE]":
        return None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def event(data: Any, name: str | None = None) -> bytes:
    """One SSE event carrying `data` as JSON, named when `name` is given, blank line included."""
    head = b"event: " + name.encode() + b"\n" if name else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"
