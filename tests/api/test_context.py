"""The client's address as sign-in limits and the audit log count it: the peer, or behind a
trusted proxy the first hop the proxies did not add; never what a client writes itself."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.api.context import TRUSTED_PROXIES, client_address, networks, over_https


async def _echo(request: web.Request) -> web.Response:
    return web.Response(text=client_address(request))


@pytest.mark.parametrize(("trusted", "forwarded", "expected"), [
    ([], "203.0.113.5", "127.0.0.1"),  # no proxy is trusted: the header is anyone's
    (["127.0.0.1"], None, "127.0.0.1"),
    (["127.0.0.1"], "203.0.113.5", "203.0.113.5"),
    # The client wrote 6.6.6.6 itself; the proxies appended the rest.
    (["127.0.0.0/8", "10.0.0.0/8"], "6.6.6.6, 203.0.113.5, 10.1.1.1", "203.0.113.5"),
    (["127.0.0.1"], "not-an-address", "unknown"),
    (["10.0.0.0/8"], "203.0.113.5", "127.0.0.1"),  # this peer is no trusted proxy
])
async def test_the_client_behind_trusted_proxies(trusted: list[str], forwarded: str | None,
                                                 expected: str) -> None:
    app = web.Application()
    app[TRUSTED_PROXIES] = networks(trusted)
    app.router.add_get("/", _echo)
    async with TestClient(TestServer(app)) as client:
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        assert await (await client.get("/", headers=headers)).text() == expected


def test_a_trusted_proxy_that_is_no_address_is_refused_in_the_config() -> None:
    from pydantic import ValidationError

    from llmgw.core.settings import ServerSettings

    with pytest.raises(ValidationError, match="is not an address or network"):
        ServerSettings(key_secret="ab", trusted_proxies=["proxy.example"])


async def _https(request: web.Request) -> web.Response:
    return web.Response(text="https" if over_https(request) else "http")


@pytest.mark.parametrize(("trusted", "proto", "expected"), [
    ([], "https", "http"),  # anyone can write the header
    (["127.0.0.1"], "https", "https"),
    (["127.0.0.1"], "http", "http"),
    (["10.0.0.0/8"], "https", "http"),  # not from a trusted proxy
])
async def test_https_behind_a_trusted_proxy(trusted: list[str], proto: str, expected: str) -> None:
    # The console's cookies are Secure when the client's own connection was https.
    app = web.Application()
    app[TRUSTED_PROXIES] = networks(trusted)
    app.router.add_get("/", _https)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/", headers={"X-Forwarded-Proto": proto})
        assert await resp.text() == expected
