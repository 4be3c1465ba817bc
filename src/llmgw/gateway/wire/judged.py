"""How what is not plain text reads to a judge, the same in every dialect."""

from __future__ import annotations


def tool_text(name: str, arguments: str) -> str:
    """A tool call as a judge reads it: the tool's name and the arguments the model gave it."""
    return f"tool {name}: {arguments}"
