"""Route cooldowns shared through the install's Redis: a target that one process cools down is
skipped by every process of every server.

A process that starts a cooldown writes it as a key that expires with it (so a process that
starts or reconnects later finds every cooldown under way) and publishes it on a channel every
process listens to, which copies it into its own `Cooldowns`. Nothing of this is on a request's
way: the publish is a background call, the listening a background task. Without Redis each
process keeps the cooldowns it saw itself (see `gateway.upstream.cooldown`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable

import redis.asyncio as aioredis
import redis.exceptions

logger = logging.getLogger(__name__)

CHANNEL = "llmgw:cooldowns"
KEY_PREFIX = "llmgw:cool:"
# Seconds between tries to listen again after Redis went away.
RELISTEN_S = 1.0

# Told of a cooldown another process started: (route, target, seconds left).
OnCooldown = Callable[[str, str, float], None]


class CooldownBus:
    """Publishes this process's cooldowns and applies everyone else's."""

    def __init__(self, client: aioredis.Redis, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._me = uuid.uuid4().hex  # its own messages come back: they are skipped
        self._tasks: set[asyncio.Task[None]] = set()
        # Set while subscribed (and caught up with the cooldowns under way).
        self.listening = asyncio.Event()

    def publish(self, route: str, target: str, cooldown_s: float) -> None:
        """Tell every process that `target` of `route` cools down for `cooldown_s`."""
        task = asyncio.get_running_loop().create_task(self._publish(route, target, cooldown_s))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, route: str, target: str, cooldown_s: float) -> None:
        ms = max(1, int(cooldown_s * 1000))
        message = json.dumps({"route": route, "target": target, "ms": ms, "from": self._me})
        try:
            async with asyncio.timeout(self._timeout_s):
                pipe = self._client.pipeline(transaction=False)
                pipe.set(_key(route, target), self._me, px=ms)
                pipe.publish(CHANNEL, message)
                await pipe.execute()
        except (TimeoutError, redis.exceptions.RedisError, OSError) as exc:
            logger.info("could not share the cooldown of %s in route %s (%s): other processes "
                        "find it failing themselves", target, route, type(exc).__name__)

    async def run(self, apply: OnCooldown) -> None:
        """Listen until cancelled, applying every cooldown another process starts; after a
        connection loss, listen again and read the cooldowns still under way."""
        while True:
            try:
                async with self._client.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    await self._catch_up(apply)
                    self.listening.set()
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._apply(message.get("data"), apply)
            except (redis.exceptions.RedisError, OSError) as exc:
                logger.debug("cooldown channel lost (%s); listening again", type(exc).__name__)
            self.listening.clear()
            await asyncio.sleep(RELISTEN_S)

    async def _catch_up(self, apply: OnCooldown) -> None:
        async for raw in self._client.scan_iter(match=KEY_PREFIX + "*", count=500):
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            left_ms = await self._client.pttl(name)
            route, _, target = name.removeprefix(KEY_PREFIX).partition("\x00")
            if left_ms > 0 and target:
                apply(route, target, left_ms / 1000)

    def _apply(self, data: object, apply: OnCooldown) -> None:
        try:
            body = json.loads(data.decode() if isinstance(data, bytes) else str(data))
            if body["from"] != self._me:
                apply(str(body["route"]), str(body["target"]), int(body["ms"]) / 1000)
        except (ValueError, KeyError, TypeError):
            logger.warning("ignoring a malformed message on %s", CHANNEL)

    async def close(self) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self._timeout_s + 1)


def _key(route: str, target: str) -> str:
    # Route and model names hold no NUL: it separates them.
    return f"{KEY_PREFIX}{route}\x00{target}"
