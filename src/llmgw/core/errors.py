"""Every exception llmgw raises on purpose, split by what the caller should do.

`Retryable` errors may succeed if tried again later (an upstream down, a replica starting);
`Permanent` errors will not (bad input, unknown names, refused permissions). Each carries the
HTTP status and OpenAI error `type`/`code` the API answers with, so no layer above has to guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class LlmgwError(Exception):
    """Something failed in a way llmgw did not foresee; the server's log says what. The message
    is safe to show a client."""

    status = 500
    type = "server_error"
    code: str | None = None
    # Seconds after which trying again may work, told to the client as `Retry-After`; None:
    # nothing is known.
    retry_after_s: int | None = None
    # Other codes the places that raise this class give it (`code=`), and when: the error codes
    # reference lists them with the class's status, and its test finds every one the code sets.
    other_codes: ClassVar[Mapping[str, str]] = {}

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class Permanent(LlmgwError):
    """Trying again with the same input gives the same answer."""


class Retryable(LlmgwError):
    """The same request may work later."""


class InvalidRequest(Permanent):
    """The request is not valid: a field missing, of the wrong type or out of range, a value the
    model cannot take. The message says what is wrong and `param` names the field when there is
    one; most such errors carry no code."""

    status = 400
    type = "invalid_request_error"


class Unauthenticated(Permanent):
    """The API key is unknown, revoked, or minted beneath a revoked key, or the Authorization
    header is not `Bearer <key>`."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
    other_codes = {
        "missing_api_key": "The request has no API key: send it as `Authorization: Bearer <key>` "
                           "(or `x-api-key` on Anthropic's paths).",
        "expired_api_key": "The API key, or a key it was minted beneath, has expired.",
    }


class Forbidden(Permanent):
    """The key may not do this: an endpoint for another kind of key (an admin endpoint called
    with a user key, a model called with a node join token or a metrics key), minting keys beyond
    the key's own rights, or a join token reporting as a node it may not."""

    status = 403
    type = "permission_error"
    code = "forbidden"


class NotFound(Permanent):
    """The thing the request names (a key, a job, a team, a policy) does not exist."""

    status = 404
    type = "invalid_request_error"
    code = "not_found"
    other_codes = {"node_not_found": "The node the request names does not exist."}


class ModelNotFound(NotFound):
    """The model the request names is neither in the catalog nor a route, or the key may not
    use it (the same answer, so that a key cannot map the catalog); also a route or judge that
    does not exist."""

    code = "model_not_found"


class Conflict(Permanent):
    """The change clashes with what exists: a name taken (by a model, a route or a team), a team
    that still has keys, a change made meanwhile by someone else."""

    status = 409
    type = "invalid_request_error"
    code = "conflict"
    other_codes = {"node_in_use": "The node still runs replicas: drain it first, or remove it "
                                  "with force."}


