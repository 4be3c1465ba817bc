"""OpenAI-shaped errors on the wire, and the middleware that makes every error one."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from llmgw.api import request_ids
from llmgw.core.errors import LlmgwError, RateLimited

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
}


def error_response(
    status: int, message: str, type_: str, param: str | None = None, code: str | None = None
) -> web.Response:
    """`{"error": {"message", "type", "param", "code"}}` with `status`."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def from_error(exc: LlmgwError) -> web.Response:
    resp = error_response(exc.status, exc.message, exc.type, exc.param, exc.code)
    if isinstance(exc, RateLimited):
        resp.headers["Retry-After"] = str(exc.retry_after_s)
    return resp


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The edge of every request: its id, and every failure as an OpenAI-shaped error (never a
    stack trace). One middleware rather than two: each layer costs on every request."""
    rid = request_ids.begin(request)
    return request_ids.finish(await _answer(request, handler), rid)


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except LlmgwError as exc:
        if exc.status >= 500:
            logger.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc.message)
        return from_error(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = {
            404: f"Unknown path {request.path}",
            405: f"Method {request.method} is not allowed on {request.path}",
            413: "Request body is too large",
        }.get(exc.status, exc.reason)
        return error_response(
            exc.status, message, _HTTP_TYPES.get(exc.status, "server_error"), code=None
        )
    except ConnectionError:
        raise  # the client went away; nobody to answer
    except web.RequestPayloadError:
        # The body's framing or encoding is broken (a bad chunk, gzip that is not): the
        # client's fault, and the parser's message may quote the body.
        return error_response(400, "Request body is malformed (transfer or content encoding)",
                              "invalid_request_error", code="invalid_request")
    except Exception:
        # A database that is down arrives above as StoreUnavailable: the store translates it.
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "Internal server error", "server_error")
