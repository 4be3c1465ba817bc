"""How `server run` serves: a client that goes away takes its request's upstream call with it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from llmgw.core.types import Limits
from llmgw.store.store import Store
from tests.fakes.provider import ANSWER, FakeProvider, GatewayRig


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[GatewayRig]:
    provider = await FakeProvider(stall=True).start()
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    r = await GatewayRig(provider, store, limits=Limits(concurrent=2)).start()
    yield r
    await r.close()
    await provider.close()
    store.close()


async def next_one(queue: asyncio.Queue[None], what: str) -> None:
    try:
        await asyncio.wait_for(queue.get(), 5)
    except TimeoutError:
        pytest.fail(f"{what} never happened")


def body(stream: bool) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


async def test_clients_that_leave_free_their_slots_and_the_upstream_at_once(rig: GatewayRig) -> None:
    provider = rig.provider
    headers = {"Authorization": f"Bearer {rig.plaintext}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        url = rig.url + "/v1/chat/completions"
        # A stream against a stalled upstream: its headers came, then nothing more.
        stream = await session.post(url, json=body(True))
        assert stream.status == 200
        await next_one(provider.arrived, "the streamed request reaching the upstream")
        # A whole answer the upstream is still working on: nothing has come back yet.
        whole = asyncio.create_task(session.post(url, json=body(False)))
        await next_one(provider.arrived, "the whole request reaching the upstream")
        full = await session.post(url, json=body(False))
        assert full.status == 429  # --concurrent 2: both slots are taken
        assert (await full.json())["error"]["code"] == "rate_limit_concurrent"

        stream.close()  # both clients go away
        whole.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await whole
        await next_one(provider.left, "one upstream connection closing")
        await next_one(provider.left, "the other upstream connection closing")

        provider.stall = False
        answers = await asyncio.gather(*(session.post(url, json=body(False)) for _ in range(2)))
        assert [a.status for a in answers] == [200, 200]  # both slots were freed with them
        assert [(await a.json())["choices"][0]["message"]["content"] for a in answers] == [ANSWER] * 2
    assert rig.meter is not None
    await rig.meter.flush()
    # The abandoned requests are not counted as errors; nothing they did not use is counted.
    [row] = rig.store.usage.usage()
    assert (row.requests, row.errors, row.prompt_tokens, row.completion_tokens) == (4, 0, 18, 10)
