"""The one way out to upstreams: connect, read a whole answer or its chunks, and map every client
error (the HTTP client's, timeouts, refused connections, upstream error answers) to llmgw's errors once.

Bytes pass through: the body goes out as given and a stream's chunks come back unparsed.
Upstreams are asked not to compress (`Accept-Encoding: identity`); one that compresses anyway is
decoded (gzip, deflate) before its answer reaches anyone, and any other encoding is a 502. An
upstream's error answer never reaches the client as it came (see `upstream_errors`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping

from llmgw.core import tracing
from llmgw.core.errors import LlmgwError, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from llmgw.core.tracing import Kind, Span
from llmgw.gateway.h1 import Pool, target
from llmgw.gateway.h1_connection import ConnectError, H1Error, Response, Target
from llmgw.gateway.upstream.table import Upstream
from llmgw.gateway.upstream_errors import MAX_ERROR_BODY, upstream_failure

logger = logging.getLogger(__name__)

# What the client (`h1`) decodes; anything else is refused with a 502 rather
# than relayed as bytes the client cannot read and the usage tap cannot count.
DECODED = frozenset({"identity", "gzip", "deflate"})
# A whole answer is held in memory to be relayed: far above any honest answer (a batch of
# embeddings included), low enough that a small compressed body cannot inflate without bound.
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class Connection:
    """An upstream's answer whose headers arrived; the upstream counts as busy until `release`."""

    def __init__(self, up: Upstream, resp: Response, span: Span = tracing.NOOP) -> None:
        self.up = up
        self._resp = resp
        self._released = False
        self._span = span  # the attempt's: it lasts until the answer is given back
        self._broke = False  # its stream broke before its end (see `chunks`)

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    @property
    def name(self) -> str:
        return shown(self.up)

    def streams(self) -> bool:
        """Whether the answer says it is an event stream (its `Content-Type`)."""
        return "text/event-stream" in (self._resp.content_type or "").lower()

    def broke(self) -> bool:
        """Whether the answer's stream broke before its end: whatever came before it, the
        answer is a failed one."""
        return self._broke

    def finished(self) -> bool:
        """Whether the whole answer has arrived (what is left to read is in memory)."""
        return self._resp.complete

    def release(self) -> None:
        """Give the upstream back; an unread body closes the connection rather than pooling it,
        which also stops an engine generating what nobody will read."""
        if not self._released:
            self._released = True
            self._resp.release()
            self.up.outstanding -= 1
            # Idle counts from when the last answer ended, not when it began.
            self.up.last_used = time.time()
            self._span.end()

    def drop(self) -> None:
        """Close the connection now: its answer is no longer wanted."""
        self._resp.close()
        self.release()

    async def whole(self) -> bytes:
        """The whole answer, decoded; UpstreamError beyond MAX_ANSWER_BYTES."""
        ready = self._resp.ready_body()
        if ready is not None:  # all of it is here (most answers, by the time they are read)
            if len(ready) > MAX_ANSWER_BYTES:
                raise self._too_large()
            return ready
        blocks, size, read = [], 0, self._resp.readany
        try:  # not `mapped()`: a context manager costs every whole answer
            while block := await read():
                size += len(block)
                if size > MAX_ANSWER_BYTES:
                    raise self._too_large()
                blocks.append(block)
        except (TimeoutError, H1Error) as exc:
            raise translated(self.name, exc) from exc
        return blocks[0] if len(blocks) == 1 else b"".join(blocks)

    def _too_large(self) -> UpstreamError:
        return UpstreamError(f"upstream {self.name} answered more than "
                             f"{MAX_ANSWER_BYTES // 2**20} MiB")

    def rest(self) -> bytes | None:
        """What is left of a finished answer as one chunk, without waiting; None when it must be
        read with `chunks`."""
        return self._resp.ready_body()

    async def failure(self) -> LlmgwError:
        """The client's error for this non-2xx answer (its body read up to MAX_ERROR_BODY)."""
        return upstream_failure(self.name, self.status, self._resp.headers, await self.error_body())

    async def error_body(self) -> bytes:
        """A non-2xx answer's body, up to MAX_ERROR_BODY: for llmgw to read, never to relay."""
        data = bytearray()
        with mapped(self.name):
            while len(data) < MAX_ERROR_BODY:
                part = await self._resp.read(MAX_ERROR_BODY - len(data))
                if not part:
                    break
                data += part
        return bytes(data)

    async def chunks(self, on_chunk: Callable[[bytes], None], broke: bytes) -> AsyncGenerator[bytes, None]:
        """The answer's chunks as they arrive, each seen by `on_chunk` first; when the upstream
        breaks (logged) the stream ends with `broke`, the client dialect's error event. One
        generator, not two: this runs for every chunk relayed."""
        read = self._resp.readany
        while True:
            # Not `mapped()`: a context manager per chunk costs the relay.
            try:
                chunk = await read()
            except (TimeoutError, H1Error) as exc:
                logger.warning("upstream %s stream broke: %s", self.name, type(exc).__name__)
                self._broke = True
                yield broke
                return
            if not chunk:
                return
            on_chunk(chunk)
            yield chunk


