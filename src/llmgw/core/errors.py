"""Every exception llmgw raises on purpose, split by what the caller should do.

`Retryable` errors may succeed if tried again later (an upstream down, a replica starting);
`Permanent` errors will not (bad input, unknown names, refused permissions). Each carries the
HTTP status and OpenAI error `type`/`code` the API answers with, so no layer above has to guess.
"""

from __future__ import annotations


class LlmgwError(Exception):
    """Base of llmgw's own errors. The message is safe to show a client."""

    status = 500
    type = "server_error"
    code: str | None = None
    # Seconds after which trying again may work, told to the client as `Retry-After`; None:
    # nothing is known.
    retry_after_s: int | None = None

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
    status = 400
    type = "invalid_request_error"


class Unauthenticated(Permanent):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class Forbidden(Permanent):
    status = 403
    type = "permission_error"
    code = "forbidden"


class NotFound(Permanent):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class Conflict(Permanent):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class PayloadTooLarge(Permanent):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class NoReadyReplica(Retryable):
    status = 503
    type = "server_error"
    code = "no_ready_replica"

    def __init__(self, message: str, *, code: str | None = None,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class RateLimited(Retryable):
    """A key is over one of its limits; `retry_after_s` says when to try again."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

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
    status = 502
    type = "server_error"
    code = "upstream_error"


class UpstreamUnreachable(UpstreamError):
    """No upstream of a model could be connected to: nothing was sent, so trying again (or
    elsewhere) cannot run the request twice."""


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
    status = 504
    type = "server_error"
    code = "upstream_timeout"


class StoreUnavailable(Retryable):
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
