"""Every loop that reacts to changes is woken through the one notifier."""

from __future__ import annotations

import asyncio

from llmgw.control.notifier import Notifier


async def test_a_change_wakes_every_watcher_and_settle_waits_for_this_servers_view() -> None:
    notifier = Notifier()
    agent, keeper = notifier.watch(), notifier.watch(asyncio.Event())
    refreshed: list[str] = []

    async def refresh() -> None:
        refreshed.append("routing table")

    notifier.sync_with(refresh)
    await notifier.settle()
    assert agent.is_set() and keeper.is_set()
    assert refreshed == ["routing table"]


async def test_a_loop_that_stopped_is_no_longer_woken() -> None:
    notifier = Notifier()
    keeper = notifier.watch()
    notifier.unwatch(keeper)
    notifier.changed()
    assert not keeper.is_set()
