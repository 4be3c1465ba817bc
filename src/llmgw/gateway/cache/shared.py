"""The cache in the install's Redis (`[limits] redis_url`): one store for every worker and
server, so an answer one of them kept is a hit on all, and a purge empties it for all at once.

Each answer is a string with its time to live; each model's (or route's) answers are indexed by
when they expire, in a sorted set, which bounds how many it keeps (the oldest go first)."""

from __future__ import annotations

import time
from collections.abc import Callable

from llmgw.store.redis_pipe import RedisPipe, Script

PREFIX = "llmgw:cache:"
NAMES = PREFIX + "names"  # the set of index keys, one per model or route with answers

# KEYS: the answer, its model's index, NAMES. ARGV: the answer, its time to live and the time now
# (milliseconds), the most answers the model keeps.
PUT = Script("""
local ttl, now, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
redis.call('SADD', KEYS[3], KEYS[2])
local over = redis.call('ZCARD', KEYS[2]) - most
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
  redis.call('DEL', unpack(old))
end
return 1
""")

# KEYS: a model's index, NAMES. Drops its answers and the index; how many answers it held.
PURGE = Script("""
local keys = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #keys, 500 do
  redis.call('DEL', unpack(keys, i, math.min(i + 499, #keys)))
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], KEYS[1])
return #keys
""")

# KEYS: a model's index. ARGV: the time now (ms). Its answers that have not expired.
COUNT = Script("""
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return redis.call('ZCARD', KEYS[1])
""")

SCRIPTS = (PUT, PURGE, COUNT)


def _index(model: str) -> str:
    return PREFIX + "n:" + model


class InRedis:
    """The store of an install with a shared Redis."""

    kind = "redis"

    def __init__(self, pipe: RedisPipe, max_entries: int,
                 now: Callable[[], float] = time.time) -> None:
        self._pipe = pipe
        self.max_entries = max_entries
        self._now = now

    async def get(self, key: str) -> bytes | None:
        value = await self._pipe.call("GET", PREFIX + "a:" + key)
        return value if isinstance(value, bytes) else None

    async def put(self, key: str, model: str, value: bytes, ttl_s: float) -> None:
        await self._pipe.call("EVALSHA", PUT.sha, 3, PREFIX + "a:" + key, _index(model), NAMES,
                              value, max(1, int(ttl_s * 1000)), self._ms(), self.max_entries)

    async def purge(self, model: str | None) -> int:
        names = [_index(model)] if model is not None else await self._names()
        dropped = 0
        for index in names:
            dropped += int(await self._pipe.call("EVALSHA", PURGE.sha, 2, index, NAMES))
        return dropped

    async def count(self) -> dict[str, int]:
        out = {}
        for index in await self._names():
            n = int(await self._pipe.call("EVALSHA", COUNT.sha, 1, index, self._ms()))
            if n:
                out[index.removeprefix(PREFIX + "n:")] = n
        return out

    def close(self) -> None:
        pass  # the connection is the limits' (`SharedLimits`), closed with them

    async def _names(self) -> list[str]:
        found = await self._pipe.call("SMEMBERS", NAMES)
        return sorted(n.decode() for n in found or [])

    def _ms(self) -> int:
        return int(self._now() * 1000)
