"""Holding back a streamed answer in windows until the guard has judged them.

Only guarded streams are decoded: events are split on the SSE blank line, the text of each
`chat.completion.chunk` delta is collected, and events are released a window at a time once the
judge has seen everything up to their end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

DONE = b"data: [DONE]"


class SseSplitter:
    """Cuts a byte stream into whole SSE events (each ends with a blank line)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk.replace(b"\r\n", b"\n")
        *events, self._buf = self._buf.split(b"\n\n")
        return [e for e in events if e.strip()]

    def rest(self) -> list[bytes]:
        """What is left when the stream ends without a final blank line."""
        rest, self._buf = self._buf, b""
        return [rest] if rest.strip() else []


def event_text(event: bytes) -> str:
    """The generated text an event carries (chat delta or completion text), '' for none."""
    for line in event.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return ""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return ""
        return _text(obj)
    return ""


def _text(obj: Any) -> str:
    if not isinstance(obj, dict):
        return ""
    parts = []
    for choice in obj.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
        elif isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "".join(parts)


@dataclass
class Window:
    """Events held back since the last judgment, and all text generated so far."""

    size: int
    held: list[bytes] = field(default_factory=list)
    text: str = ""
    unjudged: int = 0

    def add(self, event: bytes) -> bool:
        """Hold `event`; True when enough new text is held to judge."""
        self.held.append(event)
        piece = event_text(event)
        self.text += piece
        self.unjudged += len(piece)
        return self.unjudged >= self.size

    def release(self) -> list[bytes]:
        """The held events, once judged safe."""
        out, self.held, self.unjudged = self.held, [], 0
        return out


def blocked_events(model: str, message: str, code: str, type_: str = "invalid_request_error") -> bytes:
    """How a blocked stream ends: a content_filter finish, an error event, and [DONE]."""
    finish = {
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}],
    }
    error = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + orjson.dumps(finish) + b"\n\ndata: " + orjson.dumps(error) + b"\n\n" + DONE + b"\n\n"
