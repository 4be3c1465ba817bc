"""What the HTTP layer attaches to a request for the request path to read."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence

from aiohttp import web

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

REQUEST_ID = web.RequestKey("request_id", str)
STARTED = web.RequestKey("started", float)  # monotonic time the request arrived
# What every response says in `Server`: no Python or aiohttp version for a scanner to match.
SERVER = "llmgw"


def response_headers(request: web.Request, headers: dict[str, str]) -> dict[str, str]:
    """`headers` plus the request id and `Server`, for responses the request path prepares itself."""
    rid = request.get(REQUEST_ID)
    return {**headers, "Server": SERVER, "X-Request-Id": rid} if rid else {**headers, "Server": SERVER}


# What an extra worker adds when it passes a request to the main process (`api.forward`): the
# client's address and whether it came over https, which the main process would otherwise see
# only as its private socket.
RELAYED_FOR = "X-Llmgw-Relayed-For"
RELAYED_HTTPS = "X-Llmgw-Relayed-Https"
# The install's `trusted_proxies`, on the server's (and each worker's) application.
TRUSTED_PROXIES = web.AppKey("trusted_proxies", tuple[Network, ...])


def networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """`trusted_proxies` as networks (already checked by the settings)."""
    return tuple(ipaddress.ip_network(e, strict=False) for e in entries)


def client_address(request: web.Request) -> str:
    """The client's address, as sign-in limits and the audit log name it: the relaying worker's
    word for a request that came over the main process's private socket (only a worker can
    reach it); behind a trusted proxy, the last `X-Forwarded-For` hop that is no trusted proxy;
    else the connection's peer. A client's own header is never believed."""
    if _relayed(request):
        return request.headers.get(RELAYED_FOR) or "unknown"
    peer = request.remote or "unknown"
    trusted = request.config_dict.get(TRUSTED_PROXIES, ())
    if not trusted or not _within(peer, trusted):
        return peer
    hops = [h.strip() for value in request.headers.getall("X-Forwarded-For", [])
            for h in value.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _within(hop, trusted):
            return hop if _address(hop) is not None else "unknown"
    return hops[0] if hops else peer


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _within(text: str, nets: Sequence[Network]) -> bool:
    found = _address(text)
    return found is not None and any(found in net for net in nets)


def over_https(request: web.Request) -> bool:
    """Whether the client's request came over https: to llmgw itself, or to a trusted proxy
    that says so in `X-Forwarded-Proto` (the console's cookies are `Secure` then)."""
    if _relayed(request):
        return request.headers.get(RELAYED_HTTPS) == "1"
    if request.secure:
        return True
    trusted = request.config_dict.get(TRUSTED_PROXIES, ())
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return bool(trusted) and _within(request.remote or "", trusted) and proto == "https"


def _relayed(request: web.Request) -> bool:
    """Whether the request came over the main process's private socket (from a worker)."""
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    return sock is not None and sock.family == socket.AF_UNIX
