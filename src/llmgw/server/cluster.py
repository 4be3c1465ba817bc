"""This server's part in the cluster: its id, and whether (and at which epoch) it leads."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection

from llmgw.control.leader import Elector
from llmgw.core.clock import Clock, SystemClock
from llmgw.core.errors import StaleEpoch
from llmgw.core.protocol.nodes import ServerOut
from llmgw.store import lease_repo
from llmgw.store.lease_repo import Fence
from llmgw.store.server_repo import ServerRow


def _not_leading(_conn: Connection) -> None:
    raise StaleEpoch("leader-only write refused: this server is not the leader")


@dataclass
class Leadership:
    """Whether this server leads, and at which epoch: what its leader-only writes check. The
    leader's duties start and stop beside it (`server.app`), never inside it."""

    clock: Clock = field(default_factory=SystemClock)
    server_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    elector: Elector | None = None
    epoch: int | None = None

    async def elected(self, epoch: int) -> None:
        self.epoch = epoch

    async def deposed(self) -> None:
        # First: a write still in flight from the duties being stopped is refused.
        self.epoch = None

    @property
    def leading(self) -> bool:
        return self.epoch is not None

    def fence(self) -> Fence | None:
        """What a leader-only write checks in its transaction: the lease is still ours at the
        epoch we were elected with. None on SQLite, where the one server always leads."""
        if self.elector is None:
            return None
        if self.epoch is None:
            return _not_leading
        return lease_repo.fence(self.server_id, self.epoch, self.clock.now)


def server_views(rows: list[ServerRow], holder: str | None, now: datetime,
                 timeout: timedelta) -> list[ServerOut]:
    """The servers as `cluster status` lists them: one whose heartbeat is older than `timeout`
    (killed, or cut off) is `gone` and never the leader; rows are pruned after a day."""
    views = []
    for row in rows:
        seen = now - row.heartbeat_at
        live = seen <= timeout
        views.append(ServerOut(
            id=row.id, url=row.url, started_at=row.started_at.isoformat(),
            seen_s_ago=round(seen.total_seconds(), 1), state="live" if live else "gone",
            leader=live and row.id == holder,
        ))
    return views
