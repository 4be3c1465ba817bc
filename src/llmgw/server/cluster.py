"""This server's part in the cluster: its id, and whether (and at which epoch) it leads."""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from llmgw.control.leader import Elector


@dataclass
class Leadership:
    """Starts the leader-only loops when elected and stops them when deposed."""

    on_elected: Callable[[int], Awaitable[None]]
    on_deposed: Callable[[], Awaitable[None]]
    server_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    elector: Elector | None = None
    epoch: int | None = None

    async def elected(self, epoch: int) -> None:
        self.epoch = epoch
        await self.on_elected(epoch)

    async def deposed(self) -> None:
        self.epoch = None
        await self.on_deposed()

    @property
    def leading(self) -> bool:
        return self.epoch is not None
