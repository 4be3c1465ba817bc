"""The pipelined connection to Redis, on a real redis-server: replies reach their own callers
under concurrency (on asyncio's loop and on uvloop, which the server runs on), a paused Redis
fails every waiting call within the deadline, a restarted or flushed one is reconnected to with
its scripts loaded again, and a password is used and never shown."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import uvloop

from llmgw.core.errors import ConfigError, SharedStoreDown
from llmgw.store.redis_pipe import Endpoint, RedisPipe, Script
from tests.support.redis_server import RedisServer

ECHO = Script("return ARGV[1]")


def pipe_to(server: RedisServer, timeout_s: float = 2.0, password: str | None = None) -> RedisPipe:
    return RedisPipe(Endpoint.from_url(server.url, password), timeout_s, (ECHO,))


async def concurrent_replies_reach_their_callers(server: RedisServer) -> None:
    pipe = pipe_to(server)
    try:
        answers = await asyncio.gather(*(pipe.call("EVALSHA", ECHO.sha, 0, f"n{i}")
                                         for i in range(200)))
        assert answers == [f"n{i}".encode() for i in range(200)]
    finally:
        pipe.close()


async def test_concurrent_replies_reach_their_own_callers(redis_server: RedisServer) -> None:
    await concurrent_replies_reach_their_callers(redis_server)


def test_concurrent_replies_reach_their_own_callers_on_uvloop(redis_server: RedisServer) -> None:
    uvloop.run(concurrent_replies_reach_their_callers(redis_server))


async def test_a_command_sent_without_waiting_goes_before_what_is_asked_after_it(
        redis_server: RedisServer) -> None:
    pipe = pipe_to(redis_server)
    try:
        await pipe.call("PING")
        assert pipe.send("SET", "k", "1")
        assert await pipe.call("GET", "k") == b"1"
    finally:
        pipe.close()


async def test_a_paused_redis_fails_every_waiting_call_within_the_deadline_then_serves_again(
        redis_server: RedisServer) -> None:
    pipe = pipe_to(redis_server, timeout_s=0.2)
    try:
        await pipe.call("PING")
        redis_server.pause()
        started = time.monotonic()
        answers = await asyncio.gather(*(pipe.call("PING") for _ in range(5)),
                                       return_exceptions=True)
        assert all(isinstance(a, SharedStoreDown) for a in answers)
        assert "did not answer within 200 ms" in str(answers[0])
        assert time.monotonic() - started < 1.5  # one deadline, not one per call
        redis_server.resume()
        assert await pipe.call("PING") == b"PONG"  # a new connection
    finally:
        redis_server.resume()
        pipe.close()


async def test_after_a_restart_the_scripts_are_loaded_again(redis_server: RedisServer) -> None:
    pipe = pipe_to(redis_server)
    try:
        assert await pipe.call("EVALSHA", ECHO.sha, 0, "a") == b"a"
        redis_server.kill()
        redis_server.start()  # same port, empty: no scripts
        with pytest.raises(SharedStoreDown):
            await pipe.call("PING")  # the old connection is found closed
        assert await pipe.call("EVALSHA", ECHO.sha, 0, "b") == b"b"
    finally:
        pipe.close()


async def test_a_flushed_script_fails_once_and_is_loaded_again(redis_server: RedisServer) -> None:
    pipe = pipe_to(redis_server)
    try:
        await pipe.call("SCRIPT", "FLUSH")
        with pytest.raises(SharedStoreDown, match="NOSCRIPT"):
            await pipe.call("EVALSHA", ECHO.sha, 0, "a")
        assert await pipe.call("EVALSHA", ECHO.sha, 0, "b") == b"b"
    finally:
        pipe.close()


async def test_nothing_listening_is_a_prompt_shared_store_down(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)  # never started: its port is free
    pipe = pipe_to(server, timeout_s=0.5)
    with pytest.raises(SharedStoreDown, match="cannot connect"):
        await pipe.call("PING")


async def test_a_password_is_used_and_a_wrong_one_is_not_shown(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, args=("--requirepass", "s3cret-pw"))
    server.start()
    try:
        good = pipe_to(server, password="s3cret-pw")
        assert await good.call("PING") == b"PONG"
        good.close()
        wrong = pipe_to(server, password="not-the-pw")
        with pytest.raises(SharedStoreDown) as refused:
            await wrong.call("PING")
        assert "AUTH" in str(refused.value) and "not-the-pw" not in str(refused.value)
        with pytest.raises(SharedStoreDown):
            await pipe_to(server).call("PING")  # none at all: NOAUTH
    finally:
        server.kill()


def test_urls_are_read_as_the_redis_client_reads_them() -> None:
    plain = Endpoint.from_url("redis://127.0.0.1:6390/2")
    assert (plain.host, plain.port, plain.db, plain.password, plain.tls) == ("127.0.0.1", 6390, 2,
                                                                            None, None)
    tls = Endpoint.from_url("rediss://me:pw@redis.internal/0?ssl_cert_reqs=none", "from-file")
    assert tls.tls is not None and (tls.username, tls.password) == ("me", "from-file")
    assert Endpoint.from_url("unix:///run/redis.sock?db=3").path == "/run/redis.sock"
    with pytest.raises(ConfigError, match="not a Redis URL"):
        Endpoint.from_url("http://redis")


async def test_closing_while_connecting_fails_the_waiting_call_at_once(
        redis_server: RedisServer) -> None:
    pipe = pipe_to(redis_server, timeout_s=30)
    redis_server.pause()  # connects (the kernel accepts), but the scripts never load
    try:
        asking = asyncio.ensure_future(pipe.call("PING"))
        await asyncio.sleep(0.05)  # under way: nothing to await that says so
        assert not asking.done()
        pipe.close()
        with pytest.raises(SharedStoreDown):
            await asyncio.wait_for(asking, 1)
    finally:
        redis_server.resume()
