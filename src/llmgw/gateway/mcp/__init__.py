"""MCP (agents' tools) as a sibling of the model path: one `/mcp` endpoint over the upstream MCP
servers in the catalog, behind llmgw's keys, grants, limits and guard."""