def attempt(span: Span, up: Upstream, path: str, retry: int) -> None:
    """What an upstream attempt's span says: where it went and whether it is a retry."""
    span.rename(f"POST {shown(up)}")
    try:
        t = target(up.base_url)
    except ConnectError:  # a URL no connection is made to: the attempt fails next, and says so
        t = Target(False, "", 0, "", "")
    span.update({"server.address": t.host, "server.port": t.port, "url.path": t.prefix + path,
                 "llmgw.upstream": shown(up), "llmgw.retry": retry})


def shown(up: Upstream) -> str:
    """An upstream's name as errors show it (a provider's model name, not its URL)."""
    return up.id.removeprefix("remote:")


def translated(name: str, exc: TimeoutError | H1Error) -> LlmgwError:
    """llmgw's error for the HTTP client's or asyncio's `exc` while talking to upstream `name`."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"upstream {name} did not answer in time")
    return UpstreamError(f"upstream {name} failed: {type(exc).__name__}")


@contextlib.contextmanager
def mapped(name: str) -> Iterator[None]:
    """Translates the HTTP client's and asyncio's errors while talking to upstream `name`."""
    try:
        yield
    except (TimeoutError, H1Error) as exc:
        raise translated(name, exc) from exc


class Transport:
    """One pooled HTTP client for all upstreams (`h1.Pool`: keep-alive connections per host).

    It only sends: which upstream an attempt goes to, and what follows a refused connection,
    are the way out's (`reach`)."""

    def __init__(self, timeout_s: float, connect_timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._pool: Pool | None = None

    async def start(self) -> None:
        self._pool = Pool(self._connect_timeout_s, keepalive_s=30.0)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    async def send(self, up: Upstream, path: str, body: bytes, retry: int = 0,
                   method: str = "POST") -> Connection:
        """POST `body` to `path` of `up` and wait for the answer's headers (`retry`: how many
        upstreams this request tried before, for its span). UpstreamUnreachable when no
        connection could be made: nothing was sent, so another upstream may be tried. The
        upstream counts as busy from here until the connection is released."""
        assert self._pool is not None, "Transport.start() was not called"
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity", **up.headers}
        span = tracing.child("upstream", Kind.CLIENT)
        if span.recording:
            attempt(span, up, path, retry)
        span.inject(headers)
        up.outstanding += 1
        up.last_used = time.time()
        try:
            # A redirect is an upstream fault (502), never followed: it would carry the
            # request, and the upstream's credentials, somewhere the catalog did not name.
            resp = await self._pool.post(up.base_url, path, body, headers, self.timeout_s, method)
        except ConnectError as exc:
            up.outstanding -= 1
            span.fail("connect_error")
            span.end()
            raise UpstreamUnreachable(f"upstream {shown(up)} could not be reached") from exc
        except BaseException as exc:  # failed or cancelled while sending
            up.outstanding -= 1
            span.fail(tracing.error_type(exc))
            span.end()
            with mapped(shown(up)):
                raise exc
        if span.recording:
            span.set("http.response.status_code", resp.status)
            if resp.status >= 400:
                span.fail(str(resp.status))
        conn = Connection(up, resp, span)
        if (resp.content_encoding or "identity") not in DECODED:
            conn.release()
            raise UpstreamError(f"upstream {conn.name} answered in a content encoding "
                                "llmgw does not decode")
        return conn
