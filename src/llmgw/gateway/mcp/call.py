"""One `tools/call` through llmgw, as a short chain of stages over the upstream MCP server.

The model path's shape (`gateway.chain`), for tools: a stage is `(call, next) -> result`; it does
its part (a reservation, a judgment), hands the call on with `next(call)` or answers it itself
(a refusal, a withheld result), and settles what it opened in a `finally` of its own. The last
link sends the call to the upstream server (`gateway.mcp.upstream`).

Stages, in order: limits (calls per minute and in flight, per key and team; the server's cap),
guard (the arguments judged before the call, the result after), then the upstream. Usage and
the call's span are settled around the whole chain by the endpoint.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llmgw.core.mcp import McpServer
from llmgw.core.types import ApiKey
from llmgw.gateway.chain import compose

# What the guard stage notes on the call (`ToolCall.notes[GUARD_NOTE]`): `blocked` when it
# withheld the call or its result, `unjudged` when it let one through unjudged.
GUARD_NOTE = "guard"
BLOCKED = "blocked"


@dataclass(slots=True)
class ToolCall:
    """A client's `tools/call`, once its key may make it and its server is known."""

    key: ApiKey
    server: McpServer
    tool: str  # the upstream's own name for it (without the `SERVER__` prefix)
    # The call's `arguments` as the client sent them (JSON object), passed on as they are.
    arguments: dict[str, Any]
    request_id: str = ""  # llmgw's id for the HTTP request, for logs and the verdict log
    # What stages learn on the way, for usage, metrics and the span (e.g. "blocked").
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """`SERVER/TOOL`: what grants and policies match."""
        return f"{self.server.name}/{self.tool}"


@dataclass(slots=True)
class ToolResult:
    """A `tools/call` result (MCP's `CallToolResult`), as JSON-ready data.

    `content` is MCP's content list (text, image, resource ... blocks), passed on as the upstream
    gave it unless a stage withholds it; `is_error` is the result's `isError`."""

    content: list[dict[str, Any]]
    is_error: bool = False
    structured: dict[str, Any] | None = None  # `structuredContent`
    size: int = 0  # the upstream's result in bytes, as it came

    def text(self) -> str:
        """The result's text blocks (and embedded text resources), for a judge to read."""
        parts: list[str] = []
        for block in self.content:
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif block.get("type") == "resource":
                res = block.get("resource")
                if isinstance(res, dict) and isinstance(res.get("text"), str):
                    parts.append(res["text"])
        return "\n".join(parts)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"content": self.content, "isError": self.is_error}
        if self.structured is not None:
            out["structuredContent"] = self.structured
        return out

    @classmethod
    def error(cls, message: str) -> ToolResult:
        """A tool error the agent reads (MCP reports a tool's failure in the result, not as a
        protocol error, so the model can see it)."""
        return cls(content=[{"type": "text", "text": message}], is_error=True)


# The rest of the chain, from one stage's point of view.
ToolNext = Callable[[ToolCall], Awaitable[ToolResult]]
ToolStage = Callable[[ToolCall, ToolNext], Awaitable[ToolResult]]


def compose_tools(stages: list[ToolStage], last: ToolNext) -> ToolNext:
    """`stages` in order, then `last`, as one function of the call (`chain.compose`)."""
    return compose(stages, last)
