"""A node agent's link to its servers: one `/agent/v1/sync` call per round.

The round is the heartbeat, carries the supervisors' latest reports (kept until a server has
them, so nothing said while the servers were away is lost) and brings the assignments back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
import orjson
from pydantic import ValidationError

from llmgw.core.agent_wire import (
    Changes,
    McpRunReport,
    McpSyncRequest,
    McpSyncResponse,
    ReplicaReport,
    SyncRequest,
    SyncResponse,
)
from llmgw.core.errors import JoinRefused, ServerUnreachable
from llmgw.core.mcp import McpRunState, McpServer
from llmgw.core.types import Node
from llmgw.node.agent import Assignment
from llmgw.node.supervisor import Status

logger = logging.getLogger(__name__)

SYNC_PATH = "/agent/v1/sync"
CHANGES_PATH = "/agent/v1/changes"
MCP_SYNC_PATH = "/agent/v1/mcp"
# How long the server holds one changes call open (its bound is 30 s).
WATCH_WAIT_S = 25.0


class ServerLink:
    """Tries each server in turn, starting with the last one that answered."""

    def __init__(
        self, servers: list[str], token: str, node: Callable[[], Node], timeout_s: float = 10.0,
        *, agent: str,
    ) -> None:
        if not servers:
            raise ValueError("a node agent needs at least one server URL")
        if not agent:
            raise ValueError("a node agent needs its own id (servers refuse an empty one)")
        self._servers = [s.rstrip("/") for s in servers]
        self._token = token
        self._node = node
        self._agent = agent
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._pending: dict[str, Status] = {}
        self._stopped: set[str] = set()
        self._good = 0
        self._cut_off = False
        self.engine_key: str | None = None
        self._mcp_pending: dict[str, Status] = {}
        self._mcp_stopped: set[str] = set()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def report(self, replica_id: str, status: Status) -> None:
        """Keep the latest status of a replica for the next round (the agent wakes one)."""
        self._pending[replica_id] = status

    async def forget(self, replica_id: str) -> None:
        """A replica the servers told this node to stop is gone: say so next round."""
        self._stopped.add(replica_id)
        self._pending.pop(replica_id, None)

    async def report_mcp(self, server: str, status: Status) -> None:
        """Keep the latest status of a stdio MCP server's run for the next round."""
        self._mcp_pending[server] = status

    async def forget_mcp(self, server: str) -> None:
        """A stdio MCP server this node no longer runs is stopped: say so next round."""
        self._mcp_stopped.add(server)
        self._mcp_pending.pop(server, None)

    async def mcp_servers(self) -> list[McpServer] | None:
        """After a round: the stdio MCP servers' runs to the server that answered it, and the
        servers this node runs back; None when it did not answer (the runs stay as they are).
        A server without the call (an earlier version) has none for it to run."""
        assert self._session is not None, "ServerLink.start() was not called"
        sent, stopped = dict(self._mcp_pending), set(self._mcp_stopped)
        body = orjson.dumps(McpSyncRequest(
            runs=[_mcp_report(name, s) for name, s in sent.items()],
            stopped=sorted(stopped)).model_dump(mode="json"))
        url = self._servers[self._good]
        try:
            code, raw = await self._post(url + MCP_SYNC_PATH, body)
            if code == 404:
                return []
            if code != 200:
                logger.warning("%s%s: HTTP %d %s", url, MCP_SYNC_PATH, code, _message(raw))
                return None
            answer = McpSyncResponse.model_validate_json(raw)
        except (aiohttp.ClientError, TimeoutError, ValidationError) as exc:
            logger.warning("%s%s: %s", url, MCP_SYNC_PATH, type(exc).__name__)
            return None
        for name, status in sent.items():
            if self._mcp_pending.get(name) is status:
                del self._mcp_pending[name]
        self._mcp_stopped -= stopped
        return answer.servers

    async def assignments(self) -> list[Assignment]:
        """One round with the first server that answers; ServerUnreachable when none does."""
        sent = dict(self._pending)
        stopped = set(self._stopped)
        # In a thread: the node's hardware is read again each round (NVML may be slow to answer
        # for a GPU in trouble), and the agent's loop must not wait on it.
        node = await asyncio.to_thread(self._node)
        body = orjson.dumps(SyncRequest(
            node=node,
            agent=self._agent,
            replicas=[_report(rid, s) for rid, s in sent.items()],
            stopped=sorted(stopped),
        ).model_dump(mode="json"))
        answer = await self._round(body)
        # Only what this round carried is done: a report that came in meanwhile goes next time.
        for rid, status in sent.items():
            if self._pending.get(rid) is status:
                del self._pending[rid]
        self._stopped -= stopped
        self.engine_key = answer.engine_key
        return [Assignment(a.replica, a.model) for a in answer.assignments]

    async def watch(self, wake: Callable[[], None], retry_s: float = 5.0,
                    wait_s: float = WATCH_WAIT_S) -> None:
        """Hold a changes call open with the server that last answered a round, and `wake` the
        agent whenever the store moves (a replica placed here starts now, not at the next
        round). Errors only delay the next call: the rounds go on regardless, and a server
        without the call (an earlier version) ends the watch."""
        assert self._session is not None, "ServerLink.start() was not called"
        revision: int | None = None
        timeout = aiohttp.ClientTimeout(total=wait_s + 10)
        while True:
            url = self._servers[self._good]
            params = {"since": str(revision if revision is not None else -1), "wait": str(wait_s)}
            try:
                async with self._session.get(
                    url + CHANGES_PATH, params=params, timeout=timeout,
                    headers={"Authorization": f"Bearer {self._token}"},
                ) as resp:
                    raw = await resp.read()
                    if resp.status == 404:
                        logger.info("server %s does not push changes; placements arrive with "
                                    "the agent's rounds", url)
                        return
                    if resp.status != 200:
                        raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
                now = Changes.model_validate_json(raw).revision
            except (aiohttp.ClientError, TimeoutError, ValidationError):
                await asyncio.sleep(retry_s)
                continue
            if revision is not None and now != revision:
                wake()
            revision = now

    async def _post(self, url: str, body: bytes) -> tuple[int, bytes]:
        """POST `body` to `url` with the node's token: the answer's status and bytes."""
        assert self._session is not None, "ServerLink.start() was not called"
        async with self._session.post(url, data=body, headers={
                "Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        ) as resp:
            return resp.status, await resp.read()

    async def _round(self, body: bytes) -> SyncResponse:
        assert self._session is not None, "ServerLink.start() was not called"
        errors: list[str] = []
        n = len(self._servers)
        for i in range(n):
            index = (self._good + i) % n
            url = self._servers[index]
            try:
                status, raw = await self._post(url + SYNC_PATH, body)
                # A bad token, or another agent holding this node id: no other server
                # will say otherwise, and retrying as is cannot help.
                if status in (401, 403, 409):
                    raise JoinRefused(f"{url} refused this node: {_message(raw)}")
                if status != 200:
                    errors.append(f"{url}: HTTP {status} {_message(raw)}")
                    continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                errors.append(f"{url}: {type(exc).__name__}: {exc}")
                continue
            try:
                answer = SyncResponse.model_validate_json(raw)
            except ValidationError as exc:
                errors.append(f"{url}: unexpected answer ({exc.error_count()} errors)")
                continue
            if self._cut_off or index != self._good:
                logger.info("connected to server %s", url)
            self._good, self._cut_off = index, False
            return answer
        if not self._cut_off:
            logger.warning("no server reachable (%s); replicas keep running", "; ".join(errors))
        self._cut_off = True
        raise ServerUnreachable("no server reachable: " + "; ".join(errors))


def _report(replica_id: str, s: Status) -> ReplicaReport:
    return ReplicaReport(id=replica_id, state=s.state, endpoint=s.endpoint, pid=s.pid,
                         restarts=s.restarts, last_error=s.last_error)


def _mcp_report(server: str, s: Status) -> McpRunReport:
    return McpRunReport(server=server, state=McpRunState(s.state.value), endpoint=s.endpoint,
                        pid=s.pid, restarts=s.restarts, last_error=s.last_error)


def _message(raw: bytes) -> str:
    try:
        return str(orjson.loads(raw)["error"]["message"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return raw[:200].decode("utf-8", "replace")
