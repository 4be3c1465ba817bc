"""The error codes reference: every code a client may be answered with, from the error classes
(`llmgw.core.errors`: status, retryable or not, the docstring, the other codes their raisers
give them) and the edge's own codes (`llmgw.api.edge.EDGE_CODES`), each shown in both dialects
by the functions that write them."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from dataclasses import dataclass

from docsgen import md
from llmgw.api.edge import EDGE_CODES, error_body_bytes
from llmgw.core import errors
from llmgw.core.errors import LlmgwError, Permanent, Retryable
from llmgw.gateway.wire import anthropic_messages
from llmgw.gateway.wire.openai_errors import openai_error_body

_EXAMPLE = "…"


@dataclass(frozen=True)
class Code:
    """One error code (or none), and what a client sees with it."""

    code: str | None
    status: int | None  # None: the upstream's status, passed on
    type: str
    retryable: bool | None  # None: it depends
    when: str  # Markdown
    classes: tuple[str, ...]  # where it comes from (class names), for the reader of the code
    retry_after: str = ""
    openai: str = ""
    anthropic: str = ""

    @property
    def ident(self) -> str:
        """The id of the code's heading."""
        return md.anchor(self.code or "no-code-" + str(self.status))


def error_classes() -> list[type[LlmgwError]]:
    """Every error class of `llmgw.core.errors` a client may be answered with (the two
    categories, Permanent and Retryable, are not answered as such)."""
    return [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, LlmgwError)
            and c not in (Permanent, Retryable)]


def codes() -> list[Code]:
    """Every code, one entry per code (the classes that share one merged), the edge's last."""
    merged: dict[str | None, list[Code]] = {}
    for found in _from_classes():
        merged.setdefault(found.code if found.code is not None else f"null-{found.status}", []).append(found)
    out = [_merge(group) for group in merged.values()]
    out += [_edge(code) for code in EDGE_CODES]
    return out


def _from_classes() -> Iterator[Code]:
    for cls in error_classes():
        error = _example(cls)
        retry_after = _retry_after(cls)
        status = None if "status" in inspect.signature(cls.__init__).parameters else cls.status
        yield Code(cls.code, status, cls.type, _retryable(cls), md.prose(cls.__doc__), (cls.__name__,),
                   retry_after, _json(openai_error_body(error)),
                   _json(anthropic_messages.error_body(error)))
        for code, when in cls.__dict__.get("other_codes", {}).items():
            error.code = code
            yield Code(code, status, cls.type, _retryable(cls), md.prose(when), (cls.__name__,),
                       retry_after, _json(openai_error_body(error)),
                       _json(anthropic_messages.error_body(error)))


def _merge(group: list[Code]) -> Code:
    first = group[0]
    whens = "\n\n".join(f"{md.code(c.classes[0])}: {c.when}" for c in group) if len(group) > 1 \
        else first.when
    return Code(first.code, first.status, first.type, first.retryable, whens,
                tuple(n for c in group for n in c.classes), first.retry_after, first.openai,
                first.anthropic)


def _edge(code: str) -> Code:
    edge = EDGE_CODES[code]
    error = LlmgwError(_EXAMPLE, code=code)
    error.status, error.type = edge.status, edge.type
    return Code(code, edge.status, edge.type, edge.retryable, md.prose(edge.when), (),
                "", _json(error_body_bytes(_EXAMPLE, edge.type, code)), "")


def _example(cls: type[LlmgwError]) -> LlmgwError:
    """An instance of `cls` with a placeholder message, whatever its constructor takes."""
    params = inspect.signature(cls.__init__).parameters
    kwargs: dict[str, object] = {}
    if "retry_after_s" in params and params["retry_after_s"].default is inspect.Parameter.empty:
        kwargs["retry_after_s"] = 1
    if "status" in params:
        kwargs.update(status=400, type_="invalid_request_error")
    return cls(_EXAMPLE, **kwargs)  # type: ignore[arg-type]


def _retryable(cls: type[LlmgwError]) -> bool | None:
    return True if issubclass(cls, Retryable) else False if issubclass(cls, Permanent) else None


def _retry_after(cls: type[LlmgwError]) -> str:
    if cls.retry_after_s is not None:
        return f"{cls.retry_after_s} s"
    param = inspect.signature(cls.__init__).parameters.get("retry_after_s")
    if param is None:
        return ""
    return "always" if param.default is inspect.Parameter.empty else "when known"


def _json(body: bytes) -> str:
    return json.dumps(json.loads(body), indent=2, ensure_ascii=False)


def render() -> str:
    """The error codes page's body."""
    found = sorted(codes(), key=lambda c: (c.status or 0, c.code or ""))
    rows = [[f"[{_title(c)}](#{c.ident})", _status(c), _retry(c), md.first_sentence(c.when)]
            for c in found]
    out = [md.table(["Code", "HTTP status", "Retry?", "When"], rows)]
    out += [_entry(c) for c in found]
    return "\n\n".join(out) + "\n"


def _title(c: Code) -> str:
    return md.code(c.code) if c.code else f"no code ({c.status})"


def _status(c: Code) -> str:
    return str(c.status) if c.status is not None else "the upstream's 4xx"


def _retry(c: Code) -> str:
    return {True: "yes, later", False: "no", None: "maybe"}[c.retryable]


def _entry(c: Code) -> str:
    kind = md.code(c.type) if c.status is not None else "the upstream's"
    facts = [f"**HTTP status** {_status(c)}", f"**type** {kind}",
             f"**Retry** {_retry(c)}"]
    if c.retry_after:
        facts.append(f"**Retry-After** {c.retry_after}")
    parts = [md.heading(2, _title(c), c.ident), " · ".join(facts), c.when]
    if c.anthropic:
        parts.append('=== "OpenAI shape"\n\n' + _indented(c.openai)
                     + '\n\n=== "Anthropic shape"\n\n' + _indented(c.anthropic))
    else:
        parts.append("Always in OpenAI's shape:\n\n```json\n" + c.openai + "\n```")
    parts.append("Raised as " + ", ".join(md.code(n) for n in c.classes) + " (`llmgw.core.errors`)."
                 if c.classes else "Answered by the HTTP edge itself (`llmgw.api.edge`).")
    return "\n\n".join(parts)


def _indented(body: str) -> str:
    return "\n".join("    " + line for line in ["```json", *body.splitlines(), "```"])
