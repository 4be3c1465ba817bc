"""Check one answer the bench got: the whole text arrived, in the dialect the client asked for.

    check_answer.py API MODE FILE TEXT

API is chat, messages or responses; MODE json or stream; FILE the answer's body; TEXT the text
the fake upstream's answer carries (a stream's deltas joined). Exits 1 with a reason when the
answer is not a complete one of that dialect with that text, so a translation that drops or
garbles something fails the bench's smoke check instead of being measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def events(body: str) -> list[tuple[str, str]]:
    """(event name, data) per SSE event; the name is "" when the event has none."""
    out = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        name, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if data:
            out.append((name, "\n".join(data)))
    return out


def whole_text(api: str, answer: dict[str, Any]) -> str:
    if api == "chat":
        return str(answer["choices"][0]["message"]["content"])
    if api == "messages":
        assert answer["type"] == "message", answer.get("type")
        assert answer["stop_reason"] == "end_turn", answer.get("stop_reason")
        assert answer["usage"]["output_tokens"] > 0, answer.get("usage")
        return "".join(b["text"] for b in answer["content"] if b["type"] == "text")
    assert answer["object"] == "response" and answer["status"] == "completed", answer.get("status")
    assert answer["usage"]["output_tokens"] > 0, answer.get("usage")
    return "".join(
        part["text"]
        for item in answer["output"] if item["type"] == "message"
        for part in item["content"] if part["type"] == "output_text"
    )


def streamed_text(api: str, stream: list[tuple[str, str]]) -> str:
    if api == "chat":
        assert stream and stream[-1][1] == "[DONE]", "no [DONE] at the end"
        chunks = [json.loads(d) for _, d in stream[:-1]]
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    payloads = [json.loads(d) for _, d in stream]
    for name, payload in zip((n for n, _ in stream), payloads, strict=True):
        assert name == payload["type"], f"event {name!r} carries type {payload['type']!r}"
    kinds = [p["type"] for p in payloads]
    if api == "messages":
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
        delta = next(p for p in payloads if p["type"] == "message_delta")
        assert delta["usage"]["output_tokens"] > 0, delta
        return "".join(p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta")
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert payloads[-1]["response"]["usage"]["output_tokens"] > 0, payloads[-1]["response"]
    return "".join(p["delta"] for p in payloads if p["type"] == "response.output_text.delta")


def main() -> None:
    api, mode, path, expected = sys.argv[1:5]
    body = Path(path).read_text()
    try:
        text = whole_text(api, json.loads(body)) if mode == "json" else streamed_text(api, events(body))
    except (AssertionError, KeyError, IndexError, TypeError, ValueError) as exc:
        sys.exit(f"not a complete {api} {mode} answer ({type(exc).__name__}: {exc})")
    if text != expected:
        sys.exit(f"text differs: {text[:120]!r}")


if __name__ == "__main__":
    main()
