"""The request path when a guard policy applies: judge the input, the output, or both.

Input is judged before the upstream call, or (`input_mode: parallel`) while the upstream works,
its answer held until the verdict and cancelled when unsafe. Output is judged whole, or for
streams in windows held back until judged: nothing the judge has not passed reaches the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from llmgw.core.errors import LlmgwError, UpstreamError, UpstreamTimeout
from llmgw.core.guard import Direction, InputMode, Policy
from llmgw.gateway.context import response_headers
from llmgw.gateway.proxy import (
    SSE_HEADERS,
    STREAM_BROKE,
    UpstreamClient,
    failure,
    read_answer,
    read_error,
    relay,
)
from llmgw.gateway.routing import Route, RoutingTable
from llmgw.gateway.usage import UsageTap
from llmgw.guard.enforcement import Guard, RequestInfo
from llmgw.guard.prompts import Role, Turn
from llmgw.guard.stream import DONE, SseSplitter, Window, blocked_events

_ROLES: dict[Any, Role] = {"system": "system", "user": "user", "assistant": "assistant"}


def turns_from(payload: dict[str, Any]) -> list[Turn]:
    """The conversation as judges see it: chat messages, or a completion prompt as a user turn."""
    if isinstance(payload.get("messages"), list):
        turns = []
        for m in payload["messages"]:
            if not isinstance(m, dict):
                continue
            # Tool results and other roles are read by the judge as the user's words.
            turns.append(Turn(_ROLES.get(m.get("role"), "user"), _content_text(m.get("content"))))
        return turns
    prompt = payload.get("prompt", "")
    text = prompt if isinstance(prompt, str) else "\n".join(p for p in prompt if isinstance(p, str))
    return [Turn("user", text)]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text is judged
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def answer_text(raw: bytes) -> str:
    """The generated text of a whole (non-streamed) chat or completion response."""
    try:
        obj = orjson.loads(raw)
        choice = obj["choices"][0]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return ""
    message = choice.get("message") if isinstance(choice, dict) else None
    if isinstance(message, dict):
        return _content_text(message.get("content"))
    return str(choice.get("text") or "") if isinstance(choice, dict) else ""


async def forward_guarded(
    guard: Guard,
    client: UpstreamClient,
    request: web.Request,
    table: RoutingTable,
    route: Route,
    path: str,
    body: bytes,
    payload: dict[str, Any],
    info: RequestInfo,
    inputs: list[Policy],
    outputs: list[Policy],
    tap: UsageTap | None = None,
) -> web.StreamResponse:
    """Forward one request under the policies that apply to it."""
    turns = turns_from(payload)
    before = [p for p in inputs if p.input_mode == InputMode.BEFORE]
    parallel = [p for p in inputs if p.input_mode == InputMode.PARALLEL]
    await guard.check(before, Direction.INPUT, turns, info)
    stream = payload.get("stream") is True
    if not parallel and not outputs:
        return await client.forward(request, table, route, path, body, payload, stream, tap)
    verdict = asyncio.create_task(guard.check(parallel, Direction.INPUT, turns, info))
    try:
        async with contextlib.AsyncExitStack() as stack:
            # A whole answer's headers come only when it is complete: race the opening against
            # the input verdict so an unsafe prompt drops the upstream at once.
            opening = asyncio.ensure_future(
                stack.enter_async_context(client.open(table, route, path, body, payload))
            )
            try:
                await asyncio.wait({opening, verdict}, return_when=asyncio.FIRST_COMPLETED)
                if verdict.done() and verdict.exception() is not None:
                    raise verdict.exception()  # type: ignore[misc]
                up, resp = await opening
            finally:
                if not opening.done():
                    opening.cancel()
                    await asyncio.wait({opening})
            if not 200 <= resp.status < 300:
                raise failure(up, resp, await _read_unless_blocked(resp, verdict, read_error(resp)))
            if not stream or resp.status != 200:
                raw = await _read_unless_blocked(resp, verdict, read_answer(up, resp))
                if tap is not None:
                    tap.whole(raw)
                if outputs:
                    answer = Turn("assistant", answer_text(raw))
                    await guard.check(outputs, Direction.OUTPUT, [*turns, answer], info)
                return web.Response(
                    body=raw,
                    status=resp.status,
                    headers={"Content-Type": resp.headers.get("Content-Type", "application/json")},
                )
            await verdict  # nothing of the answer leaves before the input verdict
            if not outputs:
                return await relay(request, resp, tap)
            return await _windowed(guard, request, resp, turns, outputs, info, tap)
    except TimeoutError as exc:
        raise UpstreamTimeout(f"upstream for '{info.model}' did not answer in time") from exc
    except aiohttp.ClientError as exc:
        raise UpstreamError(f"upstream for '{info.model}' failed: {type(exc).__name__}") from exc
    finally:
        if not verdict.done():
            verdict.cancel()
        # wait() rather than await: the verdict's CancelledError is its own, while ours (the
        # client left) must go on up; its LlmgwError was raised above when it mattered.
        await asyncio.wait({verdict})
        error = None if verdict.cancelled() else verdict.exception()
        if error is not None and not isinstance(error, LlmgwError):
            raise error


async def _read_unless_blocked(
    resp: aiohttp.ClientResponse, verdict: asyncio.Task[None], read: Coroutine[Any, Any, bytes]
) -> bytes:
    """What `read` reads, unless the input verdict blocks first (then the upstream is dropped)."""
    reading = asyncio.ensure_future(read)
    try:
        await asyncio.wait({reading, verdict}, return_when=asyncio.FIRST_EXCEPTION)
        if verdict.done():
            verdict.result()  # raises when blocked
        raw = await reading
        await verdict
        return raw
    finally:
        if not reading.done():
            reading.cancel()
            resp.close()


async def _windowed(
    guard: Guard,
    request: web.Request,
    resp: aiohttp.ClientResponse,
    turns: list[Turn],
    outputs: list[Policy],
    info: RequestInfo,
    tap: UsageTap | None = None,
) -> web.StreamResponse:
    """Relay a stream a window at a time, each released only after the judges passed it."""
    out = web.StreamResponse(status=200, headers=response_headers(request, SSE_HEADERS))
    await out.prepare(request)
    window = Window(size=min(p.stream_window_chars for p in outputs))
    splitter = SseSplitter()

    async def judged() -> bool:
        """Judge everything so far; write the held events, or the blocked ending."""
        if window.unjudged:
            try:
                answer = Turn("assistant", window.text)
                await guard.check(outputs, Direction.OUTPUT, [*turns, answer], info)
            except LlmgwError as exc:
                await out.write(blocked_events(info.model, exc.message, exc.code or "content_filter",
                                               exc.type))
                resp.close()  # stop the upstream generating what nobody will read
                return False
        for event in window.release():
            await out.write(event + b"\n\n")
        return True

    try:
        async for chunk in resp.content.iter_any():
            if tap is not None:
                tap.chunk(chunk)
            for event in splitter.feed(chunk):
                if event.strip() == DONE:
                    window.held.append(event)
                elif window.add(event) and not await judged():
                    return out
        for event in splitter.rest():
            window.add(event)
        if await judged():
            await out.write_eof()
    except ConnectionError:
        resp.close()  # the client left
    except (aiohttp.ClientError, TimeoutError):
        # The upstream broke mid-stream: what was judged has gone out; end with an error event.
        with contextlib.suppress(ConnectionError):
            await out.write(STREAM_BROKE)
            await out.write_eof()
    return out

