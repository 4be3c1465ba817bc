"""A stand-in judge engine for timing and fault injection: llama-server's `POST /completion`.

In-process only: `async with FakeJudge() as judge:` serves on `judge.url` (a `TestServer`), and a
test sets how it behaves before (or between) requests:

  judge.safe()                      `Safety: Safe` / `Categories: None`
  judge.unsafe("Violent", ...)      `Safety: Unsafe` with those categories
  judge.controversial()             `Safety: Controversial` / `Categories: None`
  judge.slow(0.3, unsafe=False)     the same verdicts, answered after a delay
  judge.never()                     never answers: holds the request until its connection closes
  judge.garbage()                   `{"content": "Safety: Maybe"}`
  judge.error()                     500
  judge.rule("BOMB", "Violent")     Unsafe only when the conversation in the prompt contains "BOMB"

Verdicts for the output direction (the request's grammar asks for a `Refusal:` line) end with
`\\nRefusal: No`, as Qwen3Guard's do. Every request body is kept in `requests`; a request whose
connection closed before it was answered sets `gone` (the handler is cancelled when its client
leaves, and records that in a `finally`), and counts in `abandoned`. `in_flight` is how many
requests it holds now, `most_in_flight` the most it ever held at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from aiohttp import web
from aiohttp.test_utils import TestServer

Mode = Literal["safe", "unsafe", "controversial", "never", "garbage", "error", "rule"]

CONVERSATION_START = "<BEGIN CONVERSATION>"
CONVERSATION_END = "<END CONVERSATION>"


def conversation(prompt: str) -> str:
    """The conversation part of a judge prompt (so the fixed policy text never matches a rule)."""
    start = prompt.find(CONVERSATION_START)
    end = prompt.rfind(CONVERSATION_END)
    if start < 0 or end < start:
        return prompt
    return prompt[start + len(CONVERSATION_START) : end]


def qwen3guard_verdict(safety: str, categories: tuple[str, ...], output: bool) -> str:
    text = f"Safety: {safety}\nCategories: {', '.join(categories) if categories else 'None'}"
    return text + "\nRefusal: No" if output else text


@dataclass
class FakeJudge:
    mode: Mode = "safe"
    categories: tuple[str, ...] = ("Violent",)
    delay_s: float = 0.0
    marker: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    traceparents: list[str | None] = field(default_factory=list)  # each request's W3C header
    answered_at: list[float] = field(default_factory=list)  # time.monotonic() of each answer
    abandoned: int = 0
    in_flight: int = 0
    most_in_flight: int = 0
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    received: asyncio.Event = field(default_factory=asyncio.Event)
    _server: TestServer | None = None

    # --- behaviour ---------------------------------------------------------------------------

    def safe(self) -> FakeJudge:
        self.mode, self.delay_s = "safe", 0.0
        return self

    def unsafe(self, *categories: str) -> FakeJudge:
        self.mode, self.delay_s = "unsafe", 0.0
        self.categories = categories or ("Violent",)
        return self

    def controversial(self) -> FakeJudge:
        self.mode, self.delay_s = "controversial", 0.0
        return self

    def slow(
        self, delay_s: float, *, unsafe: bool = False, categories: tuple[str, ...] = ("Violent",)
    ) -> FakeJudge:
        self.mode, self.delay_s, self.categories = ("unsafe" if unsafe else "safe"), delay_s, categories
        return self

    def never(self) -> FakeJudge:
        self.mode = "never"
        return self

    def garbage(self) -> FakeJudge:
        self.mode, self.delay_s = "garbage", 0.0
        return self

    def error(self) -> FakeJudge:
        self.mode, self.delay_s = "error", 0.0
        return self

    def rule(self, marker: str, *categories: str) -> FakeJudge:
        self.mode, self.delay_s, self.marker = "rule", 0.0, marker
        self.categories = categories or ("Violent",)
        return self

    # --- what it saw ---------------------------------------------------------------------------

    @property
    def prompts(self) -> list[str]:
        return [str(r.get("prompt")) for r in self.requests]

    @property
    def url(self) -> str:
        assert self._server is not None, "the fake judge is not started"
        return str(self._server.make_url("")).rstrip("/")

    # --- serving -----------------------------------------------------------------------------

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.traceparents.append(request.headers.get("traceparent"))
        self.received.set()
        answered = False
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.mode == "never":
                await asyncio.Event().wait()
            if self.delay_s:
                await asyncio.sleep(self.delay_s)  # the fault being injected
            if self.mode == "error":
                answered = True
                return web.json_response({"error": {"code": 500, "message": "boom"}}, status=500)
            output = "Refusal" in str(body.get("grammar", ""))
            if self.mode == "garbage":
                content = "Safety: Maybe"
            elif self.mode == "unsafe":
                content = qwen3guard_verdict("Unsafe", self.categories, output)
            elif self.mode == "controversial":
                content = qwen3guard_verdict("Controversial", (), output)
            elif self.mode == "rule" and self.marker in conversation(str(body.get("prompt", ""))):
                content = qwen3guard_verdict("Unsafe", self.categories, output)
            else:
                content = qwen3guard_verdict("Safe", (), output)
            answered = True
            self.answered_at.append(time.monotonic())
            return web.json_response({"content": content, "stop": True, "tokens_predicted": 8,
                                      "timings": {"prompt_n": 12, "cache_n": 300}})
        finally:
            self.in_flight -= 1
            if not answered:
                self.abandoned += 1
                self.gone.set()

    async def start(self) -> FakeJudge:
        app = web.Application()
        app.router.add_post("/completion", self._completion)
        self._server = TestServer(app)  # handler_cancellation on: a client leaving cancels the handler
        await self._server.start_server()
        return self

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()

    async def __aenter__(self) -> FakeJudge:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
