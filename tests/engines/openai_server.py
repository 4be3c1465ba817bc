"""A small OpenAI-compatible server, run as a `command` engine in the tests, as vLLM or SGLang
would be: it serves `GET /v1/models` and `POST /v1/chat/completions` (streamed or not).

    python openai_server.py --host H --port P --model NAME [--key-env VAR] [--fail-at-start]

--key-env VAR: requests to /v1/* need `Authorization: Bearer $VAR` when VAR is set (as vLLM
with `VLLM_API_KEY`). --fail-at-start: it says "error: no GPU found" and exits 3 before it
listens.
At start it prints its CUDA_VISIBLE_DEVICES and its argv, so a test reads what it was given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import TextIO

from aiohttp import web

ANSWER = "Hello from the command engine."


def say(text: str, stream: TextIO = sys.stdout) -> None:
    stream.write(text + "\n")
    stream.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--key-env")
    parser.add_argument("--fail-at-start", action="store_true")
    args = parser.parse_args()
    say(f"visible devices: {os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}\nargv: {sys.argv[1:]}")
    if args.fail_at_start:
        say("error: no GPU found", sys.stderr)
        sys.exit(3)
    key = os.environ.get(args.key_env, "") if args.key_env else ""

    @web.middleware
    async def auth(request: web.Request, handler):  # type: ignore[no-untyped-def]
        if key and request.path.startswith("/v1/") and (
                request.headers.get("Authorization") != f"Bearer {key}"):
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        return await handler(request)

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list",
                                  "data": [{"id": args.model, "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("model") != args.model:
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        created = int(time.time())
        if body.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for delta in ({"role": "assistant", "content": ANSWER}, {}):
                chunk = {"id": "c1", "object": "chat.completion.chunk", "created": created,
                         "model": args.model, "choices": [{
                             "index": 0, "delta": delta,
                             "finish_reason": None if delta else "stop"}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            return resp
        return web.json_response({
            "id": "c1", "object": "chat.completion", "created": created, "model": args.model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}})

    app = web.Application(middlewares=[auth])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host=args.host, port=args.port, print=None,
                loop=asyncio.new_event_loop())


if __name__ == "__main__":
    main()
