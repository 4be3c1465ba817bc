"""The data plane's one handler. Both HTTP edges, the hot edge's own connections
(`api.hot_edge`) and aiohttp's (`api.data_plane`), read a generation request's head into a
`Head` and write the `Reply` `answer` gives; what lies between (the caller's credentials, the
body's JSON, the gateway, every refusal in the caller's dialect) is here, once. The edges keep
only their transports: reading, bounds and deadlines, and writing."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from llmgw.api.body import parse_json
from llmgw.api.errors import error_body, internal_error
from llmgw.core import tracing
from llmgw.core.errors import LlmgwError
from llmgw.gateway.cache.keys import NONE_SAID, directives
from llmgw.gateway.call import Reply
from llmgw.gateway.service import Gateway
from llmgw.gateway.wire.dialect import Api

logger = logging.getLogger(__name__)

# The body as an edge hands it over: read already (the hot edge has it with the head), or to be
# read once the caller is known (aiohttp: a caller without a key costs no body read).
Body = bytes | Callable[[], Awaitable[bytes]]


# Not frozen: made on every request, and a frozen dataclass sets each field through
# `object.__setattr__`. Nothing changes one once made.
@dataclass(slots=True)
class Head:
    """One generation request as its edge read it before the body."""

    api: Api
    path: str
    authorization: str | None  # the `Authorization` header
    api_key: str | None  # Anthropic's `x-api-key` header
    anthropic: bool  # the caller speaks Anthropic's dialect (`errors.speaks_anthropic`)
    request_id: str
    started: float | None  # monotonic time it arrived
    cache_control: str | None = None  # the `Cache-Control` header
    llmgw_cache: str | None = None  # the `X-Llmgw-Cache` header
    session: str | None = None  # the `X-Llmgw-Session` header


def credentials(authorization: str | None, api_key: str | None) -> str | None:
    """The `Authorization` value to authenticate: the header, else Anthropic's `x-api-key` as
    a bearer token."""
    if authorization is None and api_key is not None:
        return "Bearer " + api_key
    return authorization


async def answer(gateway: Gateway, head: Head, body: Body) -> Reply:
    """The reply to one request: the gateway's, or its refusal in the caller's dialect (a
    missing key, a body that is no JSON object, a limit, a failing upstream, a fault of llmgw's
    own). Raises only when there is nobody to answer: the client left, or the task was
    cancelled."""
    try:
        key = gateway.authenticate(credentials(head.authorization, head.api_key))
        data = body if isinstance(body, bytes) else await body()
        said = NONE_SAID if head.cache_control is None and head.llmgw_cache is None else \
            directives(head.cache_control, head.llmgw_cache)
        return await gateway.forward(key, head.api, data, parse_json(data), head.request_id,
                                     head.started, said, head.session)
    except LlmgwError as exc:
        if exc.status >= 500:
            logger.warning("POST %s -> %d: %s", head.path, exc.status, exc.message)
        return refusal(exc, head)
    except ConnectionError:
        raise  # the client went away
    except Exception:
        logger.exception("unhandled error on POST %s", head.path)
        return refusal(internal_error(), head)


def refusal(error: LlmgwError, head: Head) -> Reply:
    """`error` as the reply to `head`'s caller, in its dialect, with its `Retry-After`; the
    request's span, when it is traced, ends failed with the error's code."""
    span = tracing.current()
    if span.recording:
        span.set("http.response.status_code", error.status)
        span.fail(tracing.error_type(error))
    retry = error.retry_after_s
    return Reply(error.status, error_body(error, head.anthropic),
                 headers=None if retry is None else {"Retry-After": str(retry)})
