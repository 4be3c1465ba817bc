"""How long a route takes to serve from its fallback once its first target goes down.

Against a running llmgw (`--url`, `--admin-key`): starts two small upstreams of its own (A and B,
each answering chat completions and saying which it is), adds them as remote models and a
`priority` route in front of them, then sends requests one after another through the route.
After `--before` requests A is stopped (its listening socket and every open connection closed,
as when its machine goes away), and the requests go on. Prints, on one line each:

- the time from A going down to the first request answered by B, and how many requests failed
  in between (the goal is none: the fallback is tried within the same request);
- p50 of the requests before A went down, right after (A still tried first and refused, until
  its cooldown), and once A was cooling down (skipped), in ms.

Removes what it added. Needs only aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from statistics import median

import aiohttp
from aiohttp import web

ANSWER = ('{"id":"x","object":"chat.completion","created":1,"model":"%s","choices":[{"index":0,'
          '"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
          '"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')


async def upstream(name: str) -> web.AppRunner:
    async def chat(_request: web.Request) -> web.Response:
        return web.Response(text=ANSWER % name, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, shutdown_timeout=0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def port(runner: web.AppRunner) -> int:
    return int(runner.addresses[0][1])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--admin-key", required=True)
    parser.add_argument("--before", type=int, default=200, help="requests before A goes down")
    parser.add_argument("--after", type=int, default=400, help="requests after")
    args = parser.parse_args()
    admin = {"Authorization": f"Bearer {args.admin_key}"}
    a, b = await upstream("A"), await upstream("B")
    models = {"failover-a": port(a), "failover-b": port(b)}
    async with aiohttp.ClientSession(args.url, headers=admin) as http:
        for name, p in models.items():
            async with http.post("/admin/v1/models", json={
                    "name": name, "source": {"kind": "remote", "base_url": f"http://127.0.0.1:{p}/v1"}}) as r:
                assert r.status == 201, await r.text()
        async with http.post("/admin/v1/routes", json={
                "name": "failover", "targets": [{"model": m} for m in models]}) as r:
            assert r.status == 201, await r.text()
        try:
            await measure(http, a, args.before, args.after)
        finally:
            await http.delete("/admin/v1/routes/failover")
            for name in models:
                await http.delete(f"/admin/v1/models/{name}")
            await b.cleanup()


async def measure(http: aiohttp.ClientSession, a: web.AppRunner, before: int, after: int) -> None:
    body = {"model": "failover", "messages": [{"role": "user", "content": "hi"}]}

    async def one() -> tuple[float, int, str]:
        start = time.perf_counter()
        async with http.post("/v1/chat/completions", json=body) as r:
            text = await r.text()
        return (time.perf_counter() - start) * 1000, r.status, '"model":"B"' if '"model":"B"' in text else ""

    # Until the route is in the server's table (its refresh follows the admin write).
    for _ in range(100):
        if (await one())[1] == 200:
            break
        await asyncio.sleep(0.05)
    first = [await one() for _ in range(before)]
    assert all(s == 200 and not by_b for _, s, by_b in first), "A did not answer every request"
    down = time.perf_counter()
    await a.cleanup()  # A's socket and its open connections close: like its machine going away
    failed, until_b, after_down = 0, None, []
    for _ in range(after):
        ms, status, by_b = await one()
        after_down.append(ms)
        if status != 200:
            failed += 1
        elif by_b and until_b is None:
            until_b = (time.perf_counter() - down) * 1000
    refused = after_down[:3]  # tried A first (and refused) until A's cooldown began
    print(f"failover: A down -> first answer from B after {until_b:.1f} ms; "  # noqa: T201
          f"{failed} of {after} requests failed after A went down")
    print(f"failover: p50 ms before {median(ms for ms, _, _ in first):.3f}, "  # noqa: T201
          f"while A was still tried {median(refused):.3f}, "
          f"once A was cooling down {median(after_down[3:]):.3f}")


if __name__ == "__main__":
    asyncio.run(main())