class PayloadTooLarge(Permanent):
    """The request body is larger than `max_body_bytes` (counted as it is read)."""

    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class NoReadyReplica(Retryable):
    """The model has no ready replica and the request cannot wait for one: the model fits on no
    node, this server queues no requests (`queue_max` 0), a retry found no other replica, or
    none of a route's models is in the catalog. `Retry-After` is set when llmgw knows when one
    will be."""

    status = 503
    type = "server_error"
    code = "no_ready_replica"
    other_codes = {"route_cooling_down": "Every target of the route is skipped after repeated "
                                         "failures; `Retry-After` says when the first one's "
                                         "cooldown ends."}

    def __init__(self, message: str, *, code: str | None = None,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class RateLimited(Retryable):
    """A key is over one of its limits; `retry_after_s` says when to try again."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"
    other_codes = {
        "rate_limit_rpm": "The key (or its team, or the key it was minted beneath) is over its "
                          "requests per minute; `Retry-After` is the rest of the minute.",
        "rate_limit_tpm": "Over its tokens per minute; `Retry-After` is the rest of the minute.",
        "rate_limit_concurrent": "Its `concurrent` requests are in flight already.",
        "budget_exceeded": "Its token budget for the day or the month (UTC) is spent, or reserved "
                           "by requests in flight; `Retry-After` is the time to the next day or "
                           "month when spent, 1 s when only reserved.",
        "rate_limit_tool_calls": "MCP: the key (or its team, or the key it was minted beneath) is "
                                 "over its `tool_calls_per_minute`; `Retry-After` is the rest of "
                                 "the minute.",
        "rate_limit_tool_concurrent": "MCP: its `tool_concurrent` tool calls are in flight already.",
        "mcp_server_busy": "MCP: the upstream server has its `max_concurrency` calls in flight "
                           "already (from every key); `Retry-After` is 1 s.",
        "mint_rate_exceeded": "The key's family has minted the most keys it may in the last hour.",
        "signin_rate_exceeded": "The console: this address made `[sso] signin_per_minute` sign-in "
                                "attempts this minute; `Retry-After` is the rest of it.",
    }

    def __init__(self, message: str, retry_after_s: int, *, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class QueueFull(RateLimited):
    """Too many requests already wait for a model with no ready replica on this server."""

    code = "queue_full"


class QueueTimeout(NoReadyReplica):
    """A request waited its whole queue timeout and the model's replica never became ready."""

    code = "queue_timeout"


class LimitsUnavailable(Retryable):
    """The shared limit store (Redis) did not answer in time and `on_redis_error` is "closed":
    no request is admitted that its limits cannot be checked for."""

    status = 503
    type = "server_error"
    code = "limits_unavailable"
    retry_after_s = 1


class SharedStoreDown(Retryable):
    """The install's Redis did not answer within its deadline, or refused: what relies on it
    (limits, judge slots) falls back to this server's own counts, or refuses (`LimitsUnavailable`)."""

    status = 503
    type = "server_error"
    code = "shared_store_down"
    retry_after_s = 1


class EngineFailing(NoReadyReplica):
    """Every replica of the model has failed to start and none is ready: a request is refused
    at once, with the reason, rather than queued for a replica that keeps crashing."""

    code = "engine_failing"


class UpstreamError(Retryable):
    """The upstream failed: it answered 5xx, refused llmgw's own credentials (401, 403 or 407),
    answered something that is not what its API answers, or the connection broke."""

    status = 502
    type = "server_error"
    code = "upstream_error"


class UpstreamUnreachable(UpstreamError):
    """No upstream of a model could be connected to: nothing was sent, so trying again (or
    elsewhere) cannot run the request twice."""


class McpRefused(UpstreamError):
    """An upstream MCP server answered a request with a JSON-RPC error: its code is kept, its
    message (the upstream's words) never relayed."""

    def __init__(self, message: str, rpc_code: int = -32603) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code


class McpResultTooLarge(UpstreamError):
    """An upstream MCP server's answer is past the server's `max_result_bytes`."""


class UpstreamRateLimited(RateLimited):
    """An upstream answered 429; its Retry-After (bounded) is passed on."""

    code = "upstream_rate_limited"


class UpstreamRefused(Permanent):
    """An upstream refused the request as the client's fault (a 4xx in OpenAI's shape): its status,
    type, param and code are passed on, its message is not (it may quote the request back)."""

    code = "upstream_refused"

    def __init__(self, message: str, status: int, type_: str, *, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message, param=param, code=code)
        self.status = status
        self.type = type_


class UpstreamTimeout(Retryable):
    """The upstream did not answer within the request's timeout (`upstream_timeout_s` when the
    request sets none)."""

    status = 504
    type = "server_error"
    code = "upstream_timeout"


class StoreUnavailable(Retryable):
    """The database did not answer, or refused the connection, when the request had to read or
    write it."""

    status = 503
    type = "server_error"
    code = "store_unavailable"


class StoreRefused(Permanent):
    """The database refused a write for the data in it (a number out of range, say): writing the
    same again cannot succeed, unlike when the database is unavailable."""

    status = 500
    type = "server_error"
    code = "store_refused"


class EngineError(Retryable):
    """An engine process failed to start, answer health checks, or stay up."""

    status = 502
    type = "server_error"
    code = "engine_error"


class SignInRefused(Permanent):
    """A single sign-on attempt that does not hold: the identity provider's answer has a state
    this browser did not start, an ID token whose signature, issuer, audience, expiry or nonce
    is wrong, or the provider refused the code. Signing in again starts afresh."""

    status = 401
    type = "invalid_request_error"
    code = "sign_in_refused"


class IdentityProviderUnavailable(Retryable):
    """The identity provider did not answer the console (its discovery document, its keys or
    its token endpoint), or answered what is not OpenID Connect."""

    status = 502
    type = "server_error"
    code = "identity_provider_unavailable"


class FetchFailed(Retryable):
    """A model file could not be fetched this time (network, 5xx, a cut-off body)."""

    status = 502
    type = "server_error"
    code = "fetch_failed"


class FetchRefused(Permanent):
    """A model file cannot be fetched as asked: not found, not allowed, offline, bad name."""

    status = 400
    type = "invalid_request_error"
    code = "fetch_refused"


class ChecksumMismatch(Permanent):
    """A downloaded file is not the file the Hub published; it was discarded."""

    status = 502
    type = "server_error"
    code = "checksum_mismatch"


class InsufficientDisk(Permanent):
    """Not enough free disk for a download; the message names both sizes."""

    status = 507
    type = "server_error"
    code = "insufficient_storage"


class ModerationUnavailable(Permanent):
    """No guard policy names a judge for this key, so nothing can moderate."""

    status = 400
    type = "invalid_request_error"
    code = "moderation_unavailable"


class JudgeUnparseable(UpstreamError):
    """A judge answered something that is not a verdict in its format."""

    code = "judge_unparseable"


class JudgeShed(Retryable):
    """A judgment was not sent to its judge: it could not finish within its remaining budget
    (the judge's slots are busy and the queue ahead of it is too long). `come_back_s`: how long
    until one like it would likely be let in."""

    status = 503
    type = "server_error"
    code = "judge_shed"

    def __init__(self, message: str, *, come_back_s: float = 0.0) -> None:
        super().__init__(message)
        self.come_back_s = come_back_s


class GuardBlocked(Permanent):
    """A guard policy's judge found the input or output unsafe."""

    status = 400
    type = "invalid_request_error"
    code = "content_filter"


class GuardUnavailable(Retryable):
    """No judge answered within the policy's budget and the policy fails closed."""

    status = 503
    type = "server_error"
    code = "guard_unavailable"


class StaleEpoch(Permanent):
    """A leader-only write from a server that is no longer the leader; it was not made."""

    status = 409
    type = "server_error"
    code = "stale_epoch"


class ConfigError(Permanent):
    """The install's configuration or environment is wrong; the operator must fix it."""

    status = 500
    type = "server_error"
    code = "config_error"


class ServerUnreachable(Retryable):
    """A node agent reached none of its servers; it keeps its replicas running meanwhile."""

    status = 503
    type = "server_error"
    code = "server_unreachable"


class JoinRefused(Permanent):
    """A server refused a node agent (bad or revoked join token, or a malformed report)."""

    status = 401
    type = "authentication_error"
    code = "join_refused"


class NodeIdTaken(Conflict):
    """Another agent reports as this node id (two machines with one hostname, say)."""

    code = "node_id_taken"
