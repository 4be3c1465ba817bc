"""The guard stage of a tool call: the arguments judged before the upstream is called, the result
before the agent reads it, by the judges of the guard policies that name the tool.

A tool's result is where indirect prompt injection reaches an agent (a web page, a ticket or a
file that tells the model what to do), so a result judged unsafe never leaves: the agent gets a
tool error saying that llmgw withheld it, never the result itself. Arguments judged unsafe are
never sent: the upstream is not called. A judge that cannot answer within the policy's budget
withholds under `on_failure: closed` and lets through under `open`; either way the verdict log
says so (`model` is `mcp:SERVER/TOOL`). Input is always judged before the call, whatever the
policy's `input_mode`: a tool acts in the world, and an answer dropped afterwards would not undo
what it did.

What the stage learned goes in `call.notes["guard"]`: `blocked` (withheld, judged unsafe or
closed on a failure) or `unjudged` (let through by `on_failure: open`).
"""

from __future__ import annotations

import orjson

from llmgw.core.errors import GuardBlocked, GuardUnavailable
from llmgw.core.guard import Direction, Policy
from llmgw.core.mcp import tool_name
from llmgw.gateway.mcp.call import BLOCKED, GUARD_NOTE, ToolCall, ToolNext, ToolResult, ToolStage
from llmgw.guard.enforcement import Guard, RequestInfo
from llmgw.guard.prompts import tool_turns


def guard_stage(guard: Guard | None) -> ToolStage | None:
    """The guard stage for the tool chain (`compose_tools`), or None where there is no guard.

    Which policies cover a call is read from the guard's live view on each call, so a policy that
    names a tool applies from the next call on, without rebuilding the chain; a call that no
    policy covers goes on as it is."""
    if guard is None:
        return None

    async def guarded(call: ToolCall, nxt: ToolNext) -> ToolResult:
        server, tool, key = call.server.name, call.tool, call.key.name
        inputs = guard.tool_policies(server, tool, key, Direction.INPUT)
        outputs = guard.tool_policies(server, tool, key, Direction.OUTPUT)
        if not (inputs or outputs):
            return await nxt(call)
        judged = _Judged(guard, call, orjson.dumps(call.arguments).decode())
        if inputs and (refused := await judged.check(inputs, Direction.INPUT, None)) is not None:
            return refused
        result = await nxt(call)
        said = result.text()
        if not outputs or not said:  # judges read text: a result with none has nothing to judge
            return result
        refused = await judged.check(outputs, Direction.OUTPUT, said)
        return result if refused is None else refused

    return guarded


class _Judged:
    """One tool call under the guard: its judgments, and the tool error that withholds."""

    def __init__(self, guard: Guard, call: ToolCall, arguments: str) -> None:
        self._guard, self._call, self._arguments = guard, call, arguments
        self._info = RequestInfo(model=f"mcp:{call.target}", key_name=call.key.name,
                                 key_label=call.key.label, request_id=call.request_id)

    async def check(self, policies: list[Policy], direction: Direction,
                    result: str | None) -> ToolResult | None:
        """None when the policies let the arguments (input, `result` None) or `result` (output)
        through, else the tool error the agent gets instead: it says why, and never carries the
        result."""
        call = self._call
        turns = tool_turns(call.target, self._arguments, result)
        # The agent knows the tool by the name it called.
        name = tool_name(call.server.name, call.tool)
        what = f"this call to {name}" if direction == Direction.INPUT else f"the result of {name}"
        try:
            judged = await self._guard.check(policies, direction, turns, self._info, tool=True)
        except GuardBlocked as exc:
            call.notes[GUARD_NOTE] = BLOCKED
            return ToolResult.error(f"llmgw withheld {what}: {exc.message}")
        except GuardUnavailable as exc:
            call.notes[GUARD_NOTE] = BLOCKED
            return ToolResult.error(f"llmgw withheld {what}: the guard's judge did not "
                                    f"answer in time ({exc.message})")
        if not judged:
            call.notes[GUARD_NOTE] = "unjudged"
        return None
