"""The skeleton every admin service shares: the store it changes, the clock that stamps the
change, and the server it tells.

Here, the lowest layer that knows the store, so that the admin plane, the guard and the control
plane build their services on one base."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from llmgw.core.clock import Clock
from llmgw.store.store import Store

OnChange = Callable[[], Awaitable[None]]


class AdminService:
    """A service whose writes go to the store and are then announced through `on_change`.

    `on_change` is awaited after every change, so this server's snapshot (routing table, keys,
    policies) has it before the call answers rather than at the next refresh."""

    def __init__(self, store: Store, clock: Clock, on_change: OnChange | None = None) -> None:
        self._store = store
        self._clock = clock
        self._on_change = on_change

    async def _changed(self) -> None:
        """Tell the server the store changed (and wait until it has taken the change in)."""
        if self._on_change is not None:
            await self._on_change()
