"""The stages of a `tools/call` (`gateway.mcp.call`), one module each: `limits` (admission),
then `guard` (judging the arguments and the result)."""
