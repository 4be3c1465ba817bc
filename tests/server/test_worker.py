"""An extra worker process (`server.worker`), started for real by a `WorkerPool` with this test
as its main process: a request that queues there for a cold model wakes the main process at
once, with the demand its keeper then reads already in the store."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import aiohttp

from llmgw.core.clock import SystemClock
from llmgw.core.settings import load
from llmgw.gateway.inflight import SharedInFlight
from llmgw.gateway.windows import SharedWindows
from llmgw.server.init import init
from llmgw.server.run import worker_argv
from llmgw.server.workers import IN_FLIGHT, WAKE_SIGNAL, WorkerPool, listen_for_wakes
from llmgw.store.store import Store
from tests.demand_factories import on_demand_model
from tests.support.server_process import free_port

COLD = "cold-model"


async def chat(url: str, key: str) -> None:
    """A chat request for the cold model, sent as soon as the worker listens."""
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.post(url + "/v1/chat/completions",
                                        headers={"Authorization": f"Bearer {key}"},
                                        json={"model": COLD, "messages": [
                                            {"role": "user", "content": "hi"}]}) as resp:
                    await resp.read()
                    raise AssertionError(f"answered {resp.status} instead of queueing")
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.05)  # the worker is still starting


async def test_a_request_queued_for_a_cold_model_in_a_worker_wakes_the_main_process(
    tmp_path: Path,
) -> None:
    data_dir, run_dir = tmp_path / "data", tmp_path / "run"
    made = init(data_dir, guard=False, embedded_node=False)
    assert made.admin_key is not None
    settings = load(data_dir)
    store = Store.open(settings.database_url(data_dir))
    clock = SystemClock()
    store.catalog.add(on_demand_model(COLD), "test", clock.now())
    run_dir.mkdir(mode=0o700)
    flight = SharedInFlight(run_dir / IN_FLIGHT, 2, 0, create=True)
    windows = SharedWindows(run_dir, 2, 0, create=True)
    looked = asyncio.Event()
    loop = asyncio.get_running_loop()
    listen_for_wakes(loop, looked.set)
    port = free_port()
    pool = WorkerPool(worker_argv(data_dir, "127.0.0.1", port, run_dir, "main", 2,
                                  ("warning", "text")), 2, drain_timeout_s=1.0)
    supervising = asyncio.create_task(pool.run())
    request = asyncio.create_task(chat(f"http://127.0.0.1:{port}", made.admin_key))
    woken = asyncio.create_task(looked.wait())
    try:
        async with asyncio.timeout(60):
            await asyncio.wait({woken, request}, return_when=asyncio.FIRST_COMPLETED)
        if request.done():
            request.result()  # what went wrong with it
        assert woken.done()  # and the request still queued: nothing places a replica here
        demand = await asyncio.to_thread(store.servers.activity, clock.now(),
                                         timedelta(seconds=settings.server_timeout_s))
        assert demand.queued[COLD].waiting == 1
    finally:
        for task in (request, woken):
            task.cancel()
        await asyncio.wait({request, woken})
        await pool.stop()
        supervising.cancel()
        await asyncio.wait({supervising})
        loop.remove_signal_handler(WAKE_SIGNAL)
        flight.close()
        windows.close()
        store.close()
