"""The tracing seam: spans as the request path and the control plane make them, with no
OpenTelemetry import here.

`server/telemetry.py` backs it with the OpenTelemetry SDK when `[telemetry] otlp_endpoint` is set;
otherwise every span is `NOOP`, whose methods do nothing, and nothing else is created. The span a
piece of work runs under is found through a context variable (`current`), so a child span needs
no tracer passed down: the request's span is made current once at the edge, and every task the
request starts (judgments run in tasks) inherits it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from enum import Enum
from typing import Protocol

from llmgw.core.errors import LlmgwError

Value = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, Value]


class Kind(Enum):
    """What a span stands for, as OpenTelemetry's span kinds say it."""

    INTERNAL = "internal"
    SERVER = "server"  # a request llmgw answers
    CLIENT = "client"  # a request llmgw makes (an upstream, a judge)


class Span(Protocol):
    """One timed piece of work. `recording` is False for the no-op span: callers that would
    compute an attribute's value look at it first."""

    @property
    def recording(self) -> bool: ...

    def set(self, key: str, value: Value) -> None:
        """Set one attribute."""

    def update(self, attributes: Attributes) -> None:
        """Set several attributes."""

    def rename(self, name: str) -> None:
        """Name the span once what it is about is known (the model, after the body is read)."""

    def event(self, name: str, attributes: Attributes | None = None, at_ns: int | None = None) -> None:
        """Record a point in time (`at_ns`: wall-clock nanoseconds, now when None)."""

    def fail(self, error_type: str, message: str = "") -> None:
        """Mark the span as failed; `message` must hold no secret or request text."""

    def child(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None) -> Span:
        """A new span under this one (started now; the caller ends it)."""

    def inject(self, headers: dict[str, str]) -> None:
        """Add this span's W3C `traceparent` (and `tracestate`) to outgoing headers."""

    def end(self) -> None:
        """End the span (a second call does nothing)."""


class Tracer(Protocol):
    """Makes root spans: a request's (continuing its caller's trace) or a control-plane pass's."""

    @property
    def enabled(self) -> bool: ...

    def root(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None,
             carrier: Mapping[str, str] | None = None) -> Span:
        """A span with no parent in this process; with `carrier` (incoming headers), its parent
        is the caller's span named by a W3C `traceparent` there."""

    def close(self) -> None:
        """Export what is buffered and stop."""


class NoopSpan:
    """The span of an install without telemetry: every method returns at once."""

    __slots__ = ()
    recording = False

    def set(self, key: str, value: Value) -> None:
        pass

    def update(self, attributes: Attributes) -> None:
        pass

    def rename(self, name: str) -> None:
        pass

    def event(self, name: str, attributes: Attributes | None = None, at_ns: int | None = None) -> None:
        pass

    def fail(self, error_type: str, message: str = "") -> None:
        pass

    def child(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None) -> Span:
        return self

    def inject(self, headers: dict[str, str]) -> None:
        pass

    def end(self) -> None:
        pass


class _NoopTracer:
    __slots__ = ()
    enabled = False

    def root(self, name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None,
             carrier: Mapping[str, str] | None = None) -> Span:
        return NOOP

    def close(self) -> None:
        pass


NOOP: Span = NoopSpan()
NOOP_TRACER: Tracer = _NoopTracer()

_CURRENT: ContextVar[Span] = ContextVar("llmgw_span", default=NOOP)


def current() -> Span:
    """The span the running work is under (`NOOP` when telemetry is off or none is current)."""
    return _CURRENT.get()


def child(name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None) -> Span:
    """A new span under the current one; the caller ends it."""
    return _CURRENT.get().child(name, kind, attributes)


@contextlib.contextmanager
def active(span: Span) -> Iterator[Span]:
    """Make `span` current for the block; it ends when the block does, failed by an exception
    that escapes it (a cancellation too: the work did not finish)."""
    token = _CURRENT.set(span)
    try:
        yield span
    except BaseException as exc:
        span.fail(error_type(exc))
        raise
    finally:
        _CURRENT.reset(token)
        span.end()


@contextlib.contextmanager
def spanned(name: str, kind: Kind = Kind.INTERNAL, attributes: Attributes | None = None) -> Iterator[Span]:
    """A child of the current span, current for the block and ended with it. Off the hot path:
    when telemetry is off it costs a context manager and nothing more."""
    with active(child(name, kind, attributes)) as span:
        yield span


def error_type(exc: BaseException) -> str:
    """What `error.type` says about an exception: llmgw's error code, else its class name."""
    if isinstance(exc, LlmgwError) and exc.code:
        return exc.code
    return type(exc).__name__
