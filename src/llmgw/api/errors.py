"""Errors on the wire in the caller's dialect, and the middleware that makes every failure one."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from llmgw.api import request_ids
from llmgw.core.errors import LlmgwError
from llmgw.gateway.wire import anthropic_messages
from llmgw.gateway.wire.openai_errors import openai_error_body

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


def speaks_anthropic(path: str, has_version_header: bool) -> bool:
    """Whether the caller speaks Anthropic's dialect: its path, or its version header on `/v1`."""
    return path.startswith("/v1/messages") or (has_version_header and path.startswith("/v1/"))


def error_body(error: LlmgwError, anthropic: bool) -> bytes:
    """`error` in a dialect: Anthropic's `{"type": "error", "error": {...}}`, or OpenAI's
    `{"error": {"message", "type", "param", "code"}}`."""
    return anthropic_messages.error_body(error) if anthropic else openai_error_body(error)


def error_response(request: web.Request, error: LlmgwError) -> web.Response:
    """`error` in the caller's dialect (Anthropic's on its paths, OpenAI's everywhere else)."""
    anthropic = speaks_anthropic(request.path, "anthropic-version" in request.headers)
    resp = web.Response(body=error_body(error, anthropic), status=error.status,
                        content_type="application/json")
    if error.retry_after_s is not None:
        resp.headers["Retry-After"] = str(error.retry_after_s)
    return resp


def _plain(status: int, message: str, type_: str, code: str | None = None) -> LlmgwError:
    """An error the HTTP layer itself found (unknown path, bad framing), as llmgw's own."""
    error = LlmgwError(message, code=code)
    error.status, error.type = status, type_
    return error


def unknown_path(path: str, hint: str = "") -> LlmgwError:
    """A 404 for a path nothing serves, with `hint` (where to go instead) when there is one."""
    return _plain(404, f"Unknown path {path}" + (f": {hint}" if hint else ""), "invalid_request_error")


def internal_error() -> LlmgwError:
    """What a client is told of a fault of llmgw's own: a 500 that says nothing of it (the log
    has the traceback)."""
    return _plain(500, "Internal server error", "server_error", "internal_error")


def malformed_body() -> LlmgwError:
    """A body whose framing or encoding is broken (a bad chunk, gzip that is not): the client's
    fault, told without the parser's message, which may quote the body."""
    return _plain(400, "Request body is malformed (transfer or content encoding)",
                  "invalid_request_error", "invalid_request")


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
        return error_response(request, exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            return error_response(request, unknown_path(request.path))
        message = {
            405: f"Method {request.method} is not allowed on {request.path}",
            413: "Request body is too large",
        }.get(exc.status, exc.reason)
        type_ = _HTTP_TYPES.get(exc.status, "server_error")
        return error_response(request, _plain(exc.status, message, type_))
    except ConnectionError:
        raise  # the client went away; nobody to answer
    except web.RequestPayloadError:
        return error_response(request, malformed_body())
    except Exception:
        # A database that is down arrives above as StoreUnavailable: the store translates it.
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(request, internal_error())
